"""Confidence intervals: the one place esjax computes them (NumPy and SciPy, no JAX).

A mean's Student-t interval (below), a success rate's Wilson interval
(:func:`wilson_interval`, the seeds solved that ``esjax report`` gives), and the stratified
bootstrap ``esjax report`` puts around its aggregates (:func:`stratified_bootstrap`, with the
statistics it resamples: :func:`interquartile_mean`, :func:`mean_of_task_means`,
:func:`probability_of_improvement`, :func:`fraction_at_or_above`).

Plots, meta-evolution tables, sweep summaries and the benchmark scripts all report a mean over
a few seeds with a two-sided Student-t interval. They used to carry hand-typed quantile tables
that disagreed past their last row (some fell back to the normal 1.96 from 10 degrees of
freedom, which makes an 11-seed interval 12 % too narrow); the quantile now comes from
``scipy.stats.t.ppf`` for any number of degrees of freedom.

The interval is ``mean ± t_{(1 + confidence) / 2, n - 1} · s / √n`` with ``s`` the sample
standard deviation (``ddof=1``). A NaN among the values propagates to the mean and half-width
(nothing raises), as the callers expect.

SciPy is imported on the first quantile asked for, not with this module: ``import esjax``
reaches it (through the sweeps), and ``scipy.stats`` alone adds most of a second to every
command's start-up (as seaborn's did: see :data:`esjax._src.envs.core.DRAWING_ONLY_MODULES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike


def t_quantile(dof: float, confidence: float = 0.95) -> float:
    """The two-sided Student-t quantile for ``dof`` degrees of freedom (NaN below 1).

    It is the factor that multiplies the standard error to give the half-width of a
    ``confidence`` interval of a mean, e.g. 4.303 for 3 values and 2.228 for 11 at 95 %; it
    tends to the normal 1.960 only as ``dof`` grows without bound.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if not dof >= 1:  # also catches NaN
        return math.nan
    from scipy.stats import t as student_t  # lazily: see the module's docstring

    return float(student_t.ppf(0.5 + confidence / 2.0, dof))


def half_widths(samples: ArrayLike, confidence: float = 0.95) -> np.ndarray:
    """Half-widths of the interval of the mean along axis 0 (one sample per row).

    For curves stacked as rows (seeds x points) this is the band at every point at once. With
    fewer than two rows there is no spread to estimate, so the half-width is 0 (the band
    collapses onto the mean) rather than NaN. 1-D samples give a 0-d array.
    """
    x = np.asarray(samples, dtype=np.float64)
    n = x.shape[0] if x.ndim else 1
    if n < 2:
        return np.zeros(x.shape[1:])
    return np.asarray(t_quantile(n - 1, confidence) * x.std(axis=0, ddof=1) / math.sqrt(n))


