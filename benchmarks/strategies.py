"""Every strategy esjax can run, on pendulum and cartpole at a matched env-step budget.

Each row is one run of 3 seeds side by side (``evolve(..., seeds=3)``, vmapped) with the same
policy, popsize and generations for every algorithm of a task, so each gets the same env-step
budget (cartpole episodes end early, so the steps actually used differ). An evosax name that has
a tuned preset (``Open_ES`` -> ``open_es``) runs the preset's settings at this popsize; every
other algorithm runs with esjax's defaults (std 0.1, Adam 0.05 where it takes an optimizer) and
evosax's own for the rest. Columns:

* final test return: the final policy of each seed on 128 fresh test episodes (keys disjoint
  from training and evaluation), mean over seeds +- the 95 % t interval;
* steps to solve: env steps (per seed) until the evaluated search mean first reaches the task's
  solved threshold, median of the seeds that reach it, and how many did;
* wall: the whole run (3 seeds, compile included);
* ask + tell: their share of one generation of one seed, each part (ask, rollout, tell)
  compiled alone and timed as the median of 5 calls.

    nice -n 5 python benchmarks/strategies.py --out /tmp/strategies.jsonl  # its page
    python benchmarks/strategies.py --tasks cartpole --algorithms xNES PSO --generations 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import traceback
from pathlib import Path

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from timing import median_time  # noqa: E402

from esjax._src.engine.generation import phase_functions  # noqa: E402
from esjax._src.run.runs import load_metrics  # noqa: E402
from esjax._src.run.saved import SavedPolicy, make_test_rollout  # noqa: E402
from esjax._src.run.training import (  # noqa: E402
    clear_engine_cache,
    engine_for,
    evolve,
)
from esjax._src.specs.config import ConfigError  # noqa: E402
from esjax._src.specs.stats import mean_interval  # noqa: E402
from esjax._src.strategies import algorithms  # noqa: E402

# Matched budgets: popsize x generations x rollouts x episode length env steps per seed at most.
# One small policy for both tasks so that the full-matrix algorithms (CMA-ES, xNES, MA-ES,
# iAMaLGaM) cost seconds, not minutes, per run on a 2-core CPU.
TASKS = {
    "pendulum": {"popsize": 64, "generations": 150},  # 64 x 150 x 1 x 200 = 1.92 M steps
    "cartpole": {"popsize": 64, "generations": 40},  # 64 x 40 x 2 x 500 <= 2.56 M steps
}
# Every algorithm gets the task's own episodes per member, whatever its preset's multiplier.
POLICY = [
    "policy.hidden=[16, 16]",
    "evaluation.every=10",
    "strategy_settings.rollouts_multiplier=1",
    # The table was measured with the plain MLP, before pendulum's preset mirrored its policy.
    "policy.mirror=[]",
]


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % t interval (NaN for one seed: the table shows nan)."""
    mean, half = mean_interval(values, 0.95)
    return mean, (half if len(values) > 1 else math.nan)


def strategy_names() -> list[str]:
    """Every evosax algorithm esjax runs, by its evosax name (presets resolve by name)."""
    return [name for name in algorithms.REGISTRY if algorithms.refusal(name) is None]


def ask_tell_share(config: dict, repeats: int = 5) -> float:
    """(ask + tell) / (ask + rollout + tell) for one seed, each part compiled alone."""
    _, engine = engine_for(config)
    fns = phase_functions(engine)
    sstate = jax.tree.map(lambda x: x[0], engine.init(jnp.arange(1))).strategy
    keys = jax.random.split(jax.random.key(0), 3)

    t_ask, population = median_time(fns["ask"], keys[0], sstate, repeats=repeats)
    t_roll, returns = median_time(fns["rollout"], keys[1], population, repeats=repeats)
    t_tell, _ = median_time(fns["tell"], keys[2], population, returns, sstate, repeats=repeats)
    return (t_ask + t_tell) / (t_ask + t_roll + t_tell)


def one_row(task: str, name: str, seeds: int, budget: dict, out: Path) -> dict:
    clear_engine_cache()
    summary = evolve(
        task,
        strategy=name,
        popsize=budget["popsize"],
        generations=budget["generations"],
        seeds=seeds,
        out=out,
        overwrite=True,
        overrides=POLICY,
    )
    config = json.loads((out / "config.json").read_text())
    threshold = config["task"]["solved_return"]
    built = make_test_rollout(out, None)
    tests = [
        float(jnp.mean(SavedPolicy.load(out, "final", s, built=built).test_returns(128)))
        for s in range(seeds)
    ]
    rows = [r for r in load_metrics(out) if "eval_return" in r]
    hits = []
    for s in range(seeds):
        mine = [r for r in rows if r.get("seed", 0) == s]
        hit = next((r["env_steps"] for r in mine if r["eval_return"] >= threshold), None)
        if hit is not None:
            hits.append(hit)
    share = ask_tell_share(config)
    return {
        "task": task,
        "strategy": name,
        "preset": config["strategy"]["name"] != config["strategy"]["algorithm"],
        "algorithm": config["strategy"]["algorithm"],
        "test": tests,
        "solved_steps": hits,
        "env_steps": summary.env_steps,
        "wall_s": summary.wall_s,
        "ask_tell_share": share,
        "threshold": threshold,
    }


def markdown(row: dict, seeds: int) -> str:
    if "error" in row:
        return f"| {row['strategy']} | error: {row['error']} | | | | |"
    mean, half = interval(row["test"])
    hits = row["solved_steps"]
    solved = f"{statistics.median(hits) / 1e6:.2f} M ({len(hits)}/{seeds})" if hits else "-"
    label = f"{row['strategy']} (preset)" if row["preset"] else row["strategy"]
    return (
        f"| {label} | {mean:.1f} ± {half:.1f} | {solved} | {row['env_steps'] / 1e6:.2f} M "
        f"| {row['wall_s']:.0f} s | {100 * row['ask_tell_share']:.0f} % |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--algorithms", nargs="*", default=None, help="default: all that run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--generations", type=int, default=None, help="override the budget")
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args()

    names = args.algorithms or strategy_names()
    print(f"devices: {jax.devices()}")
    for task in args.tasks:
        budget = dict(TASKS[task])
        if args.generations:
            budget["generations"] = args.generations
        print(
            f"\n{task}: popsize {budget['popsize']}, {budget['generations']} generations, "
            f"{args.seeds} seeds, {' '.join(POLICY)}"
        )
        print("| strategy | final test return | steps to solve | env steps | wall | ask + tell |")
        print("|---|---|---|---|---|---|")
        for name in names:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    row = one_row(task, name, args.seeds, budget, Path(tmp) / "run")
                except (ConfigError, Exception) as error:  # one failure must not stop the table
                    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                    row = {"task": task, "strategy": name, "error": first}
                    traceback.print_exc()
            print(markdown(row, args.seeds), flush=True)
            if args.out:
                with args.out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
