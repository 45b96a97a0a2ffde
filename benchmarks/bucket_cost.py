"""What a stage cache in an S3 bucket costs: per stage of a finished sweep's cache, the time to publish each entry to
the bucket (upload: every file to a temporary name, moved onto its own, the `done` marker last), to fetch it into
an empty node mirror (download), and a mirror hit (the entry already on this node: no request at all).

The bucket is moto's S3 server on 127.0.0.1 (started here): the figures are the client's and the protocol's cost
(s3fs requests, one copy and one delete per file for the move) without a network's latency or bandwidth; on a
real bucket add the transfer of each entry's bytes at your link's rate.

With --results (a local run's results.json), it also computes what N nodes would take for that run: the baseline
alone first, then the other variants longest-first over N nodes, each node with its own cores or accelerator (a
perf stage waits only for its own node's). On one 2-core machine two Ray nodes share the same cores, so that
speed-up cannot be measured here: only computed.

Usage: python benchmarks/bucket_cost.py [--cache DIR] [--checkpoint DIR] [--results FILE] [--nodes 2 4]
  --cache: a sweep's local stage cache (default: none); --checkpoint: a model folder measured as a checkpoint
  entry (default: demo/model, the demo's bf16 weights)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.provenance import current_trust, seal  # noqa: E402
from core.remote import Remote  # noqa: E402
from core.store import Cache  # noqa: E402
from tests.multinode import S3Server  # noqa: E402


def entries(cache: Path) -> list[Path]:
    return sorted(done.parent for done in cache.glob("*/*/done"))


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(entry: Path, stage: str, url: str, scratch: Path) -> dict:
    remote = Remote(url)
    key = f"{entry.name}-{time.monotonic_ns()}"
    started = time.perf_counter()
    remote.publish(entry, f"{stage}/{key}", marker="done")
    upload = time.perf_counter() - started
    node = Cache(scratch / f"mirror-{key}", Remote(url))
    started = time.perf_counter()
    assert node.has(stage, key)
    download = time.perf_counter() - started
    started = time.perf_counter()
    assert node.has(stage, key)
    hit = time.perf_counter() - started
    shutil.rmtree(scratch / f"mirror-{key}", ignore_errors=True)
    return {"bytes": size(entry), "files": sum(1 for p in entry.rglob("*") if p.is_file()), "upload": upload,
            "download": download, "hit": hit}


def nodes_estimate(results: dict, nodes: int) -> tuple[float, float]:
    """(serial seconds, seconds on `nodes` nodes) from a local run's per-variant pipeline times."""
    times = {n: (r.get("ran_on") or {}).get("finished", 0) - (r.get("ran_on") or {}).get("started", 0)
             for n, r in results["variants"].items()}
    baseline = times.pop(results["baseline"])
    finish = [0.0] * nodes
    for t in sorted(times.values(), reverse=True):
        finish[finish.index(min(finish))] += t
    return baseline + sum(times.values()), baseline + max(finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", help="a finished sweep's local stage cache")
    parser.add_argument("--checkpoint", default=str(REPO / "demo" / "model"))
    parser.add_argument("--results", help="a local run's results.json, for the N-node estimate")
    parser.add_argument("--nodes", type=int, nargs="+", default=[2])
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bucket-cost-"))
    s3 = S3Server()
    os.environ.update(s3.env())
    url = f"s3://{S3Server.BUCKET}/cache"
    try:
        measured: dict[str, list[dict]] = defaultdict(list)
        checkpoint = scratch / "checkpoint"
        shutil.copytree(args.checkpoint, checkpoint)
        (checkpoint / "done").write_text(seal(checkpoint, current_trust()))   # as the stage cache marks an entry
        measured["checkpoints"].append(measure(checkpoint, "checkpoints", url, scratch))
        for entry in entries(Path(args.cache)) if args.cache else []:
            measured[entry.parent.name].append(measure(entry, entry.parent.name, url, scratch))
    finally:
        s3.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print("| stage | entries | files | MB | upload s | download s | mirror hit ms |")
    print("|---|---|---|---|---|---|---|")
    for stage, rows in measured.items():
        total = lambda k: sum(r[k] for r in rows)  # noqa: E731
        print(f"| {stage} | {len(rows)} | {total('files')} | {total('bytes') / 1e6:.2f} | {total('upload'):.2f} | "
              f"{total('download'):.2f} | {1000 * total('hit') / len(rows):.2f} |")
    if args.results:
        results = json.loads(Path(args.results).read_text())
        for n in args.nodes:
            serial, spread = nodes_estimate(results, n)
            print(f"computed for {n} nodes (not measurable on one machine): {spread:.0f} s instead of {serial:.0f} s, "
                  f"speed-up {serial / spread:.2f}x")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
