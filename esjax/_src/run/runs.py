"""Run directories: resolved config, metrics, atomic checkpoints and saved policies.

A run directory holds::

    config.json            the resolved config (task table, strategy, popsize, seeds, ...)
    metrics.jsonl          one JSON object per generation (and seed)
    checkpoint.msgpack     everything needed to continue the run (see "Checkpoints" below)
    checkpoint.prev.msgpack  the checkpoint before it, used when the newest one is damaged
    final_policy.msgpack   the search mean at the last checkpoint, per seed
    best_policy.msgpack    the best evaluated parameters so far, per seed
    summary.json           written when the run finishes (removed while a resume extends it)
    target.json            the generations a resume asked for, when it asked for any
    run.lock               locked (``flock``) by the process writing the run; holds its PID
    code.json, trust.sig   the files of the code the run names, and the seal over them
                           (:mod:`esjax._src.run.codefiles`, :mod:`esjax._src.run.trust`)

Binary files are msgpack (``flax.serialization``), never pickle, wrapped with a SHA-256 of
their payload so a torn or edited file is refused rather than half-loaded. Every file is
written to a temporary name, fsynced and renamed, so a crash leaves the old version or the new
one, never a mix, and a reader of a live run sees whole files (``metrics.jsonl`` is appended
whole lines at a time; a torn last line is skipped). Only the names above are ever read: a
pickle left in a run directory is reported and ignored. This module uses NumPy only: playing
and testing a saved policy is :mod:`esjax._src.run.saved`'s job.

Checkpoints (format version 2) hold their arrays by name: where each sits in the run's state
(``state/strategy/mean``, ``state/norm/m2``, ``state/hyper/learning_rate``, ...) or in the
host's bookkeeping (``host/best_params``, ``host/best_obs_mean``, ``host/best_obs_std``,
``host/best_generation``), so they are restored by name and a changed state is refused, never
mis-assigned. The names are made, and checked, where the state is known
(:func:`esjax._src.engine.generation.to_host`, :mod:`esjax._src.run.lifecycle`); this module stores
what it is given.
Version 1 stored the same arrays by position (``00000``, ``00001``, ...): it is still read,
and :func:`esjax._src.run.lifecycle.migrate_checkpoint` names its arrays. Policies are version 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from flax import serialization

from esjax._src.run.files import (
    GIB,
    KIB,
    MIB,
    append_bytes,
    atomic_write,
    fsync_dir,
    parse_json,
    read_bytes,
    read_json,
    read_lines,
    replacing,
)
from esjax._src.specs.config import ConfigError, RunConfig

CONFIG = "config.json"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.msgpack"
PREV_CHECKPOINT = "checkpoint.prev.msgpack"
DAMAGED_CHECKPOINT = "checkpoint.damaged.msgpack"
SUMMARY = "summary.json"
FITNESS_FIGURE = "fitness.png"  # drawn after a run (and each sweep configuration) ends
TARGET = "target.json"
LOCK = "run.lock"
POLICIES = {"final": "final_policy.msgpack", "best": "best_policy.msgpack"}
# Files other commands write into a run (export, eval --grid, render, report), and trackers'
# folders: what --overwrite removes besides the run's own files.
METRICS_CSV = "metrics.csv"
GRID_JSON, GRID_FIGURE = "grid.json", "grid.png"
EPISODE_GIF = "episode.gif"
REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "report.png"
DERIVED_FILES = (METRICS_CSV, GRID_JSON, GRID_FIGURE, EPISODE_GIF, REPORT_JSON, REPORT_MD,
                 REPORT_PNG)  # fmt: skip
TRACKER_FOLDERS = ("tensorboard", "wandb", "mlruns")
_FORMAT = "esjax"
# The version each kind of file is written with, and the versions still read.
CHECKPOINT_VERSION = 2  # 1: arrays by position; 2: arrays by name
_VERSIONS = {"checkpoint": CHECKPOINT_VERSION, "policy": 1}
_READABLE = {"checkpoint": (1, 2), "policy": (1,)}
# Files that unpickle (and so can run code) when loaded; esjax never reads them.
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".pck", ".joblib", ".dill")
# The most each kind of file can hold; a larger one is refused before it is read. A policy or
# checkpoint's own limit follows from the run's sizes (:func:`_array_file_limit`).
CONFIG_LIMIT = 1 * MIB
SUMMARY_LIMIT = 16 * MIB
TARGET_LIMIT = 4 * KIB
METRICS_LIMIT = 4 * GIB
# The longest metrics line read: esjax writes rows of well under 1 KiB.
METRICS_LINE_LIMIT = 64 * KIB
# The most generations a run can go to (the largest int32: generations are counted on device).
MAX_GENERATIONS = 2**31 - 1


class StorageError(ConfigError):
    """The run directory cannot be written (read-only, disk full); the last checkpoint is kept."""


# ---------------------------------------------------------------------------- atomic files
def write_json(path: str | Path, obj: object, *, through_special: bool = False) -> None:
    """``obj`` as indented JSON, written whole (see :func:`esjax._src.run.files.atomic_write`)."""
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    atomic_write(path, data, through_special=through_special)


def pack(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """``meta`` (JSON-able) and named arrays as checksummed msgpack bytes."""
    payload = serialization.msgpack_serialize(
        {
            "meta": json.dumps(meta, sort_keys=True),
            "arrays": {k: np.asarray(v) for k, v in arrays.items()},
        }
    )
    return serialization.msgpack_serialize(
        {
            "format": _FORMAT,
            "kind": kind,
            "version": _VERSIONS[kind],
            "sha256": hashlib.sha256(payload).hexdigest(),
            "payload": payload,
        }
    )


def unpack(path: str | Path, kind: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` from a file written by :func:`pack`; a damaged file is a ConfigError."""
    _, meta, arrays = _unpack(path, kind)
    return meta, arrays


