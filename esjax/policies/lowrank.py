"""Low-rank members: one population member's weight matrix as ``W + scale * A Bᵀ``, never formed.

A low-rank strategy (:mod:`esjax.strategies.lowrank_es`) perturbs every weight matrix of a
member by a rank-``r`` product. Inside a rollout chunk each member's matrix is a
:class:`LowRank`: the shared ``base`` (the search's mean, the same array for every member) and
the member's thin factors. A layer then computes ``x @ W + scale * (x @ A) @ Bᵀ``: under
``vmap`` over the members of a chunk the first product has an unbatched ``W``, so JAX makes it
one matrix-matrix product for the whole chunk, and the correction costs ``r (m + n)`` per
member instead of ``m n``.

A kernel of more than two axes (a conv's ``(kh, kw, c_in, c_out)``) is the matrix
``(kh kw c_in) x c_out``, the way the convolution itself contracts it: every output pixel is
a patch of ``kh kw c_in`` inputs times that matrix. So :func:`conv` runs the shared ``base``
as one conv over the whole chunk's images (batched over members, one kernel), and the
member's correction as a conv with ``A`` seen as ``r`` thin filters ``(kh, kw, c_in, r)``,
then a ``1 x 1`` channel mix by ``scale Bᵀ``.

The forward functions below read flax's parameter dicts, with the names and shapes flax's
modules create (a saved policy's params work unchanged), and take plain kernels or
:class:`LowRank` ones leaf by leaf: one function for each built-in network of
:mod:`esjax.policies.networks` (an MLP, the GRU and LSTM cells, the CNN's conv torso and its
feed-forward and LSTM heads). Each does flax's arithmetic in flax's order; only the kernel
products are split, so a member's outputs match flax's on the materialised kernel to float
rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

PyTree = Any
Params = Mapping[str, Any]
Activation = Callable[[jax.Array], jax.Array]
# NHWC images, HWIO kernels: what flax's nn.Conv hands lax for a 4-D input.
_CONV_DIMENSIONS = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


@struct.dataclass
class LowRank:
    """``base + scale * (a.T @ b)`` reshaped to ``base.shape``.

    ``base``: the shared kernel, any shape of two or more axes; ``a``: ``(r,
    prod(base.shape[:-1]))``; ``b``: ``(r, base.shape[-1])``; ``scale``: a scalar (the member's
    sign, the search's std and ``1 / sqrt(r)`` folded together). The factors are stored a row
    per rank: each factor vector is then contiguous, and under ``vmap`` over members the thin
    products are ``r`` dot products per member (a 64 x 64 layer of 512 members on a CPU: 0.90
    of the shared product alone at ranks 1 and 2 and 0.76 at rank 4, against 0.83, 0.36 and
    0.19 with the factors stored a column per rank).
    """

    base: jax.Array
    a: jax.Array
    b: jax.Array
    scale: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.base.shape)

    def materialise(self) -> jax.Array:
        """The member's full kernel (for checks and for networks without a low-rank path)."""
        delta = (self.a.T @ self.b).reshape(self.base.shape)
        return self.base + self.scale * delta


def is_lowrank(x: Any) -> bool:
    return isinstance(x, LowRank)


def contains_lowrank(tree: PyTree) -> bool:
    """Whether any leaf of ``tree`` is a :class:`LowRank` (a Python-level, trace-time fact)."""
    return any(is_lowrank(leaf) for leaf in jax.tree.leaves(tree, is_leaf=is_lowrank))


def materialise(tree: PyTree) -> PyTree:
    """``tree`` with every :class:`LowRank` replaced by its full kernel."""
    return jax.tree.map(lambda x: x.materialise() if is_lowrank(x) else x, tree, is_leaf=is_lowrank)


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The ``(rows, columns)`` a kernel of ``shape`` is perturbed as."""
    return math.prod(shape[:-1]), int(shape[-1])


def correction(x: jax.Array, kernel: LowRank) -> jax.Array:
    """``scale * (x @ aᵀ) @ b`` over the last axis of ``x``: a member's own part of a layer."""
    thin = jnp.einsum("...m,rm->...r", x, kernel.a)
    return kernel.scale * jnp.einsum("...r,rn->...n", thin, kernel.b)


def dense(x: jax.Array, kernel: jax.Array | LowRank) -> jax.Array:
    """``x @ kernel`` over the last axis of ``x``, a :class:`LowRank` kernel without forming it."""
    if not is_lowrank(kernel):
        return jnp.dot(x, kernel)
    return jnp.dot(x, kernel.base) + correction(x, kernel)


def _plain_conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int]) -> jax.Array:
    """flax's ``nn.Conv(features, window, strides, "VALID")`` without its bias: the leading
    axes before ``(H, W, C)`` (none for one image) flattened to one batch axis and restored
    after, as flax does."""
    batch = x.shape[:-3]
    y = lax.conv_general_dilated(
        x.reshape((-1, *x.shape[-3:])),
        kernel,
        strides,
        "VALID",
        lhs_dilation=(1, 1),
        rhs_dilation=(1, 1),
        dimension_numbers=_CONV_DIMENSIONS,
    )
    return y.reshape(batch + y.shape[1:])


