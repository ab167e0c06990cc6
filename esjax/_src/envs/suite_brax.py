"""Brax's envs (``brax:hopper``) with esjax's env protocol.

Brax steps a ``State`` (``env.step(state, action)``) with the pipeline state, observation,
reward and a float ``done``. The adapter uses the env alone, without Brax's training wrappers
(episode limit, auto-reset, vmapping): esjax truncates at the task's ``episode_length`` and
masks every step after the end, which also keeps the NaN rewards the ``generalized`` backend
can return after an episode has ended out of every return.

**Options.** A task's ``[env_kwargs]`` go to the env's constructor: ``backend``
(``generalized``, Brax's default; ``spring``, ``positional`` or ``mjx``), the pipeline's
``n_frames``, and the env's own options (hopper's ``terminate_when_unhealthy``, ...). An
unknown name or backend is one line listing the valid ones.

**Episodes.** ``done`` is Brax's termination (hopper falling, say); an episode is at most
1,000 steps by default, the length Brax's own trainers use.

**Drawing.** ``esjax render`` draws a state's pipeline state with Brax's own ``env.render``
(MuJoCo's renderer), which needs an OpenGL context: see
:func:`~esjax._src.envs.suite_base.check_mujoco_gl`.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from esjax._src.envs.suite_base import StateEnv, SuiteParams, import_mujoco_suite
from esjax._src.envs.suites import Suite
from esjax._src.specs.config import ConfigError, suggest

SUITE = Suite(
    name="brax",
    package="brax",
    requirement="brax>=0.14",
    example="brax:hopper",
    description="Brax locomotion: hopper, ant, halfcheetah, ... (continuous actions)",
)

BACKENDS = ("generalized", "spring", "positional", "mjx")
# Brax's trainers' default episode length; Brax's envs have no limit of their own.
EPISODE_LENGTH = 1000
# Brax warns on every env it builds that its pipelines are no longer maintained; a user who
# named a Brax env chose it, and the warning would sit in the middle of esjax's output.
UNMAINTAINED_WARNING = "Brax System, piplines and environments are not actively"


def make(name: str, kwargs: dict[str, Any]) -> tuple[StateEnv, SuiteParams]:
    """``brax:NAME``: ``brax.envs.get_environment(NAME, **env_kwargs)``, adapted."""
    # The optional suite, imported only when a task names it.
    envs = import_mujoco_suite("brax.envs", f"brax:{name}")

    registered = sorted(envs._envs)  # Brax's registry has no public listing
    if name not in registered:
        raise ConfigError(
            f"brax has no env {name!r}{suggest(name, registered)}; "
            f"its envs: {', '.join(registered)}"
        )
    valid = constructor_options(envs._envs[name])
    for key in kwargs:
        if key not in valid:
            raise ConfigError(
                f"brax:{name}: unknown env_kwargs key {key!r}{suggest(key, valid)}; "
                f"valid: {', '.join(valid)}"
            )
    backend = kwargs.get("backend", "generalized")
    if backend not in BACKENDS:
        raise ConfigError(
            f"brax:{name}: unknown backend {backend!r}{suggest(str(backend), BACKENDS)}; "
            f"valid: {', '.join(BACKENDS)}"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNMAINTAINED_WARNING, category=UserWarning)
        env = StateEnv(envs.get_environment(name, **kwargs), EPISODE_LENGTH, f"brax:{name}",
                       render_state=lambda state: state.pipeline_state)  # fmt: skip
    return env, env.default_params


def constructor_options(env_class: type) -> list[str]:
    """The keyword arguments an env class takes: its own, then its pipeline's (``n_frames``)."""
    names: list[str] = []
    for cls in (env_class, *env_class.__mro__[1:]):
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind is parameter.VAR_KEYWORD:
                break
            if parameter.name not in ("self", "sys") and parameter.name not in names:
                names.append(parameter.name)
        else:  # no **kwargs: the chain of constructors ends here
            break
    return names
