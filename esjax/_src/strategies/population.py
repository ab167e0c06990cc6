"""The population door: what members are to the rollout, and how a strategy makes them.

A :class:`Population` names its members and makes each member's parameters only inside the
rollout chunk that steps it. Three kinds implement it, and the rollout and the engine see no
difference between them:

* :class:`Stacked`, a materialised population: rows with a leading member axis (evosax's
  ``(popsize, num_dims)`` matrix, or a parameter pytree an evaluation hands over);
* antithetic OpenES's half noise (:mod:`esjax._src.strategies.lazy_openes`);
* low-rank ES's factors, drawn per member (:mod:`esjax._src.strategies.lowrank_es`).

A :class:`StrategyForm` is how esjax asks, tells and budgets a strategy's population, and it
holds every hook a strategy may declare: whether it applies, a check of esjax's settings, its
cost per member and parameter, what it holds in memory. :data:`MATERIALISED` is evosax's own
ask and tell, the form of every algorithm that declares none; an algorithm declares its own as
its class attribute ``form`` (:func:`esjax._src.strategies.strategy.form_for` finds it).

Besides those it holds the step every lazy ``tell`` opens with (:func:`best_and_shaped`) and the
one an OpenES-like ``tell`` closes with (:func:`descend`). It imports no strategy library at
import time (optax only), so the rollout can import it before JAX's devices are set.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from esjax._src.policies.perturb import Plan
from esjax._src.strategies.built import Strategy

PyTree = Any

# The mesh axis the population is sharded over (the rollout's and the engine's).
AXIS = "population"


@runtime_checkable
class Population(Protocol):
    """A generation's members, their parameters made on demand, member by member.

    The rollout maps over :meth:`members` (ids with a leading member axis), in chunks of as
    many members as :meth:`member_bytes` lets stay in cache, and calls :meth:`member` on each
    id inside the chunk. A population may hold its state split over the devices of a mesh
    (``devices > 1``): then :meth:`device_share` says which members a device steps and
    :meth:`in_member_order` puts per-device results back in the population's order. It is a
    JAX pytree (a ``flax.struct.dataclass``), so it passes through ``jit`` and ``shard_map``.
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

    def member_bytes(self) -> int:
        """What a rollout chunk holds per member while stepping it, for sizing chunks to a
        cache: its weights, or what grows with the chunk when the weights are shared."""
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


class Undivided:
    """What a :class:`Population` that every device holds whole shares: nothing to split over
    a mesh, results already in member order (less any padding)."""

    @property
    def popsize(self) -> int:
        raise NotImplementedError

    @property
    def devices(self) -> int:
        return 1

    def specs(self) -> PyTree:
        return jax.tree.map(lambda _: P(), self)

    def device_share(self, device: jax.Array) -> tuple[Self, jax.Array, jax.Array]:
        raise NotImplementedError("never split over devices (devices is 1)")

    def in_member_order(self, x: jax.Array) -> jax.Array:
        return x[: self.popsize]


@struct.dataclass
class Stacked(Undivided):
    """A materialised population: ``rows`` with a leading member axis, each made into a
    member's parameters by ``unravel`` (None: each row is already a parameter pytree)."""

    rows: PyTree
    unravel: Callable[[jax.Array], PyTree] | None = struct.field(pytree_node=False, default=None)

    @property
    def popsize(self) -> int:
        return int(jax.tree.leaves(self.rows)[0].shape[0])

    def members(self) -> PyTree:
        return self.rows

    def member(self, ident: PyTree) -> PyTree:
        return self.unravel(ident) if self.unravel is not None else ident

    def take(self, rows: jax.Array) -> Stacked:
        return dataclasses.replace(self, rows=jax.tree.map(lambda x: x[rows], self.rows))

    def member_flat(self, member: jax.Array) -> jax.Array:
        row = jax.tree.map(lambda x: x[member], self.rows)
        return row if self.unravel is not None else ravel_pytree(row)[0]

    def member_bytes(self) -> int:
        leaves = jax.tree.leaves(self.rows)
        return sum(math.prod(x.shape[1:]) * x.dtype.itemsize for x in leaves) or 1


def as_population(members: Population | PyTree) -> Population:
    """The rollout's one door: a :class:`Population` as it is, a parameter pytree with a leading
    member axis (an evaluation's members, a user's own) as :class:`Stacked`."""
    return members if isinstance(members, Population) else Stacked(members)


