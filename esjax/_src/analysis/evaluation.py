"""Testing a finished run the ways ``esjax eval`` does, as records a script can keep.

Each function returns a JSON-ready dict (what ``esjax eval --json`` prints) and leaves the
display to its caller: the saved policy's test return; the policy beside the zero action and a
reference controller on the same episodes, with the normalised score; a grid of fixed env
parameters, written as ``grid.json`` and a heatmap. A sweep's table rows are read here too, so
the command line only lays them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esjax._src.analysis import meta
from esjax._src.analysis.plotting import grid_quantity, plot_grid
from esjax._src.engine.baselines import baseline_rollout
from esjax._src.run.runs import GRID_JSON, write_json
from esjax._src.run.saved import baseline_returns, evaluate_run, make_test_rollout
from esjax._src.specs.config import ConfigError, baseline_label


def plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON-ready Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def policy_record(
    run: str | Path, episodes: int | None, split: str | None, seed: int, which: str
) -> dict[str, Any]:
    """The saved policy's test return on fresh episodes: episodes, mean, std, min, max, returns."""
    result = evaluate_run(run, episodes=episodes, split=split, seed=seed, which=which)
    return {
        "run": str(run),
        "which": which,
        "split": split or "train",
        **{k: plain(v) for k, v in result.items()},
    }


def baseline_record(
    run: str | Path, episodes: int | None, split: str | None, seed: int, which: str, baseline: str
) -> dict[str, Any]:
    """The policy, the zero action and ``baseline`` on the same test episodes.

    ``returns`` maps each of them to its mean, std, min and max. With the analytic baseline
    (a controller told the true env parameters), ``score_vs_analytic`` places the policy on a
    scale where the zero action is 0 and the analytic controller 1; with the random one
    (uniformly random actions), ``margin_over_random`` is the policy's mean less its mean.
    A task the baseline has no controller for fails before the policy's episodes are played.
    ``episodes`` None: the task's ``test_episodes``.
    """
    config, rollout = make_test_rollout(run, split)
    episodes = config.task.test_episodes if episodes is None else episodes
    if baseline == "analytic":
        baseline_rollout(rollout, baseline)  # no controller for this env: fail first
    policy = evaluate_run(run, episodes, split, seed, which, built=(config, rollout))
    rows = {f"policy ({which})": policy["returns"]}
    for name in dict.fromkeys(("zero", baseline)):
        returns = baseline_returns(run, episodes, split, seed, name, built=(config, rollout))
        rows[baseline_label(name)] = [float(r) for r in returns]
    summary = {
        name: {
            "mean": float(np.mean(r)),
            "std": float(np.std(r)),
            "min": float(np.min(r)),
            "max": float(np.max(r)),
        }
        for name, r in rows.items()
    }
    record = {
        "run": str(run),
        "which": which,
        "split": split or "train",
        "seed": seed,
        "episodes": episodes,
        "returns": summary,
    }
    if baseline == "analytic":
        zero, top = summary[baseline_label("zero")]["mean"], summary["analytic"]["mean"]
        # No score where the analytic controller earns what zero actions do (as in --grid).
        score = meta.normalised(policy["mean"], zero, top) if top != zero else None
        record["score_vs_analytic"] = score
    if baseline == "random":
        record["margin_over_random"] = policy["mean"] - summary["random"]["mean"]
    return record


def grid_record(
    run: str | Path,
    specs: Sequence[str] = (),
    *,
    episodes: int | None = None,
    seed: int = 0,
    which: str = "final",
    out: str | Path | None = None,
    overwrite: bool = False,
    split: str | None = None,
    baseline: str | None = None,
) -> tuple[dict[str, Any], Path, Path]:
    """Test on every cell of a grid of env parameters; write the JSON and its heatmap.

    ``specs`` are ``--grid-axis`` specs (default: the task's ``[grid]`` table); ``episodes`` per
    cell default to the task's ``test_episodes``; ``out`` is the
    JSON (default ``RUN/grid.json``; the heatmap goes next to it as ``.png``). ``baseline``
    adds the references' means and the policy's score per cell, and the heatmap shows the
    score. Every check that needs no compile comes before the compile, so a mistake costs no
    waiting. Returns ``(record, json path, heatmap path)``.
    """
    if split is not None:
        raise ConfigError("--split and --grid exclude each other: a grid pins the parameters")
    json_path = Path(out) if out is not None else Path(run) / GRID_JSON
    if json_path.suffix != ".json":
        raise ConfigError(f"--out {json_path}: expected a .json file (the heatmap goes next to it)")
    png_path = json_path.with_suffix(".png")
    existing = [str(p) for p in (json_path, png_path) if p.exists()]
    if existing and not overwrite:
        raise ConfigError(f"{existing[0]} exists; pass --overwrite to replace it, or --out")
    axes = meta.grid_axes(run, specs)
    record = meta.evaluate_grid(
        run, axes, episodes=episodes, seed=seed, which=which, baseline=baseline
    )
    record["figure"] = png_path.name
    record["figure_shows"] = grid_quantity(record)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_json(json_path, record, through_special=out is not None)
    plot_grid(record, png_path)
    return record, json_path, png_path


def interval(stats: dict[str, Any]) -> tuple[float | None, float | None]:
    """``(mean, half width of its interval)`` of a sweep statistic; no interval: ``None``."""
    if stats.get("low") is None:
        return stats.get("mean"), None
    return stats["mean"], (stats["high"] - stats["low"]) / 2


def sweep_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per configuration of a sweep record (``sweep.json``), for a table.

    ``final`` and ``best`` are :func:`interval` pairs of the test returns over seeds;
    ``solved`` is ``(seeds solved, seeds judged)`` or None when no seed was judged;
    ``env_steps_to_threshold`` is ``(mean over the seeds that reached it, seeds that did,
    seeds)``, or None when none did: a mean over 1 of 8 seeds must say so.
    """
    rows = []
    for entry in record["configurations"]:
        verdicts = entry["solved_per_seed"]
        steps = entry["env_steps_to_threshold"]
        reached = [s for s in steps["per_seed"] if s is not None]
        rows.append(
            {
                "configuration": ", ".join(entry["overrides"]),
                "final": interval(entry["final_test_return"]),
                "best": interval(entry["best_test_return"]),
                "solved": (entry["solved_seeds"], len(verdicts)) if verdicts else None,
                "env_steps_to_threshold": None
                if steps["mean_over_reached"] is None
                else (steps["mean_over_reached"], len(reached), len(steps["per_seed"])),
            }
        )
    return rows
