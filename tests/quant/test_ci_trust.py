"""examples/ci's trust model, read off the workflows as GitHub reads them: a pull request's job holds no secret, a
token that can only read the code and comment, the trusted caches only to read and its own cache in the job's
temporary directory; publishing and the hub token are on the trusted side only, each token in the steps that
need it; actions pinned to commits; checkouts keep no credentials; environments outside the work tree; a run
superseded by a new push cancelled; the required job never filtered by path. What these settings do when the
jobs run is tested in test_ci_workflow.py."""

from __future__ import annotations

import re

from tests.helpers import REPO
from tests.workflow_runner import load, permissions

CI = REPO / "examples" / "ci"
GATE, TRUSTED = load(CI / "quant-gate.yml"), load(CI / "quant-baseline.yml")
PINNED = re.compile(r"^actions/(checkout|upload-artifact)@[0-9a-f]{40}$")


def steps(workflow: dict):
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_a_pull_requests_job_holds_no_secret_and_a_token_that_reads_and_comments():
    text = (CI / "quant-gate.yml").read_text()
    assert "secrets." not in text and "HF_TOKEN" not in text
    assert GATE["permissions"] == {} and permissions(GATE, "gate") == {
        "metadata": "read", "contents": "read", "pull-requests": "write"}
    assert not any(str(step.get("run", "")).count("quant export") for step in steps(GATE))
    env = GATE["env"]
    assert env["QUANT_CACHE_TRUST"] == "pull-request" and env["HF_HUB_OFFLINE"] == "1"
    assert env["QUANT_CACHE_READ_FROM"] == TRUSTED["env"]["QUANT_CACHE_DIR"]
    assert env["HF_HUB_CACHE"] == TRUSTED["env"]["HF_HOME"] + "/hub"
    assert "QUANT_CACHE_DIR" not in env
    sweeps = [step["run"] for step in steps(GATE) if "quant\" sweep" in step.get("run", "")]
    assert sweeps and all('--cache-dir "$RUNNER_TEMP/stage-cache"' in run for run in sweeps)
    assert all(not env[k].startswith("/srv/quant-suite/trusted") for k in ("HF_HOME", "QUANT_MAIN_VENV"))