# ---------------------------------------------------------------------------- member layout
@dataclass(frozen=True)
class MemberLayout:
    """A member's parameters as a strategy may perturb them: how a flat vector becomes the
    policy's parameter pytree, its leaves' shapes (``jax.tree.leaves`` order, which is
    ``ravel_pytree``'s), and where the network multiplies by each (:attr:`plan`, read off the
    network the first time a strategy asks: only a low-rank one does)."""

    unravel: Callable[[jax.Array], PyTree]
    shapes: tuple[tuple[int, ...], ...]
    read_plan: Callable[[], Plan] = field(compare=False)

    @classmethod
    def of(
        cls, unravel: Callable[[jax.Array], PyTree], num_dims: int, read_plan: Callable[[], Plan]
    ) -> MemberLayout:
        template = jax.eval_shape(unravel, jax.ShapeDtypeStruct((num_dims,), jnp.float32))
        shapes = tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(template))
        return cls(unravel, shapes, read_plan)

    @classmethod
    def flat(cls, num_dims: int) -> MemberLayout:
        """One vector of ``num_dims`` parameters, nothing known of a network."""
        return cls(lambda x: x, ((num_dims,),), lambda: Plan((None,)))

    @functools.cached_property
    def plan(self) -> Plan:
        return self.read_plan()

    @property
    def num_dims(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)


# ---------------------------------------------------------------------------- strategy forms
@runtime_checkable
class StrategyForm(Protocol):
    """How esjax steps a strategy's population, and every hook a strategy may declare.

    An algorithm class declares its form as the class attribute ``form``; evosax's own
    algorithms have :data:`MATERIALISED` (and OpenES with antithetic pairs, lazy OpenES where it
    applies). ``strategy`` is the run's :class:`~esjax._src.strategies.built.Strategy`; ``state`` is
    the state its ``init`` made, so checkpoints, resume and seed-vmapping treat every form alike.
    """

    @property
    def name(self) -> str:
        """What the form is, for messages (``"low-rank ES"``)."""
        ...

    def applies(self, strategy: Strategy) -> bool:
        """Whether this form computes exactly what ``strategy`` would with a matrix."""
        ...

    def check_settings(self, settings: Mapping[str, Any]) -> str | None:
        """Why esjax's ``settings`` cannot apply, in one line (read when the strategy is built),
        or None."""
        ...

    def flops_per_entry(self, strategy: Strategy) -> float:
        """Floating-point work per member and parameter of a generation, for the warning that
        the strategy's own maths rivals the rollouts."""
        ...

    def held_floats(
        self, strategy: Strategy, layout: MemberLayout, devices: int, chunk: int
    ) -> int:
        """Floats one device holds for a generation's population beyond the strategy's state,
        ``chunk`` members stepping at once (what the memory preflight charges)."""
        ...

    def ask(
        self,
        strategy: Strategy,
        key: jax.Array,
        state: PyTree,
        layout: MemberLayout,
        mesh: Mesh | None,
    ) -> tuple[Population, PyTree]:
        """The generation's population for ``key`` and the state after asking; with a
        ``mesh``, placed or split over its devices as the form chooses."""
        ...

    def tell(
        self,
        strategy: Strategy,
        key: jax.Array,
        population: Population,
        fitness: jax.Array,
        state: PyTree,
    ) -> PyTree:
        """The next state from each member's ``fitness`` (evosax's sign: lower is better)."""
        ...


@dataclass(frozen=True)
class Materialised:
    """evosax's own ask and tell: the population drawn whole, as a ``(popsize, num_dims)``
    matrix, on every device (so only returns cross devices)."""

    name: str = "materialised"

    def applies(self, strategy: Strategy) -> bool:
        return True

    def check_settings(self, settings: Mapping[str, Any]) -> str | None:
        return None

    def flops_per_entry(self, strategy: Strategy) -> float:
        return 30.0  # drawing a Gaussian dominates, a few dozen flops per entry

    def held_floats(
        self, strategy: Strategy, layout: MemberLayout, devices: int, chunk: int
    ) -> int:
        """The noise, the population and ``tell``'s weighted noise: three population-sized
        arrays (a chunk's members are rows of one of them)."""
        return 3 * strategy.popsize * strategy.num_dims

    def ask(
        self,
        strategy: Strategy,
        key: jax.Array,
        state: PyTree,
        layout: MemberLayout,
        mesh: Mesh | None,
    ) -> tuple[Stacked, PyTree]:
        rows, state = strategy.ask(key, state)
        if mesh is not None:
            # Left free, XLA would shard the draw and all-gather it for ``tell``.
            rows = lax.with_sharding_constraint(rows, NamedSharding(mesh, P()))
        return Stacked(rows, layout.unravel), state

    def tell(
        self,
        strategy: Strategy,
        key: jax.Array,
        population: Population,
        fitness: jax.Array,
        state: PyTree,
    ) -> PyTree:
        assert isinstance(population, Stacked)  # what this form's ask made
        return strategy.tell(key, population.rows, fitness, state)