def conv(x: jax.Array, kernel: jax.Array | LowRank, strides: int | Sequence[int]) -> jax.Array:
    """A valid-padded conv of NHWC ``x`` (or one ``(H, W, C)`` image) with an HWIO kernel, as
    flax's ``nn.Conv`` computes it; a :class:`LowRank` kernel without forming it.

    The low-rank kernel is the ``(kh kw c_in) x c_out`` matrix every output pixel's patch is
    multiplied by, so ``patch @ (base + s A Bᵀ) = patch @ base + s (patch @ A) Bᵀ``: a conv
    with ``base`` (shared, so under ``vmap`` one conv for all members), a conv with ``A`` as
    ``r`` filters, then a channel mix.
    """
    strides = (strides, strides) if isinstance(strides, int) else tuple(strides)
    if not is_lowrank(kernel):
        return _plain_conv(x, kernel, strides)
    kh, kw, c_in, _ = kernel.shape
    thin = jnp.moveaxis(kernel.a.reshape(kernel.a.shape[0], kh, kw, c_in), 0, -1)
    mixed = jnp.einsum("...r,rn->...n", _plain_conv(x, thin, strides), kernel.b)
    return _plain_conv(x, kernel.base, strides) + kernel.scale * mixed


def linear(params: Params, x: jax.Array) -> jax.Array:
    """flax's ``nn.Dense`` from its ``kernel`` (plain or low-rank) and ``bias`` (if any)."""
    y = dense(x, params["kernel"])
    return y + params["bias"] if "bias" in params else y


def _numbered(params: Params, prefix: str) -> list[Params]:
    """The submodules flax names ``prefix_0``, ``prefix_1``, ... in the order they run."""
    count = sum(1 for name in params if name.startswith(f"{prefix}_"))
    return [params[f"{prefix}_{i}"] for i in range(count)]


def _dense_split(x: jax.Array, kernels: Sequence[jax.Array | LowRank]) -> list[jax.Array]:
    """``x @ k`` for each of ``kernels`` (all with ``x``'s rows).

    The shared parts run as one product with the kernels joined side by side, as flax's
    ``OptimizedLSTMCell`` does with its gates; the joined bases are the same for every member,
    so under ``vmap`` that is still one matrix-matrix product for the chunk.
    """
    bases = [k.base if is_lowrank(k) else k for k in kernels]
    y = jnp.dot(x, jnp.concatenate(bases, axis=-1))
    parts = jnp.split(y, np.cumsum([b.shape[-1] for b in bases[:-1]]).tolist(), axis=-1)
    return [
        part + correction(x, k) if is_lowrank(k) else part
        for part, k in zip(parts, kernels, strict=True)
    ]


def mlp(params: Params, x: jax.Array, activation: Activation) -> jax.Array:
    """An MLP's outputs from ``Dense_0 .. Dense_k``, ``activation`` between layers (one layer:
    linear)."""
    layers = _numbered(params, "Dense")
    for layer in layers[:-1]:
        x = activation(linear(layer, x))
    return linear(layers[-1], x)


