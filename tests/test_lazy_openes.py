"""The lazy antithetic-OpenES population against evosax's own ask and tell on the same keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import esjax
from esjax._src.policies.networks import MLP
from esjax._src.strategies import draw, lazy_openes
from esjax._src.strategies.fitness import to_fitness
from esjax._src.strategies.strategy import build_strategy, load_strategy

NUM_DIMS = 7


def open_es(**settings):
    spec = load_strategy("open_es", {"popsize": 8, "env_groups": 2, **settings})
    return build_strategy(spec, num_dims=NUM_DIMS)


def started(strategy):
    state = strategy.init(jax.random.key(0), jnp.linspace(-1.0, 1.0, NUM_DIMS))
    return state.replace(std=jnp.asarray(0.3, jnp.float32))


def materialised(lazy):
    return jax.vmap(lazy.flat)(*lazy.members())


def test_population_is_evosax_ask():
    strategy = open_es()
    state = started(strategy)
    key = jax.random.key(3)
    lazy = lazy_openes.ask(strategy, key, state, lambda flat: flat)
    expected, _ = strategy.es.ask(key, state, strategy.params)
    # Same draw; only the rounding of ``mean + std * z`` may differ (XLA may fuse it into one
    # multiply-add in one program and not in the other).
    np.testing.assert_allclose(materialised(lazy), expected, rtol=1e-6, atol=1e-7)
    # Rows taken for a device keep their members' parameters.
    rows = jnp.array([6, 1, 4])
    np.testing.assert_array_equal(materialised(lazy.take(rows)), materialised(lazy)[rows])


def test_population_drawn_in_blocks_is_evosax_ask():
    """Past ``draw.WHOLE_BYTES`` the half noise is drawn in blocks of rows: the same draw."""
    num_dims = 4200
    spec = load_strategy("open_es", {"popsize": 1024})
    strategy = build_strategy(spec, num_dims=num_dims)
    assert 4 * 512 * num_dims > draw.WHOLE_BYTES
    state = strategy.init(jax.random.key(0), jnp.zeros(num_dims))
    key = jax.random.key(9)
    lazy = jax.jit(lambda k, s: lazy_openes.ask(strategy, k, s, lambda flat: flat))(key, state)
    expected, _ = strategy.es.ask(key, state, strategy.params)
    # evosax's draw is ``jax.random.normal(key, (popsize // 2, num_dims))``: the same bits.
    np.testing.assert_array_equal(lazy.noise, jax.random.normal(key, (512, num_dims)))
    np.testing.assert_allclose(materialised(lazy), expected, rtol=1e-6, atol=1e-7)


def test_tell_equals_evosax_tell_on_the_same_population():
    strategy = open_es()
    state = started(strategy)
    lazy = lazy_openes.ask(strategy, jax.random.key(3), state, lambda flat: flat)
    population = materialised(lazy)
    fitness = to_fitness(jax.random.normal(jax.random.key(4), (8,)))
    key = jax.random.key(5)
    ours = lazy_openes.tell(strategy, key, lazy, fitness, state)
    theirs, _ = strategy.es.tell(key, population, fitness, state, strategy.params)
    # Two generations: the second tell also sees the first one's best-so-far and Adam moments.
    lazy2 = lazy_openes.ask(strategy, jax.random.key(6), ours, lambda flat: flat)
    ours = lazy_openes.tell(strategy, key, lazy2, fitness[::-1], ours)
    theirs, _ = strategy.es.tell(key, materialised(lazy2), fitness[::-1], theirs, strategy.params)
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours.best_fitness, theirs.best_fitness)
    np.testing.assert_array_equal(ours.generation_counter, theirs.generation_counter)


@pytest.mark.parametrize(
    ("half", "devices"), [(4, 1), (5, 4), (65, 4), (1024, 2), (1000, 3), (1000, 32), (500, 64)]
)
def test_pair_layout_puts_every_member_on_one_device_with_its_mirror_image(half, devices):
    layout = lazy_openes.PairLayout(half, devices)
    assert layout.per_device % layout.block == 0 and layout.rows >= half
    # Less than one block of padding per device, and no device more than a block over an even
    # share: at most GRADIENT_BLOCKS blocks (or one per device past that many devices).
    assert layout.rows - half < devices * layout.block
    assert layout.blocks <= max(lazy_openes.GRADIENT_BLOCKS, devices)
    assert layout.per_device <= -(-half // devices) + layout.block
    pairs, negatives = zip(*(layout.device_members(d) for d in range(devices)), strict=True)
    pair, negative = np.concatenate(pairs), np.concatenate(negatives)
    # Device d holds rows [d * per_device, (d + 1) * per_device): both members of each pair.
    by_device = pair.reshape(devices, 2, -1)
    np.testing.assert_array_equal(by_device[:, 0], by_device[:, 1])
    np.testing.assert_array_equal(by_device[:, 0].ravel(), np.arange(layout.rows))
    member = np.where(negative, pair + half, pair)
    # Gathered device by device, results go back to the population's order, padding dropped.
    np.testing.assert_array_equal(layout.in_member_order(jnp.asarray(member)), np.arange(2 * half))


def test_weighted_noise_is_the_weighted_sum_of_the_pairs_rows():
    """Summed block by block (here 25 blocks of 4 pairs, the last one part padding)."""
    half, num_dims = 99, 9
    key = jax.random.key(1)
    lazy = lazy_openes.LazyPopulation(
        mean=jnp.zeros(num_dims),
        std=jnp.float32(1.0),
        noise=jax.random.normal(key, (100, num_dims)),
        pair=jnp.arange(2 * half) % half,
        negative=jnp.arange(2 * half) >= half,
        first=jnp.int32(0),
        unravel=lambda flat: flat,
        layout=lazy_openes.PairLayout(half),
    )
    assert lazy.layout.block == 4 and lazy.layout.rows == 100
    weights = jax.random.normal(jax.random.key(2), (half,))
    want = np.asarray(weights, np.float64) @ np.asarray(lazy.noise[:half], np.float64)
    np.testing.assert_allclose(
        lazy_openes.weighted_noise(lazy, weights), want, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("name", "settings", "expected"),
    [
        ("open_es", {}, True),
        ("open_es", {"antithetic": False}, False),
        ("open_es", {"l2_penalty": 0.1}, False),
        ("snes", {}, False),
    ],
)
def test_applies_only_where_the_shortcut_is_exact(name, settings, expected):
    spec = load_strategy(name, {"popsize": 8, **settings})
    assert lazy_openes.applies(build_strategy(spec, num_dims=NUM_DIMS)) is expected


def test_rollout_of_lazy_members_equals_rollout_of_their_parameters():
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((4,)), 12, chunk_size=3)
    flat, unravel = ravel_pytree(ro.init_params(jax.random.key(0)))
    spec = load_strategy("open_es", {"popsize": 8})
    strategy = build_strategy(spec, num_dims=flat.size)
    state = strategy.init(jax.random.key(1), flat).replace(std=jnp.asarray(0.2, jnp.float32))
    lazy = lazy_openes.ask(strategy, jax.random.key(2), state, unravel)
    params = jax.vmap(unravel)(materialised(lazy))
    key = jax.random.key(7)
    # Up to the rounding of the members' multiply-add (see the ask test).
    np.testing.assert_allclose(
        ro.summary(key, lazy, 2).returns, ro.summary(key, params, 2).returns, rtol=1e-5
    )
    np.testing.assert_allclose(
        ro.population(key, lazy, 2).returns, ro.population(key, params, 2).returns, rtol=1e-5
    )


def test_lazy_population_is_the_protocol_the_rollout_and_engine_ask_for():
    """The rollout and sharding code see lazy members only through the protocol; the engine
    finds the form of a strategy through the registry, lazy only where it is exact."""
    from esjax._src.strategies.population import MATERIALISED, Population, Stacked, as_population
    from esjax._src.strategies.strategy import ADOPTED_FORMS, form_for

    strategy = open_es()
    lazy = lazy_openes.ask(strategy, jax.random.key(3), started(strategy), lambda flat: flat)
    assert isinstance(lazy, Population)
    assert not isinstance({"w": jnp.zeros((8, 3))}, Population)
    assert isinstance(as_population({"w": jnp.zeros((8, 3))}), Stacked)
    assert as_population(lazy) is lazy
    assert lazy_openes.LAZY_OPENES in ADOPTED_FORMS
    assert form_for(strategy) is lazy_openes.LAZY_OPENES
    assert form_for(open_es(antithetic=False)) is MATERIALISED


def test_memory_preflight_charges_what_each_strategy_holds(monkeypatch):
    """Antithetic OpenES holds half the noise, never a population: at a size whose three
    materialised ``popsize x num_dims`` arrays do not fit, it passes and OpenES without pairs
    (materialised) is refused. The bytes are counted here by hand from the shapes."""
    from esjax._src.engine.generation import member_layout
    from esjax._src.run import memory
    from esjax._src.strategies.strategy import population_floats

    ro = esjax.PopulationRollout("Pendulum-v1", MLP((64, 64)), 10)
    num_dims = memory.member_size(ro)
    assert num_dims == 3 * 64 + 64 + 64 * 64 + 64 + 64 + 1
    popsize = 4096

    layout = member_layout(ro)

    def needs(antithetic: bool) -> memory.MemoryEstimate:
        spec = load_strategy("open_es", {"popsize": popsize, "antithetic": antithetic})
        return memory.estimate(
            ro,
            lambda n: build_strategy(spec, n, popsize),
            lambda n: popsize,
            lambda strategy, devices, chunk_for: population_floats(
                strategy, layout, devices, chunk_for
            ),
            seeds=1,
            rollouts=1,
        )

    lazy, full = needs(True), needs(False)
    chunk = ro.chunk_members(popsize, 4 * num_dims)  # each member made whole in its chunk
    held = lazy_openes.PairLayout(popsize // 2, len(ro.devices)).per_device * num_dims
    held += chunk * num_dims
    assert held >= popsize // 2 * num_dims
    shared = len(ro.devices)  # CPU devices share the host's memory
    assert full.needed - lazy.needed == 4 * shared * (3 * popsize * num_dims - held)
    between = (lazy.needed + full.needed) // 2
    monkeypatch.setattr(memory, "available_memory", lambda devices: (between, "host memory"))
    assert needs(True).fits and not needs(False).fits
