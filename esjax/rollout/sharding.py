"""A population over devices: which device steps which members, and their order coming back.

A population is either materialised (a parameter pytree with a leading member axis) or a
:class:`~esjax.strategies.population.LazyMembers` (members are ids whose parameters are made
on demand, its state possibly split over the mesh). Everything that tells the two apart for
the rollout lives here, so :class:`~esjax.rollout.population_rollout.PopulationRollout` asks
for "each device's members" and never for the kind of population.

:func:`over_devices` runs a per-device function on each device's share of the members inside
``shard_map``; :func:`in_member_order` turns what comes back into the population's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from esjax.strategies.population import AXIS, LazyMembers

PyTree = Any
# ``local(keys, members, inputs, valid, axis)``: one device's members (all of them off a mesh).
LocalFn = Callable[[jax.Array, PyTree, PyTree, jax.Array, str | None], PyTree]


def population_mesh(devices: Sequence[Any]) -> Mesh:
    """The one-axis mesh a population is sharded over (the axis
    :data:`esjax.strategies.population.AXIS`)."""
    return Mesh(np.array(devices), (AXIS,))


def popsize(pop_params: PyTree) -> int:
    """Members in a population, materialised or lazy."""
    if isinstance(pop_params, LazyMembers):
        return pop_params.popsize
    return jax.tree.leaves(pop_params)[0].shape[0]


def member_ids(pop_params: PyTree) -> tuple[PyTree, Callable[[PyTree], PyTree], PyTree]:
    """``(ids, decode, shapes)``: what to map over, an id's parameters, and their shapes.

    A materialised population is its own ids. A lazy one maps over its own ids and
    each chunk decodes its own members' parameters, so the population never exists as a
    whole. ``shapes`` has a leading member axis (for a lazy population, one member's shape
    structs, low-rank kernels as they are): a chunk is sized from it without anything being
    drawn.
    """
    if isinstance(pop_params, LazyMembers):
        ids, decode = pop_params.members(), pop_params.member
        shapes = jax.eval_shape(jax.vmap(decode), jax.tree.map(lambda x: x[:1], ids))
        return ids, decode, shapes

    def decode(params: PyTree) -> PyTree:
        return params

    return pop_params, decode, pop_params


def take(pop_params: PyTree, rows: jax.Array) -> PyTree:
    """The members at ``rows`` (a lazy population only selects ids, it draws nothing)."""
    if isinstance(pop_params, LazyMembers):
        return pop_params.take(rows)
    return jax.tree.map(lambda x: x[rows], pop_params)


def in_member_order(pop_params: PyTree, x: jax.Array) -> jax.Array:
    """Per-member results from :func:`over_devices` in the population's order, padding dropped."""
    if isinstance(pop_params, LazyMembers):
        return pop_params.in_member_order(x)
    return x[: popsize(pop_params)]


def over_devices(
    local: LocalFn,
    devices: Sequence[Any],
    keys: jax.Array,
    pop_params: PyTree,
    inputs: PyTree,
    out_specs: P,
) -> PyTree:
    """``local(keys, params, inputs, valid, axis)`` on each device's share of the members.

    ``keys`` are shared rollout keys ``(num_rollouts,)`` or every member's ``(popsize,
    num_rollouts)``; ``inputs`` (observation statistics, sampler bounds) is the same on every
    device.

    On one device (or fewer members than devices) ``local`` sees every member and ``axis``
    is ``None``. Otherwise each device takes ``ceil(popsize / devices)`` members, ``axis``
    names the mesh axis for collectives, and ``valid`` marks the real members: a popsize
    that does not divide is padded with copies of the last member. On a CPU host a device
    is a core.
    """
    if isinstance(pop_params, LazyMembers) and pop_params.devices > 1:
        return _over_split_devices(local, devices, keys, pop_params, inputs, out_specs)
    size = popsize(pop_params)
    num_devices = len(devices)
    if num_devices == 1 or size < num_devices:
        return local(keys, pop_params, inputs, jnp.ones(size, bool), None)
    per_device = -(-size // num_devices)
    shared = keys.ndim == 1

    def shard(keys, params, inputs):
        # Every device holds the whole population (a generation draws it replicated) and
        # picks its own rows, so nothing is sent; padding repeats the last member.
        index = jax.lax.axis_index(AXIS) * per_device + jnp.arange(per_device)
        rows = jnp.minimum(index, size - 1)
        params = take(params, rows)
        return local(keys if shared else keys[rows], params, inputs, index < size, AXIS)

    return jax.shard_map(
        shard,
        mesh=population_mesh(devices),
        in_specs=(P(), P(), P()),
        out_specs=out_specs,
        check_vma=False,
    )(keys, pop_params, inputs)


def _over_split_devices(
    local: LocalFn,
    devices: Sequence[Any],
    keys: jax.Array,
    population: LazyMembers,
    inputs: PyTree,
    out_specs: P,
) -> PyTree:
    """:func:`over_devices` for a lazy population whose state is split over the mesh.

    Each device steps the members its share names (:meth:`LazyMembers.device_share`); results
    come back device by device and :func:`in_member_order` puts them in the population's order.
    """
    if population.devices != len(devices):
        raise ValueError(
            f"the population is split over {population.devices} devices, "
            f"the rollout runs on {len(devices)}"
        )
    shared = keys.ndim == 1

    def shard(keys, population, inputs):
        share, member, valid = population.device_share(jax.lax.axis_index(AXIS))
        return local(keys if shared else keys[member], share, inputs, valid, AXIS)

    return jax.shard_map(
        shard,
        mesh=population_mesh(devices),
        in_specs=(P(), population.specs(), P()),
        out_specs=out_specs,
        check_vma=False,
    )(keys, population, inputs)
