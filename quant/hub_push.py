"""`quant export --push-to-hub REPO`: the exported folder uploaded as huggingface_hub uploads a folder (HfApi:
the endpoint from HF_ENDPOINT, the token from HF_TOKEN or `hf auth login`), into a repo created private unless
the user asks for a public one. The repo ends up holding exactly the folder: files no longer in it are deleted;
a push of an unchanged folder makes no commit."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.hub import HubError, explain, is_hub_id

HUB_READ_TIMEOUT_S = 120.0


@dataclass
class Pushed:
    url: str
    commit: str
    changed: bool    # False: the hub already held exactly this folder, no commit was made


def check_push(repo_id: str) -> None:
    """What is knowable before the export: a repo id, a token, not offline. HubError (one line) otherwise."""
    from huggingface_hub import constants, get_token

    if not is_hub_id(repo_id):
        raise HubError(f"--push-to-hub {repo_id!r}: not a hub repo id (expected ORG/NAME)")
    if constants.is_offline_mode():
        raise HubError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE=1 forbids pushing; unset it to push")
    if not get_token():
        raise HubError(f"--push-to-hub {repo_id}: pushing needs a token with write access: set HF_TOKEN or run "
                       "`hf auth login`")


@contextmanager
def _policy_client():
    """The hub reached under the suite's HTTP policy (core/http_policy.py): the same proxy rule and CA bundle as
    every other client. Redirects within an upload are followed as huggingface_hub needs them (httpx drops the
    token on a redirect to another host); a read may stall at most HUB_READ_TIMEOUT_S."""
    import httpx
    from huggingface_hub import constants, set_client_factory
    from huggingface_hub.utils._http import default_client_factory, hf_request_event_hook

    from core import http_policy

    options = {**http_policy.httpx_options(constants.ENDPOINT), "follow_redirects": True}
    set_client_factory(lambda: httpx.Client(event_hooks={"request": [hf_request_event_hook]},
                                            timeout=httpx.Timeout(HUB_READ_TIMEOUT_S), **options))
    try:
        yield
    finally:
        set_client_factory(default_client_factory)


@contextmanager
def _quiet_client():
    """The client's own warning on an unchanged folder: `quant export` says it in its own line."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def push_folder(folder: Path, repo_id: str, private: bool = True) -> Pushed:
    """HubError (one line) for a push that cannot be made."""
    from huggingface_hub import HfApi

    check_push(repo_id)
    api = HfApi()
    try:
        with _policy_client():
            url = api.create_repo(repo_id, private=private, exist_ok=True)
            before = api.repo_info(repo_id).sha
            with _quiet_client():
                info = api.upload_folder(folder_path=folder, repo_id=repo_id, delete_patterns="*",
                                         commit_message=f"quant export: {folder.name}")
    except Exception as exc:  # noqa: BLE001 - the client raises many kinds; each becomes one line
        raise HubError(explain(exc, "model", repo_id, None)) from None
    return Pushed(str(url), info.oid, info.oid != before)
