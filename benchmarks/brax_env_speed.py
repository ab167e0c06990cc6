"""A Brax env's own speed on this machine: env steps/s of a bare jitted scan, per backend.

The ceiling any trainer on that env can reach: ``batch`` envs stepped in one ``lax.scan`` of
``--steps`` steps under ``jit`` and ``vmap``, with uniformly random actions and no policy, one
reset at the start and none after, no masking and no bookkeeping. A trainer's own steps/s
(``esjax evolve``'s progress line, or ``benchmarks/brax_side_by_side.py``'s budget over its
wall) divided by this number is the share of its time the physics takes; what is left is all
a faster trainer could save.
Also the measurement behind a preset's choice of backend.

    python benchmarks/brax_env_speed.py --env hopper --batch 16 256
    python benchmarks/brax_env_speed.py --env halfcheetah --backends spring positional mjx
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import esjax

esjax.use_cpu_cores()  # before JAX starts, as every esjax run does

import jax  # noqa: E402
from brax import envs  # noqa: E402

from esjax._src.envs.suite_brax import BACKENDS, UNMAINTAINED_WARNING  # noqa: E402

warnings.filterwarnings("ignore", message=UNMAINTAINED_WARNING, category=UserWarning)


def scan_program(env, batch: int, steps: int):
    """A jitted function: reset ``batch`` envs, step them ``steps`` times, sum the rewards."""

    def run(key: jax.Array) -> jax.Array:
        reset_key, action_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(reset_key, batch))

        def step(state, key):
            action = jax.random.uniform(key, (batch, env.action_size), minval=-1.0, maxval=1.0)
            state = jax.vmap(env.step)(state, action)
            return state, state.reward.sum()

        _, rewards = jax.lax.scan(step, state, jax.random.split(action_key, steps))
        return rewards.sum()  # a scalar out, so nothing per step is kept

    return jax.jit(run)


def measure(env, batch: int, steps: int, repeats: int) -> tuple[float, float]:
    """``(compile seconds, median env steps/s over repeats)``; resets are counted in each."""
    program = scan_program(env, batch, steps)
    start = time.perf_counter()
    program(jax.random.key(0)).block_until_ready()
    compile_s = time.perf_counter() - start
    rates = []
    for repeat in range(repeats):
        start = time.perf_counter()
        program(jax.random.key(repeat + 1)).block_until_ready()
        rates.append(batch * steps / (time.perf_counter() - start))
    return compile_s, statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="hopper", help="Brax env name")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["positional"])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--steps", type=int, default=1000, help="steps per scan")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"brax:{args.env}, {args.steps}-step scans, median of {args.repeats}, compile apart")
    print("| backend | envs | env steps/s | compile |")
    print("|---|---|---|---|")
    for backend in args.backends:
        env = envs.get_environment(args.env, backend=backend)
        for batch in args.batch:
            compile_s, rate = measure(env, batch, args.steps, args.repeats)
            print(f"| {backend} | {batch} | {rate / 1e3:.1f} k | {compile_s:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
