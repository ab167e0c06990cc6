"""esjax._src.specs.stats: the one Student-t interval, against references computed another way."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from esjax._src.analysis import meta, plotting, sweeps
from esjax._src.specs import digits, stats

REPO = Path(__file__).resolve().parents[1]
# With 2 degrees of freedom the t quantile has a closed form, t_p = (2p - 1) / sqrt(2p(1 - p)):
# 4.3026527297494639 (some printed tables give 4.302652729911275, off in the 10th digit).
T_975_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
T_975_10 = 2.228138851986274  # t_{0.975, 10}


def test_hand_worked_three_values():
    # [1, 2, 3]: mean 2, sample sd 1, so the half-width is t_{0.975, 2} / sqrt(3).
    mean, half = stats.mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(T_975_2 / math.sqrt(3), rel=1e-12)
    assert stats.t_quantile(2) == pytest.approx(T_975_2, rel=1e-12)
    assert stats.t_quantile(2) == pytest.approx(4.302652729911275, rel=1e-9)  # as printed


def test_quantiles_match_printed_tables_and_tend_to_the_normal():
    assert stats.t_quantile(1) == pytest.approx(12.706, abs=5e-4)
    assert stats.t_quantile(10) == pytest.approx(T_975_10, rel=1e-12)
    assert stats.t_quantile(30) == pytest.approx(2.042, abs=5e-4)
    assert stats.t_quantile(2, confidence=0.99) == pytest.approx(9.925, abs=5e-4)
    assert stats.t_quantile(10**9) == pytest.approx(1.959964, abs=1e-6)
    assert stats.t_quantile(40) > 2.02  # the old tables' 1.96 past their last row
    assert math.isnan(stats.t_quantile(0))
    with pytest.raises(ValueError):
        stats.t_quantile(5, confidence=1.0)


@pytest.mark.parametrize("n", [2, 3, 11, 31, 40])
def test_interval_equals_scipy_t_interval(n: int):
    x = np.random.default_rng(n).normal(3.0, 2.0, size=n)
    low, high = scipy.stats.t.interval(0.95, n - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    mean, half = stats.mean_interval(x)
    assert mean == pytest.approx((low + high) / 2, rel=1e-12)
    assert half == pytest.approx((high - low) / 2, rel=1e-10)
    low99, high99 = scipy.stats.t.interval(0.99, n - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    assert stats.mean_interval(x, 0.99)[1] == pytest.approx((high99 - low99) / 2, rel=1e-10)


def test_one_value_no_values_and_nan():
    assert stats.mean_interval([5.0]) == (5.0, 0.0)
    assert all(math.isnan(v) for v in stats.mean_interval([]))
    assert all(math.isnan(v) for v in stats.mean_interval([1.0, math.nan, 3.0]))
    np.testing.assert_array_equal(stats.half_widths(np.ones((1, 4))), np.zeros(4))
    assert stats.interval_bounds([]) == {"mean": None, "low": None, "high": None}
    assert stats.interval_bounds([None, 5.0]) == {"mean": 5.0, "low": None, "high": None}
    with_none = stats.interval_bounds([1.0, None, 2.0, 3.0])
    half = T_975_2 / math.sqrt(3)
    assert with_none == pytest.approx({"mean": 2.0, "low": 2.0 - half, "high": 2.0 + half})


def test_meta_eleven_seeds_use_ten_degrees_of_freedom():
    # 0..10: mean 5, sample variance 11, so the half-width is exactly t_{0.975, 10}.
    mean, half = meta.mean_ci([float(v) for v in range(11)])
    assert mean == 5.0
    assert half == pytest.approx(T_975_10, rel=1e-12)
    assert half > 1.96 * 1.13  # meta's old table fell back to 1.96 here: 12 % too narrow


def test_plotting_band_and_sweeps_interval_agree_with_stats():
    rng = np.random.default_rng(7)
    for n in (2, 11, 40):  # 40 curves: past every old table, which used 1.96 there
        x = np.arange(5.0)
        curves = [(x, rng.normal(size=5)) for _ in range(n)]
        _, mean, low, high = plotting.mean_band(curves)
        columns = np.stack([y for _, y in curves])
        for j in range(len(x)):
            m, h = stats.mean_interval(columns[:, j])
            assert mean[j] == pytest.approx(m, rel=1e-12)
            assert high[j] - mean[j] == pytest.approx(h, rel=1e-9)
            assert mean[j] - low[j] == pytest.approx(h, rel=1e-9)
        per_seed = list(columns[:, 0])
        m, h = stats.mean_interval(per_seed)
        expected = {"mean": m, "low": m - h, "high": m + h}
        assert sweeps.interval(per_seed) == pytest.approx(expected, rel=1e-12)
        assert h == pytest.approx(
            scipy.stats.t.ppf(0.975, n - 1) * np.std(per_seed, ddof=1) / math.sqrt(n), rel=1e-12
        )


def test_no_hand_written_t_tables_remain():
    # Entries every old table had (t for 1 and 9 degrees of freedom), and the bare normal 1.96.
    sources = [*(REPO / "esjax").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    assert len(sources) > 20
    for path in sources:
        text = path.read_text()
        for literal in ("12.706", "2.262", "1.96 *"):
            assert literal not in text, f"{path.name} holds {literal}"


def test_importing_esjax_leaves_scipy_stats_unloaded():
    # scipy.stats costs most of a second; it loads on the first quantile, not on import.
    code = (
        "import sys, esjax\n"
        "from esjax._src.analysis import meta, plotting, sweeps\n"
        "from esjax._src.specs import stats\n"
        "assert 'scipy.stats' not in sys.modules, 'loaded on import'\n"
        "stats.t_quantile(3)\n"
        "assert 'scipy.stats' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ((1770.7,), 1),  # a locomotion return: one decimal, as before
        ((26.1, 25.9, 26.4), 1),
        ((4.57,), 2),
        ((0.698, 0.667, 0.747), 3),  # a MinAtar return and its interval: three figures
        ((0.0012,), 4),  # held at four decimals
        ((-0.5, 0.2), 3),  # by magnitude, whatever the sign
        ((0.0, None, math.nan, math.inf), 1),  # nothing to size by
        ((0.0, 0.05), 4),  # 0.0500
    ],
)
def test_decimals_show_three_figures_of_the_largest_value(values, expected):
    assert digits.decimals(*values) == expected
