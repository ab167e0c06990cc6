"""A toy env suite adapted the way a real one is: the module tests/test_suite_registry.py
registers to walk through adding a suite, from the registry line to ``esjax eval``.

What a suite's module provides (:class:`esjax._src.envs.core.SuiteAdapter`): ``SUITE``, what the
suite is, and ``make(name, env_kwargs)``, an env of :class:`esjax._src.envs.core.Env`'s shape and
its default params. A real adapter imports its suite's package inside ``make`` only; this suite is
the file itself, so its ``package`` is JAX, which is always there.

The env, ``toy:Walk``: a walker on a line starts near 0 and must reach ``target``; the actions
step left, stand or step right; each step costs the distance left, and the episode ends on
the target (termination) or after ``max_steps_in_episode`` steps (truncation).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from esjax._src.envs.suite_base import BoxSpace, DiscreteSpace, replace_fields
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError

SUITE = Suite(
    name="toy",
    package="jax",
    requirement="jax",
    example="toy:Walk",
    description="A walker on a line, for the test of the suite registry (discrete actions)",
)


@struct.dataclass
class WalkParams:
    target: float = 3.0
    step_size: float = 0.5
    max_steps_in_episode: int = struct.field(pytree_node=False, default=20)


@struct.dataclass
class WalkState:
    position: jax.Array
    time: jax.Array


class Walk:
    """The walker; observations are ``(position, target - position)``."""

    def __init__(self, params: WalkParams):
        self.default_params = params

    def reset(self, key: jax.Array, params: WalkParams) -> tuple[jax.Array, WalkState]:
        state = WalkState(jax.random.uniform(key, minval=-0.5, maxval=0.5), jnp.zeros((), int))
        return self.observe(state, params), state

    def step(
        self, key: jax.Array, state: WalkState, action: jax.Array, params: WalkParams
    ) -> tuple[jax.Array, WalkState, jax.Array, jax.Array, jax.Array, dict]:
        position = state.position + (jnp.asarray(action, jnp.float32) - 1.0) * params.step_size
        state = WalkState(position, state.time + 1)
        distance = jnp.abs(params.target - position)
        terminated = distance < params.step_size / 2
        truncated = state.time >= params.max_steps_in_episode
        return self.observe(state, params), state, -distance, terminated, truncated, {}

    def observe(self, state: WalkState, params: WalkParams) -> jax.Array:
        return jnp.stack([state.position, params.target - state.position])

    def action_space(self, params: WalkParams) -> DiscreteSpace:
        return DiscreteSpace(3)

    def observation_space(self, params: WalkParams) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, (2,))


def make(name: str, kwargs: dict[str, object]) -> tuple[Walk, WalkParams]:
    """``toy:Walk``; ``env_kwargs`` replace fields of its params (``target``, ...)."""
    if name != "Walk":
        raise ConfigError(f"toy has no env {name!r}; its envs: Walk")
    params = replace_fields(WalkParams(), kwargs, f"toy:{name}")
    return Walk(params), params
