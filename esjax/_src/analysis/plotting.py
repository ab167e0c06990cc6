"""Fitness curves from metrics rows: matplotlib (Agg, no pyplot state), numpy and
esjax._src.specs.stats.

Several runs (or the seeds of one run) of one configuration are drawn as their mean with a 95%
confidence band. Training fitness (population mean and best member, every generation) and
evaluation return (the search mean on held-out episodes, every few generations) sit in separate
panels, since they are measured differently and on different schedules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from esjax._src.run.files import drawing, save_figure
from esjax._src.run.runs import METRICS, iter_metrics, read_run_config
from esjax._src.specs.config import ConfigError, RunConfig
from esjax._src.specs.foreign import visible
from esjax._src.specs.stats import half_widths

X_AXES = {"generations": "generation", "env_steps": "env_steps", "wall_s": "wall_s"}
X_LABELS = {
    "generations": "generation",
    "env_steps": "environment steps",
    "wall_s": "wall-clock time (s)",
}
# Keys of config.json that may differ between runs (seeds) of one configuration.

Rows = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Group:
    """One configuration: a label and the metrics rows of each of its runs (or seeds)."""

    label: str
    runs: tuple[Rows, ...]


def split_seeds(rows: Rows) -> list[Rows]:
    """The rows of one run, one list per seed (``seed`` is present when a run has several)."""
    by_seed: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_seed.setdefault(row.get("seed", 0), []).append(row)
    return [by_seed[key] for key in sorted(by_seed)]


def series(rows: Rows, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` arrays from the rows that carry a finite ``y``, sorted by ``x``."""
    key = X_AXES[x]
    pairs = [
        (float(row[key]), float(row[y]))
        for row in rows
        if row.get(y) is not None and row.get(key) is not None and math.isfinite(float(row[y]))
    ]
    if not pairs:
        return np.zeros(0), np.zeros(0)
    xs, ys = np.asarray(pairs, dtype=float).T
    order = np.argsort(xs, kind="stable")
    return xs[order], ys[order]


def mean_band(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], points: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, low, high)`` across curves; the band is a 95% CI where two or more curves exist.

    Curves that share their x values (generations, or env steps of seeds of one configuration)
    are averaged point by point. Otherwise (wall-clock time) each is interpolated onto a common
    grid that stops where the shortest curve stops: a mean is never extrapolated.
    """
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    if all(np.array_equal(x, curves[0][0]) for x, _ in curves):
        grid = curves[0][0]
        values = np.stack([y for _, y in curves])
    else:
        start = max(x[0] for x, _ in curves)
        stop = min(x[-1] for x, _ in curves)
        union = np.unique(np.concatenate([x for x, _ in curves]))
        union = union[(union >= start) & (union <= stop)]
        grid = union if len(union) <= points else np.linspace(start, stop, points)
        values = np.stack([np.interp(grid, x, y) for x, y in curves])
    n = len(curves)
    mean = values.mean(axis=0)
    if n < 2:
        return grid, mean, mean, mean
    half = half_widths(values, 0.95)
    return grid, mean, mean - half, mean + half


def plot_groups(
    groups: Sequence[Group],
    out: str | Path,
    *,
    x: str = "generations",
    title: str | None = None,
    solved_return: float | None = None,
) -> Path:
    """Write a two-panel figure (training fitness | evaluation return); format from the suffix."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    out = Path(out)
    with drawing(out):  # laid out in full here: numbers it cannot draw are one line
        fig = _fitness_figure(groups, x, title, solved_return)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out)
    return out


def _fitness_figure(
    groups: Sequence[Group], x: str, title: str | None, solved_return: float | None
) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8), dpi=120, layout="constrained")
    ax_train, ax_eval = fig.subplots(1, 2, sharex=True)
    colors = [f"C{i % 10}" for i in range(len(groups))]
    drawn = [_draw_group(ax_train, ax_eval, g, c, x) for g, c in zip(groups, colors, strict=True)]
    if solved_return is not None:
        _mark_solved(ax_train, ax_eval, solved_return)
    if not any(drawn):
        ax_eval.text(
            0.5, 0.5, "no evaluations yet", ha="center", va="center", transform=ax_eval.transAxes
        )
    _label_panels(ax_train, ax_eval, x)
    _line_style_legend(ax_train)
    if title:
        fig.suptitle(visible(title), fontsize=11)
    fig.draw_without_rendering()
    return fig


