"""Sweep throughput: env steps/s of one compiled generation block at 1 to many vmapped runs.

A sweep of settings that only change numbers runs as one program whose runs (configurations x
seeds) are vmapped like seeds, so its speed per env step should not depend on how many runs
are stacked. This times the jitted block of a task's engine (compiled and warmed up first,
as ``esjax evolve`` uses it: one CPU device per core) with ``--runs`` stacked runs, and
prints the median env steps/s over ``--repeats`` blocks.

    python benchmarks/sweep.py pendulum --runs 1 16 80
"""

from __future__ import annotations

import argparse
import statistics
import time

from esjax.distributed import use_cpu_cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="pendulum")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 16, 80])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    use_cpu_cores()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from esjax.evolve import build_engine, resolve_config

    config = resolve_config(args.task, overrides=args.overrides)
    _, engine = build_engine(config)
    n = jnp.asarray(engine.block, jnp.int32)
    print(
        f"{args.task}: popsize {engine.popsize}, block {engine.block} generations, "
        f"{len(engine.rollout.devices)} devices"
    )
    print("| runs | s / block | env steps/s |")
    print("|---|---|---|")
    for runs in args.runs:
        state = engine.init(jnp.arange(runs))
        state, metrics = engine.run_block(state, n)  # compile and warm up
        jax.block_until_ready(state)
        times, steps = [], int(np.sum(metrics["env_steps"]))
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            state, metrics = engine.run_block(state, n)
            jax.block_until_ready(state)
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        print(f"| {runs} | {median:.2f} | {steps / median / 1e6:.2f} M |")


if __name__ == "__main__":
    main()
