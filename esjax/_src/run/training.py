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
from typing import TYPE_CHECKING, Any, cast

import jax

from esjax._src.engine import preflight
from esjax._src.engine.tasks import forget_shared_rollouts, shared_rollout
from esjax._src.run import codefiles, memory
from esjax._src.run.cache import UNREADABLE_CODE, code_digest, remembered
from esjax._src.run.lifecycle import Interrupted, LostProcess, Run, RunSummary, backend_modules
from esjax._src.run.loop import drive
from esjax._src.run.programs import keep_programs
from esjax._src.specs import live
from esjax._src.specs.config import ConfigError, RunConfig, StrategySpec, TaskConfig
from esjax._src.specs.presets import MISSING_TASK, TaskTable, load_task

__all__ = ["Interrupted", "LostProcess", "RunSummary", "engine_for", "evolve", "resolve_config"]

if TYPE_CHECKING:  # the engine imports evosax, which starts JAX's backend on import
    from esjax._src.engine.generation import Engine
    from esjax._src.engine.trainer import Trainer


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
    """The resolved config of a new run (what ``config.json`` holds), before anything is written.

    :func:`esjax._src.engine.resolve.resolve_task` decides it; here the files of the code the
    task names are read once first, so what runs is what the run records.
    """
    loaded = load_task(task, list(overrides))
    capture_code(loaded.task, loaded.name)
    config, notes = backend_modules().resolve.resolve_task(
        loaded, strategy=strategy, popsize=popsize, generations=generations,
        rollouts=rollouts, seed=seed, seeds=seeds, overrides=overrides,
    )  # fmt: skip
    for note in notes:  # resolved: a command refused above says only why
        warnings.warn(note, stacklevel=2)
    return config


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
    """``(task, engine)`` for a resolved config: the engine of its
    :class:`~esjax._src.engine.trainer.Trainer` (:func:`trainer_for`).

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
    return backend_modules().trainer.completed_spec(config)


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
    is traced again; code whose source cannot be read, and objects handed over from Python
    (live names, which no later process shares), are never kept.
    """
    key = config.program()
    sources = {"env_source": config.task.env, "policy_source": config.task.policy.kind}
    if any(live.is_live(name) for name in sources.values()):
        return None
    for field, name in sources.items():
        source = code_digest(name)
        if source == UNREADABLE_CODE:
            return None
        if source is not None:
            key = {**key, field: source}
    return key


def trainer_for(config: RunConfig) -> Trainer:
    """The trainer a resolved config describes: what a run drives (its engine), the cache of
    traced settings on disk (:func:`esjax._src.run.cache.remembered`) behind it."""
    check_memory(config)  # building the engine allocates a member's parameters
    return backend_modules().trainer.Trainer.from_config(config, remember=remembered)


