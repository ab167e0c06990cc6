"""The strategy door: a strategy from outside esjax (tests/data/toy_strategy.py), registered by
one line, whose population is never materialised, checked against its own matrix form and
trained from the command line. This is CONTRIBUTING.md's third recipe, exercised."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_run_as_data import cli

from esjax._src.specs.config import ConfigError
from esjax._src.strategies import algorithms
from esjax._src.strategies.fitness import to_fitness
from esjax._src.strategies.population import MATERIALISED, MemberLayout, PairedMembers, Population
from esjax._src.strategies.strategy import (
    build_strategy,
    form_for,
    load_strategy,
    population_floats,
)

DATA = Path(__file__).resolve().parent / "data"
NUM_DIMS = 8
FLAT = MemberLayout.flat(NUM_DIMS)


@pytest.fixture
def toy(monkeypatch):
    """``toy_strategy`` registered as ``KeyedES``: the one line a new strategy adds."""
    monkeypatch.syspath_prepend(str(DATA))
    module = importlib.import_module("toy_strategy")
    monkeypatch.setitem(algorithms.REGISTRY, "KeyedES", module.KeyedES)
    return module


def keyed(popsize: int = 8, num_dims: int = NUM_DIMS, **settings):
    spec = load_strategy("KeyedES", {"popsize": popsize, **settings})
    return build_strategy(spec, num_dims)


def test_its_settings_are_discovered_and_its_form_is_found(toy):
    strategy = keyed(learning_rate=0.2, std_init=0.3)
    assert type(strategy.es) is toy.KeyedES
    assert float(strategy.es.std_schedule(0)) == pytest.approx(0.3)
    assert form_for(strategy) is toy.KeyedES.form
    # What the preflight charges: the update's block, three rows, a chunk's noise.
    held = population_floats(strategy, FLAT, 1, lambda member_bytes: 4)
    assert held == toy.KeyedES.form.tell_floats + 3 * NUM_DIMS + 4 * NUM_DIMS
    with pytest.raises(ConfigError, match="l2_penalty"):  # it would read members never formed
        keyed(l2_penalty=0.1)


def test_esjax_list_says_where_each_strategy_comes_from(toy):
    """evosax's, esjax's own, or the user's module's: not every registered one is evosax's."""
    code, output = cli("list")
    assert code == 0, output
    rows = {line.split()[0]: line for line in output.splitlines() if line.strip()}
    assert "toy_strategy" in rows["KeyedES"]
    assert " esjax " in rows["LowRank_ES"] and " evosax " in rows["xNES"]


def test_a_form_missing_a_hook_is_one_line(toy, monkeypatch):
    class Incomplete:
        name = "incomplete"

    monkeypatch.setattr(toy.KeyedES, "form", Incomplete())
    with pytest.raises(ConfigError, match=r"KeyedES\.form has no 'applies'") as refused:
        keyed()
    assert "\n" not in str(refused.value)


def test_the_lazy_members_and_tell_equal_the_matrix_forms(toy):
    """Member by member, the lazy population is the matrix evosax's ``ask`` returns; two
    tells from it equal the algorithm's own ``tell`` handed that matrix."""
    strategy = keyed(learning_rate=0.1, std_init=0.5)
    state = strategy.init(jax.random.key(0), jnp.linspace(-1.0, 1.0, NUM_DIMS))
    form = form_for(strategy)
    lazy_state = matrix_state = state
    for generation in range(2):
        key = jax.random.key(10 + generation)
        lazy, _ = form.ask(strategy, key, lazy_state, FLAT, None)
        assert isinstance(lazy, PairedMembers) and isinstance(lazy, Population)
        matrix, _ = strategy.ask(key, matrix_state)
        rows = jax.vmap(lazy.member)(lazy.members())
        # The same noise; ``mean + std * z`` may round differently where it fuses into one
        # multiply-add.
        np.testing.assert_allclose(rows, matrix, rtol=1e-6, atol=1e-6)
        fitness = to_fitness(jnp.sin(jnp.arange(8.0) * (generation + 1)))
        lazy_state = form.tell(strategy, key, lazy, fitness, lazy_state)
        matrix_state = strategy.tell(key, matrix, fitness, matrix_state)
        # The matrix form recovers each row's noise as (x - mean) / std: equal to rounding.
        np.testing.assert_allclose(lazy_state.mean, matrix_state.mean, rtol=1e-6, atol=1e-7)
    assert int(lazy_state.generation_counter) == int(matrix_state.generation_counter) == 2


def shapes_in(jaxpr) -> set[tuple[int, ...]]:
    """Every value's shape in a jaxpr, through scans, loops, conds and nested calls."""
    found = set()
    for eqn in jaxpr.eqns:
        found |= {tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape")}
        for param in eqn.params.values():
            for inner in param if isinstance(param, list | tuple) else [param]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    found |= shapes_in(inner)
    return found


def test_a_generation_never_holds_the_population(toy, monkeypatch):
    """In chunks of 8 of a population of 64, no value of a traced generation block has the
    population's shape (64 x parameters); with the lazy form taken away, one does."""
    import esjax._src.engine.generation
    import esjax._src.strategies.strategy
    from esjax._src.run.training import clear_engine_cache, engine_for, resolve_config

    hidden = ["policy.hidden=[8]"]
    config = resolve_config("cartpole", strategy="KeyedES", popsize=64, overrides=hidden)

    def traced_shapes() -> tuple[set[tuple[int, ...]], int]:
        clear_engine_cache()
        _, engine = engine_for(config)
        engine.rollout.chunk_size = 8  # read when the block is traced
        block = functools.partial(esjax._src.engine.generation.run_block, engine.step)
        state = engine.init(jnp.arange(1))
        jaxpr = jax.make_jaxpr(block)(state, jnp.asarray(1, jnp.int32)).jaxpr
        return shapes_in(jaxpr), engine.num_dims

    try:
        lazy_shapes, num_dims = traced_shapes()
        assert not {(64, num_dims), (1, 64, num_dims)} & lazy_shapes
        monkeypatch.setattr(
            esjax._src.strategies.strategy, "form_for", lambda strategy: MATERIALISED
        )
        monkeypatch.setattr(esjax._src.engine.generation, "form_for", lambda strategy: MATERIALISED)
        matrix_shapes, _ = traced_shapes()
        assert {(64, num_dims), (1, 64, num_dims)} & matrix_shapes  # the check can see one
    finally:
        clear_engine_cache()


def test_it_trains_and_evaluates_from_the_command_line(toy, tmp_path):
    run = tmp_path / "run"
    code, output = cli("evolve", "cartpole", "--strategy", "KeyedES", "--popsize", "16",
                       "--generations", "3", "--out", run, "--set", "episode_length=50",
                       "--set", "evaluation.every=1", "--set", "evaluation.episodes=4",
                       "--set", "test_episodes=4")  # fmt: skip
    assert code == 0, output
    code, output = cli("eval", run, "--episodes", "4", "--json")
    assert code == 0, output
    assert '"mean"' in output
