"""Your own network as a policy, in any JAX framework.

A task names it as ``policy.kind = "package.module:make"`` or ``"path/to/file.py:make"``. The
factory is called as ``make(input_size=N, output_size=M, **arguments)`` (``arguments``: the
task's other ``[policy]`` keys) and returns one of:

* a ``flax.linen.Module``, applied as ``module.apply(params, x)``;
* a ``flax.nnx.Module``: the factory also takes ``rngs=`` (an ``nnx.Rngs``), and a member's
  parameters are the module's ``nnx.Param`` variables (any other state stays as made);
* an ``equinox.Module``: the factory also takes ``key=``, and a member's parameters are the
  module's float arrays; it is called on one observation, as equinox modules are;
* a pair of plain functions ``(init, apply)``: ``init(key) -> params``, ``apply(params, x) ->
  y``.

``x`` is one float32 vector of N inputs (the flat observation, then any stacked frames,
env-parameter and meta inputs), ``y`` has M outputs: a discrete action's logits, or a
continuous action's values before the action head squashes them into the bounds.

**A recurrent network** is called on ``(carry, x)`` and returns ``(carry, y)``, and says what its
carry is at an episode's start: a module (linen, NNX, equinox) has a method
``initial_carry()`` returning it, plain functions come as a triple ``(init, apply,
initial_carry)``. esjax resets the carry to ``initial_carry()`` at the start of every
episode, as it does for its own LSTM. A module whose call takes ``(carry, x)`` without an
``initial_carry`` is refused; so is one with ``initial_carry`` whose call does not.

Every network goes through :func:`esjax._src.policies.perturb.splitting` like esjax's own, so
low-rank ES perturbs it where it multiplies, whatever the framework. What the factory returns is
checked here, each problem one :class:`~esjax._src.policies.networks.PolicyError` line.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from esjax._src.envs.usercode import first_line
from esjax._src.specs.config import ConfigError

PyTree = Any
# (params, carry, x) -> (carry, outputs); the outputs are whatever the network returns.
Step = Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, Any]]
# The extra that installs equinox: a user's equinox network names it when equinox is missing.
EQUINOX_HINT = "pip install 'esjax[equinox]'"


class NetworkError(ConfigError):
    """A user's network that esjax cannot use as a policy, said in one line."""


@dataclass(frozen=True)
class Made:
    """A user's network as esjax runs it: ``init(key) -> params``, ``step(params, carry, x) ->
    (carry, y)`` and the carry at an episode's start (``()`` when it carries none)."""

    init: Callable[[jax.Array], PyTree]
    step: Step
    initial_carry: Callable[[], PyTree]
    recurrent: bool
    framework: str


def make(
    factory: Callable[..., Any], name: str, arguments: Mapping[str, Any], input_size: int
) -> Made:
    """Call ``factory`` as its framework needs (``rngs=`` for NNX, ``key=`` for equinox) and
    adapt what it returns; ``name`` is how the task names it, for messages; ``arguments``
    include ``input_size``."""
    takes = _parameters(factory)
    _check_arguments(factory, name, arguments, takes)
    if "rngs" in takes:
        return _nnx(factory, name, arguments)
    if "key" in takes:
        return _equinox(factory, name, arguments)
    made = _called(factory, name, arguments)
    if isinstance(made, nn.Module):
        return _linen(made, name, input_size)
    if isinstance(made, tuple) and 2 <= len(made) <= 3 and all(map(callable, made)):
        return _functions(made, name)
    if isinstance(made, nnx.Module):
        raise NetworkError(
            f"{name!r} returned an NNX module: its factory must take rngs= "
            "(an nnx.Rngs) for esjax to make each run's parameters"
        )
    if _is_equinox(made):
        raise NetworkError(
            f"{name!r} returned an equinox module: its factory must take key= "
            "for esjax to make each run's parameters"
        )
    raise NetworkError(
        f"{name!r} returned a {type(made).__name__}, not a network: return a flax.linen or "
        "flax.nnx module, an equinox module, or plain functions (init, apply)"
    )


def adapt(network: Any, name: str, input_size: int) -> Made:
    """A network object handed over from Python, adapted as it is, each problem one line.

    A flax linen module has no weights of its own: each run initialises it from its key. An
    NNX or equinox module carries its weights, and the search starts from those (every seed
    alike; the seeds' searches differ in their noise): the network is trained as the user
    made it. Plain functions come as ``(init, apply)`` or ``(init, apply, initial_carry)``.
    """
    if isinstance(network, nn.Module):
        return _linen(network, name, input_size)
    if isinstance(network, nnx.Module):
        return _own_nnx(network, name)
    if _is_equinox(network):
        return _own_equinox(network, name)
    if isinstance(network, tuple) and 2 <= len(network) <= 3 and all(map(callable, network)):
        return _functions(network, name)
    raise NetworkError(
        f"{name}: a {type(network).__name__} is not a network esjax can train: pass a flax "
        "linen or NNX module, an equinox module, plain functions (init, apply[, "
        "initial_carry]), or a spec from esjax.policies (MLP, LSTM, GRU, CNN)"
    )


