"""Mirror symmetry: a policy that answers a reflected state with the reflected action.

A pendulum swinging left is a pendulum swinging right seen in a mirror: negate the angle's sine
and the angular velocity, and the right torque is the negated one. A network evolved from
scratch need not respect that, and on Pendulum-v1 it often does not: one side of the swing-up
is learnt well and the mirror side badly (benchmarks/README.md, "Mirror-symmetric policies").

``policy.mirror`` gives each observation component's sign under the reflection;
``policy.mirror_actions`` (discrete actions only) the action each action becomes. The network
``g`` is then read through both views of the state,

    outputs(x) = (g(x) + R g(M x)) / 2,

where ``M`` reflects the policy's input and ``R`` its outputs (continuous: negated, so the
action is reflected about the middle of its bounds, or about 0 with ``actions = "raw"``;
discrete: the logits permuted). The policy is exactly equivariant, ``outputs(M x) = R
outputs(x)``, with the same parameters as ``g``; a recurrent ``g`` runs two states, one per
view.

The reflection acts on the policy's input as the rollout hands it over. With
``normalize_obs`` that input is already scaled by running statistics, so the mirror is taken
about the running mean: the raw symmetry holds exactly where the flipped components' running
means are zero, and nearly where they are near zero, as on a symmetric task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any
# (params, carry, x) -> (carry, outputs): a network before its action head.
NetworkFn = Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, jax.Array]]


@dataclass(frozen=True)
class Reflection:
    """``M x = x[input_index] * input_scale + input_offset``; ``R y = y[output_index] *
    output_scale``. Plain NumPy arrays, so the reflection is a constant of the compiled step."""

    input_index: np.ndarray
    input_scale: np.ndarray
    input_offset: np.ndarray
    output_index: np.ndarray
    output_scale: np.ndarray

    def reflect_input(self, x: jax.Array) -> jax.Array:
        return x[self.input_index] * self.input_scale + self.input_offset

    def reflect_output(self, y: jax.Array) -> jax.Array:
        return y[self.output_index] * self.output_scale


def check_mirror(
    signs: Sequence[float], actions: Sequence[int], obs_size: int, head: Any
) -> str | None:
    """Why ``mirror`` / ``mirror_actions`` cannot reflect a policy with action head ``head``
    (an :class:`esjax._src.policies.networks.ActionHead`, untyped here: policies imports this
    module), as ``"field: why"``, or None.

    A mirrored policy negates its continuous outputs. Squashed, that reflects an action about
    the middle of its bounds; raw, about zero, which is the middle only for bounds symmetric
    about it.
    """
    if not signs:
        return "mirror_actions: needs mirror (the observation's signs) too" if actions else None
    if len(signs) != obs_size:
        return f"mirror: {len(signs)} signs for an observation of {obs_size} components"
    if any(float(s) not in (1.0, -1.0) for s in signs):
        return f"mirror: signs must each be 1 or -1, got {list(signs)}"
    if not head.discrete:
        if actions:
            return "mirror_actions: is for discrete actions; continuous actions are negated"
        if head.raw and bool(np.any(np.asarray(head.low) != -np.asarray(head.high))):
            return "mirror: with actions 'raw' the action bounds must be symmetric about 0"
        return None
    num_actions = head.size
    if sorted(int(a) for a in actions) != list(range(num_actions)):
        return (
            f"mirror_actions: discrete actions need a reordering of 0..{num_actions - 1} naming "
            f"the action each action becomes in the mirror, got {list(actions)}"
        )
    if any(int(actions[int(a)]) != i for i, a in enumerate(actions)):
        return f"mirror_actions: must undo itself (a reflection twice is none), got {list(actions)}"
    return None


def reflection(
    signs: Sequence[float],
    actions: Sequence[int],
    *,
    frame_stack: int,
    param_inputs: int,
    head: Any,
    meta_inputs: Sequence[str],
) -> Reflection:
    """The reflection of a policy input laid out as the rollout builds it.

    Inputs: ``frame_stack`` observations (each reflected by ``signs``), ``param_inputs`` env
    parameters (unchanged), then the meta inputs in order: the previous action (reflected like
    an action), the previous reward and done flag (unchanged).
    """
    obs_signs = np.asarray(signs, np.float32)
    scale = [np.tile(obs_signs, frame_stack), np.ones(param_inputs, np.float32)]
    offset = [np.zeros(obs_signs.size * frame_stack + param_inputs, np.float32)]
    index = [np.arange(obs_signs.size * frame_stack + param_inputs)]
    start = index[0].size
    for name in meta_inputs:
        width = head.feature_size if name == "action" else 1
        block = np.arange(start, start + width)
        if name == "action" and head.discrete:  # one-hot: the reflected action's slot
            index.append(block[np.asarray(actions, np.int64)])
            scale.append(np.ones(width, np.float32))
            offset.append(np.zeros(width, np.float32))
        elif name == "action":  # about the middle of the bounds
            index.append(block)
            scale.append(-np.ones(width, np.float32))
            offset.append(np.asarray(head.low + head.high, np.float32).reshape(-1))
        else:
            index.append(block)
            scale.append(np.ones(width, np.float32))
            offset.append(np.zeros(width, np.float32))
        start += width
    if head.discrete:
        out_index, out_scale = np.asarray(actions, np.int64), np.ones(head.size, np.float32)
    else:
        out_index, out_scale = np.arange(head.size), -np.ones(head.size, np.float32)
    return Reflection(
        np.concatenate(index),
        np.concatenate(scale),
        np.concatenate(offset),
        out_index,
        out_scale,
    )


def symmetrize(network: NetworkFn, mirror: Reflection) -> NetworkFn:
    """``network`` read through the state and its mirror image; the carry holds both views'
    states stacked on a leading axis of 2 (see :func:`paired_carry`)."""

    def both(params, carry, x):
        views = jnp.stack([x, mirror.reflect_input(x)])
        carry, outputs = jax.vmap(network, in_axes=(None, 0, 0))(params, carry, views)
        return carry, 0.5 * (outputs[0] + mirror.reflect_output(outputs[1]))

    return both


def paired_carry(initial_carry: Callable[[], PyTree]) -> Callable[[], PyTree]:
    """The initial carry of a symmetrized network: one per view."""
    return lambda: jax.tree.map(lambda c: jnp.stack([c, c]), initial_carry())
