"""Adapters that give other JAX env suites esjax's env protocol, named ``SUITE:NAME``.

Each suite is an optional extra (``pip install "esjax[navix]"``); its package is imported only
when a task names it, so a missing suite costs nothing until then and is one line naming the
extra. An adapter does the conversions once, at the env's edge: a suite's own step API becomes
the six-value gymnax step of :mod:`esjax.envs`, its observations become one float32 array (an
array keeps its shape, a pytree's leaves are joined into a vector:
:func:`~esjax.suite_base.policy_observation`), and its own termination and truncation are
reported apart, so an episode ends on either (and on esjax's ``episode_length``) and every
later step is masked.

This module holds the registry and the navix adapter; the other adapters are modules of their
own (``esjax.suite_xminigrid``, ``esjax.suite_jumanji``, ``esjax.suite_craftax``), each
importing its suite inside its factory, and what they share is in :mod:`esjax.suite_base`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from esjax.config import ConfigError
from esjax.suite_base import (
    BoxSpace,
    DiscreteSpace,
    Renderer,
    SuiteParams,
    each,
    policy_observation,
)
from esjax.suite_brax import make_brax
from esjax.suite_craftax import make_craftax
from esjax.suite_jumanji import make_jumanji
from esjax.suite_playground import make_playground
from esjax.suite_xminigrid import make_xminigrid


# ---------------------------------------------------------------------------- navix
class NavixEnv:
    """A navix env with esjax's protocol.

    navix steps a ``Timestep`` (``step(timestep, action)``) whose ``step_type`` says
    transition, truncation (its ``max_steps``) or termination; the state esjax carries is
    that timestep. navix draws its randomness from a key inside the state, set at reset, so
    the step key is not used. navix resets inside ``step`` only when handed a finished
    timestep, which esjax never keeps stepping, so the state an episode ends in is navix's own.
    """

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


def make_navix(name: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
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


# ---------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Suite:
    """An adapted suite: the package it needs, the extra that installs it, its adapter."""

    name: str
    package: str
    extra: str
    example: str
    description: str
    adapter: Callable[[str, dict[str, Any]], tuple[Any, Any]]


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in [
        Suite("navix", "navix", "navix", "navix:Navix-Empty-5x5-v0",
              "MiniGrid worlds in JAX (discrete actions)", make_navix),
        Suite("xminigrid", "xminigrid", "xminigrid", "xminigrid:MiniGrid-Empty-8x8",
              "XLand-MiniGrid: MiniGrid and XLand worlds in JAX (discrete actions)",
              make_xminigrid),
        Suite("jumanji", "jumanji", "jumanji", "jumanji:Snake-v1",
              "InstaDeep's Jumanji: puzzles, routing and packing in JAX (discrete actions)",
              make_jumanji),
        Suite("craftax", "craftax", "craftax", "craftax:Craftax-Classic-Symbolic-v1",
              "Craftax: an open-ended Minecraft-like survival game in JAX (discrete actions)",
              make_craftax),
        Suite("playground", "mujoco_playground", "playground", "playground:CartpoleBalance",
              "MuJoCo Playground: DM Control, locomotion (continuous actions)", make_playground),
        Suite("brax", "brax", "brax", "brax:hopper",
              "Brax locomotion: hopper, ant, halfcheetah, ... (continuous actions)", make_brax),
    ]
}  # fmt: skip


def is_installed(suite: Suite) -> bool:
    """Whether the suite's package can be imported (found without importing it)."""
    return importlib.util.find_spec(suite.package) is not None


def make_suite_env(suite_name: str, env_name: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(env, default_params)`` for ``SUITE:NAME``, or one line on what to install."""
    suite = SUITES[suite_name]
    if not is_installed(suite):
        raise ConfigError(
            f"{suite_name}:{env_name}: the {suite_name} suite is not installed; "
            f'pip install "esjax[{suite.extra}]"'
        )
    return suite.adapter(env_name, kwargs)


def suite_rows() -> list[tuple[str, str, str, bool, str]]:
    """``(name, extra, example env, installed?, description)`` of each suite (``esjax list``)."""
    return [(s.name, s.extra, s.example, is_installed(s), s.description) for s in SUITES.values()]
