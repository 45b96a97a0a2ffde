"""lm-eval's own output files beside ours (written by its EvaluationTracker, cached with the eval stage), every
filter's answers and lm-eval's "metric,filter" names in our per-item files, pairing by doc_hash, and the gate
taking an lm-eval output directory as either side."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from quant.eval_stage import STAGE_EVAL, collect_eval, run_eval
from quant.progress import Reporter
from core.recipe import Task
from core.store import Cache
from reports.samples import Item, ItemMismatch, ItemScores, metric_key, paired_scores
from tests.fixtures import results
from tests.helpers import REPO, quant

DEMO_MATH = str(REPO / "evals/tasks/demo_math/test.jsonl")
FILTERS = ("strict-match", "flexible-extract")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """gsm8k (two filters) on the demo model in-process, through the eval stage's cache, collected twice."""
    from evals.backends import inprocess_lm

    root = tmp_path_factory.mktemp("sweep")
    ctx = SimpleNamespace(cache=Cache(root / "cache"), reporter=Reporter(quiet=True), model_dir=REPO / "demo/model",
                          variant_dir=lambda name: root / "run" / "variants" / name)
    task = Task(name="gsm8k", data_files=DEMO_MATH, num_fewshot=0, limit=5)
    run_eval(ctx, inprocess_lm(REPO / "demo/model"), task, "k1", "bf16")
    record = {"accuracy": {}}
    for run in ("run", "rerun"):   # the rerun is a cached one: no eval, the same files
        collect_eval(ctx, "k1", "gsm8k", record, root / run / "variants" / "bf16", "inprocess")
    (root / "run" / "results.json").write_text(json.dumps(results({"bf16": {"status": "ok", **record}})))
    return root, ctx


def test_lm_evals_tracker_files_are_written_cached_and_laid_out_as_lm_eval_does(sweep):
    root, ctx = sweep
    out = root / "run" / "variants" / "bf16" / "lm_eval" / "bf16"
    [results_path] = out.glob("results_*.json")
    [samples_path] = out.glob("samples_gsm8k_*.jsonl")
    assert samples_path.name == f"samples_gsm8k_{results_path.stem.removeprefix('results_')}.jsonl"
    from lm_eval.utils import get_file_task_name, get_results_filenames, get_sample_results_filenames

    names = [str(p) for p in out.iterdir()]   # lm-eval's own helpers find and parse them
    assert get_results_filenames(names) == [str(results_path)]
    assert get_sample_results_filenames(names) == [str(samples_path)]
    assert get_file_task_name(samples_path.name) == "gsm8k"
    results = json.loads(results_path.read_text())
    for key in ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "task_hashes"):
        assert "gsm8k" in results[key], key
    assert results["n-samples"]["gsm8k"]["effective"] == 5 and results["model_name"] == "bf16"
    rows = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert len(rows) == 5 * len(FILTERS) and {r["filter"] for r in rows} == set(FILTERS)
    for key in ("doc", "arguments", "resps", "filtered_resps", "metrics", "doc_hash", "prompt_hash", "target_hash"):
        assert all(key in r for r in rows), key
    cached = ctx.cache.path(STAGE_EVAL, "k1") / "lm_eval"   # stored with the stage
    assert sorted(p.name for p in cached.iterdir()) == sorted(p.name for p in out.iterdir())
    rerun = root / "rerun" / "variants" / "bf16" / "lm_eval" / "bf16"
    assert sorted(p.name for p in rerun.iterdir()) == sorted(p.name for p in out.iterdir())
    assert all((rerun / p.name).read_bytes() == p.read_bytes() for p in out.iterdir())


def test_per_item_file_keeps_every_filters_answers_lm_evals_names_and_hashes(sweep):
    root, _ = sweep
    ours = [json.loads(line) for line in
            (root / "run" / "variants" / "bf16" / "evals" / "gsm8k.jsonl").read_text().splitlines()]
    theirs = {(r["doc_id"], r["filter"]): r for r in map(json.loads, next(
        (root / "run" / "variants" / "bf16" / "lm_eval" / "bf16").glob("samples_*")).read_text().splitlines())}
    assert len(ours) == 5
    for record in ours:
        assert set(record["filtered_resps"]) == set(FILTERS)
        assert set(record["metrics"]) == {f"exact_match,{f}" for f in FILTERS}
        for f in FILTERS:
            lm = theirs[(record["doc_id"], f)]
            assert record["filtered_resps"][f] == lm["filtered_resps"]
            assert record["metrics"][f"exact_match,{f}"] == lm["exact_match"]
            assert (record["doc_hash"], record["prompt_hash"], record["target_hash"]) == \
                (lm["doc_hash"], lm["prompt_hash"], lm["target_hash"])


def _scores(pairs, hashed=True):
    return ItemScores(Path("x.jsonl"), {doc_id: Item(f"p{h}", score, None, f"d{h}" if hashed else None, f"p{h}")
                                        for doc_id, h, score in pairs})


def test_items_pair_by_doc_hash_where_both_sides_have_it_else_by_doc_id():
    base = _scores([(0, "a", 1.0), (1, "b", 0.0), (2, "c", 1.0)])
    moved = _scores([(7, "c", 1.0), (8, "a", 1.0), (9, "b", 0.0)])        # same items, other doc_ids
    stats = paired_scores(base, moved, "t")
    assert stats["n_paired"] == 3 and stats["baseline_mean"] == stats["candidate_mean"] == 2 / 3
    with pytest.raises(ItemMismatch, match="share no doc_id"):
        paired_scores(base, _scores([(7, "c", 1.0)], hashed=False), "t")   # one side without hashes
    other_prompt = ItemScores(Path("y"), {0: Item("pa", 1.0, None, "da", "changed")})
    with pytest.raises(ItemMismatch, match="same doc_hash, different prompt"):
        paired_scores(base, other_prompt, "t")


def test_metric_names_resolve_plain_or_metric_comma_filter():
    assert metric_key({"exact_match,none": 1.0}, "exact_match") == "exact_match,none"
    assert metric_key({"exact_match": 1.0}, "exact_match") == "exact_match"      # per-item files before this
    assert metric_key({"exact_match,a": 1.0, "exact_match,b": 0.0}, "exact_match") is None   # ambiguous


@pytest.mark.parametrize("lm_eval_side", ["baseline", "candidate"])
def test_gate_takes_an_lm_eval_output_directory_as_either_side(sweep, lm_eval_side, tmp_path):
    root, _ = sweep
    ours, theirs = str(root / "run"), str(root / "run" / "variants" / "bf16" / "lm_eval")
    base, cand = (theirs, ours) if lm_eval_side == "baseline" else (ours, theirs)
    (tmp_path / "policy.yaml").write_text("min_n: 5\n")
    code, out = quant("gate", "--baseline", base, "--candidate", cand, "--policy", str(tmp_path / "policy.yaml"))
    assert code == 0, out
    assert "5 paired items" in out and "gsm8k" in out


def test_gate_on_an_lm_eval_results_file_without_samples_says_what_it_needs(sweep, tmp_path):
    root, _ = sweep
    [results_path] = (root / "run" / "variants" / "bf16" / "lm_eval" / "bf16").glob("results_*.json")
    (tmp_path / results_path.name).write_bytes(results_path.read_bytes())
    code, out = quant("gate", "--baseline", str(root / "run"), "--candidate", str(tmp_path))
    assert code == 2 and "--log_samples" in out and len(out.strip().splitlines()) == 1
