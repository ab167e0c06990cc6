"""``esjax report`` against independent computations: rliable called directly on the same score
matrices (the oracle: its point estimates exactly, its bootstrap intervals within Monte Carlo
error), the bootstrap distribution enumerated exactly on tiny cases, the Wilson interval's closed
form, the runs' own per-seed verdicts, normalisation by hand.

esjax computes every statistic itself (:mod:`esjax._src.specs.stats`), so only the oracle
comparisons import rliable, and plainly: it is in the ``dev`` extra, and a failed import is a
failure.

The run directories are written by esjax's own writers (a resolved ``config.json`` and a
``summary.json`` from :class:`esjax._src.run.saved.Verdict`) with returns chosen here, so no test
trains.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from esjax._src.run import runs
from esjax._src.run.saved import Verdict
from esjax._src.run.training import resolve_config
from esjax._src.specs import stats
from esjax._src.specs.config import ConfigError

report_module = importlib.import_module("esjax._src.analysis.reporting")
report = report_module.report

# arch 7 (under rliable, the oracle) warns that the random_state argument will be renamed.
pytestmark = pytest.mark.filterwarnings("ignore:random_state is deprecated:FutureWarning")
REPS = 500
# Resamples on each side of an oracle comparison of intervals (see LEVEL_SDS). rliable's
# probability of improvement runs a Mann-Whitney test per task and resample (about 0.8 ms
# each), so it gets fewer.
ORACLE_REPS = 5000
ORACLE_REPS_IMPROVEMENT = 2000
# esjax and rliable estimate the same quantile of the same bootstrap distribution (the
# statistic over stratified resamples of the same scores), each from its own resamples, so
# their ends differ by Monte Carlo error only. Read on esjax's B1 replicates, rliable's 2.5 %
# end (from B2 resamples) sits at a level off 0.025 by two independent binomial errors, of
# standard deviation sqrt(p (1 - p) (1 / B1 + 1 / B2)): 0.0031 for 5000 and 5000, 0.0041 for
# 5000 and 2000. Four of them is missed by chance about once in 16,000 comparisons, and the
# seeds are fixed, so the test cannot flicker; a 90 % interval instead (its end at 0.05) is 6
# to 8 of them away. Levels are compared rather than values because a value's error depends
# on the distribution's density there, which the test would have to estimate.
LEVEL_SDS = 4.0
CART_RANDOM = 22.0  # set as the task's random_return below
RNG = np.random.default_rng(7)
A_CART = RNG.uniform(100, 500, 12).round(1)
B_CART = RNG.uniform(300, 500, 12).round(1)
A_ACRO = RNG.uniform(-300, -80, 12).round(1)
B_ACRO = RNG.uniform(-200, -70, 12).round(1)
ORACLE_SEED = 3


def make_run(path: Path, task: str, returns, *, random_return=None, finished=True, **kw) -> Path:
    """A run directory as ``esjax evolve`` leaves it, with these per-seed final test returns."""
    overrides = [f"random_return={random_return!r}"] if random_return is not None else []
    config = resolve_config(task, seeds=len(returns), overrides=overrides, **kw)
    path.mkdir(parents=True)
    runs.write_run_config(path, config)
    if finished:
        verdict = Verdict(config.task.solved_return, tuple(returns), tuple(returns))
        runs.write_json(path / runs.SUMMARY, verdict.to_json())
    return path


@pytest.fixture(scope="module")
def two_methods(tmp_path_factory):
    """Two labelled configurations, each on cartpole and acrobot."""
    root = tmp_path_factory.mktemp("runs")
    paths = {
        "a=cart": make_run(root / "a-cart", "cartpole", A_CART, random_return=CART_RANDOM),
        "b=cart": make_run(
            root / "b-cart", "cartpole", B_CART, random_return=CART_RANDOM, strategy="pgpe"
        ),
        "a=acro": make_run(root / "a-acro", "acrobot", A_ACRO, random_return=-500.0),
        "b=acro": make_run(root / "b-acro", "acrobot", B_ACRO, random_return=-500.0, popsize=64),
    }
    args = [f"{k.split('=')[0]}={p}" for k, p in paths.items()]
    return root, args


@pytest.fixture(scope="module")
def oracle_record(two_methods, tmp_path_factory):
    """The two configurations' report with as many resamples as the oracle draws."""
    _, args = two_methods
    return report(args, tmp_path_factory.mktemp("oracle"), reps=ORACLE_REPS, seed=ORACLE_SEED)


