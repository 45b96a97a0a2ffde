"""What `quant history` and `quant compare` print: recorded runs, and per-task deltas between two runs."""

from __future__ import annotations

import json
from pathlib import PurePath

from reports.headline import failed_note


MODEL_WIDTH = 32


def model_label(model: str) -> str:
    """A local model by its file or folder name, a hub model by its id; `…` where the column cuts it."""
    name = PurePath(model).name if model.startswith(("/", ".", "~")) else model
    return name if len(name) <= MODEL_WIDTH else "…" + name[-(MODEL_WIDTH - 1):]


def runs_table(rows: list[dict]) -> str:
    lines = [f"{'run id':<25} {'started':<21} {'recipe':<14} {'model':<{MODEL_WIDTH}} {'commit':<8} baseline scores"]
    for r in rows:
        res = r["results"]
        base = res["variants"].get(res["baseline"], {}).get("accuracy", {})
        scores = " ".join(f"{t}={a['value']:.3f}" for t, a in base.items())
        lines.append(f"{r['run_id']:<25} {r['started'][:19]:<21} {r['recipe_name']:<14} "
                     f"{model_label(r['model']):<{MODEL_WIDTH}} {(r['git_commit'] or '-')[:8]:<8} {scores}")
    return "\n".join(lines)


def perf_table(variant: str, rows: list[dict]) -> str:
    """A variant's headline output tok/s per recorded run, oldest first (quant.history.perf_over_time)."""
    lines = [f"{variant}: headline output tok/s per run (median [95% interval] where measured; † foreign load; "
             "a re-run that took its perf from the cache names the run that measured it)",
             f"{'run id':<25} {'started':<21} {'engine':<14} {'concurrency':>11} {'out tok/s':>10}  interval"]
    for r in rows:
        ci = f"[{r['ci95'][0]:.0f}, {r['ci95'][1]:.0f}]" if r.get("ci95") else "-"
        runs = f" x{r['repeats']}" if r.get("repeats", 1) > 1 else ""
        lines.append(f"{r['run_id']:<25} {(r['started'] or '')[:19]:<21} {str(r['version'] or '-')[:14]:<14} "
                     f"{r['identity']['workload']['concurrency']:>11} {r['tok_s']:>10.0f}  {ci}{runs}"
                     + (" †" if r["foreign"] else "")
                     + failed_note(tuple(r["failed"]) if r.get("failed") else None)
                     + (f"  (measured in {r['same_as']})" if r.get("same_as") else ""))
    return "\n".join(lines)


def deltas_table(rows: list[dict]) -> str:
    if not rows:
        return "the two runs share no variant and task"
    vw = max([20, *(len(r["variant"]) for r in rows)])
    lines = [f"{'variant':<{vw}} {'task':<18} {'metric':<12} {'baseline':>9} {'candidate':>9} {'delta':>8} "
             f"{'paired 95% CI':>17} {'items':>6}"]
    for r in rows:
        ci = "-" if r["ci"] is None else f"{r['ci'][0]:+.3f}..{r['ci'][1]:+.3f}"
        lines.append(f"{r['variant']:<{vw}} {r['task']:<18} {r['metric']:<12} {r['baseline']:9.3f} "
                     f"{r['candidate']:9.3f} {r['delta']:+8.3f} {ci:>17} {r['n_paired'] or '-':>6}")
    return "\n".join(lines)


def deltas_json(rows: list[dict]) -> str:
    return json.dumps({"rows": rows}, indent=2) + "\n"