def test_the_gate_reads_its_policy_from_the_base_branch():
    runs = {step.get("id"): step.get("run", "") for step in steps(GATE)}
    assert 'git --no-replace-objects show "HEAD^1:$POLICY"' in runs["policy"]
    assert '--policy "$RUNNER_TEMP/gate-policy.yaml"' in runs["gate"]
    checkout = next(step for step in steps(GATE) if step.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 2


def test_the_policy_and_the_baseline_are_taken_before_any_pull_request_code_runs():
    order = [step.get("id") or step.get("uses", "").split("@")[0] for step in GATE["jobs"]["gate"]["steps"]]
    assert order.index("policy") < order.index("setup") and order.index("baseline") < order.index("setup")
    assert order[:order.index("policy")] == ["trust", "actions/checkout"]   # nothing of the pull request's ran


def test_a_git_replace_planted_in_the_workspace_does_not_change_the_policy_read(tmp_path):
    """The attack: a pull request's Makefile runs `git replace` so that the base branch's policy reads as its
    own (or an earlier job left such a replacement in the runner's workspace)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "gate-policy.yaml").write_text("rule: paired\nmax_drop: 0.02\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "pr")
    (tmp_path / "x").write_text("x")
    git("add", "-A")
    git("commit", "-qm", "pr")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "-m", "merge", "pr")
    forged = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=tmp_path, check=True, capture_output=True,
                            text=True, input="rule: point\nmax_drop: 1.0\n").stdout.strip()
    git("replace", git("rev-parse", "HEAD^1:ci/gate-policy.yaml"), forged)
    assert "max_drop: 1.0" in git("show", "HEAD^1:ci/gate-policy.yaml")   # the attack works on a plain read
    step = next(step["run"] for step in steps(GATE) if step.get("id") == "policy")
    temp = tmp_path / "temp"
    temp.mkdir()
    subprocess.run(["bash", "-e", "-c", step], cwd=tmp_path, check=True,
                   env={"PATH": "/usr/bin:/bin", "POLICY": "ci/gate-policy.yaml", "RUNNER_TEMP": str(temp)})
    assert (temp / "gate-policy.yaml").read_text() == "rule: paired\nmax_drop: 0.02\n"


def test_publishing_and_the_hub_token_are_on_the_trusted_side_in_the_steps_that_need_them():
    assert TRUSTED["on"]["push"] == {"branches": ["main"]} and "pull_request" not in TRUSTED["on"]
    assert TRUSTED["permissions"] == {} and "HF_TOKEN" not in TRUSTED["env"]
    for name, job in TRUSTED["jobs"].items():
        assert job["environment"] == "quant-trusted", name
        assert "quant-trusted" in job["runs-on"] and "HF_TOKEN" not in job.get("env", {}), name
        for step in job["steps"]:
            token = (step.get("env") or {}).get("HF_TOKEN")
            needs = any(f"quant\" {command}" in step.get("run", "") for command in ("doctor", "sweep", "export"))
            assert (token == "${{ secrets.HF_TOKEN }}") == needs, (name, step.get("id"))
    assert TRUSTED["jobs"]["export"]["if"] == "github.event_name == 'push' && vars.QUANT_EXPORT_REPO != ''"
    assert TRUSTED["jobs"]["baseline"]["if"] == "github.event_name != 'push'"
    assert permissions(TRUSTED, "baseline")["contents"] == "write"
    assert permissions(TRUSTED, "export") == {"metadata": "read", "contents": "read"}


def test_actions_are_pinned_to_commits_and_checkouts_keep_no_credentials():
    for workflow in (GATE, TRUSTED):
        for step in steps(workflow):
            if "uses" in step:
                assert PINNED.match(step["uses"]), step["uses"]
                if step["uses"].startswith("actions/checkout"):
                    assert step["with"]["persist-credentials"] is False


def test_the_runner_stays_warm_and_each_job_has_its_own_gpu():
    for workflow in (GATE, TRUSTED):
        assert {"QUANT_MAIN_VENV", "QUANT_SERVE_VENV"} <= set(workflow["env"])
        assert all(workflow["env"][k].startswith("/srv/") for k in ("QUANT_MAIN_VENV", "QUANT_SERVE_VENV"))
        for job in workflow["jobs"].values():
            assert not any(str(step.get("uses", "")).startswith("actions/cache") for step in job["steps"])
            ids = [step.get("id") for step in job["steps"]]
            assert ids[ids.index("setup") + 1] == "doctor"   # doctor first, after set-up
            doctor = next(step["run"] for step in job["steps"] if step.get("id") == "doctor")
            assert doctor.startswith(': "${CUDA_VISIBLE_DEVICES:?')
            assert "concurrency" in job
    assert GATE["jobs"]["gate"]["concurrency"] == {
        "group": "quant-gate-${{ github.event.pull_request.number }}", "cancel-in-progress": True}
    assert TRUSTED["jobs"]["baseline"]["concurrency"]["cancel-in-progress"] is False
    assert GATE["env"]["QUANT_MAIN_VENV"] != TRUSTED["env"]["QUANT_MAIN_VENV"]


def test_the_required_job_runs_on_every_pull_request():
    trigger = GATE["on"]["pull_request"]
    assert "paths" not in trigger and "paths-ignore" not in trigger and "branches" not in trigger
    assert set(trigger["types"]) == {"opened", "synchronize", "reopened", "labeled"}
    assert "if" not in GATE["jobs"]["gate"]   # a skipped required check would count as passed
    assert GATE["jobs"]["gate"]["steps"][0]["id"] == "trust"   # before the pull request's code is checked out
