"""What `quant sweep` prints on stderr at the end: how many variants ran ok, unsupported or failed, and why."""

from __future__ import annotations


def sweep_summary(results: dict, only: list[str] | None, allow_failed: bool) -> tuple[list[str], bool]:
    """The summary lines, and whether a variant failed (crash, quantization or measurement error); one the
    engine declared unsupported (recorded, scored in-process) is not a failure."""
    ran = {n: v for n, v in results["variants"].items() if not only or n in only}
    failed = {n: v["reason"] for n, v in ran.items() if v["status"] == "failed"}
    unsupported = {n: v["reason"] for n, v in ran.items() if v["status"] == "unsupported"}
    lines = [f"sweep: {len(ran) - len(failed) - len(unsupported)} ok, {len(unsupported)} unsupported, "
             f"{len(failed)} failed"]
    lines += [f"  {label} {name}: {reason}"
              for label, group in (("unsupported", unsupported), ("FAILED", failed)) for name, reason in group.items()]
    if failed and allow_failed:
        lines.append("  exit 0 despite failed variants (--allow-failed)")
    return lines, bool(failed)
