"""Models and task data from the Hugging Face hub, fetched as huggingface_hub and datasets fetch them: into the
standard cache (HF_HOME / HF_HUB_CACHE), with a token from HF_TOKEN for gated repos, from HF_ENDPOINT, and from
the cache only when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE say so. Every failure becomes one line that says what
to do (`HubError`): an unknown id or revision, a gated repo without a granted token, a rejected token, an
unreachable hub, a repo missing from the cache when offline."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

# Weights in formats other than the one transformers and vLLM load from a repo that has safetensors: Llama's
# `original/` checkpoint alone doubles an 8B download. Offline the same patterns apply, so a snapshot fetched
# online counts as complete.
NOT_SERVED = ["original/*", "*.pth", "*.pt", "*.gguf", "*.onnx", "*.h5", "*.msgpack", "*.ot", "*.tflite",
              "*.mlmodel", "flax_model*", "tf_model*", "rust_model*"]


# What the checks before work read from a hub repo: configuration, tokenizer and chat template.
SMALL_FILES = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


class HubError(Exception):
    """A hub model or dataset that cannot be had; the message is one line for the user."""


def is_hub_id(ref: str) -> bool:
    """`org/name`: the form of a hub repo id (a local path is tried first by the caller)."""
    org, _, name = ref.partition("/")
    return bool(org and name) and "/" not in name and not ref.startswith((".", "~")) and " " not in ref


def fetch_config(repo_id: str, revision: str | None) -> Path:
    """The model's config.json, then its small files (tokenizer, chat template), for the checks before any work
    (shapes; calibration `messages` rendered with the chat template); no weights. Returns the snapshot
    directory. A problem with the repo shows on config.json already."""
    from huggingface_hub import hf_hub_download, snapshot_download
    try:
        config = Path(hf_hub_download(repo_id, "config.json", revision=revision))
    except Exception as exc:  # noqa: BLE001 - the client raises many kinds; each becomes one line
        raise HubError(explain(exc, "model", repo_id, revision)) from None
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=SMALL_FILES))
    except Exception:  # noqa: BLE001 - e.g. offline with config.json alone cached: what needs more says so
        return config.parent


def fetch_model(repo_id: str, revision: str | None, log: Callable[[str], None] = print) -> Path:
    """The model's snapshot directory, fetched once into the HF cache (only what is missing is downloaded)."""
    from huggingface_hub import constants, snapshot_download

    ignore = NOT_SERVED + ["*.bin"]   # offline, or where the repo has safetensors: those are what is loaded
    if not constants.is_offline_mode():
        files = _repo_files(repo_id, revision)
        if not any(f.endswith(".safetensors") for f in files):
            ignore = NOT_SERVED
        log(f"model {_name(repo_id, revision)}: fetching from {constants.ENDPOINT} into {constants.HF_HUB_CACHE} "
            "(files already there are not fetched again)")
    start = time.time()
    try:
        path = Path(snapshot_download(repo_id, revision=revision, ignore_patterns=ignore))
    except Exception as exc:  # noqa: BLE001
        raise HubError(explain(exc, "model", repo_id, revision)) from None
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    log(f"model {_name(repo_id, revision)}: {size / 1e9:.2f} GB in {path} ({time.time() - start:.1f}s)")
    return path


def _repo_files(repo_id: str, revision: str | None) -> list[str]:
    from huggingface_hub import HfApi
    try:
        info = HfApi().model_info(repo_id, revision=revision)
    except Exception as exc:  # noqa: BLE001
        raise HubError(explain(exc, "model", repo_id, revision)) from None
    return [s.rfilename for s in info.siblings or []]


def dataset_problem(path: str, name: str | None, revision: str | None) -> str | None:
    """Why lm-eval could not load this hub dataset (config `name`), or None: resolved as `datasets` resolves it
    (its card and file listing, or its cache when offline), no data downloaded."""
    import datasets
    try:
        datasets.load_dataset_builder(path, name, revision=revision)
    except Exception as exc:  # noqa: BLE001
        return explain(exc, "dataset", path, revision, config=name)
    return None


def explain(exc: Exception, kind: str, repo_id: str, revision: str | None, config: str | None = None) -> str:
    """One line for a hub client's exception: what happened and what to do."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RemoteEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    what = f"{kind} {_name(repo_id, revision)}"
    offline_var = "HF_DATASETS_OFFLINE" if kind == "dataset" else "HF_HUB_OFFLINE"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    chain = _chain(exc)
    said = str(exc)   # datasets words what it found: "... is a gated dataset", "... doesn't exist on the Hub"
    if any(isinstance(e, GatedRepoError) for e in chain) or "is a gated dataset" in said:
        if status is None and "is a gated dataset" in said and os.environ.get("HF_TOKEN"):
            status = 403
        if status == 403:
            return (f"{what} is gated and the token in HF_TOKEN has not been granted access: request access on "
                    f"its page on the hub, then run again")
        return f"{what} is gated: set HF_TOKEN to a token of an account that was granted access"
    if any(isinstance(e, HfHubHTTPError) and "Invalid credentials" in str(e) for e in chain) or (
            status == 401 and not isinstance(exc, RepositoryNotFoundError)):
        return f"{what}: the hub rejected the token in HF_TOKEN (invalid credentials); set a valid one or unset it"
    if any(isinstance(e, RevisionNotFoundError) for e in chain):
        return f"{what}: the hub has no revision {revision!r} of {repo_id} (a branch, tag or commit)"
    if any(isinstance(e, RepositoryNotFoundError) for e in chain) or "doesn't exist on the Hub" in said:
        return (f"{what}: no such {kind} on the hub ({constants.ENDPOINT}); if it is private, set HF_TOKEN to a "
                "token that can read it")
    if kind == "model" and any(isinstance(e, RemoteEntryNotFoundError) for e in chain):
        return f"{what} has no config.json: not a transformers model repo"
    offline = any(isinstance(e, OfflineModeIsEnabled) for e in chain) or (
        isinstance(exc, LocalEntryNotFoundError) and "outgoing traffic has been disabled" in str(exc)) or (
        kind == "dataset" and _datasets_offline() and "offline" in str(exc).lower())
    if offline or (kind == "model" and constants.is_offline_mode()):
        return (f"{what} is not in the local Hugging Face cache and {offline_var}=1 forbids fetching it: unset "
                f"{offline_var} to fetch it once")
    network = [e for e in chain if type(e).__module__.startswith(("httpx", "httpcore", "socket", "ssl"))
               or isinstance(e, (ConnectionError, TimeoutError))]
    if network or isinstance(exc, LocalEntryNotFoundError):
        reason = type(network[0]).__name__ if network else "not reachable"
        return (f"{what}: the hub at {constants.ENDPOINT} cannot be reached ({reason}) and it is not in the local "
                f"cache; check the network or HF_ENDPOINT")
    if kind == "dataset" and config is not None and "BuilderConfig" in str(exc):
        return f"{what} has no config {config!r} ({_first_line(exc)})"
    return f"{what}: {type(exc).__name__}: {_first_line(exc)}"


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    while exc is not None and exc not in found:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


def _datasets_offline() -> bool:
    import datasets.config
    return bool(datasets.config.HF_HUB_OFFLINE)


def _name(repo_id: str, revision: str | None) -> str:
    return f"{repo_id}@{revision}" if revision else repo_id


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0][:200] if lines else ""
