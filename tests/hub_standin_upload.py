"""The stand-in hub's write side (tests/hub_standin.py): what huggingface_hub's create_repo and upload_folder call,
through the git-LFS protocol as they use it without Xet (HF_HUB_DISABLE_XET=1, which the stand-in's env sets).

  POST /api/repos/create                            a repo: private or public (409 with its url if it exists)
  POST /api/validate-yaml                           a README's metadata header: YAML, or 400
  POST /api/{models,datasets}/{id}/preupload/{rev}  per file: upload mode (lfs for weights and files >= 10 MB,
                                                    as the hub's default .gitattributes) and the oid it has now
  POST /[datasets/]{id}.git/info/lfs/objects/batch  LFS upload actions (none for content already stored)
  PUT  /lfs-upload/{sha256}                         one LFS object (checked against its sha256)
  POST /api/{models,datasets}/{id}/commit/{rev}     an NDJSON commit: header, file, lfsFile, deletedFile/Folder
Every write needs a token (401 without one, as on the hub)."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
from http.server import BaseHTTPRequestHandler

import yaml

LFS_PATTERNS = ["*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.h5", "*.onnx", "*.msgpack", "*.model"]
LFS_MIN_SIZE = 10 * 1024 * 1024


def blob_id(content: bytes) -> str:
    """The git blob id, which the hub serves as a small file's ETag and tree `oid`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def is_lfs(path: str, size: int) -> bool:
    return size >= LFS_MIN_SIZE or any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in LFS_PATTERNS)


def oid(path: str, content: bytes) -> str:
    """What preupload reports for a file the repo holds: sha256 for an LFS file, the git blob id otherwise."""
    return hashlib.sha256(content).hexdigest() if is_lfs(path, len(content)) else blob_id(content)


def create_repo(handler: BaseHTTPRequestHandler, body: bytes, token: str | None) -> None:
    if token is None:
        return handler._error(401, None, "You must be authenticated to create a repo")
    payload = json.loads(body or b"{}")
    kind = payload.get("type") or "model"
    repo_id = "/".join(filter(None, [payload.get("organization"), payload["name"]]))
    url = f"{handler.standin.url}/{'datasets/' if kind == 'dataset' else ''}{repo_id}"
    if (kind, repo_id) in handler.standin.repos:
        return handler._json_status(409, {"error": f"You already created this {kind} repo", "url": url})
    private = payload.get("visibility", "public") == "private"
    handler.standin._add(kind, repo_id, {".gitattributes": "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n"
                                                                   for p in LFS_PATTERNS)}, "main", False)
    handler.standin.repos[(kind, repo_id)].private = private
    handler._json({"url": url, "name": repo_id, "id": repo_id})


def validate_yaml(handler: BaseHTTPRequestHandler, body: bytes) -> None:
    content = json.loads(body or b"{}").get("content", "")
    if content.startswith("---"):
        try:
            meta = yaml.safe_load(content.split("---", 2)[1])
        except (yaml.YAMLError, IndexError) as exc:
            return handler._json_status(400, {"errors": [{"message": f"invalid YAML: {exc}"}], "warnings": []})
        if meta is not None and not isinstance(meta, dict):
            return handler._json_status(400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []})
    handler._json({"errors": [], "warnings": []})


def preupload(handler: BaseHTTPRequestHandler, repo, revision: str, body: bytes, token: str | None) -> None:
    if token is None:
        return handler._error(401, None, "You must be authenticated to upload")
    sha = repo.commit_of(revision)
    current = repo.commits[sha] if sha else {}
    files = []
    for f in json.loads(body or b"{}").get("files", []):
        mode = "lfs" if is_lfs(f["path"], f["size"]) else "regular"
        held = current.get(f["path"])
        files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False,
                      "oid": oid(f["path"], held) if held is not None else None})
    handler._json({"files": files, "commitOid": sha})


def lfs_batch(handler: BaseHTTPRequestHandler, body: bytes, token: str | None) -> None:
    if token is None:
        return handler._error(401, None, "You must be authenticated to upload")
    objects = []
    for o in json.loads(body or b"{}").get("objects", []):
        entry = {"oid": o["oid"], "size": o["size"]}
        if o["oid"] not in handler.standin.lfs:
            entry["actions"] = {"upload": {"href": f"{handler.standin.url}/lfs-upload/{o['oid']}"}}
        objects.append(entry)
    handler._json({"transfer": "basic", "objects": objects})


def lfs_put(handler: BaseHTTPRequestHandler, oid_wanted: str, body: bytes) -> None:
    if hashlib.sha256(body).hexdigest() != oid_wanted:
        return handler._error(400, None, "the content does not match its sha256")
    handler.standin.lfs[oid_wanted] = body
    handler._json({})


def commit(handler: BaseHTTPRequestHandler, kind: str, repo_id: str, repo, revision: str, body: bytes,
           token: str | None) -> None:
    if token is None:
        return handler._error(401, None, "You must be authenticated to commit")
    sha = repo.commit_of(revision)
    files = dict(repo.commits[sha]) if sha else {}
    for line in body.decode().splitlines():
        item = json.loads(line)
        key, value = item["key"], item["value"]
        if key == "file":
            files[value["path"]] = base64.b64decode(value["content"])
        elif key == "lfsFile":
            if value["oid"] not in handler.standin.lfs:
                return handler._error(400, None, f"LFS object {value['oid']} was never uploaded")
            files[value["path"]] = handler.standin.lfs[value["oid"]]
        elif key == "deletedFile":
            files.pop(value["path"], None)
        elif key == "deletedFolder":
            files = {p: c for p, c in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
    new = handler.standin._add(kind, repo_id, files, revision, False, parent=sha)
    handler.standin.commits_made.append((repo_id, new))
    handler._json({"commitUrl": f"{handler.standin.url}/{repo_id}/commit/{new}", "commitOid": new})
