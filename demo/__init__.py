"""The shipped demo model: a small Llama trained from scratch on the demo task generators."""

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "model"