def mean_interval(values: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """``(mean, half-width)`` of the Student-t interval of the mean of ``values``.

    One value gives a half-width of 0.0 (a single seed has no interval to draw); no values
    give ``(nan, nan)`` without a warning, since there is no mean to report.
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return math.nan, math.nan
    return float(x.mean()), float(half_widths(x, confidence))


def interval_bounds(
    values: Iterable[float | None], confidence: float = 0.95
) -> dict[str, float | None]:
    """``{"mean", "low", "high"}`` for a JSON summary; ``None`` where there is nothing to say.

    ``None`` entries (a seed without a result) are skipped. No values: every key is ``None``;
    one value: ``low`` and ``high`` are ``None`` (no interval for one seed, unlike the 0.0
    half-width of :func:`mean_interval`, so a reader cannot mistake it for a certain value).
    """
    data = [v for v in values if v is not None]
    if not data:
        return {"mean": None, "low": None, "high": None}
    mean, half = mean_interval(data, confidence)
    if len(data) < 2:
        return {"mean": mean, "low": None, "high": None}
    return {"mean": mean, "low": mean - half, "high": mean + half}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a success rate: unlike the normal one, it stays inside
    [0, 1] and is not empty at 0 or n successes, which a few seeds often give."""
    from scipy.stats import binomtest  # lazily: see the module's docstring

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


# ---------------------------------------------------------------------------- the bootstrap
# ``esjax report``'s aggregates over seeds and tasks, after Agarwal et al., "Deep Reinforcement
# Learning at the Edge of the Statistical Precipice" (NeurIPS 2021). Each statistic below takes
# a stack of score matrices, (resamples, seeds, tasks), and gives one value per resample (or a
# row of them), so a whole block of resamples is one NumPy expression; the point estimate is
# the same function on a stack of one, the matrix itself.
Statistic = Callable[..., np.ndarray]
# Resampled scores held at once (elements): bounds the memory of a bootstrap over many seeds and
# tasks, while a report's usual 16 seeds x a few tasks still take all its resamples in one block.
RESAMPLE_BLOCK = 1 << 20


def interquartile_mean(scores: np.ndarray) -> np.ndarray:
    """The IQM of each matrix in the stack: the mean of the middle half of its scores, pooled
    over seeds and tasks (25 % cut from each end, ``scipy.stats.trim_mean``).

    Unlike the mean, a seed or two that diverged cannot drag it; unlike the median, it still
    averages half the scores, so its interval over a few seeds stays narrow.
    """
    from scipy.stats import trim_mean  # lazily: see the module's docstring

    stack = np.asarray(scores, np.float64)
    return np.asarray(trim_mean(stack.reshape(stack.shape[0], -1), 0.25, axis=1))


def mean_of_task_means(scores: np.ndarray) -> np.ndarray:
    """Each matrix's per-task means, averaged: every task weighs the same."""
    return np.asarray(scores, np.float64).mean(axis=1).mean(axis=1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(a seed of X scores above a seed of Y) on each task, a tie counting half, averaged over
    the tasks: per pair of matrices (seeds of X x tasks, seeds of Y x tasks) in the stacks.

    Pairs are compared within a task only, so no task's scale or difficulty weighs on another.
    Counted from ranks (the Mann-Whitney U of X, ties at their average rank), not pair by pair:
    memory and time grow with the seeds, not with their pairs.
    """
    from scipy.stats import rankdata  # lazily: see the module's docstring

    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    nx, ny = xs.shape[1], ys.shape[1]
    ranks = rankdata(np.concatenate([xs, ys], axis=1), axis=1)
    u = ranks[:, :nx].sum(axis=1) - nx * (nx + 1) / 2
    return (u / (nx * ny)).mean(axis=1)


def fraction_at_or_above(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Each matrix's share of (seed, task) scores at or above each threshold (a performance
    profile): at or above, as a seed counts solved at ``solved_return`` itself."""
    stack = np.asarray(scores, np.float64)
    flat = stack.reshape(stack.shape[0], -1, 1)
    return (flat >= np.asarray(thresholds, np.float64)).mean(axis=1)


def stratified_resamples(scores: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` resamples of a seeds x tasks matrix, stacked: each task's column is drawn with
    replacement from that task's own seeds.

    Stratified because the tasks are the benchmark, fixed by the experimenter, while the seeds
    are the random sample: a plain bootstrap of all (seed, task) scores would let a resample
    lose a task or repeat one, and so measure variation that repeating the runs cannot give.
    """
    seeds, tasks = scores.shape
    rows = rng.integers(seeds, size=(count, seeds, tasks))
    return scores[rows, np.arange(tasks)]


def bootstrap_replicates(
    samples: Sequence[np.ndarray], statistic: Statistic, reps: int, rng: np.random.Generator
) -> np.ndarray:
    """``statistic`` on ``reps`` resamples, one row each: every sample (a seeds x tasks matrix)
    is resampled by :func:`stratified_resamples`, independently of the others (two
    configurations' seeds are separate experiments). Blocks of resamples bound the memory."""
    block = max(1, RESAMPLE_BLOCK // sum(sample.size for sample in samples))
    rows = []
    for start in range(0, reps, block):
        count = min(block, reps - start)
        resampled = [stratified_resamples(sample, count, rng) for sample in samples]
        rows.append(np.asarray(statistic(*resampled), np.float64).reshape(count, -1))
    return np.concatenate(rows)


def percentile_interval(
    replicates: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper ``(1 ± confidence) / 2`` quantiles of each column of bootstrap
    replicates (linear interpolation between order statistics, NumPy's default)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(replicates, [tail, 100.0 - tail], axis=0)
    return low, high


def stratified_bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Statistic,
    reps: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(value, low, high)``: ``statistic`` of the samples (each a seeds x tasks matrix) and
    the percentile interval of every component over ``reps`` stratified resamples.

    All components come from the same resamples, and all randomness from ``rng``: the same
    generator state gives the same interval, whatever NumPy's global state.
    """
    samples = [np.asarray(sample, np.float64) for sample in samples]
    value = np.asarray(statistic(*(sample[None] for sample in samples)), np.float64).reshape(-1)
    low, high = percentile_interval(bootstrap_replicates(samples, statistic, reps, rng), confidence)
    return value, low, high
