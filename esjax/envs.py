"""Env creation and the env half of an episode step: the one place that knows gymnax's API.

Everything else in esjax sees an env through :func:`make_env` (an env object and its default
params) and :func:`env_step` (one step that reports ``done`` as termination or truncation).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import jax
import jax.numpy as jnp

from esjax.config import ConfigError, suggest


class _DeferredModule(types.ModuleType):
    """A stand-in that imports the real module on its first attribute access."""

    def __getattr__(self, name: str) -> Any:
        # Importers that bound the stand-in keep it, so every access after the first finds the
        # real module already in ``sys.modules`` and must not import (or drop) it again.
        real = sys.modules.get(self.__name__)
        if real is None or real is self:
            sys.modules.pop(self.__name__, None)
            real = importlib.import_module(self.__name__)
        return getattr(real, name)


# Modules gymnax's env files import for drawing only: seaborn (with scipy.stats and pandas) in
# Pong, matplotlib.pyplot (with its backends and figure machinery) in Catch, Rooms, Pong, ...
DRAWING_ONLY_MODULES = ("seaborn", "matplotlib.pyplot")


def import_gymnax() -> Any:
    """gymnax, with the modules its envs use only for drawing imported when something reads them.

    Importing gymnax imports every env module, and several import seaborn or pyplot at the top:
    over a second of every command's start-up here, for libraries no rollout calls. A stand-in
    takes each one's place in ``sys.modules`` while gymnax loads and brings in the real module
    the first time anything reads from it.
    """
    if "gymnax" not in sys.modules:
        for name in DRAWING_ONLY_MODULES:
            _defer(name)
    import gymnax

    return gymnax


def _defer(name: str) -> None:
    """Put a :class:`_DeferredModule` for ``name`` in ``sys.modules`` unless it is loaded."""
    if name in sys.modules:
        return
    parent_name, _, child = name.rpartition(".")
    try:
        spec = importlib.util.find_spec(name)  # imports the parent package, if any
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    stand_in = _DeferredModule(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in
    if parent_name:  # ``import matplotlib.pyplot`` then ``matplotlib.pyplot.X`` must work too
        setattr(sys.modules[parent_name], child, stand_in)


def make_env(env: str | Any, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """An env object and its default params from a gymnax id, or an env object as given."""
    if isinstance(env, str):
        gymnax = import_gymnax()

        if env not in gymnax.registered_envs:
            raise ConfigError(
                f"gymnax does not know env id {env!r}{suggest(env, gymnax.registered_envs)}"
            )
        return gymnax.make(env, **(env_kwargs or {}))
    return env, env.default_params


def steps_through_step_env(env: Any) -> bool:
    """True when a step of ``env`` is ``step_env`` with the first half of its key, plus a reset.

    gymnax's ``step`` computes a full reset at every step for auto-reset, and hands back the
    next episode's start in place of the state an episode ended in; an episode that stops at
    its first termination needs neither. gymnax's own envs that replace ``step`` (bsuite's
    DeepSea keeps its cumulative counters across the reset) still step this way and differ
    only in what they reset. Wrappers and foreign envs go through their own ``step``.
    """
    import_gymnax()
    from gymnax.environments.environment import Environment

    if not isinstance(env, Environment):
        return False
    return type(env).step is Environment.step or type(env).__module__.startswith(
        "gymnax.environments."
    )


def env_step(
    env: Any, key: jax.Array, state: Any, action: jax.Array, params: Any
) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
    """``(obs, state, reward, done)`` of one step; ``done`` is termination or truncation.

    gymnax 1.0's ``step`` returns six values and auto-resets. For gymnax's own envs the step
    goes to ``step_env`` with the key gymnax's ``step`` would hand it, so a stochastic env sees
    the same noise as in a plain loop over ``env.step``, without the reset it would discard.
    """
    if steps_through_step_env(env):
        key_step, _ = jax.random.split(key)
        obs, state, reward, terminated, _ = env.step_env(key_step, state, action, params)
        truncated = env.is_truncated(state, params)
    else:
        obs, state, reward, terminated, truncated, _ = env.step(key, state, action, params)
    return obs, state, reward, jnp.logical_or(terminated, truncated)