def _unpack(
    path: str | Path, kind: str, limit: int | None = None
) -> tuple[int, dict[str, Any], dict[str, np.ndarray]]:
    """:func:`unpack` with the file's format version, which says how to read its arrays.

    Every field is checked before it is used, so an edited file is one :class:`ConfigError`.
    """
    path = Path(path)
    try:
        data = read_bytes(path, limit if limit is not None else _array_file_limit())
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: no such file") from err
    outer = _restore(data, path, kind)
    if not isinstance(outer, dict) or outer.get("format") != _FORMAT or outer.get("kind") != kind:
        raise ConfigError(f"{path}: not an esjax {kind} file")
    version = outer.get("version")
    if version not in _READABLE[kind]:
        raise ConfigError(f"{path}: {kind} format version {version} is not supported")
    payload, digest = outer.get("payload"), outer.get("sha256")
    if not isinstance(payload, bytes) or not isinstance(digest, str):
        raise ConfigError(f"{path}: not an esjax {kind} file (no payload or checksum)")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise ConfigError(f"{path}: checksum mismatch, the file is damaged")
    inner = _restore(payload, path, kind)
    if not isinstance(inner, dict) or not isinstance(inner.get("meta"), str):
        raise ConfigError(f"{path}: not an esjax {kind} file (no metadata)")
    if not isinstance(inner.get("arrays"), dict):
        raise ConfigError(f"{path}: not an esjax {kind} file (no arrays)")
    arrays = {str(k): _numeric(v, path, k) for k, v in inner["arrays"].items()}
    meta = parse_json(inner["meta"], f"{path}: metadata")
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: its metadata is not a table")
    return version, meta, arrays


def _restore(data: bytes, path: Path, kind: str) -> Any:
    try:
        return serialization.msgpack_restore(data)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be an esjax {kind} file") from None
    except Exception as err:  # msgpack raises several types on garbage
        raise ConfigError(f"{path}: not an esjax {kind} file ({err})") from None


def _numeric(value: object, path: Path, name: object) -> np.ndarray:
    """A stored array as numbers (booleans, integers or floats), never objects or strings."""
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is None or array.dtype.kind not in "biuf":
        raise ConfigError(f"{path}: array {name!r} is not an array of numbers")
    return array


def _array_file_limit() -> int:
    """The largest checkpoint or policy read: half this machine's memory (a larger file could
    not be restored anyway), so a huge file is one clear error rather than a ``MemoryError``."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 * GIB


# ---------------------------------------------------------------------------- run directory
def is_run_dir(path: str | Path) -> bool:
    return is_regular(Path(path) / CONFIG)


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself, not a link to one, is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether the run has a checkpoint to resume from (the newest or the one before it)."""
    return any(is_regular(Path(run_dir) / name) for name in (CHECKPOINT, PREV_CHECKPOINT))


def write_target(run_dir: str | Path, generations: int) -> None:
    """Record the generations a resume will run to, before it runs any.

    ``config.json`` is never rewritten, and a checkpoint records the target only when the next
    one is taken: without this file a kill before then would send a plain resume back to the
    old target.
    """
    write_json(Path(run_dir) / TARGET, {"generations": int(generations)})


