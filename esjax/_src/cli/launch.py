"""Starting esjax's JAX side for the command line: devices first, then the library.

JAX fixes its devices, and whether this process is one of several, when the first array is
created, and importing evosax creates one. So the command line asks :func:`library` for
:mod:`esjax._src.cli.commands` instead of importing it: one CPU device per core (the console
script's default) and, for a multi-process run, joining the other processes come first.
"""

from __future__ import annotations

from types import ModuleType

from esjax._src.engine.distributed import initialize, use_cpu_cores
from esjax._src.specs.config import ConfigError


def library(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> ModuleType:
    """:mod:`esjax._src.cli.commands`, imported after JAX's devices are set.

    ``coordinator``, ``num_processes`` and ``process_id`` join a multi-process run (see
    :func:`esjax._src.engine.distributed.initialize`); a bad combination is a ConfigError. Called
    again in the same process, the devices already in force are kept.
    """
    use_cpu_cores()
    if coordinator is not None or num_processes not in (None, 1):
        try:
            initialize(coordinator, num_processes, process_id)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    from esjax._src.cli import commands  # after the devices: importing it creates JAX's first array

    return commands
