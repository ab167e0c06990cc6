"""Meta-evolution on pendulum variants: LSTM against blind, oracle and frame-stacked MLPs.

    PYTHONPATH=. python benchmarks/meta_pendulum.py --task sign      # docs/meta.md, pendulum-sign
    PYTHONPATH=. python benchmarks/meta_pendulum.py --task meta      # pendulum-meta (mass, length)
    PYTHONPATH=. python benchmarks/meta_pendulum.py --task cadm      # the published CaDM split
    PYTHONPATH=. python benchmarks/meta_pendulum.py --tiny           # seconds: a smoke test for CI

Every policy is evolved with the same strategy and budget (3 seeds vmapped in one program),
then tested on each split over the same held-out episodes, as is the analytic controller of
``esjax._src.engine.baselines`` (told the true env parameters). Scores are normalised per split two
ways: 0 = zero torque, 1 = the analytic controller (paired by seed: the same episodes), and
1 = the oracle MLP (given the true env parameters, as trained here). The LSTM is also tested
with its state reset every step (memory lesion). Writes ``results.json``, ``table.md`` and
``scores.png`` into ``--out``; ``--eval-only`` re-tests existing runs there. More seeds later:
``--first-seed 3 --seeds 2 --out OTHER``, then ``--eval-only --merge OTHER`` joins them.
``--from-results FILE`` rebuilds the tables from stored per-seed results (docs/meta-results),
adding the analytic controller's returns on the same test episodes if the file lacks them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from esjax._src.analysis.meta import mean_ci, normalised, seed_means
from esjax._src.engine.baselines import reference_returns
from esjax._src.run.training import evolve

REPO = Path(__file__).resolve().parents[1]
MLP = ["policy.kind=mlp", "policy.hidden=[64, 64]", "policy.meta_inputs=[]"]  # ~4.5k params
TASKS = {
    "sign": ("pendulum-sign.toml", ["train", "extrapolate"], '["m"]'),
    "meta": ("pendulum-meta.toml", ["train", "interpolate", "extrapolate"], '["m", "l"]'),
    "cadm": ("pendulum-cadm.toml", ["train", "test-1", "test-2", "test-3", "test-4"], '["m", "l"]'),
}


GENERATIONS = {"sign": 500, "meta": 400, "cadm": 150}  # the budgets in docs/meta.md
ANALYTIC = "analytic"  # the reference record: not trained, the same episodes as every seed
LABELS = {
    ANALYTIC: "analytic controller (knows the params)",
    "mlp_oracle": "oracle MLP (knows the params)",
    "lstm": "LSTM",
    "mlp_blind": "blind MLP",
    "mlp_stack4": "frame-stacked MLP (4 frames)",
}


def variants(params: str) -> dict[str, list[str]]:
    return {
        "lstm": ["policy.hidden=[32]"],  # the tables' LSTM (pendulum-sign's preset has 12 cells)
        "mlp_blind": MLP,
        "mlp_oracle": [*MLP, f"policy.param_inputs={params}"],
        "mlp_stack4": [*MLP, "policy.frame_stack=4"],
    }


def parse_args() -> argparse.Namespace:
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
    parser.add_argument(
        "--from-results",
        type=Path,
        default=None,
        help="print the tables of a stored results JSON (adds the analytic reference)",
    )
    args = parser.parse_args()
    if args.generations is None:
        args.generations = GENERATIONS[args.task]
    args.out = args.out or REPO / "runs" / f"meta-{args.task}"
    if args.tiny:
        args.popsize, args.generations, args.episodes, args.seeds = 16, 3, 8, 2
    return args


def chosen_variants(args: argparse.Namespace, params: str) -> dict[str, list[str]]:
    """The variants this call trains (or, with ``--eval-only``, re-tests), with their overrides."""
    chosen = variants(params)
    if args.tiny:
        chosen = {k: v for k, v in chosen.items() if k != "mlp_stack4"}
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only}
    if args.eval_only:
        chosen = {k: v for k, v in chosen.items() if (args.out / k).is_dir()}
    return chosen


def common_overrides(args: argparse.Namespace) -> list[str]:
    # The tables were measured on raw observations with a plain LSTM; pendulum-sign's preset
    # now scales them and mirrors its policy.
    overrides = ["normalize_obs=false", "policy.mirror=[]"]
    if args.tiny:
        overrides += ["episode_length=20", "evaluation.every=1", "evaluation.episodes=4"]
    return overrides


def train_and_test(
    args: argparse.Namespace, preset: str, splits: list[str], name: str, extra: list[str]
) -> dict:
    """One variant's per-seed test returns on every split (trained first unless --eval-only)."""
    run_dir = args.out / name
    record: dict = {}
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
            overrides=[*common_overrides(args), *extra],
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
    return record


