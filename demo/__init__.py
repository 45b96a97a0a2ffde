"""The embedded demo, in one place: the shipped model (model/, `model: demo` in a recipe), its tokenizer and
trainer (`quant demo build-model`), the generators of the demo tasks and their test sets (tasks/, `quant demo
build-tasks`; the lm-eval task YAMLs that score them live with every other task in evals/tasks/demo_*), and
the calibration source "demo" (calibration.py). Like core/, it imports no other project package."""

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"
# The same model with outlier channels in its activations (outliers.py; `model: demo-outliers`).
DEMO_OUTLIERS_DIR = Path(__file__).resolve().parent / "model-outliers"
