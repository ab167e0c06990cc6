"""Run directories, checkpoints, bit-identical resume, saved policies and their evaluation."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.run import runs
from esjax._src.run.runs import load_metrics, read_run_config
from esjax._src.run.saved import evaluate_run, load_policy
from esjax._src.run.training import Interrupted, RunSummary, evolve
from esjax._src.specs.config import ConfigError

SMALL = [
    "episode_length=16",
    "policy.hidden=[8]",
    "evaluation.every=4",
    "evaluation.episodes=4",
    "normalize_obs=true",
]
RUN = dict(popsize=8, overrides=SMALL)


def strip_wall(rows):
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def checkpoint_arrays(run_dir):
    checkpoint = runs.load_checkpoint(run_dir)
    return checkpoint.meta, checkpoint.arrays


def assert_same_arrays(a, b):
    """Checkpoint arrays equal name by name (a dict's ``zip`` would compare only the names)."""
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """12 generations in one go: blocks of 4."""
    out = tmp_path_factory.mktemp("straight") / "run"
    return evolve("pendulum", generations=12, out=out, **RUN)


def test_run_directory_contents(straight):
    assert isinstance(straight, RunSummary)
    files = {p.name for p in straight.run_dir.iterdir()}
    assert {
        "config.json",
        "metrics.jsonl",
        "checkpoint.msgpack",
        "final_policy.msgpack",
        "best_policy.msgpack",
        "summary.json",
    } <= files
    config = read_run_config(straight.run_dir)
    assert config.task.env == "Pendulum-v1"
    assert list(config.task.policy.hidden) == [8]
    assert config.strategy.algorithm == "Open_ES"
    assert config.popsize == 8 and config.seed == 0 and config.seeds == 1
    assert config.generations == 12
    rows = load_metrics(straight.run_dir)
    assert [r["generation"] for r in rows] == list(range(1, 13))
    assert [r["generation"] for r in rows if "eval_return" in r] == [4, 8, 12]
    steps = [r["env_steps"] for r in rows]
    assert steps == [8 * 16 * (i + 1) for i in range(12)]  # Pendulum never terminates early
    assert straight.env_steps == steps[-1]
    for key in ("wall_s", "fitness_mean", "fitness_best", "fitness_std"):
        assert all(isinstance(r[key], float) for r in rows)
    walls = [r["wall_s"] for r in rows]
    assert walls == sorted(walls)
    evaluated = [max(r["eval_return"], r["eval_best_return"]) for r in rows if "eval_return" in r]
    assert straight.best_eval_return == pytest.approx(max(evaluated))
    assert straight.final_eval_return is not None


def test_files_are_msgpack_with_checksum_never_pickle(straight):
    from flax import serialization

    for name in ("checkpoint.msgpack", "final_policy.msgpack", "best_policy.msgpack"):
        data = (straight.run_dir / name).read_bytes()
        assert data[:1] != b"\x80"  # pickle protocol marker
        outer = serialization.msgpack_restore(data)
        assert outer["format"] == "esjax" and len(outer["sha256"]) == 64


def test_resume_is_bit_identical_even_when_interrupted_mid_block(straight, tmp_path):
    out = tmp_path / "run"

    def interrupt_at_6(metrics):
        if metrics["generation"] == 6:
            raise KeyboardInterrupt

    # Blocks of 2 put a boundary at 6, inside the straight run's block 4..8.
    with pytest.raises(Interrupted) as err:
        evolve("pendulum", generations=12, out=out, block=2, on_progress=interrupt_at_6, **RUN)
    assert "resume" in str(err.value) and str(out) in str(err.value)
    assert err.value.generation == 6
    assert [r["generation"] for r in load_metrics(out)][-1] == 6
    meta, _ = checkpoint_arrays(out)
    assert meta["generation"] == 6

    resumed = evolve("pendulum", out=out, resume=True)
    assert resumed.generations == 12
    assert strip_wall(load_metrics(out)) == strip_wall(load_metrics(straight.run_dir))
    _, a = checkpoint_arrays(straight.run_dir)
    _, b = checkpoint_arrays(out)
    assert_same_arrays(a, b)
    for which in ("final", "best"):
        np.testing.assert_array_equal(
            runs.read_policy(out, which)[1], runs.read_policy(straight.run_dir, which)[1]
        )
    assert resumed.final_eval_return == straight.final_eval_return


def test_a_short_run_extended_by_resume_matches_the_long_run(straight, tmp_path):
    out = tmp_path / "run"
    first = evolve("pendulum", generations=6, out=out, **RUN)
    assert first.generations == 6
    evolve("pendulum", generations=12, out=out, resume=True)
    assert strip_wall(load_metrics(out)) == strip_wall(load_metrics(straight.run_dir))
    _, a = checkpoint_arrays(straight.run_dir)
    _, b = checkpoint_arrays(out)
    assert_same_arrays(a, b)


def test_resume_after_a_hard_kill_drops_unsaved_rows(straight, tmp_path):
    out = tmp_path / "run"
    evolve("pendulum", generations=4, out=out, **RUN)
    # A crash after metrics were appended but before the next checkpoint: rows 5..7 and a
    # torn line are on disk, the checkpoint is at 4.
    extra = load_metrics(straight.run_dir)[4:7]
    runs.append_metrics(out, extra)
    with (out / runs.METRICS).open("a") as handle:
        handle.write('{"generation": 8, "env_')
    assert [r["generation"] for r in load_metrics(out)] == list(range(1, 8))
    evolve("pendulum", generations=12, out=out, resume=True)
    assert strip_wall(load_metrics(out)) == strip_wall(load_metrics(straight.run_dir))


def test_run_directory_errors(straight, tmp_path):
    with pytest.raises(ConfigError, match="exists; use --resume or --overwrite"):
        evolve("pendulum", generations=2, out=straight.run_dir, **RUN)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an esjax run"):
        evolve("pendulum", generations=2, out=plain, resume=True)
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        evolve("pendulum", generations=2, out=plain, overwrite=True, **RUN)
    assert (plain / "notes.txt").exists()
    with pytest.raises(ConfigError, match="cannot change popsize"):
        evolve("pendulum", out=straight.run_dir, resume=True, popsize=16)
    with pytest.raises(ConfigError, match="unknown task"):
        evolve("pendulumm", generations=2, out=tmp_path / "x")
    with pytest.raises(ConfigError, match="has no setting 'lr'"):
        evolve("pendulum", out=tmp_path / "y", overrides=[*SMALL, "strategy_settings.lr=0.1"])


def test_overwrite_replaces_a_run(straight, tmp_path):
    out = tmp_path / "run"
    evolve("pendulum", generations=2, out=out, **RUN)
    evolve("pendulum", generations=3, out=out, overwrite=True, **RUN)
    assert [r["generation"] for r in load_metrics(out)] == [1, 2, 3]


def test_damaged_checkpoint_is_refused(straight, tmp_path):
    out = tmp_path / "run"
    evolve("pendulum", generations=2, out=out, **RUN)
    path = out / runs.CHECKPOINT
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"checksum mismatch|not an esjax checkpoint"):
        evolve("pendulum", generations=4, out=out, resume=True)


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    runs.write_json(path, {"a": 1})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(runs.os, "replace", broken_replace)
    with pytest.raises(OSError):
        runs.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_controller_replays_the_rollout_in_a_python_loop(straight):
    """``load_policy`` in a plain loop over gymnax steps earns the rollout's own return."""
    controller = load_policy(straight.run_dir)
    assert controller.obs_stats is not None  # normalize_obs=true
    from esjax._src.engine.tasks import make_rollout

    rollout = make_rollout(controller.task)
    key = jax.random.key(7)
    expected = float(rollout.single(key, controller.params, controller.obs_stats).returns)

    env, env_params = rollout.env, rollout.env_params
    _, k_reset, k_episode = jax.random.split(key, 3)
    obs, state = env.reset(k_reset, env_params)
    controller.reset()
    total = 0.0
    for step_key in jax.random.split(k_episode, rollout.episode_length):
        _, k_env = jax.random.split(step_key)
        action = controller.act(np.asarray(obs))
        assert isinstance(action, np.ndarray)
        obs, state, reward, _, _ = env.step_env(k_env, state, jnp.asarray(action), env_params)
        total += float(reward)
    assert np.isclose(total, expected, rtol=1e-4)
    best = load_policy(straight.run_dir, which="best")
    assert best.act(np.zeros(3, np.float32)).shape == (1,)
    with pytest.raises(ConfigError, match="seed index 3 out of range"):
        load_policy(straight.run_dir, seed=3)


