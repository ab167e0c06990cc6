"""Confidence intervals: the one place esjax computes them (NumPy and SciPy, no JAX).

A mean's Student-t interval (below), and a success rate's Wilson interval
(:func:`wilson_interval`, the seeds solved that ``esjax report`` gives).

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
command's start-up (as seaborn's did: see :data:`esjax.envs.DRAWING_ONLY_MODULES`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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