def gru_cell(params: Params, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """flax's ``nn.GRUCell``: input kernels ``ir, iz, in`` (with biases), recurrent kernels
    ``hr, hz, hn`` (a bias on ``hn`` only). Returns ``(new_h, new_h)`` as flax does."""
    xr, xz, xn = _dense_split(x, [params[name]["kernel"] for name in ("ir", "iz", "in")])
    hr, hz, hn = _dense_split(h, [params[name]["kernel"] for name in ("hr", "hz", "hn")])
    r = jax.nn.sigmoid(xr + params["ir"]["bias"] + hr)
    z = jax.nn.sigmoid(xz + params["iz"]["bias"] + hz)
    n = jnp.tanh(xn + params["in"]["bias"] + r * (hn + params["hn"]["bias"]))
    new_h = (1.0 - z) * n + z * h
    return new_h, new_h


def lstm_cell(
    params: Params, carry: tuple[jax.Array, jax.Array], x: jax.Array
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """flax's ``nn.OptimizedLSTMCell`` (carry ``(c, h)``): recurrent kernels ``hi, hf, hg, ho``
    with biases, input kernels ``ii, if, ig, io`` without."""
    c, h = carry
    gates = "ifgo"
    from_h = _dense_split(h, [params[f"h{g}"]["kernel"] for g in gates])
    from_x = _dense_split(x, [params[f"i{g}"]["kernel"] for g in gates])
    pre = {
        g: hy + params[f"h{g}"]["bias"] + xy
        for g, hy, xy in zip(gates, from_h, from_x, strict=True)
    }
    i, f, o = jax.nn.sigmoid(pre["i"]), jax.nn.sigmoid(pre["f"]), jax.nn.sigmoid(pre["o"])
    new_c = f * c + i * jnp.tanh(pre["g"])
    new_h = o * jnp.tanh(new_c)
    return (new_c, new_h), new_h


CELLS: dict[str, Callable[..., tuple[PyTree, jax.Array]]] = {
    "GRUCell": gru_cell,
    "OptimizedLSTMCell": lstm_cell,
}


def recurrent(params: Params, carry: PyTree, x: jax.Array, cell: str) -> tuple[PyTree, jax.Array]:
    """A recurrent policy network: the flax cell named ``cell`` (``"GRUCell"`` or
    ``"OptimizedLSTMCell"``, a key of :data:`CELLS`) as ``{cell}_0``, then ``Dense_0``."""
    carry, h = CELLS[cell](params[f"{cell}_0"], carry, x)
    return carry, linear(params["Dense_0"], h)


def conv_torso(
    params: Params, image: jax.Array, rest: jax.Array, stride: int, activation: Activation
) -> jax.Array:
    """The CNN's features: ``Conv_0 ..`` (valid, ``stride``) on the ``(H, W, C)`` image, then
    the flattened map joined by the ``rest`` of the input through ``Dense_0 ..``, each layer
    followed by ``activation``."""
    for layer in _numbered(params, "Conv"):
        image = activation(conv(image, layer["kernel"], stride) + layer["bias"])
    x = jnp.concatenate([image.reshape(-1), rest])
    for layer in _numbered(params, "Dense"):
        x = activation(linear(layer, x))
    return x


def cnn(
    params: Params, image: jax.Array, rest: jax.Array, stride: int, activation: Activation
) -> jax.Array:
    """The feed-forward CNN's outputs: its ``torso``, then ``Dense_0``."""
    features = conv_torso(params["torso"], image, rest, stride, activation)
    return linear(params["Dense_0"], features)


def cnn_lstm(
    params: Params,
    carry: tuple[jax.Array, jax.Array],
    image: jax.Array,
    rest: jax.Array,
    stride: int,
    activation: Activation,
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """The CNN with memory: its ``torso``, ``OptimizedLSTMCell_0``, then ``Dense_0``."""
    features = conv_torso(params["torso"], image, rest, stride, activation)
    carry, h = lstm_cell(params["OptimizedLSTMCell_0"], carry, features)
    return carry, linear(params["Dense_0"], h)
