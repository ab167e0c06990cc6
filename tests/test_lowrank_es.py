"""The low-rank strategy (esjax._src.strategies.lowrank_es) against references computed another way:
its lazy members against the population its evosax-API ``ask`` materialises, its update from
thin factors against the dense sum over that population, and the claim that its update has
OpenES's scale (so OpenES's learning rates carry over) against sampled statistics."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from esjax._src.policies.perturb import LowRank, Plan, materialise
from esjax._src.strategies.fitness import to_fitness
from esjax._src.strategies.lowrank_es import Layout, LowRank_ES
from esjax._src.strategies.population import MemberLayout, PairedForm
from esjax._src.strategies.strategy import (
    build_strategy,
    form_for,
    load_strategy,
    population_floats,
)

# A member's parameters as a policy has them: a dense layer, a conv kernel, a bias.
TREE = {
    "Conv_0": {"kernel": jnp.zeros((3, 3, 2, 4)), "bias": jnp.zeros((4,))},
    "Dense_0": {"kernel": jnp.zeros((5, 7)), "bias": jnp.zeros((7,))},
}
FLAT, UNRAVEL = ravel_pytree(TREE)
NUM_DIMS = FLAT.size
# Where a network would multiply each leaf (leaves in order: the conv's bias, its HWIO kernel,
# the dense bias, its kernel): the conv kernel as (3 3 2) x 4, the dense kernel as 5 x 7.
PLAN = Plan((None, 3, None, 1))
LAYOUT = MemberLayout.of(UNRAVEL, NUM_DIMS, lambda: PLAN)


def ask(strategy, key, state, layout=LAYOUT):
    return form_for(strategy).ask(strategy, key, state, layout, None)[0]


def tell(strategy, key, members, fitness, state):
    return form_for(strategy).tell(strategy, key, members, fitness, state)


def lowrank(popsize=16, rank=1, antithetic=True, **settings):
    """The run's strategy (built as esjax builds it) and the same algorithm over ``TREE``."""
    settings = {"popsize": popsize, "rank": rank, "antithetic": antithetic, **settings}
    strategy = build_strategy(load_strategy("lowrank_es", settings), NUM_DIMS)
    es = strategy.es
    over_tree = LowRank_ES(popsize, TREE, rank=rank, use_antithetic_sampling=antithetic,
                           optimizer=es.optimizer, std_schedule=es.std_schedule,
                           fitness_shaping_fn=es.fitness_shaping_fn)  # fmt: skip
    return strategy, dataclasses.replace(strategy, es=over_tree)


def test_it_is_found_by_name_and_its_form_applies():
    strategy, _ = lowrank(rank=2, std_init=0.3)
    assert type(strategy.es) is LowRank_ES and strategy.es.rank == 2
    assert form_for(strategy) is LowRank_ES.form and isinstance(LowRank_ES.form, PairedForm)
    assert float(strategy.es.std_schedule(0)) == pytest.approx(0.3)


