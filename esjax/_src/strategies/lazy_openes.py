"""Antithetic OpenES without a materialised population: the half noise matrix is the population.

evosax's ``Open_ES`` with antithetic sampling draws ``z`` of shape ``(popsize // 2, num_dims)``
from the ask key and returns ``mean + std * [z; -z]``, a ``(popsize, num_dims)`` matrix that its
``tell`` turns back into noise with ``(population - mean) / std``. Here ``ask`` makes the very
same draw (same key, same numbers, so member ``i`` is evosax's row ``i`` up to the rounding of
the multiply-add) but keeps only ``z``: each rollout chunk builds its own members' parameters
inside the chunk, and ``tell`` takes the gradient from the pairs, ``(w[:h] - w[h:]) @ z``, the
same sum as evosax's in another order of additions. What is skipped is writing and reading the
population twice.

On several devices each device draws only the rows of the pairs it steps (:class:`PairLayout`),
and ``tell`` gathers one partial sum per block of pairs, not the noise. The order of additions
is fixed by the blocks, not by the devices, so the search is the same bits on any device count
up to ``GRADIENT_BLOCKS``.

It applies where the shortcut is exact: ``Open_ES`` with antithetic pairs, no L2 penalty (the
only fitness shaping here that reads the parameters). Every other strategy keeps the
materialised path. :data:`LAZY_OPENES` is this module's
:class:`esjax._src.strategies.population.StrategyForm`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from esjax._src.strategies import draw
from esjax._src.strategies.built import Strategy
from esjax._src.strategies.population import (
    AXIS,
    MemberLayout,
    Population,
    best_and_shaped,
    descend,
)

# ``tell`` sums the pairs in at most this many blocks: enough that on a mesh up to this size
# no device holds more than one block over an even share, few enough that gathering one
# partial sum per block (``num_dims`` floats each) stays small.
GRADIENT_BLOCKS = 32


@dataclass(frozen=True)
class PairLayout:
    """Which device holds which antithetic pairs' noise rows, and how ``tell`` adds them up.

    Pairs are cut into blocks of ``block`` consecutive pairs, and each of ``devices`` devices
    holds an equal run of whole blocks: device ``k`` holds pairs ``[k * per_device, (k + 1) *
    per_device)``, both members of each, so a device draws only its own rows and a pair never
    straddles devices. Rows past the last pair (``rows - half`` of them) pad the last blocks.
    ``tell`` sums each block on its device and then the blocks in pair order, on every device:
    the same additions in the same order on any number of devices up to ``GRADIENT_BLOCKS``,
    so a search is bit-identical across those device counts. (Past that, each device adds its
    own blocks and the sums are all-reduced: the blocks depend on the device count anyway.)
    """

    half: int
    devices: int = 1

    @property
    def block(self) -> int:
        """Pairs per block, so that there are at most ``GRADIENT_BLOCKS`` blocks (or one per
        device past that many devices, where it depends on the device count)."""
        return -(-self.half // max(GRADIENT_BLOCKS, self.devices))

    @property
    def blocks(self) -> int:
        """Blocks that hold at least one pair; the padding's whole blocks come after them."""
        return -(-self.half // self.block)

    @property
    def per_device(self) -> int:
        return -(-self.blocks // self.devices) * self.block

    @property
    def rows(self) -> int:
        """Noise rows drawn: every pair, padded to whole blocks on every device."""
        return self.per_device * self.devices

    def device_members(self, device: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(pair, negative)`` of device ``device``'s members: its pairs' ``+`` then ``-``."""
        pair = device * self.per_device + jnp.arange(self.per_device, dtype=jnp.int32)
        negative = jnp.arange(2 * self.per_device) >= self.per_device
        return jnp.concatenate([pair, pair]), negative

    def in_member_order(self, x: jax.Array) -> jax.Array:
        """Per-member results gathered device by device (:meth:`device_members`), padding
        dropped, in the population's order: the ``+`` members, then their negatives."""
        x = x.reshape(self.devices, 2, self.per_device, *x.shape[1:])
        x = jnp.swapaxes(x, 0, 1).reshape(2, self.rows, *x.shape[3:])[:, : self.half]
        return x.reshape(2 * self.half, *x.shape[2:])


@struct.dataclass
class LazyPopulation:
    """Members of ``mean + std * [noise; -noise]``, parameters made on demand.

    Member ``i`` of a population of ``2 h`` is pair ``i % h``, negated for ``i >= h``.
    ``noise`` holds the rows of pairs ``first, first + 1, ...``: every pair's, or on a sharded
    mesh (``layout.devices > 1``) one device's share. Taking rows (``take``) only selects
    members, so a device or a chunk never holds more than its own members.
    """

    mean: jax.Array
    std: jax.Array
    noise: jax.Array  # (rows held, num_dims)
    pair: jax.Array  # (members,) int32: each member's pair, its noise row
    negative: jax.Array  # (members,) bool: the member is its pair's negative
    first: jax.Array  # int32: the pair of ``noise``'s first row
    unravel: Callable = struct.field(pytree_node=False)
    layout: PairLayout = struct.field(pytree_node=False)
    mesh: Mesh | None = struct.field(pytree_node=False, default=None)

    @property
    def popsize(self) -> int:
        return self.pair.shape[0]

    @property
    def devices(self) -> int:
        return self.layout.devices

    @property
    def sharded(self) -> bool:
        return self.layout.devices > 1

    def flat(self, pair: jax.Array, negative: jax.Array) -> jax.Array:
        """A member's flat parameters from its pair's row, as evosax's ``ask`` makes the row."""
        row = self.noise[pair - self.first]
        return self.mean + self.std * jnp.where(negative, -row, row)

    def member(self, ident: tuple[jax.Array, jax.Array]) -> Any:
        return self.unravel(self.flat(*ident))

    def member_bytes(self) -> int:
        """A member's weights, made whole inside its chunk."""
        return int(self.noise.shape[-1]) * self.noise.dtype.itemsize

    def members(self) -> tuple[jax.Array, jax.Array]:
        """Every member's ``(pair, negative)``, for mapping over them."""
        return self.pair, self.negative

    def take(self, rows: jax.Array) -> LazyPopulation:
        return dataclasses.replace(self, pair=self.pair[rows], negative=self.negative[rows])

    def specs(self) -> LazyPopulation:
        """``shard_map`` specs: the noise split by rows over the mesh, the rest replicated."""
        return jax.tree.map(lambda _: P(), self).replace(noise=P(AXIS))

    def device_share(self, device: jax.Array) -> tuple[LazyPopulation, jax.Array, jax.Array]:
        """Device ``device``'s members: both members of the pairs whose rows it holds
        (:meth:`PairLayout.device_members`); pairs past the last are padding."""
        layout = self.layout
        pair, negative = layout.device_members(device)
        member = jnp.minimum(jnp.where(negative, pair + layout.half, pair), self.popsize - 1)
        first = device * layout.per_device
        share = dataclasses.replace(self, pair=pair, negative=negative, first=first)
        return share, member, pair < layout.half

    def in_member_order(self, x: jax.Array) -> jax.Array:
        if self.sharded:
            return self.layout.in_member_order(x)
        return x[: self.popsize]

    def member_flat(self, member: jax.Array) -> jax.Array:
        """Member ``member``'s (a population index) flat parameters, on every device.

        On a sharded mesh only one device holds the row: the others add zeros to it, so the
        sum is the row itself, whatever the device count.
        """
        half = self.layout.half
        pair, negative = member % half, member >= half
        if not self.sharded:
            return self.flat(pair, negative)
        per_device = self.layout.per_device

        def shard(noise, pair):
            local = pair - lax.axis_index(AXIS) * per_device
            mine = (local >= 0) & (local < per_device)
            row = noise[jnp.clip(local, 0, per_device - 1)]
            return lax.psum(jnp.where(mine, row, jnp.zeros_like(row)), AXIS)

        row = jax.shard_map(
            shard, mesh=self.mesh, in_specs=(P(AXIS), P()), out_specs=P(), check_vma=False
        )(self.noise, pair)
        return self.mean + self.std * jnp.where(negative, -row, row)


def applies(strategy: Strategy) -> bool:
    """Whether ``strategy`` can run on a :class:`LazyPopulation` (antithetic OpenES, no L2)."""
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


def ask(
    strategy: Strategy, key: jax.Array, state: Any, unravel: Callable, mesh: Mesh | None = None
) -> LazyPopulation:
    """The population evosax's ``ask`` would return for ``key``, kept as its half noise.

    With a ``mesh`` of several devices each device draws only its own pairs' rows (the same
    numbers: with threefry's partitionable layout a number depends on its index alone). A key
    whose draw is not row-addressable is drawn whole on every device.
    """
    key = strategy.noise_key(key)
    es = strategy.es
    half, num_dims = es.population_size // 2, es.num_dims
    devices = mesh.size if mesh is not None and half >= mesh.size else 1
    layout = PairLayout(half, devices)
    if not draw.row_addressable(key, (layout.rows, num_dims)):
        layout, devices = PairLayout(half, 1), 1
        noise = jax.random.normal(key, (half, num_dims))
        noise = jnp.pad(noise, ((0, layout.rows - half), (0, 0)))
    elif devices > 1:

        def share(key):
            first = lax.axis_index(AXIS) * layout.per_device
            return draw.normal_share(key, (layout.rows, num_dims), first, layout.per_device)

        noise = jax.shard_map(share, mesh=mesh, in_specs=P(), out_specs=P(AXIS), check_vma=False)(
            key
        )
    else:
        # The same numbers as evosax's ``jax.random.normal`` call, in cache-sized blocks.
        noise = draw.normal(key, (layout.rows, num_dims))
    if mesh is not None and devices == 1:
        noise = lax.with_sharding_constraint(noise, NamedSharding(mesh, P()))
    member = jnp.arange(2 * half, dtype=jnp.int32)
    return LazyPopulation(
        mean=state.mean,
        std=state.std,
        noise=noise,
        pair=member % half,
        negative=member >= half,
        first=jnp.zeros((), jnp.int32),
        unravel=unravel,
        layout=layout,
        mesh=mesh if devices > 1 else None,
    )


def weighted_noise(population: LazyPopulation, pair_weights: jax.Array) -> jax.Array:
    """``pair_weights @ noise`` in a fixed order of additions, whatever the device count.

    Each block of pairs is summed where its rows live, pair by pair; the block sums are then
    gathered (``num_dims`` floats per block) and added in pair order on every device (past
    ``GRADIENT_BLOCKS`` devices, summed per device and all-reduced: see :class:`PairLayout`).
    Both sums are loops over whole arrays. A batched dot per block, and a tree over the
    blocks, were tried instead: the search was then not the same bits on one device as on
    four (an addition fused with the product that feeds it can become a multiply-add, which
    rounds otherwise). On an accelerator these are two loops of up to ``block`` and
    ``GRADIENT_BLOCKS`` small steps (not timed on one).
    """
    layout = population.layout
    weights = jnp.pad(pair_weights, (0, layout.rows - layout.half))

    def block_sums(weights, noise):
        weights = weights.reshape(-1, layout.block)
        noise = noise.reshape(weights.shape[0], layout.block, noise.shape[-1])

        def add(j, total):
            return total + weights[:, j, None] * noise[:, j]

        return lax.fori_loop(1, layout.block, add, weights[:, 0, None] * noise[:, 0])

    if population.mesh is not None:  # sharded: the noise is split over the mesh
        # Replicated going in, so the partitioner does not split the ranking that made them.
        weights = lax.with_sharding_constraint(weights, NamedSharding(population.mesh, P()))

        def shard(weights, noise):
            sums = block_sums(weights, noise)
            if layout.devices > GRADIENT_BLOCKS:
                # Blocks already depend on the device count here: each device adds its own and
                # one all-reduce of ``num_dims`` floats replaces a gather that grows with it.
                return lax.psum(sums.sum(axis=0), AXIS)
            return lax.all_gather(sums, AXIS, tiled=True)

        sums = jax.shard_map(
            shard,
            mesh=population.mesh,
            in_specs=(P(AXIS), P(AXIS)),
            out_specs=P(),
            check_vma=False,
        )(weights, population.noise)
        if layout.devices > GRADIENT_BLOCKS:
            return sums
    else:
        sums = block_sums(weights, population.noise)
    # Blocks made only of padding come after the last pair's block and are left out.
    return lax.fori_loop(1, layout.blocks, lambda b, total: total + sums[b], sums[0])


def tell(
    strategy: Strategy, key: jax.Array, population: LazyPopulation, fitness: jax.Array, state: Any
) -> Any:
    """evosax's ``Open_ES.tell`` (best so far, shaping, gradient step, std schedule) from pairs."""
    es = strategy.es
    state, shaped = best_and_shaped(strategy, population, fitness, state)
    half = es.population_size // 2
    pair_weights = shaped[:half] - shaped[half:]
    grad = weighted_noise(population, pair_weights) / (es.population_size * state.std)
    state = descend(es, grad, state)
    return state.replace(generation_counter=state.generation_counter + 1)


def held_floats(popsize: int, num_dims: int, devices: int, chunk: int = 0) -> int:
    """A device's share of the half noise (whole blocks of pairs), the only population-sized
    array a generation holds, and a chunk's members, each made whole while it steps."""
    return PairLayout(popsize // 2, devices).per_device * num_dims + chunk * num_dims


@dataclass(frozen=True)
class LazyOpenES:
    """Antithetic OpenES as a :class:`esjax._src.strategies.population.StrategyForm`: evosax's
    ``Open_ES`` stepped from its half noise."""

    name: str = "antithetic OpenES"

    def applies(self, strategy: Strategy) -> bool:
        return applies(strategy)

    def check_settings(self, settings: Mapping[str, Any]) -> str | None:
        return None

    def flops_per_entry(self, strategy: Strategy) -> float:
        return 30.0  # a Gaussian per entry, as the materialised draw

    def held_floats(
        self, strategy: Strategy, layout: MemberLayout, devices: int, chunk: int
    ) -> int:
        return held_floats(strategy.popsize, strategy.num_dims, devices, chunk)

    def ask(
        self,
        strategy: Strategy,
        key: jax.Array,
        state: Any,
        layout: MemberLayout,
        mesh: Mesh | None,
    ) -> tuple[LazyPopulation, Any]:
        return ask(strategy, key, state, layout.unravel, mesh), state

    def tell(
        self,
        strategy: Strategy,
        key: jax.Array,
        population: Population,
        fitness: jax.Array,
        state: Any,
    ) -> Any:
        assert isinstance(population, LazyPopulation)  # what this form's ask made
        return tell(strategy, key, population, fitness, state)


LAZY_OPENES = LazyOpenES()
