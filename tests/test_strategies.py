"""Strategy presets, settings validation, the sign convention and the NaN guard."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import evosax.algorithms as ea
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from evosax.core import fitness_shaping as shaping

from esjax._src.specs import presets
from esjax._src.specs.config import ConfigError
from esjax._src.strategies import algorithms
from esjax._src.strategies.fitness import (
    group_members,
    member_returns,
    return_stats,
    to_fitness,
    to_return,
    ungroup_members,
)
from esjax._src.strategies.strategy import (
    build_strategy,
    catalogue,
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


@pytest.mark.parametrize(
    ("strategy", "setting", "value", "wanted"),
    [
        ("open_es", "std_init", 0.0, "above 0"),
        ("open_es", "std_init", -0.1, "above 0"),
        ("SimpleGA", "std_init", 0, "above 0"),
        ("open_es", "learning_rate", 0.0, "above 0"),
        ("open_es", "lr_decay", -0.9, "at or above 0"),
        ("open_es", "lr_min", -1e-3, "at or above 0"),
        ("open_es", "std_decay", -0.5, "at or above 0"),
        ("open_es", "std_min", -0.01, "at or above 0"),
    ],
)
def test_stds_steps_decays_and_floors_below_their_range_are_refused(
    strategy, setting, value, wanted
):
    """A std or step of 0 or below searches nowhere (or flips the direction), a negative decay
    alternates the sign each generation: each is one line naming the setting, not a run that
    silently goes nowhere. The edges that do make sense (a decay of 0 means constant, a floor of
    0 means none) pass."""
    with pytest.raises(ConfigError, match=rf"{setting} must be a number {wanted}, got "):
        load_strategy(strategy, {setting: value})
    for edge in ("lr_decay", "lr_min", "std_decay", "std_min"):
        assert load_strategy("open_es", {edge: 0.0}).settings[edge] == 0.0


def test_popsize_rules():
    spec = load_strategy("open_es")
    with pytest.raises(ConfigError, match="must be even"):
        resolve_popsize(spec, 100, 7)
    cma = load_strategy("cma_es")
    cma = dataclasses.replace(cma, settings={**cma.settings, "popsize": "auto"})
    assert resolve_popsize(cma, 1000, None) == 4 + int(3 * np.log(1000)) + (
        (4 + int(3 * np.log(1000))) % 2
    )
    assert resolve_popsize(spec, 100, None) == spec.settings["popsize"]


def test_rollouts_multiplier_scales_the_tasks_episodes_unless_rollouts_are_given():
    from esjax._src.run.training import resolve_config

    multiplier = load_strategy("cma_es").loop.rollouts_multiplier
    assert multiplier > 1  # the preset asks for quieter returns than one episode gives
    assert resolve_config("pendulum").rollouts == 1  # open_es: the task's own count
    assert resolve_config("pendulum", strategy="cma_es").rollouts == multiplier
    assert resolve_config("pendulum-sign", strategy="cma_es").rollouts == 8 * multiplier
    # Rollouts given explicitly, as a flag or as a task override, are used as given.
    assert resolve_config("pendulum", strategy="cma_es", rollouts=2).rollouts == 2
    assert resolve_config("pendulum", strategy="cma_es", overrides=["rollouts=3"]).rollouts == 3
    over = ["strategy_settings.rollouts_multiplier=3"]
    assert resolve_config("cartpole", strategy="xnes", overrides=over).rollouts == 2 * 3
    with pytest.raises(ConfigError, match="rollouts_multiplier must be a positive integer"):
        resolve_config("pendulum", overrides=["strategy_settings.rollouts_multiplier=0"])


def test_a_config_written_before_rollouts_multiplier_still_resumes():
    from esjax._src.run.training import _strategy_spec, resolve_config
    from esjax._src.specs.config import RunConfig

    data = resolve_config("pendulum", strategy="cma_es").to_json()
    loop = data.pop("loop")  # before the loop table, the strategy's settings held it ...
    del loop["rollouts_multiplier"]  # ... and before that, no multiplier at all
    data["strategy"]["settings"].update(loop)
    # What such a run stored; a resume reads its rollouts, not the multiplier.
    config = RunConfig.from_json({**data, "rollouts": 1}, "config.json")
    assert _strategy_spec(config).loop.rollouts_multiplier == 1
    assert "rollouts_multiplier" not in _strategy_spec(config).settings


def test_every_preset_names_an_evosax_algorithm_and_settings_are_documented():
    for name in PRESETS:
        algorithm = load_strategy(name).algorithm
        assert algorithm in algorithms.REGISTRY
        assert all(setting.help for setting in algorithms.settings_table(algorithm).values())


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
    def built(name: str):
        return build_strategy(load_strategy(name), 4481, 2048)

    assert "CMA_ES" in strategy_cost_hint(built("cma_es"), 200)
    assert strategy_cost_hint(built("open_es"), 200) is None
    # Very short episodes leave the Gaussian draw as the larger share.
    assert strategy_cost_hint(built("open_es"), 5) is not None


# ------------------------------------------------------------- every evosax algorithm by name
# Each esjax path is checked against evosax called directly: the reference below builds the
# evosax class by hand with the arguments esjax documents for that algorithm (esjax's std_init
# 0.1, Adam 0.05 with b1 0.9 where the constructor takes an optimizer, evosax's default fitness
# shaping) and runs init/ask/tell with the same keys.
_ADAM = optax.adam(optax.constant_schedule(0.05), b1=0.9)
_STD = optax.constant_schedule(0.1)
_SGD = optax.sgd(1.0)
REFERENCES = {
    "xNES": (lambda n, d: ea.xNES(n, jnp.zeros(d), optimizer=_ADAM), {"std_init": 0.1}),
    "ARS": (
        lambda n, d: ea.ARS(n, jnp.zeros(d), optimizer=_ADAM, std_schedule=_STD),
        {"std_init": 0.1},
    ),
    "DES": (lambda n, d: ea.DiscoveredES(n, jnp.zeros(d), optimizer=_ADAM), {"std_init": 0.1}),
    "MA_ES": (lambda n, d: ea.MA_ES(n, jnp.zeros(d)), {"std_init": 0.1}),
    "CR_FM_NES": (lambda n, d: ea.CR_FM_NES(n, jnp.zeros(d)), {"std_init": 0.1}),
    "iAMaLGaM_Univariate": (
        lambda n, d: ea.iAMaLGaM_Univariate(n, jnp.zeros(d), std_schedule=_STD),
        {},
    ),
    "LES": (lambda n, d: ea.LearnedES(n, jnp.zeros(d)), {"std_init": 0.1}),
    "DifferentialEvolution": (lambda n, d: ea.DifferentialEvolution(n, jnp.zeros(d)), {}),
    "SimpleGA": (lambda n, d: ea.SimpleGA(n, jnp.zeros(d), std_schedule=_STD), {}),
    "PSO": (lambda n, d: ea.PSO(n, jnp.zeros(d)), {}),
    "LGA": (lambda n, d: ea.LearnedGA(n, jnp.zeros(d)), {"std_init": 0.1}),
}


def _with_defaults(params, values):
    replaced = {}
    for name, value in values.items():
        default = getattr(params, name)
        replaced[name] = jnp.asarray(value, default.dtype) if hasattr(default, "dtype") else value
    return params.replace(**replaced)


def _assert_trees_equal(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", list(REFERENCES))
def test_discovered_algorithm_matches_evosax_called_directly(name):
    popsize, num_dims, generations = 8, 5, 3
    target = jnp.linspace(-0.5, 0.5, num_dims)

    def fitness(population):  # evosax minimises; no sign flip needed at this level
        return jnp.sum((population - target) ** 2, axis=-1)

    strategy = build_strategy(load_strategy(name, {"popsize": popsize}), num_dims)
    make, params_values = REFERENCES[name]
    es = make(popsize, num_dims)
    params = _with_defaults(es.default_params, params_values)
    mean = jnp.full((num_dims,), 0.2)
    k_init, *keys = jax.random.split(jax.random.key(7), 1 + 2 * generations)

    state = strategy.init(k_init, mean)
    if strategy.population_based:
        # evosax starts from an evaluated population: esjax's first generation evaluates
        # mean + std_init * N(0, I) drawn with the init key, then calls evosax's init.
        first = mean + 0.1 * jax.random.normal(k_init, (popsize, num_dims))
        population, state = strategy.ask(keys[0], state)
        np.testing.assert_array_equal(population, first)
        state = strategy.tell(keys[1], population, fitness(population), state)
        ref = es.init(keys[1], first, fitness(first), params)
        start = 1
    else:
        ref = es.init(k_init, mean, params)
        start = 0
    for g in range(start, generations):
        k_ask, k_tell = keys[2 * g], keys[2 * g + 1]
        population, state = strategy.ask(k_ask, state)
        ref_population, ref = es.ask(k_ask, ref, params)
        np.testing.assert_array_equal(population, ref_population)
        state = strategy.tell(k_tell, population, fitness(population), state)
        ref, _ = es.tell(k_tell, ref_population, fitness(ref_population), ref, params)
    inner = state.algorithm if strategy.population_based else state
    _assert_trees_equal(inner, ref)
    if strategy.population_based:  # the deployed member is evosax's best of the population
        np.testing.assert_array_equal(strategy.mean(state), es.get_best_solution(ref))


@pytest.mark.parametrize("name", [n for n in algorithms.REGISTRY if algorithms.refusal(n) is None])
def test_every_runnable_algorithm_steps_in_scan(name):
    strategy = build_strategy(load_strategy(name, {"popsize": 8}), num_dims=4)
    target = jnp.arange(4.0) / 4

    def generation(state, key):
        k_ask, k_tell = jax.random.split(key)
        population, state = strategy.ask(k_ask, state)
        returns = -jnp.sum((population - target) ** 2, axis=-1)
        return strategy.tell(k_tell, population, to_fitness(returns), state), population

    state = strategy.init(jax.random.key(0), jnp.zeros(4))
    state, populations = jax.jit(
        lambda s: jax.lax.scan(generation, s, jax.random.split(jax.random.key(1), 3))
    )(state)
    assert populations.shape == (3, 8, 4)
    assert strategy.mean(state).shape == (4,)
    assert np.all(np.isfinite(np.asarray(strategy.mean(state)))), name


def test_settings_are_discovered_from_evosax():
    for name in ("CMA_ES", "xNES", "DifferentialEvolution", "ASEBO", "DiffusionEvolution"):
        table = algorithms.settings_table(name)
        es = algorithms.REGISTRY[name](8, jnp.zeros(6))
        params = es.default_params
        for f in dataclasses.fields(params):  # every scalar params field is a setting
            if np.ndim(getattr(params, f.name)) == 0 and not isinstance(
                getattr(params, f.name), dict
            ):
                assert algorithms.RENAMED.get(f.name, f.name) in table, (name, f.name)
    assert "subspace_dims" in algorithms.settings_table("ASEBO")  # a constructor keyword
    assert "num_generations" in algorithms.settings_table("DiffusionEvolution")
    # A params field set by name reaches evosax; unset ones keep evosax's derived value.
    spec = load_strategy("xnes", {"popsize": 8, "lr_B": 0.05})
    strategy = build_strategy(spec, num_dims=6)
    reference = ea.xNES(8, jnp.zeros(6)).default_params
    assert float(strategy.params.lr_B) == pytest.approx(0.05)
    assert float(strategy.params.lr_std_init) == float(reference.lr_std_init)
    # A constructor keyword set by name reaches evosax.
    asebo = build_strategy(load_strategy("asebo", {"popsize": 8, "subspace_dims": 3}), 6)
    assert asebo.es.subspace_dims == 3


def test_elite_ratio_sets_ars_top_directions_as_evosax_does():
    """ARS's top-b directions (Mania et al.: 60 directions, top 20 on Ant) through ``elite_ratio``.

    The reference is evosax's ARS built by hand with the attribute set; the update must use the
    20 best of 60 directions, and differ from evosax's default of half of them.
    """
    table = algorithms.settings_table("ARS")
    assert table["elite_ratio"].default is None
    assert "elite_ratio" in algorithms.settings_table("CMA_ES")
    assert "elite_ratio" not in algorithms.settings_table("Open_ES")  # reads no elites

    def told_mean(es, params):
        state = es.init(jax.random.key(1), jnp.zeros(5), params)
        population, state = es.ask(jax.random.key(2), state, params)
        fitness = jnp.sum(population**2, axis=1) + jnp.sin(7 * population[:, 0])
        return es.tell(jax.random.key(3), population, fitness, state, params)[0].mean

    settings = {"popsize": 120, "elite_ratio": 1 / 3, "optimizer": "sgd"}
    settings |= {"learning_rate": 0.015, "momentum": 0.0, "std_init": 0.025}
    spec = load_strategy("ARS", settings)
    strategy = build_strategy(spec, num_dims=5)
    assert strategy.es.num_elites == 20

    def evosax_ars(elite_ratio):  # set before evosax's jitted methods first trace
        es = ea.ARS(120, jnp.zeros(5), optimizer=optax.sgd(0.015),
                    std_schedule=optax.constant_schedule(0.025))  # fmt: skip
        es.elite_ratio = elite_ratio
        return told_mean(es, es.default_params)

    expected = evosax_ars(1 / 3)
    np.testing.assert_allclose(told_mean(strategy.es, strategy.params), expected, rtol=1e-6)
    assert not np.allclose(evosax_ars(0.5), expected)
    with pytest.raises(ConfigError, match=r"elite_ratio must be a number in \(0, 1\]"):
        load_strategy("ARS", {"elite_ratio": 1.5})


def test_a_new_evosax_algorithm_needs_no_code_here(monkeypatch):
    class BoostedSNES(ea.SNES):
        """A stand-in for an algorithm added to evosax later, with a new keyword."""

        def __init__(
            self,
            population_size,
            solution,
            boost: float = 2.0,
            optimizer=_SGD,
            fitness_shaping_fn=shaping.weights_fitness_shaping_fn,
        ):
            super().__init__(population_size, solution, optimizer, fitness_shaping_fn)
            self.boost = boost

    monkeypatch.setitem(algorithms.REGISTRY, "BoostedSNES", BoostedSNES)
    table = algorithms.settings_table("BoostedSNES")
    assert table["boost"].default == 2.0 and "std_init" in table and "lr_std" in table
    strategy = build_strategy(load_strategy("boostedsnes", {"popsize": 8, "boost": 3.0}), 4)
    assert isinstance(strategy.es, BoostedSNES) and strategy.es.boost == 3.0
    algorithms.info.cache_clear()


def test_names_are_case_insensitive_and_presets_win():
    assert load_strategy("XNES").algorithm == "xNES"
    assert load_strategy("differentialevolution").name == "DifferentialEvolution"
    tuned = load_strategy("OPEN_ES")
    assert tuned.name == "open_es" and tuned.settings["std_init"] == 0.15  # the preset's value
    with pytest.raises(ConfigError, match=r"did you mean 'xNES'") as err:
        load_strategy("xnse")
    assert "\n" not in str(err.value) and "ARS" in str(err.value)


def test_unknown_discovered_setting_is_one_line_listing_valid_ones():
    with pytest.raises(ConfigError) as err:
        load_strategy("xnes", {"lr_b": 0.1})
    message = str(err.value)
    assert "xNES has no setting 'lr_b'" in message and "did you mean 'lr_B'" in message
    assert "valid settings:" in message and "lr_std" in message and "optimizer" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match="must be a number"):
        load_strategy("pso", {"inertia_coeff": "high"})
    with pytest.raises(ConfigError, match="choose from auto, legacy_2023, symmetric"):
        load_strategy("lga", {"mutation_feature_encoding": "new"})


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("guidedes", "surrogate gradient"),
        ("PersistentES", "truncated unrolls"),
        ("noisereusees", "truncated unrolls"),
        ("sv_open_es", "Stein-variational"),
        ("SV_CMA_ES", "Stein-variational"),
        ("randomsearch", "'sampling_fn'"),
    ],
)
def test_algorithms_that_cannot_run_are_refused_in_one_line(name, reason):
    with pytest.raises(ConfigError, match=reason) as err:
        load_strategy(name)
    assert "cannot run in esjax" in str(err.value) and "\n" not in str(err.value)


def test_evosax_argument_checks_become_one_line_errors():
    # evosax asserts an even population for mirrored sampling; esjax reports it before compiling.
    with pytest.raises(ConfigError, match=r"CR_FM_NES cannot be built with popsize 7.*even"):
        build_strategy(load_strategy("CR_FM_NES", {"popsize": 7}), num_dims=4)
    # ARS's antithetic pairs are esjax's own check, made before evosax is asked.
    with pytest.raises(ConfigError, match=r"popsize 7: ARS samples antithetic pairs"):
        build_strategy(load_strategy("ars", {"popsize": 7}), num_dims=4)


def test_catalogue_marks_presets_and_lists_every_algorithm():
    rows = catalogue()
    kinds = {name: kind for name, kind, _ in rows}
    assert set(algorithms.REGISTRY) <= set(kinds)
    assert {kinds[name] for name in PRESETS} == {"tuned preset"}
    assert kinds["GuidedES"] == "cannot run" and kinds["xNES"] == "evosax"
    assert kinds["LowRank_ES"] == kinds["CMA_ES"] == "esjax"  # esjax's own, or its subclass
    runnable = [n for n in algorithms.REGISTRY if kinds[n] == "evosax"]
    assert len(runnable) >= 30
    text = {name: text for name, _, text in rows}
    assert "tuned preset: open_es" in text["Open_ES"]


def _esjax(*args: str, cwd) -> subprocess.CompletedProcess:
    """The console script in a subprocess, as a user runs it (this checkout's esjax)."""
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, COLUMNS="200", TERM="dumb", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", "from esjax._src.cli.main import main; main()", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_cli_refuses_an_algorithm_that_cannot_run_in_one_line(tmp_path):
    result = _esjax("evolve", "cartpole", "--strategy", "GuidedES", "-g", "1", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "surrogate gradient" in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run directory or compile


def test_cli_list_marks_tuned_presets_and_shows_every_algorithm(tmp_path):
    result = _esjax("list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in PRESETS:
        assert any(line.split()[:3] == [name, "│", "tuned"] for line in lines if line.split())
    for name in algorithms.REGISTRY:
        assert any(line.split()[:1] == [name] for line in lines), name
    guided = next(line for line in lines if line.split()[:1] == ["GuidedES"])
    assert "cannot run" in guided


@pytest.mark.parametrize("name", ["DifferentialEvolution", "xNES"])
def test_a_discovered_algorithm_resumes_bit_identically(name, tmp_path):
    from esjax._src.run import runs
    from esjax._src.run.training import evolve

    small = [
        "episode_length=16",
        "evaluation.every=2",
        "evaluation.episodes=4",
        "policy.hidden=[4]",
    ]
    run = dict(task="pendulum", strategy=name, popsize=8, overrides=small)
    straight = evolve(generations=4, out=tmp_path / "straight", **run)
    evolve(generations=2, out=tmp_path / "resumed", **run)
    resumed = evolve("pendulum", generations=4, out=tmp_path / "resumed", resume=True)
    assert resumed.generations == straight.generations == 4
    a = runs.load_checkpoint(tmp_path / "straight").arrays
    b = runs.load_checkpoint(tmp_path / "resumed").arrays
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.3, 0.01])
def test_worst_episodes_averages_each_members_lowest_returns(fraction):
    returns = np.asarray(jax.random.normal(jax.random.key(3), (6, 8)) * 100.0)
    count = max(1, int(np.ceil(fraction * 8)))
    expected = [np.mean(sorted(row)[:count]) for row in returns]
    got = member_returns(jnp.asarray(returns), fraction)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5)
    # Any non-finite episode, even one the tail would leave out, makes the member non-finite.
    broken = returns.copy()
    broken[2, 0], broken[4, 5] = np.inf, np.nan
    judged = np.asarray(member_returns(jnp.asarray(broken), fraction))
    assert not np.any(np.isfinite(judged[[2, 4]]))
    assert np.all(np.isfinite(np.delete(judged, [2, 4])))


