"""`quant gate`: does a candidate lose more than allowed against a baseline, and does the data say so?

Every figure of an accuracy check (both scores, the drop, its interval, n, items needed) comes from the
same items: those both sides scored (same doc_id, same prompt). Anything that is not a measured verdict
is a GateInputError (exit 2)."""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import ValidationError

from core.recipe import Gates, RecipeError, locate, read_yaml, schema_problems
from core.remote import RemoteError, is_url, pull_run
from reports.gate_check import Check, GateInputError
from reports.gate_reasoning import reasoning_checks
from reports.gate_length import length_checks
from reports.gate_perf import perf_checks
from reports.gate_rules import EXIT, INCONCLUSIVE, MARGIN_TOLERANCE, PASS, REGRESSION, decide
from reports.metric_kinds import higher_is_better, is_mean_metric
from reports.lm_eval_dir import read_lm_eval_dir, results_files
from reports.results_file import ResultsError, read_results, validate_results
from reports.samples import ItemFileError, ItemMismatch, ItemScores, item_scores, paired_scores, records_scores

__all__ = ["EXIT", "Check", "GateInputError", "compare", "load_policy", "load_side", "outcome", "pick_variant"]

MEAN_TOLERANCE = 1e-6


def load_side(spec: str) -> tuple[dict, str | None]:
    """'DIR', 'DIR/results.json' or either with ':VARIANT' -> (results, variant or None). DIR may be the
    fsspec URL a sweep published its run to (s3://bucket/runs/x:VARIANT)."""
    if is_url(spec):
        url, variant = spec, None
        head, _, tail = spec.rpartition(":")
        if tail and "/" not in tail and not head.endswith(":"):
            url, variant = head, tail
        try:
            path = pull_run(url.removesuffix("/results.json")).local
        except (RemoteError, OSError) as exc:
            raise GateInputError(f"{url}: cannot read the run there ({exc})") from None
        spec = str(path) + (f":{variant}" if variant else "")
    path, variant = Path(spec), None
    if not path.exists() and ":" in spec:
        head, variant = spec.rsplit(":", 1)
        path = Path(head)
    if not (path / "results.json").is_file() and results_files(path):
        try:
            results = validate_results(read_lm_eval_dir(path), str(path))
        except ResultsError as exc:
            raise GateInputError(str(exc)) from None
        return results | {"_run_dir": None, "_path": str(path)}, variant
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise GateInputError(f"{spec}: no results.json there (a `quant sweep` run) nor lm-eval's "
                             f"results_<timestamp>.json (an `lm_eval --output_path` directory)")
    try:
        results = read_results(path)
    except ResultsError as exc:
        raise GateInputError(str(exc)) from None
    return results | {"_run_dir": str(path.parent), "_path": str(path)}, variant


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
        raise GateInputError(f"{results['_path']}: no variant {variant!r} (have {', '.join(names)})")
    return results["variants"][variant] | {"name": variant, "_run_dir": results.get("_run_dir"),
                                           "_path": results.get("_path")}


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(map(str, e['loc'])) or '(policy)'}: {e['msg'].removeprefix('Value error, ')}"
    return str(exc).splitlines()[0]


def load_policy(path: Path | None, baseline_results: dict) -> tuple[Gates, str]:
    """The policy from --policy, else the BASELINE run's recipe gates (never the candidate's own), and a
    line saying which was used."""
    if path is None:
        where = baseline_results.get("_path", "baseline run")
        gates = baseline_results.get("recipe", {}).get("gates")
        if gates is None:
            return Gates(), f"defaults (no --policy; baseline run {where} records no gates)"
        try:
            return Gates.model_validate(gates), f"baseline recipe {where}"
        except ValidationError as exc:
            raise GateInputError(f"{where}: recipe.gates: {_first_line(exc)}") from None
    return _policy_file(Path(path)), f"{path}"


def _policy_file(path: Path) -> Gates:
    """A --policy file: what a recipe's `gates:` section holds; every problem at once, each at its line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise GateInputError(f"{path}: no such file") from None
    except OSError as exc:
        raise GateInputError(f"{path}: {exc.strerror or exc}") from None
    try:
        data = read_yaml(text, str(path), what="a policy is a YAML mapping, what a recipe's gates: section "
                         "holds") if text.strip() else {}
    except RecipeError as exc:
        raise GateInputError(str(exc)) from None
    if set(data) == {"gates"}:
        raise GateInputError(locate(text, str(path), ("gates",), "a policy file holds what a recipe's gates: "
                                    "section holds, without the `gates:` line around it"))
    try:
        return Gates.model_validate(data)
    except ValidationError as err:   # one line per problem, as a recipe's
        raise GateInputError(str(RecipeError(schema_problems(err, text, str(path)), str(path)))) from None


def policy_where(source: str) -> str:
    """Where a policy came from, as an error names it: its file, or the baseline run's recipe."""
    if source.startswith("baseline recipe "):
        return source.removeprefix("baseline recipe ") + ": recipe.gates"
    return "default policy" if source.startswith("defaults") else source


