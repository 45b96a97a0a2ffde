"""How much narrower the paired interval is than lm-eval's unpaired one, on a sweep's own items.

Usage: python benchmarks/paired_vs_unpaired.py RUN_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from evals.stats import paired_difference, unpaired_difference
from core.store import read_json
from reports.samples import item_scores


def main(run: Path) -> None:
    results = read_json(run / "results.json")
    base_name = results["baseline"]
    print(f"{'variant':<20} {'task':<16} {'diff':>7} {'paired CI width':>16} {'unpaired width':>15} {'ratio':>6}")
    for name, v in results["variants"].items():
        if name == base_name:
            continue
        for task, acc in v.get("accuracy", {}).items():
            base, cand = item_scores(run, base_name, task, acc["metric"]), item_scores(run, name, task, acc["metric"])
            if not base or not cand:
                continue
            ids = sorted(set(base.items) & set(cand.items))
            b, c = [base.items[i].score for i in ids], [cand.items[i].score for i in ids]
            p, u = paired_difference(b, c), unpaired_difference(b, c)
            pw, uw = p["ci95"][1] - p["ci95"][0], u["ci95"][1] - u["ci95"][0]
            print(f"{name:<20} {task:<16} {p['diff']:+7.3f} {pw:16.3f} {uw:15.3f} {pw / uw if uw else float('nan'):6.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