def drop_summary_short_of(run_dir: str | Path, generations: int) -> None:
    """Remove ``summary.json`` when it reports fewer generations than the run now runs to.

    Extending a finished run records its new target at once; a kill before the first new
    block must not leave that target beside a summary that still calls the run finished.
    """
    path = Path(run_dir) / SUMMARY
    try:
        done = read_json(path, SUMMARY_LIMIT)["generations"]
    except (OSError, ConfigError, KeyError, TypeError):
        if path.is_symlink():  # a link is never the run's own summary: drop it, not its target
            path.unlink()
        return
    if not isinstance(done, int) or done < generations:
        path.unlink(missing_ok=True)


def read_target(run_dir: str | Path) -> int | None:
    """The target :func:`write_target` recorded, or None (never extended, or unreadable)."""
    try:
        value = read_json(Path(run_dir) / TARGET, TARGET_LIMIT)["generations"]
    except (OSError, ConfigError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and 0 < value <= MAX_GENERATIONS else None


def check_writable(path: str | Path) -> None:
    """Write and remove a probe file, so a read-only or full disk fails before any compiling."""
    probe = None
    try:
        fd, probe = tempfile.mkstemp(prefix=".esjax-write-test.", dir=path)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"esjax\n" * 512)
            handle.flush()
            os.fsync(handle.fileno())
        os.unlink(probe)
    except OSError as err:
        if probe is not None:
            Path(probe).unlink(missing_ok=True)
        raise StorageError(f"{path}: cannot write to the run directory: {_reason(err)}") from None


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


def read_run_config(run_dir: str | Path) -> RunConfig:
    """The resolved config a run was started with (``config.json``)."""
    warn_about_pickles(run_dir)
    path = Path(run_dir) / CONFIG
    try:
        data = read_json(path, CONFIG_LIMIT)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise ConfigError(f"{run_dir}: not an esjax run directory (no {CONFIG})") from err
    except OSError as err:  # unreadable: permissions
        raise ConfigError(f"{path}: cannot read it: {_reason(err)}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not an esjax run config")
    return RunConfig.from_json(data, str(path))


def write_run_config(run_dir: str | Path, config: RunConfig) -> None:
    """Write ``config.json``: once, when the run is created."""
    write_json(Path(run_dir) / CONFIG, config.to_json())


def warn_about_pickles(run_dir: str | Path) -> list[Path]:
    """Pickle files in a run directory: never loaded (unpickling runs code), only reported."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = sorted(p for p in run_dir.iterdir() if p.suffix.lower() in _PICKLE_SUFFIXES)
    for path in found:
        warnings.warn(
            f"{path}: ignored; esjax never loads pickle files (they can run code)", stacklevel=3
        )
    return found


# ---------------------------------------------------------------------------- metrics
def _json_value(value: object) -> object:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a missing statistic reads as null
    return value


def append_metrics(run_dir: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    lines = "".join(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n" for row in rows)
    append_bytes(Path(run_dir) / METRICS, lines.encode())


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's ``summary.json``; an unreadable one is one clear error."""
    path = Path(run_dir) / SUMMARY
    try:
        summary = read_json(path, SUMMARY_LIMIT)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the run's summary ({err})") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"{path}: not a run summary")
    return summary


