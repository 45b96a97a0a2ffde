"""A hub dataset id as the calibration source, through the real `datasets` client against the stand-in hub
(tests/hub_standin.py): loaded online into the standard cache, read from that cache offline, a split the repo
lacks and a gated repo without a token each one clear error."""

import json
import os
import subprocess
import sys

from tests.helpers import REPO
from tests.hub_standin import GRANTED_TOKEN, HubStandin, tiny_dataset_files

ROWS = {"train": [{"text": f"train {i}"} for i in range(6)], "test": [{"text": f"test {i}"} for i in range(3)]}
BUILD = """
import json, sys
from core.recipe import Calibration
from quantize.calibration import calibration_texts, source_problems
calibration = Calibration(**json.loads(sys.argv[1]))
problems = source_problems(calibration)
print(json.dumps({"problems": problems, "texts": [] if problems else calibration_texts(calibration)}))
"""


def _build(env: dict, **fields) -> dict:
    """The calibration set built in a fresh interpreter: huggingface_hub reads HF_ENDPOINT when imported."""
    proc = subprocess.run([sys.executable, "-c", BUILD, json.dumps(fields)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_hub_dataset_online_then_from_the_cache_offline(tmp_path):
    with HubStandin() as hub:
        hub.add_dataset("org/calib", tiny_dataset_files(ROWS))
        env = hub.env(tmp_path)
        online = _build(env, source="org/calib", num_samples=6, seed=1)
        assert online["problems"] == [] and sorted(online["texts"]) == [f"train {i}" for i in range(6)]
        assert _build(env, source="org/calib", split="test", num_samples=3, shuffle=False)["texts"] == \
            ["test 0", "test 1", "test 2"]
        assert _build(env, source="org/calib", split="validation", num_samples=2)["problems"] == [
            "split 'validation' is not in dataset 'org/calib' (splits: train, test)"]
        assert hub.unanswered == []
    offline = _build({**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, source="org/calib", num_samples=6,
                     seed=1)
    assert offline == online


def test_a_gated_hub_dataset_needs_a_token(tmp_path):
    with HubStandin() as hub:
        hub.add_dataset("org/gated", tiny_dataset_files(ROWS), gated=True)
        (problem,) = _build(hub.env(tmp_path), source="org/gated", num_samples=2)["problems"]
        assert problem.startswith("calibration source 'org/gated' is not a local file or directory, and loading "
                                  "it as a hub dataset failed: ")
        granted = _build(hub.env(tmp_path / "granted", token=GRANTED_TOKEN), source="org/gated", num_samples=2)
        assert granted["problems"] == [] and len(granted["texts"]) == 2
