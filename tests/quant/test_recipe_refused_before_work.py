"""What a recipe asks of the model, the engine and llmcompressor, refused before any work: an `ignore` or
`targets` entry that matches no Linear (closest names suggested), an invalid regular expression, an engine
argument value the engine's own parser refuses, a sensitivity rule the model cannot meet, a verbatim
llmcompressor recipe naming a modifier or an argument llmcompressor does not have. Each is one line, exit 2,
no traceback, nothing written beside the recipe; all of them at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.recipe import Sensitivity, Variant
from quantize.modules import entry_problem, meta_model, model_modules
from quantize.sensitivity import mean_bits, rule_problems, stored_bits, units_of, weight_args, within_budget
from quantize.verbatim import modifier_index, recipe_problems
from tests.helpers import DEMO_MODEL, REPO, TEST_RECIPES

VERBATIM = "quant_stage:\n  quant_modifiers:\n    {modifier}: {{targets: [Linear], scheme: W8A8{extra}}}\n"

# (the variant replacing killed.yaml's quantized one, or engine args; the field at fault; its message)
KINDS = {
    "ignore-typo": ({"variant": {"scheme": "W8A8", "ignore": ["lm_haed"]}}, "variants.1.ignore.0",
                    "ignore entry 'lm_haed' matches no module of the model; did you mean lm_head?"),
    "invalid-regex": ({"variant": {"scheme": "W8A8", "ignore": ["lm_head", "re:.*mlp\\.[z-a]_proj"]}},
                      "variants.1.ignore.1", "ignore entry 're:.*mlp\\.[z-a]_proj' is not a valid regular "
                                             "expression: bad character range z-a at position 8"),
    "targets-typo": ({"variant": {"groups": [{"targets": ["re:.*self_atn\\..*"], "scheme": "W8A8"}]}},
                     "variants.1.groups.0.targets.0", "targets entry 're:.*self_atn\\..*' matches no module of "
                                                      "the model; the model's Linears: lm_head; in each of 4 layers"),
    "engine-value": ({"engine_args": {"max_model_len": "long"}}, "engine.args.max_model_len",
                     "refuses 'long': argument --max-model-len: invalid human_readable_int_or_auto value: 'long'"),
    "engine-choice": ({"engine_args": {"kv_cache_dtype": "fp99"}}, "engine.args.kv_cache_dtype",
                      "'fp99' is not one of --kv-cache-dtype's choices: auto, bfloat16"),
    "keep-top": ({"variant": {"scheme": "W8A8", "sensitivity": {"keep_top": 40}}}, "variants.1.sensitivity",
                 "keep_top 40 keeps every unit: the variant ranks 16 units (by module), so keep_top must be 1 to 15"),
    "max-bits": ({"variant": {"scheme": "W4A16", "sensitivity": {"max_bits_per_weight": 3}}},
                 "variants.1.sensitivity", "max_bits_per_weight 3 is outside what the scheme reaches on this model: "
                                           "from 4.125 bits per weight (all 16 units by module quantized) up to, "
                                           "not including, 16 (every unit kept)"),
    "unknown-modifier": ({"variant": {"recipe": VERBATIM.format(modifier="QuantizationModifer", extra="")}},
                         "variants.1.recipe", "llmcompressor recipe: quant_stage.quant_modifiers.QuantizationModifer: "
                                              "llmcompressor has no modifier 'QuantizationModifer'; did you mean "
                                              "QuantizationModifier"),
    "unknown-argument": ({"variant": {"recipe": VERBATIM.format(modifier="GPTQModifier",
                                                                extra=", dampening_fraction: 0.1")}},
                         "variants.1.recipe", "GPTQModifier takes no argument 'dampening_fraction'; did you mean "
                                              "dampening_frac?"),
}


def bad_recipe(tmp_path: Path, *kinds: str) -> Path:
    """tests/data/recipes/killed.yaml (the demo model, engine args, bf16 + one quantized variant) with each
    kind's fault; several kinds: one variant each."""
    recipe = yaml.safe_load((TEST_RECIPES / "killed.yaml").read_text())
    baseline = recipe["variants"][0]
    recipe["variants"] = [baseline]
    for kind in kinds:
        change = KINDS[kind][0]
        recipe["engine"]["args"].update(change.get("engine_args", {}))
        if "variant" in change:
            recipe["variants"].append({"name": kind, **change["variant"]})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def quant(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """`quant ARGV` in a fresh interpreter, run in tmp_path (times: benchmarks/validate_time.py)."""
    return subprocess.run([sys.executable, "-m", "quant.cli", *argv], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module", autouse=True)
def engine_parser_described():
    """The engine's parser described, as `make setup` leaves it: the first validation would otherwise say it
    describes it (a line beside the one the tests count)."""
    from perf.engines.flags import engine_flags_known
    from perf.engines.vllm import engine_facts, resolve_engine_python

    python = resolve_engine_python(None)
    engine_flags_known(python, engine_facts(python))


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_one_line_exit_2_and_nothing_written(tmp_path, kind):
    path = bad_recipe(tmp_path, kind)
    proc = quant(tmp_path, "validate", str(path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    field, message = KINDS[kind][1:]
    assert line.startswith(f"validate error: {path}:") and f": {field}: " in line and message in line, line
    assert list(tmp_path.iterdir()) == [path]


def test_a_sweep_reports_every_kind_at_once_before_any_work(tmp_path):
    path = bad_recipe(tmp_path, *KINDS)
    proc = quant(tmp_path, "sweep", str(path), "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "c"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    header, *lines = proc.stderr.splitlines()
    assert header == f"sweep error: {path}: {len(KINDS)} problems"
    variants = [kind for kind in KINDS if "variant" in KINDS[kind][0]]
    for kind, (_, field, message) in KINDS.items():
        if field.startswith("variants.1."):   # the kind's variant, here one of several
            field = field.replace("variants.1.", f"variants.{variants.index(kind) + 1}.")
        assert [line for line in lines if f": {field}: " in line and message in line], (kind, lines)
    assert list(tmp_path.iterdir()) == [path]


def test_entries_match_as_compressed_tensors_matches_them():
    """Names, regexes and class names pick the Linears compressed-tensors' own matcher picks."""
    import torch
    from compressed_tensors.utils import match_named_modules

    modules, model = model_modules(DEMO_MODEL), meta_model(str(DEMO_MODEL))
    for entry in ["lm_head", "Linear", "re:.*mlp\\..*", "re:.*layers\\.[01]\\.self_attn\\.q_proj$",
                  "model.layers.3.mlp.down_proj", "q_proj", "LlamaMLP", "re:model\\.layers\\.0$"]:
        theirs = [n for n, m in match_named_modules(model, [entry]) if isinstance(m, torch.nn.Linear)]
        assert modules.linears_matching(entry) == theirs, entry


@pytest.mark.parametrize("entry, message", [
    ("lm_head", None), ("Linear", None), ("re:.*down_proj$", None),
    ("q_proj", "ignore entry 'q_proj' matches no module of the model; a name is a module's full name: did you mean "
               "'re:.*\\.q_proj$' (4 Linears)?"),
    ("model.layers.0.self_attn.q_prj", "did you mean model.layers.0.self_attn.q_proj"),
    ("model.layers.0", "ignore entry 'model.layers.0' matches no Linear, only model.layers.0: entries apply to each "
                       "Linear by its own name or class"),
    ("re:(", "ignore entry 're:(' is not a valid regular expression: missing ), unterminated subpattern"),
])
def test_entry_problems(entry, message):
    found = entry_problem(model_modules(DEMO_MODEL), entry, "ignore")
    assert found == message if message is None else message in found, found


def test_a_default_ignore_that_matches_nothing_says_it_is_the_default():
    from quantize.modules import Modules
    from quantize.validate import _entry_problems

    modules = Modules(("", "out"), {"": ("M", "Module"), "out": ("Linear", "Module")}, {"out": (4, 4)})
    ((loc, message),) = _entry_problems(Variant(name="a", scheme="W8A8"), modules)
    assert loc == ("ignore", 0) and message.endswith("(ignore is lm_head unless the variant sets it)")
    assert _entry_problems(Variant(name="a", scheme="W8A8", ignore=["out"]), modules) == []


def test_sensitivity_range_is_what_the_ranking_would_compute():
    """The lowest reachable bits per weight is the number the budget rule computes from a ranking of the same
    units, with compressed-tensors' own weight args; keep_top counts the units the analysis would rank."""
    model, modules = meta_model(str(DEMO_MODEL)), model_modules(DEMO_MODEL)
    for variant in [Variant(name="a", scheme="W4A16"), Variant(name="a", weights={"num_bits": 3, "symmetric": False,
                                                                                   "group_size": 64}),
                    Variant(name="a", scheme="W8A8", ignore=["lm_head", "re:.*down_proj$"])]:
        for by in ("module", "layer"):
            units = units_of(model, by, variant.ignore)
            args = weight_args(variant)
            ranking = {"units": [{"params": sum(modules.linears[n][0] * modules.linears[n][1] for n in names),
                                  "bits": sum(stored_bits(args, modules.linears[n]) for n in names)}
                                 for names in units.values()]}
            facts = {k: getattr(args, k) for k in ("num_bits", "symmetric", "strategy", "group_size")}
            lowest = mean_bits(ranking, [])
            with pytest.raises(ValueError, match=f"below {lowest:.3f}"):
                within_budget(ranking, lowest - 0.01)
            (message,) = rule_problems(Sensitivity(max_bits_per_weight=lowest - 0.01, by=by), modules.linears,
                                       variant.ignore, facts)
            assert f"from {lowest:.3f} bits per weight (all {len(units)} units by {by} quantized)" in message
            assert rule_problems(Sensitivity(max_bits_per_weight=lowest + 0.01, by=by), modules.linears,
                                 variant.ignore, facts) == []
            assert rule_problems(Sensitivity(keep_top=len(units) - 1, by=by), modules.linears, variant.ignore,
                                 facts) == []
            assert rule_problems(Sensitivity(keep_top=len(units), by=by), modules.linears, variant.ignore, facts)


@pytest.mark.parametrize("text, problems", [
    ("s_stage:\n  q_modifiers:\n    QuantizationModifier: {targets: [Linear], scheme: W8A8, ignore: [lm_head]}\n", []),
    ("s_stage:\n  q_modifiers:\n    AWQModifier: {}\n    QuantizationModifier: {targets: [Linear], scheme: W4A16}\n",
     []),
    ("s_stage:\n  q_modifiers:\n    AWQModifier: {}\n",
     ["AWQModifier needs a quantizing modifier after it (e.g. QuantizationModifier, GPTQModifier): AWQ only "
      "rescales"]),
    ("stage:\n  q_modifiers:\n    QuantizationModifier: {scheme: W8A8}\n",
     ["names no modifier: llmcompressor reads them from `<name>_stage: {<name>_modifiers: {ModifierName: "
      "{argument: value}}}` and would change nothing"]),
    ("s_stage:\n  q_modifiers:\n    SmoothQuantModifier: {smoothing_strenght: 0.8}\n"
     "    GPTQModifier: {scheme: W8A8, targets: Linear}\n",
     ["s_stage.q_modifiers.SmoothQuantModifier: SmoothQuantModifier takes no argument 'smoothing_strenght'; "
      "did you mean smoothing_strength?"]),
    ("[1, 2]", ["not a mapping of stages (`<name>_stage: {<name>_modifiers: {Modifier: {...}}}`)"]),
])
def test_verbatim_recipe_problems(text, problems):
    assert recipe_problems(text, modifier_index()) == problems


def test_keep_top_counts_the_units_left_after_unfit_groups_keep(tmp_path):
    """On hidden 576, group 128 fits only down_proj (in_features 1536): with `unfit_groups: keep` the rest stay
    16-bit and are not ranked, as the sensitivity stage ranks them (after the policy)."""
    from transformers import LlamaConfig

    from quantize.shapes import with_policy

    LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=9,
                num_key_value_heads=3, vocab_size=1024, tie_word_embeddings=True).save_pretrained(tmp_path)
    variant = Variant(name="a", scheme="W4A16", unfit_groups="keep", sensitivity={"keep_top": 2})
    model, modules = meta_model(str(tmp_path)), model_modules(tmp_path)
    planned, _ = with_policy(model, variant)
    ranked = len(units_of(model, "module", planned.ignore))
    facts = {"num_bits": 4, "symmetric": True, "strategy": "group", "group_size": 128}
    (message,) = rule_problems(variant.sensitivity, modules.linears, variant.ignore, facts, keep_unfit=True)
    assert ranked == 2 and f"the variant ranks {ranked} units (by module)" in message
    assert rule_problems(Sensitivity(keep_top=1), modules.linears, variant.ignore, facts, keep_unfit=True) == []


def test_engine_values_are_parsed_in_process_as_the_engine_parses_them(tmp_path, monkeypatch):
    """The engine's parser is described in one start of its python, which parses the recipe's values too; then
    each value of a described flag is answered in this process (by a python that could not answer) exactly as
    the engine answered it: a bad value refused, a good one taken, word for word. A flag whose type only the
    engine knows goes to the engine's own parser, its verdict cached."""
    from perf.engines.flags import FlagsUnknown, engine_flags_known, refused_values
    from perf.engines.vllm import engine_facts, resolve_engine_python

    monkeypatch.setenv("QUANT_ENGINE_FLAGS_DIR", str(tmp_path))
    python = resolve_engine_python(None)
    facts = engine_facts(python)
    refused = {"max_model_len": ["long", "2.5K", "1.5"], "max_num_seqs": ["8.5", "eight"],
               "gpu_memory_utilization": ["most"], "kv_cache_dtype": ["fp99"], "hf_overrides": ["{bad}"]}
    taken = {"max_model_len": ["1k", "2K", "auto", 512], "max_num_seqs": [8], "gpu_memory_utilization": [0.5],
             "kv_cache_dtype": ["fp8"], "hf_overrides": [{"a": 1}, "plain"], "enable_prefix_caching": [False]}
    cases = [{key: value} for values in (refused, taken) for key, some in values.items() for value in some]
    only_the_engine = [{"compilation_config": '{"bogus_xyz": 1}'}, {"compilation_config": '{"mode": 0}'}]
    flags = engine_flags_known(python, facts, None, cases + only_the_engine)
    values = tmp_path / f"{facts['distribution']}-{facts['version']}.values.json"
    engine_said = refused_values("/bin/false", facts, None, cases + only_the_engine, flags)   # from that run
    kept = values.read_text()
    values.unlink()
    in_process = refused_values("/bin/false", facts, None, cases, flags)
    assert in_process == engine_said[:len(cases)]
    assert [bool(verdict) for verdict in in_process] == [True] * 8 + [False] * 10, in_process
    assert in_process[0] == {"max_model_len": "argument --max-model-len: invalid human_readable_int_or_auto "
                                              "value: 'long'"}
    with pytest.raises(FlagsUnknown):
        refused_values("/bin/false", facts, None, only_the_engine, flags)
    values.write_text(kept)
    assert refused_values("/bin/false", facts, None, only_the_engine, flags) == engine_said[len(cases):]
    assert "bogus_xyz" in engine_said[-2]["compilation_config"] and engine_said[-1] == {}