def normalised_by_hand(returns, low, high):
    return [(r - low) / (high - low) for r in returns]


def matrix_by_hand(cart, acro):
    return np.stack(
        [normalised_by_hand(cart, CART_RANDOM, 475.0), normalised_by_hand(acro, -500.0, -100.0)],
        axis=1,
    )


def esjax_replicates(samples, statistic, reps=ORACLE_REPS, seed=ORACLE_SEED):
    """The bootstrap replicates behind a report's interval: its resamples are drawn from
    ``default_rng(seed)`` in the same order whatever the statistic, so these are the very ones."""
    return stats.bootstrap_replicates(samples, statistic, reps, np.random.default_rng(seed))


def rliable_estimates(samples, statistic, reps=ORACLE_REPS, seed=ORACLE_SEED):
    """rliable's point estimate and 95 % percentile interval (2 x k) of ``statistic`` (one
    matrix in, or a pair for a comparison; a vector out), on its own resamples."""
    from rliable import library

    np.random.seed(seed)  # rliable 1.2 resamples from NumPy's global generator
    scores = samples[0] if len(samples) == 1 else list(samples)
    points, intervals = library.get_interval_estimates(
        {"x": scores}, statistic, reps=reps, random_state=np.random.RandomState(seed)
    )
    return np.asarray(points["x"]).reshape(-1), np.asarray(intervals["x"]).reshape(2, -1)


def assert_ends_at_their_levels(replicates, rliable_interval, rliable_reps=ORACLE_REPS):
    """rliable's interval read on esjax's bootstrap distribution: each end at its level (2.5 %,
    97.5 %) within LEVEL_SDS Monte Carlo standard deviations, column by column. With ties (a
    profile's fractions are multiples of one over the scores) a level anywhere from the share
    strictly below an end to the share at or below it fits."""
    replicates = np.asarray(replicates).reshape(len(replicates), -1)
    for end, level in zip(rliable_interval, (0.025, 0.975), strict=True):
        sd = math.sqrt(level * (1 - level) * (1 / len(replicates) + 1 / rliable_reps))
        below = (replicates < end).mean(axis=0)
        at_or_below = (replicates <= end).mean(axis=0)
        misses = (below - LEVEL_SDS * sd > level) | (at_or_below + LEVEL_SDS * sd < level)
        assert not misses.any(), (level, sd, below[misses], at_or_below[misses])


def iqm_and_mean(stack):
    """The report's aggregate statistic: both from the same resamples, IQM first."""
    return np.stack([stats.interquartile_mean(stack), stats.mean_of_task_means(stack)], axis=1)


def test_aggregates_match_rliable_called_directly(oracle_record):
    from rliable import metrics

    expected = {"a": matrix_by_hand(A_CART, A_ACRO), "b": matrix_by_hand(B_CART, B_ACRO)}
    for entry in oracle_record["configurations"]:
        agg, matrix = entry["aggregate"], expected[entry["label"]]
        assert agg["tasks"] == ["cartpole", "acrobot"]
        assert agg["iqm"]["value"] == pytest.approx(metrics.aggregate_iqm(matrix), rel=1e-12)
        assert agg["mean"]["value"] == pytest.approx(metrics.aggregate_mean(matrix), rel=1e-12)
        replicates = esjax_replicates([matrix], iqm_and_mean)
        low, high = stats.percentile_interval(replicates)
        for i, name in enumerate(("iqm", "mean")):
            assert [agg[name]["low"], agg[name]["high"]] == [low[i], high[i]]
            assert agg[name]["low"] < agg[name]["value"] < agg[name]["high"]
        _, interval = rliable_estimates(
            [matrix], lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])
        )
        assert_ends_at_their_levels(replicates, interval)
    # The IQM by its definition too: the mean of the middle half of all 24 scores.
    flat = np.sort(expected["a"].ravel())
    assert oracle_record["configurations"][0]["aggregate"]["iqm"]["value"] == pytest.approx(
        flat[6:18].mean()
    )


