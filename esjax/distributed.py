"""Devices: how esjax spreads a population over the cores and accelerators it is given."""

from __future__ import annotations

import os

import jax


def use_cpu_cores(count: int | None = None) -> int:
    """Expose ``count`` CPU cores (default: all) as separate JAX CPU devices.

    XLA runs one computation on one CPU thread; with one device per core, the population is
    sharded across cores and every core steps its own share. Must run before JAX starts its
    backends (before the first array is created). Returns the number of CPU devices in force.
    """
    if count is None:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = max(1, int(count or 1))
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        # Backends already started: keep what is there rather than fail a running program.
        return len(jax.devices("cpu"))
    return count
