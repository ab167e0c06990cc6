"""One perturbation mechanism for every network: a member's weights applied where it multiplies.

A low-rank strategy (:mod:`esjax._src.strategies.lowrank_es`) perturbs a weight leaf ``W`` of a
member by a rank-``r`` product, ``W + scale * A Bᵀ``, and never forms it: wherever the network
multiplies by ``W``, the product splits into the **shared** part (the search's mean, the same
array for every member of a chunk, so under ``vmap`` one matrix-matrix product for the chunk)
and the member's **thin correction**, ``r (m + n)`` multiply-adds instead of ``m n``.

The networks never know. :func:`splitting` wraps any pure function of ``(params, *args)``;
given parameters with :class:`LowRank` leaves it traces the function to a jaxpr on their shared
shapes and evaluates that jaxpr itself, equation by equation: a ``dot_general`` or a
``conv_general_dilated`` with a low-rank operand runs as shared product plus correction, casts,
2-D transposes and concatenations (an LSTM joining its gate kernels) keep the operand low-rank,
nested jaxprs (``jit``, ``custom_jvp``, ``scan``, ``while``, ``cond``, remat) are entered, and any
other use of the leaf (an embedding lookup, an elementwise gain) gets the member's weights
formed for that leaf alone. Plain parameters call the function itself: the same jaxpr, the same
numbers as before low-rank members existed. So a flax linen or NNX module, an equinox module or
a pair of plain functions gets the same treatment as esjax's own networks.

Which leaves are low-rank, and how, is read off the network too (:func:`plan`): a leaf is
perturbed as the matrix its products contract, ``prod(shape[:split]) x prod(shape[split:])``
(a dense kernel ``in x out``, an equinox weight ``out x in``, a conv kernel HWIO as ``(kh kw
c_in) x c_out``, OIHW as ``c_out x (c_in kh kw)``), when every use of it is such a product with
the same split; every other leaf (biases, norms, embeddings) is perturbed in full, as by OpenES.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.extend as jex
import jax.numpy as jnp
from flax import struct
from jax import lax

PyTree = Any
# Primitives that only move or cast an operand: a low-rank operand stays low-rank through them.
_CASTS = frozenset({"convert_element_type", "copy", "copy_p"})
# Primitives that call one nested jaxpr on exactly their operands (entered, as if inlined).
_CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "checkpoint": "jaxpr",
    "remat": "jaxpr",
}


@struct.dataclass
class LowRank:
    """A member's weight leaf ``base + scale * reshape(aᵀ b, base.shape)``, never formed.

    ``base``: the shared leaf; ``a``: ``(r, prod(shape[:split]))``; ``b``: ``(r,
    prod(shape[split:]))``, each factor stored a row per rank (under ``vmap`` over members the
    thin products are then ``r`` contiguous dot products per member: a 64 x 64 layer of 512
    members on a CPU ran at 0.90 of the shared product alone at ranks 1 and 2 and 0.76 at rank
    4, against 0.83, 0.36 and 0.19 with a column per rank); ``scale``: a scalar (the member's
    sign, the search's std and ``1 / sqrt(r)`` folded together).
    """

    base: jax.Array
    a: jax.Array
    b: jax.Array
    scale: jax.Array
    split: int = struct.field(pytree_node=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.base.shape)

    @property
    def ndim(self) -> int:
        return len(self.base.shape)

    def rows(self) -> jax.Array:
        """``a`` as ``(r, *shape[:split])``: the factor over the leading axes."""
        return self.a.reshape((self.a.shape[0], *self.shape[: self.split]))

    def cols(self) -> jax.Array:
        """``b`` as ``(r, *shape[split:])``: the factor over the trailing axes."""
        return self.b.reshape((self.b.shape[0], *self.shape[self.split :]))

    def delta(self) -> jax.Array:
        """The member's perturbation of this leaf, formed whole."""
        return (self.scale * (self.a.T @ self.b).reshape(self.shape)).astype(self.base.dtype)

    def materialise(self) -> jax.Array:
        """The member's whole leaf (for checks, and for a use no product can split)."""
        return self.base + self.delta()


def is_lowrank(x: Any) -> bool:
    return isinstance(x, LowRank)


def contains_lowrank(tree: PyTree) -> bool:
    """Whether any leaf of ``tree`` is :class:`LowRank` (a trace-time fact of its structure)."""
    return any(is_lowrank(leaf) for leaf in jax.tree.leaves(tree, is_leaf=is_lowrank))


def materialise(tree: PyTree) -> PyTree:
    """``tree`` with every :class:`LowRank` leaf formed whole."""
    return jax.tree.map(lambda x: x.materialise() if is_lowrank(x) else x, tree, is_leaf=is_lowrank)


def matrix_shape(shape: Sequence[int], split: int) -> tuple[int, int]:
    """The ``(rows, columns)`` a leaf of ``shape`` is perturbed as, split at ``split``."""
    return math.prod(shape[:split]), math.prod(shape[split:])


# ---------------------------------------------------------------------------- splits of a use
def dot_split(contracted: Sequence[int], batched: Sequence[int], ndim: int) -> int | None:
    """Where a ``dot_general`` operand of ``ndim`` axes must split for its product to take the
    thin path: the contracted axes are the leading or the trailing block; None otherwise."""
    contracted = sorted(int(d) for d in contracted)
    if batched or not contracted or len(contracted) >= ndim:
        return None
    if contracted == list(range(ndim - len(contracted), ndim)):
        return ndim - len(contracted)  # columns contracted (equinox's weight @ x)
    if contracted == list(range(len(contracted))):
        return len(contracted)  # rows contracted (x @ kernel, flax's)
    return None


def conv_split(params: dict[str, Any], ndim: int) -> int | None:
    """Where a conv kernel must split for the thin path: its output-feature axis alone on one
    side (HWIO: last, split ``ndim - 1``; OIHW: first, split 1); ungrouped convs only."""
    if params.get("feature_group_count", 1) != 1 or params.get("batch_group_count", 1) != 1:
        return None
    out = params["dimension_numbers"].rhs_spec[0]
    return ndim - 1 if out == ndim - 1 else 1 if out == 0 else None


# ---------------------------------------------------------------------------- values
@dataclass(frozen=True)
class _Probe:
    """A weight leaf while :func:`plan` reads the network: its shape, its leaf index, and
    whether it is seen transposed (2-D only)."""

    value: jax.Array
    leaf: int
    transposed: bool = False

    @property
    def ndim(self) -> int:
        return self.value.ndim


@dataclass(frozen=True)
class _Joined:
    """Operands concatenated along ``axis``, some of them low-rank (or probes)."""

    parts: tuple[Any, ...]
    axis: int

    @property
    def ndim(self) -> int:
        return _plain(self.parts[0]).ndim


def _perturbed(x: Any) -> bool:
    return isinstance(x, LowRank | _Probe | _Joined)


def _plain(x: Any) -> jax.Array:
    """What a value is as an array: a probe's shared value, a low-rank leaf's base."""
    if isinstance(x, LowRank):
        return x.base
    if isinstance(x, _Probe):
        return x.value.T if x.transposed else x.value
    if isinstance(x, _Joined):
        return lax.concatenate([_plain(p) for p in x.parts], x.axis)
    return x


# ---------------------------------------------------------------------------- the interpreter
@dataclass
class _Interpreter:
    """Evaluates a jaxpr over values some of which are perturbed leaves.

    Given :class:`LowRank` leaves it computes a member's outputs, and notes in ``formed`` the
    primitives for which it had to form a leaf whole; given probes (:func:`plan`) it records,
    per leaf, the splits its uses need (``uses``), every value it computes the shared one.
    """

    uses: dict[int, set[int | None]] = field(default_factory=dict)
    formed: set[str] = field(default_factory=set)

    def record(self, leaf: int, split: int | None) -> None:
        self.uses.setdefault(leaf, set()).add(split)

    def formed_whole(self, x: Any, why: str) -> jax.Array:
        """``x`` as the member's whole array: a use no product can split."""
        if isinstance(x, _Probe):
            self.record(x.leaf, None)
        elif isinstance(x, _Joined):
            return lax.concatenate([self.formed_whole(p, why) for p in x.parts], x.axis)
        elif isinstance(x, LowRank):
            self.formed.add(why)
            return x.materialise()
        return _plain(x)

    def run(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jex.core.Literal) else env[v]

        for var, value in zip(jaxpr.constvars, consts, strict=True):
            env[var] = value
        for var, value in zip(jaxpr.invars, args, strict=True):
            env[var] = value
        for eqn in jaxpr.eqns:
            values = [read(v) for v in eqn.invars]
            if any(_perturbed(v) for v in values):
                outs = self.equation(eqn, values)
            else:
                outs = _bind(eqn, values)
            for var, value in zip(eqn.outvars, outs, strict=True):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def closed(self, closed_jaxpr: Any, args: Sequence[Any]) -> list[Any]:
        return self.run(closed_jaxpr.jaxpr, closed_jaxpr.consts, args)

    def equation(self, eqn: Any, values: list[Any]) -> list[Any]:
        """One equation with a perturbed operand."""
        name = eqn.primitive.name
        if name == "dot_general":
            return [self.dot(eqn.params, *values)]
        if name == "conv_general_dilated" and not _perturbed(values[0]):
            return [self.conv(eqn.params, *values)]
        if name in _CASTS and isinstance(values[0], LowRank | _Probe):
            return [self.cast(eqn, values[0])]
        if name == "transpose" and _transposable(values[0], eqn.params["permutation"]):
            return [_transposed(values[0])]
        if name == "concatenate" and not any(isinstance(v, _Joined) for v in values):
            return [_Joined(tuple(values), int(eqn.params["dimension"]))]
        if name in _CALLS and _CALLS[name] in eqn.params:
            inner = eqn.params[_CALLS[name]]
            if hasattr(inner, "consts"):
                return self.closed(inner, values)
            return self.run(inner, (), values)
        loops = {"scan": self.scan, "while": self.while_loop, "cond": self.cond}
        if name in loops:
            return loops[name](eqn.params, values)
        return _bind(eqn, [self.formed_whole(v, name) for v in values])

    # -- products
    def dot(self, params: dict[str, Any], lhs: Any, rhs: Any) -> jax.Array:
        """A ``dot_general``: the shared product, plus each low-rank part's thin correction."""
        dims = params["dimension_numbers"]
        options: dict[str, Any] = {
            "precision": params.get("precision"),
            "preferred_element_type": params.get("preferred_element_type"),
        }
        if _perturbed(lhs) and _perturbed(rhs):
            left_whole = self.formed_whole(lhs, "dot_general")
            right_whole = self.formed_whole(rhs, "dot_general")
            return lax.dot_general(left_whole, right_whole, dims, **options)
        use = _Use(dims, left=_perturbed(lhs), other=rhs if _perturbed(lhs) else lhs)
        weight = lhs if use.left else rhs
        joined = isinstance(weight, _Joined)
        if joined and weight.axis in (*use.contracted, *use.batched):
            first, second = use.operands(self.formed_whole(weight, "dot_general"))
            return lax.dot_general(first, second, dims, **options)
        shared = _shared_product(_plain(lhs), _plain(rhs), use, options)
        parts = weight.parts if joined else (weight,)
        corrections = [self._correction(part, use, options) for part in parts]
        if not joined:
            return shared if corrections[0] is None else shared + corrections[0]
        if all(c is None for c in corrections):
            return shared
        axis = use.output_axis(weight.axis, weight.ndim)
        filled = [
            _zeros_for(shared, axis, _plain(p).shape[weight.axis]) if c is None else c
            for p, c in zip(parts, corrections, strict=True)
        ]
        return shared + lax.concatenate(filled, axis)

    def _correction(self, part: Any, use: _Use, options: dict[str, Any]) -> jax.Array | None:
        """A part's own share of a product, beyond the shared one (None: it has none)."""
        split = dot_split(use.contracted, use.batched, _plain(part).ndim)
        if isinstance(part, _Probe):
            self.record(part.leaf, split)
            return None
        if not isinstance(part, LowRank):
            return None
        if split != part.split:
            # No thin path for this use: the member's perturbation of this leaf, formed whole.
            self.formed.add("dot_general")
            return lax.dot_general(*use.operands(part.delta()), use.dims, **options)
        return part.scale * _thin_product(part, use, options)

    def conv(self, params: dict[str, Any], image: jax.Array, kernel: Any) -> jax.Array:
        """A convolution by a kernel: the shared conv, plus the member's as ``r`` thin filters
        (the factor on the input side) and a mix of their ``r`` channels (the other factor)."""
        if isinstance(kernel, _Joined):
            whole = self.formed_whole(kernel, "conv_general_dilated")
            return lax.conv_general_dilated_p.bind(image, whole, **params)
        shared = lax.conv_general_dilated_p.bind(image, _plain(kernel), **params)
        split = conv_split(params, kernel.ndim)
        if isinstance(kernel, _Probe):
            self.record(kernel.leaf, split)
            return shared
        if split != kernel.split:
            self.formed.add("conv_general_dilated")
            return shared + lax.conv_general_dilated_p.bind(image, kernel.delta(), **params)
        out = params["dimension_numbers"].rhs_spec[0]
        filters, mix = kernel.rows(), kernel.cols()
        if out == 0:  # OIHW: the output side leads
            filters, mix = mix, filters
        thin = lax.conv_general_dilated_p.bind(image, jnp.moveaxis(filters, 0, out), **params)
        channel = params["dimension_numbers"].out_spec[1]
        mix = mix.reshape(mix.shape[0], -1)
        mixed = lax.dot_general(thin, mix, (((channel,), (0,)), ((), ())))
        return shared + kernel.scale * jnp.moveaxis(mixed, -1, channel)

    def cast(self, eqn: Any, x: LowRank | _Probe) -> Any:
        """A cast of a leaf: the shared part cast, the factors with it."""
        if isinstance(x, _Probe):
            return _Probe(_bind(eqn, [x.value])[0], x.leaf, x.transposed)
        (base,) = _bind(eqn, [x.base])
        a, b = x.a.astype(base.dtype), x.b.astype(base.dtype)
        return dataclasses.replace(x, base=base, a=a, b=b)

    # -- control flow: the body is this interpreter, the loop JAX's
    def scan(self, params: dict[str, Any], values: list[Any]) -> list[Any]:
        consts_n, carry_n = params["num_consts"], params["num_carry"]
        consts = values[:consts_n]
        rest = [self.formed_whole(v, "scan") for v in values[consts_n:]]
        carry, xs = rest[:carry_n], rest[carry_n:]

        def body(carry, x):
            outs = self.closed(params["jaxpr"], [*consts, *carry, *x])
            return outs[:carry_n], outs[carry_n:]

        carry, ys = lax.scan(
            body,
            carry,
            xs,
            length=params["length"],
            reverse=params["reverse"],
            unroll=params["unroll"],
        )
        return [*carry, *ys]

    def while_loop(self, params: dict[str, Any], values: list[Any]) -> list[Any]:
        cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts = values[:cond_n], values[cond_n : cond_n + body_n]
        init = [self.formed_whole(v, "while") for v in values[cond_n + body_n :]]

        def cond(carry):
            return self.closed(params["cond_jaxpr"], [*cond_consts, *carry])[0]

        def body(carry):
            return self.closed(params["body_jaxpr"], [*body_consts, *carry])

        return list(lax.while_loop(cond, body, init))

    def cond(self, params: dict[str, Any], values: list[Any]) -> list[Any]:
        index, operands = self.formed_whole(values[0], "cond"), values[1:]

        def branch(closed_jaxpr: Any) -> Callable[[], list[Any]]:
            return lambda: self.closed(closed_jaxpr, operands)

        return list(lax.switch(index, [branch(b) for b in params["branches"]]))


def _bind(eqn: Any, values: Sequence[Any]) -> list[Any]:
    """The equation evaluated as JAX would, on plain values."""
    found = eqn.primitive.get_bind_params(eqn.params)
    # JAX before 0.7 returned ``(subfuns, params)``; later, the params alone.
    subfuns, params = found if isinstance(found, tuple) else ((), found)
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*subfuns, *values, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _transposed(x: LowRank | _Probe) -> LowRank | _Probe:
    """A 2-D leaf seen transposed: still low-rank, its factors swapped."""
    if isinstance(x, _Probe):
        return _Probe(x.value, x.leaf, not x.transposed)
    return LowRank(base=x.base.T, a=x.b, b=x.a, scale=x.scale, split=1)


def _transposable(x: Any, permutation: Sequence[int]) -> bool:
    return isinstance(x, LowRank | _Probe) and x.ndim == 2 and tuple(permutation) == (1, 0)


def _zeros_for(shared: jax.Array, axis: int, extent: int) -> jax.Array:
    """Zeros shaped like ``shared`` but ``extent`` long on ``axis``: a plain part's (absent)
    correction among joined low-rank ones."""
    shape = (*shared.shape[:axis], extent, *shared.shape[axis + 1 :])
    return jnp.zeros(shape, shared.dtype)


@dataclass(frozen=True)
class _Use:
    """How a ``dot_general`` uses its weight operand (``left``: the weight is its lhs)."""

    dims: Any
    left: bool
    other: Any

    @property
    def contracted(self) -> tuple[int, ...]:
        return tuple(self.dims[0][0 if self.left else 1])

    @property
    def batched(self) -> tuple[int, ...]:
        return tuple(self.dims[1][0 if self.left else 1])

    @property
    def other_contracted(self) -> tuple[int, ...]:
        return tuple(self.dims[0][1 if self.left else 0])

    @property
    def other_free(self) -> int:
        """How many free axes the other operand keeps (they land in the product beside the
        weight's: before them when the weight is on the right)."""
        return _plain(self.other).ndim - len(self.other_contracted) - len(self.batched)

    def operands(self, weight: jax.Array) -> tuple[Any, Any]:
        return (weight, self.other) if self.left else (self.other, weight)

    def output_axis(self, axis: int, ndim: int) -> int:
        """Where the weight's free ``axis`` lands in the product (batch, lhs free, rhs free)."""
        free = [d for d in range(ndim) if d not in self.contracted and d not in self.batched]
        before = len(self.batched) + (0 if self.left else self.other_free)
        return before + free.index(axis)


def _shared_product(
    lhs: jax.Array, rhs: jax.Array, use: _Use, options: dict[str, Any]
) -> jax.Array:
    """The product with the shared mean, taken with the weight as the right operand.

    A network that multiplies ``W @ x`` (equinox's ``Linear``) puts the weight on the left. Under
    ``vmap`` over members the shared product then comes out with the batch axis last while each
    member's correction has it first, and XLA transposes every layer's activations to add them
    (0.69x the built-in MLP's rate at 256-256). The same contraction taken as ``x @ Wᵀ`` comes
    out batch-first like the correction; it is turned back to ``dot_general``'s order of axes
    only where the other operand keeps free axes of its own.
    """
    if not use.left:
        return lax.dot_general(lhs, rhs, use.dims, **options)
    (lhs_contracted, rhs_contracted), (lhs_batched, rhs_batched) = use.dims
    swapped = ((rhs_contracted, lhs_contracted), (rhs_batched, lhs_batched))
    product = lax.dot_general(rhs, lhs, swapped, **options)
    batch, other_free = len(lhs_batched), use.other_free
    if other_free == 0:
        return product
    weight_free = lhs.ndim - len(lhs_contracted) - len(lhs_batched)
    order = (*range(batch), *range(batch + other_free, batch + other_free + weight_free),
             *range(batch, batch + other_free))  # fmt: skip
    return lax.transpose(product, order)


def _thin_product(weight: LowRank, use: _Use, options: dict[str, Any]) -> jax.Array:
    """The product of ``use.other`` with ``reshape(aᵀ b)``, through the rank axis.

    The factor over the contracted block meets the other operand first (``r`` numbers per
    output position), then the factor over the free block spreads them back out; both come
    out in ``dot_general``'s order (the lhs's free axes, then the rhs's).

    A weight on the left whose other operand has no free axes (equinox's ``Linear`` on one
    observation, ``W @ x``) takes the right-hand order, which gives the same axes: under
    ``vmap`` over members the correction is then ``(members, out)`` rather than ``(members,
    out, 1)`` with a trailing axis of one, which XLA CPU's YNN fusion ran at 0.66x the
    built-in MLP's rate (0.95-0.99x in this order, 256-256 at popsize 2048,
    ``benchmarks/any_network.py``).
    """
    k = weight.split
    columns = sorted(use.contracted) == list(range(k, weight.ndim))
    first, second = (weight.cols(), weight.rows()) if columns else (weight.rows(), weight.cols())
    offset = 1 - k if columns else 1  # the contracted axes as axes of ``first``
    mine = tuple(d + offset for d in use.contracted)
    other = _plain(use.other)
    none: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    if use.left and use.other_free:
        thin = lax.dot_general(first, other, ((mine, use.other_contracted), none), **options)
        return lax.dot_general(second, thin, (((0,), (0,)), none), **options)
    thin = lax.dot_general(other, first, ((use.other_contracted, mine), none), **options)
    return lax.dot_general(thin, second, (((thin.ndim - 1,), (0,)), none), **options)


# ---------------------------------------------------------------------------- the two doors
def _avals(values: Sequence[Any]) -> list[jax.ShapeDtypeStruct]:
    """The abstract values a jaxpr is traced on (weak types kept, so promotion is the same)."""
    return [
        jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v), weak_type=_weak(v)) for v in values
    ]


