"""The evidence table of a finished sweep, as Markdown: per variant its quantization time, size, each task's
score with the paired difference from the baseline (95% CI, item by item, as `quant gate` computes it,
oriented so that positive is better: for bits per byte, a decrease) and
KL (nats/token), and output tokens/s per concurrency of the first workload.

Usage: python benchmarks/real_model_evidence.py RUN_DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports.gate import GateInputError, compare, load_policy, load_side, pick_variant


def _paired(results: dict, gates, baseline, name: str) -> dict[str, dict]:
    """task -> the gate's paired comparison (diff = candidate - baseline, with its CI)."""
    candidate = pick_variant(results, name, default_baseline=False, label="candidate")
    try:
        return {check.task: check.comparison for check in compare(baseline, candidate, gates)}
    except GateInputError:
        return {}


def _score(entry: dict | None, paired: dict | None) -> str:
    if not entry:
        return "-"
    text = f"{entry['value']:.3f}"
    if paired and paired.get("ci95"):
        low, high = paired["ci95"]
        text += f" ({paired['diff']:+.3f} [{low:+.3f}, {high:+.3f}])"
    if (kl := entry.get("kl")) is not None:
        text += f" KL {kl['value']:.2g}"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    args = ap.parse_args()
    results, _ = load_side(str(args.run))
    gates, _ = load_policy(None, results)
    baseline = pick_variant(results, None, default_baseline=True, label="baseline")
    tasks = [t["label"] or t["name"] for t in results["recipe"]["tasks"]]
    workload = results["recipe"]["perf"]["workloads"][0]
    levels = workload["concurrency"]
    print(f"Tasks: score (paired difference from {results['baseline']}, positive = better [95% CI]) "
          f"KL nats/token. "
          f"Perf: {workload['name']}, output tok/s at concurrency {', '.join(map(str, levels))}.\n")
    print("| variant | quantize s | size MB | " + " | ".join(tasks) + " | out tok/s |")
    print("|---" * (len(tasks) + 4) + "|")
    for name, variant in results["variants"].items():
        if variant["status"] != "ok":
            print(f"| {name} | failed: {variant.get('reason')} |")
            continue
        paired = {} if variant.get("baseline") else _paired(results, gates, baseline, name)
        manifest = variant.get("manifest") or {}
        seconds = manifest.get("quantization_seconds")
        points = (variant.get("perf") or {}).get(workload["name"], {}).get("points", [])
        speed = " / ".join(f"{p['output_tokens_per_s']:.0f}" for p in points if p.get("concurrency") is not None)
        cells = [_score(variant["accuracy"].get(t), paired.get(t)) for t in tasks]
        print(f"| {name} | {seconds if seconds is not None else '-'} | {variant['size_bytes'] / 1e6:.0f} | "
              + " | ".join(cells) + f" | {speed} |")


if __name__ == "__main__":
    main()
