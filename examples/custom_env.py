"""A user's own env, written from scratch, trained by esjax without registering it anywhere.

    esjax evolve examples/custom_env.toml --generations 20

The task file names this file's factory (``env = "custom_env.py:make_env"``, read beside
the task file) and passes it options from its ``[env_kwargs]`` table. esjax
needs only the gymnax-style protocol documented in ``esjax._src.envs.core``: ``reset``, a six-value
``step``, ``action_space``, ``observation_space`` and ``default_params``.

The env: a point mass on a line must reach a target and stop there. The action is a force in
[-1, 1]; each step costs the distance to the target (and a little for the force), and the
episode ends early, costing nothing more, once the mass rests within ``tolerance`` of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@dataclass(frozen=True)
class Box:
    """A continuous space: esjax reads ``low``, ``high`` and ``shape``."""

    low: float
    high: float
    shape: tuple[int, ...]
    dtype: Any = jnp.float32


@struct.dataclass
class EnvParams:
    """What a task may pin (``[env_params]``) or sample (``[env_sampler]``)."""

    dt: float = 0.1
    friction: float = 0.1  # the share of velocity lost per second
    tolerance: float = 0.05
    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)


@struct.dataclass
class EnvState:
    position: jax.Array
    velocity: jax.Array
    target: jax.Array
    time: jax.Array


class PointMass:
    """A 1-D point mass that must come to rest on a target drawn at reset."""

    def __init__(self, params: EnvParams):
        self.default_params = params

    def reset(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        k_position, k_target = jax.random.split(key)
        state = EnvState(
            position=jax.random.uniform(k_position, minval=-1.0, maxval=1.0),
            velocity=jnp.zeros(()),
            target=jax.random.uniform(k_target, minval=-1.0, maxval=1.0),
            time=jnp.zeros((), jnp.int32),
        )
        return self.observe(state), state

    def step(
        self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams
    ) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, dict]:
        force = jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
        velocity = (state.velocity + force * params.dt) * (1.0 - params.friction * params.dt)
        position = state.position + velocity * params.dt
        state = EnvState(position, velocity, state.target, state.time + 1)
        distance = jnp.abs(position - state.target)
        reward = -distance - 0.01 * force**2
        terminated = (distance < params.tolerance) & (jnp.abs(velocity) < params.tolerance)
        truncated = state.time >= params.max_steps_in_episode
        return self.observe(state), state, reward, terminated, truncated, {}

    def observe(self, state: EnvState) -> jax.Array:
        return jnp.stack([state.position, state.velocity, state.target])

    def action_space(self, params: EnvParams) -> Box:
        return Box(-1.0, 1.0, (1,))

    def observation_space(self, params: EnvParams) -> Box:
        return Box(-jnp.inf, jnp.inf, (3,))


def make_env(friction: float = 0.1, max_steps: int = 100) -> tuple[PointMass, EnvParams]:
    """The factory a task names; its keyword arguments come from the task's ``[env_kwargs]``."""
    params = EnvParams(friction=friction, max_steps_in_episode=max_steps)
    return PointMass(params), params
