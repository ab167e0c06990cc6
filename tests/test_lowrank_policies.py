"""Low-rank members (:mod:`esjax.policies.lowrank`): every built-in policy run on ``LowRank``
weights acts as flax's own network does on the full weights, written out here in NumPy
(``base + scale a bᵀ``, the factors random and far from zero), for actions and recurrent
carries over several steps; and under ``vmap`` over a chunk of members a member's full
weight matrix is never formed, while a user's module (no low-rank path) still runs on its
materialised weights."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from esjax.policies.lowrank import LowRank
from esjax.policies.networks import CNN, GRU, LSTM, MLP, CodePolicy

TOY = Path(__file__).resolve().parent / "data" / "toy_policy.py"
# Raw continuous actions are the network's outputs as they are, so the comparison sees them
# without a squash or an argmax in between.
BOX = spaces.Box(low=-2.0, high=2.0, shape=(3,), dtype=jnp.float32)
STEPS = 4
# (spec, obs_size, layout) for every built-in network (and a user's module).
CASES = {
    "mlp_64_64_tanh": (MLP(raw_actions=True), 6, {}),
    "mlp_linear": (MLP(hidden=(), raw_actions=True), 6, {}),
    "mlp_relu": (MLP(hidden=(16, 8), activation="relu", raw_actions=True), 6, {}),
    "mlp_mirror": (
        MLP(hidden=(8, 8), mirror=(1.0, -1.0, -1.0), raw_actions=True),
        3,
        {"obs_shape": (3,)},
    ),
    "gru": (GRU(7, meta_inputs=("reward",), raw_actions=True), 6, {}),
    "lstm": (LSTM(7, raw_actions=True), 6, {}),
    "cnn_stride_1": (CNN(raw_actions=True), 64, {"obs_shape": (8, 8)}),
    "cnn_stride_2": (CNN(stride=2, raw_actions=True), 2 * 81, {"obs_shape": (9, 9, 2)}),
    "cnn_lstm": (
        CNN(lstm=8, meta_inputs=("reward",), raw_actions=True),
        2 * 64,
        {"obs_shape": (8, 8, 2)},
    ),
    "cnn_ego": (CNN(ego_channel=1, ego_radius=3, raw_actions=True), 128, {"obs_shape": (8, 8, 2)}),
    "code_policy": (CodePolicy(f"{TOY}:make", {"hidden": (8,)}, raw_actions=True), 6, {}),
}


def build(name):
    spec, obs_size, layout = CASES[name]
    return spec.build(obs_size, BOX, frame_stack=1, **layout)


def lowrank_member(params, rank, key=0, scale=0.3):
    """Every kernel (a leaf of two or more axes) as a ``LowRank`` with random factors; the
    scale makes ``scale a bᵀ`` as large as the kernel itself, so a dropped or misplaced
    correction shows. Biases are made nonzero too (flax starts them at zero), so a bias
    dropped or put in the wrong place shows."""
    leaves, tree = jax.tree.flatten(params)
    keys = iter(jax.random.split(jax.random.key(key), 2 * len(leaves)))
    out = []
    for leaf in leaves:
        if leaf.ndim < 2:
            out.append(leaf + scale * jax.random.normal(next(keys), leaf.shape))
            continue
        rows, columns = math.prod(leaf.shape[:-1]), leaf.shape[-1]
        a = jax.random.normal(next(keys), (rank, rows))
        b = jax.random.normal(next(keys), (rank, columns))
        size = scale / math.sqrt(rank * rows)
        out.append(LowRank(leaf, a, b, jnp.asarray(size, jnp.float32)))
    return jax.tree.unflatten(tree, out)


def full_weights(member):
    """The member's full weights, written out in NumPy (float64, then float32)."""

    def full(leaf):
        if not isinstance(leaf, LowRank):
            return leaf
        base = np.asarray(leaf.base, np.float64)
        product = np.asarray(leaf.a, np.float64).T @ np.asarray(leaf.b, np.float64)
        return jnp.asarray(base + float(leaf.scale) * product.reshape(base.shape), jnp.float32)

    return jax.tree.map(full, member, is_leaf=lambda x: isinstance(x, LowRank))


def run(policy, params, xs):
    """Actions and carries of ``STEPS`` steps, each path carrying its own state. Products in
    full float32 (an accelerator's default may round them to fewer bits)."""
    apply = jax.jit(policy.apply)
    carry, actions, carries = policy.initial_carry(), [], []
    with jax.default_matmul_precision("highest"):
        for x in xs:
            action, carry = apply(params, x, carry, jax.random.key(0))
            actions.append(np.asarray(action))
            carries.append([np.asarray(c) for c in jax.tree.leaves(carry)])
    return np.stack(actions), carries


