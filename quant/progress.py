"""What a sweep shows while it runs: one line per stage event, and a bar for request-heavy work."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from core.foreign_text import clean_text, raw_stream


class RateColumn(ProgressColumn):
    """Items per second (evals, requests)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:.1f}/s" if task.speed else "", style="dim")


class Reporter:
    def __init__(self, quiet: bool = False, prefix: str = "", live: bool = True) -> None:
        self.console = Console(file=raw_stream(sys.stderr), highlight=False)   # its styles: escapes of its own
        self.quiet = quiet
        self.prefix = escape(f"[{prefix}] ") if prefix else ""   # whose line: variants run side by side
        self.live = live   # bars and step counters drawn (only one reporter of a console may draw them)
        self.t0 = time.time()

    def aside(self, prefix: str) -> "Reporter":
        """For work in the background of this sweep: the same console and clock, lines under `prefix`, no bars."""
        other = Reporter(self.quiet, prefix, live=False)
        other.console, other.t0 = self.console, self.t0
        return other

    def log(self, message: str, style: str | None = None) -> None:
        """message: the suite's own markup, with foreign text in it escaped (rich.markup.escape) by the caller.
        Control characters never reach the terminal, and a line rich cannot parse is printed as it is."""
        if not self.quiet:
            elapsed = time.time() - self.t0
            line = f"[dim]{elapsed:7.1f}s[/dim] {self.prefix}{clean_text(message)}"
            try:
                self.console.print(line, style=style)
            except MarkupError:
                self.console.print(Text(f"{elapsed:7.1f}s {self.prefix}{clean_text(message)}"), style=style)

    @contextmanager
    def bar(self, description: str, total: int | None):
        """Yields advance(n=1); a no-op when quiet or when the console is not a terminal."""
        if self.quiet or not self.live or not self.console.is_terminal:
            start = time.time()
            yield lambda n=1: None
            self.log(f"{description}: {'' if total is None else f'{total} '}done in {time.time() - start:.1f}s")
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)
        self.log(f"{description}: {'' if total is None else f'{total} '}done")

    @contextmanager
    def steps(self, description: str):
        """For work whose total and stage change as it goes (layers of a quantization, units of a
        sensitivity analysis): yields update(done, total, detail); a no-op when quiet or not a terminal."""
        if self.quiet or not self.live or not self.console.is_terminal:
            yield lambda done, total, detail="": None
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("[dim]{task.fields[detail]}"), TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress:
            task = progress.add_task(description, total=None, detail="")
            yield lambda done, total, detail="": progress.update(task, completed=done, total=total, detail=detail)
