"""One perturbation mechanism for every network (esjax._src.policies.perturb): a low-rank member of
any policy, esjax's own networks and a user's in flax linen, NNX, equinox or plain functions,
feed-forward or recurrent, acts as the same network does on its full weights written out in
NumPy (``W + scale aᵀ b``, the factors random and far from zero); the plan of where each leaf is
multiplied is read off the network (a dense kernel either way round, a conv kernel HWIO or OIHW,
an embedding or a tied weight perturbed in full); and under ``vmap`` over a chunk of members a
member's full weight matrix is never formed, whoever wrote the network."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from esjax._src.policies import perturb
from esjax._src.policies.networks import CNN, GRU, LSTM, MLP, CodePolicy
from esjax._src.policies.perturb import LowRank

DATA = Path(__file__).resolve().parent / "data"
NETWORKS = DATA / "networks.py"
TOY = DATA / "toy_policy.py"
# Raw continuous actions are the network's outputs as they are, so the comparison sees them
# without a squash or an argmax in between.
BOX = spaces.Box(low=-2.0, high=2.0, shape=(3,), dtype=jnp.float32)
STEPS = 4
FRAMEWORKS = ("linen", "nnx", "equinox", "plain")


def user(factory: str, **arguments) -> CodePolicy:
    return CodePolicy(f"{NETWORKS}:{factory}", {"hidden": (8, 8), **arguments}, raw_actions=True)


# (spec, obs_size, layout) for every built-in network and a user's in every framework.
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
    **{f"{f}_mlp": (user(f"{f}_mlp"), 6, {}) for f in FRAMEWORKS},
    **{f"{f}_cell": (user(f"{f}_cell"), 6, {}) for f in FRAMEWORKS},
    "nnx_mirror": (user("nnx_mlp", hidden=(8,)).__class__(
        f"{NETWORKS}:nnx_mlp", {"hidden": (8,)}, mirror=(1.0, -1.0, -1.0), raw_actions=True
    ), 3, {"obs_shape": (3,)}),
}  # fmt: skip


def build(name):
    spec, obs_size, layout = CASES[name]
    return spec.build(obs_size, BOX, frame_stack=1, **layout)


def lowrank_member(params, plan, rank, key=0, scale=0.3):
    """Every leaf the plan splits as a ``LowRank`` with random factors; the scale makes
    ``scale aᵀ b`` as large as the kernel itself, so a dropped or misplaced correction shows.
    The other leaves are moved (flax starts biases at zero), so one dropped shows too."""
    leaves, tree = jax.tree.flatten(params)
    keys = iter(jax.random.split(jax.random.key(key), 2 * len(leaves)))
    out = []
    for leaf, split in zip(leaves, plan.splits, strict=True):
        if split is None:
            out.append(leaf + scale * jax.random.normal(next(keys), leaf.shape))
            continue
        rows, columns = perturb.matrix_shape(leaf.shape, split)
        a = jax.random.normal(next(keys), (rank, rows))
        b = jax.random.normal(next(keys), (rank, columns))
        size = scale / math.sqrt(rank * rows)
        out.append(LowRank(leaf, a, b, jnp.asarray(size, jnp.float32), split))
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
def test_a_lowrank_member_acts_as_its_network_does_on_its_full_weights(name, rank):
    policy = build(name)
    params = policy.init(jax.random.key(1))
    plan = policy.plan()
    assert sum(split is not None for split in plan.splits) >= 1 and not plan.whole
    member = lowrank_member(params, plan, rank)
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


# ---------------------------------------------------------------------------- plans
def test_the_plan_splits_each_leaf_where_its_network_contracts_it():
    """A leaf's matrix is the one its products contract: ``x @ W`` (rows contracted), ``W @ x``
    (columns), a conv kernel HWIO (output last) or OIHW (output first); a leaf gathered from
    (an embedding), used two ways (tied weights), multiplied elementwise or unused is
    perturbed in full, and named as such when it has two axes or more."""
    x, image = jnp.ones((5,)), jnp.ones((1, 8, 8, 2))
    params = {
        "in_out": jnp.ones((5, 4)),
        "out_in": jnp.ones((4, 5)),
        "hwio": jnp.ones((3, 3, 2, 6)),
        "oihw": jnp.ones((6, 2, 3, 3)),
        "embedding": jnp.ones((10, 4)),
        "tied": jnp.ones((10, 4)),
        "gain": jnp.ones((4,)),
        "unused": jnp.ones((4, 4)),
    }

    def network(p, x, image):
        dims = ("NHWC", "HWIO", "NHWC")
        y = x @ p["in_out"] + p["out_in"] @ x + p["embedding"][3] * p["gain"]
        y = y + p["tied"][2] + jnp.ones((10,)) @ p["tied"]
        conv = jax.lax.conv_general_dilated(image, p["hwio"], (1, 1), "VALID",
                                            dimension_numbers=dims)  # fmt: skip
        oihw = jax.lax.conv_general_dilated(jnp.moveaxis(image, -1, 1), p["oihw"], (1, 1), "VALID")
        return y.sum() + conv.sum() + oihw.sum()

    plan = perturb.plan(network, params, x, image)
    splits = dict(zip(sorted(params), plan.splits, strict=True))
    assert splits == {"embedding": None, "gain": None, "hwio": 3, "in_out": 1, "oihw": 1,
                      "out_in": 1, "tied": None, "unused": None}  # fmt: skip
    assert sorted(plan.whole) == ["['embedding']", "['tied']", "['unused']"]


def test_a_leaf_seen_through_a_transpose_a_cast_a_scan_or_a_jit_keeps_its_split():
    params = {"w": jnp.ones((5, 5)), "v": jnp.ones((5, 3))}

    def network(p, x):
        x = jax.jit(lambda a, w: a @ w.T)(x, p["w"])
        x, _ = jax.lax.scan(lambda h, _: (jnp.tanh(h @ p["w"]), None), x, None, length=3)
        x = jax.lax.cond(x.sum() > 0, lambda h: h @ p["w"].astype(jnp.float32), lambda h: h, x)
        return jax.nn.relu(x) @ p["v"]

    plan = perturb.plan(network, params, jnp.ones((5,)))
    assert plan.splits == (1, 1) and not plan.whole
    member = lowrank_member(params, plan, rank=2)
    got = perturb.splitting(network)(member, jnp.linspace(-1, 1, 5))
    np.testing.assert_allclose(got, network(full_weights(member), jnp.linspace(-1, 1, 5)),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    "product",
    [
        lambda w, x: w @ x,  # the weight on the left, the other operand with a free axis
        lambda w, x: jnp.einsum("oi,ib->bo", w, x),
        lambda w, x: w @ x[:, 0],
        lambda w, x: jax.lax.dot_general(w[None], x[None], (((2,), (1,)), ((0,), (0,))))[0],
    ],
)
def test_a_weight_on_the_left_keeps_the_products_order_of_axes(product):
    """The shared product of a left-hand weight is taken as ``x @ Wᵀ`` (batch-first under
    ``vmap``) and turned back: a chunk of members, sharing one mean, equals each member on its
    full weights."""
    params = {"w": jax.random.normal(jax.random.key(3), (4, 5))}

    def network(p, x):
        return jnp.tanh(product(p["w"], x))

    plan = perturb.plan(network, params, jnp.ones((5, 7)))
    xs = jax.random.normal(jax.random.key(4), (3, 5, 7))
    step = perturb.splitting(network)
    got = jax.vmap(lambda key, x: step(lowrank_member(params, plan, 2, key), x))(jnp.arange(3), xs)
    for key, x, out in zip(range(3), xs, got, strict=True):
        member = lowrank_member(params, plan, 2, key)
        np.testing.assert_allclose(out, network(full_weights(member), x), rtol=1e-5, atol=1e-5)


def test_plain_parameters_trace_the_network_itself():
    """Plain parameters never enter the interpreter: the same jaxpr as the network's own."""
    policy = build("lstm")
    params = policy.init(jax.random.key(0))
    x, carry = jnp.ones((policy.input_size,)), policy.initial_carry()
    wrapped = jax.make_jaxpr(policy.apply)(params, x, carry, jax.random.key(0))
    step = perturb.splitting(lambda p, x: p["w"] @ x)
    assert str(jax.make_jaxpr(step)({"w": jnp.ones((2, 3))}, jnp.ones(3))) == str(
        jax.make_jaxpr(lambda p, x: p["w"] @ x)({"w": jnp.ones((2, 3))}, jnp.ones(3))
    )
    assert "dot_general" in str(wrapped)


