"""A strategy as a run holds it: one evosax object and its params, with pure init, ask and tell.

:func:`esjax._src.strategies.strategy.build_strategy` makes one from a spec; the engine closes over
it in jitted code, and :mod:`esjax._src.strategies.population`'s forms step its population. It lives
in a module of its own so that those forms can name its type without importing the builder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from esjax._src.specs.config import StrategySpec


@struct.dataclass
class PopulationState:
    """A population-based algorithm's evosax state, plus the member esjax tests as its "mean".

    evosax starts these algorithms from an *evaluated* population. esjax evaluates it as the
    run's first generation: until ``evaluated`` the ``ask`` returns the initial population
    unchanged, and the first ``tell`` is evosax's ``init`` with that population's fitness.
    ``mean`` is the best member of the current population (evosax's ``get_best_solution``).
    """

    algorithm: Any
    mean: jax.Array
    evaluated: jax.Array


@dataclass(frozen=True)
class Strategy:
    """One evosax object and its params, built once per run; pure ``init``/``ask``/``tell``.

    ``es`` is never mutated, so the engine can close over it in jitted code. A
    population-based algorithm's state is wrapped in :class:`PopulationState`; every other
    state is evosax's own.
    """

    spec: StrategySpec
    es: Any
    params: Any
    popsize: int
    num_dims: int
    population_based: bool = False

    def initial_mean(self, policy_init: jax.Array) -> jax.Array:
        """Where the search starts: the policy's initialisation, or all zeros."""
        if self.spec.settings["mean_init"] == "zeros":
            return jnp.zeros_like(policy_init)
        return policy_init

    def initial_population(self, key: jax.Array, mean: jax.Array) -> jax.Array:
        """A population-based algorithm's first population: ``mean + std_init * N(0, I)``."""
        noise = jax.random.normal(key, (self.popsize, self.num_dims), mean.dtype)
        return mean + self.spec.settings["std_init"] * noise

    def init(self, key: jax.Array, mean: jax.Array) -> Any:
        if not self.population_based:
            return self.es.init(key, mean, self.params)
        population = self.initial_population(key, mean)
        # A placeholder of the right structure; the first tell re-initialises it for real.
        unevaluated = jnp.full((self.popsize,), jnp.inf, jnp.float32)
        placeholder = self.es.init(key, population, unevaluated, self.params)
        return PopulationState(placeholder, mean, jnp.zeros((), bool))

    def ask(self, key: jax.Array, state: Any) -> tuple[jax.Array, Any]:
        """``(population (popsize, num_dims), state)``.

        The draw may use a cheaper PRNG than the run's threefry keys: the key is turned into
        one of ``noise_prng``'s kind, deterministically, so resume and seed-vmapping still agree.
        """
        key = self.noise_key(key)
        if not self.population_based:
            return self.es.ask(key, state, self.params)
        population, inner = jax.lax.cond(
            state.evaluated,
            lambda: self.es.ask(key, state.algorithm, self.params),
            lambda: (state.algorithm.population, state.algorithm),
        )
        return population, state.replace(algorithm=inner)

    def noise_key(self, key: jax.Array) -> jax.Array:
        """The ask key as one of ``noise_prng``'s kind (itself for threefry)."""
        impl = self.spec.settings["noise_prng"]
        if impl == "threefry":
            return key
        return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=impl)

    def tell(self, key: jax.Array, population: jax.Array, fitness: jax.Array, state: Any) -> Any:
        if not self.population_based:
            state, _ = self.es.tell(key, population, fitness, state, self.params)
            return state
        inner = jax.lax.cond(
            state.evaluated,
            lambda: self.es.tell(key, population, fitness, state.algorithm, self.params)[0],
            lambda: self.es.init(key, population, fitness, self.params),
        )
        best = self.es.get_best_solution(inner)
        return PopulationState(inner, best, jnp.ones((), bool))

    def mean(self, state: Any) -> jax.Array:
        return state.mean

    def leading_members(self, state: PopulationState, count: int) -> jax.Array:
        """The ``count`` members of the last told population with the best fitness, best first."""
        inner = state.algorithm
        order = jnp.argsort(inner.fitness)[:count]  # evosax minimises
        return inner.population[order]

    def report(self, state: PopulationState, member: jax.Array) -> PopulationState:
        """``state`` reporting ``member`` as its "mean"; the search itself never reads it."""
        return dataclasses.replace(state, mean=jnp.where(state.evaluated, member, state.mean))
