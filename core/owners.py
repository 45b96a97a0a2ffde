"""Whose a temporary file or directory is: its name carries its owner (host, pid and the process's start
time), so a name whose owner is gone from this host is known for a leftover of a killed process (a pid reused
since has another start time)."""

from __future__ import annotations

import os
import re
import socket
import zlib

import psutil

# ".<name>.<host>-<pid>-<start>.<8 random chars>" (a staging directory), plus ".tmp" for a file
_OWNED = re.compile(r"^\..+\.([0-9a-f]{8})-(\d+)-(\d+)\.[a-z0-9_]{8}(\.tmp)?$")
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"   # a cache may be shared between machines


def _start_time(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def owner_tag() -> str:
    return f"{_HOST}-{os.getpid()}-{_start_time(os.getpid())}"


def is_leftover(name: str) -> bool:
    """A temporary name of ours whose owning process on this host is gone (a pid reused since has another
    start time)."""
    m = _OWNED.match(name)
    return bool(m) and m.group(1) == _HOST and _start_time(int(m.group(2))) != int(m.group(3))