def _weak(value: Any) -> bool:
    return bool(getattr(jax.typeof(value), "weak_type", False))


def _traced(fn: Callable[..., Any], leaves: list[Any], treedef: Any, args: tuple) -> tuple:
    """``fn(params, *args)`` as a closed jaxpr over ``leaves`` then ``args``' leaves, and the
    structure of what it returns."""
    flat_args, args_tree = jax.tree.flatten(args)

    def flat(params_leaves: list[Any], args_leaves: list[Any]) -> Any:
        params = jax.tree.unflatten(treedef, params_leaves)
        return fn(params, *jax.tree.unflatten(args_tree, args_leaves))

    closed, shape = jax.make_jaxpr(flat, return_shape=True)(_avals(leaves), _avals(flat_args))
    return closed, flat_args, jax.tree.structure(shape)


def splitting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(params, *args)`` that also takes a member's parameters with :class:`LowRank`
    leaves, applying each where ``fn`` multiplies by it (see the module's docstring).

    Plain parameters call ``fn`` itself: low-rank members cost a network nothing else.
    """

    def call(params: PyTree, *args: Any) -> Any:
        if not contains_lowrank(params):
            return fn(params, *args)
        leaves, treedef = jax.tree.flatten(params, is_leaf=is_lowrank)
        closed, flat_args, out_tree = _traced(fn, [_plain(x) for x in leaves], treedef, args)
        interpreter = _Interpreter()
        outs = interpreter.closed(closed, [*leaves, *flat_args])
        if interpreter.formed:  # a plan other than this network's: correct, but not thin
            warnings.warn(
                "low-rank members formed some of their weights whole, where the network uses "
                f"them by {', '.join(sorted(interpreter.formed))}, not by the product their "
                "factors were drawn for",
                stacklevel=2,
            )
        return jax.tree.unflatten(out_tree, outs)

    return call


@dataclass(frozen=True)
class Plan:
    """How a network's parameter leaves (``jax.tree.leaves`` order) can be perturbed.

    ``splits[i]``: where leaf ``i`` splits into the matrix its every product contracts, or
    None where it is perturbed in full (a vector, or a leaf some use cannot split);
    ``whole``: the names of leaves of two or more axes in full, with the use that keeps them so.
    """

    splits: tuple[int | None, ...]
    whole: tuple[str, ...] = ()


def plan(fn: Callable[..., Any], params: PyTree, *args: Any) -> Plan:
    """Read off ``fn(params, *args)`` where each leaf of ``params`` is multiplied (shapes only:
    ``params`` and ``args`` may be shape structs)."""
    named, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = [leaf for _, leaf in named]
    closed, flat_args, _ = _traced(fn, leaves, treedef, args)
    interpreter = _Interpreter()

    def probed(values: list[Any], rest: list[Any]) -> Any:
        probes = [_Probe(v, i) if jnp.ndim(v) >= 2 else v for i, v in enumerate(values)]
        return interpreter.closed(closed, [*probes, *rest])

    jax.eval_shape(probed, _avals(leaves), _avals(flat_args))
    splits, whole = [], []
    for index, (path, leaf) in enumerate(named):
        uses = interpreter.uses.get(index, {None})
        split = next(iter(uses)) if len(uses) == 1 else None
        splits.append(split)
        if split is None and jnp.ndim(leaf) >= 2:
            whole.append(jax.tree_util.keystr(path))
    return Plan(tuple(splits), tuple(whole))
