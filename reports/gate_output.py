"""What `quant gate` writes: console table, JUnit XML (one case per task and metric), Markdown, JSON."""

from __future__ import annotations

import json
import math
from xml.sax.saxutils import escape, quoteattr

from core.foreign_text import clean_text, markdown_cell, markdown_code
from reports.family import Family
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
    p, p_family = c.comparison.get("p"), c.comparison.get("p_family")
    shown = f" p={p:.3g}" if p is not None else ""
    return f"-{c.comparison['lost']}/+{c.comparison['gained']}{shown}" + (
        f" (Holm {p_family:.3g})" if p_family is not None and p_family != p else "")


def _items(c: Check) -> str:
    if c.n_paired is None:
        return "-" if c.n_baseline is None else f"{c.n_baseline} (means)"
    if c.partial_overlap:
        return f"{c.n_paired} of {c.n_baseline}/{c.n_candidate}"
    return str(c.n_paired)


def _extra(c: Check) -> str:
    needed = c.verdict.items_needed
    return ((f"; ~{needed} items would decide it" if needed else "") + (f"; {c.evidence}" if c.evidence else "")
            + (f"; NOT DEPLOYABLE: {c.caveat}" if c.caveat else ""))


def _caveat(checks: list[Check]) -> str:
    return next((c.caveat_detail for c in checks if c.caveat), "")


def _overall(checks: list[Check]) -> str:
    caveat = " (accuracy only, NOT DEPLOYABLE: --allow-undeployable)" if _caveat(checks) else ""
    return LABEL[outcome(checks)] + caveat


def _num(x: float, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, int | float) and math.isfinite(x) else "-"


def header(baseline: str, candidate: str, rule: str, policy_source: str, checks: list[Check] = (),
           family: Family | None = None) -> list[str]:
    caveat = _caveat(list(checks))
    return [f"gate: {candidate} vs {baseline} (rule {rule})", f"policy: {policy_source}",
            *([f"NOT DEPLOYABLE: {caveat}; gated on --allow-undeployable"] if caveat else []),
            *([family.describe()] if family else [])]


def format_checks(checks: list[Check], baseline: str, candidate: str, rule: str, policy_source: str = "",
                  family: Family | None = None) -> str:
    tw = max([18, *(len(c.task) for c in checks)])
    mw = max([14, *(len(c.metric) for c in checks)])
    fw = max([16, *(len(_flips(c)) for c in checks)])
    lines = header(baseline, candidate, rule, policy_source, checks, family) + [
        f"{'task':<{tw}} {'metric':<{mw}} {'items':>14} {'baseline':>9} {'candidate':>9} {'drop':>8} {'drop CI':>15} "
        f"{'margin':>7} {'flips':>{fw}}  result"]
    for c in checks:
        lines.append(f"{c.task:<{tw}} {c.metric:<{mw}} {_items(c):>14} {_num(c.baseline, '9.3f'):>9} "
                     f"{_num(c.candidate, '9.3f'):>9} {_num(c.drop, '+8.3f'):>8} {_interval(c):>15} {c.margin:7.3f} "
                     f"{_flips(c):>{fw}}  {LABEL[c.verdict.outcome]}  ({c.verdict.reason}{_extra(c)})")
    lines.append(f"overall: {_overall(checks)}")
    return "\n".join(lines)


def _numbers(c: Check) -> dict:
    return {"n_baseline": c.n_baseline, "n_candidate": c.n_candidate, "n_paired": c.n_paired,
            "partial_overlap": c.partial_overlap}


XML_HEADER = '<?xml version="1.0" encoding="utf-8"?>\n'


def junit_xml(checks: list[Check], suite: str, policy_source: str = "") -> str:
    return XML_HEADER + junit_suite(checks, suite, policy_source)


