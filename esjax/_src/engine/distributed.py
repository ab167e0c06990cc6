"""Devices: how esjax spreads a population over the cores and accelerators it is given."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import jax
import jaxlib

if TYPE_CHECKING:  # for type hints only: it imports evosax, which starts JAX's backend
    from esjax._src.engine.generation import Engine, RunState

# XLA's CPU collectives abort the whole process (SIGABRT) when one device's thread reaches a
# collective this many seconds after another; XLA's own default is 40 s. The devices of one
# process share its cores with whatever else the machine runs, and a long run beside other jobs
# had one thread starved past 40 s at generation 30. A real deadlock still ends, later.
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"
COLLECTIVE_TIMEOUT_S = 900
# The first jaxlib the flag was checked on: XLA ends the process at an XLA_FLAGS entry it does
# not know, so an older jaxlib keeps XLA's own timeout rather than risk that.
COLLECTIVE_TIMEOUT_SINCE = (0, 10)


def use_cpu_cores(count: int | None = None) -> int:
    """Expose ``count`` CPU cores (default: all) as separate JAX CPU devices.

    XLA runs one computation on one CPU thread; with one device per core, the population is
    sharded across cores and every core steps its own share. Must run before JAX starts its
    backends (before the first array is created). Returns the number of CPU devices in force.
    Also gives the devices' collectives :data:`COLLECTIVE_TIMEOUT_S` to meet, unless
    ``XLA_FLAGS`` already sets that timeout.
    """
    if count is None:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = max(1, int(count or 1))
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        # Backends already started: keep what is there rather than fail a running program.
        return len(jax.devices("cpu"))
    _allow_slow_collectives()
    return count


def _allow_slow_collectives() -> None:
    """Add the collective timeout to ``XLA_FLAGS``, read when the backends start."""
    version = tuple(int(part) for part in re.findall(r"\d+", jaxlib.__version__)[:2])
    flags = os.environ.get("XLA_FLAGS", "")
    if version >= COLLECTIVE_TIMEOUT_SINCE and COLLECTIVE_TIMEOUT_FLAG not in flags:
        timeout = f"{COLLECTIVE_TIMEOUT_FLAG}={COLLECTIVE_TIMEOUT_S}"
        os.environ["XLA_FLAGS"] = f"{flags} {timeout}".strip()


ENV_COORDINATOR = "ESJAX_COORDINATOR"
ENV_NUM_PROCESSES = "ESJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "ESJAX_PROCESS_ID"
# A peer that has sent no heartbeat for this long is declared lost and every process stops with
# an error (JAX's coordination service), instead of waiting forever in a collective.
HEARTBEAT_TIMEOUT_S = 30


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    initialization_timeout: int = 120,
    heartbeat_timeout_seconds: int = HEARTBEAT_TIMEOUT_S,
) -> bool:
    """Join a multi-process run through ``jax.distributed.initialize``; False when single-process.

    Arguments default to ``ESJAX_COORDINATOR`` (``HOST:PORT`` of process 0),
    ``ESJAX_NUM_PROCESSES`` and ``ESJAX_PROCESS_ID``. On CPU the cross-process collectives go
    through gloo. Afterwards ``jax.devices()`` lists every process's devices and the population
    mesh spans them all. Must run before JAX starts its backends.
    """
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None and os.environ.get(ENV_NUM_PROCESSES):
        num_processes = int(os.environ[ENV_NUM_PROCESSES])
    if process_id is None and os.environ.get(ENV_PROCESS_ID):
        process_id = int(os.environ[ENV_PROCESS_ID])
    if coordinator is None:
        if num_processes not in (None, 1) or process_id not in (None, 0):
            raise ValueError("a multi-process run needs the coordinator address (HOST:PORT)")
        return False
    if num_processes is None or process_id is None:
        raise ValueError("a multi-process run needs both num_processes and process_id")
    if not 0 <= int(process_id) < int(num_processes):
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=int(num_processes),
        process_id=int(process_id),
        initialization_timeout=int(initialization_timeout),
        heartbeat_timeout_seconds=int(heartbeat_timeout_seconds),
    )
    return True


def is_main_process() -> bool:
    """True in the process that writes the run directory (process 0; the only one when alone)."""
    return jax.process_index() == 0


# ---------------------------------------------------------------------------- bytes moved
_COLLECTIVE = re.compile(
    r"= (?P<shape>\(?[a-z0-9]+\[[^\]]*\][^=]*?) (?P<op>all-gather|all-reduce|collective-permute|"
    r"all-to-all|reduce-scatter)(-start)?\("
)
_SHAPE = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")
_DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "pred": 1, "s8": 1,
                "u8": 1, "f16": 2, "bf16": 2}  # fmt: skip


def collective_bytes(hlo: str) -> list[tuple[str, str, int]]:
    """``(op, result shape, bytes)`` of every collective in a compiled module's HLO text.

    Bytes are the size of each collective's result, counted once where the op appears: a
    collective in a loop body (the generation scan) counts once, so for a compiled generation
    block the total is what crosses devices per generation. (An asynchronous ``-start`` op's
    result also holds its operand, so on accelerators that use them this overcounts.)
    """
    found = []
    for match in _COLLECTIVE.finditer(hlo):
        shape = match["shape"]
        total = 0
        for dtype, dims in _SHAPE.findall(shape):
            count = 1
            for d in filter(None, dims.split(",")):
                count *= int(d)
            total += count * _DTYPE_BYTES.get(dtype, 4)
        found.append((match["op"], shape.split("{")[0], total))
    return found


def block_collectives(engine: Engine, state: RunState) -> list[tuple[str, str, int]]:
    """:func:`collective_bytes` of ``engine.run_block`` compiled for ``state``: one generation's."""
    n = jax.numpy.asarray(engine.block, jax.numpy.int32)
    text = engine.run_block.lower(state, n).compile().as_text()
    if text is None:
        raise RuntimeError("this backend gives no text of a compiled program to count bytes in")
    return collective_bytes(text)