def test_worst_episodes_reaches_the_strategy_through_the_rollout_summary():
    """The summary a generation ranks against every member's episodes from the same keys,
    reduced here in numpy."""
    from esjax._src.run.training import engine_for, resolve_config

    config = resolve_config(
        "pendulum-sign",
        popsize=8,
        generations=1,
        overrides=["strategy_settings.worst_episodes=0.25", "policy.hidden=[4]"],
    )
    _, engine = engine_for(config)
    flat = 0.3 * jax.random.normal(jax.random.key(6), (8, engine.num_dims))
    params = engine.policy_params(flat)
    key = jax.random.key(7)
    episodes = np.asarray(engine.rollout.population(key, params, 8).returns)
    summary = engine.population_summary(key, params, None)
    expected = np.sort(episodes, axis=1)[:, :2].mean(axis=1)
    np.testing.assert_allclose(np.asarray(summary.returns), expected, rtol=1e-5)
    assert not np.allclose(expected, episodes.mean(axis=1), rtol=1e-3)
    with pytest.raises(ConfigError, match=r"worst_episodes must be a number in \(0, 1\], got 0"):
        resolve_config("pendulum", overrides=["strategy_settings.worst_episodes=0"])


@pytest.mark.parametrize("name", ["ARS", "PGPE"])
def test_always_antithetic_algorithms_ask_antithetic_pairs(name):
    # esjax keeps member i and i + popsize/2 together (env_groups); evosax's own ask is the
    # reference for whether they really are +z and -z about the mean.
    strategy = build_strategy(load_strategy(name, {"popsize": 8}), num_dims=3)
    assert algorithms.is_antithetic(name, strategy.spec.settings)
    mean = jnp.asarray([0.5, -1.0, 2.0])
    state = strategy.init(jax.random.key(0), mean)
    population, _ = strategy.ask(jax.random.key(1), state)
    population = np.asarray(population)
    np.testing.assert_allclose(
        population[:4] + population[4:], np.tile(2 * np.asarray(mean), (4, 1)), atol=1e-5
    )
    assert not np.allclose(population[:4], population[4:])


