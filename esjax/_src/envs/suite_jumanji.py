"""Jumanji (``jumanji:NAME``) with esjax's env protocol.

jumanji steps a state and reports a ``TimeStep``: ``state, timestep = env.reset(key)`` and
``state, timestep = env.step(state, action)``. The adapter carries jumanji's state; an
episode's end is ``timestep.last()``, a discount of 0 marking termination and any other a
truncation, as each env reports it (Snake ends with discount 0 at its ``time_limit`` too, so
there it is termination; Level-Based Foraging truncates). jumanji's state
carries its own key, set at reset, so esjax's step key is not used. The observation (a
NamedTuple of arrays: Snake's grid, step count and action mask) becomes one float32 vector.
jumanji envs have no params; :class:`~esjax._src.envs.suite_base.SuiteParams` carries the env's
``time_limit`` as esjax's default episode length. Only a single discrete action
(``DiscreteArray``) is adapted.

``esjax render`` draws a state with the env's own ``render(state)``: its matplotlib viewer
draws into a pyplot figure and, in its default mode, returns nothing (``Snake.render`` returns
nothing in any mode), so the adapter reads that figure's pixels, as the viewers' own
``rgb_array`` mode does. Use a non-interactive matplotlib backend (``esjax render`` picks
Agg), or the viewer opens a window.
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
    SuiteParams,
    each,
    policy_observation,
    timestep_outcome,
)
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError

SUITE = Suite(
    name="jumanji",
    package="jumanji",
    requirement="jumanji>=1.1",
    example="jumanji:Snake-v1",
    description="InstaDeep's Jumanji: puzzles, routing and packing in JAX (discrete actions)",
)

# Episode length for a jumanji env without a ``time_limit`` attribute, unless the task sets one.
FALLBACK_EPISODE_LENGTH = 1000


class JumanjiEnv:
    """A jumanji env with a single discrete action, stepped from its own state."""

    def __init__(self, env: Any, num_actions: int):
        self.env = env
        self._num_actions = num_actions
        limit = getattr(env, "time_limit", FALLBACK_EPISODE_LENGTH)
        self.default_params = SuiteParams(max_steps_in_episode=int(limit))
        obs = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                             jax.random.key(0))  # fmt: skip
        self._obs_shape = tuple(obs.shape)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        state, timestep = self.env.reset(key)
        return policy_observation(timestep.observation), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple:
        state, timestep = self.env.step(state, action)
        reward, terminated, truncated = timestep_outcome(timestep)
        return policy_observation(timestep.observation), state, reward, terminated, truncated, {}

    def action_space(self, params: Any) -> DiscreteSpace:
        return DiscreteSpace(self._num_actions)

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)

    def renderer(self, params: Any) -> Renderer:
        """The env's own ``render(state)``, read back from the figure its viewer drew (pyplot's
        current figure after the call), RGB without the alpha channel."""
        import matplotlib.pyplot as plt  # a dependency of jumanji's viewers

        def draw(state: Any) -> np.ndarray:
            self.env.render(state)
            figure = plt.gcf()
            figure.canvas.draw()
            canvas: Any = figure.canvas  # an Agg canvas, the one that keeps its pixels
            return np.asarray(canvas.buffer_rgba())[..., :3].copy()

        return each(draw)


def make(name: str, kwargs: dict[str, Any]) -> tuple[JumanjiEnv, SuiteParams]:
    """``jumanji:NAME``: ``jumanji.make(NAME, **env_kwargs)`` (the env class's own arguments,
    e.g. Snake's ``num_rows``, ``time_limit``), adapted."""
    import jumanji  # the optional suite, imported only when a task names it
    from jumanji import specs

    known = sorted(jumanji.registered_environments())
    if name not in known:
        raise ConfigError(f"jumanji has no env {name!r}; its envs: {', '.join(known)}")
    try:
        env = jumanji.make(name, **kwargs)
    except TypeError as error:
        message = f"jumanji:{name}: cannot make it with env_kwargs {kwargs}: {error}"
        raise ConfigError(message) from None
    spec = env.action_spec
    if not isinstance(spec, specs.DiscreteArray):
        raise ConfigError(
            f"jumanji:{name}: its actions are a {type(spec).__name__}; esjax adapts jumanji "
            "envs with one discrete action (DiscreteArray) only"
        )
    adapted = JumanjiEnv(env, int(spec.num_values))
    return adapted, adapted.default_params
