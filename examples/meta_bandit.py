"""Meta-RL bandit: an evolved LSTM's expected regret against the Bayes-optimal figures.

    PYTHONPATH=. python examples/meta_bandit.py            # docs/meta.md, bandit-meta
    PYTHONPATH=. python examples/meta_bandit.py --tiny     # seconds: a smoke test for CI

BernoulliBandit-misc: two arms with odds p and 1 - p (shuffled per episode), 100 pulls, p drawn
per episode during training. Expected regret at p is ``100 max(p, 1 - p)`` minus the mean
return, over many held-out episodes. The LSTM and a blind MLP of about the same parameter
count (which sees gymnax's observation: last reward, last action, time) are evolved with the
same budget, 3 seeds each. Writes ``results.json`` and ``table.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from esjax._src.analysis.meta import mean_ci, seed_means
from esjax._src.run.training import evolve

REPO = Path(__file__).resolve().parents[1]
SPLITS = {"p010": 0.1, "p025": 0.25, "p040": 0.4}
BAYES = {"p010": 0.625, "p025": 1.00, "p040": 2.31}
MEMORYLESS = {"p010": 8.3, "p025": 12.6, "p040": 8.0}
VARIANTS = {
    "lstm": [],
    "mlp_blind": ["policy.kind=mlp", "policy.hidden=[64, 64]"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "meta-bandit")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--popsize", type=int, default=256)
    parser.add_argument("--generations", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=4096, help="test episodes per seed")
    parser.add_argument("--only", nargs="*", default=None, help="a subset of the variants")
    parser.add_argument("--eval-only", action="store_true", help="re-test runs in --out")
    parser.add_argument("--tiny", action="store_true", help="popsize 16, 3 generations")
    args = parser.parse_args()

    overrides: list[str] = []
    if args.tiny:
        args.popsize, args.generations, args.episodes, args.seeds = 16, 3, 16, 2
        overrides = ["evaluation.every=1", "evaluation.episodes=4"]
    chosen = {k: v for k, v in VARIANTS.items() if not args.only or k in args.only}
    if args.eval_only:
        chosen = {k: v for k, v in chosen.items() if (args.out / k).is_dir()}

    results: dict = {"runs": {}}
    previous = args.out / "results.json"
    if previous.exists():
        results = json.loads(previous.read_text())
    for name, extra in chosen.items():
        run_dir = args.out / name
        record = results["runs"].setdefault(name, {})
        if not args.eval_only:
            start = time.perf_counter()
            evolve(
                REPO / "tasks" / "bandit-meta.toml",
                popsize=args.popsize,
                generations=args.generations,
                rollouts=4 if args.tiny else None,
                seeds=args.seeds,
                out=run_dir,
                overwrite=True,
                overrides=[*overrides, *extra],
            )
            record["wall_s"] = time.perf_counter() - start
            record["budget"] = f"popsize {args.popsize}, {args.generations} generations"
        for split, p in SPLITS.items():
            means = seed_means(run_dir, args.episodes, split)
            record[split] = [100 * max(p, 1 - p) - m for m in means]  # regret per seed
            if name == "lstm":
                lesioned = seed_means(run_dir, args.episodes, split, lesion=True)
                record[f"{split}_lesion"] = [100 * max(p, 1 - p) - m for m in lesioned]
        print(name, record, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(results, indent=1))
    table = regret_table(results)
    (args.out / "table.md").write_text(table)
    print(table)


def regret_table(results: dict) -> str:
    """Markdown: expected regret (mean ± 95% CI over seeds) at each p, with reference rows."""
    lines = [
        "| policy | p = 0.1 | p = 0.25 | p = 0.4 | wall |",
        "|---|---|---|---|---|",
        "| Bayes-optimal (exact) | " + " | ".join(f"{BAYES[s]}" for s in SPLITS) + " | |",
        "| target (1.5 × Bayes) | " + " | ".join(f"{1.5 * BAYES[s]:.2f}" for s in SPLITS) + " | |",
        "| win-stay/lose-shift | " + " | ".join(f"{MEMORYLESS[s]}" for s in SPLITS) + " | |",
    ]
    rows = [(n, n, "") for n in results["runs"]]
    if "lstm" in results["runs"]:
        rows.insert(1, ("lstm, memory lesion", "lstm", "_lesion"))
    for label, name, suffix in rows:
        record = results["runs"][name]
        cells = []
        for split in SPLITS:
            values = record.get(split + suffix)
            if values is None:
                cells.append("")
                continue
            m, ci = mean_ci(values)
            cells.append(f"{m:.2f} ± {ci:.2f}")
        wall = record.get("wall_s") if not suffix else None
        wall_text = "" if wall is None else f"{wall:.0f} s"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {wall_text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
