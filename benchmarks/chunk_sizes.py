"""A preset's env steps per second at several ``chunk_size`` pins, on the devices esjax uses.

On a CPU a rollout steps a device's members in chunks (``lax.map`` over ``vmap``); unpinned,
a chunk holds as many members as keep their weights in cache, which for a small policy is the
whole population. A MuJoCo model's solver state per member is far larger than a linear
policy's weights, and whether it still fits decides the speed. This script times the same
generations of one seed at each pin (one device per core, as the CLI sets), after a first block
that compiles, and prints env steps/s and the ratio to the first pin (0: all of a device's
members at once). The script also says whether each pin's fitness matches the first's: the
numbers stay the same only where the env's physics does not depend on its batch.

    python benchmarks/chunk_sizes.py --task tasks/cheetah-run.toml --popsize 128 --chunks 0 32 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import esjax

esjax.use_cpu_cores()  # before JAX starts, as every esjax run does

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from esjax._src.engine.tasks import task_chunk_size  # noqa: E402
from esjax._src.run.cache import disable_compilation_cache  # noqa: E402
from esjax._src.run.training import clear_engine_cache, engine_for, resolve_config  # noqa: E402


def measure(args: argparse.Namespace, chunk: int) -> tuple[list[float], np.ndarray]:
    """Env steps/s of each timed block, and every generation's mean fitness."""
    clear_engine_cache()
    # 0: a pin as large as any population, so that each device steps all its members at once
    # (what the rollout's own rule does for a small policy), whatever the preset pins.
    overrides = [f"chunk_size={chunk or 1 << 30}"]
    # The popsize as a setting, not ``--popsize``: the popsize rule's rescaled learning rate
    # would visit other policies, whose contacts cost the solver other times.
    overrides += [f"strategy_settings.popsize={args.popsize}"] if args.popsize else []
    config = resolve_config(args.task, seed=args.seed, overrides=overrides)
    if task_chunk_size(config.task) is None:  # the rule that drops a task's pin off CPUs
        raise SystemExit(f"chunk_size pins apply on CPUs only, not on {jax.devices()[0].platform}")
    _, engine = engine_for(config)
    if args.generations > engine.block:
        raise SystemExit(f"--generations {args.generations}: a block holds {engine.block}")
    state = engine.init(jnp.asarray(config.seed_ids, jnp.int32))
    block = jnp.asarray(args.generations, jnp.int32)
    state, metrics = engine.run_block(state, block)  # compiles
    fitness = [np.asarray(metrics["fitness_mean"][: args.generations])]
    rates = []
    for _ in range(args.blocks):
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(engine.run_block(state, block))
        seconds = time.perf_counter() - start
        rates.append(float(jnp.sum(metrics["env_steps"][: args.generations])) / seconds)
        fitness.append(np.asarray(metrics["fitness_mean"][: args.generations]))
    return rates, np.concatenate(fitness)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a preset's TOML file")
    parser.add_argument("--popsize", type=int, default=None, help="default: the preset's")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 32, 16],
                        help="members per device stepping together; 0: all of them")  # fmt: skip
    parser.add_argument("--generations", type=int, default=3, help="generations per block")
    parser.add_argument("--blocks", type=int, default=3, help="timed blocks after the first")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.blocks < 1:
        raise SystemExit("--blocks: at least 1 timed block")
    disable_compilation_cache()  # every pin compiles its own program
    print(f"{args.task}, popsize {args.popsize or 'as the preset'}, {len(jax.devices())} devices")
    baseline = None
    for chunk in args.chunks:
        rates, fitness = measure(args, chunk)
        rate = statistics.median(rates)
        baseline = baseline if baseline is not None else (rate, fitness)
        same = np.array_equal(fitness, baseline[1])
        print(
            f"chunk_size {chunk or 'all'}: {rate / 1e3:.1f} k env steps/s (median of "
            f"{len(rates)} blocks of {args.generations} generations), {rate / baseline[0]:.2f}x "
            f"the first; fitness {'the same' if same else 'differs'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
