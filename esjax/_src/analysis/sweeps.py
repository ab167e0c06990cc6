"""Sweeps: the cross product of varied settings x seeds, one run directory per configuration.

``sweep("pendulum", ["strategy_settings.learning_rate=0.03,0.1,0.3"], seeds=5)`` runs every
configuration with :func:`esjax._src.run.training.evolve` (its seeds vmapped in one program) into
``SWEEP/<nn>-<key>=<value>``, a run directory like any other, then tests each configuration's
final and best policy on fresh episodes and writes ``SWEEP/sweep.json`` and ``SWEEP/sweep.png``.
Configurations run one after another; a configuration that is already finished is not run
again, so ``resume=True`` continues an interrupted sweep where it stopped (an interrupted
configuration resumes from its checkpoint, bit-identically).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from esjax._src.analysis.plotting import (
    Group,
    curve_rows,
    plot_grid,
    plot_groups,
    plot_runs,
    solved_return_of,
)
from esjax._src.run import codefiles, runs, trust
from esjax._src.run.files import MIB, read_json
from esjax._src.run.lifecycle import (
    Run,
    RunInUse,
    RunLock,
    StopSignals,
    backend_modules,
    remove_written,
)
from esjax._src.run.loop import drive
from esjax._src.run.trackers import RunLogger, check_backends
from esjax._src.run.training import (
    Interrupted,
    check_memory,
    complete_sizes,
    engine_for,
    resolve_config,
)
from esjax._src.specs.config import ConfigError, RunConfig, TaskConfig, changed_keys, parse_override
from esjax._src.specs.presets import MISSING_TASK, TaskTable, load_task, read_table, recorded_table
from esjax._src.specs.stats import interval_bounds

if TYPE_CHECKING:  # for type hints only: both import evosax, which starts JAX's backend
    from esjax._src.engine.generation import Engine
    from esjax._src.run.saved import Verdict

SWEEP = "sweep.json"
# Seconds between checkpoints of a running program (every configuration's, together).
CHECKPOINT_EVERY_S = 30.0
FIGURE = "sweep.png"
CURVES = "sweep-curves.png"
# What a sweep writes in its folder besides its configurations' runs (and report's files).
SWEEP_LIMIT = 64 * MIB
SWEEP_FILES = (SWEEP, FIGURE, CURVES, trust.SEAL, *runs.DERIVED_FILES)


@dataclass(frozen=True)
class Configuration:
    """One point of the cross product: its directory name and ``--set`` overrides."""

    name: str
    overrides: tuple[str, ...]
    values: dict[str, Any]


class SweepInterrupted(Interrupted):
    """A sweep stopped by Ctrl-C; the running configuration checkpointed, finished ones stay."""

    def __str__(self) -> str:
        return (
            f"sweep interrupted; finished configurations and a checkpoint are in {self.run_dir}. "
            f"Resume with `esjax sweep --resume --out {self.run_dir}` or "
            f"sweep(..., out={str(self.run_dir)!r}, resume=True)"
        )


# ---------------------------------------------------------------------------- the grid
def split_values(text: str) -> list[str]:
    """``"0.1,[32,32],adam"`` -> ``["0.1", "[32,32]", "adam"]``: commas inside brackets stay."""
    values, depth, current = [], 0, ""
    for char in text:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    return values


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``"KEY=V1,V2"`` -> ``(KEY, ["V1", "V2"])``, each value checked like a ``--set`` value."""
    if "=" not in text:
        raise ConfigError(f"--vary {text!r}: expected KEY=V1,V2,...")
    key, raw = text.split("=", 1)
    key = ".".join(part.strip() for part in key.strip().split("."))  # as --set reads it
    values = split_values(raw)
    if not key or any(not v for v in values):
        raise ConfigError(f"--vary {text!r}: expected KEY=V1,V2,... with no empty value")
    # Compared as read (0.1 and 0.10, [32] and [ 32 ] are one value): each would run the same
    # configuration again under another name.
    read = [_as_read(parse_override(f"{key}={value}")[1]) for value in values]
    if len(set(read)) != len(read):
        raise ConfigError(f"--vary {text!r}: a value is repeated")
    return key, values


