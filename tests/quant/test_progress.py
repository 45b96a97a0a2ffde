"""Long work shows progress: the quantizer's progress lines, the streamed quantize.log, quiet when not a TTY."""

from __future__ import annotations

import io
import sys
from contextlib import contextmanager

from quant.progress import Reporter
from quantize import progress
from tests.helpers import DEMO_MODEL



def test_progress_lines_map_to_bar_updates():
    assert progress.parse("QUANTIZE-PROGRESS: 3/25 layers calibrating batch 5/64\n") == \
        progress.Progress(3, 25, "layers", "calibrating batch 5/64")
    assert progress.parse("QUANTIZE-PROGRESS: 2/2 steps").describe() == "steps"
    for other in ("2026-12-01 | GPTQ | METRIC - error 3.18", "QUANTIZE-ERROR: boom", "QUANTIZE-PROGRESS: x/2 steps"):
        assert progress.parse(other) is None


def test_llmcompressor_batch_loops_print_progress_lines(capsys):
    from llmcompressor.pipelines.sequential import pipeline

    assert hasattr(pipeline, "tqdm")   # the loop report_pipeline_progress() stands in for
    assert list(progress._pipeline_batches(iter("ab"), total=2, desc="(2/5): Calibrating")) == ["a", "b"]
    list(progress._pipeline_batches(iter("a"), total=1, desc="(2/5): Propagating"))
    assert list(progress._pipeline_batches(iter("z"), desc="Compressing model")) == ["z"]
    lines = [p for p in map(progress.parse, capsys.readouterr().out.splitlines()) if p]
    assert [(p.done, p.total, p.detail) for p in lines] == [
        (1, 5, "calibrating batch 1/2"), (1, 5, "calibrating batch 2/2"), (2, 5, "calibrated"),
        (2, 5, "propagating batch 1/1")]


def test_nothing_is_drawn_when_not_a_terminal():
    reporter = Reporter()
    reporter.console.file = out = io.StringIO()
    assert not reporter.console.is_terminal
    with reporter.steps("quantize") as update:
        update(1, 4, "layers calibrating batch 1/2")
    with reporter.bar("eval", total=3) as advance:
        advance(3)
    assert out.getvalue().count("\n") == 1 and "eval: 3 done in" in out.getvalue()   # one summary line, no bar


def test_the_log_holds_each_line_as_soon_as_the_command_prints_it(tmp_path):
    from perf.engines.process import run_tied_streaming

    go, log_path = tmp_path / "go", tmp_path / "run.log"
    log_path.write_text("a killed run's partial log\n")
    waits = f"import os, time\nprint('first')\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\nprint('last')"
    in_log_when_seen = []

    def on_line(line: str) -> None:
        in_log_when_seen.append(log_path.read_text())
        go.touch()   # only now may the command go on

    proc = run_tied_streaming([sys.executable, "-c", waits], log_path, on_line)
    assert proc.returncode == 0 and proc.stdout == "first\nlast\n"
    assert in_log_when_seen == ["first\n", "first\nlast\n"] and log_path.read_text() == "first\nlast\n"


class RecordingReporter(Reporter):
    """Observes what the sweep feeds its progress line (a real terminal's drawing is not deterministic)."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.updates: list[tuple[int, int, str]] = []

    @contextmanager
    def steps(self, description: str):
        yield lambda done, total, detail="": self.updates.append((done, total, detail))


def test_the_sweep_streams_the_quantizer_log_and_drives_its_progress_line(tmp_path):
    from core.recipe import parse_recipe
    from core.store import Cache
    from quant.context import SweepContext
    from quant.quantize_stage import checkpoint_for

    recipe = parse_recipe("name: r\nmodel: demo\ntasks: [demo_math]\nvariants:\n  - {name: b, baseline: true}\n"
                          "  - {name: rtn, scheme: W4A16, algorithm: rtn}\n")
    reporter = RecordingReporter()
    ctx = SweepContext(recipe=recipe, out=tmp_path / "run", cache=Cache(tmp_path / "cache"), model_dir=DEMO_MODEL,
                        model_key="demo", engine_python=sys.executable, engine_version=None, reporter=reporter)
    stale = tmp_path / "run/variants/rtn/quantize.log"
    stale.parent.mkdir(parents=True)
    stale.write_text("QUANTIZE-PROGRESS: 0/2 steps quantizing\n(killed here)\n")
    checkpoint = checkpoint_for(ctx, recipe.variant("rtn"))
    path, manifest = checkpoint.path, checkpoint.manifest
    log = stale.read_text()
    assert "(killed here)" not in log   # the re-run replaced the partial log
    assert log.index("QUANTIZE-PROGRESS: 0/2 steps quantizing") < log.index("QUANTIZE-PROGRESS: 2/2 steps done")
    assert log.rstrip().endswith("}") and '"variant": "rtn"' in log   # complete: the manifest printed last
    assert reporter.updates == [(0, 2, "steps quantizing"), (1, 2, "steps writing the checkpoint"),
                                (2, 2, "steps done")]
    assert manifest["variant"] == "rtn" and (path / "quant_manifest.json").is_file()


def test_in_process_evals_advance_the_progress_per_request():
    from evals.backends import inprocess_lm
    from evals.runner import evaluate_task
    from core.recipe import Task

    lm, done = inprocess_lm(DEMO_MODEL), []
    lm.progress = done.append
    summary, _ = evaluate_task(lm, Task(name="demo_math", limit=3))
    assert summary["exact_match"]["n"] == 3 and sum(done) == 3


def test_a_line_aside_names_its_variant_and_draws_no_bar():
    reporter = Reporter()
    reporter.console.file = out = io.StringIO()
    aside = reporter.aside("w4a16-rtn")
    assert aside.console is reporter.console and not aside.live   # one live display, lines above it
    aside.log("  quantizing …")
    with aside.steps("quantize") as update:
        update(1, 2, "layers")
    assert "[w4a16-rtn]   quantizing …" in out.getvalue()   # a variant's name is not taken for markup
