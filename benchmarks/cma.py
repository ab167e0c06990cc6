"""Seconds per CMA-ES generation (ask + tell, no rollouts): evosax's CMA_ES against LazyCMA_ES.

Both run the same jitted scan of generations on a sphere, in this process. Sizes are the
pendulum MLP 3-32-32-1 (1,217 parameters) and the pendulum-sign / pendulum-meta LSTM with 32
cells (4,769 parameters), each at CMA-ES's default popsize 4 + 3 ln n (even). The lazy run
spans whole decomposition periods, so its time per generation includes its share of the
eigendecomposition.

    python benchmarks/cma.py                 # both sizes
    python benchmarks/cma.py --dims 1217     # one
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from evosax.algorithms import CMA_ES

from esjax._src.strategies.cma import LazyCMA_ES, resolve_decomposition_every


def default_popsize(num_dims: int) -> int:
    popsize = 4 + int(3 * jnp.log(num_dims))
    return popsize + popsize % 2


def seconds_per_generation(es, num_dims: int, generations: int, repeats: int) -> float:
    """Median over ``repeats`` of one jitted scan of ``generations``, divided by them."""
    params = es.default_params.replace(std_init=jnp.asarray(0.1))

    def generation(state, key):
        k_ask, k_tell = jax.random.split(key)
        population, state = es.ask(k_ask, state, params)
        fitness = jnp.sum((population - 1.0) ** 2, axis=-1)
        state, _ = es.tell(k_tell, population, fitness, state, params)
        return state, None

    @jax.jit
    def run(state, key):
        return jax.lax.scan(generation, state, jax.random.split(key, generations))[0]

    state = es.init(jax.random.key(0), jnp.zeros(num_dims), params)
    jax.block_until_ready(run(state, jax.random.key(1)))  # compile
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(state, jax.random.key(2 + r)))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / generations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[1217, 4769])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| parameters | popsize | k (auto) | evosax CMA_ES s/gen | LazyCMA_ES s/gen | speed-up |")
    print("|---|---|---|---|---|---|")
    for n in args.dims:
        popsize = default_popsize(n)
        every = resolve_decomposition_every("auto", n, popsize)
        solution = jnp.zeros(n)
        # evosax decomposes every generation: a few generations show its steady cost.
        eager = seconds_per_generation(CMA_ES(popsize, solution), n, 2, args.repeats)
        lazy = seconds_per_generation(LazyCMA_ES(popsize, solution), n, every, args.repeats)
        print(
            f"| {n} | {popsize} | {every} | {eager:.3f} | {lazy:.3f} | {eager / lazy:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