MATERIALISED = Materialised()


# ---------------------------------------------------------------------------- shared steps
def best_and_shaped(
    strategy: Strategy, population: Population, fitness: jax.Array, state: PyTree
) -> tuple[PyTree, jax.Array]:
    """How every lazy ``tell`` opens: the state with the best member so far updated (from the
    one member's row, :meth:`Population.member_flat`), and the shaped fitness.

    Shaping sees the fitness only: a lazy form applies only where its shaping reads no
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


# ---------------------------------------------------------------------------- antithetic pairs
class PairNoise(Protocol):
    """How an OpenES-like strategy draws a pair's perturbation, addressable by the pair's index
    alone, so that no device and no chunk ever draws more than the members it steps.

    The draw is a list with one entry per leaf of a member's parameters (``jax.tree.leaves``
    order); what an entry holds is the noise's own business (an array, a pair of factors).
    """

    @property
    def pair_floats(self) -> int:
        """Floats one pair's draw holds."""
        ...

    def noise(self, key: jax.Array, pair: jax.Array) -> list[Any]:
        """Pair ``pair``'s draw: the same numbers whoever draws them, alone or in a batch."""
        ...

    def member(
        self, leaves: list[jax.Array], noise: list[Any], std: jax.Array, sign: jax.Array
    ) -> list[Any]:
        """A member's leaves over the shared mean's ``leaves``: ``leaf + sign std z``, in
        whatever form the policy applies (:func:`esjax._src.policies.perturb.splitting`)."""
        ...

    def delta(self, noise: list[Any]) -> jax.Array:
        """The draw as a flat vector ``z`` of unit scale (one member's row; the reference)."""
        ...

    def weighted_sum(self, key: jax.Array, weights: jax.Array) -> jax.Array:
        """``sum_p weights[p] z_p``, flat, the same additions on any device count."""
        ...

    def member_bytes(self) -> int:
        """What a rollout chunk holds per member (see :meth:`Population.member_bytes`)."""
        ...


def pair_and_sign(member: jax.Array, pairs: int) -> tuple[jax.Array, jax.Array]:
    """Member ``member``'s pair and its sign (``-1`` for the second member of a pair)."""
    return member % pairs, jnp.where(member >= pairs, -1.0, 1.0)


