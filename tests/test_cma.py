"""LazyCMA_ES against evosax's CMA_ES called directly on the same keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from evosax.algorithms import CMA_ES

from esjax._src.strategies.cma import LazyCMA_ES, pycma_gap, resolve_decomposition_every

NUM_DIMS = 12
POPSIZE = 10
# A shifted, ill-conditioned ellipsoid: minimum 0 at TARGET, axis scales 1 to 100.
TARGET = jnp.linspace(-1.0, 2.0, NUM_DIMS)
SCALES = jnp.logspace(0.0, 2.0, NUM_DIMS)


def ellipsoid(population: jax.Array) -> jax.Array:
    return jnp.sum((SCALES * (population - TARGET)) ** 2, axis=-1)


def run(es, params, generations: int, seed: int = 0):
    """A plain Python loop of ask / evaluate / tell; every population and state, in order."""
    state = es.init(jax.random.key(seed), jnp.zeros(NUM_DIMS), params)
    history = []
    for key in jax.random.split(jax.random.key(seed + 1), generations):
        k_ask, k_tell = jax.random.split(key)
        population, state = es.ask(k_ask, state, params)
        state, _ = es.tell(k_tell, population, ellipsoid(population), state, params)
        history.append((population, state))
    return history


def test_every_generation_is_evosax_cma_es_with_k_1():
    """Same population and state, bit for bit, each generation on the same keys."""
    reference = CMA_ES(POPSIZE, jnp.zeros(NUM_DIMS))
    lazy = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=1)
    params = reference.default_params.replace(std_init=jnp.asarray(0.5))
    for (pop_ref, state_ref), (pop_lazy, state_lazy) in zip(
        run(reference, params, 25), run(lazy, params, 25), strict=True
    ):
        np.testing.assert_array_equal(pop_lazy, pop_ref)
        for ref, mine in zip(jax.tree.leaves(state_ref), jax.tree.leaves(state_lazy), strict=True):
            np.testing.assert_array_equal(mine, ref)


def test_factors_are_refreshed_only_every_k_generations():
    lazy = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=4)
    params = lazy.default_params.replace(std_init=jnp.asarray(0.5))
    history = run(lazy, params, 9)
    factors = [np.asarray(state.B) for _, state in history]
    for g in range(1, 9):  # generation g's ask refreshes exactly when g % 4 == 0
        changed = not np.array_equal(factors[g], factors[g - 1])
        assert changed == (g % 4 == 0), g


@pytest.mark.parametrize("every", [3, 10])
def test_lazy_factors_reach_the_same_optimum(every):
    lazy = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=every)
    reference = CMA_ES(POPSIZE, jnp.zeros(NUM_DIMS))
    params = reference.default_params.replace(std_init=jnp.asarray(0.5))
    for es in (reference, lazy):
        _, state = run(es, params, 400)[-1]
        np.testing.assert_allclose(state.mean, TARGET, atol=1e-3)
        assert float(ellipsoid(state.mean[None])[0]) < 1e-4


def scanned_runs(es, params, seeds: jax.Array, generations: int = 8):
    """Runs vmapped over seeds, generations in ``lax.scan``, as the engine runs them."""

    def one_run(seed):
        state = es.init(jax.random.key(seed), jnp.zeros(NUM_DIMS), params)

        def generation(state, key):
            k_ask, k_tell = jax.random.split(key)
            population, state = es.ask(k_ask, state, params)
            state, _ = es.tell(k_tell, population, ellipsoid(population), state, params)
            return state, (population, state.B)

        keys = jax.random.split(jax.random.fold_in(jax.random.key(7), seed), generations)
        return jax.lax.scan(generation, state, keys)

    return jax.jit(jax.vmap(one_run))(seeds)


def test_seed_vmap_with_k_1_is_vmapped_evosax():
    reference = CMA_ES(POPSIZE, jnp.zeros(NUM_DIMS))
    lazy = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=1)
    params = reference.default_params.replace(std_init=jnp.asarray(0.5))
    seeds = jnp.arange(3)
    ref_state, (ref_pops, _) = scanned_runs(reference, params, seeds)
    state, (pops, _) = scanned_runs(lazy, params, seeds)
    np.testing.assert_array_equal(pops, ref_pops)
    np.testing.assert_array_equal(state.C, ref_state.C)


def test_seed_vmap_refreshes_each_run_on_its_own_schedule():
    """Under vmap the refresh is one branch for all runs, still only every k generations."""
    lazy = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=3)
    params = lazy.default_params.replace(std_init=jnp.asarray(0.5))
    _, (pops, factors) = scanned_runs(lazy, params, jnp.arange(3))
    assert np.all(np.isfinite(np.asarray(pops)))
    for i in range(3):
        for g in range(1, 8):  # refreshed by the asks of generations 3 and 6 only
            changed = not np.array_equal(factors[i, g], factors[i, g - 1])
            assert changed == (g % 3 == 0), (i, g)


def test_auto_gap_follows_pycma_rule():
    # pycma: 1 / (10 n (c_1 + c_mu)); c_1 = 2 / ((n + 1.3)^2 + mu_eff) and c_mu as evosax's.
    params = CMA_ES(26, jnp.zeros(1217)).default_params
    expected = int(1.0 / (10 * 1217 * (float(params.c_1) + float(params.c_mu))))
    assert resolve_decomposition_every("auto", 1217, 26) == expected == 9
    assert pycma_gap(10, 0.5, 0.5) == 1  # small problems decompose every generation
    assert resolve_decomposition_every(5, 1217, 26) == 5


def test_step_size_cap_bounds_csa_and_leaves_the_rest_to_evosax():
    """With a cap decay the step size is evosax's CSA value, clipped at std_init * decay ** g."""
    decay = 0.8
    reference = CMA_ES(POPSIZE, jnp.zeros(NUM_DIMS))
    capped = LazyCMA_ES(POPSIZE, jnp.zeros(NUM_DIMS), decomposition_every=1, std_cap_decay=decay)
    params = reference.default_params.replace(std_init=jnp.asarray(0.5))
    # One tell from the same state: only the step size may differ, and only by the cap.
    state = reference.init(jax.random.key(0), jnp.zeros(NUM_DIMS), params)
    population, state = reference.ask(jax.random.key(1), state, params)
    fitness = ellipsoid(population)
    want, _ = reference.tell(jax.random.key(2), population, fitness, state, params)
    got, _ = capped.tell(jax.random.key(2), population, fitness, state, params)
    np.testing.assert_array_equal(got.mean, want.mean)
    np.testing.assert_array_equal(got.C, want.C)
    assert float(got.std) == pytest.approx(min(float(want.std), 0.5 * decay))
    # Over a run the cap holds every generation, and it binds.
    history = run(capped, params, 12)
    stds = np.array([float(s.std) for _, s in history])
    caps = 0.5 * decay ** np.arange(1, 13)
    assert np.all(stds <= caps * (1 + 1e-6))
    assert np.any(np.isclose(stds, caps))