def test_each_tasks_iqm_and_interval_match_rliable_called_directly(oracle_record):
    """Per task, in its own units: the IQM of the seeds' returns (also the mean of their middle
    half by hand) and its bootstrap interval, against rliable's on that one column."""
    from rliable import metrics

    given = {
        "a": {"cartpole": A_CART, "acrobot": A_ACRO},
        "b": {"cartpole": B_CART, "acrobot": B_ACRO},
    }
    for entry in oracle_record["configurations"]:
        for task, returns in given[entry["label"]].items():
            column = np.asarray(returns)[:, None]
            t = entry["tasks"][task]
            assert t["iqm_return"] == pytest.approx(metrics.aggregate_iqm(column), rel=1e-12)
            assert t["iqm_return"] == pytest.approx(np.sort(returns)[3:9].mean())  # 12 seeds
            replicates = esjax_replicates([column], stats.interquartile_mean)
            assert t["iqm_interval"] == [v.item() for v in stats.percentile_interval(replicates)]
            assert t["iqm_interval"][0] < t["iqm_return"] < t["iqm_interval"][1]
            _, interval = rliable_estimates(
                [column], lambda x: np.array([metrics.aggregate_iqm(x)])
            )
            assert_ends_at_their_levels(replicates, interval)


def test_probability_of_improvement_matches_rliable(oracle_record):
    from rliable import metrics

    poi = oracle_record["probability_of_improvement"]
    x, y = matrix_by_hand(A_CART, A_ACRO), matrix_by_hand(B_CART, B_ACRO)
    assert (poi["x"], poi["y"]) == ("a", "b")
    assert poi["value"] == pytest.approx(metrics.probability_of_improvement(x, y), rel=1e-12)
    # By hand: per task, the share of (x seed, y seed) pairs where x wins (ties half).
    by_task = [
        np.mean([(a > b) + 0.5 * (a == b) for a in x[:, t] for b in y[:, t]]) for t in range(2)
    ]
    assert poi["value"] == pytest.approx(np.mean(by_task))
    replicates = esjax_replicates([x, y], stats.probability_of_improvement)
    assert [poi["low"], poi["high"]] == [v.item() for v in stats.percentile_interval(replicates)]
    _, interval = rliable_estimates(
        [x, y],
        lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
        reps=ORACLE_REPS_IMPROVEMENT,
    )
    assert_ends_at_their_levels(replicates, interval, ORACLE_REPS_IMPROVEMENT)


def test_profiles_match_rliables_score_distributions(oracle_record):
    """The curves equal rliable's ``score_distributions`` (strictly above) at the next float
    below each threshold, which is at or above the threshold itself; the bands' ends sit at
    their levels of esjax's bootstrap distribution, as rliable resamples the same count."""
    from rliable import library

    profiles = oracle_record["profiles"]
    taus = np.asarray(profiles["taus"])
    expected = {"a": matrix_by_hand(A_CART, A_ACRO), "b": matrix_by_hand(B_CART, B_ACRO)}
    for label, matrix in expected.items():
        curve = profiles["curves"][label]
        below_each = np.nextafter(taus, -np.inf)
        assert curve["fraction"] == library.score_distributions(matrix, below_each).tolist()
        replicates = esjax_replicates([matrix], lambda s: stats.fraction_at_or_above(s, taus))
        assert [curve["low"], curve["high"]] == [
            v.tolist() for v in stats.percentile_interval(replicates)
        ]
        _, band = rliable_estimates([matrix], lambda x: np.mean(x[..., None] >= taus, (0, 1)))
        assert_ends_at_their_levels(replicates, band)


