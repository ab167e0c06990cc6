"""How the command line shows its results: rich tables of the records the library returns.

Each function prints one record (a run's summary, a test, a grid, a sweep, the catalogue) on
a :class:`rich.console.Console`, so a notebook can show a record the way ``esjax`` does. The
records themselves come from :mod:`esjax._src.analysis.evaluation`, :mod:`esjax._src.run.training`
and :mod:`esjax._src.analysis.sweeps`; nothing here computes a number. Nothing here imports JAX.

Every cell, title and line a record gives is shown as plain text through :func:`_text`: a
record holds text read from run, sweep and task files (labels, overrides, descriptions,
paths), which is neither read as rich markup nor let act on the terminal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from esjax._src.cli.progress import count, duration, number
from esjax._src.specs.config import baseline_label
from esjax._src.specs.digits import decimals
from esjax._src.specs.foreign import visible


def _text(value: object, style: str = "") -> Text:
    """A cell, title or line as plain text: no rich markup read from it, and the characters
    that would act on a terminal shown as escapes (:func:`esjax._src.specs.foreign.visible`)."""
    return Text(visible(value), style=style)


def _add_row(table: Table, *cells: object) -> None:
    """``table.add_row`` with every cell that is not already :class:`Text` made one by
    :func:`_text`."""
    table.add_row(*(cell if isinstance(cell, Text) else _text(cell) for cell in cells))


def show_evolve_summary(
    console: Console, summary: Any, seeds: int, figure: Path, first_report_s: float | None
) -> None:
    """A finished run: its summary table, the verdict its summary.json holds, what to run next.

    ``summary`` is :class:`esjax._src.run.training.RunSummary`; ``first_report_s`` is the time from
    process start to the first generation block (:class:`esjax._src.cli.progress.ProgressReport`).
    """
    run_dir, judged = Path(summary.run_dir), summary.verdict
    table = Table(title="esjax evolve", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    _add_row(table, "run directory", str(run_dir))
    _add_row(table, "generations", f"{summary.generations:,}")
    per_seed = " per seed" if seeds > 1 else ""
    _add_row(table, "env steps", f"{summary.env_steps:,}{per_seed}")
    _add_row(table, "wall time (from building the task)", duration(summary.wall_s))
    if summary.wall_s:
        rate = count(seeds * summary.env_steps / summary.wall_s)
        _add_row(table, "env steps/s", f"{rate} (all seeds, with compilation)")
    _add_row(table, "process start → first block", f"{first_report_s or math.nan:.1f} s")
    _add_row(table, "eval return (final)", number(summary.final_eval_return))
    _add_row(table, "eval return (best)", number(summary.best_eval_return))
    if judged is not None:
        _add_row(table, "test return (final, fresh episodes)", number(judged.final_return))
        _add_row(table, "test return (best, fresh episodes)", number(judged.best_return))
    _add_row(table, "fitness plot", str(figure))
    console.print(table)
    if judged is not None:
        # The final policy on episodes that neither training nor the choice of the best
        # policy saw (esjax._src.run.saved.verdict). The best policy is shown above, not judged.
        value, threshold = judged.final_return, judged.threshold
        verdict = "≥" if judged.solved else "<"
        text = f"test return {value:.1f} {verdict} {threshold:g} (final policy, fresh episodes)"
        if judged.solved:
            console.print(Text(f"Solved: {text}.", style="bold green"))
        else:
            console.print(Text(f"Not solved: {text}.", style="yellow"))
    shown = visible(run_dir)
    console.print(
        Text.assemble("Next: ", (f"esjax eval {shown}", "cyan"), " · ",
                      (f"esjax render {shown}", "cyan")),
        soft_wrap=True,
    )  # fmt: skip


def show_policy_test(console: Console, record: dict[str, Any]) -> None:
    """:func:`esjax._src.analysis.evaluation.policy_record`: episodes, mean, std, min and max."""
    title = f"test return of {record['run']} ({record['which']} policy)"
    table = Table(title=_text(title), title_justify="left")
    for name in ("episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="right")
    _add_row(
        table,
        str(record["episodes"]),
        *(number(record[k], 2) for k in ("mean", "std", "min", "max")),
    )
    console.print(table)


def show_baseline_test(console: Console, record: dict[str, Any]) -> None:
    """:func:`esjax._src.analysis.evaluation.baseline_record`: the policy, the zero action, the
    reference."""
    where = f"{record['split']}, seed {record['seed']}"
    title = f"test return on {record['run']}'s test episodes ({where})"
    table = Table(title=_text(title), title_justify="left")
    for name in ("policy", "episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for name, stats in record["returns"].items():
        _add_row(table, name, str(record["episodes"]), *(number(stats[k], 2) for k in stats))
    console.print(table)
    if "score_vs_analytic" in record:
        score = record["score_vs_analytic"]
        shown = "none (the analytic controller earns what zero actions do)"
        console.print(
            "normalised score (0 = zero action, 1 = analytic): "
            + (shown if score is None else f"{score:.3f}")
        )
    if "margin_over_random" in record:
        console.print(f"margin over random actions: {record['margin_over_random']:+.3f}")


# A grid record's baselines, as its tables name them.
_REFERENCE_NAMES = {
    "analytic": "the analytic controller",
    "random": "random actions",
    "zero": "the zero action",
}


def show_grid_test(console: Console, record: dict[str, Any], paths: tuple[Path, Path]) -> None:
    """:func:`esjax._src.analysis.evaluation.grid_record` and the files it wrote: mean test return
    per cell.

    With a baseline, the reference's mean per cell follows, then the policy's score against
    it, the number the heatmap shows.
    """
    json_path, png_path = paths
    about = f"{record['run']} ({record['which']} policy, {record['episodes']} episodes per cell)"
    console.print(_grid_table(record, record["mean"], 0, f"mean test return of {about}"))
    if "baseline" in record:
        baseline = record["baseline"]
        title = f"mean test return of {_REFERENCE_NAMES[baseline]} on the same episodes"
        reference = record["reference_mean"][baseline_label(baseline)]
        console.print(_grid_table(record, reference, 0, title))
    shown = record.get("figure_shows", {"field": "mean"})
    if shown["field"] != "mean":
        title = f"{shown['label']}, per cell"
        console.print(_grid_table(record, record[shown["field"]], shown["decimals"], title))
    console.print(_text(f"wrote {json_path} and {png_path}"), soft_wrap=True)


def _grid_table(record: dict[str, Any], numbers: list, digits: int, title: str) -> Table:
    """One number per grid cell, rows the first parameter; the training range in bold."""
    rows, cols = record["values"]
    row_name, col_name = record["axes"]
    table = Table(
        title=_text(title),
        title_justify="left",
        caption="bold: inside the training range",
        caption_justify="left",
    )
    table.add_column(_text(f"{row_name} \\ {col_name}"), justify="right", style="cyan")
    for value in cols:
        table.add_column(f"{value:.3g}", justify="right")
    for value, cells, inside in zip(rows, numbers, record["in_training"], strict=True):
        texts = [
            Text(number(c, digits), style="bold" if i else "dim")
            for c, i in zip(cells, inside, strict=True)
        ]
        _add_row(table, f"{value:.3g}", *texts)
    return table


def show_sweep(
    console: Console, record: dict[str, Any], rows: list[dict[str, Any]], out: Path | None
) -> None:
    """A sweep: test return per configuration (mean ± half its 95% interval), seeds solved.

    ``rows`` are :func:`esjax._src.analysis.evaluation.sweep_rows` of ``record``; ``out`` is where
    the sweep was asked to go, for a record that does not say.
    """

    def cell(interval: tuple[float | None, float | None]) -> str:
        mean, half = interval
        return number(mean) if half is None else f"{number(mean)} ± {number(half)}"

    n = record["spec"]["seeds"]
    table = Table(
        title=_text(
            f"sweep of {record['spec']['task']}: test return over {n} seed(s), 95% interval"
        ),
        title_justify="left",
    )
    columns = ("configuration", "final", "best", "seeds solved", "env steps to threshold")
    for name in columns:
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for row in rows:
        solved, reached = row["solved"], row["env_steps_to_threshold"]
        _add_row(
            table,
            row["configuration"],
            cell(row["final"]),
            cell(row["best"]),
            f"{solved[0]}/{solved[1]}" if solved else "-",
            "-" if reached is None else f"{count(reached[0])} ({reached[1]}/{reached[2]})",
        )
    console.print(table)
    where = record.get("sweep_dir") or out
    if where is not None:
        console.print(_text(f"wrote {Path(where) / 'sweep.json'} and {Path(where) / 'sweep.png'}"))


def show_catalogue(
    console: Console,
    tasks: Iterable[tuple[str, Sequence[str], str]],
    strategies: Iterable[tuple[str, str, str]],
    suites: Iterable[tuple[str, str, str, bool, str]] = (),
) -> None:
    """``esjax list``: task presets ``(name, strategies with settings, description)``
    (:func:`esjax._src.specs.presets.task_rows`), strategies ``(name, kind, ...)`` and env suites
    ``(name, extra, example, installed?, description)``."""
    table = Table(title="Tasks", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("strategies", no_wrap=True)
    table.add_column("description")
    for name, names, text in tasks:
        own, *others = names
        carried = _text(own, "bold").append(_text("".join(f", {n}" for n in others)))
        _add_row(table, name, carried, text)
    console.print(table)
    console.print(
        "strategies: the one a task runs (bold), then each other it carries settings for "
        "([strategy_settings.NAME]), used when --strategy names it."
    )
    console.print()
    table = Table(title="Strategies", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("description")
    styles = {"tuned preset": "bold green", "cannot run": "dim", "esjax": "green"}
    for name, kind, text in strategies:
        _add_row(table, name, _text(kind, styles.get(kind, "")), text)
    console.print(table)
    console.print()
    console.print(
        "Names are case-insensitive; a tuned preset wins over the evosax algorithm it tunes."
    )
    console.print(r"Run one: [cyan]esjax evolve TASK \[--strategy NAME][/cyan]")
    console.print()
    _show_suites(console, suites)


def _show_suites(console: Console, suites: Iterable[tuple[str, str, str, bool, str]]) -> None:
    """Env suites a task names as ``SUITE:NAME``; one not installed shows the extra to install."""
    table = Table(title="Env suites", title_justify="left", show_edge=False)
    table.add_column("suite", style="cyan", no_wrap=True)
    table.add_column("installed", no_wrap=True)
    table.add_column("example env", no_wrap=True)
    table.add_column("description")
    for name, extra, example, installed, text in suites:
        status = (
            Text("yes", style="bold green") if installed else Text(f'pip install "esjax[{extra}]"')
        )
        _add_row(table, name, status, example, text)
    console.print(table)
    console.print(
        "A task's env is a gymnax id, SUITE:NAME, or a user's own env as "
        "package.module:factory or path/to/file.py:factory (see esjax._src.envs.core)."
    )


def show_report(console: Console, record: dict[str, Any]) -> None:
    """:func:`esjax._src.analysis.reporting.report`: per task, then per configuration, then what was
    written."""

    def bounds(low: float, high: float, digits: int = 2) -> str:
        return f"[{number(low, digits)}, {number(high, digits)}]"

    def returns(t: dict[str, Any]) -> tuple[str, str]:
        """The mean and the IQM with its interval, at the decimals of the largest of them."""
        low, high = t["iqm_interval"]
        digits = decimals(t["mean_return"], t["iqm_return"], low, high)
        iqm = f"{number(t['iqm_return'], digits)} {bounds(low, high, digits)}"
        return number(t["mean_return"], digits), iqm

    table = Table(title="esjax report: final policies on fresh test episodes", title_justify="left")
    names = ("configuration", "task", "seeds", "solved", "95% Wilson", "mean", "IQM [95%]")
    for name in names:
        table.add_column(name, justify="left" if name in ("configuration", "task") else "right")
    for entry in record["configurations"]:
        for task, t in entry["tasks"].items():
            judged = t["successes"] is not None
            _add_row(
                table,
                entry["label"],
                task,
                str(t["seeds"]),
                f"{t['successes']}/{t['seeds']}" if judged else "-",
                bounds(*t["success_interval"]) if judged else "-",
                *returns(t),
            )
    console.print(table)
    aggregated = [e for e in record["configurations"] if e["aggregate"] is not None]
    if aggregated:
        table = Table(
            title="normalised score (0: random policy, 1: solved_return), 95% stratified bootstrap",
            title_justify="left",
        )
        for name in ("configuration", "tasks", "seeds", "IQM", "mean"):
            table.add_column(name, justify="left" if name != "seeds" else "right")
        for entry in aggregated:
            a = entry["aggregate"]
            cells = [f"{number(a[k]['value'], 2)} {bounds(a[k]['low'], a[k]['high'])}"
                     for k in ("iqm", "mean")]  # fmt: skip
            _add_row(table, entry["label"], ", ".join(a["tasks"]), str(a["seeds"]), *cells)
        console.print(table)
    poi = record["probability_of_improvement"]
    if poi is not None:
        console.print(
            _text(
                f"P({poi['x']} > {poi['y']}) = {number(poi['value'], 2)} "
                f"{bounds(poi['low'], poi['high'])} (95% interval)"
            ),
            soft_wrap=True,
        )
    for note in record["notes"]:
        console.print(_text(f"note: {note}", "yellow"), soft_wrap=True)
    console.print(_text("wrote " + ", ".join(record["files"].values())), soft_wrap=True)
