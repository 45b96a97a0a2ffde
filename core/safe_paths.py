"""Names that come from outside (results.json, a cache entry, a bucket's listing, `.reports.json`) checked before
they become paths: a name is one path component in the recipe's own pattern; a relative key has no `..`, no
absolute start and no empty or `.` part; a path built from one stays inside its base, symlinks included."""

from __future__ import annotations

import re
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,-]*$")   # variant, task, workload names and labels (core/recipe.py)


class UnsafePath(ValueError):
    """A name or key that would lead outside its directory: one line saying which."""


def checked_name(name: str, what: str = "name") -> str:
    """name, where it is one path component in the recipe's pattern; else UnsafePath."""
    if not isinstance(name, str) or not NAME.match(name) or name in (".", ".."):
        raise UnsafePath(f"{what} {str(name)[:80]!r} is not a name this suite writes (letters, digits, _ . , -)")
    return name


def checked_component(name: str, what: str = "name") -> str:
    """name, where it is one path component (any lm-eval task name is); else UnsafePath."""
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name
            or name.startswith("~")):
        raise UnsafePath(f"{what} {str(name)[:80]!r} leads outside its directory")
    return name


def checked_key(key: str, what: str = "key") -> str:
    """A '/'-separated relative key with no '..', '.', empty part, backslash or NUL, not absolute; else UnsafePath."""
    parts = key.split("/") if isinstance(key, str) else [""]
    if (not isinstance(key, str) or key.startswith("/") or "\\" in key or "\0" in key
            or any(p in ("", ".", "..") for p in parts)):
        raise UnsafePath(f"{what} {str(key)[:120]!r} leads outside its directory")
    return key


def inside(base: Path, key: str, what: str = "key") -> Path:
    """base/key, where key is a checked key and the path (symlinks resolved) stays under base; else UnsafePath."""
    path = Path(base) / checked_key(key, what)
    resolved, root = path.resolve(), Path(base).resolve()
    if resolved != root and root not in resolved.parents:
        raise UnsafePath(f"{what} {key!r} leads outside {base} (through a symbolic link)")
    return path
