"""``esjax report``: success rates, normalised aggregates and their intervals over runs and sweeps.

Every score is a seed's *final policy's test return on fresh episodes*, the number the one
``solved`` verdict (:func:`esjax._src.run.saved.verdict`) is made from, so a report's success count
is the count of the runs' own per-seed verdicts. Per configuration and task: the success rate with
a Wilson interval (``scipy.stats.binomtest``), the mean and IQM of the returns. Per
configuration, over the tasks that have a ``solved_return``: the IQM and mean of returns
normalised to 0 = a uniformly random policy and 1 = ``solved_return``, with stratified-bootstrap
intervals, performance profiles, and for two configurations the probability of improvement.

The statistics are Agarwal et al.'s recommendations (NeurIPS 2021), computed by
:mod:`esjax._src.specs.stats` on NumPy and SciPy: the IQM is ``scipy.stats.trim_mean`` at 25 %, the
intervals are percentile intervals of a stratified bootstrap (seeds resampled within each
task), as rliable computes them; the tests check the numbers against rliable called directly.
The profiles are bootstrapped the same way but count scores at or above each level, as a
verdict does (rliable counts strictly above). Every statistic's resamples are drawn from its
own ``numpy.random.default_rng(seed)``, never from NumPy's global state, so the same runs give
the same report, and a configuration's intervals do not depend on which others are beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from esjax._src.analysis.sweeps import SWEEP, configuration_dir, read_record
from esjax._src.run import runs, trust
from esjax._src.run.files import atomic_write, save_figure
from esjax._src.run.lifecycle import backend_modules
from esjax._src.specs.config import ConfigError, RunConfig, changed_keys
from esjax._src.specs.digits import decimals
from esjax._src.specs.foreign import visible
from esjax._src.specs.stats import (
    Statistic,
    fraction_at_or_above,
    interquartile_mean,
    mean_of_task_means,
    probability_of_improvement,
    stratified_bootstrap,
    wilson_interval,
)

REPORT_JSON, REPORT_MD, REPORT_PNG = runs.REPORT_JSON, runs.REPORT_MD, runs.REPORT_PNG
# Bootstrap resamples: a 16-seed, one-task report's intervals move in the third decimal between
# random states at this count, and the whole report stays within a few seconds.
REPS = 2000
CONFIDENCE = 0.95
PROFILE_POINTS = 81  # thresholds on the performance profiles' x axis
# The most seeds of one configuration on one task a report resamples: its statistics take a
# few seconds there, and a cell of more (pooled runs, or a run of that many) is reported on its
# first seeds, with a note saying so.
MAX_SEEDS = 2048


@dataclass(frozen=True)
class Cell:
    """One configuration on one task: each seed's final test return and verdict."""

    task: str
    env: str
    run_dirs: tuple[str, ...]
    seed_ids: tuple[int, ...]
    returns: tuple[float, ...]
    solved: tuple[bool, ...] | None  # None: the task has no solved_return
    solved_return: float | None
    random_return: float | None  # the task's own, when its preset records one
    test_episodes: int  # the fresh episodes behind each verdict; a measured floor uses as many
    identity: str  # the run configuration less its seeds: runs pooled into a cell must agree


# ---------------------------------------------------------------------------- statistics
def bootstrap(
    scores: np.ndarray | list[np.ndarray], statistics: dict[str, Statistic], reps: int, seed: int
) -> dict[str, dict[str, float]]:
    """``{name: {"value", "low", "high"}}`` for each named statistic of ``scores`` (seeds x
    tasks, or a pair of such for a comparison), all from the same resamples: a stratified
    bootstrap's percentile intervals (:func:`esjax._src.specs.stats.stratified_bootstrap`), drawn
    from
    ``numpy.random.default_rng(seed)``. Each statistic takes stacks of resampled matrices."""
    names = list(statistics)
    samples = scores if isinstance(scores, list) else [scores]
    value, low, high = stratified_bootstrap(
        samples,
        lambda *stacks: np.stack([statistics[name](*stacks) for name in names], axis=1),
        reps,
        np.random.default_rng(seed),
        CONFIDENCE,
    )
    return {name: {"value": float(value[i]), "low": float(low[i]), "high": float(high[i])}
            for i, name in enumerate(names)}  # fmt: skip


