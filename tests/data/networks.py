"""One tanh MLP and one recurrent cell written in each JAX framework, as a user brings them.

``policy.kind = "tests/data/networks.py:FACTORY"``. The MLPs (``linen_mlp``, ``nnx_mlp``,
``equinox_mlp``, ``plain_mlp``) are the same network, ``hidden`` tanh layers then a linear
output; the cells (``*_cell``) are an Elman cell ``h' = tanh(x Wx + h Wh + b)`` with a linear
readout, declaring their carry at an episode's start with ``initial_carry()`` (a third function
for plain ones). The factories at the end are wrong on purpose, one way each.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx


def _widths(input_size: int, hidden: Sequence[int], output_size: int) -> list[int]:
    return [int(input_size), *(int(w) for w in hidden), int(output_size)]


# ---------------------------------------------------------------------------- flax linen
class LinenMLP(nn.Module):
    hidden: tuple[int, ...]
    outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = jnp.tanh(nn.Dense(width)(x))
        return nn.Dense(self.outputs)(x)


def linen_mlp(input_size: int, output_size: int, hidden: Sequence[int] = (64, 64), **_: object):
    return LinenMLP(tuple(int(w) for w in hidden), output_size)


class LinenCell(nn.Module):
    units: int
    outputs: int

    @nn.compact
    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(nn.Dense(self.units)(x) + nn.Dense(self.units, use_bias=False)(h))
        return h, nn.Dense(self.outputs)(h)

    @nn.nowrap
    def initial_carry(self) -> jax.Array:
        return jnp.zeros((self.units,), jnp.float32)


def linen_cell(input_size: int, output_size: int, hidden: Sequence[int] = (16,), **_: object):
    return LinenCell(int(hidden[0]), output_size)


# ---------------------------------------------------------------------------- flax nnx
class NNXMLP(nnx.Module):
    def __init__(self, widths: list[int], rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(widths)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)


def nnx_mlp(
    input_size: int, output_size: int, rngs: nnx.Rngs, hidden: Sequence[int] = (64, 64), **_
):
    return NNXMLP(_widths(input_size, hidden, output_size), rngs)


class NNXCell(nnx.Module):
    def __init__(self, inputs: int, units: int, outputs: int, rngs: nnx.Rngs):
        self.units = units
        self.from_x = nnx.Linear(inputs, units, rngs=rngs)
        self.from_h = nnx.Linear(units, units, use_bias=False, rngs=rngs)
        self.readout = nnx.Linear(units, outputs, rngs=rngs)

    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(self.from_x(x) + self.from_h(h))
        return h, self.readout(h)

    def initial_carry(self) -> jax.Array:
        return jnp.zeros((self.units,), jnp.float32)


def nnx_cell(input_size: int, output_size: int, rngs: nnx.Rngs, hidden: Sequence[int] = (16,), **_):
    return NNXCell(input_size, int(hidden[0]), output_size, rngs)


# ---------------------------------------------------------------------------- equinox
def equinox_mlp(
    input_size: int, output_size: int, key: jax.Array, hidden: Sequence[int] = (64, 64), **_
):
    import equinox as eqx

    return eqx.nn.MLP(input_size, output_size, int(hidden[0]), len(hidden),
                      activation=jnp.tanh, key=key)  # fmt: skip


def equinox_cell(
    input_size: int, output_size: int, key: jax.Array, hidden: Sequence[int] = (16,), **_
):
    import equinox as eqx

    class EquinoxCell(eqx.Module):
        from_x: eqx.nn.Linear
        from_h: eqx.nn.Linear
        readout: eqx.nn.Linear
        units: int = eqx.field(static=True)

        def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            h = jnp.tanh(self.from_x(x) + self.from_h(h))
            return h, self.readout(h)

        def initial_carry(self) -> jax.Array:
            return jnp.zeros((self.units,), jnp.float32)

    units = int(hidden[0])
    kx, kh, kr = jax.random.split(key, 3)
    return EquinoxCell(
        eqx.nn.Linear(input_size, units, key=kx),
        eqx.nn.Linear(units, units, use_bias=False, key=kh),
        eqx.nn.Linear(units, output_size, key=kr),
        units,
    )


# ---------------------------------------------------------------------------- plain functions
def plain_mlp(input_size: int, output_size: int, hidden: Sequence[int] = (64, 64), **_: object):
    widths = _widths(input_size, hidden, output_size)

    def init(key: jax.Array) -> list[dict[str, jax.Array]]:
        keys = jax.random.split(key, len(widths) - 1)
        return [
            {"w": jax.random.normal(k, (a, b)) / jnp.sqrt(a), "b": jnp.zeros((b,))}
            for k, a, b in zip(keys, widths[:-1], widths[1:], strict=True)
        ]

    def apply(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
        for layer in params[:-1]:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return x @ params[-1]["w"] + params[-1]["b"]

    return init, apply


def plain_cell(input_size: int, output_size: int, hidden: Sequence[int] = (16,), **_: object):
    units = int(hidden[0])

    def init(key: jax.Array) -> dict[str, jax.Array]:
        kx, kh, kr = jax.random.split(key, 3)
        return {
            "wx": jax.random.normal(kx, (input_size, units)) / jnp.sqrt(input_size),
            "wh": jax.random.normal(kh, (units, units)) / jnp.sqrt(units),
            "b": jnp.zeros((units,)),
            "readout": jax.random.normal(kr, (units, output_size)) / jnp.sqrt(units),
        }

    def apply(params: dict[str, jax.Array], h: jax.Array, x: jax.Array):
        h = jnp.tanh(x @ params["wx"] + h @ params["wh"] + params["b"])
        return h, h @ params["readout"]

    return init, apply, lambda: jnp.zeros((units,), jnp.float32)


# ---------------------------------------------------------------------------- wrong on purpose
def returns_a_list(input_size: int, output_size: int, **_: object):
    return [input_size, output_size]


def wrong_output_size(input_size: int, output_size: int, **_: object):
    return LinenMLP((4,), output_size + 1)


def fails_on_the_observation(input_size: int, output_size: int, **_: object):
    def init(key: jax.Array) -> jax.Array:
        return jnp.zeros((input_size + 1, output_size))

    def apply(params: jax.Array, x: jax.Array) -> jax.Array:
        return x @ params  # one input too few for its weights

    return init, apply


class CarryWithoutInitial(nn.Module):
    outputs: int

    @nn.compact
    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return h, nn.Dense(self.outputs)(x)


def recurrent_without_carry(input_size: int, output_size: int, **_: object):
    return CarryWithoutInitial(output_size)