# ---------------------------------------------------------------------------- chunks
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
    """The jaxpr of ``members`` members' steps under ``vmap``: each split leaf's ``base``
    shared (in_axes None, one array for the chunk), its factors and scale and the other leaves
    per member."""
    leaves, tree = jax.tree.flatten(policy.init(jax.random.key(1)))
    keys = iter(jax.random.split(jax.random.key(3), 2 * len(leaves)))
    chunk, axes = [], []
    for leaf, split in zip(leaves, policy.plan().splits, strict=True):
        if split is None:
            chunk.append(jnp.broadcast_to(leaf, (members, *leaf.shape)))
            axes.append(0)
            continue
        rows, columns = perturb.matrix_shape(leaf.shape, split)
        a = jax.random.normal(next(keys), (members, rank, rows))
        b = jax.random.normal(next(keys), (members, rank, columns))
        chunk.append(LowRank(leaf, a, b, jnp.full((members,), 0.1), split))
        axes.append(LowRank(None, 0, 0, 0, split))

    def step(member, x):
        return policy.apply(member, x, policy.initial_carry(), jax.random.key(0))[0]

    batched = jax.vmap(step, in_axes=(jax.tree.unflatten(tree, axes), 0))
    xs = jnp.ones((members, obs_size))
    return jax.make_jaxpr(batched)(jax.tree.unflatten(tree, chunk), xs).jaxpr