def exact_bootstrap(samples, statistic):
    """The statistic on every stratified resample there is, each equally likely: every choice
    of seeds, with replacement and in order, for every task of every sample."""
    per_column = []  # (sample, task): every ordered choice of that task's seeds
    for sample in samples:
        seeds, tasks = sample.shape
        choices = np.array(list(itertools.product(range(seeds), repeat=seeds)))
        per_column += [sample[choices, task] for task in range(tasks)]
    combos = list(itertools.product(*(range(len(c)) for c in per_column)))
    columns = [np.stack([c[pick[i]] for pick in combos]) for i, c in enumerate(per_column)]
    stacks, i = [], 0
    for sample in samples:
        stacks.append(np.stack(columns[i : i + sample.shape[1]], axis=2))
        i += sample.shape[1]
    return np.asarray(statistic(*stacks)).reshape(len(combos), -1)


def exact_quantile(values, level):
    """The smallest value whose share at or below it reaches ``level`` (all equally likely)."""
    ordered = np.sort(values)
    count = math.ceil(level * len(ordered) - 1e-9)  # values needed at or below
    return ordered[min(max(count, 1), len(ordered)) - 1]


# Two tasks on scales far apart, three seeds each: 27 x 27 resamples, none of which mixes the
# tasks' seeds (a resampler that pooled them would spread the IQM far wider).
TWO_TASKS = [np.array([[0.1, 4.0], [0.5, 6.5], [0.2, 9.0]])]
# Two configurations on one task, each resampled on its own: 27 x 27 resamples.
TWO_CONFIGURATIONS = [np.array([[0.3], [0.9], [0.5]]), np.array([[0.4], [0.5], [0.1]])]


@pytest.mark.parametrize(
    "samples, statistic",
    [(TWO_TASKS, iqm_and_mean), (TWO_CONFIGURATIONS, stats.probability_of_improvement)],
    ids=["iqm and mean", "probability of improvement"],
)
def test_the_bootstrap_matches_its_exact_distribution(samples, statistic):
    """On matrices small enough to enumerate every resample, esjax's B = 20,000 replicates
    follow the exact bootstrap distribution: the largest gap between their CDFs is under 0.02
    (the Dvoretzky-Kiefer-Wolfowitz inequality bounds the chance of more by 2 exp(-2 B 0.02^2)
    = 2e-7), and each interval end lies between the exact quantiles at its level ± 4 standard
    deviations of an empirical quantile's level, sqrt(p (1 - p) / B)."""
    reps = 20_000
    exact = exact_bootstrap(samples, statistic)
    replicates = stats.bootstrap_replicates(samples, statistic, reps, np.random.default_rng(11))
    low, high = stats.percentile_interval(replicates)
    for k in range(exact.shape[1]):
        support = np.unique(exact[:, k])
        exact_cdf = (exact[:, k][:, None] <= support).mean(axis=0)
        sampled_cdf = (replicates[:, k][:, None] <= support).mean(axis=0)
        assert np.abs(sampled_cdf - exact_cdf).max() < 0.02
        for end, level in ((low[k], 0.025), (high[k], 0.975)):
            spread = 4 * math.sqrt(level * (1 - level) / reps)
            assert exact_quantile(exact[:, k], level - spread) <= end
            assert end <= exact_quantile(exact[:, k], level + spread)
    # Each resampled column holds its own task's seeds only.
    resampled = stats.stratified_resamples(samples[0], 50, np.random.default_rng(0))
    for task in range(samples[0].shape[1]):
        assert set(resampled[:, :, task].ravel()) <= set(samples[0][:, task])


def test_the_report_is_its_seeds_alone(two_methods, tmp_path):
    """Same runs and seed, same numbers, whatever NumPy's global generator holds, which the
    report leaves as it found it; another seed moves the intervals, not the point estimates."""
    _, args = two_methods
    np.random.seed(1)
    state = np.random.get_state()
    first = report(args, tmp_path / "1", reps=200, seed=9)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), state, strict=True))
    np.random.seed(2)
    again = report(args, tmp_path / "2", reps=200, seed=9)
    other = report(args, tmp_path / "3", reps=200, seed=10)
    for key in ("configurations", "probability_of_improvement", "profiles"):
        assert again[key] == first[key]
    a, b = first["configurations"][0]["aggregate"], other["configurations"][0]["aggregate"]
    assert a["iqm"]["value"] == b["iqm"]["value"] and a["iqm"]["low"] != b["iqm"]["low"]