def aggregate(scores: np.ndarray, reps: int, seed: int) -> dict[str, dict[str, float]]:
    """IQM and mean of a seeds x tasks matrix of normalised scores, with their intervals."""
    return bootstrap(scores, {"iqm": interquartile_mean, "mean": mean_of_task_means}, reps, seed)


def task_iqm(returns: ArrayLike, reps: int, seed: int) -> dict[str, float]:
    """The IQM of one task's per-seed returns with its bootstrap interval (seeds resampled),
    in the task's own units: what a table of one task's seeds reports beside its success rate."""
    scores = np.asarray(returns, np.float64)[:, None]
    return bootstrap(scores, {"iqm": interquartile_mean}, reps, seed)["iqm"]


def success(solved: Sequence[bool]) -> dict[str, Any]:
    """Seeds solved, their share and its Wilson 95 % interval, from the per-seed verdicts."""
    k, n = sum(solved), len(solved)
    return {"successes": k, "success_rate": k / n, "success_interval": list(wilson_interval(k, n))}


def improvement(x: np.ndarray, y: np.ndarray, reps: int, seed: int) -> dict[str, float]:
    """P(a seed of X scores above one of Y), averaged over tasks, with its interval."""
    return bootstrap([x, y], {"p": probability_of_improvement}, reps, seed)["p"]


def profile(scores: np.ndarray, taus: np.ndarray, reps: int, seed: int) -> dict[str, list]:
    """The fraction of (seed, task) scores at or above each threshold, with its pointwise band.

    At or above, as a verdict counts a seed solved at ``solved_return`` (rliable's
    ``score_distributions`` counts strictly above): a task whose best return is its
    ``solved_return`` (Catch's 1.0) would show no solved seed at 1 otherwise.
    """
    fraction, low, high = stratified_bootstrap(
        [scores],
        lambda stack: fraction_at_or_above(stack, taus),
        reps,
        np.random.default_rng(seed),
        CONFIDENCE,
    )
    return {"fraction": fraction.tolist(), "low": low.tolist(), "high": high.tolist()}


def normalise(returns: ArrayLike, floor: float, solved_return: float) -> np.ndarray:
    """Returns on a scale where ``floor`` (a random policy) is 0 and ``solved_return`` is 1."""
    return (np.asarray(returns, np.float64) - floor) / (solved_return - floor)


