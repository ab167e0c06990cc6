"""Files written whole or not at all: the one way esjax writes anything it reads back.

A temporary file in the same folder, fsynced, then renamed over the target: a crash leaves
the old version or the new one, never a mix. No JAX, so any layer may use it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and a rename.

    What ``path`` names (following links) when it is neither a regular file nor a directory (a
    FIFO, ``/dev/stdout``) is written to as it is: a rename would put a file in its place.
    """
    path = Path(path)
    if _special(path):
        with path.open("wb") as handle:
            handle.write(data)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make run files private to one user
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _special(path: Path) -> bool:
    """Whether ``path`` exists, through any links, as something other than a file or folder."""
    try:
        mode = path.stat().st_mode
    except (OSError, RuntimeError):  # missing, a dangling link or a loop: a rename is right
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
