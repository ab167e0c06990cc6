"""XLand-MiniGrid (``xminigrid:NAME``) with esjax's env protocol.

xminigrid's API is params first and steps a ``TimeStep``: ``env.reset(env_params, key)`` and
``env.step(env_params, timestep, action)``. The adapter carries that timestep as its state and
xminigrid's params inside :class:`~esjax._src.envs.suite_base.WrappedParams`. An episode's end is
xminigrid's ``step_type`` LAST; a discount of 0 marks termination (the goal reached), any
other a truncation (``max_steps``). xminigrid draws its randomness from a key inside the
state, at reset, so the step key is not used. Its observation (a ``uint8`` grid of the
agent's view) becomes a float32 grid of the same shape (an MLP sees it flattened, a CNN as an
image). ``esjax render`` draws a timestep with xminigrid's
own ``env.render`` (its RGB mode, whatever ``render_mode`` the task sets).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from esjax._src.envs.suite_base import (
    BoxSpace,
    DiscreteSpace,
    Renderer,
    WrappedParams,
    each,
    policy_observation,
    replace_fields,
    timestep_outcome,
)
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError

SUITE = Suite(
    name="xminigrid",
    package="xminigrid",
    requirement="xminigrid>=0.9",
    example="xminigrid:MiniGrid-Empty-8x8",
    description="XLand-MiniGrid: MiniGrid and XLand worlds in JAX (discrete actions)",
)


class XMiniGridEnv:
    """An xminigrid env whose params are handed to it from :class:`WrappedParams`."""

    def __init__(self, env: Any, suite_params: Any):
        self.env = env
        self.default_params = WrappedParams(suite_params, int(suite_params.max_steps))
        self._num_actions = int(env.num_actions(suite_params))
        obs = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                             jax.random.key(0))  # fmt: skip
        self._obs_shape = tuple(obs.shape)

    def reset(self, key: jax.Array, params: WrappedParams) -> tuple[jax.Array, Any]:
        timestep = self.env.reset(params.suite, key)
        return policy_observation(timestep.observation), timestep

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: WrappedParams) -> tuple:
        timestep = self.env.step(params.suite, state, action)
        reward, terminated, truncated = timestep_outcome(timestep)
        return policy_observation(timestep.observation), timestep, reward, terminated, truncated, {}

    def action_space(self, params: Any) -> DiscreteSpace:
        return DiscreteSpace(self._num_actions)

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)

    def renderer(self, params: WrappedParams) -> Renderer:
        """xminigrid's own ``env.render`` of a timestep, in its RGB mode (a task may have set
        ``render_mode`` to its text mode, which returns a string)."""
        suite = params.suite.replace(render_mode="rgb_array")
        return each(lambda timestep: self.env.render(suite, timestep))


def make(name: str, kwargs: dict[str, Any]) -> tuple[XMiniGridEnv, WrappedParams]:
    """``xminigrid:NAME``: ``xminigrid.make(NAME)``, its params' fields (``max_steps``,
    ``view_size``, ...) replaced by ``env_kwargs``, adapted."""
    import xminigrid  # the optional suite, imported only when a task names it

    known = xminigrid.registered_environments()
    if name not in known:
        raise ConfigError(f"xminigrid has no env {name!r}; its envs: {', '.join(known)}")
    env, suite_params = xminigrid.make(name)
    suite_params = replace_fields(suite_params, kwargs, f"xminigrid:{name}")
    adapted = XMiniGridEnv(env, suite_params)
    return adapted, adapted.default_params