def test_ars_takes_env_groups_of_antithetic_pairs():
    spec = load_strategy("ARS", {"popsize": 8, "env_groups": 4})
    assert spec.loop.env_groups == 4
    with pytest.raises(
        ConfigError, match="does not split into env_groups = 8 groups of antithetic"
    ):
        build_strategy(load_strategy("ARS", {"popsize": 8, "env_groups": 8}), 2)


def test_a_growing_schedule_grows_unless_a_ceiling_is_set():
    """A decay above 1 with the default floor of 0 grows the value (it was held at 0)."""
    from esjax._src.strategies.strategy import _decaying

    counts = np.arange(4)
    grown = np.asarray(jax.vmap(_decaying(0.1, 1.5, 0.0))(counts))
    np.testing.assert_allclose(grown, 0.1 * 1.5**counts, rtol=1e-6)
    capped = np.asarray(jax.vmap(_decaying(0.1, 1.5, 0.2))(counts))
    np.testing.assert_allclose(capped, np.minimum(0.1 * 1.5**counts, 0.2), rtol=1e-6)
    shrunk = np.asarray(jax.vmap(_decaying(0.1, 0.5, 0.03))(counts))
    np.testing.assert_allclose(shrunk, np.maximum(0.1 * 0.5**counts, 0.03), rtol=1e-6)