def _own_nnx(module: nnx.Module, name: str) -> Made:
    """An NNX module as made: its ``nnx.Param`` variables are a member's parameters."""
    recurrent = _recurrent(module, name, type(module).__call__, bound=False)
    graph, params, rest = _nnx_parts(module)

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        merged = nnx.merge(graph, params, rest)
        return merged(state, x) if recurrent else (state, merged(x))

    return Made(lambda key: params, step, _carry_of(module, recurrent), recurrent, "flax.nnx")


def _own_equinox(module: Any, name: str) -> Made:
    """An equinox module as made: its float arrays are a member's parameters."""
    import equinox as eqx  # present: the module is one of its classes

    recurrent = _recurrent(module, name, type(module).__call__, bound=False)
    params, static = eqx.partition(module, eqx.is_inexact_array)

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        merged = eqx.combine(params, static)
        return merged(state, x) if recurrent else (state, merged(x))

    return Made(lambda key: params, step, _carry_of(module, recurrent), recurrent, "equinox")


def check(made: Made, name: str, input_size: int, outputs: int) -> None:
    """One line if the network fails on one input of ``input_size`` floats, or does not map it
    to ``(outputs,)``, or (recurrent) returns a carry of another structure than it takes."""
    x = jax.ShapeDtypeStruct((input_size,), jnp.float32)
    try:
        params = jax.eval_shape(made.init, jax.random.key(0))
        carry = jax.eval_shape(made.initial_carry)
        result = jax.eval_shape(made.step, params, carry, x)
    except NetworkError:
        raise
    except Exception as error:  # the user's network: say which, in one line
        raise NetworkError(
            f"{name!r}: its {made.framework} network fails on {input_size} inputs: "
            f"{first_line(error)}"
        ) from None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise NetworkError(
            f"{name!r}: a recurrent network returns (carry, y); got {type(result).__name__}"
        )
    new_carry, y = result
    if not _same_shapes(carry, new_carry):
        raise NetworkError(f"{name!r}: the carry it returns is not shaped like its initial_carry()")
    leaves = jax.tree.leaves(y)
    if len(leaves) != 1 or not hasattr(y, "shape"):
        shapes = ", ".join(str(tuple(leaf.shape)) for leaf in leaves) or "nothing"
        raise NetworkError(
            f"{name!r}: its network maps {input_size} inputs to a {type(y).__name__} of "
            f"{len(leaves)} arrays ({shapes}); esjax needs one array of ({outputs},), the "
            "action head's inputs (return the action logits or values alone)"
        )
    shape = tuple(y.shape)
    if shape != (outputs,):
        raise NetworkError(
            f"{name!r}: its network maps {input_size} inputs to shape {shape}; "
            f"the action head needs ({outputs},)"
        )


def _same_shapes(carry: PyTree, new_carry: PyTree) -> bool:
    """Whether ``new_carry`` has ``carry``'s structure and leaf shapes."""
    try:
        same = jax.tree.map(lambda a, b: a.shape == b.shape, carry, new_carry)
    except (ValueError, TypeError):  # another structure
        return False
    return all(jax.tree.leaves(same))


# ---------------------------------------------------------------------------- frameworks
def _linen(module: nn.Module, name: str, input_size: int) -> Made:
    own = getattr(module, "initial_carry", None)
    if not callable(own) and callable(getattr(module, "initialize_carry", None)):
        # flax's own cells (nn.LSTMCell, nn.GRUCell, ...) say their carry this way; their
        # zeros do not depend on the key.
        own = functools.partial(module.initialize_carry, jax.random.key(0), (input_size,))
    recurrent = _recurrent(module, name, module.__call__, callable(own))
    carry = own if recurrent and own is not None else tuple

    def init(key: jax.Array) -> PyTree:
        x = jnp.zeros((input_size,), jnp.float32)
        return module.init(key, carry(), x) if recurrent else module.init(key, x)

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        if recurrent:
            new_state, y = module.apply(params, state, x)
            return new_state, y
        return state, module.apply(params, x)

    return Made(init, step, carry, recurrent, "flax.linen")


def _nnx(factory: Callable[..., Any], name: str, arguments: Mapping[str, Any]) -> Made:
    made = _called(factory, name, {**arguments, "rngs": nnx.Rngs(0)})
    if not isinstance(made, nnx.Module):
        raise NetworkError(
            f"{name!r} takes rngs= but returned a {type(made).__name__}, not a flax.nnx.Module"
        )
    recurrent = _recurrent(made, name, type(made).__call__, bound=False)
    graph, made_params, rest = _nnx_parts(made)

    def init(key: jax.Array) -> PyTree:
        module = factory(**arguments, rngs=nnx.Rngs(key))
        return _like(made_params, _nnx_parts(module)[1])

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        module = nnx.merge(graph, params, rest)
        return module(state, x) if recurrent else (state, module(x))

    return Made(init, step, _carry_of(made, recurrent), recurrent, "flax.nnx")


