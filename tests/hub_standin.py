"""A stand-in Hugging Face hub on 127.0.0.1 for tests: the real huggingface_hub and datasets clients talk to it
through HF_ENDPOINT. Only the server is a stand-in: it answers the endpoints those clients call, with the
headers they read, and the errors the real hub sends (X-Error-Code), so what a test sees is what a user sees.

    with HubStandin() as hub:
        hub.add_model("org/tiny", {"config.json": b"{...}", "model.safetensors": Path(...)})
        hub.add_dataset("org/data", tiny_dataset_files({"test": [{"question": "1+1", "answer": "2"}]}))
        env = hub.env(tmp_path)      # HF_ENDPOINT, an empty HF cache, online: for a subprocess

Endpoints (models and datasets alike; a dataset's file URLs carry the `datasets/` prefix):
  GET  /api/{models,datasets}/{id}[/revision/{rev}]        repo info: sha, siblings
  GET  /api/{models,datasets}/{id}/tree/{rev}[/{path}]     file listing (?recursive=true)
  POST /api/{models,datasets}/{id}/paths-info/{rev}        listing of named paths (form field `paths`)
  HEAD, GET /[datasets/]{id}/resolve/{rev}/{path}          a file: ETag, X-Repo-Commit, Content-Length, Range
The write side (create_repo, upload_folder) is in tests/hub_standin_upload.py; a private repo answers only
requests with a token.
A gated repo's files need a token it was granted (`Authorization: Bearer GRANTED_TOKEN`): no token gets 401,
a token not granted 403, as on the hub; any other token is rejected on every endpoint (401, invalid
credentials). Requests nothing here answers are kept in `unanswered` (404) so a test can assert there were none.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests import hub_standin_upload as upload
from tests.hub_standin_upload import blob_id

GRANTED_TOKEN = "hf_standin_granted"        # may read every gated repo
NOT_GRANTED_TOKEN = "hf_standin_not_granted"  # a valid account that was not granted access
KINDS = {"models": "model", "datasets": "dataset"}


@dataclass
class Repo:
    kind: str                                              # "model" or "dataset"
    gated: bool = False
    private: bool = False
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)   # commit sha -> files
    refs: dict[str, str] = field(default_factory=dict)                   # branch or tag -> commit sha

    def commit_of(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


def tiny_dataset_files(splits: dict[str, list[dict]], config: str | None = None) -> dict[str, bytes]:
    """A dataset repo: one JSONL file per split, and a README whose `configs:` names them (under `config`, as
    lm-eval's `dataset_name`, when given)."""
    name = config or "default"
    lines = ["---", "configs:", f"- config_name: {name}", "  data_files:"]
    files: dict[str, bytes] = {}
    for split, rows in splits.items():
        path = f"{name}/{split}.jsonl"
        files[path] = "".join(json.dumps(row) + "\n" for row in rows).encode()
        lines += [f"  - split: {split}", f"    path: {path}"]
    files["README.md"] = ("\n".join(lines + ["---", "", "A tiny dataset served by the stand-in hub.", ""])).encode()
    return files


class HubStandin:
    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str]] = []     # (method, path) of every request, in order
        self.unanswered: list[tuple[str, str]] = []
        self.lfs: dict[str, bytes] = {}                # sha256 -> an uploaded LFS object
        self.commits_made: list[tuple[str, str]] = []  # (repo id, commit sha) of every upload's commit
        self._server: ThreadingHTTPServer | None = None

    # ---- content -------------------------------------------------------------------------------------------
    def add_model(self, repo_id: str, files: dict[str, bytes | str | Path], revision: str = "main",
                  gated: bool = False) -> str:
        return self._add("model", repo_id, files, revision, gated)

    def add_dataset(self, repo_id: str, files: dict[str, bytes | str | Path], revision: str = "main",
                    gated: bool = False) -> str:
        return self._add("dataset", repo_id, files, revision, gated)

    def _add(self, kind: str, repo_id: str, files: dict, revision: str, gated: bool, parent: str | None = None
             ) -> str:
        """Adds a commit with these files under `revision` (a branch or tag); returns its sha."""
        content = {path: _bytes(value) for path, value in files.items()}
        sha = hashlib.sha1(json.dumps([repo_id, revision, parent, sorted((p, blob_id(c)) for p, c in content.items())])
                           .encode()).hexdigest()
        repo = self.repos.setdefault((kind, repo_id), Repo(kind=kind, gated=gated))
        repo.gated = repo.gated or gated
        repo.commits[sha] = content
        repo.refs[revision] = sha
        return sha

    # ---- server --------------------------------------------------------------------------------------------
    def __enter__(self) -> "HubStandin":
        hub = self

        class Handler(_Handler):
            standin = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None, "start the stand-in first (with HubStandin() as hub)"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, home: Path, token: str | None = None) -> dict[str, str]:
        """Variables that point the real clients at this hub, online, with an empty cache under `home`."""
        env = {"HF_ENDPOINT": self.url, "HF_HOME": str(Path(home) / "hf-home"), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
               "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "10"}
        if token is not None:
            env["HF_TOKEN"] = token
        return env


def _bytes(value: bytes | str | Path) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, Path):
        return value.read_bytes()
    return value.encode()


