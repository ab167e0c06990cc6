"""Returns and fitness: the only place that knows evosax minimises while users maximise.

Users, metrics and logs speak *returns* (higher is better). evosax strategies minimise a
*fitness*. :func:`to_fitness` is the one function that flips the sign, and it is also where
non-finite evaluations are neutralised, so a diverging member can never put NaN or inf into a
strategy's mean, covariance or optimizer moments.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def member_returns(returns: jax.Array, worst_episodes: float = 1.0) -> jax.Array:
    """Each member's return over its rollouts: ``(popsize, rollouts) -> (popsize,)``.

    The mean of its ``ceil(worst_episodes * rollouts)`` lowest returns; 1.0, the default, is
    the plain mean. A fraction below 1 judges a member by its bad episodes (the mean of the
    lower tail), so a policy that fails badly on a few variants ranks below one that is
    steadier at the same mean. A member with any non-finite rollout gets a non-finite return,
    which :func:`to_fitness` then ranks last.
    """
    if worst_episodes >= 1.0:
        return jnp.mean(returns, axis=-1)
    count = max(1, math.ceil(worst_episodes * returns.shape[-1]))
    tail = jnp.mean(jnp.sort(returns, axis=-1)[..., :count], axis=-1)
    return jnp.where(jnp.all(jnp.isfinite(returns), axis=-1), tail, jnp.nan)


def to_fitness(returns: jax.Array) -> jax.Array:
    """Member returns -> evosax fitness (minimised), with NaN and ±inf counted as the worst.

    A non-finite return is replaced by a value just worse than the worst finite fitness of the
    generation (the next float up), so rank-based shaping puts it last and moment-based shaping
    (standardise, CMA weights) sees only finite numbers of the generation's own scale. When no
    member is finite every fitness becomes 0, and the engine keeps a mean-based strategy's
    state as it was (:func:`esjax._src.engine.generation.generation`): CMA-style weights would move
    the mean even on a flat signal.
    """
    fitness = -jnp.asarray(returns, jnp.float32)
    finite = jnp.isfinite(fitness)
    worst = jnp.max(jnp.where(finite, fitness, -jnp.inf))
    worst = jnp.where(jnp.any(finite), worst, 0.0)
    penalty = jnp.where(jnp.any(finite), jnp.nextafter(worst, jnp.inf), 0.0)
    return jnp.where(finite, fitness, penalty)


def to_return(fitness: jax.Array) -> jax.Array:
    """evosax fitness -> return, for values read back from a strategy (e.g. ``best_fitness``)."""
    return -fitness


def ordered_sum(x: jax.Array) -> jax.Array:
    """Sum over the last axis by halving, in an order that no ``vmap`` around it can change.

    XLA vectorises a plain reduction differently for different batch sizes, so a run's
    reported means would round differently alone than stacked with 80 others in a sweep;
    elementwise adds of the two halves are the same bits whatever the batch.
    """
    size = x.shape[-1]
    padded = 1 << max(0, (size - 1).bit_length())
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, padded - size)])
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def mean_and_std(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and (population) standard deviation over the last axis, by :func:`ordered_sum`."""
    mean = ordered_sum(x) / x.shape[-1]
    return mean, jnp.sqrt(ordered_sum((x - mean[..., None]) ** 2) / x.shape[-1])


def return_stats(returns: jax.Array) -> dict[str, jax.Array]:
    """Scalar summaries of the members' returns for metrics, over finite members only.

    ``nonfinite`` counts members whose return was NaN or inf, so a run that silently loses
    members shows it in its metrics.
    """
    finite = jnp.isfinite(returns)
    count = jnp.sum(finite)
    safe = jnp.where(finite, returns, 0.0)
    # Fixed-order sums: the same bits for a run alone and for the same run in a sweep.
    mean = ordered_sum(safe) / jnp.maximum(count, 1)
    var = ordered_sum(jnp.where(finite, (returns - mean) ** 2, 0.0)) / jnp.maximum(count, 1)
    best = jnp.max(jnp.where(finite, returns, -jnp.inf))
    nan = jnp.array(jnp.nan, jnp.float32)
    return {
        "fitness_mean": jnp.where(count > 0, mean, nan),
        "fitness_best": jnp.where(count > 0, best, nan),
        "fitness_std": jnp.where(count > 0, jnp.sqrt(var), nan),
        "nonfinite": returns.size - count,
    }


# ---------------------------------------------------------------------------- member groups
# With ``env_groups = G`` the population is split into G groups that each share one set of
# episode starts (common random numbers within a group, different starts across groups), and
# fitness is shaped within each group: a member is compared only with members that faced the
# same episodes, while the update still averages over G different starts. Antithetic pairs
# (member i and i + popsize/2 in evosax) always fall in the same group.


def group_members(x: jax.Array, groups: int, antithetic: bool) -> jax.Array:
    """``(popsize, ...) -> (groups, popsize // groups, ...)``, antithetic pairs kept together."""
    if not antithetic:
        return x.reshape(groups, x.shape[0] // groups, *x.shape[1:])
    half = x.reshape(2, groups, x.shape[0] // (2 * groups), *x.shape[1:])
    return jnp.swapaxes(half, 0, 1).reshape(groups, x.shape[0] // groups, *x.shape[1:])


def ungroup_members(x: jax.Array, antithetic: bool) -> jax.Array:
    """The inverse of :func:`group_members`."""
    groups, size = x.shape[:2]
    if not antithetic:
        return x.reshape(groups * size, *x.shape[2:])
    pairs = x.reshape(groups, 2, size // 2, *x.shape[2:])
    return jnp.swapaxes(pairs, 0, 1).reshape(groups * size, *x.shape[2:])


def grouped_shaping(shaping_fn, groups: int, antithetic: bool):
    """An evosax fitness-shaping function applied within each group of members."""

    def shaped(population, fitness, state, params):
        per_group = jax.vmap(lambda p, f: shaping_fn(p, f, state, params))(
            group_members(population, groups, antithetic),
            group_members(fitness, groups, antithetic),
        )
        return ungroup_members(per_group, antithetic)

    return shaped
