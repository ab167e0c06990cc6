"""Mirrored OpenES without a materialised population: the half noise matrix is the population.

evosax's ``Open_ES`` with antithetic sampling draws ``z`` of shape ``(popsize // 2, num_dims)``
from the ask key and returns ``mean + std * [z; -z]``, a ``(popsize, num_dims)`` matrix that its
``tell`` turns back into noise with ``(population - mean) / std``. Here ``ask`` makes the very
same draw (same key, same call, so member ``i`` is evosax's row ``i`` up to the rounding of the
multiply-add) but keeps only
``z``: each rollout chunk builds its own members' parameters inside the chunk, and ``tell``
takes the gradient from the pairs, ``(w[:h] - w[h:]) @ z``, the same sum as evosax's in another
order of additions. What is skipped is writing and reading the population twice.

It applies where the shortcut is exact: ``Open_ES`` mirrored, no L2 penalty (the only fitness
shaping here that reads the parameters). Every other strategy keeps the materialised path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from esjax import draw


@struct.dataclass
class LazyPopulation:
    """Members ``index`` of ``mean + std * [noise; -noise]``, parameters made on demand.

    ``unravel`` turns a flat member into the policy's pytree. Taking rows (``take``) only
    selects member ids, so a device or a chunk never holds more than its own members.
    """

    mean: jax.Array
    std: jax.Array
    noise: jax.Array  # (popsize // 2, num_dims)
    index: jax.Array  # (members,) int32 ids into the mirrored population
    unravel: Callable = struct.field(pytree_node=False)

    @property
    def popsize(self) -> int:
        return self.index.shape[0]

    def flat(self, member: jax.Array) -> jax.Array:
        """Member ``member``'s flat parameters, computed as evosax's ``ask`` computes the row."""
        half = self.noise.shape[0]
        row = self.noise[member % half]
        return self.mean + self.std * jnp.where(member < half, row, -row)

    def member(self, member: jax.Array) -> Any:
        return self.unravel(self.flat(member))

    def take(self, rows: jax.Array) -> LazyPopulation:
        return self.replace(index=self.index[rows])


def applies(strategy: Any) -> bool:
    """Whether ``strategy`` can run on a :class:`LazyPopulation` (mirrored OpenES, no L2)."""
    # evosax is imported here, not at the top: the rollout imports this module, and evosax
    # creates arrays at import, which would start JAX before the CPU devices are set.
    from evosax.algorithms.distribution_based.open_es import Open_ES

    es = strategy.es
    return (
        type(es) is Open_ES
        and es.use_antithetic_sampling
        and not strategy.population_based
        and not strategy.spec.settings.get("l2_penalty", 0.0)
    )


def ask(strategy: Any, key: jax.Array, state: Any, unravel: Callable) -> LazyPopulation:
    """The population evosax's ``ask`` would return for ``key``, kept as its half noise."""
    key = strategy.noise_key(key)
    es = strategy.es
    # The same numbers as evosax's ``jax.random.normal`` call, drawn in cache-sized blocks.
    half = draw.normal(key, (es.population_size // 2, es.num_dims))
    index = jnp.arange(es.population_size, dtype=jnp.int32)
    return LazyPopulation(state.mean, state.std, half, index, unravel)


def tell(strategy: Any, key: jax.Array, population: LazyPopulation, fitness: jax.Array, state):
    """evosax's ``Open_ES.tell`` (best so far, shaping, gradient step, std schedule) from pairs."""
    from evosax.algorithms.base import update_best_solution_and_fitness

    es, params = strategy.es, strategy.params
    best = jnp.argmin(fitness)
    best_solution, best_fitness = update_best_solution_and_fitness(
        population.flat(best)[None], fitness[best][None], state.best_solution, state.best_fitness
    )
    state = state.replace(best_solution=best_solution, best_fitness=best_fitness)
    # Shaping sees fitness only (``applies`` excludes the L2 penalty, which reads parameters);
    # a zero-width population keeps the grouped shaping's reshapes valid.
    placeholder = jnp.zeros((es.population_size, 0), population.mean.dtype)
    shaped = es._postprocess_fitness(
        fitness, es.fitness_shaping_fn(placeholder, fitness, state, params)
    )
    half = es.population_size // 2
    pair_weights = shaped[:half] - shaped[half:]
    grad = (pair_weights @ population.noise) / (es.population_size * state.std)
    updates, opt_state = es.optimizer.update(grad, state.opt_state, state.mean)
    return state.replace(
        mean=optax.apply_updates(state.mean, updates),
        std=es.std_schedule(state.generation_counter),
        opt_state=opt_state,
        generation_counter=state.generation_counter + 1,
    )


@dataclass(frozen=True)
class PopulationPath:
    """How a generation asks, hands members to the rollout, tells and reads one member's row.

    The engine goes through this one object, so a strategy's population is either a
    ``(popsize, num_dims)`` matrix (evosax's own ask and tell) or a :class:`LazyPopulation`.
    """

    ask: Callable[[jax.Array, Any], tuple[Any, Any]]
    params: Callable[[Any], Any]
    tell: Callable[[jax.Array, Any, jax.Array, Any], Any]
    row: Callable[[Any, jax.Array], jax.Array]


def population_path(strategy: Any, unravel: Callable) -> PopulationPath:
    """The lazy path where :func:`applies`, else the materialised one."""
    if applies(strategy):
        return PopulationPath(
            ask=lambda key, state: (ask(strategy, key, state, unravel), state),
            params=lambda population: population,
            tell=lambda key, population, fitness, state: tell(
                strategy, key, population, fitness, state
            ),
            row=lambda population, member: population.flat(member),
        )
    return PopulationPath(
        ask=strategy.ask,
        params=jax.vmap(unravel),
        tell=strategy.tell,
        row=lambda population, member: population[member],
    )
