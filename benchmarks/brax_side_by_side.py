"""esjax against Brax's own ARS and ES trainers on one Brax env: steps and wall to return levels.

All three run in this one process, one after another, on the same env, backend, episode
length and env-step budget, for each seed. Env steps are counted as Brax's trainers count
them: the valid (pre-termination) steps of the training episodes; evaluation episodes are not
counted by any of them. Each trainer evaluates its policy at the same env-step thresholds
(Brax's schedule: every ``steps / evals`` steps, the last at the end of the budget) on
``--eval-episodes`` episodes, and the wall clock is read when each evaluation returns,
counted from before the env is built: env construction, compilation (JAX's persistent cache
is off for all three) and evaluations are included for every trainer alike.

For each trainer and seed it prints the env steps and wall seconds at the first evaluation
at or above each return level (``--`` if never) and the return at the end of the budget; then
medians over seeds and, against ARS, the ratios esjax/ARS of the wall to reach ARS's median
final return and of the median final returns. ``--json`` keeps every evaluation.

esjax runs its engine (the compiled generation block and evaluation that ``esjax evolve``
runs) one generation at a time under this script's loop, which stops at the first generation
at or past the budget and evaluates as Brax's loop does; ``evolve`` itself can only stop after
a number of generations, and a fixed evaluation interval in generations would not match the
other two's in steps. Left out against ``esjax evolve``: its metrics file and checkpoints.

    python benchmarks/brax_side_by_side.py --task tasks/hopper.toml   # hopper, 5 M steps, 3 seeds
    python benchmarks/brax_side_by_side.py --steps 100000 --seeds 0 --evals 3 \
        --episode-length 200 --json /tmp/side.json                    # smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core, for all three trainers

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from brax import envs  # noqa: E402
from brax.training.agents.ars import train as ars  # noqa: E402
from brax.training.agents.es import train as es  # noqa: E402

from esjax._src.envs.suite_brax import UNMAINTAINED_WARNING  # noqa: E402
from esjax._src.run.cache import disable_compilation_cache  # noqa: E402
from esjax._src.run.training import clear_engine_cache, engine_for, resolve_config  # noqa: E402

# Brax warns on every env it builds that its pipelines are no longer maintained.
warnings.filterwarnings("ignore", message=UNMAINTAINED_WARNING, category=UserWarning)

TRAINERS = ("ars", "es", "esjax")
# ARS paper (Mania et al. 2018), ARS V2-t on Hopper: step size 0.01, 8 directions, top 4,
# noise 0.025, and the survival bonus (1 per step in Hopper) taken off the training rewards.
# From memory, not checked against the paper's table.
ARS_DEFAULTS = {"directions": 8, "top": 4, "step_size": 0.01, "noise": 0.025, "shift": 1.0}
# Brax's own ES defaults (population 128 pairs, Adam 1e-3, std 0.1).
ES_DEFAULTS = {"population": 128, "lr": 1e-3, "std": 0.1}


def parse_args() -> argparse.Namespace:
    """The command line; every trainer gets the same env, budget, seeds and evaluations."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="hopper", help="Brax env name")
    p.add_argument("--backend", default="positional")
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument(
        "--steps",
        type=lambda s: int(float(s)),
        default=5_000_000,
        help="env-step budget of every trainer (valid training steps)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--levels", type=float, nargs="+", default=[500.0, 1000.0, 2000.0])
    p.add_argument("--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS))
    p.add_argument("--task", default="tasks/hopper.toml", help="esjax task TOML")
    p.add_argument("--json", type=Path, default=None, help="write every number here")
    p.add_argument("--evals", type=int, default=20, help="evaluations along each run")
    p.add_argument("--eval-episodes", type=int, default=128, help="episodes per evaluation")
    p.add_argument("--ars-directions", type=int, default=ARS_DEFAULTS["directions"])
    p.add_argument("--ars-top", type=int, default=ARS_DEFAULTS["top"])
    p.add_argument("--ars-step-size", type=float, default=ARS_DEFAULTS["step_size"])
    p.add_argument("--ars-noise", type=float, default=ARS_DEFAULTS["noise"])
    p.add_argument(
        "--ars-reward-shift",
        type=float,
        default=ARS_DEFAULTS["shift"],
        help="subtracted from every training reward (0: Brax's default)",
    )
    p.add_argument("--es-population", type=int, default=ES_DEFAULTS["population"])
    p.add_argument("--es-lr", type=float, default=ES_DEFAULTS["lr"])
    p.add_argument("--es-std", type=float, default=ES_DEFAULTS["std"])
    p.add_argument(
        "--es-deterministic-eval",
        action="store_true",
        help="evaluate ES's mean action (Brax's default samples)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="extra esjax task override (key=value)",
    )
    args = p.parse_args()
    if args.evals < 1 or args.steps < args.evals:
        p.error("need 1 <= --evals <= --steps")
    return args


def ars_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``ars.train`` keywords beyond the shared ones: the ARS paper's Hopper settings."""
    return {
        "number_of_directions": args.ars_directions,
        "top_directions": args.ars_top,
        "step_size": args.ars_step_size,
        "exploration_noise_std": args.ars_noise,
        "reward_shift": args.ars_reward_shift,
        "normalize_observations": True,
        "num_evals": args.evals,  # after training only: thresholds steps/evals apart
    }


def es_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``es.train`` keywords beyond the shared ones: Brax's defaults, normalised inputs."""
    return {
        "population_size": args.es_population,
        "learning_rate": args.es_lr,
        "perturbation_std": args.es_std,
        "normalize_observations": True,
        "deterministic_eval": args.es_deterministic_eval,
        # One more than ARS: ES also evaluates at step 0, then every steps/evals steps.
        "num_evals": args.evals + 1,
    }


def esjax_overrides(args: argparse.Namespace) -> list[str]:
    """The task's settings with this comparison's env, backend, episode length, evaluation."""
    return [
        f"env=brax:{args.env}",
        f"env_kwargs.backend={args.backend}",
        f"episode_length={args.episode_length}",
        f"evaluation.episodes={args.eval_episodes}",
        *args.overrides,
    ]


def eval_schedule(steps: int, evals: int) -> tuple[int, int]:
    """``(first threshold, spacing)`` of Brax's evaluations, so esjax evaluates at the same."""
    between = steps // evals
    return steps - (evals - 1) * between, between


def print_evaluation(trainer: str, seed: int, row: dict[str, Any]) -> None:
    """One evaluation as it happens, so a run cut short still leaves its curve in the log."""
    print(
        f"    {trainer} seed {seed} eval: {row['steps']:,} steps, {row['wall_s']:.1f} s, "
        f"return {row['return']:.1f}",
        flush=True,
    )


def run_brax(trainer: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One Brax trainer from a cold start; each evaluation timed as ``progress_fn`` sees it."""
    jax.clear_caches()  # every run compiles its programs, as each esjax run does
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()

    def progress(num_steps: int, metrics: dict[str, Any]) -> None:
        wall = time.perf_counter() - start
        rows.append(
            {
                "steps": int(num_steps),
                "wall_s": wall,
                "return": float(metrics["eval/episode_reward"]),
            }
        )
        print_evaluation(trainer, seed, rows[-1])

    env = envs.get_environment(args.env, backend=args.backend)
    train, settings = (
        (ars.train, ars_settings(args)) if trainer == "ars" else (es.train, es_settings(args))
    )
    train(
        env,
        wrap_env=True,
        num_timesteps=args.steps,
        episode_length=args.episode_length,
        num_eval_envs=args.eval_episodes,
        seed=seed,
        progress_fn=progress,
        **settings,
    )
    return {"trainer": trainer, "seed": seed, "evals": rows, "wall_s": time.perf_counter() - start}


def run_esjax(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """esjax's engine from a cold start, a generation at a time until the budget is spent.

    Evaluates the search mean (and, as ``esjax evolve`` does, the generation's best member)
    at the first generation at or past each of Brax's thresholds, the last at the budget.
    """
    clear_engine_cache()  # compile afresh, as each Brax run does
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    config = resolve_config(args.task, seed=seed, overrides=esjax_overrides(args))
    _, engine = engine_for(config)
    state = engine.init(jnp.asarray(config.seed_ids, jnp.int32))
    one = jnp.asarray(1, jnp.int32)
    next_eval, between = eval_schedule(args.steps, args.evals)
    steps = generations = 0
    while steps < args.steps:
        state, metrics = engine.run_block(state, one)
        steps += int(jax.device_get(metrics["env_steps"])[0, 0])  # (block, seeds)
        generations += 1
        if generations == 1:  # as `esjax evolve` does: compile the evaluation beside the run
            engine.evaluate.compile_in_background(state)
        if steps >= next_eval:
            evaluation = jax.device_get(engine.evaluate(state))
            rows.append(
                {
                    "steps": steps,
                    "wall_s": time.perf_counter() - start,
                    "return": float(evaluation["eval_return"][0]),
                }
            )
            print_evaluation("esjax", seed, rows[-1])
            next_eval += between
    return {
        "trainer": "esjax",
        "seed": seed,
        "evals": rows,
        "generations": generations,
        "wall_s": time.perf_counter() - start,
    }


def summarize(run: dict[str, Any], levels: list[float]) -> dict[str, Any]:
    """Final steps and return, and where each level was first reached (``None``: never)."""
    rows = run["evals"]
    reached = {}
    for level in levels:
        hit = next((r for r in rows if r["return"] >= level), None)
        reached[f"{level:g}"] = {
            "steps": hit["steps"] if hit else None,
            "wall_s": hit["wall_s"] if hit else None,
        }
    return {
        **run,
        "final_steps": rows[-1]["steps"],
        "final_return": rows[-1]["return"],
        "levels": reached,
    }


def median_or_none(values: list[float | None]) -> float | None:
    """Median over seeds, a seed that never got there counting as infinitely late."""
    m = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(m) else m


def first_wall(run: dict[str, Any], level: float) -> float | None:
    """Wall seconds at the first evaluation at or above ``level``."""
    return next((r["wall_s"] for r in run["evals"] if r["return"] >= level), None)


def fmt(value: float | None, spec: str) -> str:
    """A number as ``spec`` says, or a dash for one that does not exist (never reached)."""
    return "—" if value is None else format(value, spec)


def esjax_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What esjax runs: the task's strategy and sizes with this comparison's overrides."""
    config = resolve_config(args.task, seed=args.seeds[0], overrides=esjax_overrides(args))
    return {
        "task": str(args.task),
        "strategy": config.strategy.name,
        "popsize": config.popsize,
        "rollouts": config.rollouts,
        "num_dims": config.num_dims,
        "overrides": esjax_overrides(args),
        "settings": config.strategy.settings,
    }


def print_header(args: argparse.Namespace) -> dict[str, Any]:
    """Say what is compared and how; returns the settings for the JSON record."""
    settings = {
        "ars": {k: v for k, v in ars_settings(args).items() if k != "num_evals"},
        "es": {k: v for k, v in es_settings(args).items() if k != "num_evals"},
    }
    if "esjax" in args.trainers:
        settings["esjax"] = esjax_settings(args)
    first, between = eval_schedule(args.steps, args.evals)
    print(
        f"brax:{args.env} ({args.backend} backend), episodes of at most "
        f"{args.episode_length} steps, budget {args.steps:,} valid env steps, seeds "
        f"{args.seeds}, devices {jax.devices()}"
    )
    print(
        f"evaluations: at the first epoch/generation at or past {first:,} + k x {between:,} "
        f"steps, {args.eval_episodes} episodes each (not counted in env steps); ES also at "
        "step 0"
    )
    print(
        "wall: from before the env is built, compile included (no persistent cache), "
        "evaluations included; read when each evaluation returns"
    )
    print(
        "esjax: its engine run a generation at a time until the budget is spent (stops at "
        "the first generation at or past it, as Brax's trainers do)"
    )
    for name in args.trainers:
        print(f"  {name}: {json.dumps(settings[name], default=str)}")
    return {name: settings[name] for name in args.trainers}


def print_runs(results: list[dict[str, Any]], levels: list[float]) -> None:
    """One row per trainer and seed."""
    head = f"{'trainer':<7} {'seed':>4} {'steps':>11} {'wall_s':>8} {'final':>8}"
    for level in levels:
        head += f" | {f'>={level:g} steps':>15} {'wall_s':>7}"
    print("\n" + head)
    for r in results:
        print(_row(r["trainer"], r["seed"], r["final_steps"], r["evals"][-1]["wall_s"],
                   r["final_return"], [r["levels"][f"{level:g}"] for level in levels]))  # fmt: skip


def _row(name: str, seed: Any, steps: float, wall: float, final: float, hits: list) -> str:
    """One printed row: steps, wall and final return, then steps and wall to each level."""
    line = f"{name:<7} {seed:>4} {steps:>11,.0f} {wall:>8.1f} {final:>8.1f}"
    for hit in hits:
        line += f" | {fmt(hit['steps'], ',.0f'):>15} {fmt(hit['wall_s'], '.1f'):>7}"
    return line


def medians(results: list[dict[str, Any]], trainers: list[str], levels: list[float]) -> dict:
    """Per trainer, the medians over seeds of every printed number."""
    out = {}
    for name in trainers:
        runs = [r for r in results if r["trainer"] == name]
        out[name] = {
            "final_steps": statistics.median(r["final_steps"] for r in runs),
            "wall_s": statistics.median(r["evals"][-1]["wall_s"] for r in runs),
            "final_return": statistics.median(r["final_return"] for r in runs),
            "levels": {
                f"{lv:g}": {
                    k: median_or_none([r["levels"][f"{lv:g}"][k] for r in runs])
                    for k in ("steps", "wall_s")
                }
                for lv in levels
            },
        }
    return out


def ratios(results: list[dict[str, Any]], med: dict) -> dict[str, Any] | None:
    """esjax/ARS: wall to ARS's median final return, and median final return."""
    if "ars" not in med or "esjax" not in med:
        return None
    target = med["ars"]["final_return"]
    wall = {
        name: median_or_none([first_wall(r, target) for r in results if r["trainer"] == name])
        for name in med
    }
    ok = wall["esjax"] is not None and wall["ars"]
    return {
        "target_return": target,
        "wall_to_target_s": wall,
        "wall_esjax_over_ars": wall["esjax"] / wall["ars"] if ok else None,
        "final_return_esjax_over_ars": (med["esjax"]["final_return"] / target if target else None),
    }


def print_summary(med: dict, ratio: dict[str, Any] | None, levels: list[float]) -> None:
    """The medians block, then the ratios against ARS."""
    print("\nmedians over seeds (a level never reached counts as never: —)")
    for name, m in med.items():
        print(_row(name, "", m["final_steps"], m["wall_s"], m["final_return"],
                   [m["levels"][f"{level:g}"] for level in levels]))  # fmt: skip
    if ratio is None:
        return
    walls = ", ".join(f"{k} {fmt(v, '.1f')} s" for k, v in ratio["wall_to_target_s"].items())
    print(f"\nwall to ARS's median final return {ratio['target_return']:.1f}: {walls}")
    print(
        f"esjax/ARS: wall to that return {fmt(ratio['wall_esjax_over_ars'], '.2f')}, "
        f"final return {fmt(ratio['final_return_esjax_over_ars'], '.2f')}"
    )


def main() -> None:
    args = parse_args()
    disable_compilation_cache()  # every trainer compiles in the timed run
    settings = print_header(args)
    results = []
    for seed in args.seeds:
        for name in args.trainers:
            run = run_esjax(args, seed) if name == "esjax" else run_brax(name, args, seed)
            results.append(summarize(run, args.levels))
            r = results[-1]
            print(
                f"  {name} seed {seed}: {r['final_steps']:,} steps, return "
                f"{r['final_return']:.1f}, {r['wall_s']:.1f} s",
                flush=True,
            )
    print_runs(results, args.levels)
    med = medians(results, args.trainers, args.levels)
    ratio = ratios(results, med)
    print_summary(med, ratio, args.levels)
    if args.json is not None:
        record = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "settings": settings,
            "runs": results,
            "medians": med,
            "ratios": ratio,
        }
        args.json.write_text(json.dumps(record, indent=1, default=str))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
