"""The gymnax ES suite: every env gymnax-blines trained ES on, esjax's preset against its row.

For each preset, one ``esjax.evolve`` with ``--seeds`` seeds vmapped in one program (the
preset's own defaults otherwise). Reported per env, over the seeds:

- the success rate: seeds whose final policy's test return on fresh episodes reaches the
  preset's ``solved_return`` (each run's own verdict in ``summary.json``, the count ``esjax
  report`` gives), with its Wilson 95 % interval;
- the IQM of those final test returns with its bootstrap 95 % interval (``esjax.report``);
- the env steps and wall time (since ``evolve`` was called, compile included) at which the
  median seed's test return (search mean, held-out episodes, the preset's evaluation schedule)
  first reached the blines final return, and how many seeds reached it at all;

beside the blines row (final return and the env steps it took). Wall times are on whatever
machine this runs on; say "shared machine" when quoting them from a loaded host.

    python benchmarks/suite.py --seeds 16 --seed 1000    # every env, 16 fresh seeds
    python benchmarks/suite.py catch deep-sea --seeds 3 --out /tmp/suite
    python benchmarks/suite.py --plot-only --out /tmp/suite   # table and figure from saved runs

Blines numbers: gymnax-blines ``agents/<env>/es.pkl`` test returns and env steps, as quoted in
issue 12 of this project (OpenES, popsize 100 x 20 rollouts, unless noted there).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core

from esjax._src.analysis.reporting import REPS, read_cell, success, task_iqm  # noqa: E402
from esjax._src.run.runs import load_metrics  # noqa: E402
from esjax._src.run.training import clear_engine_cache, evolve  # noqa: E402

# preset -> (env id, blines ES final test return, env steps it took, blines failed?)
BLINES = {
    "pendulum": ("Pendulum-v1", -130.2, 39.6e6, False),
    "cartpole": ("CartPole-v1", 500.0, 62.0e6, False),
    "acrobot": ("Acrobot-v1", -82.0, 22.3e6, False),
    "mountaincar": ("MountainCar-v0", -134.6, 375e6, False),
    "mountaincar-continuous": ("MountainCarContinuous-v0", 95.3, 894e6, False),
    "catch": ("Catch-bsuite", 1.0, 3.2e6, False),
    "umbrella-chain": ("UmbrellaChain-bsuite", 1.09, 1.8e6, False),
    "discounting-chain": ("DiscountingChain-bsuite", 1.1, 19.6e6, False),
    "memory-chain": ("MemoryChain-bsuite", -0.04, 1.0e6, True),
    "deep-sea": ("DeepSea-bsuite", 0.0, 1.4e6, True),
    "four-rooms": ("FourRooms-misc", 1.0, 110e6, False),
    "bernoulli-bandit": ("BernoulliBandit-misc", 89.2, 760e6, False),
    "gaussian-bandit": ("GaussianBandit-misc", 0.0, 760e6, True),
    "point-robot": ("PointRobot-misc", 10.4, 1.5e9, False),
    "metamaze": ("MetaMaze-misc", 32.4, 9.5e9, False),
    "breakout-minatar": ("Breakout-MinAtar", 6.5, 2.0e9, False),
    "asterix-minatar": ("Asterix-MinAtar", math.nan, math.nan, False),
    "freeway-minatar": ("Freeway-MinAtar", math.nan, math.nan, False),
    "space-invaders-minatar": ("SpaceInvaders-MinAtar", math.nan, math.nan, False),
    "seaquest-minatar": ("Seaquest-MinAtar", math.nan, math.nan, False),
}


def eval_curves(run_dir: Path) -> dict[int, list[dict]]:
    """Per seed, the metrics rows that carry a test return, in generation order."""
    curves: dict[int, list[dict]] = {}
    for row in load_metrics(run_dir):
        if "eval_return" in row:
            curves.setdefault(int(row.get("seed", 0)), []).append(row)
    return curves


def median_reach(curves: dict[int, list[dict]], target: float) -> dict | None:
    """Env steps and wall at which the median seed first reached ``target``, and how many
    seeds reached it at all. A seed that never reaches it counts as never (so the median is
    ``None`` when fewer than half of the seeds got there)."""
    if math.isnan(target):
        return None
    hits = [next((r for r in rows if r["eval_return"] >= target - 1e-6), None)
            for rows in curves.values()]  # fmt: skip
    reached = sorted((h for h in hits if h is not None), key=lambda r: r["env_steps"])
    median = None
    middle = (len(hits) - 1) // 2  # the lower median: a seed that did reach, or none
    if middle < len(reached):
        median = reached[middle]
    return {
        "seeds_reaching": len(reached),
        "steps": None if median is None else median["env_steps"],
        "wall_s": None if median is None else median["wall_s"],
    }


def run_preset(name: str, seeds: int, out: Path, seed: int = 0) -> dict:
    clear_engine_cache()
    run_dir = out / name
    start = time.perf_counter()
    evolve(name, seed=seed, seeds=seeds, out=run_dir, overwrite=True)
    wall = time.perf_counter() - start
    summary = summarize(name, run_dir)
    summary["total_wall_s"] = wall
    (run_dir / "suite.json").write_text(json.dumps(summary, indent=1))
    return summary


def summarize(name: str, run_dir: Path) -> dict:
    env_id, target, blines_steps, _ = BLINES[name]
    cell = read_cell(run_dir)  # each seed's final test return and verdict, as the report reads
    finals = list(cell.returns)
    curves = eval_curves(run_dir)
    last = [rows[-1] for rows in curves.values()]
    solved = None if cell.solved is None else success(cell.solved)
    return {
        "preset": name,
        "env": env_id,
        "seed_ids": list(cell.seed_ids),
        "solved": solved,
        "finals": finals,
        "iqm": task_iqm(finals, REPS, 0),
        "env_steps": max(r["env_steps"] for r in last),
        "wall_s": max(r["wall_s"] for r in last),
        "to_blines": median_reach(curves, target),
        "blines_return": target,
        "blines_steps": blines_steps,
    }


def _steps(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.2f} M"


def table(rows: list[dict]) -> str:
    lines = [
        "| env | solved (Wilson 95 %) | IQM final test return [95 %] | worst / median seed "
        "| steps to blines return, median seed | wall to it | seeds reaching it "
        "| ≤ ¼ blines steps | blines final | blines steps | env steps a seed / wall, all seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reach, quarter = r["to_blines"], "–"
        steps = reach["steps"] if reach else None
        if steps is not None and not math.isnan(r["blines_steps"]):
            quarter = "yes" if steps <= r["blines_steps"] / 4 else "no"
        elif reach is not None:
            quarter = "not reached"
        wall_to = "–" if steps is None else f"{reach['wall_s']:.0f} s"
        reaching = "–" if reach is None else f"{reach['seeds_reaching']} of {len(r['finals'])}"
        blines = "–" if math.isnan(r["blines_return"]) else f"{r['blines_return']:g}"
        solved = "–"
        if r["solved"] is not None:
            low, high = r["solved"]["success_interval"]
            solved = f"{r['solved']['successes']} of {len(r['finals'])} ({low:.2f}-{high:.2f})"
        iqm = r["iqm"]
        finals = sorted(r["finals"])
        lines.append(
            f"| {r['env']} | {solved} | {iqm['value']:.2f} [{iqm['low']:.2f}, {iqm['high']:.2f}] "
            f"| {finals[0]:.2f} / {statistics.median(finals):.2f} "
            f"| {_steps(steps)} | {wall_to} | {reaching} | {quarter} | {blines} "
            f"| {_steps(r['blines_steps'])} | {_steps(r['env_steps'])} / {r['wall_s']:.0f} s |"
        )
    return "\n".join(lines)


def figure(names: list[str], out: Path, path: Path) -> Path:
    """One panel per env: each seed's test-return curve against env steps, the blines point."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    cols = 4
    rows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(4 * cols, 3 * rows), layout="constrained")
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        env_id, target, blines_steps, _ = BLINES[name]
        for seed, curve in sorted(eval_curves(out / name).items()):
            xs = [row["env_steps"] for row in curve]
            ax.plot(xs, [row["eval_return"] for row in curve], lw=1, label=f"seed {seed}")
        if not math.isnan(target):
            ax.axhline(target, color="0.4", ls=":", lw=1)
            ax.plot([blines_steps], [target], "*", color="#c0392b", ms=10, label="blines")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # unlabelled minor ticks: no overlap
        ax.set_title(env_id, fontsize=9)
        ax.set_xlabel("env steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", useOffset=False)  # a flat curve reads 1.1, not 1e-8 + 1.1
        low, high = ax.get_ylim()
        if high - low < 1e-3 * max(1.0, abs(high)):  # curves on the blines line: show a scale
            middle = (low + high) / 2
            ax.set_ylim(middle - 0.5, middle + 0.5)
        if i == 0:  # one entry a seed while that fits; else the blines marker alone
            handles, labels = ax.get_legend_handles_labels()
            if len(labels) > 5:
                handles = [h for h, label in zip(handles, labels, strict=True) if label == "blines"]
                labels = ["blines (one line a seed)"] * len(handles)
            ax.legend(handles, labels, fontsize=7)
    fig.savefig(path, dpi=90)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("presets", nargs="*", default=list(BLINES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="the first seed (report on >= 1000)")
    parser.add_argument("--out", type=Path, default=Path("runs/suite"))
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    unknown = [name for name in args.presets if name not in BLINES]
    if unknown:
        parser.error(f"not a suite preset: {', '.join(unknown)}; choose from {', '.join(BLINES)}")
    rows = []
    for name in args.presets:
        if args.plot_only:
            if not (args.out / name).exists():
                continue
            rows.append(summarize(name, args.out / name))
        else:
            rows.append(run_preset(name, args.seeds, args.out, args.seed))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    done = [r["preset"] for r in rows]
    print(f"wrote {figure(done, args.out, args.out / 'suite.png')}")


if __name__ == "__main__":
    main()
