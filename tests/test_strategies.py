"""Strategy presets, settings validation, the sign convention and the NaN guard."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax import presets
from esjax.config import ConfigError
from esjax.fitness import (
    group_members,
    member_returns,
    return_stats,
    to_fitness,
    to_return,
    ungroup_members,
)
from esjax.strategies import (
    ALGORITHMS,
    build_strategy,
    load_strategy,
    parse_strategy,
    resolve_popsize,
    strategy_cost_hint,
)

PRESETS = presets.names("strategy")


def test_required_presets_ship():
    assert {"open_es", "cma_es", "sep_cma_es", "snes", "pgpe"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds_and_steps_in_scan(name):
    spec = load_strategy(name, {"popsize": 8})
    strategy = build_strategy(spec, num_dims=5)
    target = jnp.arange(5.0) / 5

    def generation(state, key):
        k_ask, k_tell = jax.random.split(key)
        population, state = strategy.ask(k_ask, state)
        returns = -jnp.sum((population - target) ** 2, axis=-1)
        return strategy.tell(k_tell, population, to_fitness(returns), state), None

    state = strategy.init(jax.random.key(0), jnp.zeros(5))
    state, _ = jax.jit(
        lambda s: jax.lax.scan(generation, s, jax.random.split(jax.random.key(1), 3))
    )(state)
    assert strategy.mean(state).shape == (5,)
    assert np.all(np.isfinite(np.asarray(strategy.mean(state))))


def test_unknown_strategy_lists_valid_names():
    with pytest.raises(
        ConfigError, match=r"unknown strategy 'open-es' \(did you mean 'open_es'\?\)"
    ):
        load_strategy("open-es")
    with pytest.raises(ConfigError, match=r"valid strategy names: .*cma_es.*open_es"):
        load_strategy("nope")


def test_unknown_setting_lists_valid_ones():
    with pytest.raises(ConfigError) as err:
        load_strategy("open_es", {"learnin_rate": 0.1})
    message = str(err.value)
    assert "did you mean 'learning_rate'" in message
    assert "valid settings:" in message and "std_init" in message
    assert "\n" not in message
    # CMA-ES has no optimizer: the setting is rejected, not silently ignored.
    with pytest.raises(ConfigError, match="CMA_ES has no setting 'learning_rate'"):
        load_strategy("cma_es", {"learning_rate": 0.1})


def test_bad_values_and_algorithms():
    with pytest.raises(ConfigError, match="choose from sgd, adam, clipup"):
        load_strategy("open_es", {"optimizer": "adamw"})
    with pytest.raises(ConfigError, match="std_init must be a number"):
        load_strategy("open_es", {"std_init": "big"})
    with pytest.raises(ConfigError, match=r"valid algorithms: .*Open_ES"):
        parse_strategy("x", {"algorithm": "OpenES"}, "x.toml")
    with pytest.raises(ConfigError, match="unknown key 'setting'"):
        parse_strategy("x", {"algorithm": "Open_ES", "setting": {}}, "x.toml")


def test_popsize_rules():
    spec = load_strategy("open_es")
    with pytest.raises(ConfigError, match="must be even"):
        resolve_popsize(spec, 100, 7)
    cma = load_strategy("cma_es")
    assert resolve_popsize(cma, 1000, None) == 4 + int(3 * np.log(1000)) + (
        (4 + int(3 * np.log(1000))) % 2
    )
    assert resolve_popsize(spec, 100, None) == spec.settings["popsize"]


def test_every_algorithm_has_a_preset_and_settings_are_documented():
    algorithms = {load_strategy(name).algorithm for name in PRESETS}
    assert algorithms == set(ALGORITHMS)
    for table in ALGORITHMS.values():
        assert all(setting.help for setting in table.values())


@pytest.mark.parametrize("mirrored", [True, False])
def test_member_groups_round_trip(mirrored):
    x = jnp.arange(16.0)
    grouped = group_members(x, 4, mirrored)
    assert grouped.shape == (4, 4)
    np.testing.assert_array_equal(ungroup_members(grouped, mirrored), x)
    if mirrored:  # member i and its mirror i + 8 land in the same group
        for row in np.asarray(grouped):
            assert {int(v) % 8 for v in row[:2]} == {int(v) % 8 for v in row[2:]}


def test_grouped_ranks_compare_members_within_their_group():
    spec = load_strategy("open_es", {"popsize": 8, "env_groups": 2})
    strategy = build_strategy(spec, num_dims=2)
    shaped = np.asarray(
        strategy.es.fitness_shaping_fn(jnp.zeros((8, 2)), jnp.arange(8.0), None, None)
    )
    # Groups {0, 1, 4, 5} and {2, 3, 6, 7}: each gets its own centred ranks.
    np.testing.assert_allclose(shaped[[0, 1, 4, 5]], [-0.5, -1 / 6, 1 / 6, 0.5], rtol=1e-6)
    np.testing.assert_allclose(shaped[[2, 3, 6, 7]], [-0.5, -1 / 6, 1 / 6, 0.5], rtol=1e-6)
    with pytest.raises(ConfigError, match="does not split into env_groups = 3"):
        build_strategy(load_strategy("open_es", {"popsize": 8, "env_groups": 3}), 2)


def test_zero_mean_init():
    spec = load_strategy("open_es", {"popsize": 8, "mean_init": "zeros"})
    strategy = build_strategy(spec, num_dims=3)
    np.testing.assert_array_equal(strategy.initial_mean(jnp.ones(3)), jnp.zeros(3))
    own = build_strategy(load_strategy("open_es", {"popsize": 8, "mean_init": "policy"}), 3)
    np.testing.assert_array_equal(own.initial_mean(jnp.ones(3)), jnp.ones(3))


def test_sign_lives_in_one_place():
    returns = jnp.array([1.0, 3.0, 2.0])
    fitness = to_fitness(returns)
    assert int(jnp.argmin(fitness)) == 1  # highest return = lowest fitness
    np.testing.assert_array_equal(to_return(fitness), returns)


def test_nonfinite_returns_rank_worst_and_stay_finite():
    returns = jnp.array([-5.0, jnp.nan, 2.0, jnp.inf, -jnp.inf, 0.0])
    fitness = to_fitness(returns)
    assert np.all(np.isfinite(np.asarray(fitness)))
    worst_finite_fitness = 5.0  # the return -5 as a fitness
    for i in (1, 3, 4):
        assert fitness[i] > worst_finite_fitness
    assert int(jnp.argmin(fitness)) == 2
    np.testing.assert_array_equal(to_fitness(jnp.full(4, jnp.nan)), jnp.zeros(4))
    stats = return_stats(returns)
    assert int(stats["nonfinite"]) == 3
    assert float(stats["fitness_best"]) == 2.0
    assert np.isclose(float(stats["fitness_mean"]), (-5.0 + 2.0 + 0.0) / 3)
    # One NaN rollout makes the whole member non-finite.
    per_member = member_returns(jnp.array([[1.0, jnp.nan], [1.0, 2.0]]))
    assert np.isnan(per_member[0]) and per_member[1] == 1.5


@pytest.mark.parametrize("name", PRESETS)
def test_nan_fitness_never_poisons_the_state(name):
    spec = load_strategy(name, {"popsize": 8})
    strategy = build_strategy(spec, num_dims=4)
    state = strategy.init(jax.random.key(0), jnp.zeros(4))
    for i in range(3):
        population, state = strategy.ask(jax.random.key(i), state)
        returns = -jnp.sum(population**2, axis=-1)
        returns = returns.at[::3].set(jnp.nan).at[1].set(-jnp.inf)
        state = strategy.tell(jax.random.key(10 + i), population, to_fitness(returns), state)
    leaves = [
        np.asarray(x) for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    assert all(np.all(np.isfinite(x)) for x in leaves), name


def test_open_es_maximises_returns():
    spec = load_strategy("open_es", {"popsize": 32, "learning_rate": 0.1})
    strategy = build_strategy(spec, num_dims=3)
    target = jnp.array([1.0, -1.0, 0.5])
    state = strategy.init(jax.random.key(0), jnp.zeros(3))
    for i in range(40):
        population, state = strategy.ask(jax.random.key(i), state)
        returns = -jnp.sum((population - target) ** 2, axis=-1)  # higher is better
        state = strategy.tell(jax.random.key(100 + i), population, to_fitness(returns), state)
    assert float(jnp.sum((strategy.mean(state) - target) ** 2)) < 0.1


def test_cheap_noise_prng_is_deterministic():
    spec = load_strategy("open_es", {"popsize": 8, "noise_prng": "rbg"})
    strategy = build_strategy(spec, num_dims=4)
    state = strategy.init(jax.random.key(0), jnp.zeros(4))
    a, _ = strategy.ask(jax.random.key(3), state)
    b, _ = strategy.ask(jax.random.key(3), state)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:4], -a[4:])  # still mirrored


def test_cost_hint_flags_strategies_that_rival_the_rollouts():
    cma = load_strategy("cma_es")
    assert "CMA_ES" in strategy_cost_hint(cma, 4481, 2048, 200)
    assert strategy_cost_hint(load_strategy("open_es"), 4481, 2048, 200) is None
    # Very short episodes leave the Gaussian draw as the larger share.
    assert strategy_cost_hint(load_strategy("open_es"), 4481, 2048, 5) is not None
