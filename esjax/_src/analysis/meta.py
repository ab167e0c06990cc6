"""Meta-evolution evaluation: baselines, memory lesion, normalised scores and intervals.

A normalised score puts a policy's mean test return on the scale ``0 = zero action, 1 = a
reference``: ``(R - R_zero) / (R_ref - R_zero)``, per split, with the means taken over the same
held-out test episodes (the ``test`` key root of :func:`esjax._src.run.saved.evaluate_run`). Two
references: the *analytic* controller of :mod:`esjax._src.engine.baselines` (derived from the
physics, told the true env parameters; the headline where one exists) and the *oracle*, an MLP
evolved with the true env parameters as input, which is only as good as its training and
extrapolation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.engine.baselines import (
    baseline_rollout,
    check_told_pinned,
    reference_population,
)
from esjax._src.engine.tasks import check_param_names
from esjax._src.policies.networks import memory_lesion
from esjax._src.run import runs
from esjax._src.run.saved import SavedPolicy, baseline_returns, fresh_test_key, make_test_rollout
from esjax._src.specs.config import ConfigError, baseline_label, check_param_values, to_dict
from esjax._src.specs.presets import load_task
from esjax._src.specs.stats import mean_interval


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (0 for a single value).

    :func:`esjax._src.specs.stats.mean_interval` under the name the examples' tables use.
    """
    return mean_interval(values, 0.95)


def normalised(value: float, zero: float, oracle: float) -> float:
    """``0`` at the zero-action return, ``1`` at the oracle's.

    Where the oracle earns exactly what zero actions do there is no scale, and a division would
    give inf or nan that reads like a score: a ValueError says so instead.
    """
    if oracle == zero:
        raise ValueError(
            f"cannot normalise: the oracle's return equals the zero-action return ({zero})"
        )
    return (value - zero) / (oracle - zero)


def _test_rollout(run_dir: str | Path, split: str | None, lesion: bool):
    config, rollout = make_test_rollout(run_dir, split)
    if lesion:  # a rollout of its own: the shared test rollout keeps the trained policy
        rollout = rollout.replace(policy=memory_lesion(rollout.policy))
    return config, rollout


def evaluate_policy(
    run_dir: str | Path,
    episodes: int = 128,
    split: str | None = None,
    seed: int = 0,
    which: str = "final",
    *,
    lesion: bool = False,
    zero: bool = False,
    _rollout: Any = None,
) -> np.ndarray:
    """Test returns of a run's policy, like :func:`esjax._src.run.saved.evaluate_run`, with two
    variants.

    ``lesion``: the recurrent policy's state is reset before every step (:func:`memory_lesion`).
    ``zero``: every weight set to zero, so the action is zero (zero torque) whatever the input:
    the normalised score's floor, on exactly the episodes the policy is tested on.
    """
    built = _rollout or _test_rollout(run_dir, split, lesion)
    return SavedPolicy.load(run_dir, which, seed, built=built).test_returns(episodes, zero=zero)


def run_seeds(run_dir: str | Path) -> int:
    """How many seeds a run directory holds."""
    return runs.read_run_config(run_dir).seeds


def seed_means(
    run_dir: str | Path,
    episodes: int,
    split: str | None,
    *,
    lesion: bool = False,
    zero: bool = False,
    which: str = "final",
    baseline: str | None = None,
) -> list[float]:
    """Mean test return of every seed of a run (one compiled rollout for all seeds).

    ``baseline`` (``"analytic"`` or ``"zero"``, :mod:`esjax._src.engine.baselines`) replaces the
    run's policy by that baseline on the same episodes of every seed.
    """
    built = _test_rollout(run_dir, split, lesion)
    if baseline is not None:
        return [
            float(baseline_returns(run_dir, episodes, split, s, baseline, built=built).mean())
            for s in range(run_seeds(run_dir))
        ]
    return [
        float(
            evaluate_policy(
                run_dir, episodes, split, s, which, lesion=lesion, zero=zero, _rollout=built
            ).mean()
        )
        for s in range(run_seeds(run_dir))
    ]


# ---------------------------------------------------------------------------- grid evaluation
# ``esjax eval RUN --grid``: the saved policy on every cell of a 2-D grid of fixed env
# parameters, to see where in (m, l) it works and how far beyond its training box.
GRID_AXES = 2
_REL_TOL = 1e-6