def _as_read(value: object) -> str:
    """A value as a setting sees it: 1 and 1.0 are one number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = float(value)
    return json.dumps(value, sort_keys=True, default=str)  # TOML dates are not JSON


def configurations(vary: Sequence[str]) -> list[Configuration]:
    """The cross product of the ``--vary`` axes, first axis slowest."""
    axes = [parse_vary(text) for text in vary]
    if not axes:
        raise ConfigError("a sweep needs at least one --vary KEY=V1,V2,...")
    keys = [key for key, _ in axes]
    if len(set(keys)) != len(keys):
        raise ConfigError("each --vary key may appear once")
    product = list(itertools.product(*(values for _, values in axes)))
    width = len(str(len(product) - 1))
    out = []
    for index, values in enumerate(product):
        parsed = {key: parse_override(f"{key}={v}")[1] for key, v in zip(keys, values, strict=True)}
        label = "-".join(f"{key.split('.')[-1]}={v}" for key, v in zip(keys, values, strict=True))
        name = f"{index:0{width}d}-" + re.sub(r"[^A-Za-z0-9_.=+-]+", "_", label)
        overrides = tuple(f"{key}={v}" for key, v in zip(keys, values, strict=True))
        out.append(Configuration(name, overrides, parsed))
    return out


# ---------------------------------------------------------------------------- running
def sweep(
    task: str | Path | None,
    vary: Sequence[str] = (),
    *,
    seeds: int = 1,
    seed: int = 0,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    overrides: Sequence[str] = (),
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    test_episodes: int | None = None,
    log: Sequence[str] = (),
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_configuration: Callable[[Configuration, int, int], None] | None = None,
    trust_code: bool = False,
) -> dict[str, Any]:
    """Run every configuration of the sweep and return the ``sweep.json`` record.

    ``vary`` holds ``KEY=V1,V2,...`` strings (keys as for ``--set``); the other arguments are
    shared by every configuration as in :func:`esjax._src.run.training.evolve`. ``on_configuration``
    is called with ``(configuration, index, count)`` before each one runs; ``log`` names trackers.
    With ``resume=True`` the sweep in ``out`` continues from its own ``sweep.json``; code its
    task names is imported only if this user made the sweep, or with ``trust_code``
    (:mod:`esjax._src.run.trust`).
    """
    check_backends(log)
    given = {"task": task, "vary": list(vary), "seeds": seeds, "seed": seed,
             "strategy": strategy, "popsize": popsize, "generations": generations,
             "rollouts": rollouts, "overrides": list(overrides),
             "test_episodes": test_episodes}  # fmt: skip
    if resume:
        spec = _resumed_spec(out, given)
    else:
        spec = {**given, "task": str(task) if task is not None else None}
    if spec["task"] is None:
        raise ConfigError(MISSING_TASK)
    grid = configurations(spec["vary"])
    table = _task_table(spec)  # read once: whatever is checked below is what runs
    records: codefiles.Records | None = None
    if resume:  # before any task is resolved: resolving makes the env
        assert out is not None  # _resumed_spec refuses a resume without it
        records = _check_resumed(Path(out), spec, grid, table, trust_code)
    resolved = _resolve_all(spec, grid, table)  # every configuration is valid before compiling
    if not resume:
        records = codefiles.capture(config.task for config in resolved)
    recorded = _recorded_spec(spec, table, records)
    sweep_dir = Path(out) if out is not None else _default_dir(spec["task"])
    if not resume:
        if sweep_dir.exists() and not sweep_dir.is_dir():
            raise ConfigError(f"{sweep_dir} exists and is not a directory")
        sweep_dir.mkdir(parents=True, exist_ok=True)
    if resume:
        for configuration in grid:
            configuration_dir(sweep_dir, configuration.name)  # no link stands in for one
        _check_runs_unchanged(sweep_dir, grid, resolved)
    lock = _lock(sweep_dir)
    try:
        if not resume:
            _prepare(sweep_dir, overwrite)
            runs.write_json(sweep_dir / SWEEP, {"spec": recorded, "configurations": []})
        elif recorded != spec:  # recorded now: a sweep from before, or code taken as it is now
            runs.write_json(sweep_dir / SWEEP, {**read_record(sweep_dir), "spec": recorded})
        if not resume or recorded != spec:
            trust.seal_sweep(sweep_dir, recorded)
        spec = recorded
        _run_unfinished(sweep_dir, grid, resolved, log, on_progress, on_configuration)
        spec = _record_what_ran(sweep_dir, spec, resolved)
        record = summarize(sweep_dir, grid, spec)
        runs.write_json(sweep_dir / SWEEP, record)
        plot_sweep(sweep_dir, record)
    finally:
        lock.release()
    return record


# What each argument of :func:`sweep` is when it is not given (the command line's defaults).
NOT_GIVEN: dict[str, Any] = {"task": None, "vary": [], "seeds": 1, "seed": 0, "strategy": None,
                             "popsize": None, "generations": None, "rollouts": None,
                             "overrides": [], "test_episodes": None}  # fmt: skip


def _resumed_spec(out: str | Path | None, given: dict[str, Any]) -> dict[str, Any]:
    """The spec of the sweep in ``out``; an argument given again must agree with it.

    Each configuration is resumed as it was stored, so an argument that differs would be
    ignored: it is refused instead (a longer sweep is each run extended with ``esjax evolve
    --resume --generations N``, or a new sweep).
    """
    if out is None:
        raise ConfigError("resume needs the sweep directory (out=...)")
    spec = read_spec(Path(out))
    for key, value in given.items():
        stored = spec.get(key)
        if value == NOT_GIVEN[key] or value == stored or str(value) == stored:
            continue
        shown = "the task's" if stored is None else repr(stored)
        raise ConfigError(f"cannot change {key} on resume (the sweep has {shown})")
    return spec


def _task_table(spec: dict[str, Any]) -> TaskTable:
    """The sweep's task: the table its spec recorded, else (a sweep from before tables were
    recorded, or a new one) its preset or file, read now, once."""
    if isinstance(spec.get("task_table"), dict):
        return TaskTable(spec["task_name"], spec["task_table"], spec["task_source"])
    return read_table(spec["task"])


def _recorded_spec(
    spec: dict[str, Any], table: TaskTable, records: codefiles.Records | None
) -> dict[str, Any]:
    """``spec`` with what the sweep runs recorded in it (sealed with it): its task's table,
    code paths absolute, and the files of the code it names with their digests."""
    source = spec.get("task_source")
    if source is None:  # made now: the task file's absolute path, or the preset's name
        source = str(Path(table.source).resolve()) if Path(table.source).is_file() else table.source
    recorded = {
        **spec,
        "task_name": table.name,
        "task_source": source,
        "task_table": recorded_table(table),
    }
    recorded.pop("code", None)
    if records:
        recorded["code"] = codefiles.records_json(records)
    try:
        json.dumps(recorded)
    except (TypeError, ValueError):
        raise ConfigError(f"{spec['task']}: the task holds a value JSON cannot store") from None
    return recorded


def _record_what_ran(
    sweep_dir: Path, spec: dict[str, Any], resolved: Sequence[RunConfig]
) -> dict[str, Any]:
    """The spec with the records of its code as it ran: what the code imported while its
    configurations were built, which records taken before (``--trust-code``, a sweep from
    before imports were recorded) lack; written and sealed again when they differ. A sealed
    sweep's code imports nothing it did not record, so its spec stays as it is."""
    if "code" not in spec:
        return spec
    now = codefiles.records_json(codefiles.current_records(c.task for c in resolved))
    if now == spec["code"]:
        return spec
    recorded = {**spec, "code": now}
    runs.write_json(sweep_dir / SWEEP, {**read_record(sweep_dir), "spec": recorded})
    trust.seal_sweep(sweep_dir, recorded)
    return recorded