def _draw_group(ax_train: Any, ax_eval: Any, group: Group, color: str, x: str) -> bool:
    """One group's training curves (mean and best member) and evaluation curve, each a mean
    over the group's runs with a band when there are several; whether it had evaluations."""
    runs = [seed_rows for rows in group.runs for seed_rows in split_seeds(rows)]
    n = len(runs)
    label = f"{group.label} (n={n})" if n > 1 else group.label
    for y, style, width, name in (
        ("fitness_mean", "-", 1.8, label),
        ("fitness_best", "--", 1.0, None),
    ):
        gx, mean, low, high = mean_band([series(r, x, y) for r in runs])
        if len(gx):
            ax_train.plot(gx, mean, style, color=color, lw=width, label=name)
            if n > 1 and y == "fitness_mean":
                ax_train.fill_between(gx, low, high, color=color, alpha=0.2, lw=0)
    gx, mean, low, high = mean_band([series(r, x, "eval_return") for r in runs])
    if not len(gx):
        return False
    ax_eval.plot(gx, mean, "o-", color=color, lw=1.8, ms=3.5, label=label)
    if n > 1:
        ax_eval.fill_between(gx, low, high, color=color, alpha=0.2, lw=0)
    return True


# How far beyond the curves' own scale a threshold line may stretch a panel's axis: further,
# the curves would be drawn flat (and near 1e308 matplotlib's tick arithmetic overflows).
THRESHOLD_REACH = 1e6


def _mark_solved(ax_train: Any, ax_eval: Any, solved_return: float) -> None:
    """The task's solve threshold as a dotted line in both panels, named in the second; a
    threshold far off the curves' scale (``--set solved_return=1e308``) is named, not drawn."""
    for ax in (ax_train, ax_eval):
        if _within_reach(ax, solved_return):
            ax.axhline(solved_return, color="0.35", ls=":", lw=1.2)
    if not _within_reach(ax_eval, solved_return):
        ax_eval.text(0.01, 0.98, f"solved ({solved_return:g}): off this scale", va="top",
                     transform=ax_eval.transAxes, fontsize=8, color="0.3")  # fmt: skip
        return
    ax_eval.annotate(
        f"solved ({solved_return:g})",
        (0.01, solved_return),
        xycoords=("axes fraction", "data"),
        va="bottom",
        fontsize=8,
        color="0.3",
    )


def _within_reach(ax: Any, value: float) -> bool:
    low, high = ax.get_ylim()
    scale = max(abs(low), abs(high), 1.0)
    return math.isfinite(value) and abs(value) / THRESHOLD_REACH <= scale


def _label_panels(ax_train: Any, ax_eval: Any, x: str) -> None:
    ax_train.set_title("Training: population return", fontsize=10)
    ax_eval.set_title("Evaluation: return of the search mean (held-out episodes)", fontsize=10)
    ax_train.set_ylabel("return")
    for ax in (ax_train, ax_eval):
        ax.set_xlabel(X_LABELS[x])
        ax.grid(True, alpha=0.3, lw=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        if x == "env_steps":
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))


def _line_style_legend(ax_train: Any) -> None:
    """The groups' colours, then what a solid and a dashed line mean (the same for every group)."""
    from matplotlib.lines import Line2D

    handles, labels = ax_train.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="0.2", ls="-", lw=1.8),
        Line2D([], [], color="0.2", ls="--", lw=1.0),
    ]
    labels += ["population mean", "best member"]
    ax_train.legend(handles, labels, fontsize=8, frameon=False, loc="lower right")


# ---------------------------------------------------------------------------- run directories
# The most rows a figure keeps of each seed's training curve, and as many of its evaluations:
# a figure is a few hundred pixels wide, and a run may hold millions of generations.
CURVE_POINTS = 2048
# The fields a figure (and a sweep's summary) reads of a row.
_DRAWN = ("generation", "env_steps", "wall_s", "seed")
_TRAINING = ("fitness_mean", "fitness_best")
_EVALUATION = ("eval_return",)


