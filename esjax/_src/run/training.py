"""One run: resolve its config, build its engine, drive it block by block.

``evolve`` is what the CLI's ``esjax evolve`` calls. The run directory (its lock, metrics,
policies, checkpoints) belongs to :class:`esjax._src.run.lifecycle.Run`; the blocks, the checkpoint
every ``checkpoint_every_s`` seconds and stop signals to :func:`esjax._src.run.loop.drive`, the loop
a sweep's stacked configurations share. A run resumed from a checkpoint continues bit-identically:
the generation step is the same compiled program whatever the block boundaries, and everything it
reads is in the checkpoint. Before anything is built, a
config is checked: non-finite numbers and a generation that cannot fit in memory are refused.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from esjax._src.engine import preflight
from esjax._src.engine.tasks import check_task, forget_shared_rollouts, make_rollout, shared_rollout
from esjax._src.run import codefiles, memory
from esjax._src.run.cache import UNREADABLE_CODE, code_digest, remembered
from esjax._src.run.lifecycle import Interrupted, LostProcess, Run, RunSummary, backend_modules
from esjax._src.run.loop import drive
from esjax._src.run.programs import keep_programs
from esjax._src.specs.config import (
    ConfigError,
    RunConfig,
    StrategySpec,
    TaskConfig,
    check_finite,
    parse_override,
)
from esjax._src.specs.popsize_rule import apply_popsize_rule
from esjax._src.specs.presets import MISSING_TASK, TaskTable, load_task
from esjax._src.specs.version import __version__

__all__ = ["Interrupted", "LostProcess", "RunSummary", "engine_for", "evolve", "resolve_config"]

if TYPE_CHECKING:  # the engine imports evosax, which starts JAX's backend on import
    from esjax._src.engine.generation import Engine

# Generations one compiled block scans; evaluation intervals longer than this take several.
MAX_BLOCK = 50


# ---------------------------------------------------------------------------- resolving a run
def capture_code(task: TaskConfig, name: str) -> None:
    """Read the files of the code ``task`` names, once, and make those bytes what runs, with
    what they import recorded as it is imported: what runs is what the run records
    (:func:`esjax._src.run.codefiles.capture`)."""
    try:
        codefiles.capture([task])
    except ConfigError as error:
        raise ConfigError(f"{name}: {error}") from None


def checked_start(
    task: str | Path | None, overrides: Sequence[str] = (), **options: Any
) -> TaskConfig | None:
    """:func:`esjax._src.engine.preflight.checked_start`, with the task's code read and
    provided by :func:`capture_code` before the check makes its env."""
    return preflight.checked_start(task, overrides, prepare=capture_code, **options)


MAX_SEED = 2**31 - 1


def resolve_config(
    task: str | Path | TaskConfig | TaskTable,
    *,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    seed: int = 0,
    seeds: int = 1,
    overrides: Sequence[str] = (),
) -> RunConfig:
    """The resolved config of a new run (what ``config.json`` holds), before anything is written."""
    overrides = list(overrides)
    name, task_config, raw, source = load_task(task, overrides)
    capture_code(task_config, name)
    check_task(task_config, name)
    if strategy is not None and not str(strategy).strip():
        raise ConfigError("strategy: empty; a name from `esjax list`, or leave it out")
    strategies = backend_modules().strategies
    # The task's settings are for the strategy its file names (a --set strategy=... included
    # in the task does not change whom they were written for).
    own = str(raw.get("strategy", TaskConfig.strategy))
    chosen = strategies.task_strategy(
        task_config, source, strategy=strategy, own=own, overrides=overrides
    )
    spec = chosen.spec
    check_finite(spec.settings, f"strategy {spec.name}: settings")
    for label, value in (
        ("generations", generations),
        ("rollouts", rollouts),
        ("popsize", popsize),
    ):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ConfigError(f"{label} must be a positive integer, got {value!r}")
    if (popsize or task_config.popsize) is not None:
        strategies.resolve_popsize(
            spec, 1, popsize or task_config.popsize
        )  # odd for a antithetic ES, ...
    if not isinstance(seeds, int) or seeds <= 0:
        raise ConfigError(f"seeds must be a positive integer, got {seeds!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if seed + seeds - 1 > MAX_SEED:  # seeds are int32 in the run state and its keys
        raise ConfigError(f"seeds {seed}..{seed + seeds - 1} go beyond the largest, {MAX_SEED}")
    spec, run_generations, scaling = apply_popsize_rule(
        task_config, spec, popsize, generations, chosen.explicit
    )
    num_dims = member_size(task_config, name)
    if chosen.note:  # resolved: a command refused above says only why
        warnings.warn(chosen.note, stacklevel=2)
    return RunConfig(
        task_name=name,
        task=task_config,
        strategy=spec,
        popsize=strategies.resolve_popsize(spec, num_dims, popsize or task_config.popsize),
        num_dims=num_dims,
        rollouts=rollouts or _run_rollouts(task_config, spec, overrides),
        generations=run_generations,
        seed=seed,
        seeds=seeds,
        scaling=scaling,
        overrides=tuple(overrides),
        esjax_version=__version__,
    )


def _run_rollouts(task_config: TaskConfig, spec: StrategySpec, overrides: Sequence[str]) -> int:
    """The task's rollouts times the strategy's multiplier, unless ``--set rollouts=`` gave them."""
    if any(parse_override(o)[0] == ["rollouts"] for o in overrides):
        return task_config.rollouts
    return task_config.rollouts * spec.loop.rollouts_multiplier


def member_size(task: TaskConfig, source: str) -> int:
    """Parameters per member of the task's policy, from shapes alone (nothing is allocated)."""
    return memory.member_size(shared_rollout(task, source=source))


