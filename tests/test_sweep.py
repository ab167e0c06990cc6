"""Sweeps: each configuration equals the same configuration run alone; resume; sweep.json.

The reference for a configuration is ``esjax evolve --set ...`` in its own process; the
reference for the summary statistics is arithmetic written out here.
"""

from __future__ import annotations

import json
import math

import pytest
from test_cli import SMALL, assert_clean_error, esjax

from esjax import sweeps
from esjax.config import ConfigError

# The module-scoped fixture is built once: every test here runs on one xdist worker.
pytestmark = pytest.mark.xdist_group("sweep")

TINY = {
    "popsize": 8,
    "generations": 3,
    "rollouts": 1,
    "seeds": 2,
    "overrides": ["episode_length=16", "evaluation.every=1", "evaluation.episodes=4"],
    "test_episodes": 4,
}
VARY = ["strategy_settings.learning_rate=0.03,0.3"]


def rows_without_wall(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_s")
    return rows


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "sw"
    record = sweeps.sweep("pendulum", VARY, out=out, **TINY)
    return out, record


def test_each_configuration_equals_the_same_run_alone(finished, tmp_path):
    out, record = finished
    assert [c["overrides"] for c in record["configurations"]] == [
        ["strategy_settings.learning_rate=0.03"],
        ["strategy_settings.learning_rate=0.3"],
    ]
    alone = tmp_path / "alone"
    args = [
        *("evolve", "pendulum", "--popsize", "8", "--generations", "3", "--rollouts", "1"),
        *("--seeds", "2", "--out", alone),
        *(f"--set={o}" for o in TINY["overrides"]),
        "--set=strategy_settings.learning_rate=0.3",
    ]
    result = esjax(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    swept = out / record["configurations"][1]["run_dir"]
    assert rows_without_wall(swept) == rows_without_wall(alone)  # bit for bit
    for name in ("final_policy.msgpack", "best_policy.msgpack"):
        assert (swept / name).read_bytes() == (alone / name).read_bytes()
    # The other configuration ran in the same program; it equals its run alone too.
    from esjax.evolve import evolve

    first = tmp_path / "first"
    evolve("pendulum", popsize=8, generations=3, rollouts=1, seeds=2, out=first,
           overrides=[*TINY["overrides"], "strategy_settings.learning_rate=0.03"])  # fmt: skip
    assert rows_without_wall(out / record["configurations"][0]["run_dir"]) == rows_without_wall(
        first
    )
    # The two learning rates really differ (a sweep that ignored its values would pass above).
    assert rows_without_wall(out / record["configurations"][0]["run_dir"]) != rows_without_wall(
        swept
    )


def test_sweep_json_holds_test_returns_intervals_and_steps(finished):
    from esjax.evolve import evaluate_run

    out, record = finished
    assert json.loads((out / "sweep.json").read_text()) == json.loads(json.dumps(record))
    assert (out / "sweep.png").read_bytes().startswith(b"\x89PNG")
    entry = record["configurations"][0]
    run_dir = out / entry["run_dir"]
    for which in ("final", "best"):
        stats = entry[f"{which}_test_return"]
        expected = [evaluate_run(run_dir, 4, seed=s, which=which)["mean"] for s in range(2)]
        assert stats["per_seed"] == expected
        a, b = expected
        mean, sd = (a + b) / 2, abs(a - b) / math.sqrt(2)
        assert stats["mean"] == pytest.approx(mean)
        assert stats["high"] == pytest.approx(mean + 12.706 * sd / math.sqrt(2))
    assert len(entry["env_steps_to_solved"]["per_seed"]) == 2


def test_interrupted_sweep_resumes_to_the_same_results(finished, tmp_path):
    out, record = finished
    stopped = tmp_path / "stopped"
    calls = {"n": 0}

    def interrupt(row):
        calls["n"] += 1
        if row["run_dir"].endswith("learning_rate=0.3") and row["generation"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(sweeps.SweepInterrupted, match="--resume --out"):
        sweeps.sweep("pendulum", VARY, out=stopped, on_progress=interrupt, **TINY)
    # Both configurations ran as one program: both stopped, checkpointed at generation 2.
    for entry in record["configurations"]:
        run_dir = stopped / entry["run_dir"]
        assert not (run_dir / "summary.json").exists()
        assert max(row["generation"] for row in rows_without_wall(run_dir)) == 2
    resumed = sweeps.sweep(None, out=stopped, resume=True)
    for mine, reference in zip(resumed["configurations"], record["configurations"], strict=True):
        assert mine["final_test_return"] == reference["final_test_return"]
        assert mine["best_test_return"] == reference["best_test_return"]
        name = mine["run_dir"]
        assert rows_without_wall(stopped / name) == rows_without_wall(out / name)
        for policy in ("final_policy.msgpack", "best_policy.msgpack"):
            assert (stopped / name / policy).read_bytes() == (out / name / policy).read_bytes()
    first = stopped / record["configurations"][0]["run_dir"]
    finished_at = (first / "summary.json").stat().st_mtime_ns
    sweeps.sweep(None, out=stopped, resume=True)
    assert (first / "summary.json").stat().st_mtime_ns == finished_at  # not run again


def test_numeric_settings_share_a_program_and_shapes_do_not():
    from esjax.evolve import resolve_config

    grid = sweeps.configurations(
        [
            "strategy_settings.learning_rate=0.03,0.3",
            "policy.hidden=[8],[16]",
            "strategy_settings.std_init=0.05,0.2",
        ]
    )
    resolved = [
        resolve_config("pendulum", popsize=8, overrides=["episode_length=16", *c.overrides])
        for c in grid
    ]
    found = sweeps.programs(grid, resolved)
    hidden = [[grid[i].values["policy.hidden"] for i in members] for members, _ in found]
    assert hidden == [[[8]] * 4, [[16]] * 4]
    for _, engine in found:
        assert {"learning_rate", "std_init"} <= set(engine.hyper_names)
    # A setting that decides structure (here a Python branch on the L2 penalty) is not traced.
    assert "l2_penalty" not in found[0][1].hyper_names


def test_a_live_sweep_directory_is_refused(finished, tmp_path):
    import shutil

    from esjax.lifecycle import RunLock

    out, _ = finished
    copy = tmp_path / "live"
    shutil.copytree(out, copy)
    lock = RunLock.take(copy)  # as the sweep running in it holds it
    try:
        result = esjax("sweep", "--resume", "--out", copy, cwd=tmp_path)
    finally:
        lock.release()
    assert_clean_error(result, "in use by a running esjax sweep")


def test_configurations_cross_product_and_names():
    grid = sweeps.configurations(["policy.hidden=[8,8],[16]", "strategy_settings.lr_decay=1,0.99"])
    assert [c.overrides for c in grid] == [
        ("policy.hidden=[8,8]", "strategy_settings.lr_decay=1"),
        ("policy.hidden=[8,8]", "strategy_settings.lr_decay=0.99"),
        ("policy.hidden=[16]", "strategy_settings.lr_decay=1"),
        ("policy.hidden=[16]", "strategy_settings.lr_decay=0.99"),
    ]
    assert grid[0].values == {"policy.hidden": [8, 8], "strategy_settings.lr_decay": 1}
    assert grid[3].name == "3-hidden=_16_-lr_decay=0.99"
    for bad in (["lr"], ["a.b=1,,2"], ["a=1,1"], []):
        with pytest.raises(ConfigError):
            sweeps.configurations(bad)


def test_interval_and_steps_to_threshold():
    stats = sweeps.interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)
    assert stats == pytest.approx({"mean": 2.0, "low": 2.0 - half, "high": 2.0 + half})
    assert sweeps.interval([5.0]) == {"mean": 5.0, "low": None, "high": None}
    rows = [
        {"generation": 1, "seed": 0, "env_steps": 10, "eval_return": -5},
        {"generation": 1, "seed": 1, "env_steps": 10, "eval_return": 1},
        {"generation": 2, "seed": 0, "env_steps": 20, "eval_return": 2},
        {"generation": 2, "seed": 1, "env_steps": 20},
    ]
    assert sweeps.steps_to_threshold(rows, 0.0) == [20, 10]
    assert sweeps.steps_to_threshold(rows, 5.0) == [None, None]


def test_bad_sweeps_fail_before_compiling(tmp_path):
    result = esjax("sweep", "pendulum", *SMALL, "--vary", "policy.hiden=[8],[16]", cwd=tmp_path)
    assert_clean_error(result, "hiden")
    result = esjax("sweep", "pendulum", "--vary", "strategy_settings.learning_rate", cwd=tmp_path)
    assert_clean_error(result, "KEY=V1,V2")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command, words",
    [
        ("sweep", ["TASK", "--vary", "--seeds", "--out", "--resume", "--log", "KEY=V1,V2"]),
        ("export", ["RUN", "--csv", "--out"]),
    ],
)
def test_help_is_complete_with_an_example(command, words):
    from typer.testing import CliRunner

    from esjax.cli import app

    result = CliRunner().invoke(app, [command, "--help"], prog_name="esjax", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    examples = result.output.split("Examples", 1)[1]
    assert f"esjax {command}" in examples
    for word in words:
        assert word in result.output, word


def test_cli_resume_of_a_finished_sweep_reports_the_same_numbers(finished, tmp_path):
    import shutil

    out, record = finished
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    result = esjax("sweep", "--resume", "--out", copy, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "strategy_settings.learning_rate=0.3" in result.stdout
    again = json.loads((copy / "sweep.json").read_text())
    assert again["configurations"] == json.loads(json.dumps(record["configurations"]))
    for entry in again["configurations"]:
        assert (copy / entry["run_dir"] / "fitness.png").is_file()