def load_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` (:func:`iter_metrics`, kept in a list)."""
    return list(iter_metrics(run_dir))


def iter_metrics(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` one at a time, read as a stream: what a caller keeps of
    them is all the memory they take. A torn last line (a crash mid-write) is skipped, and so
    is any line that is not a JSON object (a file edited or damaged by hand, a line longer than
    any row esjax writes). A row whose fields are not what esjax writes is one
    :class:`ConfigError` naming its line."""
    for _, _, row in _metrics_lines(run_dir):
        if row is not None:
            yield row


def _metrics_lines(run_dir: str | Path) -> Iterator[tuple[int, bytes, dict[str, Any] | None]]:
    """``(line number, line, its row or None)`` of every line of ``metrics.jsonl``."""
    path = Path(run_dir) / METRICS
    if not os.path.lexists(path):  # a link is there, to be refused by the read
        if not is_run_dir(run_dir):
            raise ConfigError(f"{run_dir}: not an esjax run directory (no {CONFIG})")
        return
    for number, line in read_lines(path, METRICS_LINE_LIMIT, METRICS_LIMIT):
        try:
            row = json.loads(line.decode(errors="replace")) if line else None
        except (ValueError, RecursionError):
            row = None
        if isinstance(row, dict):
            yield number, line, check_row(row, f"{path}: line {number}")
        else:
            yield number, line, None


# What a metrics row's fields must be when present: counts; text (a sweep configuration's
# label); and, for every other field, a number or null.
_COUNT_FIELDS = ("generation", "env_steps", "seed", "nonfinite")
_TEXT_FIELDS = ("label", "configuration", "split")


def check_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` if every field is what esjax writes (``generation`` a count, statistics numbers
    or null), else a :class:`ConfigError` naming the field."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: not a metrics row")
    if "generation" not in row:
        raise ConfigError(f"{where}: no generation")
    for key, value in row.items():
        if key in _COUNT_FIELDS:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                raise ConfigError(f"{where}: {key} is not a count ({value!r:.40})")
        elif key in _TEXT_FIELDS and isinstance(value, str):
            continue
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"{where}: {key} is not a number ({value!r:.40})")
    return row


def truncate_metrics(run_dir: str | Path, generation: int) -> None:
    """Keep only rows up to ``generation``: what a checkpoint at that generation has seen.

    Streamed into the replacement file a row at a time (rows are written as read, so the
    file's bytes are kept), then renamed over the old one, as :func:`atomic_write` does.
    """
    path = Path(run_dir) / METRICS
    if not os.path.lexists(path):
        return
    with replacing(path) as handle:
        for _, line, row in _metrics_lines(run_dir):
            if row is not None and row["generation"] <= generation:
                handle.write(line if line.endswith(b"\n") else line + b"\n")


# ---------------------------------------------------------------------------- checkpoints
class Checkpoint(NamedTuple):
    """A checkpoint as stored: ``arrays`` are by name from version 2 on, by position before."""

    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    version: int


def save_checkpoint(
    run_dir: str | Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    """Write a checkpoint of named arrays, keeping the one it replaces as the previous one.

    The old checkpoint is hard-linked (or copied) to ``checkpoint.prev.msgpack`` through a
    temporary name and a rename before the new one replaces it, so at every instant both names
    hold a complete file (or the previous name does not exist yet).
    """
    run_dir = Path(run_dir)
    for name in arrays:
        if not isinstance(name, str) or not name:
            raise ValueError(f"checkpoint arrays are named by non-empty strings, got {name!r}")
    data = pack("checkpoint", meta, arrays)
    current = run_dir / CHECKPOINT
    if is_regular(current):
        _keep_previous(current, run_dir / PREV_CHECKPOINT)
    atomic_write(current, data)


def _keep_previous(current: Path, previous: Path) -> None:
    tmp = previous.with_name(f".{previous.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(current, tmp, follow_symlinks=False)
    except OSError:  # no hard links on this filesystem
        atomic_write(previous, read_bytes(current, _array_file_limit()))
        return
    try:
        os.replace(tmp, previous)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(previous.parent)


def load_checkpoint(run_dir: str | Path, limit: int | None = None) -> Checkpoint:
    """The newest checkpoint that passes its checksum, as stored (any readable version).

    A missing, truncated or corrupted ``checkpoint.msgpack`` falls back, with a warning, to
    ``checkpoint.prev.msgpack``; if that fails too, the newest file's error is raised. A
    version 1 checkpoint's arrays are positional: resuming names them through
    :func:`esjax._src.run.lifecycle.migrate_checkpoint`. ``limit``: the most bytes the run's
    checkpoint can hold (:func:`checkpoint_limit`), a larger file refused unread.
    """
    run_dir = Path(run_dir)
    try:
        version, meta, arrays = _unpack(run_dir / CHECKPOINT, "checkpoint", limit)
    except ConfigError as err:
        previous = run_dir / PREV_CHECKPOINT
        if not is_regular(previous):
            raise
        try:
            version, meta, arrays = _unpack(previous, "checkpoint", limit)
        except ConfigError:
            raise err from None
        # Set the damaged file aside so the next save does not rotate it into the previous slot.
        with contextlib.suppress(OSError):
            os.replace(run_dir / CHECKPOINT, run_dir / DAMAGED_CHECKPOINT)
        warnings.warn(
            f"{err}; resuming from the previous checkpoint {previous.name} "
            f"(generation {meta.get('generation')})",
            stacklevel=2,
        )
    return Checkpoint(meta, arrays, version)


def checkpoint_limit(arrays: Iterable[np.ndarray], seeds: int) -> int:
    """The most bytes a checkpoint of ``arrays`` (what this run's state holds, by shape) can
    take: their bytes, the metadata (the config, a few numbers per seed) and msgpack's framing
    of each, with room to spare. A larger file is no checkpoint of this run."""
    arrays = list(arrays)
    data = sum(int(np.asarray(a).nbytes) for a in arrays)
    return data + len(arrays) * 4 * KIB + seeds * 256 + 2 * CONFIG_LIMIT + MIB


# ---------------------------------------------------------------------------- policies
def save_policy(
    run_dir: str | Path,
    which: str,
    params: np.ndarray,
    obs_mean: np.ndarray | None,
    obs_std: np.ndarray | None,
    meta: dict[str, Any],
) -> None:
    """Flat parameters per seed ``(seeds, num_dims)`` and the statistics they were trained with."""
    arrays = {"params": np.asarray(params, np.float32)}
    if obs_mean is not None:
        arrays["obs_mean"] = np.asarray(obs_mean, np.float32)
        arrays["obs_std"] = np.asarray(obs_std, np.float32)
    atomic_write(Path(run_dir) / POLICIES[which], pack("policy", meta, arrays))


def read_policy(
    run_dir: str | Path,
    which: str = "final",
    seed: int = 0,
    *,
    config: RunConfig | None = None,
    shape: tuple[int, int] | None = None,
) -> tuple[dict[str, Any], np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """``(meta, flat params, (obs mean, obs std) or None)`` of one seed of a saved policy.

    The file's size is bounded before it is read: by ``shape``, ``(parameters per member,
    observation size)`` as the run's policy has them (computed from its task, so no number
    in a file decides it), else by ``config``'s sizes (the run's config when the caller has
    read it), else by the machine.
    """
    path, meta, arrays = _read_policy_file(run_dir, which, config, shape)
    params = arrays["params"]
    count = params.shape[0]
    if not 0 <= seed < count:
        raise ConfigError(f"{run_dir}: seed index {seed} out of range; the run has {count} seed(s)")
    stats = None
    if ("obs_mean" in arrays) != ("obs_std" in arrays):
        raise ConfigError(f"{path}: observation statistics need both obs_mean and obs_std")
    if "obs_mean" in arrays:
        mean, std = arrays["obs_mean"], arrays["obs_std"]
        if mean.shape != std.shape or mean.ndim < 2 or mean.shape[0] != count:
            raise ConfigError(f"{path}: obs_mean and obs_std are not one vector per seed")
        stats = (mean[seed], std[seed])
    return meta, params[seed].astype(np.float32), stats


def policy_seed_count(run_dir: str | Path, config: RunConfig) -> int:
    """How many seeds the run's final policy file holds (its params' first axis): what a
    config's ``seeds`` is checked against before anything iterates over them."""
    return int(_read_policy_file(run_dir, "final", config, None)[2]["params"].shape[0])


