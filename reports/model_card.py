"""The model card (README.md) of an exported variant: the hub's metadata header, then what the variant is (base
model, scheme, modules kept in 16-bit, calibration set and its hash), how it scored against the base model (per
task with intervals, recovery, the paired test), the gate's verdict and policy, perf at the measured levels with
the machine and engine, the serve command for the folder, and the suite's version. Every number is read from
the run's results.json through the typed schema; docs/outputs.md describes the card."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.foreign_text import markdown_cell
from core.results import Results, VariantRecord
from reports.choose import deploy_command, engine_label
from reports.gate_output import LABEL
from reports.gate_run_output import as_text as gate_text
from reports.markdown import num, percent
from reports.model_card_gate import CardVerdict
from reports.model_card_perf import perf_section
from reports.table import rows_for_task

NOT_DEPLOYABLE = "NOT DEPLOYABLE"


@dataclass
class CardFolder:
    """What the export put in the folder, and what the card needs to know about it."""
    name: str                          # the folder's name: the serve command's --model, run from its parent
    suite_version: str                 # "quant-suite 0.1.0"
    files: list[str] = field(default_factory=list)   # the checkpoint's files, copied
    base_model: str | None = None      # the base model's hub id, where it is a hub model
    hub_model: str | None = None       # the weights are this hub model, not copied
    hub_revision: str | None = None
    license: str | None = None         # the base model's, where known
    push_repo: str | None = None       # the hub repo the folder is pushed to
    undeployable: str | None = None    # why it cannot be deployed (exported with --allow-undeployable)
    gate_command: str = ""


def _quantized(record: VariantRecord) -> bool:
    """Made by quantizing (a scheme, a format of quantized weights), not the original model or a 16-bit copy."""
    m = record.manifest or {}
    return m.get("source") != "original model" and bool(m.get("scheme") or m.get("format")
                                                        or m.get("quantized_linear_weights"))


def _base_model(results: Results) -> str:
    return "quant-suite's demo model" if results.model == "demo" else str(results.model)


def _metadata(results: Results, name: str, folder: CardFolder) -> dict:
    record, manifest = results.variants[name], results.variants[name].manifest or {}
    meta: dict = {}
    if folder.base_model:
        meta["base_model"] = folder.base_model
        if _quantized(record):
            meta["base_model_relation"] = "quantized"
    if folder.license:
        meta["license"] = folder.license
    scheme = manifest.get("scheme")
    tags = ["quant-suite", *(["quantized"] if _quantized(record) else []),
            *([str(manifest["format"])] if manifest.get("format") else []),
            *([str(scheme).lower()] if scheme and _quantized(record) else []),
            *(["compressed-tensors"] if manifest.get("backend") == "llmcompressor" else []),
            *(["not-deployable"] if folder.undeployable else [])]
    meta["tags"] = list(dict.fromkeys(tags))
    meta["pipeline_tag"] = "text-generation"
    return meta


def _what_it_is(results: Results, name: str, folder: CardFolder) -> list[str]:
    record, m = results.variants[name], results.variants[name].manifest or {}
    cal = m.get("calibration") or {}
    revision = f" (revision {folder.hub_revision})" if folder.hub_revision else ""
    rows = [("base model", _base_model(results) + revision),
            ("variant", f"{name}" + (f": {record.description}" if record.description else "")),
            ("scheme", str(m.get("scheme_description") or m.get("scheme") or "-")),
            ("algorithm", " + ".join(filter(None, [f"SmoothQuant {m['smoothquant']}" if m.get("smoothquant") else "",
                                                   str(m.get("algorithm") or "")])) or "-")]
    if _quantized(record):
        kept = m.get("ignore_expanded") or m.get("ignore") or []
        rows += [("kept in 16-bit", ", ".join(map(str, kept)) or "none"),
                 ("format", str(m.get("format") or "-")),
                 ("bits per weight", f"{m['bits_per_weight_quantized']:.4g} (quantized Linears), "
                                     f"{m.get('bits_per_weight_all_linear') or 0:.4g} (all Linears)"
                  if m.get("bits_per_weight_quantized") else "-"),
                 ("calibration", (f"{cal.get('source')}: {cal.get('num_samples')} samples of at most "
                                  f"{cal.get('max_seq_length')} tokens, seed {cal.get('seed')}") if cal else
                  "none (a scheme that needs no data)"),
                 ("calibration texts sha256", str(cal.get("texts_sha256") or "-")),
                 ("quantized with", ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items()) or "-")]
    rows.append(("size", f"{record.size_bytes / 1e6:.2f} MB" if record.size_bytes else "-"))
    lines = ["## What it is", "", "| | |", "|---|---|"]
    return lines + [f"| {k} | {markdown_cell(v)} |" for k, v in rows] + [""]


def _paired(p: dict | None) -> str:
    if not p:
        return "- (no per-item files)"
    shown = f", p={p['p']:.3g} ({p['test']})" if p.get("p") is not None else f" ({p['test']})" if p.get("test") else ""
    return f"Δ [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}], −{p['lost']}/+{p['gained']} items{shown}"


def _accuracy(results: Results, name: str, run_dir: Path | None) -> list[str]:
    baseline = results.baseline
    lines = ["## Accuracy against the base model", "",
             f"Each task's score on this variant and on the baseline `{baseline}` (the base model as measured in "
             "the same run, served by the same engine), with 95% intervals; recovery is the variant's score over "
             "the baseline's (the reverse where lower is better); the paired test compares the two on the same "
             "items (Δ = variant − baseline).", "",
             "| task | metric | n | accuracy [95% CI] | baseline [95% CI] | Δ | recovery | paired test |",
             "|---|---|---|---|---|---|---|---|"]
    base = results.baseline_record
    for task in results.tasks():
        acc = results.variants[name].accuracy.get(task)
        if acc is None:
            lines.append(f"| {task} | - | - | not scored | - | - | - | - |")
            continue
        ref = base.accuracy.get(task)
        row = next(r for r in rows_for_task(results, task, run_dir) if r.variant == name)
        interval = lambda a: f"{a.value:.3f} [{a.ci95[0]:.3f}, {a.ci95[1]:.3f}]"
        lines.append(f"| {task} | {acc.metric} | {acc.n} | {interval(acc)} | {interval(ref) if ref else '-'} | "
                     f"{num(row.delta, '+.3f')} | {percent(row.recovery)} | "
                     f"{'baseline' if name == baseline else markdown_cell(_paired(row.paired))} |")
    return lines + [""]


def _policy_line(verdict: CardVerdict) -> str:
    p = verdict.policy
    if p is None:
        return ""
    per_task = "".join(f", {t} {d:g}" for t, d in p.per_task.items())
    return (f"Policy ({verdict.policy_source}): rule {p.rule}, max_drop {p.max_drop:g}{per_task}"
            + (f", max_relative_drop {p.max_relative_drop:g}" if p.max_relative_drop is not None else "")
            + f", min_n {p.min_n}, confidence {p.confidence:g}, correction {p.correction}.")


def _gate(results: Results, name: str, verdict: CardVerdict | None, folder: CardFolder) -> list[str]:
    lines = ["## Gate", ""]
    if name == results.baseline:
        return lines + [f"`{name}` is the run's baseline: the reference the other variants were gated against.", ""]
    if verdict is None:
        return lines + ["Not gated.", ""]
    if verdict.outcome is None:
        lines.append(f"**Not decided**: {verdict.why_not}")
    else:
        lines.append(f"**{LABEL[verdict.outcome]}**: `quant gate` of `{name}` against `{results.baseline}`.")
    lines += ["", _policy_line(verdict)] if verdict.policy else []
    if verdict.run is not None:
        lines += ["", "```text", gate_text(verdict.run), "```"]
    if folder.gate_command:
        lines += ["", f"Reproduce it from the run: `{folder.gate_command}`"]
    return lines + [""]


def folder_serve_command(results: Results, name: str, folder: CardFolder) -> str:
    """The command that serves the exported folder, run from the directory that holds it (or the hub model)."""
    command = deploy_command(results, name, folder.hub_model or folder.name)
    return command + (f" --revision {folder.hub_revision}" if folder.hub_revision and folder.hub_model else "")


def _serve(results: Results, name: str, folder: CardFolder) -> list[str]:
    command = folder_serve_command(results, name, folder)
    engine = engine_label(results)
    form = f", in the form of the engine it was measured on ({engine})" if engine else ""
    where = (f"The weights are the hub model `{folder.hub_model}`, not copied into this folder: the engine fetches "
             f"them{form}." if folder.hub_model else f"From the directory that holds this folder{form}:")
    lines = ["## Serve it", "", where, "", "```bash", command, "```", ""]
    if folder.push_repo:
        lines += [f"From the hub (`{folder.push_repo}`):", "", "```bash",
                  deploy_command(results, name, folder.push_repo), "```", ""]
    return lines


def _files(name: str, folder: CardFolder) -> list[str]:
    weights = (f"- the weights: not copied; the hub model `{folder.hub_model}`" if folder.hub_model else
               f"- the checkpoint's files ({len(folder.files)}): " + ", ".join(f"`{f}`" for f in folder.files)
               if folder.files else "- no checkpoint: the variant has none (it failed before one was made)")
    return ["## Files", "", weights,
            "- `quant_manifest.json`: how the checkpoint was made (scheme, modules kept, calibration, library "
            "versions)",
            "- `quant_recipe.yaml`: the recipe of the run that measured it",
            "- `README.md`: this card", ""]


def render_card(results: Results, name: str, folder: CardFolder, verdict: CardVerdict | None,
                run_dir: Path | None) -> str:
    """The README.md of the exported folder of variant `name`."""
    header = "---\n" + yaml.safe_dump(_metadata(results, name, folder), sort_keys=False) + "---\n"
    lines = []
    if folder.undeployable:
        lines += [f"> **{NOT_DEPLOYABLE}**: {markdown_cell(folder.undeployable)}; exported with --allow-undeployable. "
                  "Do not serve it.", ""]
    lines += [f"# {_base_model(results)}: {name}", "",
              f"Variant `{name}` of run `{results.recipe_name}`"
              + (f" (started {results.started})" if results.started else "")
              + f", exported by {folder.suite_version}.", ""]
    lines += _serve(results, name, folder)
    lines += _what_it_is(results, name, folder)
    lines += _accuracy(results, name, run_dir)
    lines += _gate(results, name, verdict, folder)
    lines += perf_section(results, name)
    lines += _files(name, folder)
    return header + "\n" + "\n".join(lines).rstrip() + "\n"
