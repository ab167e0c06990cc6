"""Where presets live: packaged ``tasks/`` and ``strategies/`` TOML files, or explicit paths.

This module finds and lists files; what their fields mean is :mod:`esjax._src.specs.config`'s
business.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from esjax._src.specs import live, policy_kinds
from esjax._src.specs.config import (
    ConfigError,
    TaskConfig,
    load_toml,
    parse_override,
    parse_task,
    split_strategy_settings,
    suggest,
    to_dict,
)

FOLDERS = {"task": "tasks", "strategy": "strategies"}
# What every command and function that starts a run or sweep says when it has no task.
MISSING_TASK = "missing TASK: a preset name (see `esjax list`) or a TOML file"
_HERE = Path(__file__).resolve().parents[2]  # the esjax package


def preset_dir(kind: str) -> Path:
    """The folder of a kind's presets: inside the installed wheel, else the source checkout."""
    for candidate in (_HERE / "presets_data" / FOLDERS[kind], _HERE.parent / FOLDERS[kind]):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"no {kind} presets found next to {_HERE}; reinstall esjax")


def names(kind: str) -> list[str]:
    """Sorted preset names of a kind (``"task"`` or ``"strategy"``)."""
    return sorted(
        entry.name[: -len(".toml")]
        for entry in preset_dir(kind).iterdir()
        if entry.name.endswith(".toml")
    )


def locate(kind: str, name_or_path: str) -> tuple[str, dict[str, Any], str]:
    """``(name, raw TOML table, source for messages)`` for a preset name or a ``.toml`` path."""
    candidate = Path(name_or_path)
    if name_or_path.endswith(".toml") or candidate.is_file():
        if not candidate.is_file():
            raise ConfigError(f"{name_or_path}: no such {kind} file")
        return candidate.stem, load_toml(candidate), str(candidate)
    valid = names(kind)
    if name_or_path not in valid:
        raise ConfigError(
            f"unknown {kind} {name_or_path!r}{suggest(name_or_path, valid)}; "
            f"valid {kind} names: {', '.join(valid)}"
        )
    path = preset_dir(kind) / f"{name_or_path}.toml"
    return name_or_path, load_toml(path), f"{FOLDERS[kind]}/{name_or_path}.toml"


class TaskTable(NamedTuple):
    """A task's table as read, before overrides (:func:`read_table`); :func:`load_task` parses
    it with each run's overrides, never reading its file again."""

    name: str  # the preset's name or the file's stem
    raw: dict[str, Any]
    source: str  # the file it came from: relative code files are read beside it


def read_table(task: str | Path) -> TaskTable:
    """A preset name's or a TOML file's table, read once."""
    return TaskTable(*locate("task", str(task)))


def recorded_table(table: TaskTable) -> dict[str, Any]:
    """``table`` with its code files' paths absolute (as :func:`load_task` makes them): what a
    sweep keeps of its task, so that resuming it from anywhere reads no task file."""
    recorded = dict(table.raw)
    folder = Path(table.source).parent
    if isinstance(recorded.get("env"), str):
        recorded["env"] = _anchored(recorded["env"], folder)
    policy = recorded.get("policy")
    if isinstance(policy, dict) and isinstance(policy.get("kind"), str):
        recorded["policy"] = {**policy, "kind": _anchored(policy["kind"], folder)}
    return recorded


class LoadedTask(NamedTuple):
    """A task as :func:`load_task` found it."""

    name: str  # the preset's name or the file's stem: runs are named after it
    task: TaskConfig  # parsed and validated, overrides applied, code files made absolute
    raw: dict[str, Any]  # the table before overrides (a run records what it was given)
    source: str  # the file it came from, for messages
    # One line on the task's [policy] settings a user's network named by --set does not get
    # (:func:`for_users_network`), for the caller to show; None when there are none.
    note: str | None = None


def load_task(
    task: str | Path | TaskConfig | TaskTable, overrides: Sequence[str] = ()
) -> LoadedTask:
    """A preset name, a path to a TOML file, a task or a table read before
    (:func:`read_table`), with ``--set`` ``overrides`` applied.

    The one place a task is found, read and validated; what its env makes of it is checked
    by :func:`esjax._src.engine.tasks.check_task`, which needs the env's library.
    """
    if isinstance(task, TaskConfig):
        raw, source = to_dict(task), "task"
        name = Path(task.env).stem.lower() or "task"
        return LoadedTask(name, parse_task(raw, source, overrides), raw, source)
    name, raw, source = task if isinstance(task, TaskTable) else read_table(task)
    kept, note = for_users_network(raw, overrides, source)
    parsed = parse_task(kept, source, overrides)
    return LoadedTask(name, anchor_code_files(parsed, Path(source).parent), raw, source, note)


