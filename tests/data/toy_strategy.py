"""A strategy added from outside esjax, for tests/test_strategy_door.py: the recipe's toy.

``KeyedES`` is a plain evolution strategy whose member ``i`` is ``mean + std * z_i`` with
``z_i = normal(fold_in(key, i))``: each member's noise is addressable by its index alone, so the
population need never exist as a matrix. The class follows evosax's algorithm API, so esjax
discovers its settings (the optimizer, the std schedule) from its constructor like any evosax
algorithm's; its ``lazy_form`` attribute (:class:`KeyedLazy`, an
:class:`esjax.strategies.population.LazyStrategy`) says how esjax steps it without the
matrix. A test registers it with one line, ``algorithms.REGISTRY["KeyedES"] = KeyedES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms.base import update_best_solution_and_fitness
from evosax.algorithms.distribution_based.base import (
    DistributionBasedAlgorithm,
    metrics_fn,
)
from evosax.algorithms.distribution_based.base import Params as BaseParams
from evosax.algorithms.distribution_based.base import State as BaseState
from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn
from flax import struct
from jax.sharding import PartitionSpec as P


@struct.dataclass
class State(BaseState):
    mean: jax.Array
    std: jax.Array
    opt_state: optax.OptState


@struct.dataclass
class Params(BaseParams):
    pass


def member_noise(key: jax.Array, member: jax.Array, num_dims: int) -> jax.Array:
    """Member ``member``'s noise row: the same numbers whoever draws it, alone or in a batch."""
    return jax.random.normal(jax.random.fold_in(key, member), (num_dims,))


def gradient(weights: jax.Array, noise_row: Callable[[jax.Array], jax.Array], num_dims: int):
    """``sum_i weights[i] * noise_row(i)``, member by member in index order, so the matrix and
    the lazy path add the same numbers in the same order."""

    def add(i, total):
        return total + weights[i] * noise_row(i)

    return jax.lax.fori_loop(0, weights.shape[0], add, jnp.zeros((num_dims,), weights.dtype))


DEFAULT_OPTIMIZER = optax.sgd(learning_rate=0.05)
DEFAULT_STD = optax.constant_schedule(0.1)


class KeyedES(DistributionBasedAlgorithm):
    """An ES whose members' noise is keyed by their index (see the module docstring)."""

    def __init__(
        self,
        population_size: int,
        solution: Any,
        optimizer: optax.GradientTransformation = DEFAULT_OPTIMIZER,
        std_schedule: Callable = DEFAULT_STD,
        fitness_shaping_fn: Callable = centered_rank_fitness_shaping_fn,
        metrics_fn: Callable = metrics_fn,
    ):
        super().__init__(population_size, solution, fitness_shaping_fn, metrics_fn)
        self.optimizer = optimizer
        self.std_schedule = std_schedule

    @property
    def _default_params(self) -> Params:
        return Params()

    def _init(self, key: jax.Array, params: Params) -> State:
        return State(
            mean=jnp.full((self.num_dims,), jnp.nan),
            std=self.std_schedule(0),
            opt_state=self.optimizer.init(jnp.zeros(self.num_dims)),
            best_solution=jnp.full((self.num_dims,), jnp.nan),
            best_fitness=jnp.inf,
            generation_counter=0,
        )

    def _ask(self, key: jax.Array, state: State, params: Params) -> tuple[jax.Array, State]:
        members = jnp.arange(self.population_size)
        z = jax.vmap(lambda i: member_noise(key, i, self.num_dims))(members)
        return state.mean + state.std * z, state

    def _tell(self, key, population, fitness, state: State, params: Params) -> State:
        z = (population - state.mean) / state.std
        grad = gradient(fitness, lambda i: z[i], self.num_dims)
        return self._step(grad / (self.population_size * state.std), state)

    def _step(self, grad: jax.Array, state: State) -> State:
        updates, opt_state = self.optimizer.update(grad, state.opt_state, state.mean)
        return state.replace(
            mean=optax.apply_updates(state.mean, updates),
            std=self.std_schedule(state.generation_counter),
            opt_state=opt_state,
        )


@struct.dataclass
class KeyedMembers:
    """A :class:`esjax.strategies.population.LazyMembers`: member ids and the key their noise
    comes from."""

    mean: jax.Array
    std: jax.Array
    key: jax.Array
    ids: jax.Array  # (members,) int32
    unravel: Callable = struct.field(pytree_node=False)
    size: int = struct.field(pytree_node=False)

    @property
    def popsize(self) -> int:
        return self.size

    @property
    def devices(self) -> int:
        return 1  # every device draws the rows of the members it steps

    def flat(self, member: jax.Array) -> jax.Array:
        return self.mean + self.std * member_noise(self.key, member, self.mean.shape[0])

    def members(self) -> jax.Array:
        return self.ids

    def member(self, ident: jax.Array) -> Any:
        return self.unravel(self.flat(ident))

    def take(self, rows: jax.Array) -> KeyedMembers:
        return self.replace(ids=self.ids[rows])

    def member_flat(self, member: jax.Array) -> jax.Array:
        return self.flat(member)

    def specs(self) -> Any:
        return jax.tree.map(lambda _: P(), self)

    def device_share(self, device: jax.Array) -> tuple[KeyedMembers, jax.Array, jax.Array]:
        raise NotImplementedError("never split over devices (devices is 1)")

    def in_member_order(self, x: jax.Array) -> jax.Array:
        return x[: self.size]


@dataclass(frozen=True)
class KeyedLazy:
    """:class:`KeyedES` stepped member by member: an
    :class:`esjax.strategies.population.LazyStrategy`."""

    name: str = "keyed ES"

    def applies(self, strategy: Any) -> bool:
        return type(strategy.es) is KeyedES and not strategy.spec.settings.get("l2_penalty")

    def ask(self, strategy, key, state, unravel, mesh) -> KeyedMembers:
        ids = jnp.arange(strategy.popsize, dtype=jnp.int32)
        key = strategy.noise_key(key)
        return KeyedMembers(state.mean, state.std, key, ids, unravel, strategy.popsize)

    def tell(self, strategy, key, population: KeyedMembers, fitness, state) -> Any:
        es = strategy.es
        best = jnp.argmin(fitness)
        best_solution, best_fitness = update_best_solution_and_fitness(
            population.flat(best)[None], fitness[best][None], state.best_solution,
            state.best_fitness,
        )  # fmt: skip
        state = state.replace(best_solution=best_solution, best_fitness=best_fitness)
        # Shaping reads fitness only (no L2 penalty: see applies).
        placeholder = jnp.zeros((es.population_size, 0), population.mean.dtype)
        shaped = es._postprocess_fitness(
            fitness, es.fitness_shaping_fn(placeholder, fitness, state, strategy.params)
        )
        num_dims = population.mean.shape[0]
        grad = gradient(shaped, lambda i: member_noise(population.key, i, num_dims), num_dims)
        state = es._step(grad / (es.population_size * state.std), state)
        return state.replace(generation_counter=state.generation_counter + 1)

    def held_floats(self, popsize: int, num_dims: int, devices: int) -> int:
        return 2 * num_dims  # the gradient and the row being added; no population


KeyedES.lazy_form = KeyedLazy()
