"""Scale-out: generation throughput on 1, 2 and 4 simulated CPU devices, and bytes moved.

Runs the whole jitted generation block (ask, sharded rollout, tell) of Pendulum-v1 with an MLP
3-64-64-1 on a mesh of the first k of 4 devices that ``XLA_FLAGS`` simulates, and counts the
bytes of every collective in the compiled block from its HLO: per generation, that is all that
crosses devices (each device steps only its members and reduces them; one float per member is
all-gathered, and mirrored OpenES also gathers one ``num_dims`` partial sum per block of pairs).
On a 2-core machine 4 simulated devices share 2 cores, so this measures overhead, not speedup.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/scaling.py
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/scaling.py --popsize 2048
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.engine.distributed import block_collectives
from esjax._src.engine.generation import make_engine
from esjax._src.policies.networks import MLP
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.strategies.strategy import build_strategy, load_strategy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popsize", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--normalize-obs", action="store_true")
    args = parser.parse_args()
    devices = jax.devices()
    print(f"{len(devices)} devices; popsize {args.popsize}, {args.steps}-step episodes")
    print(
        "| devices | s / generation | env steps/s | bytes in collectives / generation "
        "| per member |"
    )
    print("|---|---|---|---|---|")
    for k in (1, 2, 4):
        if k > len(devices):
            break
        rollout = PopulationRollout("Pendulum-v1", MLP(hidden=(64, 64)), args.steps,
                                    devices=devices[:k])  # fmt: skip
        spec = load_strategy("open_es", {"popsize": args.popsize})
        engine = make_engine(rollout, rollout, lambda n, spec=spec: build_strategy(spec, n),
                             block=args.block, normalize_obs=args.normalize_obs)  # fmt: skip
        state = engine.init(jnp.arange(1))
        n = jnp.asarray(args.block, jnp.int32)
        moved = block_collectives(engine, state)
        state, _ = engine.run_block(state, n)  # compile and warm up
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            state, metrics = engine.run_block(state, n)
            jax.block_until_ready(state)
            times.append((time.perf_counter() - t0) / args.block)
        per_gen = statistics.median(times)
        steps = float(np.asarray(metrics["env_steps"]).mean())
        total = sum(b for _, _, b in moved)
        print(f"| {k} | {per_gen:.3f} | {steps / per_gen:,.0f} | {total:,} | "
              f"{total / args.popsize:.2f} |")  # fmt: skip
        for op, shape, size in moved:
            print(f"|   | {op} | {shape} | {size:,} | |")


if __name__ == "__main__":
    main()
