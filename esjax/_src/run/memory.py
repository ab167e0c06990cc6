"""Memory preflight: refuse a run whose generation cannot fit, before anything is allocated.

The estimate uses shapes only (``jax.eval_shape`` of the policy's and the strategy's
initialisation), so a network of ten billion weights is refused in milliseconds instead of
failing deep inside XLA after minutes. It counts what a generation holds at once, per seed:
the strategy state twice (the scan carries one while building the next), what the strategy
holds for its population (its ``population_floats``: three population-sized arrays for a
materialised population, the noise, the population and the weighted noise of ``tell``; a lazy
strategy says what it holds, e.g. antithetic OpenES its share of half the noise), and the
rollout's activations. Devices that share the host's memory (CPU devices) each count. It is an
estimate for refusing the impossible, not a promise that a run which passes fits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from esjax._src.specs.config import ConfigError

_FLOAT = 4  # bytes of a float32


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one generation needs on the most loaded memory, and what that memory offers."""

    needed: int
    available: int | None
    where: str  # "host memory" or the accelerator's kind
    num_dims: int
    popsize: int

    @property
    def fits(self) -> bool:
        return self.available is None or self.needed <= self.available


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def available_memory(devices: list[Any]) -> tuple[int | None, str]:
    """Free bytes on the first device, or the host's available memory for CPU devices."""
    device = devices[0]
    stats = None
    if device.platform != "cpu":
        try:
            stats = device.memory_stats()
        except Exception:  # not every backend reports memory
            stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), device.device_kind
    return _host_available(), "host memory"


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _bytes(tree: Any) -> int:
    return sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def member_size(rollout: Any) -> int:
    """Parameters per member of ``rollout``'s policy, from shapes alone (nothing allocated)."""
    params = jax.eval_shape(rollout.init_params, jax.random.key(0))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


def estimate(
    rollout: Any,
    build_strategy: Callable[[int], Any],
    popsize_for: Callable[[int], int],
    population_floats: Callable[[Any, int, Callable[[int], int]], int],
    *,
    seeds: int,
    rollouts: int,
) -> MemoryEstimate:
    """What a generation of ``rollout`` with the strategy ``build_strategy(num_dims)`` needs.

    ``popsize_for(num_dims)`` is the population size. ``population_floats(strategy, devices,
    chunk_for)`` is what the strategy holds for a population on one device, a chunk of
    ``chunk_for(member_bytes)`` members stepping at once
    (:func:`esjax._src.strategies.strategy.population_floats` with the run's member layout). The
    strategy is built and initialised only while tracing, so its templates are shapes, not
    ``num_dims`` floats.
    """
    key = jax.random.key(0)
    params = jax.eval_shape(rollout.init_params, key)
    num_dims = member_size(rollout)
    popsize = popsize_for(num_dims)
    devices = list(rollout.devices)
    held: list[int] = []
    try:

        def chunk_for(member_bytes: int) -> int:
            return int(rollout.chunk_members(popsize, member_bytes, seeds))

        def init(k):
            strategy = build_strategy(num_dims)
            held.append(population_floats(strategy, len(devices), chunk_for))
            return strategy.init(k, jnp.zeros((num_dims,), jnp.float32))

        state = _bytes(jax.eval_shape(init, key))
    except Exception:  # a strategy that cannot be traced here: its mean, std and moments
        state = 4 * num_dims * _FLOAT
    # What the strategy says it holds, else a materialised population's three arrays.
    population = (held[0] if held else 3 * popsize * num_dims) * _FLOAT
    # Activations live only within a step; every layer's output width once per episode.
    width = sum(leaf.shape[-1] for leaf in jax.tree.leaves(params) if leaf.shape)
    activations = 2 * popsize * rollouts * width * _FLOAT
    per_device = seeds * (2 * state + population + activations)
    available, where = available_memory(devices)
    shared = len(devices) if devices[0].platform == "cpu" else 1
    return MemoryEstimate(per_device * shared, available, where, num_dims, popsize)


def check_test_fits(rollout: Any, episodes: int, knob: str = "test_episodes") -> None:
    """One line when testing a policy on ``episodes`` episodes at once cannot fit, from shapes
    alone: each episode holds an env state, an observation and the policy's activations. Runs
    before training, so a run never trains to die at its final test."""
    key = jax.random.key(0)
    try:
        state = _bytes(jax.eval_shape(rollout.env.reset, key, rollout.env_params))
    except Exception:  # an env that cannot be traced here: its observation alone
        state = 0
    params = jax.eval_shape(rollout.init_params, key)
    width = sum(leaf.shape[-1] for leaf in jax.tree.leaves(params) if leaf.shape)
    needed = episodes * (2 * state + 2 * width * _FLOAT)
    device = rollout.devices[0]
    check_program_fits(needed, device, f"testing {episodes:,} episodes at once", knob)


def check_program_fits(needed: int, device: Any, what: str, knob: str) -> None:
    """One line when a compiled program running on ``device`` needs more bytes than the memory
    available, before it runs: an allocation past it is a crash or the kernel's OOM kill, with
    no message a user could act on."""
    available, where = available_memory([device])
    if available is not None and needed > available:
        raise ConfigError(
            f"{what} needs about {_gib(needed)} but {where} has {_gib(available)} "
            f"available; lower {knob}"
        )


def check_fits(found: MemoryEstimate) -> None:
    """One line with both numbers and the knobs to turn when a generation cannot fit."""
    if found.fits or found.available is None:
        return
    raise ConfigError(
        f"a generation needs about {_gib(found.needed)} but {found.where} has "
        f"{_gib(found.available)} available (popsize {found.popsize} x {found.num_dims:,} "
        "policy parameters); lower --popsize, policy.hidden (--set policy.hidden=[...]) "
        "or --seeds"
    )