def blocked_sum(
    draw: Callable[[jax.Array], list[Any]],
    weights: jax.Array,
    block: int,
    shapes: tuple[tuple[int, ...], ...],
    leaf_sum: Callable[[jax.Array, Any, tuple[int, ...]], jax.Array],
) -> jax.Array:
    """``sum_p weights[p] z_p`` as a flat vector: pairs drawn ``block`` at a time with ``draw``
    (a pair's index to its draw), each block's ``leaf_sum(w, drawn, shape)`` per leaf added in
    pair order, so the memory is one block's whatever the popsize."""
    pairs = weights.shape[0]
    blocks = -(-pairs // block)
    weights = jnp.pad(weights, (0, blocks * block - pairs))  # padding weighs 0

    def add(index: jax.Array, totals: list[jax.Array]) -> list[jax.Array]:
        ids = index * block + jnp.arange(block, dtype=jnp.int32)
        drawn = jax.vmap(draw)(ids)
        w = lax.dynamic_slice_in_dim(weights, index * block, block)
        parts = zip(totals, drawn, shapes, strict=True)
        return [t + leaf_sum(w, d, shape) for t, d, shape in parts]

    zeros = [jnp.zeros(shape, weights.dtype) for shape in shapes]
    totals = lax.fori_loop(0, blocks, add, zeros)
    return jnp.concatenate([t.reshape(-1) for t in totals]) if totals else jnp.zeros((0,))


@struct.dataclass
class PairedMembers(Undivided):
    """A :class:`Population` of ``mean + sign std z_pair``: member ids and the key their noise
    comes from; the mean is shared by every member, each member's noise drawn in its chunk."""

    mean: jax.Array
    std: jax.Array
    key: jax.Array
    ids: jax.Array  # (members,) int32
    unravel: Callable[[jax.Array], PyTree] = struct.field(pytree_node=False)
    noise: PairNoise = struct.field(pytree_node=False)
    pairs: int = struct.field(pytree_node=False)
    size: int = struct.field(pytree_node=False)

    @property
    def popsize(self) -> int:
        return self.size  # every device draws the noise of the members it steps

    def members(self) -> jax.Array:
        return self.ids

    def member(self, ident: jax.Array) -> PyTree:
        pair, sign = pair_and_sign(ident, self.pairs)
        leaves, treedef = jax.tree.flatten(self.unravel(self.mean))
        made = self.noise.member(leaves, self.noise.noise(self.key, pair), self.std, sign)
        return jax.tree.unflatten(treedef, made)

    def take(self, rows: jax.Array) -> PairedMembers:
        return dataclasses.replace(self, ids=self.ids[rows])

    def member_flat(self, member: jax.Array) -> jax.Array:
        pair, sign = pair_and_sign(member, self.pairs)
        return self.mean + self.std * sign * self.noise.delta(self.noise.noise(self.key, pair))

    def member_bytes(self) -> int:
        return self.noise.member_bytes()


@dataclass(frozen=True)
class PairedForm:
    """A :class:`StrategyForm` for an OpenES-like algorithm whose noise is drawn by pair index:
    members in antithetic pairs (or not), centred ranks or the algorithm's shaping, the
    optimizer's step on the mean (evosax's ``Open_ES`` state and ``tell``), never a
    population-sized array.

    The algorithm has ``population_size``, ``pairs`` (noise draws per generation),
    ``use_antithetic_sampling``, ``optimizer`` and ``std_schedule``, and an OpenES ``State``;
    ``noise_for(strategy, layout)`` makes its :class:`PairNoise` for a run's members.
    ``flops`` is its cost per member and parameter (:meth:`StrategyForm.flops_per_entry`).
    """

    name: str
    noise_for: Callable[[Strategy, MemberLayout], PairNoise]
    flops: Callable[[Strategy], float] = lambda strategy: 30.0
    tell_floats: int = 1 << 22  # what the noise's weighted_sum holds at once

    def applies(self, strategy: Strategy) -> bool:
        return getattr(type(strategy.es), "form", None) is self

    def check_settings(self, settings: Mapping[str, Any]) -> str | None:
        """Settings of esjax's that noise drawn by index cannot honour."""
        if settings.get("l2_penalty"):
            return (
                "l2_penalty reads every member's parameters, which this strategy never forms; "
                "leave it at 0 (weight_decay decays the mean instead)"
            )
        if settings.get("noise_prng", "threefry") != "threefry":
            return (
                "noise_prng: each member's noise is drawn from its index, and only threefry keys "
                "give the same numbers drawn alone or in a batch; leave it at threefry"
            )
        return None

    def flops_per_entry(self, strategy: Strategy) -> float:
        return self.flops(strategy)

    def held_floats(
        self, strategy: Strategy, layout: MemberLayout, devices: int, chunk: int
    ) -> int:
        """``tell``'s block of pairs, the update and one member's row, and a chunk's members'
        draws while they step."""
        pair = self.noise_for(strategy, layout).pair_floats
        return self.tell_floats + 3 * strategy.num_dims + chunk * pair

    def ask(
        self,
        strategy: Strategy,
        key: jax.Array,
        state: Any,
        layout: MemberLayout,
        mesh: Mesh | None,
    ) -> tuple[PairedMembers, Any]:
        es = strategy.es
        ids = jnp.arange(es.population_size, dtype=jnp.int32)
        noise = self.noise_for(strategy, layout)
        members = PairedMembers(state.mean, state.std, strategy.noise_key(key), ids,
                                layout.unravel, noise, es.pairs, es.population_size)  # fmt: skip
        return members, state

    def tell(
        self,
        strategy: Strategy,
        key: jax.Array,
        population: Population,
        fitness: jax.Array,
        state: Any,
    ) -> Any:
        assert isinstance(population, PairedMembers)  # what this form's ask made
        es = strategy.es
        state, shaped = best_and_shaped(strategy, population, fitness, state)
        pairs = es.pairs
        weights = shaped[:pairs] - shaped[pairs:] if es.use_antithetic_sampling else shaped
        total = population.noise.weighted_sum(population.key, weights)
        state = descend(es, total / (es.population_size * state.std), state)
        return state.replace(generation_counter=state.generation_counter + 1)
