"""What a person watches while a run goes: a live progress bar, or a log line every few seconds.

:class:`ProgressReport` is an ``on_progress`` callback (``esjax.evolve(on_progress=...)``), so a
notebook or a script shows the same progress as ``esjax evolve``. The number formats here are the
command line's too, so a table and the progress line print a number the same way. Nothing here
imports JAX: the progress display and ``esjax --help`` cost no JAX start-up.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from rich import progress as rich_progress
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from esjax._src.specs.foreign import visible


def process_start() -> float:
    """``time.perf_counter()`` at the moment this process started.

    Importing esjax's JAX side takes a second or more before a run starts, so "process start"
    is read from the kernel where it says (Linux: ``/proc/self/stat``, to 10 ms). It is this
    module's import elsewhere, and in a process that imported it long after starting (a
    notebook, a test session), where the process's age says nothing about esjax.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0.0 <= age < 60.0 else now


STARTED = process_start()


def number(value: Any, digits: int = 1) -> str:
    """``1,234.5``; ``-`` for a missing or non-finite value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def count(value: float) -> str:
    """A large count in three significant figures: ``12.3M``."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def duration(seconds: float | None) -> str:
    """``12.3 s`` under a minute, else ``H:MM:SS``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressReport:
    """The ``on_progress`` callback: a live bar on a terminal, a line every few seconds in logs.

    Use it as a context manager around the run, so the bar is stopped however the run ends.
    ``first_report_s`` (process start to the first generation block) and ``last_eval`` are
    kept for the summary printed after the run.
    """

    def __init__(self, console: Console, label: str, seeds: int = 1, log_every_s: float = 5.0):
        self.console = console
        self.label = label
        self.seeds = seeds  # on_progress gets one row per seed; they are shown averaged
        self.log_every_s = log_every_s
        self.first_report_s: float | None = None  # process start -> first generation block
        self.last_eval: float | None = None
        self._prev: tuple[int, float, float] | None = None  # (generation, env_steps, wall_s)
        self._rows: list[dict[str, Any]] = []  # this generation's rows, one per seed
        self._last_log = -math.inf
        self._progress: rich_progress.Progress | None = None
        self._task: Any = None

    def __enter__(self) -> ProgressReport:
        if self.console.is_terminal:
            self._progress = rich_progress.Progress(
                rich_progress.TextColumn("[bold]{task.description}"),
                rich_progress.BarColumn(),
                rich_progress.MofNCompleteColumn(),
                rich_progress.TextColumn("{task.fields[stats]}"),
                rich_progress.TimeElapsedColumn(),
                rich_progress.TextColumn("ETA {task.fields[eta]}"),
                console=self.console,
            )
            self._progress.start()
            # A sweep's configuration is named by its values: text from the sweep's record.
            self._task = self._progress.add_task(
                escape(visible(self.label)), total=None, stats="compiling…", eta="-"
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, metrics: dict[str, Any]) -> None:
        """One row per seed for the last generation of a block; shown once all seeds are in."""
        now = time.perf_counter()
        if self.first_report_s is None:
            self.first_report_s = now - STARTED
        gen = int(metrics.get("generation", 0))
        if self._rows and gen != self._rows[0].get("generation"):
            self._rows = []
        self._rows.append(metrics)
        if len(self._rows) < self.seeds:
            return
        self._show(now, gen, self._rows)

    def _show(self, now: float, gen: int, rows: list[dict[str, Any]]) -> None:
        def mean(key: str) -> float | None:
            values = [float(r[key]) for r in rows if r.get(key) is not None]
            return sum(values) / len(values) if values else None

        total = rows[0].get("generations")
        steps = sum(float(r.get("env_steps", 0)) for r in rows)
        wall = float(rows[0].get("wall_s", 0.0))
        rate, eta = math.nan, None
        if self._prev is not None and wall > self._prev[2] and gen > self._prev[0]:
            prev_gen, prev_steps, prev_wall = self._prev
            rate = (steps - prev_steps) / (wall - prev_wall)
            if total is not None:
                eta = (float(total) - gen) * (wall - prev_wall) / (gen - prev_gen)
        elif wall > 0:
            rate = steps / wall  # first block: includes compilation
        self._prev = (gen, steps, wall)
        if mean("eval_return") is not None:
            self.last_eval = mean("eval_return")
        stats = (
            f"best {number(mean('fitness_best'))}  "
            f"mean {number(mean('fitness_mean'))}  "
            f"eval {number(self.last_eval)}  "
            f"{count(rate) if math.isfinite(rate) else '-'} steps/s"
        )
        if self._progress is not None:
            self._progress.update(
                self._task, completed=gen, total=total, stats=stats, eta=duration(eta)
            )
            return
        last = total is not None and gen >= int(total)
        evaluated = mean("eval_return") is not None
        if now - self._last_log >= self.log_every_s or last or evaluated:
            self._last_log = now
            done = f"{gen}/{int(total)}" if total is not None else f"{gen}"
            self.console.print(f"gen {done}  {stats}  ETA {duration(eta)}", soft_wrap=True)


class SweepProgress:
    """A sweep's ``on_configuration`` and ``on_progress`` callbacks: a bar per configuration.

    Each configuration is announced on its own line and gets a fresh :class:`ProgressReport`;
    the last one is closed when the block exits, however the sweep ends.
    """

    def __init__(self, console: Console, seeds: int = 1):
        self.console = console
        self.seeds = seeds
        self.reports: list[ProgressReport] = []

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.reports:
            self.reports[-1].__exit__(None, None, None)

    def announce(self, configuration: Any, index: int, total: int) -> None:
        """``on_configuration``: close the last bar, name the next configuration, open its bar."""
        self.__exit__()
        label = visible(", ".join(configuration.overrides))
        self.console.print(
            Text.assemble((f"configuration {index + 1}/{total}", "bold"), f": {label}"),
            soft_wrap=True,
        )
        report = ProgressReport(self.console, configuration.name, seeds=self.seeds)
        self.reports.append(report.__enter__())

    def __call__(self, row: dict[str, Any]) -> None:
        # A program runs several configurations; the bar follows the first one.
        if Path(row["run_dir"]).name == self.reports[-1].label:
            self.reports[-1](row)