def parse_grid_axis(text: str) -> tuple[str, tuple[float, ...]]:
    """``"m=0.5:3:8"`` (8 log-spaced values) or ``"m=0.5,1,2"`` (these values) -> name, values."""
    where = f"--grid-axis {text!r}"
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise ConfigError(f"{where}: expected NAME=LOW:HIGH:COUNT or NAME=V1,V2,...")
    try:
        if ":" in spec:
            parts = spec.split(":")
            if len(parts) != 3:
                raise ValueError
            low, high, count = float(parts[0]), float(parts[1]), int(parts[2])
        else:
            values = tuple(float(v) for v in spec.split(","))
    except ValueError:
        raise ConfigError(
            f"{where}: expected NAME=LOW:HIGH:COUNT (COUNT an integer) or NAME=V1,V2,..."
        ) from None
    if ":" in spec:
        if count < 1 or low <= 0 or high <= 0:
            raise ConfigError(f"{where}: log spacing needs LOW > 0, HIGH > 0 and COUNT >= 1")
        values = tuple(float(v) for v in np.geomspace(low, high, count))
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{where}: values must be finite numbers")
    return name, tuple(sorted(set(values)))


def grid_axes(run_dir: str | Path, specs: Sequence[str] = ()) -> dict[str, tuple[float, ...]]:
    """The grid to test on: ``--grid-axis`` specs, else the task's ``[grid]`` table.

    A run stores its task; runs made before the task had a ``[grid]`` table fall back to the
    preset of the same name, so old runs get the grid their preset has now.
    """
    if specs:
        axes = dict(parse_grid_axis(s) for s in specs)
        if len(specs) != GRID_AXES or len(axes) != GRID_AXES:
            raise ConfigError(
                f"--grid-axis: give exactly two different parameters (rows, then columns), "
                f"got {', '.join(specs)}"
            )
        return axes
    config = runs.read_run_config(run_dir)
    grid = to_dict(config.task.grid) if config.task.grid else _preset_grid(config)
    if not grid:
        raise ConfigError(
            f"task {config.task_name!r} has no grid: add a [grid] table to its preset "
            '(rows = { param = "m", values = [0.5, 1, 2] } and columns likewise) or pass two '
            "--grid-axis NAME=LOW:HIGH:COUNT"
        )
    return {
        axis["param"]: tuple(sorted(float(v) for v in axis["values"]))
        for axis in (grid["rows"], grid["columns"])
    }


def _preset_grid(config: Any) -> dict[str, Any]:
    """The grid of the preset the run was made from, when the run's env is still that one."""
    try:
        preset = load_task(config.task_name).task
    except ConfigError:
        return {}
    return to_dict(preset.grid) if preset.env == config.task.env else {}


def _inside(value: float, dist: Any, fixed: float) -> bool:
    """Whether a value lies in what the training sampler draws (or equals the fixed value)."""
    span = _training_range(dist, fixed)
    low, high = span["low"], span["high"]
    slack = _REL_TOL * max(abs(low), abs(high), 1.0)
    return low - slack <= (abs(value) if span.get("either_sign") else value) <= high + slack


def _training_range(dist: Any, fixed: float) -> dict[str, Any]:
    """The span a training sampler draws from; ``either_sign`` when its sign is random."""
    if dist is None:
        return {"low": fixed, "high": fixed}
    if dist.dist == "choice":
        return {"low": min(dist.values), "high": max(dist.values)}
    if dist.dist == "random_sign":
        return {"low": dist.low, "high": dist.high, "either_sign": True}
    return {"low": dist.low, "high": dist.high}


def grid_returns(
    run_dir: str | Path,
    axes: dict[str, tuple[float, ...]],
    episodes: int = 128,
    seed: int = 0,
    which: str = "final",
    *,
    baseline: str | None = None,
    _built: Any = None,
) -> np.ndarray:
    """Test returns on every grid cell, shape ``(rows, columns, episodes)``; one compile.

    Each cell runs the same test episodes as :func:`esjax._src.run.saved.evaluate_run` (same key
    root, so the same start states) with the env parameters pinned to the cell's values.
    The cells are a batch axis of one jitted program, not a Python loop of rollouts.
    ``baseline`` (:mod:`esjax._src.engine.baselines`): that reference on the same episodes instead
    of the run's policy; the analytic controller is told each cell's values.
    """
    names = list(axes)
    config, rollout = _built or make_test_rollout(run_dir)
    check_param_names(names, rollout.env_params, "--grid")
    for name in names:
        for value in axes[name]:
            check_param_values(config.task.env, {name: value}, "--grid")
    if baseline is None:
        saved = SavedPolicy.load(run_dir, which, seed, built=(config, rollout))
        key, params, obs_stats = saved.test_inputs()
    else:
        rollout = baseline_rollout(rollout, baseline)
        check_told_pinned(rollout, baseline, names, "--grid")
        key, obs_stats = fresh_test_key(config, seed), None
        params = reference_population(rollout, baseline)
    dtypes = [jnp.result_type(getattr(rollout.env_params, n)) for n in names]
    for name, dtype in zip(names, dtypes, strict=True):
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ConfigError(f"--grid: {name} is a {dtype} parameter; a grid needs real values")
    mesh = np.meshgrid(*(np.asarray(axes[n], np.float64) for n in names), indexing="ij")
    cells = jnp.asarray(np.stack([m.reshape(-1) for m in mesh], axis=-1), jnp.float32)

    # The rollout draws env params per episode through its sampler; here the cell's values,
    # which are traced, are pinned over what the training sampler draws (parameters off the
    # grid vary as in training), so one compiled program covers every cell. Each trace builds
    # a rollout of its own around the traced values; the shared test rollout is not touched.
    trained = rollout.env_params_sampler

    def cell_returns(values, key, params, obs_stats):
        cell = {n: values[i].astype(dtypes[i]) for i, n in enumerate(names)}

        def sample(key, default):
            drawn = default if trained is None else trained(key, default)
            return drawn.replace(**cell)

        pinned = rollout.replace(env_params_sampler=sample, early_exit=rollout.early_exit)
        return pinned.population(key, params, episodes, obs_stats).returns[0]

    batched = jax.jit(jax.vmap(cell_returns, in_axes=(0, None, None, None)))
    returns = np.asarray(batched(cells, key, params, obs_stats))
    return returns.reshape(*(len(axes[n]) for n in names), episodes)