def reference_record(run_dir: Path, seeds: list[int], splits: list[str], episodes: int) -> dict:
    """The analytic controller and the zero action on the test episodes of every seed of a run."""
    reference: dict = {"budget": ANALYTIC, "seeds": seeds, "episodes": episodes}
    for split in splits:
        reference[split] = seed_means(run_dir, episodes, split, baseline="analytic")
        reference[f"{split}_zero"] = seed_means(run_dir, episodes, split, baseline="zero")
    return reference


def merged_results(args: argparse.Namespace, results: dict) -> dict:
    """``results`` with the per-seed results of every ``--merge`` folder joined in."""
    for other in args.merge:
        if not (other / "results.json").is_file():
            raise SystemExit(f"--merge {other}: no results.json there")
        try:
            results = merge_seeds(results, json.loads((other / "results.json").read_text()))
        except ValueError as err:
            raise SystemExit(f"--merge {other}: {err}") from None
    if args.merge:
        (args.out / "merged.json").write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    args = parse_args()
    preset, splits, params = TASKS[args.task]
    if args.from_results is not None:
        tables_from_results(args.from_results, preset, args.episodes)
        return
    chosen = chosen_variants(args, params)
    results: dict = {"task": preset, "splits": splits, "runs": {}}
    previous = args.out / "results.json"
    if previous.exists():
        results["runs"] = json.loads(previous.read_text())["runs"]
    for name, extra in chosen.items():
        record = results["runs"].setdefault(name, {})
        record.update(train_and_test(args, preset, splits, name, extra))
        print(name, dict(record), flush=True)
    if chosen:
        first = next(iter(chosen))
        seeds = _seed_ids(results["runs"][first])
        reference = results["runs"].setdefault(ANALYTIC, {})
        reference.update(reference_record(args.out / first, seeds, splits, args.episodes))
        print(ANALYTIC, reference, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(results, indent=1))
    results = merged_results(args, results)
    table = all_tables(results)
    (args.out / "table.md").write_text(table)
    print(table)
    plot_scores(results, args.out / "scores.png")


def tables_from_results(path: Path, preset: str, episodes: int) -> None:
    """The tables of a stored results file; the analytic reference is added if missing.

    A run made by this script with seed ``s`` is tested on the episodes of
    ``seed_keys(s)["test"]``, so the controller is run on exactly those, from the preset.
    """
    results = json.loads(path.read_text())
    if results.get("task") != preset:
        raise SystemExit(f"{path}: results of {results.get('task')!r}, not {preset!r}")
    if ANALYTIC not in results["runs"]:
        results["runs"][ANALYTIC] = analytic_record(results, preset, episodes)
        path.write_text(json.dumps(results, indent=1) + "\n")
    print(all_tables(results))


def analytic_record(results: dict, preset: str, episodes: int) -> dict:
    """Per seed: the analytic controller's and the zero action's mean test return per split."""
    from esjax._src.engine.generation import seed_keys
    from esjax._src.engine.tasks import make_rollout
    from esjax._src.specs import presets

    _, task, _, _ = presets.load_task(preset.removesuffix(".toml"))
    seeds = _seed_ids(next(iter(results["runs"].values())))
    record: dict = {"budget": ANALYTIC, "seeds": seeds, "episodes": episodes}
    for split in results["splits"]:
        rollout = make_rollout(task, split=split)
        for name, suffix in ((ANALYTIC, ""), ("zero", "_zero")):
            record[split + suffix] = [
                float(reference_returns(rollout, seed_keys(s)["test"], episodes, name).mean())
                for s in seeds
            ]
    return record


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


