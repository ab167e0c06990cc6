"""A warm start: JAX's persistent compilation cache in a per-user directory.

Every command otherwise compiles its generation block afresh (seconds on a laptop CPU). With
the cache on, a program compiled once is read back from disk by the next process that builds
the same program on the same devices. The cache is an optimisation only: a directory that
cannot be created or written is a warning and the command runs uncached.

``ESJAX_NO_CACHE=1`` (or ``esjax --no-cache``) turns it off; ``ESJAX_CACHE_DIR`` moves it;
``ESJAX_CACHE_MAX_MB`` caps its size (oldest entries are removed at start-up).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esjax._src.envs import usercode
from esjax._src.envs.suites import names_code
from esjax._src.run import imports
from esjax._src.run.codefiles import folder_digest
from esjax._src.run.files import atomic_write

ENV_DISABLE = "ESJAX_NO_CACHE"
ENV_DIR = "ESJAX_CACHE_DIR"
ENV_MAX_MB = "ESJAX_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024


def default_cache_dir() -> Path:
    """``$ESJAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/esjax/xla``, else ``~/.cache/esjax/xla``."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "esjax" / "xla"


def disabled_by_env() -> bool:
    """True when ``ESJAX_NO_CACHE`` is set to anything but an empty string, 0 or false."""
    return os.environ.get(ENV_DISABLE, "").strip().lower() not in ("", "0", "false", "no")


def _max_bytes() -> int:
    raw = os.environ.get(ENV_MAX_MB)
    try:
        megabytes = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        warnings.warn(f"{ENV_MAX_MB}={raw!r} is not a number; using {DEFAULT_MAX_MB}", stacklevel=3)
        megabytes = DEFAULT_MAX_MB
    return int(max(megabytes, 0) * 2**20)


def prune(directory: Path, max_bytes: int) -> int:
    """Remove the least recently written entries until ``directory`` holds at most ``max_bytes``.

    Returns the number of files removed. JAX's own size cap needs an extra package and locks
    every read, so the cap is kept here, once per process, before anything is compiled.
    """
    entries = []
    for path in directory.iterdir():
        try:
            stat = path.stat()
        except OSError:  # removed by another process meanwhile
            continue
        if path.is_file():
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        removed += 1
    return removed


def enable_compilation_cache(directory: str | Path | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``directory`` (default: per user).

    Every program is cached whatever its compile time (the generation block is the one that
    matters, but many small ones add up at start-up). Returns the directory in use, or None
    with a warning when it cannot be written. Call before the first compilation.
    """
    import jax

    path = Path(directory).expanduser() if directory is not None else default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        prune(path, _max_bytes())
    except OSError as err:
        reason = err.strerror or str(err)
        warnings.warn(
            f"compilation cache {path} is not writable ({reason}); running without it",
            stacklevel=2,
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path


def disable_compilation_cache() -> None:
    """Leave compiled programs in memory only (the JAX default)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", None)


def remembered(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, or its JSON result from an earlier process with the same ``key``.

    For start-up work that, like compilation, depends only on a config and the code: it is kept
    beside the compilation cache (:func:`kept_path`), only while that cache is on. A file that
    cannot be read or written is recomputed or skipped, never an error.
    """
    path = kept_path("esjax-remembered", kind, key, ".json")
    if path is None:
        return compute()
    try:
        return json.loads(path.read_text())["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = compute()
    with contextlib.suppress(TypeError, ValueError):
        keep(path, json.dumps({"value": value}).encode())
    return value


# What :func:`code_digest` says of code it cannot read (a notebook's or ``python -c``'s
# ``__main__``): programs made from it are never kept, since an edit could not be seen.
UNREADABLE_CODE = "unreadable"


def code_digest(name: Any) -> str | None:
    """A digest of the Python a code-named env or policy kind comes from, or None for a name
    that is data (a gymnax id, a suite's env, a built-in kind) or an object.

    Every ``.py`` file in the folder of the module or file the name points at (an env's
    dynamics often sit in a helper beside its factory): for code a run provided, the folder of
    the file it runs from (:func:`esjax._src.run.codefiles.folder_digest`, the digest the run
    recorded), and the modules it imported from the user's folders
    (:func:`esjax._src.run.imports.digest`). Programs kept across processes are keyed by it,
    so edited code is traced again rather than read back as it was; code with no file behind
    it is :data:`UNREADABLE_CODE`.
    """
    if not isinstance(name, str) or not names_code(name):
        return None
    source = name.rpartition(":")[0]
    code = usercode.provided(source)
    if code is not None:
        folder = folder_digest(code.file, code.data)
        imported = imports.digest(source)  # the modules it imports from the user's folders
        return folder if imported is None else hashlib.sha256(
            f"{folder} {imported}".encode()).hexdigest()  # fmt: skip
    if usercode.is_file_source(source):
        path: Path | None = Path(source)
    else:
        try:
            spec = importlib.util.find_spec(source)
        except (ImportError, ValueError):
            spec = None
        path = Path(spec.origin) if spec is not None and spec.origin else None
    if path is None or not path.is_file():
        return UNREADABLE_CODE
    return folder_digest(path.resolve())


def kept_path(subdirectory: str, kind: str, key: Any, suffix: str) -> Path | None:
    """Where a result keyed by ``kind``, ``key`` and :func:`code_fingerprint` is kept.

    In ``subdirectory`` of JAX's compilation cache directory; None while that cache is off.
    """
    import jax

    directory = jax.config.values.get("jax_compilation_cache_dir")
    if not directory:
        return None
    parts = json.dumps([kind, key, code_fingerprint()], sort_keys=True, default=repr)
    digest = hashlib.sha256(parts.encode()).hexdigest()[:32]
    return Path(directory) / subdirectory / f"{kind}-{digest}{suffix}"


def keep(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError:
        return


@functools.cache
def code_fingerprint() -> str:
    """The code a compiled program comes from, as one digest.

    This package's source; for the libraries whose Python ends up in a run's programs (evosax,
    gymnax, flax, optax), every source file's size and modification time, so a library edited
    in place (an editable install, a patched env) counts as new code although its version is
    the same; JAX's and jaxlib's versions.
    """
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    esjax_folder = Path(__file__).resolve().parents[2]
    for source in sorted(esjax_folder.rglob("*.py")):
        h.update(str(source.relative_to(esjax_folder)).encode())
        h.update(source.read_bytes())
    for package in ("jax", "jaxlib", "evosax", "flax", "gymnax", "optax"):
        with contextlib.suppress(PackageNotFoundError):
            h.update(f"{package}={version(package)}".encode())
    for package in ("evosax", "gymnax", "flax", "optax"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            continue
        root = Path(spec.origin).parent
        for source in sorted(root.rglob("*.py")):
            with contextlib.suppress(OSError):
                stat = source.stat()
                h.update(f"{source.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return h.hexdigest()
