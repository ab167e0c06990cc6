"""Sweeps: each configuration equals the same configuration run alone; resume; sweep.json.

The reference for a configuration is ``esjax evolve --set ...`` in its own process; the
reference for the summary statistics is arithmetic written out here.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from test_cli import SMALL, assert_clean_error, esjax

from esjax._src.analysis import sweeps
from esjax._src.run.training import evolve
from esjax._src.specs.config import ConfigError

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


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Each configuration of the sweep run alone: ``esjax evolve --set ...`` in its own process."""
    work = tmp_path_factory.mktemp("alone")
    out = {}
    for rate in ("0.03", "0.3"):
        run_dir = work / f"lr{rate}"
        result = esjax(
            *("evolve", "pendulum", "--popsize", "8", "--generations", "3", "--rollouts", "1"),
            *("--seeds", "2", "--out", run_dir),
            *(f"--set={o}" for o in TINY["overrides"]),
            f"--set=strategy_settings.learning_rate={rate}",
            cwd=work,
        )
        assert result.returncode == 0, result.stderr
        out[rate] = run_dir
    return out


def assert_same_run(run_dir, reference) -> None:
    """Bit for bit: every metric of every generation and seed, and both policies."""
    assert rows_without_wall(run_dir) == rows_without_wall(reference)
    for name in ("final_policy.msgpack", "best_policy.msgpack"):
        assert (run_dir / name).read_bytes() == (reference / name).read_bytes(), name


def test_each_configuration_equals_the_same_run_alone(finished, alone):
    out, record = finished
    assert [c["overrides"] for c in record["configurations"]] == [
        ["strategy_settings.learning_rate=0.03"],
        ["strategy_settings.learning_rate=0.3"],
    ]
    # Both configurations ran in one program; each equals its run alone.
    for entry, rate in zip(record["configurations"], ("0.03", "0.3"), strict=True):
        assert_same_run(out / entry["run_dir"], alone[rate])
    # The two learning rates really differ (a sweep that ignored its values would pass above).
    assert rows_without_wall(alone["0.03"]) != rows_without_wall(alone["0.3"])


def test_sweep_json_holds_test_returns_intervals_and_steps(finished):
    from esjax._src.run.saved import evaluate_run

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
        t = math.tan(0.475 * math.pi)  # t_{0.975, 1}: the Cauchy quantile, 12.7062...
        assert stats["high"] == pytest.approx(mean + t * sd / math.sqrt(2))
    assert len(entry["env_steps_to_threshold"]["per_seed"]) == 2
    assert len(entry["solved_per_seed"]) == 2


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