def _check_resumed(
    sweep_dir: Path,
    spec: dict[str, Any],
    grid: Sequence[Configuration],
    table: TaskTable,
    trust_code: bool,
) -> codefiles.Records | None:
    """Refuse, before anything is imported, code the user has not trusted; make the recorded
    files what runs. Returns the records of what will run."""
    tasks = [load_task(table, [*spec["overrides"], *c.overrides]).task for c in grid]
    records = trust.check_sweep(sweep_dir, spec, tasks, trust_code)
    if "task_table" not in spec and not trust.granted(sweep_dir):
        _check_legacy_code(sweep_dir, grid, tasks)
    return records


def _check_legacy_code(
    sweep_dir: Path, grid: Sequence[Configuration], tasks: Sequence[TaskConfig]
) -> None:
    """A sweep from before tasks were recorded names its task by path, found from wherever it
    is resumed: the code that task names must be the code its runs were made with."""
    for configuration, task in zip(grid, tasks, strict=True):
        run_dir = configuration_dir(sweep_dir, configuration.name)
        if not runs.is_run_dir(run_dir):
            continue
        made = trust.code_names([runs.read_run_config(run_dir).task])
        now = trust.code_names([task])
        if made != now:
            raise ConfigError(
                f"{run_dir}: the sweep's task names other code now ({', '.join(now) or 'none'}) "
                f"than this run was made with ({', '.join(made) or 'none'}); resume it from "
                "where it was made, or pass --trust-code"
            )