def junit_suite(checks: list[Check], suite: str, policy_source: str = "") -> str:
    """An inconclusive check is a failure (type "inconclusive", with its reason), as the exit code fails the
    job: a deploy gate that could not decide has not passed."""
    failures = sum(c.verdict.outcome != "pass" for c in checks)
    cases = []
    for c in checks:
        message = quoteattr(clean_text(f"{c.verdict.outcome}: {c.verdict.reason}{_extra(c)}"))
        body = {"pass": f"<system-out>{escape(clean_text('NOT DEPLOYABLE: ' + c.caveat_detail))}</system-out>"
                if c.caveat else "",
                "regression": f'<failure type="regression" message={message}/>',
                "inconclusive": f'<failure type="inconclusive" message={message}/>'}[c.verdict.outcome]
        props = "".join(f'<property name={quoteattr(k)} value={quoteattr(clean_text(str(v)))}/>' for k, v in
                        (_numbers(c) | {"evidence": c.evidence, "test": c.comparison.get("test"),
                                        "not_deployable": c.caveat_detail or None}).items()
                        if v is not None)
        cases.append(f'  <testcase classname={quoteattr(clean_text(suite))} '
                     f'name={quoteattr(clean_text(f"{c.task}.{c.metric}"))}>'
                     f"<properties>{props}</properties>{body}</testcase>")
    return (f'<testsuite name={quoteattr(clean_text(suite))} tests="{len(checks)}" failures="{failures}" '
            f'skipped="0">\n  <properties><property name="policy" value={quoteattr(clean_text(policy_source))}/>'
            '</properties>\n'
            + "\n".join(cases) + "\n</testsuite>\n")


ICON = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️"}


def markdown(checks: list[Check], baseline: str, candidate: str, rule: str, policy_source: str = "",
             family: Family | None = None) -> str:
    icon = ICON
    lines = [f"### quant gate: `{markdown_code(candidate)}` vs `{markdown_code(baseline)}` — "
             f"{icon[outcome(checks)]} {_overall(checks)} (rule `{rule}`)", "", f"Policy: {markdown_cell(policy_source)}",
             "",
             *([family.describe().replace("family:", "Family:", 1), ""] if family else []),
             *([f"> **Not deployable:** {_caveat(checks)}. Gated on `--allow-undeployable`.", ""]
               if _caveat(checks) else []),
             "| task | metric | items (paired of baseline/candidate) | baseline | candidate | drop | drop CI | margin "
             "| flips (−/+) | verdict |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in checks:
        lines.append(f"| {markdown_cell(c.task)} | {markdown_cell(c.metric)} | {_items(c)} | {_num(c.baseline, '.3f')} | {_num(c.candidate, '.3f')} "
                     f"| {_num(c.drop, '+.3f')} | {_interval(c)} | {c.margin:.3f} | {_flips(c)} "
                     f"| {icon[c.verdict.outcome]} {markdown_cell(c.verdict.reason + _extra(c))} |")
    return "\n".join(lines) + "\n"


def as_json(checks: list[Check], baseline: str, candidate: str, rule: str, policy_source: str = "",
            family: Family | None = None) -> str:
    return json.dumps(gate_dict(checks, baseline, candidate, rule, policy_source, family), indent=2) + "\n"


def gate_dict(checks: list[Check], baseline: str, candidate: str, rule: str, policy_source: str,
          family: Family | None) -> dict:
    finite = lambda x: x if isinstance(x, int | float) and math.isfinite(x) else None
    return {
        "baseline": baseline, "candidate": candidate, "rule": rule, "policy": policy_source,
        "family": family.as_dict() if family else None,
        "outcome": outcome(checks), "not_deployable": _caveat(checks) or None,
        "checks": [{"task": c.task, "metric": c.metric, "outcome": c.verdict.outcome, "reason": c.verdict.reason,
                    "items_needed": c.verdict.items_needed, "baseline": finite(c.baseline),
                    "candidate": finite(c.candidate), "drop": finite(c.drop), "margin": c.margin,
                    "drop_ci": None if not c.comparison else [-c.comparison["ci95"][1], -c.comparison["ci95"][0]],
                    "test": c.comparison.get("test"), "p": c.comparison.get("p"),
                    "p_family": c.comparison.get("p_family"), "evidence": c.evidence,
                    "not_deployable": c.caveat_detail or None,
                    **_numbers(c)} for c in checks]}
