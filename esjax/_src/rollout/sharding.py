"""A population over devices: which device steps which members, and their order coming back.

Every population is a :class:`~esjax._src.strategies.population.Population` (members are ids whose
parameters are made on demand, its state possibly split over the mesh), whatever its kind:
the rollout asks each for its members, its share of a device and its order, and never which
kind it is.

:func:`over_devices` runs a per-device function on each device's share of the members inside
``shard_map``; the population's ``in_member_order`` turns what comes back into its order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from esjax._src.strategies.population import AXIS, Population

PyTree = Any
# ``local(keys, members, inputs, valid, axis)``: one device's members (all of them off a mesh).
LocalFn = Callable[[jax.Array, Population, PyTree, jax.Array, str | None], PyTree]


def population_mesh(devices: Sequence[Any]) -> Mesh:
    """The one-axis mesh a population is sharded over (the axis
    :data:`esjax._src.strategies.population.AXIS`)."""
    return Mesh(np.array(devices), (AXIS,))


def over_devices(
    local: LocalFn,
    devices: Sequence[Any],
    keys: jax.Array,
    population: Population,
    inputs: PyTree,
    out_specs: P,
) -> PyTree:
    """``local(keys, population, inputs, valid, axis)`` on each device's share of the members.

    ``keys`` are shared rollout keys ``(num_rollouts,)`` or every member's ``(popsize,
    num_rollouts)``; ``inputs`` (observation statistics, sampler bounds) is the same on every
    device.

    On one device (or fewer members than devices) ``local`` sees every member and ``axis``
    is ``None``. Otherwise each device takes ``ceil(popsize / devices)`` members, ``axis``
    names the mesh axis for collectives, and ``valid`` marks the real members: a popsize
    that does not divide is padded with copies of the last member. On a CPU host a device
    is a core.
    """
    if population.devices > 1:
        return _over_split_devices(local, devices, keys, population, inputs, out_specs)
    size = population.popsize
    num_devices = len(devices)
    if num_devices == 1 or size < num_devices:
        return local(keys, population, inputs, jnp.ones(size, bool), None)
    per_device = -(-size // num_devices)
    shared = keys.ndim == 1

    def shard(keys, population, inputs):
        # Every device holds the whole population (a generation draws it replicated) and
        # picks its own rows, so nothing is sent; padding repeats the last member.
        index = jax.lax.axis_index(AXIS) * per_device + jnp.arange(per_device)
        rows = jnp.minimum(index, size - 1)
        mine = population.take(rows)
        return local(keys if shared else keys[rows], mine, inputs, index < size, AXIS)

    return jax.shard_map(
        shard,
        mesh=population_mesh(devices),
        in_specs=(P(), P(), P()),
        out_specs=out_specs,
        check_vma=False,
    )(keys, population, inputs)


def _over_split_devices(
    local: LocalFn,
    devices: Sequence[Any],
    keys: jax.Array,
    population: Population,
    inputs: PyTree,
    out_specs: P,
) -> PyTree:
    """:func:`over_devices` for a population whose state is split over the mesh.

    Each device steps the members its share names (:meth:`Population.device_share`); results
    come back device by device and :meth:`Population.in_member_order` puts them in the
    population's order.
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