# ---------------------------------------------------------------------------- reading runs
def sources(paths: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """``(configuration label, run directory)`` for each run the paths name.

    A run directory is one configuration, labelled by its directory name; a sweep directory
    gives one per configuration, labelled by its ``--vary`` values. ``LABEL=PATH`` sets the
    label (for a sweep, a prefix), so runs of one method on several tasks form one configuration.
    """
    found = []
    for text in paths:
        label, path = _split_label(str(text))
        if (path / SWEEP).is_file():
            for name, run_dir in _sweep_runs(path):
                found.append((f"{label}: {name}" if label else name, run_dir))
        elif (path / runs.CONFIG).is_file():
            found.append((label or path.resolve().name, path))
        elif path.is_dir():
            raise ConfigError(
                f"{path}: not a run directory (no config.json) nor a sweep (no {SWEEP})"
            )
        else:
            raise ConfigError(f"{path}: no such run or sweep directory")
    _check_unlabelled_names(paths, found)
    return found


def _check_unlabelled_names(paths: Sequence[str | Path], found: list[tuple[str, Path]]) -> None:
    """Run directories given without a label and named alike must be runs of one task.

    Their name is their label, so ``exp1/run`` (cartpole) and ``exp2/run`` (acrobot) would form
    one configuration across two tasks, whatever their methods; seeds of one task pool as
    labelled runs do (``collect`` checks they are the same configuration). A sweep's
    configurations are labelled by their ``--vary`` values instead, so two sweeps of one
    method on two tasks meet, as intended, in one configuration per value.
    """
    split = [_split_label(str(text)) for text in paths]
    unlabelled = {path.resolve() for label, path in split if label is None}
    tasks: dict[str, tuple[str, Path]] = {}
    for name, run_dir in found:
        if run_dir.resolve() not in unlabelled:
            continue
        task = runs.read_run_config(run_dir).task_name
        first = tasks.setdefault(name, (task, run_dir))
        if first[0] != task:
            raise ConfigError(
                f"{run_dir} and {first[1]} are both named {name!r} but run {task} and "
                f"{first[0]}; label each: LABEL=PATH"
            )


def _split_label(text: str) -> tuple[str | None, Path]:
    """``LABEL=PATH`` -> ``(LABEL, PATH)``; a path that exists as written is never split (sweep
    configurations' directories have ``=`` in their names)."""
    label, sep, rest = text.partition("=")
    if not sep or Path(text).exists() or not label or "/" in label:
        return None, Path(text)
    return label, Path(rest)


def _sweep_runs(sweep_dir: Path) -> list[tuple[str, Path]]:
    record = read_record(sweep_dir)
    try:
        found = [
            (", ".join(map(str, e["overrides"])) or str(e["name"]),
             configuration_dir(sweep_dir, e["run_dir"]))
            for e in record["configurations"]
        ]  # fmt: skip
    except (KeyError, TypeError):
        raise ConfigError(f"{sweep_dir / SWEEP}: not a sweep record") from None
    if not found:  # sweep.json lists its configurations once the sweep has finished
        raise ConfigError(
            f"{sweep_dir}: the sweep has not finished; finish it with "
            f"`esjax sweep --resume --out {sweep_dir}`"
        )
    return found


def read_cell(run_dir: Path) -> Cell:
    """A finished run's per-seed final test returns and verdicts, from its ``summary.json``.

    A summary without test returns (a task with no ``solved_return``, or a run from before
    summaries held them) has its final policies tested now, on the same fresh episodes.
    """
    config = runs.read_run_config(run_dir)
    if not (run_dir / runs.SUMMARY).is_file():
        raise ConfigError(
            f"{run_dir}: the run has not finished (no {runs.SUMMARY}); "
            f"finish it with `esjax evolve --resume --out {run_dir}`"
        )
    _check_seeds_held(run_dir, config)
    summary = runs.read_summary(run_dir)
    if not isinstance(summary, dict):
        raise ConfigError(f"{run_dir / runs.SUMMARY}: not a run summary")
    threshold = config.task.solved_return
    returns, verdicts = summary.get("final_test_return_per_seed"), summary.get("solved_per_seed")
    _check_per_seed(run_dir, returns, verdicts)
    if returns is None or (threshold is not None and verdicts is None):
        judged = backend_modules().saved.verdict(run_dir, config.seeds, threshold)
        returns, verdicts = judged.final_per_seed, judged.solved_per_seed
    if len(returns) != config.seeds or (verdicts is not None and len(verdicts) != config.seeds):
        raise ConfigError(f"{run_dir / runs.SUMMARY}: expected {config.seeds} seeds' results")
    solved = None
    if threshold is not None:
        assert verdicts is not None  # read with the threshold, or tested with it just now
        solved = tuple(bool(v) for v in verdicts)
    return Cell(
        task=config.task_name,
        env=config.task.env,
        run_dirs=(str(run_dir),),
        seed_ids=config.seed_ids,
        returns=tuple(float(r) for r in returns),
        solved=solved,
        solved_return=threshold,
        random_return=config.task.random_return,
        test_episodes=config.task.test_episodes,
        identity=_identity(config, summary.get("generations", config.generations)),
    )


def _check_seeds_held(run_dir: Path, config: RunConfig) -> None:
    """The seeds config.json claims are the seeds the run's final policy holds: what a report
    iterates over is bounded by the run's own arrays (a run without that file, which esjax
    never leaves, by :data:`MAX_SEEDS` alone)."""
    if not os.path.lexists(run_dir / runs.POLICIES["final"]):
        return
    held = runs.policy_seed_count(run_dir, config)
    if held != config.seeds:
        raise ConfigError(
            f"{run_dir}: {runs.CONFIG} says {config.seeds:,} seeds, its final policy holds {held:,}"
        )


def _check_per_seed(run_dir: Path, returns: object, verdicts: object) -> None:
    """A summary's per-seed lists, as esjax writes them: numbers, and true or false."""
    where = run_dir / runs.SUMMARY
    if returns is not None and not (
        isinstance(returns, list)
        and all(isinstance(r, int | float) and not isinstance(r, bool) for r in returns)
    ):
        raise ConfigError(f"{where}: final_test_return_per_seed is not a list of numbers")
    if verdicts is not None and not (
        isinstance(verdicts, list) and all(isinstance(v, bool) for v in verdicts)
    ):
        raise ConfigError(f"{where}: solved_per_seed is not a list of true or false")


def _identity(config: RunConfig, generations: int) -> str:
    """What pooled runs must share: the configuration and how long it ran, not the seeds."""
    return json.dumps({**config.identity(), "generations": generations}, sort_keys=True)


def collect(paths: Sequence[str | Path]) -> dict[str, dict[str, Cell]]:
    """``{configuration: {task: cell}}``, in the order given.

    Runs with one label on one task are pooled when they are the same configuration with
    different seeds (``--seed 0 --seeds 8`` and ``--seed 8 --seeds 8``); anything else there is
    an error, never a silent mix.
    """
    table: dict[str, dict[str, Cell]] = {}
    for label, run_dir in sources(paths):
        cell = read_cell(run_dir)
        cells = table.setdefault(label, {})
        old = cells.get(cell.task)
        if old is None:
            cells[cell.task] = cell
            continue
        if old.identity != cell.identity:
            differ = ", ".join(
                changed_keys(json.loads(old.identity), json.loads(cell.identity))[:4]
            )
            raise ConfigError(
                f"{run_dir}: {label!r} already has a run of {cell.task} with another "
                f"configuration ({old.run_dirs[0]}; {differ} differ); label each: LABEL=PATH"
            )
        if set(old.seed_ids) & set(cell.seed_ids):
            raise ConfigError(f"{run_dir}: its seeds are already in {label!r} ({old.run_dirs[0]})")
        cells[cell.task] = replace(
            old,
            run_dirs=old.run_dirs + cell.run_dirs,
            seed_ids=old.seed_ids + cell.seed_ids,
            returns=old.returns + cell.returns,
            solved=None if old.solved is None else old.solved + (cell.solved or ()),
        )
    return table


def task_floors(table: dict[str, dict[str, Cell]]) -> dict[str, dict[str, Any]]:
    """Per task: its ``solved_return`` and the random policy's return it is normalised from.

    The floor is the task's ``random_return`` when its preset records one, else the mean return
    of uniformly random actions on the first run's fresh test episodes, as many as the task's
    ``test_episodes`` (measured here).
    """
    first: dict[str, Cell] = {}
    for cells in table.values():
        for task, cell in cells.items():
            seen = first.setdefault(task, cell)
            if (seen.solved_return, seen.random_return) != (cell.solved_return, cell.random_return):
                raise ConfigError(
                    f"{task}: runs disagree on solved_return or random_return "
                    f"({seen.run_dirs[0]}, {cell.run_dirs[0]}); report them separately"
                )
    floors = {}
    for task, cell in first.items():
        entry: dict[str, Any] = {"env": cell.env, "solved_return": cell.solved_return}
        if cell.solved_return is not None and cell.random_return is not None:
            entry.update(random_return=cell.random_return, source="the task's random_return")
            if not cell.random_return < cell.solved_return:  # e.g. solved_return lowered by --set
                raise ConfigError(
                    f"{task}: random_return ({cell.random_return:g}) must be below solved_return "
                    f"({cell.solved_return:g}) to normalise by them; set both"
                )
        elif cell.solved_return is not None:
            episodes = cell.test_episodes  # the floor on the episodes the verdicts are on
            measured = backend_modules().saved.baseline_returns(
                cell.run_dirs[0], episodes, baseline="random"
            )
            entry.update(
                random_return=float(np.mean(measured)),
                source=f"random actions on {episodes} test episodes of {cell.run_dirs[0]}",
            )
            if not entry["random_return"] < cell.solved_return:
                raise ConfigError(f"{task}: a random policy already reaches solved_return")
        floors[task] = entry
    return floors


# ---------------------------------------------------------------------------- the report
def _task_entry(cell: Cell, floor: dict[str, Any], reps: int, seed: int) -> dict[str, Any]:
    """One configuration on one task: seeds, verdicts, success rate, returns."""
    returns = np.asarray(cell.returns)
    iqm = task_iqm(returns, reps, seed)
    entry: dict[str, Any] = {
        "run_dirs": list(cell.run_dirs),
        "seeds": len(returns),
        "returns": list(cell.returns),
        "mean_return": float(returns.mean()),
        "iqm_return": iqm["value"],
        "iqm_interval": [iqm["low"], iqm["high"]],
        "solved_per_seed": None if cell.solved is None else list(cell.solved),
        "successes": None,
        "success_rate": None,
        "success_interval": None,
        "normalised": None,
    }
    if cell.solved is not None:
        entry.update(success(cell.solved))
        floor_value, top = floor["random_return"], floor["solved_return"]
        entry["normalised"] = normalise(returns, floor_value, top).tolist()
    return entry


def score_matrix(
    label: str, tasks: dict[str, dict[str, Any]], notes: list[str]
) -> tuple[list[str], np.ndarray | None]:
    """``(tasks, seeds x tasks matrix of normalised scores)`` of one configuration.

    Tasks without a ``solved_return`` have no normalised score and stay out (noted). With
    unequal seed counts, each task's first ``min`` seeds are used, and that is noted too.
    """
    scored = [t for t, e in tasks.items() if e["normalised"] is not None]
    left_out = [t for t in tasks if t not in scored]
    if left_out:
        notes.append(f"{label}: {', '.join(left_out)} left out of the aggregate (no solved_return)")
    if not scored:
        return [], None
    counts = {t: len(tasks[t]["normalised"]) for t in scored}
    n = min(counts.values())
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{t} {c}" for t, c in counts.items())
        notes.append(f"{label}: unequal seeds per task ({shown}); the aggregate uses the first {n}")
    return scored, np.array([tasks[t]["normalised"][:n] for t in scored]).T


def report(
    paths: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    reps: int = REPS,
    seed: int = 0,
    trust_code: bool = False,
) -> dict[str, Any]:
    """Report on runs and sweeps; write ``report.json``, ``report.md`` and ``report.png``.

    ``paths``: run or sweep directories, each optionally ``LABEL=PATH`` (see :func:`sources`).
    ``out``: the directory to write into; default the path itself for one, else the working
    directory. ``reps`` and ``seed``: the bootstrap's resamples and random state. Returns the
    record ``report.json`` holds. A run whose summary lacks its test returns is tested again,
    which imports the code its task names only if this user made it, or with ``trust_code``
    (:mod:`esjax._src.run.trust`).
    """
    if trust_code:
        trust.grant(_split_label(str(text))[1] for text in paths)
    if not paths:
        raise ConfigError("give at least one run or sweep directory")
    if not isinstance(reps, int) or reps < 1:
        raise ConfigError(f"reps must be a positive integer, got {reps!r}")
    table = collect(paths)
    floors = task_floors(table)
    notes: list[str] = []
    table = _capped(table, notes)
    configurations, matrices = [], {}
    for label, cells in table.items():
        tasks = {t: _task_entry(cell, floors[t], reps, seed) for t, cell in cells.items()}
        scored, matrix = score_matrix(label, tasks, notes)
        entry: dict[str, Any] = {"label": label, "tasks": tasks, "aggregate": None}
        if matrix is not None:
            matrices[label] = (scored, matrix)
            entry["aggregate"] = {"tasks": scored, "seeds": int(matrix.shape[0]),
                                  **aggregate(matrix, reps, seed)}  # fmt: skip
        configurations.append(entry)
    record = {
        "method": _method(reps, seed),
        "tasks": floors,
        "configurations": configurations,
        "probability_of_improvement": _compare(matrices, reps, seed, notes),
        "profiles": _profiles(matrices, reps, seed),
        "notes": notes,
    }
    return write(record, _out_dir(paths, out))


def _capped(table: dict[str, dict[str, Cell]], notes: list[str]) -> dict[str, dict[str, Cell]]:
    """Each cell's first :data:`MAX_SEEDS` seeds, and a note for each cell that had more."""
    capped: dict[str, dict[str, Cell]] = {}
    for label, cells in table.items():
        capped[label] = {}
        for task, cell in cells.items():
            if len(cell.returns) > MAX_SEEDS:
                notes.append(f"{label} on {task}: {len(cell.returns):,} seeds; the report uses "
                             f"the first {MAX_SEEDS:,}")  # fmt: skip
                cell = replace(
                    cell,
                    seed_ids=cell.seed_ids[:MAX_SEEDS],
                    returns=cell.returns[:MAX_SEEDS],
                    solved=None if cell.solved is None else cell.solved[:MAX_SEEDS],
                )
            capped[label][task] = cell
    return capped


def _method(reps: int, seed: int) -> dict[str, Any]:
    return {
        "score": "each seed's final policy's mean return on fresh test episodes",
        "normalised": "(return - random_return) / (solved_return - random_return)",
        "success_interval": "Wilson score interval (scipy.stats.binomtest)",
        "aggregate_intervals": "stratified bootstrap over seeds within tasks, percentile "
        "(esjax._src.specs.stats.stratified_bootstrap, NumPy)",
        "iqm": "mean of the middle half of the scores (scipy.stats.trim_mean, 25 % cut)",
        "task_iqm_interval": "bootstrap over one task's seeds, percentile, in its own units",
        "confidence": CONFIDENCE,
        "reps": reps,
        "random_state": seed,
    }


def _compare(matrices: dict, reps: int, seed: int, notes: list[str]) -> dict[str, Any] | None:
    """The probability of improvement of the first configuration over the second (two only)."""
    if len(matrices) != 2:
        return None
    (x_label, (x_tasks, x)), (y_label, (y_tasks, y)) = matrices.items()
    if sorted(x_tasks) != sorted(y_tasks):
        notes.append("no probability of improvement: the two configurations have different tasks")
        return None
    y = y[:, [y_tasks.index(task) for task in x_tasks]]  # task by task, in X's order
    return {"x": x_label, "y": y_label, "tasks": x_tasks, **improvement(x, y, reps, seed)}


def _profiles(matrices: dict, reps: int, seed: int) -> dict[str, Any] | None:
    """Performance profiles of every configuration on one set of thresholds."""
    if not matrices:
        return None
    every = np.concatenate([m.ravel() for _, m in matrices.values()])
    taus = np.linspace(min(0.0, every.min()), max(1.25, every.max()), PROFILE_POINTS)
    curves = {label: profile(m, taus, reps, seed) for label, (_, m) in matrices.items()}
    return {"taus": taus.tolist(), "curves": curves}


def _out_dir(paths: Sequence[str | Path], out: str | Path | None) -> Path:
    if out is not None:
        return Path(out)
    return _split_label(str(paths[0]))[1] if len(paths) == 1 else Path.cwd()


# ---------------------------------------------------------------------------- files
def write(record: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Write the figure (when there are profiles), the Markdown and the JSON into ``out_dir``."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{out_dir}: cannot create the report's directory ({err})") from None
    files = {"json": str(out_dir / REPORT_JSON), "markdown": str(out_dir / REPORT_MD)}
    if record["profiles"] is not None:
        files["figure"] = str(plot_profiles(record["profiles"], out_dir / REPORT_PNG))
    record = {**record, "files": files}
    atomic_write(out_dir / REPORT_MD, markdown(record).encode())
    runs.write_json(out_dir / REPORT_JSON, record)
    return record


def plot_profiles(profiles: dict[str, Any], path: Path) -> Path:
    """Performance profiles with their 95 % bands (matplotlib's Agg canvas, no display)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=120, layout="constrained")
    ax = fig.subplots()
    taus = np.asarray(profiles["taus"])
    for i, (label, curve) in enumerate(profiles["curves"].items()):
        color = f"C{i % 10}"
        ax.plot(taus, curve["fraction"], color=color, label=label)
        ax.fill_between(taus, curve["low"], curve["high"], color=color, alpha=0.2, linewidth=0)
    for x in (0.0, 1.0):
        ax.axvline(x, color="0.6", linewidth=0.8, linestyle=":")
    ax.set_xlabel("normalised score τ (0: random policy, 1: solved_return)")
    ax.set_ylabel("fraction of (seed, task) scores ≥ τ")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    return path


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ci(stats: dict[str, float]) -> str:
    return f"{_num(stats['value'])} [{_num(stats['low'])}, {_num(stats['high'])}]"


def _returns(task: dict[str, Any]) -> str:
    """The mean and the IQM with its interval, at the decimals of the largest of them."""
    low, high = task["iqm_interval"]
    d = decimals(task["mean_return"], task["iqm_return"], low, high)
    iqm = f"{_num(task['iqm_return'], d)} [{_num(low, d)}, {_num(high, d)}]"
    return f"{_num(task['mean_return'], d)} | {iqm}"


def markdown(record: dict[str, Any]) -> str:
    """The report as Markdown tables a README or paper can paste; labels, tasks and notes,
    text from the runs' and sweeps' files, shown as the characters they hold."""
    confidence = f"{record['method']['confidence']:.0%}"
    lines = [
        f"| configuration | task | seeds | solved | success rate [{confidence} Wilson] "
        f"| mean return | IQM return [{confidence}] |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for entry in record["configurations"]:
        for task, t in entry["tasks"].items():
            solved = "–" if t["successes"] is None else f"{t['successes']}/{t['seeds']}"
            rate = "–"
            if t["success_rate"] is not None:
                low, high = t["success_interval"]
                rate = f"{_num(t['success_rate'])} [{_num(low)}, {_num(high)}]"
            lines.append(
                f"| {visible(entry['label'])} | {visible(task)} | {t['seeds']} | {solved} | {rate} "
                f"| {_returns(t)} |"
            )
    aggregated = [e for e in record["configurations"] if e["aggregate"] is not None]
    if aggregated:
        lines += [
            "",
            f"| configuration | tasks | seeds | IQM normalised [{confidence}] "
            f"| mean normalised [{confidence}] |",
            "|---|---|---:|---|---|",
        ]
        for entry in aggregated:
            a = entry["aggregate"]
            lines.append(
                f"| {visible(entry['label'])} | {visible(', '.join(a['tasks']))} | {a['seeds']} "
                f"| {_ci(a['iqm'])} | {_ci(a['mean'])} |"
            )
    poi = record["probability_of_improvement"]
    if poi is not None:
        shown = f"P({poi['x']} > {poi['y']})"
        lines += ["", f"{visible(shown)} = {_ci(poi)} ({confidence} interval)"]
    if "figure" in record.get("files", {}):
        lines += ["", f"![performance profiles]({Path(record['files']['figure']).name})"]
    method = record["method"]
    lines += [
        "",
        f"Scores: {method['score']}; normalised 0 = a random policy, 1 = solved_return. "
        f"Intervals: percentile stratified bootstrap (seeds resampled within each task; "
        f"esjax._src.specs.stats on NumPy), {method['reps']} resamples, "
        f"random state {method['random_state']}.",
    ]
    lines += [f"Note: {visible(note)}." for note in record["notes"]]
    return "\n".join(lines) + "\n"
