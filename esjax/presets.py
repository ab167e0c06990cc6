"""Where presets live: packaged ``tasks/`` and ``strategies/`` TOML files, or explicit paths.

This module finds and lists files; what their fields mean is :mod:`esjax.config`'s business.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esjax.config import (
    ConfigError,
    TaskConfig,
    load_toml,
    suggest,
    task_with_overrides,
    to_dict,
)

FOLDERS = {"task": "tasks", "strategy": "strategies"}
_HERE = Path(__file__).resolve().parent


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


def load_task(
    task: str | Path | TaskConfig, overrides: Sequence[str] = ()
) -> tuple[str, TaskConfig, dict, str]:
    """``(name, task, table before overrides, source)`` of a preset name, a path or a task.

    The one place a task preset is read and validated (``--set`` overrides applied first).
    """
    if isinstance(task, TaskConfig):
        raw, source = to_dict(task), "task"
        name = Path(task.env).stem.lower() or "task"
        return name, task_with_overrides(raw, overrides, source), raw, source
    name, raw, source = locate("task", str(task))
    parsed = task_with_overrides(raw, overrides, source)
    return name, anchor_env_file(parsed, Path(source).parent), raw, source


def anchor_env_file(task: TaskConfig, folder: Path) -> TaskConfig:
    """A task whose env is ``file.py:factory``, with the file's path made absolute.

    A relative path is read beside the task file when the file is there, else from the working
    directory; made absolute once, here, the run's ``config.json`` names the same file when
    the run is resumed, evaluated or rendered from any other directory.
    """
    file, sep, factory = task.env.rpartition(":")
    if not sep or not file.endswith(".py") or Path(file).is_absolute():
        return task
    for candidate in (folder / file, Path(file)):
        if candidate.is_file():
            return dataclasses.replace(task, env=f"{candidate.resolve()}:{factory}")
    return task  # esjax.envs names the missing file when the env is made


def describe(kind: str) -> list[tuple[str, str]]:
    """``(name, one-line description)`` for every preset of a kind."""
    rows = []
    for name in names(kind):
        _, raw, _ = locate(kind, name)
        lines = str(raw.get("description", "")).strip().splitlines()
        rows.append((name, lines[0] if lines else ""))
    return rows