def check_policy_tasks(policy: Gates, tasks: list[str], source: str) -> None:
    """per_task keys must name tasks of the run: a typo would silently fall back to the looser max_drop."""
    where = source.removeprefix("baseline recipe ")
    for key in policy.per_task:
        if key not in tasks:
            near = difflib.get_close_matches(key, tasks, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (tasks: {', '.join(tasks)})"
            raise GateInputError(f"{where}: per_task {key!r} names no task in the run{hint}")


def _refuse_non_mean(task: str, entry: dict, where: str) -> None:
    if not is_mean_metric(entry):
        raise GateInputError(f"{where}: {task}: metric {entry['metric']!r} is not a mean of per-item scores "
                             f"(corpus-level or perplexity-style); the gate pairs items and cannot gate it")


def _check_is_mean(task: str, entry: dict, items: ItemScores) -> None:
    mean = items.mean()
    if abs(mean - entry["value"]) > MEAN_TOLERANCE * max(1.0, abs(entry["value"])):
        raise GateInputError(f"{items.path}: {task}: reported {entry['metric']} {entry['value']:.6g} is not the "
                             f"mean of its {len(items.items)} per-item values ({mean:.6g}); the gate only gates "
                             f"metrics whose score is that mean")


def side_items(side: dict, task: str, metric: str) -> ItemScores | None:
    try:
        if "_items" in side:   # an lm-eval output directory's samples file, read with its results
            path, records = side["_items"][task]
            return records_scores(path, records, metric)
        return item_scores(side.get("_run_dir"), side["name"], task, metric)
    except ItemFileError as exc:
        raise GateInputError(str(exc)) from None


def undeployable(side: dict, role: str) -> tuple[str, str] | None:
    """Why a gate side cannot be deployed (recorded failed or unsupported): (a short label, the same with the
    recorded reason), or None. A failed variant may keep the accuracy its evals scored before a later stage
    crashed; an unsupported one was scored in-process because the engine cannot serve it: neither can ship."""
    status = side.get("status", "ok")
    if status == "ok":
        return None
    scored = "scored in-process, not served" if side.get("eval_backend") == "inprocess" else "recorded before it failed"
    reason = side.get("reason") or "no reason recorded"
    return (f"{role} {side['name']} {status}, accuracy {scored}",
            f"{role} {side['name']} is {status} ({reason}); its accuracy was {scored}")


def check_deployable(baseline: dict, candidate: dict, allow_undeployable: bool) -> tuple[str, str]:
    """GateInputError when either side cannot be deployed, unless allowed; then (label, detail) for the report."""
    found = [(side, why) for side, role in ((candidate, "candidate"), (baseline, "baseline"))
             if (why := undeployable(side, role))]
    if found and not allow_undeployable:
        side, (_, detail) = found[0]
        what = ("it cannot be deployed, and a deploy gate never passes it" if side is candidate else
                "it was never deployed as measured, so it is no reference for a deploy gate")
        raise GateInputError(f"{side['_path']}: {detail}: {what} (--allow-undeployable gates the accuracy anyway)")
    return "; ".join(why[0] for _, why in found), "; ".join(why[1] for _, why in found)


def check_decidable(task: str, n_baseline: int, policy: Gates, policy_source: str, where: str) -> None:
    """A policy that can never decide on the baseline's item count is a mistake, not an inconclusive result."""
    if policy.min_n > n_baseline:
        raise GateInputError(f"{policy_source}: min_n {policy.min_n} but the baseline scored {n_baseline} items of "
                             f"{task} ({where}): no check of {task} can ever decide; set min_n to at most "
                             f"{n_baseline} or score more items")


def _check_unchanged_can_pass(task: str, base_items: ItemScores, policy: Gates, margin: float, better_up: bool,
                              policy_source: str) -> None:
    """Under non-inferiority, a candidate that scores every item as the baseline did must be able to pass:
    otherwise the margin is narrower than the interval these items allow and every run is inconclusive."""
    if policy.rule != "non-inferiority":
        return
    same = paired_scores(base_items, base_items, task, policy.confidence, better_up)
    if same.get("undecidable"):   # unbounded scores: the interval comes from the candidate's spread alone
        return
    best_high = -same["ci95"][0]
    if best_high > margin + MARGIN_TOLERANCE:
        raise GateInputError(
            f"{policy_source}: rule non-inferiority can never pass {task} on {len(base_items.items)} items: a "
            f"candidate that scores every item as the baseline did has upper bound {best_high:+.3f} > margin "
            f"{margin:.3f}; widen the margin (max_drop, per_task, max_relative_drop) or score more items")


def accuracy_check(task: str, base: dict, cand: dict, baseline: dict, candidate: dict, policy: Gates,
                   allow_partial_overlap: bool = False, policy_source: str = "default policy",
                   family_confidence: float | None = None) -> Check:
    """family_confidence: where set, the interval at that confidence is kept too (`family_ci`), for the
    family-wise correction of a non-inferiority regression call (reports/family.py)."""
    for entry, side in ((base, baseline), (cand, candidate)):
        _refuse_non_mean(task, entry, side["_path"])
    if cand["metric"] != base["metric"]:
        raise GateInputError(f"{candidate['_path']}: {task}: metric {cand['metric']!r}, baseline has "
                             f"{base['metric']!r}")
    better_up = higher_is_better(base)
    margin = policy.margin_for(task, base["value"])
    base_items, cand_items = side_items(baseline, task, base["metric"]), side_items(candidate, task, base["metric"])
    if base_items and cand_items:
        _check_is_mean(task, base, base_items)
        _check_is_mean(task, cand, cand_items)
        check_decidable(task, len(base_items.items), policy, policy_source, str(base_items.path))
        _check_unchanged_can_pass(task, base_items, policy, margin, better_up, policy_source)
        try:
            stats = paired_scores(base_items, cand_items, task, policy.confidence, better_up)
            if family_confidence:
                stats["family_ci"] = paired_scores(base_items, cand_items, task, family_confidence, better_up)["ci95"]
        except ItemMismatch as exc:
            raise GateInputError(f"{cand_items.path}: {exc}") from None
        nb, nc, n = stats["n_baseline"], stats["n_candidate"], stats["n_paired"]
        evidence = f"{n} paired items"
        if not nb == nc == n:
            evidence += f" of {nb} baseline / {nc} candidate items (partial overlap)"
            if not allow_partial_overlap:
                raise GateInputError(f"{cand_items.path}: {task}: the sides were scored on different items "
                                     f"(baseline {nb}, candidate {nc}, {n} in common); re-run on the same items, "
                                     f"or pass --allow-partial-overlap to gate on the {n} shared items")
        drop, low, high = -stats["diff"], -stats["ci95"][1], -stats["ci95"][0]
        verdict = (Verdict(INCONCLUSIVE, stats["undecidable"]) if stats.get("undecidable") else
                   decide(policy.rule, drop, low, high, n, margin, policy.min_n, policy.confidence,
                          stats["test"], stats["p"], stats.get("sd")))
        return Check(task, base["metric"], stats["baseline_mean"], stats["candidate_mean"], drop, margin, verdict,
                     stats, evidence, nb, nc, n)
    if policy.rule != "point":
        raise GateInputError(f"{baseline['_path']}: {task}: rule {policy.rule!r} needs per-item scores on both "
                             f"sides (variants/<name>/evals/{task}.jsonl next to results.json)")
    check_decidable(task, base["n"], policy, policy_source, baseline["_path"])
    if base["n"] != cand["n"]:
        raise GateInputError(f"{candidate['_path']}: {task}: no per-item files and the sides scored different "
                             f"numbers of items ({base['n']} vs {cand['n']}): their means are not comparable")
    drop = (base["value"] - cand["value"]) * (1 if better_up else -1)
    verdict = decide("point", drop, drop, drop, base["n"], margin, policy.min_n, policy.confidence)
    return Check(task, base["metric"], base["value"], cand["value"], drop, margin, verdict, {},
                 f"whole-run means of {base['n']} items each (no per-item files; items not verified equal)",
                 base["n"], cand["n"], None)


def compare(baseline: dict, candidate: dict, policy: Gates, allow_partial_overlap: bool = False,
            policy_source: str = "defaults", allow_undeployable: bool = False,
            family_confidence: float | None = None) -> list[Check]:
    """Every check of the candidate against the baseline. A side recorded failed or unsupported is refused
    (GateInputError) unless allow_undeployable: then only accuracy is gated and every check says why."""
    caveat, detail = check_deployable(baseline, candidate, allow_undeployable)
    checks = []
    for task, base in baseline.get("accuracy", {}).items():
        cand = candidate.get("accuracy", {}).get(task)
        unmeasurable = ((candidate.get("not_measurable") or {}).get("tasks") or {}).get(task)
        if cand is None and unmeasurable:
            raise GateInputError(f"{candidate['_path']}: task {task} is not measurable on candidate "
                                 f"{candidate['name']}'s engine ({unmeasurable}): the gate cannot decide it")
        if cand is None:
            raise GateInputError(f"{candidate['_path']}: candidate {candidate['name']} has no result for task "
                                 f"{task} (status {candidate.get('status')}: {candidate.get('reason')})")
        checks.append(accuracy_check(task, base, cand, baseline, candidate, policy, allow_partial_overlap,
                                     policy_where(policy_source), family_confidence))
    if not checks:
        raise GateInputError(f"{baseline['_path']}: baseline {baseline['name']} has no accuracy results")
    checks += length_checks(baseline, candidate, policy)
    checks += reasoning_checks(baseline, candidate, policy, side_items)
    if caveat:   # a variant that cannot be served has no deployable perf to gate
        for check in checks:
            check.caveat, check.caveat_detail = caveat, detail + "; perf not gated"
        return checks
    return checks + perf_checks(baseline, candidate, policy)


def outcome(checks: list[Check]) -> str:
    outcomes = {c.verdict.outcome for c in checks}
    return REGRESSION if REGRESSION in outcomes else INCONCLUSIVE if INCONCLUSIVE in outcomes else PASS