@pytest.mark.parametrize("rank", [1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_lowrank_member_acts_as_flax_does_on_its_full_weights(name, rank):
    policy = build(name)
    params = policy.init(jax.random.key(1))
    member = lowrank_member(params, rank)
    xs = jax.random.normal(jax.random.key(2), (STEPS, policy.input_size))
    actions, carries = run(policy, member, xs)
    expected_actions, expected_carries = run(policy, full_weights(member), xs)
    np.testing.assert_allclose(actions, expected_actions, rtol=1e-5, atol=1e-5)
    assert policy.recurrent == (carries[0] != [])
    for got, expected in zip(carries, expected_carries, strict=True):
        for leaf, expected_leaf in zip(got, expected, strict=True):
            np.testing.assert_allclose(leaf, expected_leaf, rtol=1e-5, atol=1e-5)
    base_actions, _ = run(policy, params, xs)  # the correction matters: the test can fail
    assert np.max(np.abs(actions - base_actions)) > 1e-2


def jaxpr_shapes(jaxpr):
    """Every value's shape in ``jaxpr`` and the jaxprs inside it (jit, custom derivatives)."""
    for eqn in jaxpr.eqns:
        yield from (tuple(v.aval.shape) for v in eqn.outvars)
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from jaxpr_shapes(inner)


def chunk_jaxpr(policy, members, obs_size, rank=2):
    """The jaxpr of ``members`` members' steps under ``vmap``: each kernel's ``base`` shared
    (in_axes None, one array for the chunk), its factors and scale and the biases per member."""
    leaves, tree = jax.tree.flatten(policy.init(jax.random.key(1)))
    keys = iter(jax.random.split(jax.random.key(3), 2 * len(leaves)))
    chunk, axes = [], []
    for leaf in leaves:
        if leaf.ndim < 2:
            chunk.append(jnp.broadcast_to(leaf, (members, *leaf.shape)))
            axes.append(0)
            continue
        rows, columns = math.prod(leaf.shape[:-1]), leaf.shape[-1]
        a = jax.random.normal(next(keys), (members, rank, rows))
        b = jax.random.normal(next(keys), (members, rank, columns))
        chunk.append(LowRank(leaf, a, b, jnp.full((members,), 0.1)))
        axes.append(LowRank(None, 0, 0, 0))

    def step(member, x):
        return policy.apply(member, x, policy.initial_carry(), jax.random.key(0))[0]

    batched = jax.vmap(step, in_axes=(jax.tree.unflatten(tree, axes), 0))
    xs = jnp.ones((members, obs_size))
    return jax.make_jaxpr(batched)(jax.tree.unflatten(tree, chunk), xs).jaxpr


def test_under_vmap_a_chunk_never_forms_its_members_full_weights():
    members = 8
    policy = MLP(hidden=(256, 256), raw_actions=True).build(16, BOX, frame_stack=1)
    jaxpr = chunk_jaxpr(policy, members, 16)
    shapes = set(jaxpr_shapes(jaxpr))
    assert (members, 256, 256) not in shapes and (members, 16, 256) not in shapes
    # The shared kernel meets the whole chunk's inputs in one matrix-matrix product.
    products = [
        tuple(tuple(v.aval.shape) for v in eqn.invars)
        for eqn in jaxpr.eqns
        if eqn.primitive.name == "dot_general"
    ]
    assert ((members, 256), (256, 256)) in products


def test_a_code_policy_runs_on_its_materialised_weights():
    """No low-rank path for a user's module: its members' full weights are formed (so the
    check above can fail), and it acts as flax does on them."""
    members = 8
    spec = CodePolicy(f"{TOY}:make", {"hidden": (256,)}, raw_actions=True)
    policy = spec.build(16, BOX, frame_stack=1)
    assert (members, 16, 256) in set(jaxpr_shapes(chunk_jaxpr(policy, members, 16)))
    member = lowrank_member(policy.init(jax.random.key(1)), 3)
    xs = jax.random.normal(jax.random.key(2), (STEPS, 16))
    np.testing.assert_allclose(
        run(policy, member, xs)[0], run(policy, full_weights(member), xs)[0], rtol=1e-5, atol=1e-5
    )
