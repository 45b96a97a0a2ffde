"""The sensitivity stage (`quant sensitivity`, and the sweep's `sensitivity: {keep_top: K}`): a variant's per-unit
ranking (the analysis is quantize/sensitivity.py), cached by content, and its report (sensitivity.json, .md, .png)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from core.child import ChildError, call_in_child, report
from core.hashing import digest, versions
from core.memo import remembered, source_digest
from core.recipe import Recipe, Sensitivity, Variant
from core.store import Cache, atomic_path, write_json, write_text

STAGE = "sensitivity"


def ranking(cache: Cache, reporter, model_dir: Path, model_key: str, recipe: Recipe, variant: Variant,
            spec: Sensitivity | None = None, device: str = "cpu") -> dict:
    from quantize.calibration import calibration_key, calibration_texts
    from quantize.sensitivity import analyse, task_items
    from quantize.shapes import apply_unfit_policy

    spec = spec or variant.sensitivity or Sensitivity(keep_top=1)
    variant, _ = apply_unfit_policy(model_dir, variant)   # `unfit_groups: keep`: those Linears are not ranked
    args = _weight_args(variant)
    key = digest("sensitivity", 2, model_key, args, sorted(variant.ignore), calibration_key(recipe.calibration),
                 [t.model_dump(mode="json") for t in recipe.tasks], spec.by, spec.samples, spec.items_per_task,
                 versions("torch", "transformers", "compressed-tensors", "lm_eval"))
    if cache.has(STAGE, key):
        reporter.log(f"  sensitivity ranking: cached ({key})")
        return cache.load_json(STAGE, key)
    texts = calibration_texts(recipe.calibration.model_copy(update={"num_samples": spec.samples}), model_dir)
    items = task_items(recipe.tasks, spec.items_per_task) if spec.items_per_task else {}
    reporter.log(f"  sensitivity: {variant.name} weights one unit ({spec.by}) at a time, on {len(texts)} "
                 f"calibration texts and {sum(map(len, items.values()))} task items")
    started = time.time()
    with reporter.steps(f"  sensitivity ({spec.by})") as update:   # units done / total, the one being scored
        try:   # in a child process: the model (on a GPU, the allocator's pool) is gone when it returns
            result = call_in_child(analyse, model_dir, variant, texts, items, by=spec.by,
                                   max_length=recipe.calibration.max_seq_length, device=device, progress=report,
                                   on_report=update)
        except ChildError as exc:
            raise ValueError(str(exc).removeprefix("ValueError: ")) from None
    reporter.log(f"  sensitivity: {len(result['units'])} units scored in {time.time() - started:.1f}s")
    cache.save_json(STAGE, key, result)
    return result


def _weight_args(variant: Variant) -> dict:
    """The variant's weight QuantizationArgs as JSON, remembered by content (compressed-tensors imports torch:
    a cached ranking needs neither)."""
    from quantize import schemes, sensitivity
    from quantize.schemes import quant_fields

    def compute() -> dict:
        return sensitivity.weight_args(variant).model_dump(mode="json", exclude_none=True)

    key = (quant_fields(variant), versions("compressed-tensors"),
           source_digest(sensitivity.__file__, schemes.__file__))
    return remembered("sensitivity-weight-args", key, compute)


def kept_units(result: dict, spec: Sensitivity) -> tuple[list[dict], float]:
    """The units `spec` keeps in 16-bit and the mean bits per weight that leaves (over the ranked units)."""
    from quantize.sensitivity import mean_bits, within_budget

    kept = (within_budget(result, spec.max_bits_per_weight) if spec.max_bits_per_weight is not None
            else result["units"][:spec.keep_top])
    return kept, mean_bits(result, kept)


def with_kept_modules(variant: Variant, result: dict) -> tuple[Variant, list[dict], float]:
    """The variant with its kept units' modules added to `ignore` (and nothing left to rank); the kept units;
    the mean bits per weight over the ranked units."""
    kept, bits = kept_units(result, variant.sensitivity)
    modules = [m for row in kept for m in row["modules"]]
    return variant.model_copy(update={"ignore": [*variant.ignore, *modules], "sensitivity": None}), kept, bits


def render_markdown(result: dict, spec: Sensitivity | None = None) -> str:
    tasks = list(result["baseline_loss"])
    lines = [f"# Sensitivity of {result['variant']} ({result['by']}s)", "",
             f"Each unit alone quantized with the variant's weights ({weights_label(result['weights'])}), round to "
             f"nearest; the rest in 16-bit. *KL*: mean KL divergence (nats/token) of next-token distributions from "
             f"the unquantized model's on {result['calibration_texts']} calibration texts (its top "
             f"{result['top_k']} tokens + the rest). *Δ loss*: change in mean NLL of the gold answers "
             "(task items: " + ", ".join(f"{t} {n}" for t, n in result["task_items"].items()) + ").", "",
             "| rank | unit | params | KL | " + " | ".join(f"Δ loss {t}" for t in tasks) + " |",
             "|---|---|---|---|" + "---|" * len(tasks)]
    kept, bits = kept_units(result, spec) if spec else ([], None)
    kept_names = {row["unit"] for row in kept}
    for row in result["units"]:
        mark = " ★" if row["unit"] in kept_names else ""
        lines.append(f"| {row['rank']}{mark} | {row['unit']} | {row['params']:,} | {row['kl']:.5f} | "
                     + " | ".join(f"{row['loss_delta'][t]:+.4f}" for t in tasks) + " |")
    if spec:
        rule = (f"keep_top: {spec.keep_top}" if spec.keep_top is not None
                else f"max_bits_per_weight: {spec.max_bits_per_weight:g}")
        lines += ["", f"★ = kept in 16-bit by `sensitivity: {{{rule}}}`: {len(kept)} units, "
                      f"{bits:.3f} bits per weight over the units ranked."]
    return "\n".join(lines) + "\n"


def weights_label(weights: dict) -> str:
    strategy = weights.get("strategy")
    group = f" group {weights['group_size']}" if strategy == "group" else f" per {strategy}"
    return f"int{weights.get('num_bits')} {'sym' if weights.get('symmetric', True) else 'asym'}{group}"


def render_plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["units"]
    kinds = sorted({r["unit"].rsplit(".", 1)[-1] for r in rows})
    colors = {k: plt.cm.tab10(i % 10) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(8, max(3, 0.22 * len(rows))))
    ax.barh(range(len(rows)), [max(r["kl"], 1e-9) for r in rows],
            color=[colors[r["unit"].rsplit(".", 1)[-1]] for r in rows])
    ax.set_yticks(range(len(rows)), [r["unit"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("KL vs unquantized (nats/token), one unit quantized")
    ax.set_title(f"sensitivity of {result['variant']} ({weights_label(result['weights'])})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in kinds]
    ax.legend(handles, kinds, fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def write_report(result: dict, out: Path, spec: Sensitivity | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "sensitivity.json", out / "sensitivity.md", out / "sensitivity.png"]
    markdown = render_markdown(result, spec)
    if _written(paths, result, markdown):   # a cached ranking: its plot is drawn already (matplotlib: seconds)
        return paths
    write_json(paths[0], result)
    write_text(paths[1], markdown)
    render_plot(result, paths[2])
    return paths


def _written(paths: list[Path], result: dict, markdown: str) -> bool:
    try:
        return (json.loads(paths[0].read_text()) == json.loads(json.dumps(result, default=str))
                and paths[1].read_text() == markdown and paths[2].is_file())
    except (OSError, ValueError):
        return False
