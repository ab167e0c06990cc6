"""Resolving a run: a loaded task and the run's arguments become one frozen :class:`RunConfig`.

The one place the strategy, popsize, generations and rollouts of a run are decided, for
``esjax evolve``, ``esjax.evolve()``, every configuration of a sweep and :class:`esjax.Trainer`
alike. Nothing here reads a file but the task's TOML and the packaged presets (through
:mod:`esjax._src.specs.presets`); recording the code a task names is the host's
(:func:`esjax._src.run.training.resolve_config`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax

from esjax._src.engine.tasks import check_task, shared_rollout
from esjax._src.specs.config import (
    ConfigError,
    RunConfig,
    StrategySpec,
    TaskConfig,
    check_finite,
    parse_override,
)
from esjax._src.specs.popsize_rule import apply_popsize_rule
from esjax._src.specs.presets import LoadedTask
from esjax._src.specs.version import __version__
from esjax._src.strategies import strategy as strategies

# Seeds are int32 in the run state and its keys.
MAX_SEED = 2**31 - 1


def check_counts(**counts: int | None) -> None:
    """Each given count a positive integer, or one line naming it."""
    for label, value in counts.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value <= 0):  # fmt: skip
            raise ConfigError(f"{label} must be a positive integer, got {value!r}")


def check_seeds(seed: int, seeds: int) -> None:
    """Seeds ``seed .. seed + seeds - 1``, every one a valid seed, or one line."""
    if not isinstance(seeds, int) or seeds <= 0:
        raise ConfigError(f"seeds must be a positive integer, got {seeds!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if seed + seeds - 1 > MAX_SEED:
        raise ConfigError(f"seeds {seed}..{seed + seeds - 1} go beyond the largest, {MAX_SEED}")


def resolve_task(
    loaded: LoadedTask,
    *,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    seed: int = 0,
    seeds: int = 1,
    overrides: Sequence[str] = (),
) -> tuple[RunConfig, list[str]]:
    """``(config, notes)``: the resolved config of a new run of ``loaded`` (what ``config.json``
    holds), and the lines the caller should show (settings a strategy runs without, preset
    settings a user's network does not get)."""
    overrides = list(overrides)
    name, task_config, raw = loaded.name, loaded.task, loaded.raw
    check_task(task_config, name)
    if strategy is not None and not str(strategy).strip():
        raise ConfigError("strategy: empty; a name from `esjax list`, or leave it out")
    # The task's settings are for the strategy its file names (a --set strategy=... included
    # in the task does not change whom they were written for).
    own = str(raw.get("strategy", TaskConfig.strategy))
    chosen = strategies.task_strategy(
        task_config, loaded.source, strategy=strategy, own=own, overrides=overrides
    )
    spec = chosen.spec
    check_finite(spec.settings, f"strategy {spec.name}: settings")
    check_counts(generations=generations, rollouts=rollouts, popsize=popsize)
    if (popsize or task_config.popsize) is not None:  # odd for an antithetic ES, ...
        strategies.resolve_popsize(spec, 1, popsize or task_config.popsize)
    check_seeds(seed, seeds)
    spec, run_generations, scaling = apply_popsize_rule(
        task_config, spec, popsize, generations, chosen.explicit
    )
    num_dims = member_size(task_config, name)
    config = RunConfig(
        task_name=name,
        task=task_config,
        strategy=spec,
        popsize=strategies.resolve_popsize(spec, num_dims, popsize or task_config.popsize),
        num_dims=num_dims,
        rollouts=rollouts or run_rollouts(task_config, spec, overrides),
        generations=run_generations,
        seed=seed,
        seeds=seeds,
        scaling=scaling,
        overrides=tuple(overrides),
        esjax_version=__version__,
    )
    notes = [note for note in (loaded.note, chosen.note) if note]
    return config, notes


def run_rollouts(task_config: TaskConfig, spec: StrategySpec, overrides: Sequence[str]) -> int:
    """The task's rollouts times the strategy's multiplier, unless ``--set rollouts=`` gave them."""
    if any(parse_override(o)[0] == ["rollouts"] for o in overrides):
        return task_config.rollouts
    return task_config.rollouts * spec.loop.rollouts_multiplier


def member_size(task: TaskConfig, source: str) -> int:
    """Parameters per member of the task's policy, from shapes alone (nothing is allocated)."""
    rollout = shared_rollout(task, source=source)
    params = jax.eval_shape(rollout.init_params, jax.random.key(0))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))
