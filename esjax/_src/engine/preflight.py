"""A task named on the command line, loaded and checked before anything is written or compiled.

``esjax evolve TASK`` and ``esjax sweep TASK`` fail fast on an unknown task, a bad preset, a bad
``--set`` or an env id that does not exist, with the message naming the file the task came from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from esjax._src.engine.tasks import check_task
from esjax._src.specs.config import ConfigError, TaskConfig
from esjax._src.specs.presets import MISSING_TASK, load_task


def checked_start(
    task: str | Path | None,
    overrides: Sequence[str] = (),
    *,
    resume: bool = False,
    out: str | Path | None = None,
    directory: str = "run",
    prepare: Callable[[TaskConfig, str], object] | None = None,
) -> TaskConfig | None:
    """A new run (or sweep) needs a task; a resumed one needs its directory. The task, checked.

    ``directory`` names what ``out`` is (``"run"``, ``"sweep"``) in the message. Returns the
    checked task, or None when resuming without one (the directory holds it). ``prepare(task,
    source)`` runs before the env is made: the host reads there the code the task names
    (:func:`esjax._src.run.training.checked_start`), so that the check runs what the run records.
    """
    if task is None and not resume:
        raise ConfigError(MISSING_TASK)
    if resume and out is None:
        raise ConfigError(f"--resume needs the {directory} directory: --out {directory.upper()}")
    if task is None:
        return None
    loaded = load_task(task, overrides)
    if prepare is not None:
        prepare(loaded.task, loaded.source)
    check_task(loaded.task, loaded.source)  # the env's own library decides its ids and params
    return loaded.task