def _check_runs_unchanged(
    sweep_dir: Path, grid: Sequence[Configuration], resolved: Sequence[RunConfig]
) -> None:
    """Each configuration run so far must be the one the task resolves to now.

    A sweep is resumed from its spec, which names the task; a task file edited since (or a
    preset changed by an upgrade) would otherwise carry the stored runs on under other
    settings than their ``config.json``, without a word.
    """
    for configuration, config in zip(grid, resolved, strict=True):
        run_dir = sweep_dir / configuration.name
        if not runs.is_run_dir(run_dir) or (run_dir / runs.SUMMARY).is_file():
            continue  # not started, or finished: nothing of it runs again
        stored = runs.read_run_config(run_dir)
        trust.check_run(run_dir, stored.task)  # its own config may name other code than the spec
        stored_key = complete_sizes(stored).state_key()
        now = config.state_key()
        if stored_key != now:
            changed = ", ".join(changed_keys(stored_key, now)[:4])
            raise ConfigError(
                f"{run_dir}: the task has changed since this sweep ran it ({changed}); "
                "restore the task as it was, or start a new sweep"
            )


def _resolve_all(
    spec: dict[str, Any], grid: Sequence[Configuration], table: TaskTable
) -> list[RunConfig]:
    """Every configuration's resolved config: the shared arguments plus its own overrides,
    each parsed from the one task table the sweep read."""
    shared = {k: spec[k] for k in ("strategy", "popsize", "generations", "rollouts")}
    return [
        resolve_config(
            table,
            **shared,
            seed=spec["seed"],
            seeds=spec["seeds"],
            overrides=[*spec["overrides"], *configuration.overrides],
        )
        for configuration in grid
    ]


def _run_unfinished(
    sweep_dir: Path,
    grid: Sequence[Configuration],
    resolved: Sequence[RunConfig],
    log: Sequence[str],
    on_progress: Callable[[dict[str, Any]], None] | None,
    on_configuration: Callable[[Configuration, int, int], None] | None,
) -> None:
    """Run, program by program, the configurations without a ``summary.json`` (unfinished).

    A configuration that finished without its figure (a stop signal came during a later
    configuration's final test) gets it drawn here, on the resume.
    """
    for members, engine in programs(grid, resolved):
        pending = [i for i in members if not (sweep_dir / grid[i].name / runs.SUMMARY).is_file()]
        for i in members:
            run_dir = sweep_dir / grid[i].name
            if i not in pending and not (run_dir / runs.FITNESS_FIGURE).is_file():
                plot_runs([run_dir], run_dir / runs.FITNESS_FIGURE)
        if not pending:
            continue  # finished earlier
        if on_configuration is not None:
            on_configuration(_label(grid, pending), pending[0], len(grid))
        run_program(
            engine,
            [(sweep_dir / grid[i].name, resolved[i]) for i in pending],
            sweep_dir=sweep_dir,
            log=log,
            on_progress=on_progress,
        )
        for i in pending:
            run_dir = sweep_dir / grid[i].name
            plot_runs([run_dir], run_dir / runs.FITNESS_FIGURE)


