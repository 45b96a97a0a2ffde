"""pip's configuration as uv flags, one per line (scripts/installer.sh reads them).

uv does not read pip's configuration files or PIP_* variables, so `pip config list` is translated: find-links
(where a machine may keep its CPU torch wheel), the index and extra indexes, constraint files, no-index, and the
certificate bundle (`--cert=FILE`, which the installer exports as SSL_CERT_FILE). As pip does, a variable wins
over the `install` section of a file, which wins over its `global` section.

Usage: python scripts/uv_flags.py      (the python whose pip configuration counts)
"""

from __future__ import annotations

import shlex
import subprocess
import sys

FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}
PRECEDENCE = {"global": 1, "install": 2, ":env:": 3}


def pip_config(listing: str) -> dict[str, str]:
    """`pip config list` output ("global.find-links='/opt/wheels'", ":env:.cert='...'") -> {key: value}."""
    chosen: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        rank = PRECEDENCE.get(section)
        if rank and rank >= chosen.get(key, (0, ""))[0]:
            chosen[key] = (rank, shlex.split(value)[0] if value.strip() else "")
    return {key: value for key, (_, value) in chosen.items()}


def uv_flags(config: dict[str, str]) -> list[str]:
    flags = [item for key, flag in FLAGS.items() for value in config.get(key, "").split() for item in (flag, value)]
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    if config.get("cert"):
        flags.append("--cert=" + config["cert"])
    return flags


if __name__ == "__main__":
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    print("\n".join(uv_flags(pip_config(listing))))
