"""Craftax (``craftax:NAME``) with esjax's env protocol.

Craftax's envs are gymnax-0.x style: ``reset(key, params)`` and a five-value
``step(key, state, action, params) -> (obs, state, reward, done, info)``, ``done`` joining the
player's death (or lava) and the time limit (``max_timesteps``). The adapter tells them apart
for esjax's six-value step: an episode that ends on the step that reaches the time limit is a
truncation, any other end a termination (a death on that very step counts as truncation;
either way the episode ends there).

Craftax's own auto-reset rebuilds a world at every step (a world is generated per reset, and
the auto-reset computes one each step to select from), which made it about 150 times slower
here; esjax masks the steps after an episode's end instead, so the adapter makes the env with
``auto_reset=False`` unless ``env_kwargs.auto_reset`` is true. The step key is handed to
Craftax, which draws its mobs and world changes from it. Craftax's params sit inside
:class:`~esjax._src.envs.suite_base.WrappedParams`; the other ``env_kwargs`` replace their fields
(``max_timesteps``, ``day_length``, ...). Symbolic observations are float32 vectors already;
pixel ones stay images (an MLP sees them flattened). ``esjax render`` draws a state with
Craftax's own pixel renderer (``render_craftax_pixels``, Classic's or full Craftax's), at its
image block size.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.envs.suite_base import (
    BoxSpace,
    DiscreteSpace,
    Renderer,
    WrappedParams,
    each,
    policy_observation,
    replace_fields,
)
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError

SUITE = Suite(
    name="craftax",
    package="craftax",
    requirement="craftax>=1.6",
    example="craftax:Craftax-Classic-Symbolic-v1",
    description="Craftax: an open-ended Minecraft-like survival game in JAX (discrete actions)",
)

NAMES = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
)


class CraftaxEnv:
    """A Craftax env whose five-value step reports termination and truncation apart."""

    def __init__(self, env: Any, suite_params: Any, classic: bool = True):
        self.env = env
        self.classic = classic  # Craftax-Classic, whose renderer is a module of its own
        self.default_params = WrappedParams(suite_params, int(suite_params.max_timesteps))
        self._num_actions = int(env.action_space(suite_params).n)
        obs = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                             jax.random.key(0))  # fmt: skip
        self._obs_shape = tuple(obs.shape)

    def reset(self, key: jax.Array, params: WrappedParams) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset(key, params.suite)
        return policy_observation(obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: WrappedParams) -> tuple:
        # From the state stepped from: with auto-reset on, the state returned is the next
        # episode's start and no longer shows that the time limit was reached.
        at_the_limit = state.timestep + 1 >= params.suite.max_timesteps
        obs, state, reward, done, _ = self.env.step(key, state, action, params.suite)
        truncated = jnp.logical_and(done, at_the_limit)
        terminated = jnp.logical_and(done, jnp.logical_not(at_the_limit))
        reward = jnp.asarray(reward, jnp.float32)
        return policy_observation(obs), state, reward, terminated, truncated, {}

    def action_space(self, params: Any) -> DiscreteSpace:
        return DiscreteSpace(self._num_actions)

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)

    def renderer(self, params: WrappedParams) -> Renderer:
        """Craftax's own ``render_craftax_pixels`` of a state (the player's view and inventory)
        at ``BLOCK_PIXEL_SIZE_IMG``, compiled once; it draws 0-255 floats."""
        if self.classic:
            from craftax.craftax_classic import constants, renderer
        else:
            from craftax.craftax import constants, renderer

        pixels = jax.jit(renderer.make_craftax_pixel_renderer(constants.BLOCK_PIXEL_SIZE_IMG))
        return each(lambda state: np.clip(np.rint(np.asarray(pixels(state))), 0, 255))


def make(name: str, kwargs: dict[str, Any]) -> tuple[CraftaxEnv, WrappedParams]:
    """``craftax:NAME``: Craftax's env by name, without its auto-reset unless
    ``env_kwargs.auto_reset`` is true; the other ``env_kwargs`` replace fields of its params."""
    from craftax.craftax_env import make_craftax_env_from_name  # the optional suite

    if name not in NAMES:
        raise ConfigError(f"craftax has no env {name!r}; its envs: {', '.join(NAMES)}")
    changes = dict(kwargs)
    auto_reset = changes.pop("auto_reset", False)
    if not isinstance(auto_reset, bool):
        raise ConfigError(f"craftax:{name}: env_kwargs.auto_reset must be true or false")
    env = make_craftax_env_from_name(name, auto_reset=auto_reset)
    suite_params = replace_fields(env.default_params, changes, f"craftax:{name}")
    adapted = CraftaxEnv(env, suite_params, classic=name.startswith("Craftax-Classic"))
    return adapted, adapted.default_params
