"""A user's own flax module as a policy, for tests/test_policy_kinds.py: ``policy.kind =
"tests/data/toy_policy.py:make"``. The other factories here are wrong on purpose."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class TwoLayer(nn.Module):
    """``outputs`` linear outputs of one ``width``-unit layer: ``tanh(x W1 + b1) W2 + b2``."""

    width: int
    outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = jnp.tanh(nn.Dense(self.width)(x))  # Dense_0
        return nn.Dense(self.outputs)(hidden)  # Dense_1


def make(input_size: int, output_size: int, hidden: tuple[int, ...] = (8,), **_: object):
    """The policy: its first ``hidden`` size is the layer's width (a preset's other keys, such
    as ``activation``, are taken and left unused)."""
    return TwoLayer(int(hidden[0]), output_size)


def not_a_module(input_size: int, output_size: int):
    return [input_size, output_size]


def raises(input_size: int, output_size: int):
    raise RuntimeError("no network today\nsecond line")


def wrong_size(input_size: int, output_size: int):
    return TwoLayer(4, output_size + 1)


def takes_nothing():
    return TwoLayer(4, 2)


NOT_CALLABLE = 3