def _read_policy_file(
    run_dir: str | Path, which: str, config: RunConfig | None, shape: tuple[int, int] | None
) -> tuple[Path, dict[str, Any], dict[str, np.ndarray]]:
    """``(path, meta, arrays)`` of a policy file, bounded as :func:`read_policy` says, with
    params of shape (seeds, parameters)."""
    if which not in POLICIES:
        raise ConfigError(f"unknown policy {which!r}; choose from {', '.join(POLICIES)}")
    path = Path(run_dir) / POLICIES[which]
    _, meta, arrays = _unpack(path, "policy", _policy_limit(run_dir, config, shape))
    params = arrays.get("params")
    if params is None or params.ndim != 2:
        raise ConfigError(f"{path}: no params of shape (seeds, parameters)")
    return path, meta, arrays


def _policy_limit(
    run_dir: str | Path, config: RunConfig | None, shape: tuple[int, int] | None
) -> int:
    """The largest policy file this run can have: its seeds' parameters and observation
    statistics, with room for the format (any size when nothing says)."""
    if config is None:
        try:
            config = read_run_config(run_dir)
        except ConfigError:
            return _array_file_limit()
    if shape is not None:
        floats = config.seeds * (shape[0] + 2 * shape[1])
    elif config.num_dims > 0:
        floats = 2 * config.seeds * config.num_dims
    else:
        return _array_file_limit()
    return _FLOAT_BYTES * floats + config.seeds * 64 + 4 * MIB


_FLOAT_BYTES = 4
