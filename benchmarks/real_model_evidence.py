"""The evidence tables of a finished sweep, as Markdown, computed as `quant gate` computes its verdicts:

1. per task and variant: the score with its 95% CI; the paired difference from the baseline item by item
   (positive = better; for bits per byte, a decrease) with its 95% CI, the test's p (exact McNemar for 0/1
   scores), items lost / gained; the recovery ratio (candidate / baseline, llm-compressor's convention; for a
   lower-is-better metric, baseline / candidate, so that 1 is "no loss" either way); KL (nats/token); and how
   many items a paired test would need to see a 3-point drop at this pair's discordance;
2. per variant: the gate's verdict under the recipe's own policy (`gates:`), with the tasks that decided it (a
   variant the engine could not serve, scored in-process, is compared on accuracy as `--allow-undeployable`
   does, and said to be undeployable);
3. per task: `quant choose`'s pick under the same limit.

Usage: python benchmarks/real_model_evidence.py RUN_DIR [--drop 0.03]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

from reports.gate import GateInputError, compare, load_policy, load_side, outcome, pick_variant

Z_ALPHA, Z_POWER = 1.959964, 0.841621   # two-sided 5%, 80% power


def items_needed(discordance: float, drop: float) -> int | None:
    """Items a paired McNemar test needs to detect a true drop `drop` (two-sided 5%, power 80%) when a share
    `discordance` of items flips between the two variants (Connor's formula for paired proportions)."""
    if discordance <= drop ** 2 or discordance <= 0:
        return None
    root = Z_ALPHA * math.sqrt(discordance) + Z_POWER * math.sqrt(discordance - drop ** 2)
    return math.ceil((root / drop) ** 2)


def _ci(pair) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def _task_table(results: dict, task: str, baseline: dict, checks: dict, drop: float) -> list[str]:
    base = baseline["accuracy"][task]
    lower_better = base.get("higher_is_better") is False
    rows = [f"### {task} ({base['metric']}, n = {base['n']}{', lower is better' if lower_better else ''})", "",
            "| variant | score [95% CI] | paired diff [95% CI] | p (test) | lost / gained | recovery | KL "
            "| items for a 3-pt drop |", "|---|---|---|---|---|---|---|---|"]
    for name, variant in results["variants"].items():
        entry = variant.get("accuracy", {}).get(task)
        if variant["status"] != "ok" and not entry:
            rows.append(f"| {name} | {variant['status']}: {variant.get('reason')} | | | | | | |")
            continue
        cells = [f"{entry['value']:.3f} {_ci(entry['ci95'])}"]
        check = checks.get(name, {}).get(task)
        if variant.get("baseline") or check is None or not check.comparison:
            cells += ["-", "-", "-", "-", "-", "-"]
        else:
            c = check.comparison
            recovery = (base["value"] / entry["value"] if lower_better else entry["value"] / base["value"]) \
                if entry["value"] and base["value"] else float("nan")
            discordance = (c["lost"] + c["gained"]) / c["n"]
            needed = items_needed(discordance, drop) if not lower_better else None
            kl = entry.get("kl")
            cells += [f"{c['diff']:+.3f} {_ci(c['ci95'])}", f"{c['p']:.3g} ({c['test']})",
                      f"{c['lost']} / {c['gained']}", f"{recovery:.3f}",
                      f"{kl['value']:.3f}" if kl else "-",
                      f"{needed} (discordance {discordance:.2f})" if needed else "-"]
        rows.append(f"| {name}{' (baseline)' if variant.get('baseline') else ''} | " + " | ".join(cells) + " |")
    return rows + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--drop", type=float, default=0.03, help="the drop a paired test should see (default 0.03)")
    args = ap.parse_args()
    results, _ = load_side(str(args.run))
    gates, source = load_policy(None, results)
    baseline = pick_variant(results, None, default_baseline=True, label="baseline")
    checks, verdicts = {}, {}
    for name, variant in results["variants"].items():
        if variant.get("baseline"):
            continue
        candidate = pick_variant(results, name, default_baseline=False, label="candidate")
        try:   # the tables are about accuracy: a variant scored in-process is compared too, and its verdict says so
            found = compare(baseline, candidate, gates, allow_undeployable=True)
        except GateInputError as exc:
            verdicts[name] = f"error: {exc}"
            continue
        checks[name] = {c.task: c for c in found}
        failing = [f"{c.task} {c.verdict.outcome}" for c in found if not c.passed]
        verdicts[name] = outcome(found) + (f" ({'; '.join(failing)})" if failing else "")
        if variant["status"] != "ok":
            verdicts[name] = (f"cannot be deployed ({variant['status']}: the deploy gate exits 2); its accuracy "
                              f"alone (--allow-undeployable): {verdicts[name]}")
    tasks = list(baseline["accuracy"])
    print(f"Baseline {results['baseline']}; gate policy: {source} (rule {gates.rule}, max_drop {gates.max_drop}).\n")
    for task in tasks:
        print("\n".join(_task_table(results, task, baseline, checks, args.drop)))
    print("### Gate verdicts (`quant gate --baseline RUN --candidate RUN:VARIANT`)\n")
    print("| variant | verdict |\n|---|---|")
    for name, verdict in verdicts.items():
        print(f"| {name} | {verdict} |")
    print("\n### `quant choose RUN --task T`\n")
    for task in tasks:
        proc = subprocess.run([sys.executable, "-m", "quant.cli", "choose", str(args.run), "--task", task],
                              capture_output=True, text=True)
        text = (proc.stdout or proc.stderr).strip().splitlines()
        print(f"- {task}: " + (text[0] if text else f"exit {proc.returncode}"))


if __name__ == "__main__":
    main()
