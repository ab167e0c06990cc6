"""MuJoCo Playground's envs (``playground:CartpoleBalance``) with esjax's env protocol.

Playground steps a ``State`` (``env.step(state, action)``) that carries the simulator's data,
the observation, the reward and a float ``done``. The adapter reads them as they are and
adds nothing on top: none of Playground's training wrappers (episode limit, auto-reset,
vmapping) is used, because esjax truncates an episode at the task's ``episode_length`` and
masks every step after the end itself. Where the observation is a dict (the locomotion envs),
the policy sees its ``"state"`` entry, as with Playground's own trainers; ``privileged_state``
is for a critic.

**Options.** A task's ``[env_kwargs]`` overrides the env's own config (Playground's
``config_overrides``): ``impl``, ``ctrl_dt``, ``episode_length``, ... by name, a nested value
by a dotted name or a nested table (``vision_config.nworld``). An unknown name is one line
listing the valid ones. ``impl`` defaults to ``"jax"`` here, not Playground's ``"warp"``: on a
CPU the JAX implementation is the faster one, and it needs no warp kernels compiled.

**Episodes.** DM Control tasks never end early; ``done`` turns on only when the simulation
goes NaN, which esjax reads as termination. The config's ``episode_length`` (1,000 for DM
Control) is the default length of an esjax episode, as it is Playground's own.

**Drawing.** ``esjax render`` draws a state with Playground's own ``env.render`` (MuJoCo's
renderer), which needs an OpenGL context: see :func:`~esjax._src.envs.suite_base.check_mujoco_gl`.
"""

from __future__ import annotations

from typing import Any

from esjax._src.envs.suite_base import StateEnv, SuiteParams, import_mujoco_suite
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError, suggest

SUITE = Suite(
    name="playground",
    package="mujoco_playground",
    requirement="playground>=0.2",
    example="playground:CartpoleBalance",
    description="MuJoCo Playground: DM Control, locomotion (continuous actions)",
)

# Playground's own default is "warp", slower than the JAX implementation on a CPU.
DEFAULT_IMPL = "jax"


def make(name: str, kwargs: dict[str, Any]) -> tuple[StateEnv, SuiteParams]:
    """``playground:NAME``: ``registry.load(NAME, config_overrides=env_kwargs)``, adapted."""
    # The optional suite, imported only when a task names it.
    registry = import_mujoco_suite("mujoco_playground", f"playground:{name}").registry

    if name not in registry.ALL_ENVS:
        raise ConfigError(
            f"playground has no env {name!r}{suggest(name, list(registry.ALL_ENVS))}; "
            f"its envs: {', '.join(registry.ALL_ENVS)}"
        )
    config = registry.get_default_config(name)
    overrides = config_overrides(name, flat_config(config), kwargs)
    try:
        env = registry.load(name, config_overrides=overrides)
    except (TypeError, ValueError) as error:  # a value of the wrong type, an unknown impl
        raise ConfigError(f"playground:{name}: env_kwargs {kwargs}: {error}") from None
    length = overrides.get("episode_length", config.episode_length)
    adapted = StateEnv(env, episode_length=length, name=f"playground:{name}")
    return adapted, adapted.default_params


def config_overrides(name: str, defaults: dict[str, Any], kwargs: dict[str, Any]) -> dict:
    """``env_kwargs`` as Playground's flat, dotted ``config_overrides``, each name checked."""
    overrides = {"impl": DEFAULT_IMPL} if "impl" in defaults else {}
    for key, value in _flatten(kwargs).items():
        if key not in defaults:
            raise ConfigError(
                f"playground:{name}: unknown env_kwargs key {key!r}{suggest(key, list(defaults))}; "
                f"valid: {', '.join(defaults)}"
            )
        overrides[key] = value
    return overrides


def flat_config(config: Any) -> dict[str, Any]:
    """A Playground ``ConfigDict`` as ``{dotted name: value}``."""
    return _flatten(config.to_dict())


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