def evaluate_grid(
    run_dir: str | Path,
    axes: dict[str, tuple[float, ...]],
    episodes: int | None = None,
    seed: int = 0,
    which: str = "final",
    baseline: str | None = None,
) -> dict[str, Any]:
    """Mean and std of the test return per cell, and which cells the training sampler covers.

    With ``baseline``, also the zero action's and the baseline's mean per cell on the same
    episodes, and the policy's score per cell as ``esjax eval --baseline`` gives it for one
    split: ``score_vs_analytic`` (0 = zero action, 1 = analytic) or ``margin_over_random``.
    ``episodes`` per cell; None: the task's ``test_episodes``, as for one split.
    """
    if episodes is not None and (not isinstance(episodes, int) or episodes <= 0):
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    names = list(axes)
    if len(names) != GRID_AXES:
        raise ConfigError(f"a grid has two parameters, got {len(names)}")
    built = make_test_rollout(run_dir)
    episodes = built[0].task.test_episodes if episodes is None else episodes
    check_param_names(names, built[1].env_params, "--grid")
    if baseline is not None:  # a reference that cannot be built fails before any compile
        check_told_pinned(baseline_rollout(built[1], baseline), baseline, names, "--grid")
    task = built[0].task
    fixed = {n: float(getattr(built[1].env_params, n)) for n in names}
    dists = {n: task.env_sampler.get(n) for n in names}
    returns = grid_returns(run_dir, axes, episodes, seed, which, _built=built)
    rows, cols = ([_inside(v, dists[n], fixed[n]) for v in axes[n]] for n in names)
    inside = [[a and b for b in cols] for a in rows]
    record = {
        "run": str(run_dir),
        "task": built[0].task_name,
        "which": which,
        "seed": seed,
        "episodes": episodes,
        "axes": names,
        "values": [list(axes[n]) for n in names],
        "mean": _finite_or_none(returns.mean(axis=-1)),
        "std": _finite_or_none(returns.std(axis=-1)),
        "in_training": inside,
        "training_range": {n: _training_range(dists[n], fixed[n]) for n in names},
    }
    if baseline is not None:
        means = {
            name: grid_returns(run_dir, axes, episodes, seed, baseline=name, _built=built).mean(-1)
            for name in dict.fromkeys(("zero", baseline))
        }
        record.update(_grid_scores(returns.mean(axis=-1), means, baseline))
    return record


def _grid_scores(policy_mean: np.ndarray, means: dict[str, np.ndarray], baseline: str) -> dict:
    """The references' means per cell and the policy's score against them, as in one split's.

    A cell where the reference's mean equals the zero action's has no score (None).
    """
    scores: dict[str, Any] = {
        "baseline": baseline,
        "reference_mean": {baseline_label(name): _finite_or_none(m) for name, m in means.items()},
    }
    with np.errstate(divide="ignore", invalid="ignore"):  # a cell the analytic cannot lift
        if baseline == "analytic":
            scores["score_vs_analytic"] = _finite_or_none(
                (policy_mean - means["zero"]) / (means["analytic"] - means["zero"])
            )
    if baseline == "random":
        scores["margin_over_random"] = _finite_or_none(policy_mean - means["random"])
    return scores


def _finite_or_none(values: np.ndarray) -> list:
    """Nested lists with NaN and inf as ``None``: strict JSON has no NaN."""
    finite = np.isfinite(values)
    return np.where(finite, values.astype(object), np.array(None, dtype=object)).tolist()
