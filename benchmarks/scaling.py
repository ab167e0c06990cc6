"""Scale-out: generation throughput on 1, 2 and 4 simulated CPU devices, and bytes moved.

Runs the whole jitted generation block (ask, sharded rollout, tell) of Pendulum-v1 with an MLP
3-64-64-1 on a mesh of the first k of 4 devices that ``XLA_FLAGS`` simulates, and counts the
bytes of every collective in the compiled block from its HLO: per generation, that is all that
crosses devices (each device draws the whole population's noise and keeps only its members).
On a 2-core machine 4 simulated devices share 2 cores, so this measures overhead, not speedup.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/scaling.py
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/scaling.py --popsize 2048
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from esjax.engine import make_engine
from esjax.policies import MLP
from esjax.rollout import PopulationRollout
from esjax.strategies import build_strategy, load_strategy

COLLECTIVE = re.compile(
    r"= (?P<shape>\(?[a-z0-9]+\[[^\]]*\][^=]*?) (?P<op>all-gather|all-reduce|collective-permute|"
    r"all-to-all|reduce-scatter)(-start)?\("
)
BYTES = {"f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "pred": 1, "f16": 2, "bf16": 2}


def collective_bytes(hlo: str) -> list[tuple[str, str, int]]:
    """``(op, result shape, bytes)`` of every collective in a compiled module's HLO text."""
    found = []
    for match in COLLECTIVE.finditer(hlo):
        shape = match["shape"]
        total = 0
        for dtype, dims in re.findall(r"([a-z0-9]+)\[([0-9,]*)\]", shape):
            size = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
            total += size * BYTES.get(dtype, 4)
        found.append((match["op"], shape.split("{")[0], total))
    return found


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
    print("| devices | s / generation | env steps/s | bytes gathered / generation |")
    print("|---|---|---|---|")
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
        hlo = engine.run_block.lower(state, n).compile().as_text()
        moved = collective_bytes(hlo)
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
        print(f"| {k} | {per_gen:.3f} | {steps / per_gen:,.0f} | {total:,} |")
        for op, shape, size in moved:
            print(f"|   | {op} | {shape} | {size:,} |")


if __name__ == "__main__":
    main()
