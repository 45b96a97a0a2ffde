"""Gate decision of every variant of a sweep against its baseline, under each rule, per task.

Usage: python benchmarks/gate_decisions.py RUN_DIR [--max-drop 0.05]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports.gate import GateInputError, compare, load_policy, load_side, outcome, pick_variant
from reports.gate_rules import RULES_ORDER


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--max-drop", type=float, default=None, help="default: the recipe's gates")
    args = ap.parse_args()
    results, _ = load_side(str(args.run))
    gates, _ = load_policy(None, results)
    if args.max_drop is not None:
        gates = gates.model_copy(update={"max_drop": args.max_drop})
    baseline = pick_variant(results, None, default_baseline=True, label="baseline")
    print(f"{'variant':<20} " + " ".join(f"{r:>16}" for r in RULES_ORDER) + "   per task (point rule)")
    for name in results["variants"]:
        candidate = pick_variant(results, name, default_baseline=False, label="candidate")
        cells, detail = [], ""
        for rule in RULES_ORDER:
            try:
                checks = compare(baseline, candidate, gates.model_copy(update={"rule": rule}))
            except GateInputError as exc:
                cells.append("error")
                detail = str(exc)
                continue
            cells.append(outcome(checks))
            if rule == "point":
                detail = ", ".join(f"{c.task} {c.drop:+.3f}" for c in checks)
        print(f"{name:<20} " + " ".join(f"{c:>16}" for c in cells) + f"   {detail}")


if __name__ == "__main__":
    main()