def all_tables(results: dict) -> str:
    """Every table docs/meta.md shows for one task, from its per-seed results.

    The table of test-set means only where several test sets make one score (the CaDM split);
    a single held-out split is read off the score table directly.
    """
    tables = [score_table(results), paired_table(results)]
    if len(held_out_test_splits(results)) > 1:
        tables.insert(0, mean_of_test_sets_table(results))
    return "\n".join(tables)


def _table_rows(runs: dict) -> list[tuple[str, str, str]]:
    """``(label, run name, key suffix)`` per row: the analytic controller first, the LSTM's
    memory lesion after the LSTM, the zero action last."""
    rows = [(LABELS.get(n, n), n, "") for n in runs if n != ANALYTIC]
    if ANALYTIC in runs:
        rows.insert(0, (LABELS[ANALYTIC], ANALYTIC, ""))
    if "lstm" in runs:
        at = [name for _, name, _ in rows].index("lstm") + 1
        rows.insert(at, ("LSTM, memory lesion", "lstm", "_lesion"))
    floor = ANALYTIC if ANALYTIC in runs else "mlp_oracle"
    if floor in runs:
        rows.append(("zero torque", floor, "_zero"))
    return rows


def held_out_test_splits(results: dict) -> list[str]:
    """The held-out sets that are averaged into one score (the CaDM split's test-1 .. test-4)."""
    return [s for s in results["splits"] if s.startswith("test")]


def mean_of_test_sets_table(results: dict) -> str:
    """Markdown: mean test return per split, the mean of the test sets, and that mean per seed.

    A seed's mean of the test sets weighs each set equally (the published protocol's score).
    """
    runs, splits, tests = results["runs"], results["splits"], held_out_test_splits(results)
    head = " | ".join(splits)
    lines = [
        f"| policy | {head} | mean of the {len(tests)} test sets | per seed | wall |",
        "|" + "---|" * (len(splits) + 4),
    ]
    for label, name, suffix in _table_rows(runs):
        record = runs[name]
        if any(record.get(split + suffix) is None for split in splits):
            continue
        cells = [f"{m:.0f} ± {ci:.0f}" for m, ci in (mean_ci(record[s + suffix]) for s in splits)]
        per_test = (record[t + suffix] for t in tests)
        per_seed = [sum(v) / len(tests) for v in zip(*per_test, strict=True)]
        m, ci = mean_ci(per_seed)
        cells += [f"{m:.0f} ± {ci:.0f}", " / ".join(f"{v:.0f}" for v in per_seed)]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_row_wall(runs, name, suffix)} |")
    return "\n".join(lines) + "\n"


def score_table(results: dict) -> str:
    """Markdown: mean test return and both normalised scores (mean ± 95% CI over seeds).

    ``vs analytic``: per seed, against the analytic controller and the zero action on that
    seed's episodes. ``vs oracle``: against the seed means of the oracle MLP and of the zero
    action, as trained here (so an oracle that extrapolates badly inflates it).
    """
    runs, splits = results["runs"], results["splits"]
    reference, oracle = runs.get(ANALYTIC), runs.get("mlp_oracle")
    if reference is None and oracle is None:
        return "(no analytic or oracle results: cannot normalise)\n"
    cells_per_split = ("return", "score vs analytic", "score vs oracle")
    header = " | ".join(f"{s} {c}" for s in splits for c in cells_per_split)
    lines = [f"| policy | {header} | wall |", "|" + "---|" * (3 * len(splits) + 2)]
    for label, name, suffix in _table_rows(runs):
        cells = []
        for split in splits:
            values = runs[name].get(split + suffix)
            if values is None:
                cells += ["", "", ""]
                continue
            r, r_ci = mean_ci(values)
            cells.append(f"{r:.0f} ± {r_ci:.0f}")
            cells.append(_score(vs_analytic(values, results, split)))
            cells.append(_score(vs_oracle(values, results, split)))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_row_wall(runs, name, suffix)} |")
    return "\n".join(lines) + "\n"