def _label(grid: Sequence[Configuration], members: Sequence[int]) -> Configuration:
    """What ``on_configuration`` is told about a program: its configurations' overrides."""
    first = grid[members[0]]
    overrides = tuple("; ".join(grid[i].overrides) for i in members)
    values = {k: [grid[i].values[k] for i in members] for k in first.values}
    return Configuration(first.name, overrides, values)


def _lock(sweep_dir: Path):
    """Hold the sweep directory for this process: a second sweep on it is refused."""
    try:
        return RunLock.take(sweep_dir)
    except RunInUse:
        raise RunInUse(
            f"{sweep_dir} is in use by a running esjax sweep; wait for it to end or stop it "
            "(it checkpoints on SIGTERM), then --resume"
        ) from None


def _default_dir(task: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"sweep-{Path(task).stem}-{stamp}"


def _prepare(sweep_dir: Path, overwrite: bool) -> None:
    """Empty a locked sweep directory for a new sweep (only a sweep's, and with ``overwrite``)."""
    contents = [p for p in sweep_dir.iterdir() if p.name != runs.LOCK]
    if not contents:
        return
    if not overwrite:
        raise ConfigError(
            f"{sweep_dir} exists; pass --resume to continue it or --overwrite to replace it"
        )
    if not runs.is_regular(sweep_dir / SWEEP):
        raise ConfigError(f"{sweep_dir} is not a sweep directory (no {SWEEP}); not replacing it")
    configurations = [p.name for p in contents if not p.is_symlink() and runs.is_run_dir(p)]
    remove_written(sweep_dir, SWEEP_FILES, configurations)


def read_record(sweep_dir: str | Path) -> dict[str, Any]:
    """A sweep's ``sweep.json``, read as data: no link followed, its size bounded."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / SWEEP
    if not os.path.lexists(path):  # a link is there, to be refused by the read
        raise ConfigError(f"{sweep_dir}: not a sweep directory (no {SWEEP})")
    record = read_json(path, SWEEP_LIMIT)
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: not a sweep record")
    return record


def read_spec(sweep_dir: str | Path) -> dict[str, Any]:
    """The arguments a sweep was started with, from its ``sweep.json``, each of its type."""
    path = Path(sweep_dir) / SWEEP
    spec = read_record(sweep_dir).get("spec")
    kinds = {"vary": list, "overrides": list, "seeds": int, "seed": int}
    if not isinstance(spec, dict) or any(
        not isinstance(spec.get(key), kind) or isinstance(spec.get(key), bool)
        for key, kind in kinds.items()
    ):
        raise ConfigError(f"{path}: not a sweep record (its spec lacks {', '.join(kinds)})")
    if not all(isinstance(item, str) for item in [*spec["vary"], *spec["overrides"]]):
        raise ConfigError(f"{path}: spec: vary and overrides are lists of strings")
    if not isinstance(spec.get("task"), str):
        raise ConfigError(f"{path}: spec: task is not a task name or file")
    if spec.get("strategy") is not None and not isinstance(spec["strategy"], str):
        raise ConfigError(f"{path}: spec: strategy is not a name")
    for key in ("popsize", "generations", "rollouts", "test_episodes"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{path}: spec: {key} is not an integer")
    _check_recorded(spec, path)
    return spec


def _check_recorded(spec: dict[str, Any], path: Path) -> None:
    """What a sweep records of its task and code, each of its kind (or all absent: a sweep
    made before they were recorded)."""
    recorded = ("task_table", "task_name", "task_source")
    if not any(key in spec for key in recorded) and "code" not in spec:
        return
    if not isinstance(spec.get("task_table"), dict):
        raise ConfigError(f"{path}: spec: task_table is not a task's table")
    if not all(isinstance(spec.get(key), str) for key in recorded[1:]):
        raise ConfigError(f"{path}: spec: task_name and task_source are not names")
    if "code" in spec:
        codefiles.records_from_json(spec["code"], f"{path}: spec: code")


def configuration_dir(sweep_dir: Path, name: object) -> Path:
    """A configuration's run directory, which a sweep keeps as a plain folder inside itself:
    a name with a separator, ``..`` or a link there is refused (a sweep is data)."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ConfigError(f"{sweep_dir / SWEEP}: {name!r} is not a folder of this sweep")
    path = sweep_dir / name
    if path.is_symlink():
        raise ConfigError(f"{path}: a symbolic link; esjax follows no link in a sweep")
    return path


# ---------------------------------------------------------------------------- one program
def structure(config: RunConfig, traced: Sequence[str]) -> str:
    """What a compiled program depends on: the config without the traced numbers' values.

    The strategy's settings and the task's ``strategy_settings`` (where an override of one
    is also recorded, in a ``[strategy_settings.NAME]`` table too) are both read without them,
    and the env sampler without its traced bounds (``"m.low"`` is ``env_sampler.m.low``; the
    distribution kind stays).
    """

    def without(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: without(v) if isinstance(v, dict) else v
                for k, v in settings.items() if k not in traced}  # fmt: skip

    kept = config.to_json()
    del kept["overrides"], kept["esjax_version"]
    sampler = {
        name: {k: v for k, v in dist.items() if f"{name}.{k}" not in traced}
        for name, dist in kept["task"]["env_sampler"].items()
    }
    task = {
        **kept["task"],
        "strategy_settings": without(kept["task"]["strategy_settings"]),
        "env_sampler": sampler,
    }
    strategy = {**kept["strategy"], "settings": without(kept["strategy"]["settings"])}
    return json.dumps({**kept, "task": task, "strategy": strategy}, sort_keys=True)


def programs(
    grid: Sequence[Configuration], resolved: Sequence[RunConfig]
) -> list[tuple[list[int], Engine]]:
    """``[(configuration indices, engine)]``: configurations that one program runs together.

    Configurations share a program when their configs differ only in numbers the engine
    holds as arrays: strategy settings (:func:`esjax._src.strategies.strategy.traced_settings`,
    found by tracing the strategy, not from a list: learning rate, std, decays, momentum, ...) and
    the env sampler's bounds (:meth:`esjax._src.engine.tasks.ParamSampler.bounds`: ``low``/``high``
    of every distribution but ``choice``). Anything else (hidden sizes, popsize, strategy, a
    distribution's kind, other task fields, generations) gives a program of its own.
    """
    found: list[tuple[str, tuple[str, ...], list[int], Engine]] = []
    for index, config in enumerate(resolved):
        for key, traced, members, _ in found:
            if structure(config, traced) == key:
                members.append(index)
                break
        else:
            _, engine = engine_for(config)
            traced = engine.traced_names
            found.append((structure(config, traced), traced, [index], engine))
    return [(members, engine) for _, _, members, engine in found]


def traced_values(config: RunConfig, engine: Engine) -> dict[str, float]:
    """A config's values of the numbers that are arrays in ``engine``'s program."""
    values = {n: config.strategy.settings[n] for n in engine.hyper_names}
    for name in engine.bounds:
        param, field = name.rsplit(".", 1)
        values[name] = float(getattr(config.task.env_sampler[param], field))
    return values


def run_program(
    engine: Engine,
    members: Sequence[tuple[Path, RunConfig]],
    *,
    sweep_dir: Path,
    log: Sequence[str] = (),
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run configurations ``(run_dir, config)`` of one structure as one vmapped program.

    Each configuration is a :class:`esjax._src.run.lifecycle.Run` of its own (directory, lock,
    metrics, policies, checkpoint of its slice of the state), so each is also an ordinary run that
    ``esjax evolve --resume`` continues. Their states are stacked along the seed axis, each
    seed carrying its configuration's settings; checkpoints are taken together. Runs that
    stopped at different generations (a kill between two checkpoints) run as separate
    programs, each to the same numbers.
    """
    first = members[0][1]  # every member has the same seeds: they are stacked together

    def stopped(generation: int, signum: int) -> SweepInterrupted:
        return SweepInterrupted(sweep_dir, generation, signum)

    check_memory(dataclasses.replace(first, seeds=first.seeds * len(members)))
    with contextlib.ExitStack() as stack:
        opened = [_open(stack, engine, run_dir, config) for run_dir, config in members]
        signals = stack.enter_context(StopSignals())
        # A signal that came while the runs were opened (each has its own handler until now).
        earlier = (r.signals.received for r in opened if r.signals.received)
        signals.received = signals.received or next(earlier, None)
        for together in _by_progress(opened):
            loggers = [
                stack.enter_context(
                    RunLogger(
                        log, run_dir=run.run_dir, skip_through=run.generation, then=on_progress
                    )
                )
                for run in together
            ]
            drive(
                engine,
                together,
                block=engine.block,
                signals=signals,
                checkpoint_every_s=CHECKPOINT_EVERY_S,
                interrupted=stopped,
                reports=loggers,
            )
        for run in opened:
            run.finish(signals, stopped)


def _open(stack: contextlib.ExitStack, engine: Engine, run_dir: Path, config: RunConfig) -> Run:
    """A configuration's run (new, or reopened where it stopped), begun with its own values."""
    if runs.is_run_dir(run_dir):
        run = Run.reopen(run_dir, generations=None, prepare=complete_sizes, writer=True)
    else:
        run = Run.create(run_dir, config, overwrite=run_dir.exists(), writer=True)
    stack.enter_context(run)
    run.begin(engine.with_values(traced_values(run.config, engine)))
    return run


def _by_progress(opened: Sequence[Run]) -> list[list[Run]]:
    """Runs that can share one state: at the same generation, going to the same target."""
    groups: dict[tuple[int, int], list[Run]] = {}
    for run in opened:
        groups.setdefault((run.generation, run.total), []).append(run)
    return list(groups.values())


# ---------------------------------------------------------------------------- results
def interval(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean and 95% Student-t confidence interval over seeds (no interval for one seed).

    The dict that ``sweep.json`` stores; :func:`esjax._src.specs.stats.interval_bounds` computes it.
    """
    return interval_bounds(values, 0.95)


def steps_to_threshold(
    rows: Iterable[dict[str, Any]], threshold: float | None, seeds: int | None = None
) -> list:
    """Per seed (in seed order), env steps at the first evaluation reaching ``threshold``
    (None: never). One pass over ``rows``, which may be a stream (:func:`esjax._src.run.runs.
    iter_metrics`); rows of more than ``seeds`` seeds are one line."""
    if threshold is None:
        return []
    first: dict[Any, int | None] = {}
    for row in rows:
        seed = row.get("seed", 0)
        if seed not in first:
            if seeds is not None and len(first) >= seeds:
                raise ConfigError(f"metrics: rows of more seeds than the run's {seeds}")
            first[seed] = None
        value = row.get("eval_return")
        if value is not None and value >= threshold:
            steps, earlier = int(row["env_steps"]), first[seed]
            first[seed] = steps if earlier is None else min(steps, earlier)
    return [first[seed] for seed in sorted(first)]


def summarize(sweep_dir: Path, grid: Sequence[Configuration], spec: dict[str, Any]) -> dict:
    """Every configuration's final and best test return per seed, and its verdict per seed.

    The verdict is each run's own (``summary.json``, :func:`esjax._src.run.saved.verdict`); the test
    returns are read from it too unless the sweep asked for another number of test episodes.
    """
    saved = backend_modules().saved
    asked = spec.get("test_episodes")  # None: each task's own test_episodes, the verdict's
    results = []
    for configuration in grid:
        run_dir = sweep_dir / configuration.name
        config = runs.read_run_config(run_dir)
        episodes = int(asked or config.task.test_episodes)
        judged = saved.read_verdict(runs.read_summary(run_dir))
        entry: dict[str, Any] = {
            "name": configuration.name,
            "overrides": list(configuration.overrides),
            "values": configuration.values,
            "run_dir": configuration.name,
            "test_episodes": episodes,
        }
        tested = _test_returns(run_dir, config, episodes, judged)
        for which, per_seed in tested.items():
            entry[f"{which}_test_return"] = {"per_seed": per_seed, **interval(per_seed)}
        threshold = config.task.solved_return
        if judged is None and threshold is not None:  # a run from before summaries held one
            judged = _verdict_of(run_dir, config, threshold)
        entry["solved_return"] = threshold
        per_seed_verdicts = None if judged is None else judged.solved_per_seed
        entry["solved_per_seed"] = None if per_seed_verdicts is None else list(per_seed_verdicts)
        entry["solved_seeds"] = None if per_seed_verdicts is None else sum(per_seed_verdicts)
        steps = steps_to_threshold(runs.iter_metrics(run_dir), threshold, config.seeds)
        reached = [s for s in steps if s is not None]
        entry["env_steps_to_threshold"] = {
            "per_seed": steps,
            "mean_over_reached": float(np.mean(reached)) if reached else None,
        }
        results.append(entry)
    return {
        "spec": spec,
        "sweep_dir": str(sweep_dir),
        "test_episodes": asked,
        "configurations": results,
        "figure": FIGURE,
    }


def _verdict_of(run_dir: Path, config: RunConfig, threshold: float) -> Verdict:
    """The verdict of a run whose summary has none, on the same episodes as summary.json's."""
    return backend_modules().saved.verdict(run_dir, config.seeds, threshold)


def _test_returns(
    run_dir: Path, config: RunConfig, episodes: int, judged: Verdict | None
) -> dict[str, list]:
    """Per-seed mean test return of the final and best policy (the verdict's when it fits)."""
    saved = backend_modules().saved
    if judged is not None and episodes == judged.episodes:
        return {"final": list(judged.final_per_seed), "best": list(judged.best_per_seed)}
    built = saved.make_test_rollout(run_dir)  # shared by configurations of the same task
    return {
        which: [
            saved.evaluate_run(run_dir, episodes, seed=s, which=which, built=built)["mean"]
            for s in range(config.seeds)
        ]
        for which in ("final", "best")
    }


def plot_sweep(sweep_dir: Path, record: dict[str, Any]) -> Path:
    """Curves per configuration (mean and 95% band); a heatmap too for two numeric axes."""
    entries = record["configurations"]
    run_dirs = [configuration_dir(sweep_dir, e["run_dir"]) for e in entries]
    groups = [
        Group(", ".join(e["overrides"]), (curve_rows(d, runs.read_run_config(d).seeds),))
        for e, d in zip(entries, run_dirs, strict=True)
    ]
    title = f"sweep · {record['spec']['task']} · {record['spec']['seeds']} seeds per line"
    keys = [parse_vary_key(text) for text in record["spec"]["vary"]]
    numeric = all(
        isinstance(e["values"][k], int | float) and not isinstance(e["values"][k], bool)
        for e in entries
        for k in keys
    )
    if len(keys) == 2 and numeric:
        plot_groups(
            groups, sweep_dir / CURVES, title=title, solved_return=solved_return_of(run_dirs)
        )
        rows = sorted({e["values"][keys[0]] for e in entries})
        cols = sorted({e["values"][keys[1]] for e in entries})
        means = np.full((len(rows), len(cols)), np.nan)
        for e in entries:
            value = e["final_test_return"]["mean"]
            r, c = rows.index(e["values"][keys[0]]), cols.index(e["values"][keys[1]])
            means[r, c] = np.nan if value is None else value
        grid = {
            "mean": means.tolist(),
            "values": [rows, cols],
            "axes": keys,
            "in_training": np.zeros_like(means, dtype=bool).tolist(),
        }
        heat_title = f"{record['spec']['task']}: final policy, mean test return"
        return plot_grid(grid, sweep_dir / FIGURE, title=heat_title)
    return plot_groups(
        groups, sweep_dir / FIGURE, title=title, solved_return=solved_return_of(run_dirs)
    )


def parse_vary_key(text: str) -> str:
    return text.split("=", 1)[0].strip()