class _Thinned:
    """Every ``stride``-th of the rows seen, ``stride`` doubling whenever more than ``most``
    are kept, and the last row: a curve's shape in at most ``most + 1`` rows, however long.
    Seeds of one run see the same rows, so they keep the same generations."""

    def __init__(self, most: int):
        self.most, self.stride, self.seen = most, 1, 0
        self.kept: list[tuple[int, dict[str, Any]]] = []
        self.last: tuple[int, dict[str, Any]] | None = None

    def add(self, row: dict[str, Any]) -> None:
        if self.seen % self.stride == 0:
            self.kept.append((self.seen, row))
            if len(self.kept) > self.most:
                self.stride *= 2
                self.kept = [(i, r) for i, r in self.kept if i % self.stride == 0]
        self.last = (self.seen, row)
        self.seen += 1

    def rows(self) -> list[dict[str, Any]]:
        rows = [row for _, row in self.kept]
        if self.last is not None and (not self.kept or self.kept[-1][0] != self.last[0]):
            rows.append(self.last[1])
        return rows


def curve_rows(run_dir: str | Path, seeds: int, points: int = CURVE_POINTS) -> list[dict]:
    """The rows of a run's ``metrics.jsonl`` a figure draws, read as a stream: per seed, at
    most ``points`` (and the last) of its training rows and as many of its evaluations, each
    with only the fields drawn. Memory follows the figure, not the file; rows of more seeds
    than the run's ``seeds`` are one line."""
    path = Path(run_dir) / METRICS
    curves: dict[Any, tuple[_Thinned, _Thinned]] = {}
    for row in iter_metrics(run_dir):
        seed = row.get("seed", 0)
        if seed not in curves:
            if len(curves) >= seeds:
                raise ConfigError(f"{path}: rows of more seeds than the run's {seeds}")
            curves[seed] = (_Thinned(points), _Thinned(points))
        training, evaluation = curves[seed]
        training.add(_fields(row, _TRAINING))
        if row.get("eval_return") is not None:
            evaluation.add(_fields(row, _EVALUATION))
    return [row for pair in curves.values() for thinned in pair for row in thinned.rows()]


def _fields(row: Mapping[str, Any], drawn: Sequence[str]) -> dict[str, Any]:
    return {key: row[key] for key in (*_DRAWN, *drawn) if key in row}


def group_runs(run_dirs: Sequence[str | Path]) -> list[Group]:
    """Runs whose configs differ only in seed or length form one group, in order of appearance."""
    keyed: dict[str, list[tuple[Path, RunConfig, Rows]]] = {}
    for run in map(Path, run_dirs):
        config = read_run_config(run)
        key = json.dumps(config.identity(), sort_keys=True, default=str)
        keyed.setdefault(key, []).append((run, config, curve_rows(run, config.seeds)))
    labels = [config_label(members[0][1]) for members in keyed.values()]
    groups = []
    for label, members in zip(labels, keyed.values(), strict=True):
        if labels.count(label) > 1:  # same task, strategy and popsize: name the runs
            label = f"{label} · {_common_label([run.name for run, _, _ in members])}"
        # A task name from a run's config.json: drawn as the characters it holds.
        groups.append(Group(visible(label), tuple(rows for _, _, rows in members)))
    return groups


def config_label(config: RunConfig) -> str:
    """``"pendulum · open_es · pop 256"`` from a run's config."""
    parts = [config.task_name, config.strategy.name]
    if config.popsize:
        parts.append(f"pop {config.popsize}")
    return " · ".join(str(p) for p in parts if p) or "run"


def _common_label(names: Sequence[str]) -> str:
    if len(names) == 1:
        return names[0]
    first = names[0]
    size = min(len(name) for name in names)
    while size and any(name[:size] != first[:size] for name in names):
        size -= 1
    prefix = first[:size].rstrip("-_. ")
    return f"{prefix}…" if prefix else f"{first} …"


def solved_return_of(run_dirs: Sequence[str | Path]) -> float | None:
    """The tasks' solve threshold when all runs share one, else ``None``."""
    values = {read_run_config(Path(run)).task.solved_return for run in run_dirs}
    return values.pop() if len(values) == 1 else None