def vs_analytic(values: list[float], results: dict, split: str) -> list[float] | None:
    """Per-seed scores 0 = zero torque, 1 = the analytic controller on the same episodes."""
    reference = results["runs"].get(ANALYTIC)
    if reference is None or split not in reference or len(reference[split]) != len(values):
        return None
    pairs = zip(values, reference[split + "_zero"], reference[split], strict=True)
    return [normalised(v, zero, top) for v, zero, top in pairs]


def vs_oracle(values: list[float], results: dict, split: str) -> list[float] | None:
    """Per-seed scores 0 = zero torque, 1 = the trained oracle MLP (both seed means)."""
    oracle = results["runs"].get("mlp_oracle")
    if oracle is None or split not in oracle:
        return None
    zero, top = mean_ci(oracle[split + "_zero"])[0], mean_ci(oracle[split])[0]
    return [normalised(v, zero, top) for v in values]


def _score(scores: list[float] | None) -> str:
    if scores is None:
        return ""
    m, ci = mean_ci(scores)
    return f"{m:.2f} ± {ci:.2f}"


def paired_table(results: dict) -> str:
    """Markdown: per-seed paired differences in return (same seed index, same episodes)."""
    runs, splits = results["runs"], results["splits"]
    pairs = [
        (ANALYTIC, "mlp_blind", "analytic − blind MLP"),
        ("mlp_oracle", "mlp_blind", "oracle − blind MLP (the information gap)"),
        ("lstm", "mlp_blind", "LSTM − blind MLP (what the LSTM closes)"),
        ("mlp_oracle", "lstm", "oracle − LSTM (what it leaves)"),
        (ANALYTIC, "lstm", "analytic − LSTM"),
        ("mlp_stack4", "mlp_blind", "frame-stacked − blind MLP"),
    ]
    lines = ["| paired difference | " + " | ".join(splits) + " |", "|" + "---|" * (len(splits) + 1)]
    for first, second, label in pairs:
        if first not in runs or second not in runs:
            continue
        cells = []
        for split in splits:
            a, b = runs[first].get(split), runs[second].get(split)
            if a is None or b is None or len(a) != len(b):
                cells.append("")
                continue
            m, ci = mean_ci([x - y for x, y in zip(a, b, strict=True)])
            cells.append(f"{m:+.0f} ± {ci:.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def _row_wall(runs: dict, name: str, suffix: str) -> str:
    """A trained run's training wall; empty for the analytic controller and derived rows."""
    seconds = runs[name].get("wall_s") if not suffix and name != ANALYTIC else None
    return "" if seconds is None else f"{seconds:.0f} s"


def plot_scores(results: dict, path: Path) -> None:
    """Bars of the headline score (vs the analytic controller; vs the oracle without one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, splits = results["runs"], results["splits"]
    headline = vs_analytic if ANALYTIC in runs else vs_oracle
    if ANALYTIC not in runs and "mlp_oracle" not in runs:
        return
    bars = [(LABELS.get(n, n), n, "") for n in runs if n != ANALYTIC]
    if "lstm" in runs:
        bars.append(("LSTM, memory lesion", "lstm", "_lesion"))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(bars)
    for i, (label, name, suffix) in enumerate(bars):
        xs, ys, errs = [], [], []
        for j, split in enumerate(splits):
            values = runs[name].get(split + suffix)
            scores = None if values is None else headline(values, results, split)
            if scores is None:
                continue
            m, ci = mean_ci(scores)
            xs.append(j + i * width)
            ys.append(m)
            errs.append(ci)
        ax.bar(xs, ys, width, yerr=errs, label=label, capsize=2)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(splits))], splits)
    top = "analytic controller" if headline is vs_analytic else "oracle MLP"
    ax.set_ylabel(f"score (0 zero torque, 1 {top})", fontsize=8)
    ax.axhline(0.0, color="k", lw=0.5)
    ax.axhline(1.0, color="k", lw=0.5, ls=":")
    ax.set_title(results["task"].removesuffix(".toml") + ": mean ± 95% CI over seeds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
