"""Live objects: an env or a network handed to esjax from Python, named for this process.

A :class:`esjax.Trainer` takes the user's own objects (an env defined in a notebook, a flax
module just written). Everything downstream of a task names its env and network by a string
(``config.json``, the kept programs, the saved policies), so a live object is given a name that
stands for it in this process: ``"<live>:MODULE.QUALNAME#TOKEN"``. The angle brackets make it
neither a gymnax id, nor a suite's ``SUITE:NAME``, nor code (``module:factory``): it is never
imported or run from a file, and a process that does not hold the object says so in one line
(:func:`missing`). ``TOKEN`` is random, so two objects (or two processes) never share a name.

A run records the name; a later process binds its own object to the recorded name
(:func:`bind`) to evaluate or resume that run from Python. Nothing here imports JAX.
"""

from __future__ import annotations

import inspect
import secrets
from typing import Any

PREFIX = "<live>:"

_OBJECTS: dict[str, Any] = {}  # name -> object (holds it alive, so its id is never reused)
_NAMES: dict[int, str] = {}  # id(object) -> its name


def is_live(name: object) -> bool:
    """Whether ``name`` names a live object rather than data or code."""
    return isinstance(name, str) and name.startswith(PREFIX)


def describe(obj: Any) -> str:
    """``MODULE.QUALNAME`` of ``obj``'s type (of ``obj`` itself for a function or a class)."""
    kind = obj if isinstance(obj, type) or inspect.isroutine(obj) else type(obj)
    module = getattr(kind, "__module__", None) or "?"
    qualname = getattr(kind, "__qualname__", None) or type(obj).__name__
    return f"{module}.{qualname}"


def name_for(obj: Any, what: str | None = None) -> str:
    """The live name of ``obj`` in this process, made on first use; ``what`` overrides the
    description it carries (a pair of functions is described by its first)."""
    known = _NAMES.get(id(obj))
    if known is not None and _OBJECTS.get(known) is obj:
        return known
    name = f"{PREFIX}{what or describe(obj)}#{secrets.token_hex(6)}"
    bind(name, obj)
    return name


def bind(name: str, obj: Any) -> None:
    """Let ``name`` (a run's recorded live name) stand for ``obj`` in this process."""
    if not is_live(name):
        raise ValueError(f"{name!r} is not a live name")
    _OBJECTS[name] = obj
    _NAMES[id(obj)] = name


def lookup(name: str) -> Any | None:
    """The object ``name`` stands for in this process, or None where it stands for none."""
    return _OBJECTS.get(name)


def label(name: str) -> str:
    """What a live name says its object is (``__main__.Room``), without the token."""
    return name.removeprefix(PREFIX).rsplit("#", 1)[0]


def same_kind(a: str, b: str) -> bool:
    """Whether two names stand for objects of the same type: equal names, or live names of
    the same description (another process's object of the same class)."""
    if is_live(a) and is_live(b):
        return label(a) == label(b)
    return a == b


def check_held(env: str, network: str) -> str | None:
    """The one line for every live object a task names that this process does not hold
    (its env, its network), or None when it holds them all."""
    lacking = [(what, name) for what, name in (("env", env), ("network", network))
               if is_live(name) and lookup(name) is None]  # fmt: skip
    if not lacking:
        return None
    if len(lacking) == 1:
        return missing(lacking[0][1], lacking[0][0])
    return (
        f"this run's env and network were live Python objects ({label(env)}, "
        f"{label(network)}) with no importable home, so they cannot be rebuilt from the run "
        "directory; from Python, pass them again: esjax.load_policy(RUN, env=..., "
        "network=...) to evaluate, esjax.evolve(trainer, out=RUN, resume=True) to resume"
    )


def missing(name: str, what: str) -> str:
    """The one line for a live ``what`` (``"env"``, ``"network"``) this process lacks (the
    caller raises it as a ``ConfigError``: this module is imported by the config's own)."""
    return (
        f"this run's {what} was a live Python object ({label(name)}) with no importable home, "
        f"so it cannot be rebuilt from the run directory; from Python, pass it again: "
        f"esjax.load_policy(RUN, {what}=...) to evaluate, esjax.evolve(trainer, out=RUN, "
        "resume=True) to resume"
    )
