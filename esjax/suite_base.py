"""What every suite adapter shares: the spaces it reports, its params, its observation vector.

A module of its own, below :mod:`esjax.suites` and the ``esjax.suite_*`` adapters: the registry
imports each adapter module, and the adapters need these, so they cannot live in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from esjax.config import ConfigError


@struct.dataclass
class SuiteParams:
    """Params of an adapted env whose suite has none: its own episode limit, for defaults."""

    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)


@struct.dataclass
class WrappedParams:
    """A suite's own params (``suite``), with the episode limit esjax reads from every env's.

    The suite's env is handed ``suite`` unchanged; its fields are set through the task's
    ``[env_kwargs]`` (see :func:`replace_fields`), where the adapter can check them.
    """

    suite: Any
    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)


def replace_fields(params: Any, changes: dict[str, Any], where: str) -> Any:
    """``params.replace(**changes)``, a name ``params`` lacks being one line naming its fields.

    The suites' own ``replace`` would fail on such a name deep in a dataclass, or (xminigrid)
    add it silently.
    """
    fields = list(getattr(params, "__dataclass_fields__", {}))
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}: env_kwargs {', '.join(unknown)} not known; its params: {', '.join(fields)}"
        )
    return params.replace(**changes) if changes else params


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
