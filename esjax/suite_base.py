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


def timestep_outcome(timestep: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(reward, terminated, truncated)`` of a dm_env-style ``TimeStep`` (jumanji, xminigrid).

    An episode's last step with discount 0 ended in the env (termination); a last step that
    still discounts the future was cut short (truncation).
    """
    ended = timestep.last()
    terminated = jnp.logical_and(ended, timestep.discount == 0)
    truncated = jnp.logical_and(ended, timestep.discount != 0)
    return jnp.asarray(timestep.reward, jnp.float32), terminated, truncated


class StateEnv:
    """An env that steps a ``State`` carrying ``obs``, ``reward`` and a float ``done``
    (``env.reset(key)``, ``env.step(state, action)``, ``env.action_size``): Brax's and MuJoCo
    Playground's, with esjax's protocol.

    The state esjax carries is the suite's ``State``; the suites draw any randomness after a
    reset from a key kept in it, so the step key is not used. Actions are ``action_size``
    floats in [-1, 1]. ``done`` is termination; truncation is esjax's ``episode_length``.
    """

    def __init__(self, env: Any, episode_length: int):
        self.env = env
        self.default_params = SuiteParams(max_steps_in_episode=int(episode_length))
        # Traced, not run: an eager reset of a MuJoCo model takes seconds of dispatch.
        obs = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                             jax.random.key(0))  # fmt: skip
        self._obs_shape = tuple(obs.shape)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        state = self.env.reset(key)
        return flat_observation(state.obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple:
        state = self.env.step(state, action)
        return (flat_observation(state.obs), state, jnp.asarray(state.reward, jnp.float32),
                state.done > 0, jnp.asarray(False), {})  # fmt: skip

    def action_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-1.0, 1.0, (int(self.env.action_size),))

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)
