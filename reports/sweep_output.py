"""What `quant sweep` prints on stderr at the end: how many variants ran ok, unsupported or failed, and why."""

from __future__ import annotations

from core.foreign_text import one_line

STANDS_ON_NOTHING = "`quant gate` and `quant choose` have nothing to stand on"


def sweep_summary(results: dict, only: list[str] | None, allow_failed: bool) -> tuple[list[str], bool]:
    """The summary lines, and whether the sweep failed: a variant failed (crash, quantization or measurement
    error; allow_failed excuses it), or the run has nothing to stand on: its baseline was not served, or no
    variant was (nothing excuses these). A variant the engine declared unsupported (recorded, scored in-process)
    is not a failure."""
    ran = {n: v for n, v in results["variants"].items() if not only or n in only}
    failed = {n: v["reason"] for n, v in ran.items() if v["status"] == "failed"}
    unsupported = {n: v["reason"] for n, v in ran.items() if v["status"] == "unsupported"}
    ok = len(ran) - len(failed) - len(unsupported)
    first = f"sweep: {ok} ok, {len(unsupported)} unsupported, {len(failed)} failed"
    unfounded = _nothing_to_stand_on(results, ran, ok)
    lines = [first + (f"; {unfounded}: {STANDS_ON_NOTHING}" if unfounded else "")]
    lines += [f"  {label} {one_line(name)}: {one_line(reason)}"
              for label, group in (("unsupported", unsupported), ("FAILED", failed)) for name, reason in group.items()]
    if failed and allow_failed and not unfounded:
        lines.append("  exit 0 despite failed variants (--allow-failed)")
    return lines, bool(unfounded) or (bool(failed) and not allow_failed)


def _nothing_to_stand_on(results: dict, ran: dict, ok: int) -> str | None:
    """Why the run gives the gate and choose nothing to compare against, or None."""
    if ran and ok == 0:
        return "nothing could be served"
    name = results.get("baseline")
    baseline = results["variants"].get(name) if name else None
    if baseline is None or baseline["status"] == "ok":
        return None
    return f"the baseline {name} " + ("could not be served" if baseline["status"] == "unsupported" else "failed")