def test_success_rate_counts_the_runs_verdicts_with_a_wilson_interval(two_methods, tmp_path):
    _, args = two_methods
    record = report(args, tmp_path, reps=50)
    z = 1.959963984540054  # the normal quantile for 95 %
    for entry in record["configurations"]:
        for task, t in entry["tasks"].items():
            run_dir = Path(t["run_dirs"][0])
            verdicts = json.loads((run_dir / runs.SUMMARY).read_text())["solved_per_seed"]
            k, n = sum(verdicts), len(verdicts)
            assert (t["successes"], t["seeds"]) == (k, n)
            assert t["solved_per_seed"] == verdicts
            p = k / n  # the Wilson score interval's closed form
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
            assert t["success_interval"] == pytest.approx([centre - half, centre + half], abs=1e-9)
            threshold = 475.0 if task == "cartpole" else -100.0
            returns = [float(r) for r in t["returns"]]
            assert verdicts == [r >= threshold for r in returns]


def test_wilson_interval_equals_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    from esjax._src.specs.stats import wilson_interval

    for k, n in [(0, 5), (3, 16), (16, 16), (7, 9)]:
        assert wilson_interval(k, n) == pytest.approx(
            proportion_confint(k, n, alpha=0.05, method="wilson")
        )


def test_normalisation_and_files(two_methods, tmp_path):
    _, args = two_methods
    record = report(args, tmp_path, reps=50)
    cart = record["configurations"][0]["tasks"]["cartpole"]
    assert cart["normalised"] == pytest.approx(normalised_by_hand(A_CART, CART_RANDOM, 475.0))
    assert cart["mean_return"] == pytest.approx(A_CART.mean())
    assert record["tasks"]["cartpole"]["random_return"] == CART_RANDOM
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(record))
    markdown = (tmp_path / "report.md").read_text()
    assert "| a | cartpole | 12 |" in markdown and "P(a > b)" in markdown
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert record["method"]["reps"] == 50
    # What computed the numbers, said truly: esjax itself, not rliable.
    assert "esjax._src.specs.stats" in record["method"]["aggregate_intervals"]
    assert "rliable" not in json.dumps(record["method"]) and "rliable" not in markdown
    assert "esjax._src.specs.stats" in markdown


def test_small_returns_keep_three_figures_in_the_markdown_and_the_table(tmp_path, capsys):
    """Returns below 1 (MinAtar, bandits) would all print as 0.7 at one decimal."""
    from rich.console import Console

    from esjax._src.cli.tables import show_report

    returns = np.array([0.74, 0.72, 0.55, 0.78, 0.92, 0.66, 0.69, 0.70])
    run = make_run(tmp_path / "small", "cartpole", returns)
    record = report([f"small={run}"], tmp_path / "out", reps=50)
    task = record["configurations"][0]["tasks"]["cartpole"]
    low, high = task["iqm_interval"]
    shown = f"{task['iqm_return']:.3f} [{low:.3f}, {high:.3f}]"
    assert f"| {returns.mean():.3f} | {shown} |" in (tmp_path / "out" / "report.md").read_text()
    show_report(Console(width=200), record)
    assert shown in capsys.readouterr().out


def test_a_sweep_gives_one_configuration_per_entry_and_same_seeds_pool(tmp_path):
    from esjax._src.analysis.reporting import collect

    sweep = tmp_path / "sweep"
    entries = []
    for i, lr in enumerate((0.03, 0.1)):
        name = f"{i:02d}-learning_rate={lr}"
        make_run(sweep / name, "cartpole", A_CART[:4] + i)
        over = [f"strategy_settings.learning_rate={lr}"]
        entries.append({"name": name, "overrides": over, "run_dir": name})
    runs.write_json(sweep / "sweep.json", {"spec": {}, "configurations": entries})
    table = collect([sweep])
    assert list(table) == [e["overrides"][0] for e in entries]
    assert table[entries[1]["overrides"][0]]["cartpole"].returns == pytest.approx(A_CART[:4] + 1)
    # Two runs of one configuration with other seeds pool; another configuration is refused.
    make_run(tmp_path / "s0", "cartpole", A_CART[:4])
    make_run(tmp_path / "s4", "cartpole", A_CART[4:8], seed=4)
    pooled = collect([f"m={tmp_path / 's0'}", f"m={tmp_path / 's4'}"])["m"]["cartpole"]
    assert pooled.returns == pytest.approx(A_CART[:8])
    make_run(tmp_path / "other", "cartpole", A_CART[:4], seed=8, popsize=64)
    with pytest.raises(ConfigError, match="another configuration"):
        collect([f"m={tmp_path / 's0'}", f"m={tmp_path / 'other'}"])


