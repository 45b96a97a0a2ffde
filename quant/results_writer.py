"""Writing a sweep's results.json, where the run lives at a URL too (core/remote.py).

There the bucket's copy is only ever replaced by a superset of what it held: before each write the driver reads
it whole, keeps every record of the recipe's variants it holds that this sweep did not produce (an earlier run's,
or another sweep's on the same `--out` at this moment), and writes on the condition that nobody wrote in between
(S3's If-Match; where the store has no conditional write, the gap is one read and one write). A copy that cannot
be read whole, or that holds another recipe's run, stops the sweep (RemoteError: one line, exit 2) instead of
being replaced, unless the user asked for that with --replace-run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from core.remote import Remote, RemoteError
from core.results import Results, first_problem
from core.run_layout import RESULTS_FILE, RunLayout
from core.store import write_json

WRITE_TRIES = 8   # another sweep's write between this one's read and write: read again and merge


@dataclass
class ResultsWriter:
    out: Path
    remote: Remote | None
    variants: set[str]   # the recipe's: records of other variants are not this run's
    replace_run: bool = False
    mine: set[str] = field(default_factory=set)   # variants this sweep measured: its records win

    def took(self, variant: str) -> None:
        self.mine.add(variant)

    def save(self, results: dict) -> Path:
        """Through the typed schema (what does not fit fails here, not in a reader); at a URL, merged and
        published."""
        path = RunLayout(self.out).results
        if self.remote is None:
            write_json(path, Results.model_validate(results).dump())
            return path
        for _ in range(WRITE_TRIES):
            held, version = self.remote.read_whole(RESULTS_FILE)
            if held is not None:
                self._merge(results, held)
            write_json(path, Results.model_validate(results).dump())
            if self.remote.replace(path, RESULTS_FILE, version):
                self.replace_run = False   # what is there now is this sweep's run
                return path
        raise RemoteError(f"{self.remote.url}/{RESULTS_FILE}: changed {WRITE_TRIES} times while this sweep wrote it "
                          "(other sweeps on the same --out); finished stages are cached: re-run when they are done")

    def _merge(self, results: dict, held: bytes) -> None:
        if self.replace_run:
            return
        try:
            theirs = Results.model_validate(json.loads(held))
        except ValidationError as exc:
            raise damaged(self.remote.url, first_problem(exc)) from None
        except ValueError as exc:
            raise damaged(self.remote.url, str(exc).splitlines()[0][:160]) from None
        if theirs.recipe_name != results["recipe_name"]:
            raise RemoteError(f"{self.remote.url}: another sweep wrote a run of recipe {theirs.recipe_name!r} there "
                              f"meanwhile; it is not replaced (choose another --out)")
        for name, record in theirs.variants.items():
            if name in self.variants and name not in self.mine and results["variants"].get(name) != record.dump():
                results["variants"][name] = record.dump()
                # its per-item files too: this sweep's reports compare it item by item
                self.remote.download_dir(f"variants/{name}", RunLayout(self.out).variant(name).root)
        if results["baseline"] not in self.mine and theirs.baseline_zero_tasks is not None:
            results["baseline_zero_tasks"] = theirs.baseline_zero_tasks


def damaged(url: str, why: str) -> RemoteError:
    return RemoteError(f"{url}/{RESULTS_FILE}: cannot be read as a run ({why}); it is not replaced: repair or "
                       "remove it, or pass --replace-run to replace it")
