"""Whether the two sides of `quant gate` ran on the same hardware. Perf measured on one GPU kind or count says
nothing about another: such a comparison is refused. Accuracy may move with the GPU too (other kernels, a
weight-only fallback below compute capability 8.9), so it is compared and the difference noted."""

from __future__ import annotations

from reports.gate_check import GateInputError

COMPARED = ("name", "count")      # perf across these is refused
NOTED = ("compute_cap", "driver", "cuda")


def hardware(results: dict, variant: dict | None = None) -> dict | None:
    """The GPUs a variant ran on (its ran_on.gpu), else the run's GPU identity (results.json engine.gpu);
    {"name": "cpu"} for a CPU engine; None where unknown."""
    if (chosen := ((variant or {}).get("ran_on") or {}).get("gpu")):
        return chosen
    engine = results.get("engine") or {}
    if engine.get("gpu"):
        return engine["gpu"]
    return {"name": "cpu", "count": None} if engine.get("device") == "cpu" else None


def _describe(gpu: dict) -> str:
    if gpu["name"] == "cpu":
        return "the CPU"
    return f"{gpu.get('count') or '?'}x {gpu['name']}"


def hardware_note(base_results: dict, cand_results: dict, perf_gated: bool, baseline: dict | None = None,
                  candidates: list[dict] | None = None) -> str | None:
    """None where the baseline and every candidate ran on the same GPUs (or either is unknown); GateInputError
    where perf would be gated across GPU kinds or counts; else a note for the accuracy checks."""
    notes = [_note(hardware(base_results, baseline), hardware(cand_results, c), perf_gated)
             for c in candidates or [None]]
    return "; ".join(dict.fromkeys(n for n in notes if n)) or None


def _note(base: dict | None, cand: dict | None, perf_gated: bool) -> str | None:
    if base is None or cand is None or base == cand:
        return None
    where = f"baseline on {_describe(base)}, candidate on {_describe(cand)}"
    if any(base.get(k) != cand.get(k) for k in COMPARED):
        if perf_gated:
            raise GateInputError(f"perf measured on different GPUs ({where}) cannot be compared: gate perf on runs "
                                 "from the same GPU kind and count, or use a policy without perf gates")
        return f"accuracy compared across different GPUs ({where}): kernels differ, results may too"
    other = ", ".join(f"{k} {base.get(k)} vs {cand.get(k)}" for k in NOTED if base.get(k) != cand.get(k))
    return f"the sides ran on {_describe(base)} with different {other}"