@pytest.mark.parametrize(("rank", "antithetic"), [(1, True), (3, True), (2, False)])
def test_each_lazy_member_is_the_materialised_population_row(rank, antithetic):
    _, strategy = lowrank(rank=rank, antithetic=antithetic, std_init=0.4)
    state = strategy.init(jax.random.key(0), jnp.linspace(-1.0, 1.0, NUM_DIMS))
    key = jax.random.key(3)
    matrix, _ = strategy.es._ask(strategy.noise_key(key), state, strategy.params)
    members = ask(strategy, key, state)
    for member in range(strategy.popsize):
        params = members.member(jnp.int32(member))
        kernels = [
            leaf for leaf in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, LowRank))
        ]
        assert sum(isinstance(leaf, LowRank) for leaf in kernels) == 2  # both matrices
        row = ravel_pytree(materialise(params))[0]
        np.testing.assert_allclose(row, matrix[member], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(members.member_flat(member), matrix[member], rtol=1e-6)
    if antithetic:  # pairs: the second half is the first's negative
        half = strategy.popsize // 2
        mean = state.mean
        np.testing.assert_allclose(matrix[half:] - mean, -(matrix[:half] - mean), atol=1e-6)


def test_a_matrix_perturbation_has_the_rank_asked_for():
    _, strategy = lowrank(rank=2)
    state = strategy.init(jax.random.key(0), jnp.zeros(NUM_DIMS))
    matrix, _ = strategy.es._ask(jax.random.key(1), state, strategy.params)
    dense = UNRAVEL(matrix[0])["Dense_0"]["kernel"]
    assert np.linalg.matrix_rank(np.asarray(dense), tol=1e-5) == 2
    conv = UNRAVEL(matrix[0])["Conv_0"]["kernel"].reshape(18, 4)
    assert np.linalg.matrix_rank(np.asarray(conv), tol=1e-5) == 2


@pytest.mark.parametrize("antithetic", [True, False])
def test_lazy_tells_equal_evosax_tells_on_the_materialised_population(antithetic):
    """Two generations: the lazy path (thin factors) against evosax's own ``Open_ES.tell``
    handed the population matrix the low-rank ``ask`` made: evosax recovers the noise as
    ``(x - mean) / std`` and takes OpenES's gradient and optimizer step from it."""
    from evosax.algorithms import Open_ES

    _, strategy = lowrank(rank=2, antithetic=antithetic, learning_rate=0.05, std_init=0.5)
    es = strategy.es
    openes = Open_ES(
        16,
        FLAT,
        use_antithetic_sampling=antithetic,
        optimizer=es.optimizer,
        std_schedule=es.std_schedule,
        fitness_shaping_fn=es.fitness_shaping_fn,
    )
    mean = jnp.linspace(-1.0, 1.0, NUM_DIMS)
    lazy_state = start = strategy.init(jax.random.key(0), mean)
    matrix_state = openes.init(jax.random.key(0), mean, openes.default_params)
    for generation in range(2):
        key = jax.random.key(10 + generation)
        members = ask(strategy, key, lazy_state)
        matrix, _ = es._ask(strategy.noise_key(key), lazy_state, strategy.params)
        fitness = to_fitness(jnp.cos(jnp.arange(16.0) * (generation + 2)))
        lazy_state = tell(strategy, key, members, fitness, lazy_state)
        matrix_state, _ = openes.tell(key, matrix, fitness, matrix_state, openes.default_params)
        np.testing.assert_allclose(lazy_state.mean, matrix_state.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lazy_state.best_solution, matrix_state.best_solution,
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    assert not np.allclose(lazy_state.mean, start.mean)
    assert int(lazy_state.generation_counter) == 2


def test_the_update_from_thin_factors_is_the_dense_weighted_sum():
    layout = Layout.of_tree(TREE, rank=3)
    key = jax.random.key(5)
    weights = jax.random.normal(jax.random.key(6), (37,))
    dense = sum(w * layout.delta(layout.noise(key, jnp.int32(p))) for p, w in enumerate(weights))
    np.testing.assert_allclose(layout.weighted_sum(key, weights), dense, rtol=1e-4, atol=1e-5)


def test_blocks_of_pairs_do_not_change_the_update(monkeypatch):
    """The update is drawn a block of pairs at a time; blocks of one pair give the same sum."""
    import esjax._src.strategies.lowrank_es as module

    layout = Layout.of_tree(TREE, rank=2)
    key, weights = jax.random.key(7), jax.random.normal(jax.random.key(8), (50,))
    whole = layout.weighted_sum(key, weights)
    monkeypatch.setattr(module, "BLOCK_FLOATS", layout.pair_floats * 3)  # 17 blocks, one ragged
    assert layout.block(50) == 3
    np.testing.assert_allclose(layout.weighted_sum(key, weights), whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rank", [1, 4])
def test_a_perturbation_entry_has_openes_scale(rank):
    """Each entry of ``A Bᵀ / sqrt(r)`` has mean 0 and variance 1, like OpenES's ``z``, and
    two entries are uncorrelated: ``E[z zᵀ] = I`` for both strategies."""
    layout = Layout(((6, 5),), (1,), rank)
    draws = jax.vmap(lambda p: layout.delta(layout.noise(jax.random.key(0), p)))(
        jnp.arange(20_000, dtype=jnp.int32)
    )
    draws = np.asarray(draws, np.float64)
    moments = draws.T @ draws / len(draws)
    # Standard error of a mean of z^2 (variance 9 at rank 1) over 20k draws: ~0.02.
    np.testing.assert_allclose(np.diag(moments), 1.0, atol=0.12)
    off = moments[~np.eye(30, dtype=bool)]
    assert np.abs(off).max() < 0.12 and abs(draws.mean()) < 0.02


def test_the_update_has_openes_expected_value():
    """On a linear fitness ``c . x`` (identity shaping), both strategies' gradient estimates
    average to ``c``: the same update in expectation, so a learning rate carries over."""
    c = jax.random.normal(jax.random.key(1), (NUM_DIMS,))
    estimates = {}
    for name in ("lowrank_es", "open_es"):
        settings = {"popsize": 512, "fitness_shaping": "identity", "std_init": 0.1,
                    "optimizer": "sgd", "learning_rate": 1.0, "momentum": 0.0}  # fmt: skip
        if name == "lowrank_es":  # rank 4: the 1 / sqrt(r) scaling matters
            settings["rank"] = 4
        strategy = build_strategy(load_strategy(name, settings), NUM_DIMS)
        start = strategy.init(jax.random.key(0), jnp.zeros(NUM_DIMS))

        @jax.jit
        def step(key, strategy=strategy, start=start):
            population = ask(strategy, key, start)
            rows = jax.vmap(population.member_flat)(jnp.arange(512))
            # evosax minimises: fitness -c.x, so the descent step moves the mean along +c.
            return tell(strategy, key, population, -(rows @ c), start).mean

        estimates[name] = np.mean([step(jax.random.key(s)) for s in range(40)], axis=0)
    for name, estimate in estimates.items():
        cosine = estimate @ c / np.linalg.norm(estimate) / np.linalg.norm(c)
        assert cosine > 0.97, name
        assert np.linalg.norm(estimate) / np.linalg.norm(c) == pytest.approx(1.0, abs=0.1), name


def test_the_preflight_charges_no_population_but_a_chunks_factors():
    """What a generation holds does not grow with popsize (a full-rank OpenES's does); what
    grows is a chunk's members, each holding its factors ``(rows + columns) r`` per matrix."""
    matrix = MemberLayout.of(lambda x: x.reshape(1000, 1000), 1_000_000, lambda: Plan((1,)))

    def held(name, popsize, chunk=256, rank=1):
        settings = {"popsize": popsize, **({"rank": rank} if name == "lowrank_es" else {})}
        strategy = build_strategy(load_strategy(name, settings), 1_000_000)
        return population_floats(strategy, matrix, 1, lambda member_bytes: chunk)

    small, large = held("lowrank_es", 256), held("lowrank_es", 65_536)
    assert small == large < 10_000_000
    assert held("lowrank_es", 256, chunk=512) - small == 256 * 2000  # 256 more members' factors
    assert held("lowrank_es", 256, rank=4) - small == 256 * 2000 * 3
    assert held("open_es", 65_536) > 1000 * large


def test_no_cost_warning_at_65536_members_of_a_million_parameters():
    """Its ``tell`` multiplies thin factors (one multiply-add per entry of a pair's product),
    far below 20-step rollouts; OpenES's Gaussian per entry is warned about there."""
    from esjax._src.strategies.strategy import strategy_cost_hint

    def built(name: str, **settings):
        spec = load_strategy(name, {"popsize": 65536, **settings})
        return build_strategy(spec, 1_054_721)

    assert strategy_cost_hint(built("lowrank_es"), steps_per_member=20) is None
    # r multiply-adds per entry and pair: at rank 64 the update rivals 20-step rollouts.
    assert strategy_cost_hint(built("lowrank_es", rank=64), steps_per_member=20) is not None
    hint = strategy_cost_hint(built("open_es"), steps_per_member=20)
    assert hint is not None and "open_es" in hint.lower()


@pytest.mark.parametrize(
    ("setting", "value"), [("l2_penalty", 0.1), ("noise_prng", "rbg"), ("noise_prng", "unsafe_rbg")]
)
def test_settings_it_cannot_honour_are_refused_when_built(setting, value):
    """An L2 penalty reads members it never forms; rbg keys draw a member's factors
    differently alone and in a batch (so a pair would not be antithetic, and ``tell`` would
    weigh noise nobody was evaluated on)."""
    from esjax._src.specs.config import ConfigError

    with pytest.raises(ConfigError, match=setting) as refused:
        lowrank(**{setting: value})
    assert "\n" not in str(refused.value)


def test_rbg_keys_would_break_the_pairs():
    """Why ``noise_prng`` stays threefry: with an rbg key, a member's factors drawn inside a
    batch are not the ones drawn alone."""
    layout = Layout.of_tree(TREE, rank=1)
    for impl, same in (("threefry2x32", True), ("rbg", False)):
        key = jax.random.key(3, impl=impl)
        alone = layout.delta(layout.noise(key, jnp.int32(5)))
        batch = jax.vmap(lambda p, key=key: layout.delta(layout.noise(key, p)))(jnp.arange(8))
        assert np.allclose(alone, batch[5]) == same, impl


def test_rank_zero_is_refused():
    from esjax._src.specs.config import ConfigError

    with pytest.raises(ConfigError, match="rank"):
        lowrank(rank=0)
