"""`quant choose`: the fastest variant whose accuracy on a task stays within an allowed drop."""

from __future__ import annotations

from dataclasses import dataclass

from reports.table import headline_point


@dataclass
class Choice:
    variant: str
    accuracy: float
    drop: float
    out_tok_s: float
    concurrency: int
    checkpoint: str
    rejected: list[tuple[str, str]]


def choose(results: dict, task: str, max_drop: float) -> Choice | None:
    base = results["variants"][results["baseline"]]["accuracy"].get(task)
    if base is None:
        raise KeyError(f"no results for task {task!r}; tasks: "
                       f"{', '.join(results['variants'][results['baseline']]['accuracy'])}")
    best, rejected = None, []
    for name, v in results["variants"].items():
        acc, point = v.get("accuracy", {}).get(task), headline_point(v)
        if v["status"] != "ok" or point is None or acc is None:
            rejected.append((name, f"{v['status']}: {v.get('reason') or 'not served'}"))
            continue
        drop = base["value"] - acc["value"]
        if drop > max_drop + 1e-12:
            rejected.append((name, f"drop {drop:.3f} > {max_drop:.3f}"))
            continue
        candidate = Choice(name, acc["value"], drop, point["output_tokens_per_s"], point["concurrency"],
                           v["checkpoint"], [])
        if best is None or candidate.out_tok_s > best.out_tok_s:
            best = candidate
    if best:
        best.rejected = rejected
    return best