def complete_sizes(config: RunConfig) -> RunConfig:
    """An older run's config with the popsize and member size its first block would have found."""
    if not config.missing_sizes:
        return config
    strategies = backend_modules().strategies
    num_dims = member_size(config.task, config.task_name)
    popsize = config.popsize or config.task.popsize
    spec = _strategy_spec(config)
    return dataclasses.replace(
        config, num_dims=num_dims, popsize=strategies.resolve_popsize(spec, num_dims, popsize)
    )


def engine_for(config: RunConfig) -> tuple[TaskConfig, Engine]:
    """``(task, engine)`` for a resolved config, made by
    :func:`esjax._src.engine.generation.make_engine`.

    Engines are kept for the life of the process (a few at most), so evolving, resuming or
    re-running the same configuration does not compile it again.
    """
    key = config.program_key() + repr(jax.devices())
    if key not in _ENGINES:
        while len(_ENGINES) >= _MAX_ENGINES:
            _ENGINES.pop(next(iter(_ENGINES)))
        _ENGINES[key] = (config.task, _make_engine(config))
    return _ENGINES[key]


_ENGINES: dict[str, tuple[TaskConfig, Engine]] = {}
_MAX_ENGINES = 4


def clear_engine_cache() -> None:
    """Forget built engines (and JAX's compiled programs): the next run compiles afresh."""
    _ENGINES.clear()
    forget_shared_rollouts()
    jax.clear_caches()


def _strategy_spec(config: RunConfig) -> StrategySpec:
    """The run's strategy with settings esjax added since the run was made at their defaults."""
    spec = config.strategy
    strategies = backend_modules().strategies
    layers = [(spec.settings, "config")]
    settings = strategies.resolve_settings(spec.algorithm, layers, stored=True)
    return dataclasses.replace(spec, settings=settings)


def check_memory(config: RunConfig) -> None:
    """Refuse, from shapes only, a config whose generation cannot fit in the device's memory.

    Runs before anything allocates a member's parameters (building the engine does); a config
    that passed once in this process is not estimated again.
    """
    key = json.dumps({**config.program(), "seeds": config.seeds}, sort_keys=True)
    if key in _FITS:
        return
    spec = _strategy_spec(config)
    strategies = backend_modules().strategies
    rollout = shared_rollout(config.task, source=config.task_name)
    memory.check_test_fits(rollout, config.task.test_episodes)  # the final test, at the end
    layout = backend_modules().engine.member_layout(rollout)
    needs = memory.estimate(
        rollout,
        lambda num_dims: strategies.build_strategy(spec, num_dims, config.popsize),
        lambda num_dims: config.popsize,
        functools.partial(_population_floats, layout),
        seeds=config.seeds,
        rollouts=config.rollouts,
    )
    memory.check_fits(needs)
    _FITS.add(key)


_FITS: set[str] = set()


def _population_floats(layout: Any, strategy: Any, devices: int, chunk_for: Any) -> int:
    return backend_modules().strategies.population_floats(strategy, layout, devices, chunk_for)


def program_key(config: RunConfig) -> dict[str, Any] | None:
    """What a run's kept programs are keyed by, or None where they must not be kept.

    Later processes with this config read its programs back instead of tracing them again. A
    user's env and policy (named as code) are part of the key by their source, so edited code
    is traced again; code whose source cannot be read is never kept.
    """
    key = config.program()
    sources = {"env_source": config.task.env, "policy_source": config.task.policy.kind}
    for field, name in sources.items():
        source = code_digest(name)
        if source == UNREADABLE_CODE:
            return None
        if source is not None:
            key = {**key, field: source}
    return key