@pytest.mark.parametrize("name", ["builtin", *FRAMEWORKS])
def test_under_vmap_a_chunk_never_forms_its_members_full_weights(name):
    """The same MLP 256-256, esjax's and a user's in each framework: no ``(members, 256,
    256)`` value, and the shared kernel meets the whole chunk's inputs in one product."""
    members = 8
    spec = (
        MLP(hidden=(256, 256), raw_actions=True)
        if name == "builtin"
        else CodePolicy(f"{NETWORKS}:{name}_mlp", {"hidden": (256, 256)}, raw_actions=True)
    )
    policy = spec.build(16, BOX, frame_stack=1)
    jaxpr = chunk_jaxpr(policy, members, 16)
    shapes = set(jaxpr_shapes(jaxpr))
    assert (members, 256, 256) not in shapes and (members, 16, 256) not in shapes
    assert (members, 256, 16) not in shapes
    products = [
        sorted(tuple(v.aval.shape) for v in eqn.invars)
        for eqn in jaxpr.eqns
        if eqn.primitive.name == "dot_general"
    ]
    assert [(256, 256), (members, 256)] in products or [(members, 256), (256, 256)] in products


def test_a_leaf_no_product_can_split_is_formed_for_itself_alone():
    """Given a low-rank leaf where its use cannot split (a gather), the member's own leaf is
    formed for that use, correctly; nothing else is."""

    def network(p, x):
        return p["table"][2] + x @ p["w"]

    params = {"table": jnp.ones((4, 3)), "w": jnp.ones((3, 3))}
    member = lowrank_member(params, perturb.Plan((1, 1)), rank=2)
    x = jnp.linspace(-1, 1, 3)
    with pytest.warns(
        UserWarning,
        match="formed some of their weights whole, where the network uses them by slice",
    ):
        got = perturb.splitting(network)(member, x)
    np.testing.assert_allclose(got, network(full_weights(member), x), rtol=1e-5, atol=1e-5)
