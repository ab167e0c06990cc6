"""Env creation and the env half of an episode step: the one place that knows env APIs.

Everything else in esjax sees an env through :func:`make_env` (an env object and its default
params) and :func:`env_step` (one step that reports ``done`` as termination or truncation).

**The environment protocol** is :class:`Env`, written as a ``typing.Protocol``: an object
shaped like a gymnax 1.0 env (``reset``, a six-value ``step``, ``action_space``,
``observation_space``), with its default params beside it. A five-value ``step`` (gymnax 0.x:
``(obs, state, reward, done, info)``) is read as termination only. gymnax's own envs are
stepped through ``step_env``, without the auto-reset their ``step`` computes and esjax would
throw away. :func:`check_env` holds a user's or a suite's env to it at the door.

Observations may have any shape; the rollout flattens them to one float32 vector. An episode
ends at the env's own termination, or at its truncation, or after the task's
``episode_length`` steps, whichever comes first; esjax masks every step after the end, so
whatever the env returns there (an auto-reset, NaN rewards) never counts. A task without
``episode_length`` takes the params' ``max_steps_in_episode`` (params without one need it).

**Env names.** A task's ``env`` is one of

- a gymnax id (``"CartPole-v1"``);
- ``"package.module:factory"`` or ``"path/to/file.py:factory"``: a user's env, without
  installing or registering anything. ``factory(**env_kwargs)`` returns an env object or
  ``(env, default_params)``. How the code is found and run (inside a run: from the file the
  run recorded) is :mod:`esjax._src.envs.usercode`'s; a relative file path is read beside the task
  file, else from the working directory;
- ``"SUITE:NAME"`` for a suite registered in :mod:`esjax._src.envs.suites`
  (``"navix:Navix-Empty-5x5-v0"``), imported only when named; its adapter module is a
  :class:`SuiteAdapter`. A registered suite's name before the colon always means the suite,
  even where a package of that name exists: a factory of such a package is named through one
  of its modules (``"navix.MODULE:make"``) or its file. When the suite has no env ``NAME``
  and the package has a factory ``NAME``, the ambiguity is refused in one line saying so.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from esjax._src.envs import suites
from esjax._src.envs.suite_base import Renderer
from esjax._src.envs.suites import Suite
from esjax._src.envs.usercode import first_line, load_factory
from esjax._src.specs import live
from esjax._src.specs.config import ConfigError, suggest


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


# ---------------------------------------------------------------------------- the protocol
# Whatever pytree an env carries between steps, and whatever pytree its params are: esjax only
# hands them back to the env (and vmaps over them), so it asks nothing of their shape.
EnvState = Any
EnvParams = Any
# (obs, state, reward, terminated, truncated, info): gymnax 1.0's step.
StepResult = tuple[jax.Array, EnvState, jax.Array, jax.Array, jax.Array, dict[str, Any]]


class Space(Protocol):
    """An observation space: esjax reads its ``shape`` (any; the rollout flattens it)."""

    shape: tuple[int, ...]


class DiscreteActions(Protocol):
    """``n`` actions, numbered from 0 (gymnax's ``Discrete``); the policy picks one."""

    n: int


class BoxActions(Protocol):
    """Continuous actions of ``shape`` between ``low`` and ``high`` (gymnax's ``Box``)."""

    low: float | jax.Array
    high: float | jax.Array
    shape: tuple[int, ...]


class Env(Protocol):
    """What esjax steps: an env shaped like gymnax 1.0's, every method pure and traceable.

    ``default_params`` is what every method takes unless a task says otherwise: a frozen
    dataclass with ``replace``, so a task's ``env_params`` can pin its fields, and with
    ``max_steps_in_episode`` unless every task sets ``episode_length``. esjax makes an env once
    and hands the object on, so the attribute is needed even where a factory returns
    ``(env, params)`` (those params are the task's defaults). Keys are ``jax.random`` keys; an
    env whose randomness lives in its state may ignore the step's.
    """

    default_params: EnvParams

    def reset(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        """An episode's first observation and state."""
        ...

    def step(
        self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams
    ) -> StepResult:
        """``(obs, state, reward, terminated, truncated, info)``: termination is the env's own
        end (a goal, a fall), truncation a time limit; esjax masks every step after either."""
        ...

    def action_space(self, params: EnvParams) -> DiscreteActions | BoxActions:
        """What the policy's output becomes: ``n`` actions, or a box of floats."""
        ...

    def observation_space(self, params: EnvParams) -> Space:
        """The observation's ``shape``, which sizes the policy."""
        ...


class DrawableEnv(Env, Protocol):
    """An env that draws its own states (a suite's), which ``esjax render`` uses instead of
    esjax's scenes; see :mod:`esjax._src.envs.suite_base` for what the renderer must do."""

    def renderer(self, params: EnvParams) -> Renderer:
        """Set up once (a compile, an OpenGL check); one line if it cannot draw here."""
        ...


class SuiteAdapter(Protocol):
    """A module that adapts a suite (``esjax._src.envs.suite_navix``), listed in
    :data:`esjax._src.envs.suites.SUITE_MODULES`.

    It imports its suite's package only inside ``make``, so that esjax, and ``esjax list``,
    load without the suite; an env it draws itself is a :class:`DrawableEnv`.
    """

    SUITE: Suite
    """Its name, the package it needs, the extra's requirement, an example env, a line on it."""

    def make(self, name: str, kwargs: dict[str, Any]) -> tuple[Env, EnvParams]:
        """The env ``NAME`` of ``SUITE:NAME`` made with a task's ``env_kwargs``, adapted to
        :class:`Env`, and its default params; a name or option the suite lacks is one
        :class:`~esjax._src.specs.config.ConfigError` line naming the valid ones."""
        ...


# What an env object must have for esjax to step it, in the protocol's order.
ENV_METHODS = tuple(name for name in vars(Env) if callable(vars(Env)[name]) and name[0] != "_")


def make_env(
    env: str | Env, env_kwargs: dict | None = None, params: EnvParams | None = None
) -> tuple[Env, EnvParams]:
    """An env object and its default params from an env name (see above), or an env object.

    ``env_kwargs`` go to gymnax's ``make``, a suite's adapter or a user's factory. An object is
    held to :class:`Env` at this door, its params being ``params`` where given (an object
    without ``default_params`` needs them); a live name (:mod:`esjax._src.specs.live`) is the
    object a trainer in this process was given.
    """
    if not isinstance(env, str):
        made = env if params is None else (env, params)
        return check_env(made, live.describe(env), subject=f"the env ({type(env).__name__})")
    if live.is_live(env):
        found = live.lookup(env)
        if found is None:
            raise ConfigError(live.missing(env, "env"))
        return found
    kwargs = dict(env_kwargs or {})
    if ":" not in env:
        return _gymnax_env(env, kwargs)
    source, _, name = env.rpartition(":")
    if source in suites.registered():
        made = _suite_env(source, name, kwargs)
    else:
        made = _call_factory(load_factory(source, name, env), kwargs, env)
    return check_env(made, env)


def gymnax_id(env: Any) -> str | None:
    """The gymnax id whose ``gymnax.make`` makes an env identical to ``env`` (its class and
    its attributes), or None: an object a run can then record by name."""
    name = getattr(type(env), "name", None)
    if not isinstance(name, property) or type(env).__module__.split(".")[0] != "gymnax":
        return None
    try:
        name = env.name
        gymnax = import_gymnax()
        if name not in gymnax.registered_envs:
            return None
        made, _ = gymnax.make(name)
        same = type(made) is type(env) and _same_values(vars(made), vars(env))
    except Exception:  # anything that stops the comparison: record the object itself
        return None
    return name if same else None


def params_overrides(params: Any, defaults: Any) -> dict[str, Any] | None:
    """The fields in which ``params`` differ from ``defaults`` as a task's ``env_params`` (a
    number or a switch each), or None where they cannot be written so (another type, an
    array field that differs)."""
    if type(params) is not type(defaults):
        return None
    changed: dict[str, Any] = {}
    for name, default in vars(defaults).items():
        value = getattr(params, name, default)
        if _same_values({"v": value}, {"v": default}):
            continue
        if jnp.ndim(value) != 0:
            return None
        if isinstance(default, bool):
            changed[name] = bool(value)
        elif isinstance(default, int):
            changed[name] = int(value)
        else:
            changed[name] = float(value)
    return changed


def _same_values(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two attribute dicts hold equal values (arrays compared whole)."""
    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        other = b[key]
        if hasattr(value, "shape") or hasattr(other, "shape"):
            if jnp.shape(value) != jnp.shape(other) or not bool(jnp.all(value == other)):
                return False
        elif value != other:
            return False
    return True


def _gymnax_env(env_id: str, kwargs: dict) -> tuple[Any, Any]:
    gymnax = import_gymnax()
    if env_id not in gymnax.registered_envs:
        raise ConfigError(
            f"gymnax does not know env id {env_id!r}{suggest(env_id, gymnax.registered_envs)}; "
            "a user's env is 'module:factory' or 'file.py:factory'"
        )
    try:
        return gymnax.make(env_id, **kwargs)
    except TypeError as error:  # an env_kwargs key the env's constructor does not take
        raise ConfigError(f"{env_id}: cannot make it with env_kwargs {kwargs}: {error}") from None


def _suite_env(suite_name: str, env_name: str, kwargs: dict[str, Any]) -> tuple[Env, EnvParams]:
    """What suite ``suite_name``'s adapter makes of ``env_name``, or one line on what to install."""
    suite = suites.registered()[suite_name]
    if not suite.installed():
        raise ConfigError(
            f"{suite_name}:{env_name}: the {suite_name} suite is not installed; "
            f"{suite.install_hint}"
        )
    adapter: SuiteAdapter = suites.adapter(suite_name)
    _check_arguments(adapter.make, "make", getattr(adapter, "__name__", suite_name), SuiteAdapter)
    try:
        return adapter.make(env_name, kwargs)
    except ConfigError as error:
        _refuse_hidden_factory(suite, env_name, error)
        raise


def _refuse_hidden_factory(suite: Suite, env_name: str, error: ConfigError) -> None:
    """One line when ``SUITE:NAME`` failed as the suite's env and the suite's package, named
    like the suite, has a factory ``NAME``: the name reads as the suite's (the rule), but the
    user evidently meant the package's. Only the package the adapter imported is looked at."""
    package = sys.modules.get(suite.package) if suite.package == suite.name else None
    factory = getattr(package, env_name, None) if env_name.isidentifier() else None
    if callable(factory):
        raise ConfigError(
            f"{suite.name}:{env_name}: {suite.name!r} before the colon is the {suite.name} "
            f"suite, which has no env {env_name!r} ({error}); the {suite.package} package's "
            f"factory {env_name!r} is named through its module ('{suite.package}.MODULE:"
            f"{env_name}') or its file ('path/to/file.py:{env_name}')"
        ) from None


def check_env(made: Any, name: str, subject: str | None = None) -> tuple[Env, EnvParams]:
    """``(env, default_params)`` from what a factory or an adapter returned, held to :class:`Env`.

    The methods are checked by name and by the arguments they take, ``default_params`` by
    name, and the spaces by the fields esjax reads, each failure one line naming the env: an
    env that does not fit otherwise fails deep in a trace. What a method returns is left to
    the first trace. ``subject`` names the env in those lines where it was handed over as an
    object rather than made by ``name``.
    """
    if isinstance(made, tuple) and len(made) == 2:
        env, params = made
    else:
        env, params = made, getattr(made, "default_params", None)
    kind = type(env).__name__
    opening = f"{subject} is not" if subject else f"{name!r} made a {kind} object, not"
    for method in ENV_METHODS:
        found = getattr(env, method, None)
        if not callable(found):
            raise ConfigError(
                f"{opening} an env esjax can step: it has no {method!r} method "
                "(the protocol is esjax.envs.Env: gymnax's reset(key, params), "
                "step(key, state, action, params), action_space and observation_space)"
            )
        _check_arguments(found, method, f"{name!r}: {kind}")
    if subject is None and not hasattr(env, "default_params"):
        raise ConfigError(
            f"{name!r} made a {kind} object without a default_params attribute, which esjax "
            "reads when it hands the env on (the protocol is esjax.envs.Env)"
        )
    if params is None:
        where = f"{subject} has" if subject else f"{name!r} made a {kind} object with"
        raise ConfigError(
            f"{where} no default_params: give it a default_params attribute, pass "
            "env_params=..., or return (env, default_params) from its factory"
        )
    _check_spaces(env, params, f"{name!r}: {kind}")
    return env, params


def _check_arguments(method: Any, name: str, where: str, protocol: type = Env) -> None:
    """One line if ``method`` cannot be called with the arguments ``protocol`` passes it."""
    wanted = list(inspect.signature(getattr(protocol, name)).parameters)[1:]  # less ``self``
    try:
        inspect.signature(method).bind(*wanted)
    except TypeError:
        raise ConfigError(
            f"{where}.{name} must take ({', '.join(wanted)}) "
            f"(the protocol is esjax._src.envs.core.{protocol.__name__})"
        ) from None
    except ValueError:  # no signature to read (a builtin): the first trace will tell
        pass


def _check_spaces(env: Env, params: EnvParams, where: str) -> None:
    """One line if a space lacks the fields esjax reads of it, or cannot be made."""
    try:
        actions = env.action_space(params)
    except Exception as error:  # a user's env: one line, as any other failure at the door
        raise ConfigError(f"{where}.action_space raised {first_line(error)}") from None
    if not hasattr(actions, "n") and not all(
        hasattr(actions, field) for field in ("low", "high", "shape")
    ):
        raise ConfigError(
            f"{where}.action_space gave a {type(actions).__name__}: esjax needs n (discrete) "
            "or low, high and shape (continuous)"
        )
    try:
        observations = env.observation_space(params)
    except Exception as error:  # a user's env: one line, as any other failure at the door
        raise ConfigError(f"{where}.observation_space raised {first_line(error)}") from None
    if not hasattr(observations, "shape"):
        raise ConfigError(
            f"{where}.observation_space gave a {type(observations).__name__} without a shape"
        )


def _call_factory(factory: Any, kwargs: dict, name: str) -> Any:
    """``factory(**kwargs)``; arguments it does not take are a config error, named as such."""
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as error:
        raise ConfigError(f"{name!r}: cannot call it with env_kwargs {kwargs}: {error}") from None
    except ValueError:  # no signature to read (some builtins): let the call say what fails
        pass
    try:
        return factory(**kwargs)
    except ConfigError:
        raise
    except Exception as error:  # the user's factory: say which, in one line
        raise ConfigError(f"{name!r} raised {first_line(error)}") from None


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

    gymnax 1.0's ``step`` returns six values and auto-resets; a five-value ``step`` is read as
    in the module's protocol. For gymnax's own envs the step
    goes to ``step_env`` with the key gymnax's ``step`` would hand it, so a stochastic env sees
    the same noise as in a plain loop over ``env.step``, without the reset it would discard.
    """
    if steps_through_step_env(env):
        key_step, _ = jax.random.split(key)
        obs, state, reward, terminated, _ = env.step_env(key_step, state, action, params)
        truncated = env.is_truncated(state, params)
    else:
        outputs = env.step(key, state, action, params)
        if len(outputs) == 5:  # gymnax 0.x: one ``done``, read as termination
            obs, state, reward, terminated, _ = outputs
            truncated = False
        else:
            obs, state, reward, terminated, truncated, _ = outputs
    return obs, state, reward, jnp.logical_or(terminated, truncated)
