"""navix (``navix:NAME``) with esjax's env protocol.

navix steps a ``Timestep`` (``step(timestep, action)``) whose ``step_type`` says transition,
truncation (its ``max_steps``) or termination; the state esjax carries is that timestep. navix
draws its randomness from a key inside the state, set at reset, so the step key is not used.
navix resets inside ``step`` only when handed a finished timestep, which esjax never keeps
stepping, so the state an episode ends in is navix's own. ``env_kwargs`` go to
``navix.make`` (``max_steps``, ...). ``esjax render`` draws navix's own full-grid RGB picture
of a state, whatever observation the policy sees.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from esjax._src.envs.suite_base import (
    BoxSpace,
    DiscreteSpace,
    Renderer,
    SuiteParams,
    each,
    policy_observation,
)
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError

SUITE = Suite(
    name="navix",
    package="navix",
    requirement="navix>=0.7",
    example="navix:Navix-Empty-5x5-v0",
    description="MiniGrid worlds in JAX (discrete actions)",
)


class NavixEnv:
    """A navix env, stepped from the timestep it returned last."""

    def __init__(self, env: Any):
        self.env = env
        self.default_params = SuiteParams(max_steps_in_episode=int(env.max_steps))
        obs_shape = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                                   jax.random.key(0)).shape  # fmt: skip
        self._obs_shape = tuple(obs_shape)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        timestep = self.env.reset(key)
        return policy_observation(timestep.observation), timestep

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple:
        timestep = self.env.step(state, action)
        return (policy_observation(timestep.observation), timestep,
                jnp.asarray(timestep.reward, jnp.float32), timestep.is_termination(),
                timestep.is_truncation(), {})  # fmt: skip

    def action_space(self, params: Any) -> DiscreteSpace:
        return DiscreteSpace(len(self.env.action_set))

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)

    def renderer(self, params: Any) -> Renderer:
        """navix's own full-grid RGB picture of a timestep's state (``observations.rgb``, its
        sprites), whatever observation the env hands the policy; compiled once."""
        import navix  # the optional suite, imported only when a task names it

        rgb = jax.jit(navix.observations.rgb)
        return each(lambda timestep: rgb(timestep.state))


def make(name: str, kwargs: dict[str, Any]) -> tuple[NavixEnv, SuiteParams]:
    """``navix:NAME``: ``navix.make(NAME, **env_kwargs)`` (e.g. ``max_steps``), adapted."""
    import navix  # the optional suite, imported only when a task names it

    if name not in navix.registry():
        raise ConfigError(f"navix has no env {name!r}; its envs: {', '.join(navix.registry())}")
    try:
        made = navix.make(name, **kwargs)
    except TypeError as error:  # an env_kwargs key the env's constructor does not take
        raise ConfigError(
            f"navix:{name}: cannot make it with env_kwargs {kwargs}: {error}"
        ) from None
    env = NavixEnv(made)
    return env, env.default_params