def test_evaluate_run_uses_held_out_episodes(straight):
    result = evaluate_run(straight.run_dir, episodes=6)
    assert set(result) == {"mean", "std", "min", "max", "episodes", "returns"}
    assert result["episodes"] == 6 and len(result["returns"]) == 6
    assert result["min"] <= result["mean"] <= result["max"]
    assert evaluate_run(straight.run_dir, episodes=6) == result  # a fixed set of episodes
    # Held-out test episodes are not the training-time evaluation episodes.
    assert result["mean"] != pytest.approx(straight.final_eval_return, abs=1e-6)
    with pytest.raises(ConfigError, match="unknown split"):
        evaluate_run(straight.run_dir, split="tset")


@pytest.mark.slow
def test_pendulum_defaults_reach_minus_200(tmp_path):
    """``esjax evolve pendulum`` as shipped: the search mean passes a test return of -200."""
    summary = evolve("pendulum", out=tmp_path / "run")
    assert summary.solved_threshold == -200.0
    assert summary.best_eval_return >= -200.0
    held_out = evaluate_run(summary.run_dir, episodes=128, which="best")
    assert held_out["mean"] >= -210.0  # fresh episodes: allow for selection on the eval set


def test_atomic_write_writes_into_a_pipe_rather_than_replacing_it(tmp_path):
    """A rename would put a file in place of a FIFO or device node (``--out /dev/stdout``, a
    link to the process's pipe); such a target the user named is written to as it is, named or
    linked. Inside a run (no ``through_special``) a link to one is replaced like any link."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    for target in (fifo, link):
        received = []
        reader = threading.Thread(target=lambda got=received: got.append(fifo.read_bytes()))
        reader.start()
        runs.atomic_write(target, b"through the pipe", through_special=True)
        reader.join(timeout=30)
        assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.stat().st_mode) and link.is_symlink()
    runs.atomic_write(link, b"in the run")
    assert not link.is_symlink() and link.read_bytes() == b"in the run"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    # A link to a regular file is still replaced by a new file (a run directory's files are
    # never written through into another directory).
    other = tmp_path / "other.json"
    other.write_text("theirs")
    mine = tmp_path / "mine.json"
    mine.symlink_to(other)
    runs.atomic_write(mine, b"mine")
    assert not mine.is_symlink() and mine.read_bytes() == b"mine"
    assert other.read_text() == "theirs"


def test_metrics_lines_that_are_not_rows_are_skipped(tmp_path):
    """A line edited or damaged by hand (valid JSON but not an object, or not UTF-8) is passed
    over like a torn last line, not a crash in plot or export."""
    (tmp_path / runs.METRICS).write_bytes(
        b'{"generation": 1}\n[1, 2]\n3\n"text"\n\xff\xfe\n{"generation": 2}\n'
    )
    assert [row["generation"] for row in load_metrics(tmp_path)] == [1, 2]
