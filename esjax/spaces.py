"""What every suite adapter shares: spaces, params and the one observation conversion.

They live below :mod:`esjax.suites` so that each adapter module (``esjax.suite_<name>``) can use
them while the registry in :mod:`esjax.suites` imports the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class SuiteParams:
    """Params of an adapted env whose suite has none: its own episode limit, for defaults."""

    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)


@dataclass(frozen=True)
class DiscreteSpace:
    """``n`` actions, duck-typed like gymnax's ``Discrete``."""

    n: int
    shape: tuple[int, ...] = ()
    dtype: Any = jnp.int32


@dataclass(frozen=True)
class BoxSpace:
    """A float32 vector, duck-typed like gymnax's ``Box``."""

    low: float
    high: float
    shape: tuple[int, ...]
    dtype: Any = jnp.float32


def flat_observation(obs: Any) -> jax.Array:
    """Every leaf of an observation pytree, raveled and joined into one float32 vector."""
    leaves = jax.tree.leaves(obs)
    return jnp.concatenate([jnp.ravel(jnp.asarray(leaf, jnp.float32)) for leaf in leaves])
