"""Before and after a refactor, side by side: ``--help`` time, warm start and rollout speed.

Runs two checkouts of esjax in alternating fresh processes (``PYTHONPATH`` picks the tree), so
drift on a shared machine hits both alike, and prints each figure's median and the median of
the per-pair ratios (after / before):

- ``python -m esjax --help``: the command line's start-up (it must load no JAX);
- warm start: a second ``esjax evolve pendulum`` with the compilation cache the first one
  filled, "process start → first block" as the run's own summary reports it;
- rollout: env steps/s of ``PopulationRollout.population`` (Pendulum-v1, MLP 64-64, 200-step
  episodes, popsize 512, one rollout each), compile excluded, median of 3 calls;
- low-rank H-H (``--lowrank``): env steps/s of one whole jitted ``lowrank_es`` generation (rank
  1, popsize 2048, Pendulum-v1, 200-step episodes, the built-in tanh MLP of hidden widths H-H
  on one device) through esjax's engine, compile excluded, median of 3 calls.

    git archive OLD | tar -x -C /tmp/old
    python benchmarks/refactor_check.py --before /tmp/old --after . --pairs 5
    python benchmarks/refactor_check.py --before /tmp/old --only lowrank --lowrank 64 256 1024
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_BLOCK = re.compile(r"process start → first block\D*([0-9.]+) s")
ROLLOUT = """
import statistics, time
import esjax
esjax.use_cpu_cores()
import jax
from esjax._src.policies.networks import MLP
rollout = esjax.PopulationRollout("Pendulum-v1", MLP((64, 64)), 200)
params = jax.vmap(rollout.init_params)(jax.random.split(jax.random.key(0), 512))
key = jax.random.key(1)
jax.block_until_ready(rollout.population(key, params, 1).returns)
times = []
for _ in range(3):
    start = time.perf_counter()
    jax.block_until_ready(rollout.population(key, params, 1).returns)
    times.append(time.perf_counter() - start)
print(512 * 200 / statistics.median(times))
"""


LOWRANK = """
import statistics, sys, time
import jax, jax.numpy as jnp
from esjax._src.engine.generation import make_engine
from esjax._src.policies.networks import MLP
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.strategies.strategy import build_strategy, load_strategy
width = int(sys.argv[1])
rollout = PopulationRollout("Pendulum-v1", MLP((width, width)), 200, devices=jax.devices()[:1])
spec = load_strategy("lowrank_es", {"popsize": 2048})
engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n), block=1)
state, active = engine.init(jnp.arange(1)), jnp.asarray(1, jnp.int32)
jax.block_until_ready(engine.run_block(state, active))
times = []
for _ in range(3):
    start = time.perf_counter()
    jax.block_until_ready(engine.run_block(state, active))
    times.append(time.perf_counter() - start)
print(2048 * 200 / statistics.median(times))
"""


def _env(tree: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree.resolve()), COLUMNS="200", **extra)


def help_seconds(tree: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "esjax", "--help"], env=_env(tree), check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def warm_start_seconds(tree: Path, scratch: Path) -> float:
    """The second of two identical runs sharing a fresh cache: process start → first block."""
    env = _env(tree, ESJAX_CACHE_DIR=str(scratch / "cache"), ESJAX_NO_CACHE="")
    found = None
    for attempt in ("cold", "warm"):
        command = [sys.executable, "-m", "esjax", "evolve", "pendulum", "--generations", "4",
                   "--out", str(scratch / attempt)]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{tree}: esjax evolve failed: {done.stderr.strip()[-400:]}")
        found = FIRST_BLOCK.search(done.stdout)
    if found is None:
        sys.exit(f"{tree}: no 'process start → first block' in the summary")
    return float(found.group(1))


def rollout_steps_per_second(tree: Path) -> float:
    done = subprocess.run([sys.executable, "-c", ROLLOUT], env=_env(tree), check=True,
                          capture_output=True, text=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def lowrank_steps_per_second(tree: Path, width: int) -> float:
    done = subprocess.run([sys.executable, "-c", LOWRANK, str(width)], env=_env(tree),
                          check=True, capture_output=True, text=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def measure(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """Every figure asked for, of one checkout, in fresh processes."""
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        if "startup" in args.only:
            found["--help (s)"] = help_seconds(tree)
            found["warm start (s)"] = warm_start_seconds(tree, Path(scratch))
            found["rollout (steps/s)"] = rollout_steps_per_second(tree)
        if "lowrank" in args.only:
            for width in args.lowrank:
                name = f"low-rank {width}-{width} (steps/s)"
                found[name] = lowrank_steps_per_second(tree, width)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--only", nargs="+", default=["startup"], choices=["startup", "lowrank"])
    parser.add_argument("--lowrank", type=int, nargs="+", default=[64, 256, 1024],
                        help="hidden widths of the low-rank generations")  # fmt: skip
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    for pair in range(args.pairs):
        order = [("before", args.before), ("after", args.after)]
        for side, tree in order if pair % 2 == 0 else order[::-1]:
            for name, value in measure(tree, args).items():
                results.setdefault(name, {"before": [], "after": []})[side].append(value)
        print(f"pair {pair + 1} of {args.pairs} done", flush=True)
    print(f"{'figure':20s} {'before':>12s} {'after':>12s} {'after/before':>13s}")
    for name, sides in results.items():
        ratios = [a / b for a, b in zip(sides["after"], sides["before"], strict=True)]
        before, after = statistics.median(sides["before"]), statistics.median(sides["after"])
        print(f"{name:20s} {before:12.3f} {after:12.3f} {statistics.median(ratios):13.3f}")


if __name__ == "__main__":
    main()