def plot_runs(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    x: str = "generations",
    title: str | None = None,
) -> Path:
    """Fitness curves of run directories (grouped by configuration) into a PNG."""
    groups = group_runs(run_dirs)
    if title is None and len(groups) == 1:
        title = groups[0].label
    return plot_groups(groups, out, x=x, title=title, solved_return=solved_return_of(run_dirs))


# ---------------------------------------------------------------------------- grid heatmap
def training_outline(inside: np.ndarray) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Cell edges between training and other cells, as ``((x0, x1), (y0, y1))`` segments.

    Cell ``(row, column)`` spans ``column ± 0.5`` by ``row ± 0.5``. Traced edge by edge, so a
    training region in two parts (both signs of a parameter) gets two outlines.
    """
    inside = np.asarray(inside, dtype=bool)
    padded = np.pad(inside, 1)
    segments = []
    for r, c in zip(*np.nonzero(inside), strict=True):
        pr, pc = r + 1, c + 1
        if not padded[pr - 1, pc]:
            segments.append(((c - 0.5, c + 0.5), (r - 0.5, r - 0.5)))
        if not padded[pr + 1, pc]:
            segments.append(((c - 0.5, c + 0.5), (r + 0.5, r + 0.5)))
        if not padded[pr, pc - 1]:
            segments.append(((c - 0.5, c - 0.5), (r - 0.5, r + 0.5)))
        if not padded[pr, pc + 1]:
            segments.append(((c + 0.5, c + 0.5), (r - 0.5, r + 0.5)))
    return segments


# What a grid's heatmap shows, first found first: the record's field, its label and decimals.
GRID_QUANTITIES = (
    {"field": "score_vs_analytic", "label": "score (0 = zero action, 1 = analytic)", "decimals": 2},
    {"field": "margin_over_random", "label": "margin over random actions", "decimals": 1},
    {"field": "mean", "label": "mean test return", "decimals": 0},
)


def grid_quantity(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a grid record is read by (one of :data:`GRID_QUANTITIES`): its score, else its mean."""
    return next(dict(q) for q in GRID_QUANTITIES if q["field"] in record)


def plot_grid(record: Mapping[str, Any], out: str | Path, *, title: str | None = None) -> Path:
    """A heatmap of a grid record (:func:`esjax._src.analysis.meta.evaluate_grid`), one number per
    cell.

    The mean test return, or with a baseline the policy's score against it. Rows are the first
    parameter (growing upwards), columns the second; every cell carries its number, so the
    figure reads without the colour bar, and the cells inside the training sampler's range are
    outlined.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    shown = grid_quantity(record)
    numbers = np.asarray(record[shown["field"]], dtype=float)
    rows, cols = (list(v) for v in record["values"])
    row_name, col_name = record["axes"]
    fig = Figure(
        figsize=(1.5 + 0.75 * len(cols), 1.3 + 0.55 * len(rows)), dpi=120, layout="constrained"
    )
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(numbers), origin="lower", cmap="viridis", aspect="auto")
    finite = numbers[np.isfinite(numbers)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (r, c), value in np.ndenumerate(numbers):
        text = f"{value:.{shown['decimals']}f}" if math.isfinite(value) else "-"
        # Light text on the dark (low) end of viridis, dark text on the light end.
        color = "white" if not math.isfinite(value) or value < middle else "black"
        ax.text(c, r, text, ha="center", va="center", fontsize=7, color=color)
    for xs, ys in training_outline(np.asarray(record["in_training"], dtype=bool)):
        ax.plot(xs, ys, color="red", lw=2.0, solid_capstyle="projecting")
    ax.set_xticks(range(len(cols)), [f"{v:.3g}" for v in cols])
    ax.set_yticks(range(len(rows)), [f"{v:.3g}" for v in rows])
    ax.set_xlabel(col_name)
    ax.set_ylabel(row_name)
    ax.set_xlim(-0.5, len(cols) - 0.5)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    fig.colorbar(image, ax=ax, label=shown["label"])
    if np.any(record["in_training"]):
        handle = Line2D([], [], color="red", lw=2.0)
        fig.legend([handle], ["training range"], loc="outside lower left", fontsize=8)
    if title is None:
        title = f"{record.get('task') or 'run'} · {record.get('which', 'final')} policy · "
        title += f"{record.get('episodes')} episodes per cell"
    ax.set_title(title, fontsize=10)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out)
    return out
