"""Runs one job of a GitHub Actions workflow here, as a runner would, for the tests of examples/ci.

Its `run:` steps run in order in bash (`bash -e`, GitHub's default) in the workspace, with the workflow's, the
job's and the step's `env:`, `${{ }}` expressions substituted, and the variables a runner sets (GITHUB_*,
RUNNER_TEMP, CI). A step runs when its `if:` holds (default `success()`); a failing step fails the job unless
it has `continue-on-error: true`. What GitHub itself provides stands in here:

- `actions/checkout`: the test prepares the workspace (a fresh one per job);
- `actions/cache/restore` and `actions/cache/save`: a directory of saved caches, restored by exact key or the
  newest whose key starts with one of `restore-keys`;
- `actions/upload-artifact`: the paths are copied to an artifacts directory;
- `secrets.NAME`: the runner's `secrets` (unset ones are '', as on GitHub); `vars.NAME`: the runner's `vars`;
- a pull request from a fork (its head repository is not this one): no secrets, and a token that can only read;
- a job's `if:` (false: the job is skipped); `$GITHUB_STEP_SUMMARY`, a file in the job's temp directory;
- the `gh` CLI: tools/gh, a stand-in that serves `release download|upload` from a releases directory and
  records `pr comment`, and that refuses what the job's `permissions:` do not grant its token (GitHub's
  HTTP 403), as GitHub scopes GITHUB_TOKEN.

Any other `uses:` is an error: a workflow step this runner cannot run must not pass unnoticed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# GitHub's default for a repository's GITHUB_TOKEN where a workflow sets no `permissions:` (restricted).
DEFAULT_PERMISSIONS = {"contents": "read", "metadata": "read", "packages": "read"}
REPOSITORY = "team/models"   # the repository the workflows run in


class Null(str):
    """GitHub's null: '' in comparisons and text, and null again for any property of it."""

    def __getattr__(self, name: str) -> "Null":
        return Null()


class Context(dict):
    """An expression context: attribute access, and a missing property is null ('', as GitHub's)."""

    def __getattr__(self, name: str) -> Any:
        value = self.get(name.replace("-", "_"), self.get(name, Null()))
        return Context(value) if isinstance(value, dict) else value


@dataclass
class Step:
    name: str
    id: str | None
    outcome: str                 # success, failure, skipped
    exit_code: int | None = None
    output: str = ""
    seconds: float = 0.0


@dataclass
class Job:
    outcome: str
    steps: list[Step] = field(default_factory=list)

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if key in (s.id, s.name))

    def log(self) -> str:
        return "\n".join(f"--- {s.name} [{s.outcome}, exit {s.exit_code}, {s.seconds:.1f} s]\n{s.output}"
                         for s in self.steps)


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))   # YAML 1.1 reads the key `on` as true
    return workflow


def permissions(workflow: dict, job: str) -> dict[str, str]:
    granted = workflow["jobs"][job].get("permissions", workflow.get("permissions"))
    if granted is None:
        return dict(DEFAULT_PERMISSIONS)
    if isinstance(granted, str):   # read-all / write-all
        level = granted.split("-")[0]
        return {scope: level for scope in ("contents", "pull-requests", "issues", "actions", "packages")}
    return {"metadata": "read", **granted}