def _esjax(*args, cwd, hide_rliable=False):
    code = "import sys\n"
    if hide_rliable:  # as if neither rliable nor its bootstrap library were installed
        code += "sys.modules['rliable'] = sys.modules['arch'] = None\n"
    code += "from esjax._src.cli.main import main\nsys.argv = ['esjax', *sys.argv[1:]]\nmain()\n"
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    unfinished = make_run(tmp_path / "unfinished", "cartpole", A_CART[:2], finished=False)
    cases = [
        (["report", tmp_path / "missing"], "no such run or sweep directory"),
        (["report", unfinished, "--out", tmp_path / "o"], "has not finished"),
    ]
    for argv, message in cases:
        result = _esjax(*argv, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_cli_prints_the_tables_and_writes_the_files_without_rliable(two_methods, tmp_path):
    """The report computes everything itself: with rliable and arch hidden from the import
    system it still prints and writes all of it."""
    _, args = two_methods
    result = _esjax(
        "report", *args, "--out", tmp_path, "--reps", "50", cwd=tmp_path, hide_rliable=True
    )
    assert result.returncode == 0, result.stderr
    assert "P(a > b)" in result.stdout and "report.png" in result.stdout
    for name in ("report.json", "report.md", "report.png"):
        assert (tmp_path / name).is_file()
    record = json.loads((tmp_path / "report.json").read_text())
    assert [e["label"] for e in record["configurations"]] == ["a", "b"]


def test_random_return_at_or_above_solved_return_is_refused_by_the_report(tmp_path):
    """A run may lower solved_return below the preset's random_return (a --set); only the
    report, which divides by their difference, refuses it."""
    run = make_run(tmp_path / "run", "cartpole", A_CART, random_return=475.0)
    with pytest.raises(ConfigError, match=r"random_return \(475\) must be below solved_return"):
        report([run], tmp_path / "out", reps=10)


def test_a_real_run_without_recorded_returns_or_floor_is_tested_and_measured(tmp_path):
    """A trained run whose task records no ``random_return`` and whose summary lost its
    per-seed test returns: the report tests the final policies itself (the same numbers
    :func:`esjax._src.run.saved.evaluate_run` gives) and measures the floor with the random baseline
    on the run's test episodes, as many as the task's ``test_episodes`` (37 here, not the default
    128, whose floor is another number)."""
    from esjax._src.run.saved import baseline_returns, evaluate_run
    from esjax._src.run.training import evolve

    task = tmp_path / "cart.toml"
    task.write_text(
        'env = "CartPole-v1"\nepisode_length = 40\nsolved_return = 30.0\ntest_episodes = 37\n'
    )
    run = tmp_path / "run"
    evolve(str(task), popsize=8, rollouts=1, generations=2, seeds=2, out=run,
           overrides=["evaluation.every=2", "evaluation.episodes=2"])  # fmt: skip
    summary = json.loads((run / runs.SUMMARY).read_text())
    for key in ("final_test_return_per_seed", "solved_per_seed"):
        summary.pop(key)
    runs.write_json(run / runs.SUMMARY, summary)

    record = report([run], tmp_path / "out", reps=20)
    cell = record["configurations"][0]["tasks"]["cart"]
    expected = [evaluate_run(run, seed=s)["mean"] for s in range(2)]
    assert cell["returns"] == pytest.approx(expected, rel=1e-6)
    assert cell["solved_per_seed"] == [r >= 30.0 for r in expected]
    floor = record["tasks"]["cart"]
    on_37 = float(np.mean(baseline_returns(run, 37, baseline="random")))
    on_128 = float(np.mean(baseline_returns(run, 128, baseline="random")))
    assert on_37 != pytest.approx(on_128, rel=1e-6)  # so the count is what the check tells
    assert floor["random_return"] == pytest.approx(on_37, rel=1e-6)
    assert "random actions on 37 test episodes" in floor["source"]


def test_probability_of_improvement_pairs_tasks_by_name_not_order(two_methods, tmp_path):
    _, args = two_methods
    same = report(args, tmp_path / "same", reps=REPS, seed=5)["probability_of_improvement"]
    swapped = [args[0], args[2], args[3], args[1]]  # a: cart, acro; b: acro, cart
    other = report(swapped, tmp_path / "other", reps=REPS, seed=5)["probability_of_improvement"]
    assert other is not None and other["tasks"] == ["cartpole", "acrobot"]
    assert other["value"] == pytest.approx(same["value"])
    assert [other["low"], other["high"]] == pytest.approx([same["low"], same["high"]])


def test_the_profile_counts_scores_at_or_above_each_threshold(tmp_path):
    """At τ = 1 the profile is the share of solved seeds (a verdict counts solved_return
    itself), also where solved_return is the best return there is (Catch's 1.0)."""
    returns = [1.0, 1.0, 1.0, 0.6]
    record = report([make_run(tmp_path / "catch", "catch", returns)], tmp_path / "o", reps=50)
    floor = record["tasks"]["catch"]["random_return"]
    scores = np.asarray(normalised_by_hand(returns, floor, 1.0))
    assert record["configurations"][0]["tasks"]["catch"]["success_rate"] == 0.75
    from esjax._src.analysis.reporting import profile

    at = profile(scores[:, None], np.array([0.0, 1.0, 1.01]), reps=50, seed=0)["fraction"]
    assert at == pytest.approx([1.0, 0.75, 0.0])  # strictly above 1 (rliable's rule): 0.0


def test_runs_that_would_mix_silently_are_refused(tmp_path):
    """Pooled seeds of another length, two directories named alike on other tasks, and a
    sweep that has not finished (sweep.json lists no configurations yet)."""
    from esjax._src.analysis.reporting import collect

    make_run(tmp_path / "short", "cartpole", A_CART[:4], generations=10)
    make_run(tmp_path / "long", "cartpole", A_CART[4:8], seed=4, generations=1000)
    with pytest.raises(ConfigError, match=r"another configuration .*; generations differ\)"):
        collect([f"m={tmp_path / 'short'}", f"m={tmp_path / 'long'}"])
    cart = make_run(tmp_path / "exp1" / "run", "cartpole", A_CART[:4])
    acro = make_run(tmp_path / "exp2" / "run", "acrobot", A_ACRO[:4], strategy="pgpe")
    with pytest.raises(ConfigError, match=r"both named 'run' but run acrobot and cartpole"):
        collect([cart, acro])
    assert set(collect([f"c={cart}", f"a={acro}"])) == {"c", "a"}
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    runs.write_json(sweep / "sweep.json", {"spec": {}, "configurations": []})
    with pytest.raises(ConfigError, match="the sweep has not finished"):
        collect([sweep])


def test_a_damaged_summary_is_one_line(tmp_path):
    from esjax._src.analysis.reporting import collect

    run = make_run(tmp_path / "run", "cartpole", A_CART[:2])
    for summary, message in [
        ([1, 2], "not a run summary"),
        ({"final_test_return_per_seed": ["a", "b"], "solved_per_seed": [True, False]},
         "not a list of numbers"),
        ({"final_test_return_per_seed": [1.0, None], "solved_per_seed": [True, False]},
         "not a list of numbers"),
        ({"final_test_return_per_seed": [1.0, 2.0], "solved_per_seed": [1, None]},
         "not a list of true or false"),
    ]:  # fmt: skip
        (run / runs.SUMMARY).write_text(json.dumps(summary))
        with pytest.raises(ConfigError, match=message):
            collect([run])
