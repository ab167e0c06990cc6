"""``jax.random.normal(key, (rows, cols))`` a few rows at a time, to the same bits.

With threefry keys in JAX's default (partitionable) layout, number ``i`` of a draw depends only
on the key and ``i``: it is ``threefry2x32(key, (hi(i), lo(i)))`` with the two output words
xor-ed, turned into a uniform in ``[nextafter(-1, 0), 1)`` and then into a normal by
``sqrt(2) * erfinv``. So any row of a large draw can be made without the others.

An antithetic OpenES population's noise is such a draw, ``(popsize // 2, num_dims)``, and on
several devices each draws only its own pairs' rows (:func:`normal_share`). Drawn whole, XLA
writes a draw through several full-size passes (the hash, then erfinv's branches), so on a CPU
a draw larger than the cache is bound by memory. Drawn a cache-sized block of rows at a time,
each number is made in cache and written once (benchmarks/README.md, "Where a generation
goes").

The hash is written out round by round here (:func:`threefry2x32`), which a CPU runs about twice
as fast as JAX's own lowering of it. ``tests/test_draw.py`` checks the bits against
``jax.random.normal`` itself, so a JAX that
changes its recipe fails there; :func:`row_addressable` says when the shortcut applies at
all, and callers fall back to ``jax.random.normal`` otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Rows per block: about 1 MB of float32 numbers, about a core's L2 cache here. On two CPU
# devices, each drawing its own 512 x 4481 share, blocks of 1.1 MB took 17 ms against 20-21 ms
# for 0.1-0.6 MB blocks and 29 ms for XLA's partitioned whole draw.
BLOCK_BYTES = 1 << 20
# Smaller draws are made whole: blocks only pay off once the whole draw falls out of cache.
# On two CPU devices, 1024 x 1217 normals (5 MB) took 21-25 ms whole and 31-36 ms in blocks;
# 4096 x 1217 (20 MB) 117-125 ms whole and 100-102 ms in blocks.
WHOLE_BYTES = 8 << 20


def row_addressable(key: jax.Array, shape: tuple[int, int]) -> bool:
    """Whether :func:`normal_rows` reproduces ``jax.random.normal(key, shape)`` (float32)."""
    return (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and key.shape == ()
        # Partitionable threefry is JAX's default since 0.5; older JAXes lay numbers out otherwise.
        and bool(getattr(jax.config, "jax_threefry_partitionable", True))
        and len(shape) == 2
        and shape[0] * shape[1] < 2**32
    )


def normal_rows(key: jax.Array, rows: jax.Array, shape: tuple[int, int]) -> jax.Array:
    """Rows ``rows`` of ``jax.random.normal(key, shape)``, made without the other rows.

    Only where :func:`row_addressable` holds. ``rows`` is an int array of any shape; the
    result has its shape plus ``(shape[1],)``.
    """
    cols = shape[1]
    k0, k1 = jax.random.key_data(key)
    index = rows.astype(jnp.uint32)[..., None] * np.uint32(cols)
    index = index + lax.iota(jnp.uint32, cols)
    # Every index is below 2**32 (row_addressable), so the high counter word is zero.
    bits0, bits1 = threefry2x32(k0, k1, jnp.zeros_like(index), index)
    return _normal_from_bits(bits0 ^ bits1)


# Threefry-2x32's rotation distances, alternating every four rounds (Salmon et al., "Parallel
# random numbers: as easy as 1, 2, 3", SC 2011), and its key-schedule parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(
    k0: jax.Array, k1: jax.Array, c0: jax.Array, c1: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds of counters ``(c0, c1)`` under key ``(k0, k1)``: the hash
    JAX's threefry keys use, to the same bits.

    Written out round by round, so XLA fuses the whole hash into one elementwise loop that a
    CPU keeps in registers; JAX's own lowering runs the rounds as a loop over whole arrays.
    On two CPU devices, each hashing its 512 x 4481 share, 10-11 ms against 19 ms.
    """
    keys = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = c0 + keys[0], c1 + keys[1]
    for group in range(5):
        for distance in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = lax.shift_left(x1, np.uint32(distance)) | lax.shift_right_logical(
                x1, np.uint32(32 - distance)
            )
            x1 = x1 ^ x0
        x0 = x0 + keys[(group + 1) % 3]
        x1 = x1 + keys[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def normal(key: jax.Array, shape: tuple[int, int], whole_bytes: int = WHOLE_BYTES) -> jax.Array:
    """``jax.random.normal(key, shape)``; on a CPU, a draw over ``whole_bytes`` is made a
    cache-sized block of rows at a time. (An accelerator draws the whole array at once: a
    loop over blocks would only serialise it.)"""
    if (
        not row_addressable(key, shape)
        or jax.default_backend() != "cpu"
        or 4 * shape[0] * shape[1] <= whole_bytes
    ):
        return jax.random.normal(key, shape)
    return normal_share(key, shape, 0, shape[0], whole_bytes)


def normal_share(
    key: jax.Array,
    shape: tuple[int, int],
    first: jax.Array | int,
    count: int,
    whole_bytes: int = WHOLE_BYTES,
) -> jax.Array:
    """Rows ``first .. first + count`` of ``jax.random.normal(key, shape)``: one device's share
    of a draw split by rows. Only where :func:`row_addressable` holds; ``first`` may be traced
    (a device's index times its share). On a CPU, a share over ``whole_bytes`` is made in
    cache-sized blocks of rows."""
    cols = shape[1]
    if jax.default_backend() != "cpu" or 4 * count * cols <= whole_bytes:
        return normal_rows(key, first + jnp.arange(count), shape)
    per_block = min(count, max(1, BLOCK_BYTES // (4 * cols)))
    blocks = -(-count // per_block)
    # The last block may run past the share (or the draw); those rows are made and dropped.
    rows = first + jnp.arange(blocks * per_block).reshape(blocks, per_block)
    drawn = lax.map(lambda block: normal_rows(key, block, shape), rows)
    return drawn.reshape(-1, cols)[:count]


def _normal_from_bits(bits: jax.Array) -> jax.Array:
    """JAX's float32 normal from 32 random bits: a uniform in ``[nextafter(-1, 0), 1)``, then
    ``sqrt(2) * erfinv``. Written out step by step as JAX does, to the same rounding."""
    low = np.nextafter(np.float32(-1.0), np.float32(0.0))
    one = np.float32(1.0)
    mantissa = lax.shift_right_logical(bits, np.uint32(32 - 23))
    floats = lax.bitcast_convert_type(mantissa | one.view(np.uint32), jnp.float32) - one
    uniform = lax.max(low, floats * (one - low) + low)
    return np.float32(np.sqrt(2)) * lax.erf_inv(uniform)