@dataclass
class Runner:
    """One machine: a workspace path reused by every job (as a runner reuses its work directory), the saved
    caches, releases and artifacts, and the environment the machine gives every step."""
    workspace: Path
    state: Path                  # caches/, releases/, artifacts/, comments.jsonl, temp/
    machine_env: dict[str, str]
    skip: dict[str, str] = field(default_factory=dict)   # step id -> the command it must be (not run here)
    secrets: dict[str, str] = field(default_factory=dict)   # the repository's secrets (`secrets.NAME`)
    vars: dict[str, str] = field(default_factory=dict)      # the repository's variables (`vars.NAME`)
    runs: int = 0

    def run_job(self, workflow: dict, job: str, event: dict, env: dict[str, str] | None = None) -> Job:
        """event: {"name": "pull_request", "ref_name": ..., "payload": {...}}; env overrides the workflow's
        env (what a user edits when they copy the workflow)."""
        self.runs += 1
        spec = workflow["jobs"][job]
        temp = self.state / "temp" / str(self.runs)
        temp.mkdir(parents=True)
        payload = event.get("payload", {})
        github = Context(token="ghs_standin", run_id=str(1000 + self.runs), event_name=event["name"],
                         ref_name=event.get("ref_name", "main"), sha=f"{self.runs:040x}", repository=REPOSITORY,
                         event=payload, workspace=str(self.workspace))
        head = payload.get("pull_request", {}).get("head", {}).get("repo", {}).get("full_name", REPOSITORY)
        fork = event["name"] == "pull_request" and head != REPOSITORY
        granted = permissions(workflow, job)
        if fork:   # GitHub gives a fork's pull request a read-only token and no secrets
            granted = {scope: "read" for scope in granted}
        secrets, self.secrets = self.secrets, ({} if fork else self.secrets)
        try:
            return self._run_job(workflow, spec, github, temp, granted, env)
        finally:
            self.secrets = secrets

    def _run_job(self, workflow: dict, spec: dict, github: Context, temp: Path, granted: dict,
                 env: dict[str, str] | None) -> Job:
        summary = temp / "step-summary.md"
        base_env = {**self.machine_env, "CI": "true", "GITHUB_ACTIONS": "true",
                    "GITHUB_WORKSPACE": str(self.workspace), "GITHUB_EVENT_NAME": github.event_name,
                    "GITHUB_REF_NAME": github.ref_name, "GITHUB_RUN_ID": github.run_id, "GITHUB_SHA": github.sha,
                    "RUNNER_TEMP": str(temp), "GH_STANDIN_STATE": str(self.state), "GITHUB_STEP_SUMMARY": str(summary),
                    "GH_STANDIN_PERMISSIONS": json.dumps(granted),
                    "PATH": f"{Path(__file__).parent / 'tools'}{os.pathsep}{self.machine_env.get('PATH', '')}"}
        env_ctx = Context()
        for layer in (workflow.get("env") or {}, env or {}, spec.get("env") or {}):
            env_ctx.update({k: self._substitute(str(v), github, env_ctx, temp) for k, v in layer.items()})
        if not self._holds(str(spec.get("if", "success()")), github, env_ctx, temp, Job("success")):
            return Job("skipped")
        result = Job("success")
        for raw in spec["steps"]:
            name = raw.get("name") or raw.get("uses") or raw["run"].splitlines()[0]
            condition = raw.get("if", "success()")
            if not self._holds(str(condition), github, env_ctx, temp, result):
                result.steps.append(Step(name, raw.get("id"), "skipped"))
                continue
            step_env = {**env_ctx, **{k: self._substitute(str(v), github, env_ctx, temp)
                                      for k, v in (raw.get("env") or {}).items()}}
            started = time.monotonic()
            step = self._run_step(raw, name, {**base_env, **step_env}, github, env_ctx, temp)
            step.seconds = time.monotonic() - started
            result.steps.append(step)
            if step.outcome == "failure" and not raw.get("continue-on-error"):
                result.outcome = "failure"
        return result

    # --- expressions ----------------------------------------------------------------------------------
    def _substitute(self, text: str, github: Context, env: Context, temp: Path) -> str:
        def value(match: re.Match) -> str:
            result = self._evaluate(match.group(1), github, env, temp, None)
            return "" if result is None else str(result)
        return EXPRESSION.sub(value, text)

    def _holds(self, condition: str, github: Context, env: Context, temp: Path, job: Job) -> bool:
        expression = EXPRESSION.fullmatch(condition.strip())
        return bool(self._evaluate(expression.group(1) if expression else condition, github, env, temp, job))

    def _evaluate(self, expression: str, github: Context, env: Context, temp: Path, job: Job | None) -> Any:
        failed = job is not None and job.outcome == "failure"

        def hash_files(*patterns: str) -> str:
            found = [p for pattern in patterns for p in glob.glob(str(self.workspace / pattern), recursive=True)
                     if Path(p).is_file()]
            return "standin-hash-" + str(len(found)) if found else ""

        python = re.sub(r"!(?!=)", " not ", expression.replace("&&", " and ").replace("||", " or "))
        python = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", python))
        names = {"github": github, "env": env, "runner": Context(temp=str(temp), os="Linux"),
                 "secrets": Context(self.secrets), "vars": Context(self.vars),
                 "always": lambda: True, "success": lambda: not failed, "failure": lambda: failed,
                 "cancelled": lambda: False, "hashFiles": hash_files}
        return eval(python, {"__builtins__": {}}, names)   # noqa: S307 - our own workflow files, in a test

    # --- steps ----------------------------------------------------------------------------------------
    def _run_step(self, raw: dict, name: str, env: dict[str, str], github: Context, env_ctx: Context,
                  temp: Path) -> Step:
        if "uses" in raw:
            inputs = {k: self._substitute(str(v), github, env_ctx, temp) for k, v in (raw.get("with") or {}).items()}
            return self._use(raw["uses"].split("@")[0], inputs, name, raw.get("id"))
        if raw.get("id") in self.skip:
            assert raw["run"].strip() == self.skip[raw["id"]], f"step {raw['id']} runs {raw['run']!r}"
            return Step(name, raw["id"], "success", 0, "(done by the test machine's own set-up)")
        script = temp / f"step-{len(list(temp.glob('step-*')))}.sh"
        script.write_text(self._substitute(raw["run"], github, env_ctx, temp))
        proc = subprocess.run(["bash", "-e", str(script)], cwd=self.workspace, env=env, capture_output=True,
                              text=True, timeout=600)
        return Step(name, raw.get("id"), "success" if proc.returncode == 0 else "failure", proc.returncode,
                    proc.stdout + proc.stderr)

    def _use(self, action: str, inputs: dict[str, str], name: str, step_id: str | None) -> Step:
        caches = self.state / "caches"
        if action == "actions/checkout":
            return Step(name, step_id, "success", 0, "(the test prepared the workspace)")
        index = caches / "index.json"   # keys in the order they were saved
        saved = json.loads(index.read_text()) if index.exists() else []
        if action == "actions/cache/restore":
            prefixes = [k.strip() for k in inputs.get("restore-keys", "").splitlines() if k.strip()]
            hit = inputs["key"] if inputs["key"] in saved else next(
                (key for prefix in prefixes for key in reversed(saved) if key.startswith(prefix)), None)
            if hit:
                shutil.copytree(caches / hit, self.workspace / inputs["path"], symlinks=True, dirs_exist_ok=True)
            return Step(name, step_id, "success", 0, f"restored {hit}" if hit else "cache miss")
        if action == "actions/cache/save":
            source = self.workspace / inputs["path"]
            if not source.is_dir() or inputs["key"] in saved:   # GitHub keeps the first cache saved under a key
                return Step(name, step_id, "success", 0, "nothing saved")
            shutil.copytree(source, caches / inputs["key"], symlinks=True)
            index.write_text(json.dumps(saved + [inputs["key"]]))
            return Step(name, step_id, "success", 0, f"saved {inputs['key']}")
        if action == "actions/upload-artifact":
            target = self.state / "artifacts" / inputs["name"]
            for pattern in inputs["path"].split():
                for path in glob.glob(str(self.workspace / pattern)):
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / Path(path).name)
            return Step(name, step_id, "success", 0, "uploaded")
        raise AssertionError(f"the test runner has no stand-in for `uses: {action}`")


def comments(state: Path) -> list[dict]:
    log = state / "comments.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def release_assets(state: Path, tag: str) -> list[str]:
    return sorted(p.name for p in (state / "releases" / tag).glob("*"))
