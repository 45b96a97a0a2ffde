"""`quant gate`: does a candidate lose more accuracy than allowed against a baseline?"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import yaml

from quant.recipe import Gates
from quant.store import read_json

PASS, REGRESSION, ERROR = 0, 1, 2


class GateInputError(Exception):
    pass


@dataclass
class Check:
    task: str
    metric: str
    baseline: float
    candidate: float
    max_drop: float

    @property
    def drop(self) -> float:
        return self.baseline - self.candidate

    @property
    def passed(self) -> bool:
        return self.drop <= self.max_drop + 1e-12


def load_side(spec: str) -> tuple[dict, str | None]:
    """'DIR', 'DIR/results.json' or either with ':VARIANT' -> (results, variant or None)."""
    path, variant = Path(spec), None
    if not path.exists() and ":" in spec:
        head, variant = spec.rsplit(":", 1)
        path = Path(head)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise GateInputError(f"{spec}: no results.json there")
    try:
        return read_json(path), variant
    except ValueError as exc:
        raise GateInputError(f"{path}: not valid JSON ({exc})") from None


def pick_variant(results: dict, variant: str | None, default_baseline: bool, label: str) -> dict:
    names = list(results["variants"])
    if variant is None:
        if default_baseline:
            variant = results["baseline"]
        elif len(names) == 1:
            variant = names[0]
        else:
            raise GateInputError(f"{label}: the run has several variants; name one as PATH:VARIANT "
                                 f"(one of {', '.join(names)})")
    if variant not in results["variants"]:
        raise GateInputError(f"{label}: no variant {variant!r} (have {', '.join(names)})")
    return results["variants"][variant] | {"name": variant}


def load_policy(path: Path | None, candidate_results: dict) -> Gates:
    if path is None:
        return Gates.model_validate(candidate_results.get("recipe", {}).get("gates", {}))
    try:
        return Gates.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise GateInputError(f"policy {path}: {str(exc).splitlines()[0]}") from None


def compare(baseline: dict, candidate: dict, policy: Gates) -> list[Check]:
    checks = []
    for task, base in baseline.get("accuracy", {}).items():
        cand = candidate.get("accuracy", {}).get(task)
        if cand is None:
            raise GateInputError(f"candidate {candidate['name']} has no result for task {task} "
                                 f"(status {candidate.get('status')}: {candidate.get('reason')})")
        checks.append(Check(task, base["metric"], base["value"], cand["value"], policy.max_drop_for(task)))
    if not checks:
        raise GateInputError(f"baseline {baseline['name']} has no accuracy results")
    return checks


def junit_xml(checks: list[Check], suite: str) -> str:
    failures = sum(not c.passed for c in checks)
    cases = []
    for c in checks:
        body = "" if c.passed else (f'<failure message="{escape(c.metric)} dropped {c.drop:.4f} '
                                    f'&gt; {c.max_drop:.4f}"/>')
        cases.append(f'  <testcase classname="{escape(suite)}" name="{escape(c.task)}.{escape(c.metric)}">{body}</testcase>')
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="{escape(suite)}" tests="{len(checks)}" '
            f'failures="{failures}">\n' + "\n".join(cases) + "\n</testsuite>\n")


def format_checks(checks: list[Check], baseline: str, candidate: str) -> str:
    lines = [f"gate: {candidate} vs {baseline}",
             f"{'task':<20} {'metric':<12} {'baseline':>9} {'candidate':>9} {'drop':>8} {'allowed':>8}  result"]
    for c in checks:
        lines.append(f"{c.task:<20} {c.metric:<12} {c.baseline:9.3f} {c.candidate:9.3f} {c.drop:+8.3f} "
                     f"{c.max_drop:8.3f}  {'PASS' if c.passed else 'REGRESSION'}")
    return "\n".join(lines)
