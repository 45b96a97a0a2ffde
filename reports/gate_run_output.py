"""What `quant gate` writes for a whole gate run: one candidate as reports/gate_output.py renders it, or every
variant of a run, one block each, the variants not gated and the outcome over all."""

from __future__ import annotations

import json

from reports.gate import outcome
from reports.gate_output import ICON, LABEL, XML_HEADER, gate_dict, format_checks, junit_suite, markdown
from reports.gate_run import GateRun


def _names(run: GateRun, candidate: str) -> tuple:
    return run.baseline, candidate, run.rule, run.policy_source


def _summary(run: GateRun) -> str:
    each = ", ".join(f"{name} {outcome(checks)}" for name, checks in run.gated.items())
    return f"every variant: {LABEL[run.outcome]} ({each})"


def as_text(run: GateRun) -> str:
    blocks = [format_checks(checks, *_names(run, name), run.family) for name, checks in run.gated.items()]
    blocks[0] = "".join(f"note: {note}\n" for note in run.notes) + blocks[0]
    if not run.every_variant:
        return blocks[0]
    return "\n\n".join(blocks) + "\n\n" + "\n".join(
        [f"not gated: {why} (--allow-undeployable gates its accuracy)" for why in run.not_gated.values()]
        + [_summary(run)])


def as_markdown(run: GateRun) -> str:
    sections = [markdown(checks, *_names(run, name), run.family) for name, checks in run.gated.items()]
    if not run.every_variant:
        return sections[0]
    return "\n".join(sections + [f"- not gated: {why}" for why in run.not_gated.values()]
                     + ["", f"**{ICON[run.outcome]} {_summary(run)}**", ""])


def as_json(run: GateRun) -> str:
    gates = [gate_dict(checks, *_names(run, name), run.family) for name, checks in run.gated.items()]
    if not run.every_variant:
        return json.dumps(gates[0], indent=2) + "\n"
    return json.dumps({"baseline": run.baseline, "rule": run.rule, "policy": run.policy_source,
                       "family": run.family.as_dict(), "outcome": run.outcome, "not_gated": run.not_gated,
                       "candidates": gates}, indent=2) + "\n"


def as_junit(run: GateRun) -> str:
    suites = [junit_suite(checks, f"quant-gate.{name}", run.policy_source) for name, checks in run.gated.items()]
    if not run.every_variant:
        return XML_HEADER + suites[0]
    return XML_HEADER + "<testsuites>\n" + "".join(suites) + "</testsuites>\n"
