"""Every path under a run directory (`quant sweep --out DIR`), named once.

    DIR/results.json  pareto.md  pareto.png  report.html  report.png  perf.csv
    DIR/variants/<variant>/
        server.log  quantize.log  accuracy.jsonl
        errors.log                               items that failed in scoring, a failed measurement (tracebacks)
        evals/<task>.jsonl                       per-item records of each task
        lm_eval/<model>/                         lm-eval's own results and samples files
        perf/<workload>.jsonl                    per-request records
        perf/<workload>/vllm-bench-<level>.json  each level in `vllm bench serve`'s format
        sensitivity/                             the ranking behind a variant that keeps modules in 16-bit
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.safe_paths import checked_component, checked_name

RESULTS_FILE = "results.json"
LM_EVAL_DIR = "lm_eval"   # lm-eval's own output files, in the eval stage's cache entry and in each variant


@dataclass(frozen=True)
class VariantLayout:
    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def quantize_log(self) -> Path:
        return self.root / "quantize.log"

    @property
    def errors_log(self) -> Path:
        return self.root / "errors.log"

    @property
    def accuracy(self) -> Path:
        return self.root / "accuracy.jsonl"

    def items(self, task: str) -> Path:
        """The per-item records of one task."""
        return self.root / "evals" / f"{checked_component(task, 'task')}.jsonl"

    @property
    def lm_eval(self) -> Path:
        return self.root / LM_EVAL_DIR

    def perf_records(self, workload: str) -> Path:
        return self.root / "perf" / f"{checked_name(workload, 'workload')}.jsonl"

    def vllm_bench(self, workload: str, level: str) -> Path:
        level = checked_name(level, "level")
        return self.root / "perf" / checked_name(workload, "workload") / f"vllm-bench-{level}.json"

    @property
    def sensitivity(self) -> Path:
        return self.root / "sensitivity"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @classmethod
    def of(cls, path: Path | str) -> RunLayout:
        """A run directory, or its results.json."""
        path = Path(path)
        return cls(path.parent if path.name == RESULTS_FILE and not path.is_dir() else path)

    @property
    def results(self) -> Path:
        return self.root / RESULTS_FILE

    @property
    def pareto_md(self) -> Path:
        return self.root / "pareto.md"

    @property
    def pareto_png(self) -> Path:
        return self.root / "pareto.png"

    @property
    def long_context_png(self) -> Path:
        return self.root / "long_context.png"

    @property
    def perf_history(self) -> Path:
        return self.root / "perf-history.json"

    @property
    def perf_history_png(self) -> Path:
        return self.root / "perf-history.png"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def report_png(self) -> Path:
        return self.root / "report.png"

    @property
    def perf_csv(self) -> Path:
        return self.root / "perf.csv"

    def variant(self, name: str) -> VariantLayout:
        """A variant's directory; UnsafePath for a name that is not one component in the recipe's pattern."""
        return VariantLayout(self.root / "variants" / checked_name(name, "variant"))
