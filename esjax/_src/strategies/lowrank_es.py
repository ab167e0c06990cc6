"""Low-rank ES: every weight matrix perturbed by a rank-r product (EGGROLL, arXiv 2511.16652).

Member ``i`` of OpenES is ``mean + std * z_i`` with ``z_i`` Gaussian over every parameter. Here
each parameter leaf the network multiplies by (a weight matrix; a conv kernel as the ``(kh kw
c_in) x c_out`` matrix it contracts as: :func:`esjax._src.policies.perturb.plan` reads the split
off the network) is perturbed by ``std * A_i B_iᵀ / sqrt(r)`` with ``A_i`` (rows x r) and
``B_i`` (columns x r) standard normal (stored a row per rank, as
:class:`esjax._src.policies.perturb.LowRank` takes them), and every other leaf (biases, norms,
embeddings) by ordinary Gaussian noise. Each entry of ``A Bᵀ / sqrt(r)`` has mean 0 and variance 1,
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
:class:`esjax._src.policies.perturb.LowRank` (the shared mean plus thin factors), which every
network applies where it multiplies (:func:`esjax._src.policies.perturb.splitting`), so a layer is
one matrix-matrix product for the chunk plus rank-r corrections. ``tell`` draws the factors again,
a block of pairs at a time, and assembles each matrix's update as ``Aᵀ diag(w) B``, a product
of thin matrices. Members come in antithetic pairs ``(+A, B)``, ``(-A, B)`` unless
``antithetic = false``.

:class:`LowRank_ES` is the algorithm in evosax's API (its ``ask`` materialises the population
from the ``solution`` pytree's leaf shapes, for use outside esjax and as the reference of the
tests); its ``form`` (:class:`LowRankForm`) is how esjax steps it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms.distribution_based.base import DistributionBasedAlgorithm, metrics_fn
from evosax.algorithms.distribution_based.open_es import Params, State
from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn

from esjax._src.policies.perturb import LowRank, Plan, matrix_shape
from esjax._src.strategies.built import Strategy
from esjax._src.strategies.population import (
    MemberLayout,
    PairedForm,
    StrategyForm,
    blocked_sum,
    descend,
    pair_and_sign,
)

PyTree = Any
# ``tell`` draws the factors of this many floats' worth of pairs at a time (and a whole pair at
# least): the update's memory stays flat in popsize, and each block is a few large products.
BLOCK_FLOATS = 1 << 22
# evosax's Open_ES defaults, for use outside esjax (esjax always passes its own).
DEFAULT_OPTIMIZER = optax.sgd(learning_rate=1e-3)
DEFAULT_STD = optax.constant_schedule(1.0)


@dataclass(frozen=True)
class Layout:
    """How a pair's noise is drawn, leaf by leaf: ``shapes`` in the order ``ravel_pytree``
    flattens them, ``splits`` where each leaf splits into the matrix its products contract
    (None: a leaf perturbed in full), ``rank`` the factors' rank."""

    shapes: tuple[tuple[int, ...], ...]
    splits: tuple[int | None, ...]
    rank: int

    @classmethod
    def of(cls, member: MemberLayout, rank: int) -> Layout:
        """A run's layout: the policy's leaves, split where its network multiplies them."""
        return cls(member.shapes, member.plan.splits, int(rank))

    @classmethod
    def of_tree(cls, tree: PyTree, rank: int, plan: Plan | None = None) -> Layout:
        """A pytree's layout: split as ``plan`` says, else every leaf of two or more axes as
        ``prod(shape[:-1]) x shape[-1]`` (a dense kernel, a conv kernel HWIO)."""
        shapes = tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(tree))
        splits = plan.splits if plan is not None else _default_splits(shapes)
        return cls(shapes, tuple(splits), int(rank))

    def matrices(self) -> list[tuple[tuple[int, ...], int]]:
        """``(shape, split)`` of every leaf perturbed low-rank."""
        return [(s, k) for s, k in zip(self.shapes, self.splits, strict=True) if k is not None]

    @property
    def pair_floats(self) -> int:
        """Floats one pair's noise takes: ``(rows + columns) r`` per matrix, a vector's size."""
        return sum(
            sum(matrix_shape(shape, split)) * self.rank if split is not None else math.prod(shape)
            for shape, split in zip(self.shapes, self.splits, strict=True)
        )

    def member_bytes(self) -> int:
        """What a chunk holds per low-rank member: the widest product's activations, input or
        output, for a network of dense layers (a larger chunk makes each shared product a
        larger matrix-matrix product; what grows with it is the activations); a member's
        whole weights where a conv is low-rank (its activations are its width times the
        image's positions, which the kernel does not say).

        Measured on the MLP 64-64, 256-256 and 1024-1024 at 2048 members on a 2-core CPU, the
        fastest chunks were 2048, 1024 and 512 members (0.5-2 MB of the widest layer's
        activations; this rule picks 2048, 1024 and 256, the last at 0.94 of 512's speed);
        sized by the factors instead, chunks of 512 and 128 ran the first two at 0.82 and 0.53
        of the best.
        """
        matrices = self.matrices()
        if not matrices or any(len(shape) > 2 for shape, _ in matrices):
            return sum(math.prod(shape) for shape in self.shapes) * 4 or 4
        return max(max(matrix_shape(shape, split)) for shape, split in matrices) * 4

    def block(self, pairs: int) -> int:
        """Pairs per block of ``tell``: a function of the layout and popsize alone, never of
        the device count, so the update's additions are the same on any mesh."""
        return max(1, min(pairs, BLOCK_FLOATS // max(1, self.pair_floats)))

    def noise(self, key: jax.Array, pair: jax.Array) -> list[Any]:
        """Pair ``pair``'s noise, leaf by leaf: ``(A, B)`` for a matrix, a vector otherwise.

        The same numbers whoever draws them, alone or in a batch, on any device."""
        pair_key = jax.random.fold_in(key, pair)
        drawn: list[Any] = []
        for index, (shape, split) in enumerate(zip(self.shapes, self.splits, strict=True)):
            leaf_key = jax.random.fold_in(pair_key, index)
            if split is not None:
                rows, cols = matrix_shape(shape, split)
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
        made: list[Any] = []
        for leaf, drawn, split in zip(leaves, noise, self.splits, strict=True):
            if split is not None:
                scale = sign * std / math.sqrt(self.rank)
                made.append(LowRank(base=leaf, a=drawn[0], b=drawn[1], scale=scale, split=split))
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
        block = self.block(weights.shape[0])
        return blocked_sum(lambda p: self.noise(key, p), weights, block, self.shapes,
                           self._block_sum)  # fmt: skip

    def _block_sum(self, w: jax.Array, drawn: Any, shape: tuple[int, ...]) -> jax.Array:
        if not isinstance(drawn, tuple):
            return jnp.tensordot(w, drawn, axes=1)
        a, b = drawn  # (block, r, rows), (block, r, cols)
        rows, cols = a.shape[-1], b.shape[-1]
        # (rows, block r) @ (block r, cols): the thin factors' product, Aᵀ diag(w) B.
        weighted = (a * w[:, None, None]).reshape(-1, rows)
        return (weighted.T @ b.reshape(-1, cols) / math.sqrt(self.rank)).reshape(shape)


def _default_splits(shapes: Sequence[tuple[int, ...]]) -> tuple[int | None, ...]:
    return tuple(len(shape) - 1 if len(shape) >= 2 else None for shape in shapes)


def _flops(strategy: Strategy) -> float:
    """``tell``'s thin products: ``r`` multiply-adds per entry of a pair's ``A Bᵀ`` (a
    member's, without pairs); the draws are thin."""
    es = strategy.es
    per_pair = 2.0 * es.rank  # a multiply-add per rank
    return per_pair / 2.0 if es.use_antithetic_sampling else per_pair


def _noise(strategy: Strategy, member: MemberLayout) -> Layout:
    """A run's low-rank noise: its policy's leaves, split where its network multiplies them."""
    whole = member.plan.whole
    message = (
        f"low-rank ES perturbs {len(whole)} weight leaves of the policy in full, as OpenES "
        f"would ({', '.join(whole)}): its network uses them other than as an operand of a "
        "matrix product or convolution"
    )
    if whole and message not in _SAID:  # every trace of a run asks for the layout: say it once
        _SAID.add(message)
        warnings.warn(message, stacklevel=2)
    return Layout.of(member, strategy.es.rank)


# The whole-leaf warnings this process has given.
_SAID: set[str] = set()


class LowRank_ES(DistributionBasedAlgorithm):
    """Low-rank ES in evosax's API: rank-``rank`` perturbations of every weight matrix.

    ``solution`` is a member's parameter pytree (its leaves' shapes say which are matrices,
    or ``plan`` says where a network multiplies each); a flat vector is one vector leaf, and the
    search is then OpenES's. esjax steps it through its :attr:`form`, which draws the layout
    from the run's policy.
    """

    form: ClassVar[StrategyForm] = PairedForm("low-rank ES", _noise, _flops, BLOCK_FLOATS)

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
        plan: Plan | None = None,
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
        self.layout = Layout.of_tree(solution, self.rank, plan)

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
        """The whole population, materialised (the reference the form is checked against):
        member ``i`` is pair ``i % pairs``, negated for ``i >= pairs``."""
        members = jnp.arange(self.population_size, dtype=jnp.int32)
        pair, sign = pair_and_sign(members, self.pairs)
        z = jax.vmap(lambda p: self.layout.delta(self.layout.noise(key, p)))(pair)
        return state.mean + state.std * sign[:, None] * z, state

    def _tell(self, key, population, fitness, state: State, params: Params) -> State:
        """OpenES's step from ``(population - mean) / std`` (the reference path)."""
        z = (population - state.mean) / state.std
        return descend(self, jnp.dot(fitness, z) / (self.population_size * state.std), state)
