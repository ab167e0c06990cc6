"""Low-rank ES: every weight matrix perturbed by a rank-r product (EGGROLL, arXiv 2511.16652).

Member ``i`` of OpenES is ``mean + std * z_i`` with ``z_i`` Gaussian over every parameter. Here
each parameter leaf of two or more axes (a weight matrix; a conv kernel as the
``(kh kw c_in) x c_out`` matrix it contracts as) is perturbed by ``std * A_i B_iᵀ / sqrt(r)``
with ``A_i`` (rows x r) and ``B_i`` (columns x r) standard normal (stored a row per rank, as
:class:`esjax.policies.lowrank.LowRank` takes them), and every other leaf (biases,
norms) by ordinary Gaussian noise. Each entry of ``A Bᵀ / sqrt(r)`` has mean 0 and variance 1,
like an entry of OpenES's ``z``, and the perturbation is uncorrelated across entries, so
``E[z zᵀ] = I`` holds for both. The gradient estimate ``sum_i f_i z_i / (popsize std)`` then
has OpenES's expectation wherever the fitness is linear or quadratic around the mean (odd
moments vanish for both), so the update has OpenES's scale and a learning rate tuned for
OpenES carries over (a test checks the moments and the expectation on a linear fitness). It
is not Gaussian, so beyond second order it is not OpenES's estimate; EGGROLL bounds the
difference by ``O(1 / r)``. Its noise differs too: at rank 1 a matrix's estimate from ``n``
members has rank ``<= n``.

Nothing population-sized is ever formed. A member's factors come from ``fold_in(key, pair)``
and are drawn inside the rollout chunk that steps it; its matrices reach the policy as
:class:`esjax.policies.lowrank.LowRank` (the shared mean plus thin factors), so a layer is one
matrix-matrix product for the chunk plus rank-r corrections. ``tell`` draws the factors again,
a block of pairs at a time, and assembles each matrix's update as ``Aᵀ diag(w) B``, a product
of thin matrices. Members come in antithetic pairs ``(+A, B)``, ``(-A, B)`` unless
``antithetic = false``.

:class:`LowRank_ES` is the algorithm in evosax's API (its ``ask`` materialises the population
from the ``solution`` pytree's leaf shapes, for use outside esjax and as the reference of the
tests); its ``lazy_form`` is how esjax steps it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms.distribution_based.base import DistributionBasedAlgorithm, metrics_fn
from evosax.algorithms.distribution_based.open_es import Params, State
from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn
from flax import struct
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from esjax.policies.lowrank import LowRank, matrix_shape
from esjax.strategies.population import best_and_shaped, descend

PyTree = Any
# ``tell`` draws the factors of this many floats' worth of pairs at a time (and a whole pair at
# least): the update's memory stays flat in popsize, and each block is a few large products.
BLOCK_FLOATS = 1 << 22
# evosax's Open_ES defaults, for use outside esjax (esjax always passes its own).
DEFAULT_OPTIMIZER = optax.sgd(learning_rate=1e-3)
DEFAULT_STD = optax.constant_schedule(1.0)


@dataclass(frozen=True)
class Layout:
    """Which leaves of a member's parameters are matrices, and how a pair's noise is drawn.

    ``shapes`` are the leaves' shapes in the order ``ravel_pytree`` flattens them.
    """

    shapes: tuple[tuple[int, ...], ...]
    rank: int

    @classmethod
    def of(cls, tree: PyTree, rank: int) -> Layout:
        return cls(tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(tree)), int(rank))

    def is_matrix(self, shape: tuple[int, ...]) -> bool:
        return len(shape) >= 2

    @property
    def pair_floats(self) -> int:
        """Floats one pair's noise takes: ``(rows + columns) r`` per matrix, a vector's size."""
        return sum(
            sum(matrix_shape(shape)) * self.rank if self.is_matrix(shape) else math.prod(shape)
            for shape in self.shapes
        )

    def block(self, pairs: int) -> int:
        """Pairs per block of ``tell``: a function of the layout and popsize alone, never of
        the device count, so the update's additions are the same on any mesh."""
        return max(1, min(pairs, BLOCK_FLOATS // max(1, self.pair_floats)))

    def noise(self, key: jax.Array, pair: jax.Array) -> list[Any]:
        """Pair ``pair``'s noise, leaf by leaf: ``(A, B)`` for a matrix, a vector otherwise.

        The same numbers whoever draws them, alone or in a batch, on any device."""
        pair_key = jax.random.fold_in(key, pair)
        drawn = []
        for index, shape in enumerate(self.shapes):
            leaf_key = jax.random.fold_in(pair_key, index)
            if self.is_matrix(shape):
                rows, cols = matrix_shape(shape)
                factors = jax.random.normal(leaf_key, (self.rank, rows + cols))
                drawn.append((factors[:, :rows], factors[:, rows:]))
            else:
                drawn.append(jax.random.normal(leaf_key, shape))
        return drawn

    def member(
        self, leaves: list[jax.Array], noise: list[Any], std: jax.Array, sign: jax.Array
    ) -> list[Any]:
        """A member's leaves: :class:`LowRank` matrices over the shared ``leaves``, vectors
        perturbed in full."""
        made = []
        for leaf, drawn in zip(leaves, noise, strict=True):
            if isinstance(drawn, tuple):
                scale = sign * std / math.sqrt(self.rank)
                made.append(LowRank(base=leaf, a=drawn[0], b=drawn[1], scale=scale))
            else:
                made.append(leaf + sign * std * drawn)
        return made

    def delta(self, noise: list[Any]) -> jax.Array:
        """A pair's perturbation ``z`` (unit std, ``+`` sign) as a flat vector: only for one
        member's row and for the materialised reference."""
        parts = []
        for drawn in noise:
            if isinstance(drawn, tuple):
                parts.append((drawn[0].T @ drawn[1]).reshape(-1) / math.sqrt(self.rank))
            else:
                parts.append(drawn.reshape(-1))
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    def weighted_sum(self, key: jax.Array, weights: jax.Array) -> jax.Array:
        """``sum_p weights[p] z_p`` as a flat vector, each matrix's part as ``Aᵀ diag(w) B``.

        Pairs are drawn a block at a time (:meth:`block`) and the blocks added in pair order:
        the same additions on any device count, since every device computes all of it.
        """
        pairs = weights.shape[0]
        block = self.block(pairs)
        blocks = -(-pairs // block)
        weights = jnp.pad(weights, (0, blocks * block - pairs))  # padding weighs 0

        def add(index, totals):
            ids = index * block + jnp.arange(block, dtype=jnp.int32)
            drawn = jax.vmap(lambda p: self.noise(key, p))(ids)
            w = jax.lax.dynamic_slice_in_dim(weights, index * block, block)
            parts = zip(totals, drawn, self.shapes, strict=True)
            return [t + self._block_sum(w, d, shape) for t, d, shape in parts]

        zeros = [jnp.zeros(shape, weights.dtype) for shape in self.shapes]
        totals = jax.lax.fori_loop(0, blocks, add, zeros)
        return jnp.concatenate([t.reshape(-1) for t in totals]) if totals else jnp.zeros((0,))

    def _block_sum(self, w: jax.Array, drawn: Any, shape: tuple[int, ...]) -> jax.Array:
        if not isinstance(drawn, tuple):
            return jnp.tensordot(w, drawn, axes=1)
        a, b = drawn  # (block, r, rows), (block, r, cols)
        rows, cols = a.shape[-1], b.shape[-1]
        # (rows, block r) @ (block r, cols): the thin factors' product, Aᵀ diag(w) B.
        weighted = (a * w[:, None, None]).reshape(-1, rows)
        return (weighted.T @ b.reshape(-1, cols) / math.sqrt(self.rank)).reshape(shape)


class LowRank_ES(DistributionBasedAlgorithm):
    """Low-rank ES in evosax's API: rank-``rank`` perturbations of every weight matrix.

    ``solution`` is a member's parameter pytree (its leaves' shapes say which are matrices);
    a flat vector is one vector leaf, and the search is then OpenES's.
    """

    @staticmethod
    def flops_per_entry(settings: Mapping[str, Any]) -> float:
        """What a generation costs per member and parameter, for esjax's cost warning:
        ``tell``'s thin products, ``r`` multiply-adds per entry of a pair's ``A Bᵀ`` (a
        member's, without pairs); the draws are thin."""
        per_pair = 2.0 * float(settings.get("rank", 1))  # a multiply-add per rank
        return per_pair / 2.0 if settings.get("antithetic", True) else per_pair

    @staticmethod
    def check_settings(settings: Mapping[str, Any]) -> str | None:
        """Why esjax's own settings cannot apply, in one line, or None (read when built)."""
        if settings.get("l2_penalty"):
            return (
                "l2_penalty reads every member's parameters, which the low-rank strategy never "
                "forms; leave it at 0 (weight_decay decays the mean instead)"
            )
        if settings.get("noise_prng", "threefry") != "threefry":
            return (
                "noise_prng: each member's factors are drawn from its index, and only threefry "
                "keys give the same numbers drawn alone or in a batch; leave it at threefry"
            )
        return None

    def __init__(
        self,
        population_size: int,
        solution: PyTree,
        rank: int = 1,
        use_antithetic_sampling: bool = True,
        optimizer: optax.GradientTransformation = DEFAULT_OPTIMIZER,
        std_schedule: Callable = DEFAULT_STD,
        fitness_shaping_fn: Callable = centered_rank_fitness_shaping_fn,
        metrics_fn: Callable = metrics_fn,
    ):
        if int(rank) < 1:
            raise ValueError(f"rank must be at least 1, got {rank}")
        if use_antithetic_sampling and population_size % 2:
            raise ValueError("antithetic pairs need an even population size")
        super().__init__(population_size, solution, fitness_shaping_fn, metrics_fn)
        self.rank = int(rank)
        self.use_antithetic_sampling = bool(use_antithetic_sampling)
        self.optimizer = optimizer
        self.std_schedule = std_schedule
        self.layout = Layout.of(solution, self.rank)

    @property
    def pairs(self) -> int:
        """Noise draws per generation: pairs, or every member without antithetic sampling."""
        return self.population_size // 2 if self.use_antithetic_sampling else self.population_size

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
        """The whole population, materialised (the reference the lazy form is checked
        against): member ``i`` is pair ``i % pairs``, negated for ``i >= pairs``."""
        members = jnp.arange(self.population_size, dtype=jnp.int32)
        pair, sign = pair_and_sign(members, self.pairs)
        z = jax.vmap(lambda p: self.layout.delta(self.layout.noise(key, p)))(pair)
        return state.mean + state.std * sign[:, None] * z, state

    def _tell(self, key, population, fitness, state: State, params: Params) -> State:
        """OpenES's step from ``(population - mean) / std`` (the reference path)."""
        z = (population - state.mean) / state.std
        return descend(self, jnp.dot(fitness, z) / (self.population_size * state.std), state)


def pair_and_sign(member: jax.Array, pairs: int) -> tuple[jax.Array, jax.Array]:
    """Member ``member``'s pair and its sign (``-1`` for the second member of a pair)."""
    return member % pairs, jnp.where(member >= pairs, -1.0, 1.0)


@struct.dataclass
class LowRankMembers:
    """A :class:`esjax.strategies.population.LazyMembers`: member ids and the key their
    factors come from; the mean is shared by every member."""

    mean: jax.Array
    std: jax.Array
    key: jax.Array
    ids: jax.Array  # (members,) int32
    unravel: Callable = struct.field(pytree_node=False)
    layout: Layout = struct.field(pytree_node=False)
    pairs: int = struct.field(pytree_node=False)
    size: int = struct.field(pytree_node=False)

    @property
    def popsize(self) -> int:
        return self.size

    @property
    def devices(self) -> int:
        return 1  # every device draws the factors of the members it steps

    def members(self) -> jax.Array:
        return self.ids

    def member(self, ident: jax.Array) -> PyTree:
        pair, sign = pair_and_sign(ident, self.pairs)
        leaves, treedef = jax.tree.flatten(self.unravel(self.mean))
        made = self.layout.member(leaves, self.layout.noise(self.key, pair), self.std, sign)
        return jax.tree.unflatten(treedef, made)

    def take(self, rows: jax.Array) -> LowRankMembers:
        return self.replace(ids=self.ids[rows])

    def member_flat(self, member: jax.Array) -> jax.Array:
        pair, sign = pair_and_sign(member, self.pairs)
        return self.mean + self.std * sign * self.layout.delta(self.layout.noise(self.key, pair))

    def specs(self) -> PyTree:
        return jax.tree.map(lambda _: P(), self)

    def device_share(self, device: jax.Array) -> tuple[LowRankMembers, jax.Array, jax.Array]:
        raise NotImplementedError("never split over devices (devices is 1)")

    def in_member_order(self, x: jax.Array) -> jax.Array:
        return x[: self.size]


@dataclass(frozen=True)
class LazyLowRank:
    """:class:`LowRank_ES` stepped member by member, its matrices kept as factors: an
    :class:`esjax.strategies.population.LazyStrategy`."""

    name: str = "low-rank ES"

    def applies(self, strategy: Any) -> bool:
        return isinstance(strategy.es, LowRank_ES)

    def ask(
        self, strategy: Any, key: jax.Array, state: Any, unravel: Callable, mesh: Mesh | None
    ) -> LowRankMembers:
        es = strategy.es
        layout = Layout.of(jax.eval_shape(unravel, state.mean), es.rank)
        ids = jnp.arange(es.population_size, dtype=jnp.int32)
        return LowRankMembers(state.mean, state.std, strategy.noise_key(key), ids, unravel,
                              layout, es.pairs, es.population_size)  # fmt: skip

    def tell(
        self,
        strategy: Any,
        key: jax.Array,
        population: LowRankMembers,
        fitness: jax.Array,
        state: Any,
    ) -> Any:
        es = strategy.es
        state, shaped = best_and_shaped(strategy, population, fitness, state)
        pairs = es.pairs
        weights = shaped[:pairs] - shaped[pairs:] if es.use_antithetic_sampling else shaped
        total = population.layout.weighted_sum(population.key, weights)
        state = descend(es, total / (es.population_size * state.std), state)
        return state.replace(generation_counter=state.generation_counter + 1)

    def held_floats(self, popsize: int, num_dims: int, devices: int) -> int:
        """One block of pairs' factors in ``tell``, the update and one member's row. A chunk's
        factors are not counted: on a CPU a chunk's are small beside its activations; on a GPU,
        where a chunk is the whole population, they are ``popsize (rows + cols) r`` per matrix
        (as lazy OpenES's chunk of members is not counted either)."""
        return BLOCK_FLOATS + 3 * num_dims


LowRank_ES.lazy_form = LazyLowRank()  # type: ignore[attr-defined]
