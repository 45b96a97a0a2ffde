"""What `quant gate` writes: console table, JUnit XML (one case per task and metric), Markdown summary."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from reports.gate import Check, outcome

LABEL = {"pass": "PASS", "regression": "REGRESSION", "inconclusive": "INCONCLUSIVE"}


def _interval(c: Check) -> str:
    if not c.comparison:
        return "-"
    low, high = 0.0 - c.comparison["ci95"][1], 0.0 - c.comparison["ci95"][0]   # 0.0 - 0.0 is +0.0, not -0.0
    return f"{low:+.3f}..{high:+.3f}"


def _flips(c: Check) -> str:
    if not c.comparison:
        return "-"
    p = c.comparison.get("mcnemar_p")
    return f"-{c.comparison['lost']}/+{c.comparison['gained']}" + (f" p={p:.3g}" if p is not None else "")


def _extra(c: Check) -> str:
    needed = c.verdict.items_needed
    return f"; ~{needed} items would decide it" if needed else ""


def format_checks(checks: list[Check], baseline: str, candidate: str, rule: str) -> str:
    tw = max([18, *(len(c.task) for c in checks)])
    mw = max([14, *(len(c.metric) for c in checks)])
    lines = [f"gate: {candidate} vs {baseline} (rule {rule})",
             f"{'task':<{tw}} {'metric':<{mw}} {'baseline':>9} {'candidate':>9} {'drop':>8} {'drop CI':>15} "
             f"{'margin':>7} {'flips':>16}  result"]
    for c in checks:
        lines.append(f"{c.task:<{tw}} {c.metric:<{mw}} {c.baseline:9.3f} {c.candidate:9.3f} {c.drop:+8.3f} "
                     f"{_interval(c):>15} {c.margin:7.3f} {_flips(c):>16}  {LABEL[c.verdict.outcome]}"
                     f"  ({c.verdict.reason}{_extra(c)})")
    lines.append(f"overall: {LABEL[outcome(checks)]}")
    return "\n".join(lines)


def junit_xml(checks: list[Check], suite: str) -> str:
    failures = sum(c.verdict.outcome == "regression" for c in checks)
    skipped = sum(c.verdict.outcome == "inconclusive" for c in checks)
    cases = []
    for c in checks:
        message = quoteattr(c.verdict.reason + _extra(c))
        body = {"pass": "", "regression": f"<failure message={message}/>",
                "inconclusive": f"<skipped message={message}/>"}[c.verdict.outcome]
        cases.append(f'  <testcase classname="{escape(suite)}" name="{escape(c.task)}.{escape(c.metric)}">'
                     f"{body}</testcase>")
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="{escape(suite)}" tests="{len(checks)}" '
            f'failures="{failures}" skipped="{skipped}">\n' + "\n".join(cases) + "\n</testsuite>\n")


def markdown(checks: list[Check], baseline: str, candidate: str, rule: str) -> str:
    icon = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️"}
    lines = [f"### quant gate: `{candidate}` vs `{baseline}` — {icon[outcome(checks)]} "
             f"{LABEL[outcome(checks)]} (rule `{rule}`)", "",
             "| task | metric | baseline | candidate | drop | drop 95% CI | margin | flips (−/+) | verdict |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in checks:
        lines.append(f"| {c.task} | {c.metric} | {c.baseline:.3f} | {c.candidate:.3f} | {c.drop:+.3f} | "
                     f"{_interval(c)} | {c.margin:.3f} | {_flips(c)} | {icon[c.verdict.outcome]} "
                     f"{c.verdict.reason}{_extra(c)} |")
    return "\n".join(lines) + "\n"