class _Handler(BaseHTTPRequestHandler):
    standin: HubStandin
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:   # noqa: A002 - quiet: tests read `requests` instead
        pass

    def do_HEAD(self) -> None:   # noqa: N802
        self._route("HEAD")

    def do_GET(self) -> None:   # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:   # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:   # noqa: N802
        self._route("PUT")

    # ---- routing -------------------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        self.standin.requests.append((method, url.path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method in ("POST", "PUT") else b""
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip() or None
        if token not in (None, GRANTED_TOKEN, NOT_GRANTED_TOKEN):
            return self._error(401, None, "Invalid credentials in Authorization header")
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        if self._write(method, parts, body, token):
            return
        if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in KINDS:
            return self._api(method, KINDS[parts[1]], "/".join(parts[2:4]), parts[4:], query, body, token)
        kind = "dataset" if parts[:1] == ["datasets"] else "model"
        rest = parts[1:] if kind == "dataset" else parts
        if method in ("HEAD", "GET") and len(rest) >= 5 and rest[2] == "resolve":
            return self._resolve(method, kind, "/".join(rest[:2]), rest[3], "/".join(rest[4:]), token)
        self.standin.unanswered.append((method, self.path))
        self._error(404, None, f"the stand-in hub does not answer {method} {url.path}")

    def _write(self, method: str, parts: list[str], body: bytes, token: str | None) -> bool:
        """The write side's endpoints (tests/hub_standin_upload.py); False where the request is none of them."""
        if method == "POST" and parts == ["api", "repos", "create"]:
            upload.create_repo(self, body, token)
        elif method == "POST" and parts == ["api", "validate-yaml"]:
            upload.validate_yaml(self, body)
        elif method == "PUT" and len(parts) == 2 and parts[0] == "lfs-upload":
            upload.lfs_put(self, parts[1], body)
        elif method == "POST" and parts[-4:] == ["info", "lfs", "objects", "batch"]:
            upload.lfs_batch(self, body, token)
        elif method == "POST" and parts[:1] == ["api"] and len(parts) >= 6 and parts[1] in KINDS \
                and parts[4] in ("preupload", "commit"):
            kind, repo_id, revision = KINDS[parts[1]], "/".join(parts[2:4]), "/".join(parts[5:])
            repo = self._repo(kind, repo_id, token)
            if repo is not None and parts[4] == "preupload":
                upload.preupload(self, repo, revision, body, token)
            elif repo is not None:
                upload.commit(self, kind, repo_id, repo, revision, body, token)
        else:
            return False
        return True

    def _api(self, method, kind, repo_id, rest, query, body, token) -> None:
        repo = self._repo(kind, repo_id, token)
        if repo is None:
            return
        if method == "GET" and rest in ([], ["revision"]) or (rest[:1] == ["revision"] and len(rest) >= 2):
            revision = "/".join(rest[1:]) or "main"
            return self._with_commit(repo, revision, lambda sha: self._json(self._info(kind, repo_id, repo, sha)))
        if method == "GET" and rest[:1] == ["tree"] and len(rest) >= 2:
            recursive = (query.get("recursive") or ["false"])[0].lower() == "true"
            prefix = "/".join(rest[2:])
            return self._with_commit(repo, rest[1], lambda sha: self._tree(repo.commits[sha], prefix, recursive))
        if method == "POST" and rest[:1] == ["paths-info"] and len(rest) >= 2:
            form = parse_qs(body.decode())
            paths = form.get("paths") or json.loads(body or b"{}").get("paths", [])
            return self._with_commit(repo, rest[1], lambda sha: self._json(
                [e for p in paths for e in _entries(repo.commits[sha], p.strip("/"), exact=True)]))
        self.standin.unanswered.append((method, self.path))
        self._error(404, None, f"the stand-in hub does not answer {method} {self.path}")

    def _resolve(self, method, kind, repo_id, revision, path, token) -> None:
        repo = self._repo(kind, repo_id, token)
        if repo is None:
            return
        if repo.gated and token != GRANTED_TOKEN:
            status = 401 if token is None else 403
            what = "You must have access to it and be authenticated to access it. Please log in." if token is None \
                else "Your request to access it has not been granted."
            return self._error(status, "GatedRepo", f"Access to {kind} {repo_id} is restricted. {what}")
        sha = repo.commit_of(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        content = repo.commits[sha].get(path)
        if content is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"")
        start, end = 0, len(content)
        status = 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start = int(first or 0)
            end = min(int(last) + 1, len(content)) if last else len(content)
            status = 206
        self.send_response(status)
        self.send_header("ETag", f'"{blob_id(content)}"')
        self.send_header("X-Repo-Commit", sha)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(content)}")
        self.end_headers()
        if method == "GET":
            self.wfile.write(content[start:end])

    # ---- pieces --------------------------------------------------------------------------------------------
    def _repo(self, kind: str, repo_id: str, token: str | None) -> Repo | None:
        repo = self.standin.repos.get((kind, repo_id))
        if repo is not None and repo.private and token is None:
            repo = None   # the hub does not show a private repo to an anonymous request
        if repo is None:
            # The hub answers 401 to an anonymous request for a repo it does not show (missing or private).
            self._error(401 if token is None else 404, "RepoNotFound", "Repository not found")
        return repo

    def _with_commit(self, repo: Repo, revision: str, answer) -> None:
        sha = repo.commit_of(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        answer(sha)

    @staticmethod
    def _info(kind: str, repo_id: str, repo: Repo, sha: str) -> dict:
        info = {"_id": blob_id(repo_id.encode())[:24], "id": repo_id, "sha": sha, "private": repo.private,
                "gated": "manual" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
                "tags": [], "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": path} for path in sorted(repo.commits[sha])]}
        if kind == "model":
            info |= {"modelId": repo_id, "library_name": "transformers"}
        return info

    def _tree(self, files: dict[str, bytes], prefix: str, recursive: bool) -> None:
        if prefix and prefix not in files and not any(p.startswith(prefix + "/") for p in files):
            return self._error(404, "EntryNotFound", f"{prefix} does not exist")
        self._json(_entries(files, prefix, exact=False, recursive=recursive))

    def _json(self, value) -> None:
        self._json_status(200, value)

    def _json_status(self, status: int, value) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str | None, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _entries(files: dict[str, bytes], prefix: str, exact: bool, recursive: bool = False) -> list[dict]:
    """Tree entries: under `prefix` (its children, or all descendants when recursive), or `prefix` itself."""
    def file_entry(path: str) -> dict:
        return {"type": "file", "path": path, "size": len(files[path]), "oid": blob_id(files[path])}

    def dir_entry(path: str) -> dict:
        return {"type": "directory", "path": path, "oid": blob_id(path.encode()), "size": 0}

    if exact:
        if prefix in files:
            return [file_entry(prefix)]
        return [dir_entry(prefix)] if any(p.startswith(prefix + "/") for p in files) else []
    base = prefix + "/" if prefix else ""
    found: dict[str, dict] = {}
    for path in sorted(files):
        if not path.startswith(base):
            continue
        rest = path[len(base):].split("/")
        for depth in range(1, len(rest)):
            folder = base + "/".join(rest[:depth])
            if recursive or depth == 1:
                found.setdefault(folder, dir_entry(folder))
            if not recursive:
                break
        if recursive or len(rest) == 1:
            found[path] = file_entry(path)
    return list(found.values())
