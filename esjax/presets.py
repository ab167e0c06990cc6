"""Where presets live: packaged ``tasks/`` and ``strategies/`` TOML files, or explicit paths.

This module finds and lists files; what their fields mean is :mod:`esjax.config`'s business.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from esjax.config import ConfigError, load_toml, suggest

KINDS = {"task": "esjax.tasks", "strategy": "esjax.strategies"}


def _package_dir(kind: str):
    return importlib.resources.files(KINDS[kind])


def names(kind: str) -> list[str]:
    """Sorted preset names of a kind (``"task"`` or ``"strategy"``)."""
    return sorted(
        entry.name[: -len(".toml")]
        for entry in _package_dir(kind).iterdir()
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
    resource = _package_dir(kind) / f"{name_or_path}.toml"
    with importlib.resources.as_file(resource) as path:
        return name_or_path, load_toml(path), f"{kind}s/{name_or_path}.toml"


def describe(kind: str) -> list[tuple[str, str]]:
    """``(name, one-line description)`` for every preset of a kind."""
    rows = []
    for name in names(kind):
        _, raw, _ = locate(kind, name)
        rows.append((name, str(raw.get("description", "")).strip().splitlines()[0:1] or [""]))
    return [(name, text[0]) for name, text in rows]