def test_clipup_refuses_a_learning_rate_schedule_it_would_ignore():
    with pytest.raises(ConfigError, match="lr_decay and lr_min do not apply to clipup"):
        load_strategy("pgpe", {"lr_decay": 0.99})
    with pytest.raises(ConfigError, match="do not apply to clipup"):
        load_strategy("open_es", {"optimizer": "clipup", "lr_min": 0.001})
    load_strategy("pgpe", {"learning_rate": 0.2})
    # A run made before the check resumes: its stored settings are only completed, not refused.
    from esjax._src.strategies.strategy import resolve_settings

    stored = {**load_strategy("pgpe").settings, "lr_decay": 0.99}
    assert resolve_settings("PGPE", [(stored, "config")])["lr_decay"] == 0.99


@pytest.mark.parametrize("algorithm", ["iAMaLGaM_Full", "iAMaLGaM_Univariate"])
def test_iamalgam_sizes_its_mean_shift_group_from_the_elite_ratio_it_is_given(algorithm):
    """iAMaLGaM shifts 0.5 * ratio * n / (n - elites) of the other n - 1 members along the mean
    shift, a size its constructor fixes from its default ratio of 0.5. By hand, n = 20:
    ratio 0.5 -> 10 elites, 0.5 * 0.5 * 20 / 10 * 19 = 9.5 -> 9; ratio 0.2 -> 4 elites,
    0.5 * 0.2 * 20 / 16 * 19 = 2.375 -> 2; ratio 1 -> every member an elite, held at 19."""
    sizes = {}
    for ratio in (None, 0.2, 1.0):
        extra = {} if ratio is None else {"elite_ratio": ratio}
        strategy = build_strategy(load_strategy(algorithm, {"popsize": 20, **extra}), 5)
        sizes[ratio] = strategy.es.ams_population_size
        state = strategy.init(jax.random.key(1), jnp.zeros(5))
        population, _ = strategy.ask(jax.random.key(0), state)
        assert population.shape == (20, 5)
    assert sizes == {None: 9, 0.2: 2, 1.0: 19}


def test_a_stored_run_keeps_its_settings_that_new_runs_refuse():
    """A run made before the ranges (a step of 0, a negative floor) resumes as it ran: its
    stored config is held only to finite numbers, while a new run with the same settings is
    refused."""
    import dataclasses as dc

    from esjax._src.run.training import _strategy_spec, resolve_config

    old = {"learning_rate": 0.0, "lr_min": -1.0, "std_init": 0.05}
    with pytest.raises(ConfigError, match="learning_rate must be a number above 0"):
        resolve_config("pendulum", overrides=["strategy_settings.learning_rate=0.0"])
    config = resolve_config("pendulum")
    stored = dc.replace(
        config, strategy=dc.replace(config.strategy, settings={**config.strategy.settings, **old})
    )
    settings = _strategy_spec(stored).settings
    assert {name: settings[name] for name in old} == old
    with pytest.raises(ConfigError, match="must be a number, got"):
        bad = dc.replace(stored.strategy, settings={**stored.strategy.settings, "lr_min": "x"})
        _strategy_spec(dc.replace(stored, strategy=bad))