def test_configurations_stopped_at_different_generations_resume_to_their_runs_alone(
    alone, tmp_path
):
    # A kill while a program checkpoints its configurations one after another can leave
    # them at different generations: here the first checkpointed generation 2 and the
    # second had not written its checkpoint yet (its metrics hold rows it must redo).
    stopped = tmp_path / "stopped"

    def interrupt(row):
        if row["run_dir"].endswith("learning_rate=0.3") and row["generation"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(sweeps.SweepInterrupted):
        sweeps.sweep("pendulum", VARY, out=stopped, on_progress=interrupt, **TINY)
    first, second = sorted(p.parent for p in stopped.glob("*/config.json"))
    (second / "checkpoint.msgpack").unlink()
    assert not (second / "checkpoint.prev.msgpack").exists()
    assert max(row["generation"] for row in rows_without_wall(second)) == 2
    seen = []
    record = sweeps.sweep(
        None, out=stopped, resume=True, on_progress=lambda row: seen.append(row["generation"])
    )
    # The first went on from generation 3 and the second started over from generation 1.
    assert sorted(seen) == [1, 1, 2, 2, 3, 3, 3, 3]
    assert_same_run(first, alone["0.03"])
    assert_same_run(second, alone["0.3"])
    assert [e["run_dir"] for e in record["configurations"]] == [first.name, second.name]


def test_a_configuration_extended_and_killed_is_not_taken_as_finished(tmp_path):
    """Resumed for more generations, a finished configuration is unfinished again: its old
    summary.json goes before it runs, so a sweep resume after a kill runs it to the end."""
    out = tmp_path / "sw"
    one = ["strategy_settings.learning_rate=0.1"]
    sweeps.sweep("pendulum", one, out=out, **{**TINY, "seeds": 1})
    (run_dir,) = (p.parent for p in out.glob("*/config.json"))
    assert (run_dir / "summary.json").is_file()

    def killed(row):
        raise RuntimeError("killed")  # not a stop signal: no checkpoint is taken on the way out

    with pytest.raises(RuntimeError, match="killed"):
        evolve(None, out=run_dir, resume=True, generations=5, block=1, on_progress=killed,
               checkpoint_every_s=1e9)  # fmt: skip
    assert not (run_dir / "summary.json").exists()
    seen = []
    sweeps.sweep(None, out=out, resume=True, on_progress=lambda row: seen.append(row["generation"]))
    assert seen == [4, 5]
    assert json.loads((run_dir / "summary.json").read_text())["generations"] == 5
    assert [row["generation"] for row in rows_without_wall(run_dir)] == [1, 2, 3, 4, 5]


def test_numeric_settings_share_a_program_and_shapes_do_not():
    from esjax._src.run.training import resolve_config

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


def test_settings_the_engine_reads_when_built_get_programs_of_their_own():
    """``worst_episodes`` is a float every strategy takes, and tracing it through ask and tell
    works (they never read it), but the rollout reads it once, when the engine is built. Were it
    traced, both configurations would run one program with the first one's value."""
    from esjax._src.run.training import resolve_config

    grid = sweeps.configurations(["strategy_settings.worst_episodes=1.0,0.5"])
    resolved = [
        resolve_config(
            "pendulum", popsize=8, rollouts=4, overrides=["episode_length=16", *c.overrides]
        )
        for c in grid
    ]
    found = sweeps.programs(grid, resolved)
    assert len(found) == 2
    for _, engine in found:
        assert "worst_episodes" not in engine.hyper_names


# Pendulum with its mass drawn per episode from [low, 2]: the sweep varies ``low``.
SAMPLER = ["env_sampler.m.dist=uniform", "env_sampler.m.low=1.0", "env_sampler.m.high=2.0"]


def test_env_sampler_bounds_share_a_program_and_its_kind_does_not():
    from esjax._src.run.training import resolve_config

    def found(vary):
        grid = sweeps.configurations(vary)
        resolved = [
            resolve_config(
                "pendulum", popsize=8, overrides=[*TINY["overrides"], *SAMPLER, *c.overrides]
            )
            for c in grid
        ]
        return sweeps.programs(grid, resolved)

    (members, engine), *others = found(["env_sampler.m.low=0.5,1.5", "env_sampler.m.high=2,3"])
    assert members == [0, 1, 2, 3] and not others
    assert set(engine.bounds) == {"m.low", "m.high"}
    assert [m for m, _ in found(["env_sampler.m.dist=uniform,log_uniform"])] == [[0], [1]]


def test_env_sampler_bound_sweep_equals_each_run_alone(tmp_path, monkeypatch):
    from esjax._src.rollout import population_rollout as rollout
    from esjax._src.run.training import evolve

    # Chunks of a few members, so the sweep's 4 stacked runs (2 bounds x 2 seeds) step
    # through the population in smaller chunks than a run alone does: results must not care.
    monkeypatch.setattr(rollout, "CHUNK_PARAM_BYTES", 8 * 5124)  # 8 members of the preset MLP
    shared = dict(popsize=8, generations=2, rollouts=1, seeds=2)
    overrides = [*TINY["overrides"], *SAMPLER]
    programs = []
    record = sweeps.sweep(
        "pendulum",
        ["env_sampler.m.low=0.5,1.5"],
        out=tmp_path / "sw",
        overrides=overrides,
        test_episodes=4,
        on_configuration=lambda *args: programs.append(args),
        **shared,
    )
    assert len(programs) == 1  # both bounds ran as one program
    runs = [tmp_path / "sw" / c["run_dir"] for c in record["configurations"]]
    alone = tmp_path / "alone"
    evolve("pendulum", out=alone, overrides=[*overrides, "env_sampler.m.low=1.5"], **shared)
    assert rows_without_wall(runs[1]) == rows_without_wall(alone)  # bit for bit
    for name in ("final_policy.msgpack", "best_policy.msgpack"):
        assert (runs[1] / name).read_bytes() == (alone / name).read_bytes()
    # The bound reached the rollouts: the other value trained on other episodes.
    assert rows_without_wall(runs[0]) != rows_without_wall(runs[1])


def test_a_live_sweep_directory_is_refused(finished, tmp_path):
    import shutil

    from esjax._src.run.lifecycle import RunLock

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
    half = 4.302652729749464 * 1.0 / math.sqrt(3)  # t_{0.975, 2}
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

    from esjax._src.cli.main import app

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
    # A stop during a later configuration's final test leaves a finished one without its
    # figure; the resume draws it.
    (copy / record["configurations"][0]["run_dir"] / "fitness.png").unlink()
    result = esjax("sweep", "--resume", "--out", copy, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "strategy_settings.learning_rate=0.3" in result.stdout
    again = json.loads((copy / "sweep.json").read_text())
    assert again["configurations"] == json.loads(json.dumps(record["configurations"]))
    for entry in again["configurations"]:
        assert (copy / entry["run_dir"] / "fitness.png").is_file()


def test_resume_refuses_arguments_it_would_ignore_and_a_changed_task(finished, tmp_path):
    """A resumed sweep runs each configuration as stored: a different --generations, popsize
    or seed, or a task that no longer resolves to the stored runs, is refused, not ignored."""
    out, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for given, refused in [({"generations": 5}, "generations"), ({"popsize": 16}, "popsize"),
                           ({"seed": 7}, "seed"), ({"strategy": "pgpe"}, "strategy")]:  # fmt: skip
        with pytest.raises(ConfigError, match=rf"cannot change {refused} on resume"):
            sweeps.sweep(None, out=copy, resume=True, **given)
    sweeps.sweep(None, out=copy, resume=True, seeds=TINY["seeds"], popsize=TINY["popsize"])
    # The task as it reads now differs from what the runs were started with: finished runs
    # are only summarised again, an unfinished one would go on under the new settings.
    record = json.loads((copy / "sweep.json").read_text())
    record["spec"]["overrides"] = [*record["spec"]["overrides"], "reward_shift=0.5"]
    (copy / "sweep.json").write_text(json.dumps(record))
    sweeps.sweep(None, out=copy, resume=True)
    (copy / record["configurations"][0]["run_dir"] / "summary.json").unlink()
    with pytest.raises(ConfigError, match=r"task has changed since this sweep ran it .*shift"):
        sweeps.sweep(None, out=copy, resume=True)
    # A run resumed on its own: a different seed is refused too.
    run_dir = copy / record["configurations"][0]["run_dir"]
    with pytest.raises(ConfigError, match=r"cannot change seed on resume \(run has 0\)"):
        evolve(None, out=run_dir, resume=True, seed=7)


def test_a_signal_while_the_runs_are_opened_stops_the_sweep(tmp_path, monkeypatch):
    """Each run's own handler holds a signal that comes while it is begun; the sweep reads it."""
    import os
    import signal

    from esjax._src.run.lifecycle import Run

    real_begin = Run.begin

    def begin_then_signal(self, engine):
        real_begin(self, engine)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Run, "begin", begin_then_signal)
    with pytest.raises(sweeps.SweepInterrupted) as stopped:
        sweeps.sweep("pendulum", VARY, out=tmp_path / "sw", **TINY)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert not list((tmp_path / "sw").glob("*/summary.json"))


def test_the_sweep_table_says_how_many_seeds_its_steps_to_threshold_average():
    """A mean over the seeds that reached the threshold, shown with their count."""
    import io

    from rich.console import Console

    from esjax._src.analysis.evaluation import sweep_rows
    from esjax._src.cli.tables import show_sweep

    def entry(per_seed):
        reached = [s for s in per_seed if s is not None]
        mean = float(np.mean(reached)) if reached else None
        return {"overrides": [f"x={len(reached)}"], "solved_per_seed": None, "solved_seeds": None,
                "final_test_return": {"mean": 1.0, "low": None, "high": None},
                "best_test_return": {"mean": 1.0, "low": None, "high": None},
                "env_steps_to_threshold": {"per_seed": per_seed,
                                           "mean_over_reached": mean}}  # fmt: skip

    record = {"spec": {"seeds": 3, "task": "t"}, "configurations": [
        entry([1000, None, 3000]), entry([None, None, None])]}  # fmt: skip
    rows = sweep_rows(record)
    assert rows[0]["env_steps_to_threshold"] == (2000.0, 2, 3)
    assert rows[1]["env_steps_to_threshold"] is None
    out = io.StringIO()
    show_sweep(Console(file=out, width=200), record, rows, None)
    assert "(2/3)" in out.getvalue()


def test_a_damaged_sweep_record_is_one_line(tmp_path):
    for record in ({"spec": {}}, [], {"spec": {"vary": [], "overrides": [], "seeds": "x"}}):
        (tmp_path / "sweep.json").write_text(json.dumps(record))
        with pytest.raises(ConfigError, match=r"sweep\.json: (unreadable|not a sweep record)"):
            sweeps.read_spec(tmp_path)