def _make_engine(config: RunConfig) -> Engine:
    engines, _, strategies = backend_modules()
    task = config.task
    spec = _strategy_spec(config)
    check_memory(config)  # building the engine allocates a member's parameters
    # Training and evaluation episodes differ only in their keys, so one rollout serves both.
    # The engine's own: a caller may change an engine's rollout (a pinned chunk size), and no
    # other engine or sizing may see that.
    rollout = make_rollout(task, source=config.task_name)
    # A reward shift makes training returns differ from the env's, so training gets its own.
    train_rollout = (
        make_rollout(task, source=config.task_name, reward_shift=task.reward_shift)
        if task.reward_shift
        else rollout
    )
    engine = engines.make_engine(
        train_rollout,
        rollout,
        lambda n: strategies.build_strategy(spec, n, config.popsize),
        rollouts=config.rollouts,
        block=min(task.evaluation.every, MAX_BLOCK),
        eval_episodes=task.evaluation.episodes,
        normalize_obs=task.normalize_obs,
        remember=remembered,
    )
    key = program_key(config)
    if key is not None:
        engine = keep_programs(engine, key)
    steps = config.rollouts * engine.rollout.episode_length
    hint = strategies.strategy_cost_hint(engine.strategy, steps)
    if hint:
        warnings.warn(hint, stacklevel=4)
    return engine


def _default_run_dir(config: RunConfig) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{config.task_name}-{config.strategy.name}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


# ---------------------------------------------------------------------------- one run
def evolve(
    task: str | Path | TaskConfig | None,
    *,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    seed: int = 0,
    seeds: int = 1,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    overrides: Sequence[str] = (),
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    block: int | None = None,
    checkpoint_every_s: float = 30.0,
    trust_code: bool = False,
) -> RunSummary:
    """Evolve a policy for ``task`` and return what it reached; see the module docstring.

    ``seeds`` runs seeds ``seed, seed+1, ...`` in one compiled program. ``block`` is how many
    generations run between host visits (default and most: the task's evaluation interval,
    capped at ``MAX_BLOCK``); it changes when progress is reported, never the result. With
    ``resume=True`` the run in ``out`` continues (``generations`` may extend it); the other
    settings come from its config. A stop signal (SIGTERM, SIGINT, SIGHUP, SIGUSR1) ends the
    run after the block in flight with a checkpoint and raises :class:`Interrupted`. A resumed
    run's code (a ``module:factory`` env) is imported only if this user made the run, or with
    ``trust_code`` (:mod:`esjax._src.run.trust`).
    """
    if block is not None and (not isinstance(block, int) or block <= 0):
        raise ConfigError(f"block must be a positive integer, got {block!r}")
    writer = jax.process_index() == 0  # only process 0 of a multi-process run writes files
    if resume:
        if out is None:
            raise ConfigError("resume needs the run directory (out=...)")
        given = (task, strategy, popsize, rollouts, seed, seeds, overrides)
        run = Run.reopen(out, generations=generations, writer=writer, trust_code=trust_code,
                         prepare=lambda config: _prepare_resume(config, *given))  # fmt: skip
    else:
        if task is None:
            raise ConfigError(MISSING_TASK)
        config = resolve_config(
            task,
            strategy=strategy,
            popsize=popsize,
            generations=generations,
            rollouts=rollouts,
            seed=seed,
            seeds=seeds,
            overrides=overrides,
        )
        check_memory(config)  # before the run directory exists
        out = out if out is not None else _default_run_dir(config)
        run = Run.create(out, config, overwrite=overwrite, writer=writer)

    with run:
        _, engine = engine_for(run.config)
        run.begin(engine)
        drive(
            engine,
            [run],
            block=min(block or engine.block, engine.block),
            signals=run.signals,  # SIGTERM, Ctrl-C, ...: checkpoint and raise Interrupted
            checkpoint_every_s=checkpoint_every_s,
            interrupted=lambda generation, signum: Interrupted(run.run_dir, generation, signum),
            reports=[on_progress],
        )
        return run.finish()


def _prepare_resume(
    config: RunConfig, task, strategy, popsize, rollouts, seed, seeds, overrides
) -> RunConfig:
    """On resume the run's own config rules; an argument that contradicts it is an error."""
    if isinstance(task, str) and not task.endswith(".toml") and task != config.task_name:
        raise ConfigError(f"this run is task {config.task_name!r}, not {task!r}")
    config = complete_sizes(config)
    given = {"strategy": strategy, "popsize": popsize, "rollouts": rollouts}
    stored = {"strategy": config.strategy.name, "popsize": config.popsize,
              "rollouts": config.rollouts}  # fmt: skip
    for key, value in given.items():
        if value is not None and value != stored[key]:
            raise ConfigError(f"cannot change {key} on resume (run has {stored[key]!r})")
    if seeds not in (1, config.seeds):
        raise ConfigError(f"cannot change seeds on resume (run has {config.seeds})")
    if seed not in (0, config.seed):  # 0 is also the default: not given
        raise ConfigError(f"cannot change seed on resume (run has {config.seed})")
    if overrides and list(overrides) != list(config.overrides):
        raise ConfigError("cannot change overrides (--set) on resume")
    return config