# The [policy] keys that wrap or size a task's own network, which a user's network named by
# --set never takes from the task: its mirror (a wrapper around the network) and every key of
# the task's own kind (hidden, activation, ...). What the policy is shown and how its outputs
# become actions (meta_inputs, frame_stack, param_inputs, actions) still apply.
_NETWORK_KEYS_KEPT = ("meta_inputs", "frame_stack", "param_inputs", "actions")


def for_users_network(
    raw: dict[str, Any], overrides: Sequence[str], source: str
) -> tuple[dict[str, Any], str | None]:
    """``(table, note)``: where ``--set policy.kind=...`` swaps the task's own network for a
    user's, the table without the task's settings of its own network (those the command sets
    stay), and one line saying which the user's network gets and which it does not."""
    policy = raw.get("policy")
    given = {tuple(parse_override(text)[0]): text for text in overrides}
    kind = parse_override(given[("policy", "kind")])[1] if ("policy", "kind") in given else None
    if not isinstance(policy, dict) or not isinstance(kind, str) or not _users(kind):
        return raw, None
    if _users(str(policy.get("kind", "mlp"))):
        return raw, None  # the task's own network is the user's: its table is written for it
    dropped = {k: v for k, v in policy.items() if k != "kind" and k not in _NETWORK_KEYS_KEPT
               and ("policy", k) not in given}  # fmt: skip
    kept = {
        k: v for k, v in policy.items() if k in _NETWORK_KEYS_KEPT and ("policy", k) not in given
    }
    if not dropped:
        return raw, None
    shown = ", ".join(f"policy.{k}={_shown(v)}" for k, v in dropped.items())
    gets = ", ".join(f"policy.{k}={_shown(v)}" for k, v in kept.items())
    note = (
        f"{source}: your network {kind} is not given the task's {shown} (written for its "
        f"{policy.get('kind', 'mlp')}; --set policy.KEY=VALUE passes one on)"
        + (f"; it is given {gets}" if gets else "")
    )
    table = {**raw, "policy": {k: v for k, v in policy.items() if k not in dropped}}
    return table, note


def _users(kind: str) -> bool:
    """Whether a policy kind is a user's network (code or an object), not a built-in."""
    return policy_kinds.names_code(kind) or live.is_live(kind)


def _shown(value: Any) -> str:
    """A TOML value as ``--set`` takes it."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def anchor_code_files(task: TaskConfig, folder: Path) -> TaskConfig:
    """A task whose env or policy kind is ``file.py:factory``, with the file's path absolute.

    A relative path is read beside the task file when the file is there, else from the working
    directory; made absolute once, here, the run's ``config.json`` names the same file when
    the run is resumed, evaluated or rendered from any other directory.
    """
    env = _anchored(task.env, folder)
    kind = _anchored(task.policy.kind, folder)
    if env != task.env:
        task = dataclasses.replace(task, env=env)
    if kind != task.policy.kind:
        task = dataclasses.replace(task, policy=dataclasses.replace(task.policy, kind=kind))
    return task


def _anchored(name: str, folder: Path) -> str:
    """``name`` with a relative ``file.py`` made absolute where that file exists (a missing one
    is named when the code is loaded)."""
    file, sep, factory = name.rpartition(":")
    if not sep or not file.endswith(".py") or Path(file).is_absolute():
        return name
    for candidate in (folder / file, Path(file)):
        if candidate.is_file():
            return f"{candidate.resolve()}:{factory}"
    return name


def describe(kind: str) -> list[tuple[str, str]]:
    """``(name, one-line description)`` for every preset of a kind."""
    rows = []
    for name in names(kind):
        _, raw, _ = locate(kind, name)
        lines = str(raw.get("description", "")).strip().splitlines()
        rows.append((name, lines[0] if lines else ""))
    return rows


def task_rows() -> list[tuple[str, list[str], str]]:
    """``(name, strategies, one-line description)`` for every task preset, for ``esjax list``.

    ``strategies`` are those the task carries settings for: its own ``strategy`` first (its
    ``[strategy_settings]``), then each ``[strategy_settings.NAME]`` as written. Read from the
    files alone, so listing loads no strategy.
    """
    rows = []
    for name, text in describe("task"):
        raw = locate("task", name)[1]
        table = raw.get("strategy_settings", {})
        others = list(split_strategy_settings(table)[1]) if isinstance(table, dict) else []
        rows.append((name, [str(raw.get("strategy", TaskConfig.strategy)), *others], text))
    return rows
