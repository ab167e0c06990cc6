"""Row-at-a-time Gaussian draws against ``jax.random.normal`` itself, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.strategies import draw


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (64, 4481), (37, 5000)])
def test_any_rows_are_the_whole_draws_rows(shape):
    key = jax.random.key(11)
    whole = np.asarray(jax.random.normal(key, shape))
    rows = jnp.array([shape[0] - 1, 0, shape[0] // 2, shape[0] - 1])
    np.testing.assert_array_equal(draw.normal_rows(key, rows, shape), whole[np.asarray(rows)])
    # A 2-d block of rows keeps its layout.
    block = jnp.arange(shape[0]).reshape(1, -1)
    np.testing.assert_array_equal(draw.normal_rows(key, block, shape)[0], whole)


@pytest.mark.parametrize("shape", [(5, 3), (37, 5000), (300, 4481)])
def test_blocked_draw_is_jax_random_normal(shape):
    # (300, 4481): 58 rows per block, the last of 6 blocks runs past the end.
    for seed in (0, 1, 2**31 + 5):
        key = jax.random.key(seed)
        np.testing.assert_array_equal(
            jax.jit(draw.normal, static_argnums=(1, 2))(key, shape, 0),
            jax.random.normal(key, shape),
        )


@pytest.mark.parametrize("whole_bytes", [0, draw.WHOLE_BYTES])
def test_a_devices_share_is_those_rows_of_the_whole_draw(whole_bytes):
    """Each device of a mesh draws rows ``first .. first + count`` alone, ``first`` traced (the
    device's index times its share); in blocks (``whole_bytes=0``) or at once."""
    key = jax.random.key(8)
    shape = (200, 4481)
    whole = np.asarray(jax.random.normal(key, shape))
    share = jax.jit(
        lambda k, first: draw.normal_share(k, shape, first, 70, whole_bytes), static_argnums=()
    )
    for first in (0, 70, 130):  # the last share runs to the draw's end
        got = np.asarray(share(key, jnp.int32(first)))
        np.testing.assert_array_equal(got[: shape[0] - first], whole[first : first + 70])


def test_blocked_draw_under_vmap_over_keys():
    """The engine vmaps a generation over seeds: every seed's key draws its own numbers."""
    keys = jax.random.split(jax.random.key(4), 3)
    shape = (40, 3000)
    got = jax.jit(jax.vmap(lambda k: draw.normal(k, shape, whole_bytes=0)))(keys)
    want = jax.vmap(lambda k: jax.random.normal(k, shape))(keys)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got[0], got[1])


def test_other_keys_and_layouts_fall_back_to_jax():
    shape = (40, 3000)
    rbg = jax.random.key(3, impl="rbg")
    assert not draw.row_addressable(rbg, shape)
    np.testing.assert_array_equal(draw.normal(rbg, shape, 0), jax.random.normal(rbg, shape))
    key = jax.random.key(3)
    assert draw.row_addressable(key, shape)
    assert not draw.row_addressable(key, (2**16, 2**16))  # indices past 32 bits
    with jax.threefry_partitionable(False):
        assert not draw.row_addressable(key, shape)
        np.testing.assert_array_equal(draw.normal(key, shape, 0), jax.random.normal(key, shape))
