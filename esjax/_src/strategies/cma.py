"""Full CMA-ES at policy sizes: evosax's CMA_ES with a lazily refreshed eigendecomposition.

evosax's ``CMA_ES`` eigendecomposes the n x n covariance in every ``ask`` (O(n^3): seconds at a
thousand parameters on a laptop CPU, a minute at five thousand). The covariance moves by a
fraction ``c_1 + c_mu`` per generation (about 1e-5 at n = 1000), so the factors ``B, D`` of a
few generations ago still describe it well. :class:`LazyCMA_ES` refreshes them only every
``decomposition_every`` generations and samples from the stored factors in between, as pycma
and EvoTorch do; everything else (weights, step size, paths, the covariance update) is
evosax's own code, called unchanged. With ``decomposition_every = 1`` it is evosax's CMA-ES,
sample for sample.

The default gap is pycma's: ``max(1, floor(1 / (10 n (c_1 + c_mu))))`` generations
(``lazy_update_gap`` of ``GaussFullSampler`` in pycma's ``cma/evolution_strategy.py``;
EvoTorch's ``CMAES(limit_C_decomposition=True)`` uses the same ``decompose_C_freq``), which
keeps the amortised decomposition in proportion to the O(popsize n^2) sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from evosax.algorithms import CMA_ES
from evosax.algorithms.distribution_based.base import metrics_fn
from evosax.algorithms.distribution_based.cma_es import eigen_decomposition
from evosax.core.fitness_shaping import weights_fitness_shaping_fn
from jax.custom_batching import custom_vmap


def pycma_gap(num_dims: int, c_1: float, c_mu: float) -> int:
    """Generations between decompositions by pycma's rule, at least 1."""
    return max(1, math.floor(1.0 / (10.0 * num_dims * (c_1 + c_mu))))


def resolve_decomposition_every(value: int | str, num_dims: int, popsize: int) -> int:
    """The gap a ``decomposition_every`` setting means: an int as is, ``"auto"`` by pycma's rule."""
    if value != "auto":
        return int(value)
    params = CMA_ES(popsize, jnp.zeros((num_dims,), jnp.float32)).default_params
    return pycma_gap(num_dims, float(params.c_1), float(params.c_mu))


@custom_vmap
def _refresh(due: jax.Array, C: jax.Array, B: jax.Array, D: jax.Array):
    """``eigen_decomposition(C)`` when ``due``, else the stored ``(C, B, D)``."""
    return jax.lax.cond(due, lambda: eigen_decomposition(C), lambda: (C, B, D))


@_refresh.def_vmap
def _refresh_batched(axis_size, in_batched, due, C, B, D):
    # Under vmap (the engine's seed axis) a batched predicate would turn the cond into a select
    # that decomposes every generation. Runs advance in lockstep, so branch once on "any run
    # due" and keep each run's own choice with a select: the same result, at the lazy cost.
    due, C, B, D = (
        x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))
        for x, batched in zip((due, C, B, D), in_batched, strict=True)
    )

    def decompose():
        # One run after another: a vmapped eigh here, its batch split over the engine's CPU
        # devices inside the branch, stalled multi-device runs.
        fresh = jax.lax.map(eigen_decomposition, C)
        return tuple(
            jnp.where(due.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
            for new, old in zip(fresh, (C, B, D), strict=True)
        )

    out = jax.lax.cond(jnp.any(due), decompose, lambda: (C, B, D))
    return out, (True, True, True)


class LazyCMA_ES(CMA_ES):
    """evosax's CMA-ES, eigendecomposing the covariance every ``decomposition_every`` asks."""

    def __init__(
        self,
        population_size: int,
        solution: jax.Array,
        fitness_shaping_fn: Callable = weights_fitness_shaping_fn,
        metrics_fn: Callable = metrics_fn,
        decomposition_every: int | str = "auto",
        std_cap_decay: float = 1.0,
    ):
        super().__init__(population_size, solution, fitness_shaping_fn, metrics_fn)
        self.std_cap_decay = std_cap_decay
        every = resolve_decomposition_every(decomposition_every, self.num_dims, population_size)
        if every < 1:
            raise ValueError(f"decomposition_every must be at least 1, got {every}")
        self.decomposition_every = every

    def _ask(self, key, state, params):
        due = state.generation_counter % self.decomposition_every == 0
        C, B, D = _refresh(due, state.C, state.B, state.D)
        # evosax's draw, expression for expression (its _ask would decompose again), so k = 1
        # reproduces its CMA-ES bit for bit.
        z = jax.random.normal(key, (self.population_size, self.num_dims))
        z = (z @ jnp.diag(D).T) @ B.T
        return state.mean + state.std * z, state.replace(C=C, B=B, D=D)

    def _tell(self, key, population, fitness, state, params):
        # Under noisy returns CSA holds the step size near its start, so the mean keeps
        # wandering around a solution instead of settling on it. A cap of
        # std_init * std_cap_decay ** generation bounds it (1.0: evosax's CSA, unchanged).
        state = super()._tell(key, population, fitness, state, params)
        cap = params.std_init * jnp.power(self.std_cap_decay, state.generation_counter + 1)
        capped = jnp.where(self.std_cap_decay < 1.0, jnp.minimum(state.std, cap), state.std)
        return state.replace(std=capped)
