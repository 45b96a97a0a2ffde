"""The stand-in hub answers the real huggingface_hub and datasets clients as the hub does: a model snapshot, a
dataset with a named config, revisions, and the gated-repo errors; nothing the clients ask goes unanswered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import DEMO_MODEL, REPO
from tests.hub_standin import GRANTED_TOKEN, NOT_GRANTED_TOKEN, HubStandin, tiny_dataset_files

CLIENT = r"""
import json, os, sys
from huggingface_hub import hf_hub_download, snapshot_download
import datasets
out = {"snapshot": sorted(os.listdir(snapshot_download("org/tiny")))}
out["v1"] = json.load(open(hf_hub_download("org/tiny", "config.json", revision="v1")))
rows = datasets.load_dataset("org/data", "main", split="test")
out["rows"] = [dict(r) for r in rows]
for token in (None, sys.argv[1], "hf_unknown"):
    try:
        hf_hub_download("org/gated", "config.json", token=token)
        out[str(token)] = "ok"
    except Exception as exc:
        out[str(token)] = [type(exc).__name__, getattr(getattr(exc, "response", None), "status_code", None)]
out["granted"] = os.path.basename(hf_hub_download("org/gated", "config.json", token=sys.argv[2]))
print(json.dumps(out))
"""


def test_real_clients_fetch_models_datasets_and_meet_gated_repos(tmp_path):
    with HubStandin() as hub:
        hub.add_model("org/tiny", {p.name: p for p in DEMO_MODEL.iterdir()})
        hub.add_model("org/tiny", {"config.json": b'{"revision": "v1"}'}, revision="v1")
        hub.add_model("org/gated", {"config.json": b"{}"}, gated=True)
        rows = [{"question": "1+1", "answer": "2"}, {"question": "2+2", "answer": "4"}]
        hub.add_dataset("org/data", tiny_dataset_files({"test": rows}, config="main"))
        env = {**os.environ, **hub.env(tmp_path)}
        proc = subprocess.run([sys.executable, "-c", CLIENT, NOT_GRANTED_TOKEN, GRANTED_TOKEN], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert hub.unanswered == []
    assert out["snapshot"] == sorted(p.name for p in DEMO_MODEL.iterdir())
    assert out["v1"] == {"revision": "v1"}
    assert out["rows"] == rows
    assert out["None"] == ["GatedRepoError", 401]
    assert out[NOT_GRANTED_TOKEN] == ["GatedRepoError", 403]
    assert out["hf_unknown"] == ["HfHubHTTPError", 401]
    assert out["granted"] == "config.json"
    assert (tmp_path / "hf-home/hub/models--org--tiny").is_dir()   # the standard cache
