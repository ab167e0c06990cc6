"""What every suite adapter shares: the spaces it reports, its params, what its policy sees.

A module of its own, below the ``esjax.suite_*`` adapters, which the registry
(:mod:`esjax._src.envs.suites`) lists; what an adapter module must provide is
:class:`esjax._src.envs.core.SuiteAdapter`, and the env it makes is an
:class:`esjax._src.envs.core.Env`.

**Drawing.** An adapter whose suite can draw a state has ``renderer(params)``: it returns a
:data:`Renderer`, from a sequence of the adapter's states (the suite's own) to one ``(H, W, 3)``
uint8 picture each, made by the suite's own renderer, and raises a one-line
:class:`~esjax._src.specs.config.ConfigError` when the suite cannot draw here. It is set up once (a
compile, an OpenGL check) and handed a whole episode, so a suite that draws a list in one call
(MuJoCo's renderer, one OpenGL context for all) does. ``esjax render`` uses it
(:mod:`esjax._src.analysis.render`); gymnax's envs have none and keep esjax's own scenes.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib
import io
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from esjax._src.specs.config import ConfigError

# States of an episode -> one (H, W, 3) uint8 picture each, by the suite's own renderer.
Renderer = Callable[[Sequence[Any]], list[np.ndarray]]


def each(draw: Callable[[Any], np.ndarray]) -> Renderer:
    """A :data:`Renderer` that draws the states one by one with ``draw``."""
    return lambda states: [np.asarray(draw(state), np.uint8) for state in states]


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


# The entry of a dict observation that is the policy's (Brax training's ``policy_obs_key``):
# MuJoCo Playground's locomotion envs put the critic's noise-free extras beside it.
POLICY_OBS_KEY = "state"


def policy_observation(obs: Any) -> jax.Array:
    """What the policy sees of a suite's observation, as one float32 array.

    A dict with a ``"state"`` entry gives that entry alone (its ``privileged_state`` is for a
    critic, as Brax's and Playground's own trainers use it). One array keeps its shape, so an
    image stays an image for a CNN (the rollout flattens it for an MLP). Any other pytree has
    its leaves raveled and joined into one vector, in ``jax.tree.leaves`` order.
    """
    if isinstance(obs, Mapping) and POLICY_OBS_KEY in obs:
        obs = obs[POLICY_OBS_KEY]
    leaves = jax.tree.leaves(obs)
    if len(leaves) == 1:
        return jnp.asarray(leaves[0], jnp.float32)
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

    def __init__(
        self,
        env: Any,
        episode_length: int,
        name: str = "",
        render_state: Callable[[Any], Any] | None = None,
    ):
        self.env = env
        self.name = name
        # What the suite's ``env.render`` takes for one of esjax's states (Brax: its pipeline
        # state; Playground: the state itself).
        self._render_state = render_state or (lambda state: state)
        self.default_params = SuiteParams(max_steps_in_episode=int(episode_length))
        # Traced, not run: an eager reset of a MuJoCo model takes seconds of dispatch.
        obs = jax.eval_shape(lambda key: self.reset(key, self.default_params)[0],
                             jax.random.key(0))  # fmt: skip
        self._obs_shape = tuple(obs.shape)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        state = self.env.reset(key)
        return policy_observation(state.obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple:
        state = self.env.step(state, action)
        return (policy_observation(state.obs), state, jnp.asarray(state.reward, jnp.float32),
                state.done > 0, jnp.asarray(False), {})  # fmt: skip

    def action_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-1.0, 1.0, (int(self.env.action_size),))

    def observation_space(self, params: Any) -> BoxSpace:
        return BoxSpace(-jnp.inf, jnp.inf, self._obs_shape)

    def renderer(self, params: Any) -> Renderer:
        """The suite's own ``env.render`` (MuJoCo's renderer, its default camera and size), once
        an OpenGL context is known to work here, so a machine without one is told so before an
        episode is played. An episode is one call: one renderer and context for all its
        states, several times faster than a call a state."""
        check_mujoco_gl(self.name)

        def draw(states: Sequence[Any]) -> list[np.ndarray]:
            # Playground draws a list under a tqdm progress bar on stderr; esjax says its own.
            with contextlib.redirect_stderr(io.StringIO()):
                pictures = self.env.render([self._render_state(state) for state in states])
            return [np.asarray(picture, np.uint8) for picture in pictures]

        return draw


# ---------------------------------------------------------------------------- MuJoCo's OpenGL
def default_mujoco_gl() -> None:
    """Point MuJoCo at EGL (``MUJOCO_GL=egl``) where its default cannot draw: Linux without a
    display, ``libEGL`` installed, ``MUJOCO_GL`` unset and MuJoCo not imported yet.

    MuJoCo picks its OpenGL platform once, when imported, from ``MUJOCO_GL``; its default,
    glfw, needs a display. Called by ``esjax render`` before anything imports a suite.
    """
    if (
        sys.platform.startswith("linux")
        and "MUJOCO_GL" not in os.environ
        and not os.environ.get("DISPLAY")
        and not os.environ.get("WAYLAND_DISPLAY")
        and "mujoco" not in sys.modules
        and ctypes.util.find_library("EGL") is not None
    ):
        os.environ["MUJOCO_GL"] = "egl"


def import_mujoco_suite(module: str, where: str) -> Any:
    """``importlib.import_module(module)`` for a suite built on MuJoCo; MuJoCo failing to load
    the OpenGL platform ``MUJOCO_GL`` names (``osmesa`` without libOSMesa, say) is one line.

    MuJoCo loads that platform as it is imported, and a missing library fails there, deep in
    PyOpenGL, for every command that names the suite.
    """
    try:
        return importlib.import_module(module)
    except Exception as error:
        files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
        platform = os.environ.get("MUJOCO_GL")
        if not platform or not any(f"{os.sep}OpenGL{os.sep}" in name for name in files):
            raise
        raise ConfigError(
            f"{where}: MuJoCo cannot load the OpenGL platform MUJOCO_GL={platform} "
            f"({type(error).__name__}: {first_line(error)}); install its library, or unset "
            "MUJOCO_GL or set it to another platform (egl, osmesa, glfw)"
        ) from None


def check_mujoco_gl(where: str) -> None:
    """Nothing if MuJoCo's renderer can make an OpenGL context here; else one line on why.

    Without one, the suites' ``render`` fails deep in OpenGL (glfw's warnings on stderr, then
    a ``FatalError``); a renderer for an empty model tries the same context up front.
    """
    import mujoco  # imported by the suite that named this env already

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 8, 8).close()
            return
        except Exception as error:  # whatever the platform raises: it cannot draw here
            reason = first_line(caught[0].message if caught else error)
    platform = os.environ.get("MUJOCO_GL") or "unset, so glfw"
    raise ConfigError(
        f"render: {where} draws with MuJoCo's renderer, which found no OpenGL context "
        f"(MUJOCO_GL={platform}: {reason}); set MUJOCO_GL=egl (needs libEGL) or "
        "MUJOCO_GL=osmesa (needs libOSMesa), or run with a display"
    )


def first_line(message: Any) -> str:
    """A message's first non-empty line, for errors that must fit on one."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else type(message).__name__
