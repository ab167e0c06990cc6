"""Timing shared by the benchmark scripts (run from the repository root, beside this file)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax


def median_time(fn: Callable, *args: Any, repeats: int = 5) -> tuple[float, Any]:
    """Median wall seconds of ``fn(*args)`` over ``repeats`` calls after one warm-up call.

    The warm-up call compiles; its output is returned, so a caller can feed it to the next
    phase without timing it again.
    """
    out = jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), out