def _equinox(factory: Callable[..., Any], name: str, arguments: Mapping[str, Any]) -> Made:
    try:
        import equinox as eqx
    except ModuleNotFoundError:
        raise NetworkError(
            f"{name!r} takes key= (an equinox network) but equinox is not installed: {EQUINOX_HINT}"
        ) from None
    made = _called(factory, name, {**arguments, "key": jax.random.key(0)})
    if not isinstance(made, eqx.Module):
        raise NetworkError(
            f"{name!r} takes key= but returned a {type(made).__name__}, not an equinox.Module"
        )
    recurrent = _recurrent(made, name, type(made).__call__, bound=False)
    made_params, static = eqx.partition(made, eqx.is_inexact_array)

    def init(key: jax.Array) -> PyTree:
        fresh = eqx.partition(factory(**arguments, key=key), eqx.is_inexact_array)[0]
        return _like(made_params, fresh)

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        module = eqx.combine(params, static)
        return module(state, x) if recurrent else (state, module(x))

    return Made(init, step, _carry_of(made, recurrent), recurrent, "equinox")


def _functions(made: tuple[Callable[..., Any], ...], name: str) -> Made:
    init, apply = made[0], made[1]
    recurrent = len(made) == 3
    takes = len(_positional(apply))
    if recurrent and takes not in (3, -1):
        raise NetworkError(f"{name!r}: with initial_carry, apply takes (params, carry, x)")
    if not recurrent and takes == 3:
        raise NetworkError(
            f"{name!r}: apply takes (params, carry, x) but no initial_carry came "
            "with it: return (init, apply, initial_carry)"
        )

    def step(params: PyTree, state: PyTree, x: jax.Array) -> tuple[PyTree, Any]:
        return apply(params, state, x) if recurrent else (state, apply(params, x))

    return Made(init, step, made[2] if recurrent else tuple, recurrent, "plain-function")


def _nnx_parts(module: nnx.Module) -> tuple[Any, Any, Any]:
    """``(graph, params, rest)``: the module's structure, its ``nnx.Param`` variables (what a
    member perturbs) and any other state (kept as made)."""
    return cast(tuple[Any, Any, Any], nnx.split(module, nnx.Param, ...))


def _carry_of(module: Any, recurrent: bool) -> Callable[[], PyTree]:
    """What a module's carry is at an episode's start (``()`` when it carries none)."""
    return module.initial_carry if recurrent else tuple


def _like(made: PyTree, fresh: PyTree) -> PyTree:
    """``fresh``'s arrays in the structure of the module made at the door: a factory that
    defines its classes inside itself makes a new class at every call, which the door's
    static part would not combine with."""
    return jax.tree.unflatten(jax.tree.structure(made), jax.tree.leaves(fresh))


# ---------------------------------------------------------------------------- checks
def _recurrent(
    module: Any,
    name: str,
    call: Callable[..., Any],
    has_carry: bool | None = None,
    bound: bool = True,
) -> bool:
    """Whether ``module`` is recurrent: it has ``initial_carry`` (``has_carry``: what stands
    for it) and its call takes ``(carry, x)``; one of the two without the other is refused."""
    positional = _positional(call, required=True)[(0 if bound else 1) :]
    takes = len(positional)
    if has_carry is None:
        has_carry = callable(getattr(module, "initial_carry", None))
    if takes == 2 and not has_carry:
        raise NetworkError(
            f"{name!r}: its network is called with two arguments ({', '.join(positional)}) "
            "and has no initial_carry(): esjax calls a feed-forward network on one "
            "observation, and a recurrent one on (carry, x) with initial_carry() saying what "
            "the carry is at an episode's start"
        )
    if takes > 2:
        raise NetworkError(
            f"{name!r}: its network is called with {takes} arguments ({', '.join(positional)}); "
            "esjax calls it on one observation, or on (carry, x) for a recurrent one"
        )
    if has_carry and takes == 1:
        raise NetworkError(
            f"{name!r}: it has initial_carry() but is called on x alone; a "
            "recurrent network is called on (carry, x) and returns (carry, y)"
        )
    return has_carry


def _positional(fn: Callable[..., Any], required: bool = False) -> list[str]:
    """``fn``'s positional parameters (a ``*args`` counts as none); ``required``: only those
    without a default, what a call must pass it."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters
            if p.kind in kinds and not (required and p.default is not p.empty)]  # fmt: skip


def _parameters(factory: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return set()


def _check_arguments(
    factory: Callable[..., Any], name: str, arguments: Mapping[str, Any], takes: set[str]
) -> None:
    extra = {"rngs": None} if "rngs" in takes else {"key": None} if "key" in takes else {}
    try:
        inspect.signature(factory).bind(**arguments, **extra)
    except TypeError as error:
        raise NetworkError(f"{name!r}: cannot call it with {dict(arguments)}: {error}") from None
    except ValueError:  # no signature to read: the call says what fails
        pass


def _called(factory: Callable[..., Any], name: str, arguments: Mapping[str, Any]) -> Any:
    try:
        return factory(**arguments)
    except Exception as error:  # the user's factory: say which, in one line
        raise NetworkError(f"{name!r} raised {first_line(error)}") from None


def _is_equinox(made: Any) -> bool:
    equinox = sys.modules.get("equinox")
    return equinox is not None and isinstance(made, equinox.Module)
