"""Sweep throughput: env steps/s of one compiled generation block at 1 to many vmapped runs.

A sweep of settings that only change numbers runs as one program whose runs (configurations x
seeds) are vmapped like seeds, so its speed per env step should not depend on how many runs
are stacked. This times the jitted block of a task's engine (compiled and warmed up first,
as ``esjax evolve`` uses it: one CPU device per core) with ``--runs`` stacked runs, and
prints the median env steps/s over ``--repeats`` blocks. ``--pinned N`` times, alternately
with the default, an engine whose rollout chunk is pinned at ``N`` members whatever the
number of runs (how chunks were sized before they were divided among the runs).

    python benchmarks/sweep.py pendulum --runs 1 16 80 --pinned 128
"""

from __future__ import annotations

import argparse
import statistics
import time

from esjax._src.engine.distributed import use_cpu_cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="pendulum")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 16, 80])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pinned", type=int, default=None, help="also time this fixed chunk")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    use_cpu_cores()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from esjax._src.run.training import _make_engine, resolve_config

    config = resolve_config(args.task, overrides=args.overrides)
    engines = {"divided": _make_engine(config)}
    if args.pinned:
        pinned = _make_engine(config)
        pinned.rollout.chunk_size = args.pinned  # read when the block is first traced
        engines[f"pinned {args.pinned}"] = pinned
    engine = engines["divided"]
    n = jnp.asarray(engine.block, jnp.int32)
    print(
        f"{args.task}: popsize {engine.popsize}, block {engine.block} generations, "
        f"{len(engine.rollout.devices)} devices"
    )
    print("| runs | chunks | s / block | env steps/s |")
    print("|---|---|---|---|")
    for runs in args.runs:
        states, times, steps = {}, {name: [] for name in engines}, 0
        for name, engine in engines.items():
            state = engine.init(jnp.arange(runs))
            state, metrics = engine.run_block(state, n)  # compile and warm up
            states[name] = jax.block_until_ready(state)
            steps = int(np.sum(metrics["env_steps"]))
        for _ in range(args.repeats):  # alternate, so a change in load hits both alike
            for name, engine in engines.items():
                t0 = time.perf_counter()
                states[name], _ = engine.run_block(states[name], n)
                jax.block_until_ready(states[name])
                times[name].append(time.perf_counter() - t0)
        for name in engines:
            median = statistics.median(times[name])
            print(f"| {runs} | {name} | {median:.2f} | {steps / median / 1e6:.2f} M |")


if __name__ == "__main__":
    main()
