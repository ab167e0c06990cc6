"""Meta-evolution on pendulum variants: LSTM against blind, oracle and frame-stacked MLPs.

    PYTHONPATH=. python examples/meta_pendulum.py --task sign      # docs/meta.md, pendulum-sign
    PYTHONPATH=. python examples/meta_pendulum.py --task meta      # pendulum-meta (mass, length)
    PYTHONPATH=. python examples/meta_pendulum.py --task cadm      # the published CaDM split
    PYTHONPATH=. python examples/meta_pendulum.py --tiny           # seconds: a smoke test for CI

Every policy is evolved with the same strategy and budget (3 seeds vmapped in one program),
then tested on each split over the same held-out episodes. Scores are normalised per split:
0 = zero torque, 1 = the oracle MLP (given the true env parameters). The LSTM is also tested
with its state reset every step (memory lesion). Writes ``results.json``, ``table.md`` and
``scores.png`` into ``--out``; ``--eval-only`` re-tests existing runs there. More seeds later:
``--first-seed 3 --seeds 2 --out OTHER``, then ``--eval-only --merge OTHER`` joins them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from esjax.evolve import evolve
from esjax.meta import mean_ci, normalised, seed_means

REPO = Path(__file__).resolve().parents[1]
MLP = ["policy.kind=mlp", "policy.hidden=[64, 64]", "policy.meta_inputs=[]"]  # ~4.5k params
TASKS = {
    "sign": ("pendulum-sign.toml", ["train", "extrapolate"], '["m"]'),
    "meta": ("pendulum-meta.toml", ["train", "interpolate", "extrapolate"], '["m", "l"]'),
    "cadm": ("pendulum-cadm.toml", ["train", "test-1", "test-2", "test-3", "test-4"], '["m", "l"]'),
}


GENERATIONS = {"sign": 500, "meta": 400, "cadm": 150}  # the budgets in docs/meta.md


def variants(params: str) -> dict[str, list[str]]:
    return {
        "lstm": [],
        "mlp_blind": MLP,
        "mlp_oracle": [*MLP, f"policy.param_inputs={params}"],
        "mlp_stack4": [*MLP, "policy.frame_stack=4"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="sign")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run FIRST, FIRST+1, ...")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="other --out folders (other seeds) whose per-seed results join this table",
    )
    parser.add_argument("--popsize", type=int, default=256)
    parser.add_argument("--generations", type=int, default=None, help="default: docs/meta.md's")
    parser.add_argument("--episodes", type=int, default=256, help="test episodes per seed")
    parser.add_argument("--only", nargs="*", default=None, help="a subset of the variants")
    parser.add_argument("--eval-only", action="store_true", help="re-test runs in --out")
    parser.add_argument("--tiny", action="store_true", help="popsize 16, 3 generations")
    args = parser.parse_args()

    preset, splits, params = TASKS[args.task]
    if args.generations is None:
        args.generations = GENERATIONS[args.task]
    out = args.out or REPO / "runs" / f"meta-{args.task}"
    overrides: list[str] = []
    if args.tiny:
        args.popsize, args.generations, args.episodes, args.seeds = 16, 3, 8, 2
        overrides = ["episode_length=20", "evaluation.every=1", "evaluation.episodes=4"]
    chosen = variants(params)
    if args.tiny:
        chosen = {k: v for k, v in chosen.items() if k != "mlp_stack4"}
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only}
    if args.eval_only:
        chosen = {k: v for k, v in chosen.items() if (out / k).is_dir()}

    results: dict = {"task": preset, "splits": splits, "runs": {}}
    previous = out / "results.json"
    if previous.exists():
        results["runs"] = json.loads(previous.read_text())["runs"]
    for name, extra in chosen.items():
        run_dir = out / name
        record = results["runs"].setdefault(name, {})
        if not args.eval_only:
            start = time.perf_counter()
            evolve(
                REPO / "tasks" / preset,
                popsize=args.popsize,
                generations=args.generations,
                rollouts=2 if args.tiny else None,
                seed=args.first_seed,
                seeds=args.seeds,
                out=run_dir,
                overwrite=True,
                overrides=[*overrides, *extra],
            )
            record["wall_s"] = time.perf_counter() - start
            record["budget"] = f"popsize {args.popsize}, {args.generations} generations"
            record["seeds"] = list(range(args.first_seed, args.first_seed + args.seeds))
        for split in splits:
            record[split] = seed_means(run_dir, args.episodes, split)
            if name == "lstm":
                record[f"{split}_lesion"] = seed_means(run_dir, args.episodes, split, lesion=True)
            if name == "mlp_oracle":
                record[f"{split}_zero"] = seed_means(run_dir, args.episodes, split, zero=True)
        print(name, {k: v for k, v in record.items()}, flush=True)

    out.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(results, indent=1))
    for other in args.merge:
        if not (other / "results.json").is_file():
            parser.error(f"--merge {other}: no results.json there")
        try:
            results = merge_seeds(results, json.loads((other / "results.json").read_text()))
        except ValueError as err:
            parser.error(f"--merge {other}: {err}")
    if args.merge:
        (out / "merged.json").write_text(json.dumps(results, indent=1))
    table = score_table(results)
    (out / "table.md").write_text(table)
    print(table)
    plot_scores(results, out / "scores.png")


def merge_seeds(results: dict, other: dict) -> dict:
    """Runs present in both, their per-seed lists joined (other seeds of the same budget).

    A run of another budget, and a per-seed list only one side has, are left out: every list
    of a merged run covers the same seeds. The same task and disjoint seeds are required
    (records without ``seeds`` are seeds ``0 .. n-1``).
    """
    if other.get("task") != results["task"]:
        raise ValueError(f"task {other.get('task')!r}, not {results['task']!r}")
    merged = {"task": results["task"], "splits": results["splits"], "runs": {}}
    for name, record in results["runs"].items():
        extra = other["runs"].get(name)
        if extra is None or extra.get("budget") != record.get("budget"):
            continue
        seeds, more = _seed_ids(record), _seed_ids(extra)
        if set(seeds) & set(more):
            raise ValueError(f"{name}: seeds {sorted(set(seeds) & set(more))} are in both")
        joined = {k: v + extra[k] for k, v in record.items() if isinstance(v, list) and k in extra}
        joined.update(budget=record.get("budget"), seeds=seeds + more)
        joined["wall_s"] = record.get("wall_s", 0.0) + extra.get("wall_s", 0.0)
        merged["runs"][name] = joined
    return merged


def _seed_ids(record: dict) -> list[int]:
    count = len(next(v for k, v in record.items() if isinstance(v, list) and k != "seeds"))
    return list(record.get("seeds", range(count)))


def score_table(results: dict) -> str:
    """Markdown: mean test return and normalised score (mean ± 95% CI over seeds) per split."""
    runs, splits = results["runs"], results["splits"]
    if "mlp_oracle" not in runs or not all(s in runs["mlp_oracle"] for s in splits):
        return "(no oracle run: cannot normalise)\n"
    oracle = runs["mlp_oracle"]
    header = "| policy | " + " | ".join(f"{s} return | {s} score" for s in splits) + " | wall |"
    lines = [header, "|" + "---|" * (2 * len(splits) + 2)]
    rows = [(n, n, "") for n in runs]
    if "lstm" in runs:
        rows.insert(list(runs).index("lstm") + 1, ("lstm, memory lesion", "lstm", "_lesion"))
    rows.append(("zero torque", "mlp_oracle", "_zero"))
    for label, name, suffix in rows:
        cells = []
        for split in splits:
            values = runs[name].get(split + suffix)
            if values is None:
                cells += ["", ""]
                continue
            zero, top = mean_ci(oracle[split + "_zero"])[0], mean_ci(oracle[split])[0]
            r, r_ci = mean_ci(values)
            s, s_ci = mean_ci([normalised(v, zero, top) for v in values])
            cells += [f"{r:.0f} ± {r_ci:.0f}", f"{s:.2f} ± {s_ci:.2f}"]
        wall = runs[name].get("wall_s") if not suffix else None
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_wall(wall)} |")
    return "\n".join(lines) + "\n"


def _wall(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.0f} s"


def plot_scores(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, splits = results["runs"], results["splits"]
    if "mlp_oracle" not in runs:
        return
    oracle = runs["mlp_oracle"]
    bars = [(n, n, "") for n in runs]
    if "lstm" in runs:
        bars.append(("lstm lesion", "lstm", "_lesion"))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(bars)
    for i, (label, name, suffix) in enumerate(bars):
        xs, ys, errs = [], [], []
        for j, split in enumerate(splits):
            values = runs[name].get(split + suffix)
            if values is None:
                continue
            zero, top = mean_ci(oracle[split + "_zero"])[0], mean_ci(oracle[split])[0]
            m, ci = mean_ci([normalised(v, zero, top) for v in values])
            xs.append(j + i * width)
            ys.append(m)
            errs.append(ci)
        ax.bar(xs, ys, width, yerr=errs, label=label, capsize=2)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(splits))], splits)
    ax.set_ylabel("normalised score (0 zero torque, 1 oracle)")
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_title(results["task"].removesuffix(".toml") + ": mean ± 95% CI over seeds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