def _make_engine(config: RunConfig) -> Engine:
    engine = trainer_for(config).engine
    key = program_key(config)
    if key is not None:
        engine = keep_programs(engine, key)
    steps = config.rollouts * engine.rollout.episode_length
    hint = backend_modules().strategies.strategy_cost_hint(engine.strategy, steps)
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
    task: str | Path | TaskConfig | Trainer | None,
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

    ``task`` may be a :class:`esjax.Trainer`: the run is that trainer's, with every guarantee a
    run has (metrics, checkpoints, signals, resume to the same numbers). A resume with a
    trainer whose structure differs from the run's (env, network, strategy, sizes) is refused
    in one line; an env or network handed over as an object is named as such in
    ``config.json`` (:mod:`esjax._src.specs.live`).
    """
    if block is not None and (not isinstance(block, int) or block <= 0):
        raise ConfigError(f"block must be a positive integer, got {block!r}")
    trainer = _as_trainer(task, strategy=strategy, popsize=popsize, rollouts=rollouts,
                          overrides=overrides)  # fmt: skip
    writer = jax.process_index() == 0  # only process 0 of a multi-process run writes files
    if resume:
        if out is None:
            raise ConfigError("resume needs the run directory (out=...)")
        given = (task, strategy, popsize, rollouts, seed, seeds, overrides)
        prepare = (
            functools.partial(_prepare_trainer_resume, trainer=trainer, seed=seed, seeds=seeds)
            if trainer is not None
            else lambda config: _prepare_resume(config, *given)
        )
        run = Run.reopen(out, generations=generations, writer=writer, trust_code=trust_code,
                         prepare=prepare)  # fmt: skip
    else:
        if task is None:
            raise ConfigError(MISSING_TASK)
        config = (
            _trainer_config(trainer, generations, seed, seeds)
            if trainer is not None
            else resolve_config(
                cast("str | Path | TaskConfig", task), strategy=strategy, popsize=popsize,
                generations=generations, rollouts=rollouts, seed=seed, seeds=seeds,
                overrides=overrides,
            )
        )  # fmt: skip
        check_memory(config)  # before the run directory exists
        out = out if out is not None else _default_run_dir(config)
        run = Run.create(out, config, overwrite=overwrite, writer=writer)

    with run:
        engine = (
            _trainer_engine(trainer, run.config) if trainer is not None
            else engine_for(run.config)[1]
        )  # fmt: skip
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


def _as_trainer(task: Any, **given: Any) -> Trainer | None:
    """``task`` if it is a trainer (which then takes none of the task's other arguments)."""
    if task is None or isinstance(task, str | Path | TaskConfig | TaskTable):
        return None
    trainer_type = backend_modules().trainer.Trainer
    if not isinstance(task, trainer_type):
        raise ConfigError(
            f"task: a {type(task).__name__} is not a task; give a preset name, a TOML file or "
            "an esjax.Trainer"
        )
    named = [name for name, value in given.items() if value not in (None, ())]
    if named:
        raise ConfigError(f"{named[0]}: a trainer's own; give it to esjax.Trainer(...)")
    return task


def _trainer_config(trainer: Trainer, generations: int | None, seed: int, seeds: int) -> RunConfig:
    """A trainer's config for a new run of ``seeds`` seeds from ``seed``."""
    resolve = backend_modules().resolve
    resolve.check_counts(generations=generations)
    resolve.check_seeds(seed, seeds)
    config = trainer.config
    return dataclasses.replace(
        config, generations=generations or config.generations, seed=seed, seeds=seeds
    )


def _trainer_engine(trainer: Trainer, config: RunConfig) -> Engine:
    """The trainer's own engine for its run (kept on disk as a run's would be): its programs,
    its callback, and no second build."""
    kept = program_key(config)
    return keep_programs(trainer.engine, kept) if kept is not None else trainer.engine


def _prepare_trainer_resume(
    config: RunConfig, *, trainer: Trainer, seed: int, seeds: int
) -> RunConfig:
    """The run's config, resumed by ``trainer``: refused in one line where they differ in
    anything but the run's length; the trainer's objects stand for the run's live names."""
    config = complete_sizes(config)
    if seeds not in (1, config.seeds):
        raise ConfigError(f"cannot change seeds on resume (run has {config.seeds})")
    if seed not in (0, config.seed):
        raise ConfigError(f"cannot change seed on resume (run has {config.seed})")
    difference = first_difference(_structure(config), _structure(trainer.config))
    if difference is not None:
        where, stored, given = difference
        raise ConfigError(
            f"this run was made by another trainer: its {where} is {stored!r}, this "
            f"trainer's {given!r}; resume it with the trainer that made it"
        )
    for stored_name, given_name in (
        (config.task.env, trainer.config.task.env),
        (config.task.policy.kind, trainer.config.task.policy.kind),
    ):
        if live.is_live(stored_name):
            live.bind(stored_name, live.lookup(given_name))
    return config


def _structure(config: RunConfig) -> dict[str, Any]:
    """What a run's state and programs depend on, live objects by what they are (their class)
    rather than by the name this process gave them, and without the run's length."""
    program = config.program()  # what the objects are first, then sizes, then settings
    order = ("task", "popsize", "rollouts", "strategy", "loop")
    data = {**{key: program[key] for key in order if key in program}, **program}
    data["num_dims"] = config.num_dims
    task = dict(data["task"])
    task.pop("generations", None)
    if live.is_live(task["env"]):
        task["env"] = live.label(task["env"])
    policy = dict(task["policy"])
    if live.is_live(policy["kind"]):
        policy["kind"] = live.label(policy["kind"])
    data["task"] = {**task, "policy": policy}
    return data


def first_difference(a: Any, b: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """``(path, a's value, b's value)`` of the first place two JSON-like values differ, in
    ``a``'s order of keys."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(key for key in b if key not in a)]:
            found = first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    return None if a == b else (where, a, b)


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
