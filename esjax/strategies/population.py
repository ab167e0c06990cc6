"""What a population is to the rollout and the engine, written down as protocols.

A population is either **materialised**, a parameter pytree with a leading member axis (evosax's
``ask`` returns ``(popsize, num_dims)`` and the engine unravels it), or **lazy**: an object that
names its members and makes each member's parameters only inside the rollout chunk that steps
it, so the population never exists as a whole. A lazy population is what a strategy worth
running at scale hands the rollout. :class:`LazyMembers` is what the rollout and the sharding
code ask of one; :class:`LazyStrategy` is what the engine asks of the strategy that makes it
(how it asks, how ``tell`` receives fitness, what it holds in memory). Antithetic OpenES
(:mod:`esjax.strategies.lazy_openes`) is one implementation; the registry of them is
:data:`esjax.strategies.strategy.LAZY_STRATEGIES`.

Besides the protocols it holds the step every lazy ``tell`` opens with (:func:`best_and_shaped`)
and the one an OpenES-like ``tell`` closes with (:func:`descend`). It imports no strategy
library at import time (optax only, as lazy OpenES does), so the rollout can import it before
JAX's devices are set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Self, runtime_checkable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

PyTree = Any

# The mesh axis the population is sharded over (the rollout's and the engine's).
AXIS = "population"


@runtime_checkable
class LazyMembers(Protocol):
    """A population whose members' parameters are made on demand, member by member.

    The rollout maps over :meth:`members` (ids with a leading member axis), in chunks, and calls
    :meth:`member` on each id inside the chunk. A lazy population may hold its state split over
    the devices of a mesh (``devices > 1``): then :meth:`device_share` says which members a
    device steps and :meth:`in_member_order` puts per-device results back in the population's
    order. The object is a JAX pytree (e.g. a ``flax.struct.dataclass``) so it passes through
    ``jit`` and ``shard_map``.
    """

    @property
    def popsize(self) -> int:
        """Members in the population (padding excluded)."""
        ...

    @property
    def devices(self) -> int:
        """Devices its state is split over; 1 when every device holds all of it."""
        ...

    def members(self) -> PyTree:
        """Every member's id, a pytree with a leading member axis, for mapping over."""
        ...

    def member(self, ident: PyTree) -> PyTree:
        """One member's parameter pytree, from one id of :meth:`members` (traced, per member)."""
        ...

    def take(self, rows: jax.Array) -> Self:
        """The members at ``rows``: selects ids, makes no parameters."""
        ...

    def member_flat(self, member: jax.Array) -> jax.Array:
        """The flat parameters of population member ``member`` (an index), on every device."""
        ...

    def specs(self) -> PyTree:
        """``shard_map`` in-specs for this pytree: how its state is split over :data:`AXIS`."""
        ...

    def device_share(self, device: jax.Array) -> tuple[Self, jax.Array, jax.Array]:
        """Inside ``shard_map``: ``(population, member, valid)`` for device ``device``.

        ``population`` names the device's members (its :meth:`members` are theirs), ``member``
        is each one's index in the population (for choosing its episodes) and ``valid`` is
        false for padding. Only called when ``devices > 1``.
        """
        ...

    def in_member_order(self, x: jax.Array) -> jax.Array:
        """Per-member results, gathered device by device, in the population's order."""
        ...


class LazyStrategy(Protocol):
    """A strategy that hands the rollout :class:`LazyMembers` instead of a population matrix.

    ``strategy`` below is the run's :class:`esjax.strategies.strategy.Strategy` (its spec, its
    evosax object and params; typed ``Any`` here because esjax.strategies.strategy imports this
    module); ``state`` is the state that strategy's ``init`` made, so checkpoints, resume and
    seed-vmapping treat a lazy strategy like any other.
    """

    name: str

    def applies(self, strategy: Any) -> bool:
        """Whether this lazy form computes exactly what ``strategy`` would with a matrix."""
        ...

    def ask(
        self,
        strategy: Any,
        key: jax.Array,
        state: PyTree,
        unravel: Callable[[jax.Array], PyTree],
        mesh: Mesh | None,
    ) -> LazyMembers:
        """The generation's population (:class:`LazyMembers`) for ``key``; with a ``mesh``,
        split over its devices where the strategy can."""
        ...

    def tell(
        self,
        strategy: Any,
        key: jax.Array,
        population: LazyMembers,
        fitness: jax.Array,
        state: PyTree,
    ) -> PyTree:
        """The next state from each member's ``fitness`` (evosax's sign: lower is better)."""
        ...

    def held_floats(self, popsize: int, num_dims: int, devices: int) -> int:
        """Floats one device holds for a generation's population, beyond the strategy state
        (the memory preflight charges this instead of a materialised population's)."""
        ...


def best_and_shaped(
    strategy: Any, population: LazyMembers, fitness: jax.Array, state: PyTree
) -> tuple[PyTree, jax.Array]:
    """How every lazy ``tell`` opens: the state with the best member so far updated (from the
    one member's row, :meth:`LazyMembers.member_flat`), and the shaped fitness.

    Shaping sees the fitness only: a lazy strategy applies only where its shaping reads no
    parameters (no L2 penalty), and a zero-width population keeps the grouped shaping's
    reshapes valid.
    """
    # evosax is imported here, not at the top: it creates arrays at import (see the docstring).
    from evosax.algorithms.base import update_best_solution_and_fitness

    es = strategy.es
    best = jnp.argmin(fitness)
    best_solution, best_fitness = update_best_solution_and_fitness(
        population.member_flat(best)[None],
        fitness[best][None],
        state.best_solution,
        state.best_fitness,
    )
    state = state.replace(best_solution=best_solution, best_fitness=best_fitness)
    placeholder = jnp.zeros((es.population_size, 0), state.mean.dtype)
    shaped = es._postprocess_fitness(
        fitness, es.fitness_shaping_fn(placeholder, fitness, state, strategy.params)
    )
    return state, shaped


def descend(es: Any, grad: jax.Array, state: PyTree) -> PyTree:
    """How an OpenES-like ``tell`` closes, as evosax's ``Open_ES._tell`` does: the optimizer's
    step on the mean along ``grad`` (an estimate of the gradient of the fitness, which evosax
    minimises), then the std schedule. ``generation_counter`` is left to the caller (evosax's
    ``tell`` counts it after ``_tell``)."""
    updates, opt_state = es.optimizer.update(grad, state.opt_state, state.mean)
    return state.replace(
        mean=optax.apply_updates(state.mean, updates),
        std=es.std_schedule(state.generation_counter),
        opt_state=opt_state,
    )
