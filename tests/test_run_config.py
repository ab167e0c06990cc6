"""The run configuration: typed, frozen, resolved once, written once.

``config.json`` is the JSON form of :class:`esjax.specs.config.RunConfig`; it round-trips for every
preset, is never rewritten by building the engine or resuming (a resume that goes further
records its target in ``target.json`` and the checkpoint), and run directories written by
older versions open.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from esjax.run import runs
from esjax.run.training import evolve, resolve_config
from esjax.specs import presets
from esjax.specs.config import LOOP_SETTINGS, ConfigError, LoopSettings, RunConfig

DATA = Path(__file__).parent / "data"
TINY = ["episode_length=30", "evaluation.every=1", "evaluation.episodes=4"]


@pytest.mark.parametrize("name", presets.names("task"))
def test_every_preset_resolves_to_a_config_that_round_trips(name):
    config = resolve_config(name)
    assert config.popsize > 0 and config.num_dims > 0
    data = json.loads(json.dumps(config.to_json()))  # as config.json holds it
    assert RunConfig.from_json(data, "config.json") == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.popsize = 3  # type: ignore[misc]


def test_what_matters_for_what_is_said_once():
    a = resolve_config("pendulum", popsize=8, seeds=2, overrides=TINY)
    b = resolve_config("pendulum", popsize=8, seed=5, seeds=3, overrides=TINY)
    longer = resolve_config("pendulum", popsize=8, generations=7, overrides=TINY)
    # Seeds and length never change the compiled program ...
    assert a.program() == b.program() == longer.program()
    assert a.identity() == b.identity()  # ... nor which configuration a run is
    assert a.state_key() != b.state_key()  # but a checkpoint holds these seeds' state
    c = resolve_config("pendulum", popsize=16, overrides=TINY)
    assert c.program() != a.program() and c.identity() != a.identity()


def test_config_json_is_written_once(tmp_path):
    out = tmp_path / "run"
    evolve("cartpole", popsize=8, generations=2, rollouts=1, out=out, overrides=TINY)
    written = (out / runs.CONFIG).read_bytes()
    evolve(None, out=out, resume=True, generations=4)
    assert (out / runs.CONFIG).read_bytes() == written
    # The resumed target lives in the checkpoint: a plain resume keeps it.
    assert runs.load_checkpoint(out).meta["target_generations"] == 4
    summary = evolve(None, out=out, resume=True)
    assert summary.generations == 4
    assert (out / runs.CONFIG).read_bytes() == written


def test_an_extended_target_survives_a_kill_before_the_next_checkpoint(tmp_path):
    """A resume for more generations records its target before running any: killed between
    two checkpoints, the next plain resume still goes to the new target."""
    out = tmp_path / "run"
    evolve("cartpole", popsize=8, generations=2, rollouts=1, out=out, overrides=TINY)
    written = (out / runs.CONFIG).read_bytes()

    def killed(row):
        raise RuntimeError("killed")  # not a stop signal: no checkpoint is taken on the way out

    with pytest.raises(RuntimeError, match="killed"):
        evolve(None, out=out, resume=True, generations=4, block=1, on_progress=killed,
               checkpoint_every_s=1e9)  # fmt: skip
    assert runs.load_checkpoint(out).meta["target_generations"] == 2  # the old checkpoint
    summary = evolve(None, out=out, resume=True)
    assert summary.generations == 4
    assert [row["generation"] for row in runs.load_metrics(out)] == [1, 2, 3, 4]
    assert (out / runs.CONFIG).read_bytes() == written


def test_a_run_killed_before_its_first_block_resumes_with_its_sizes_found(tmp_path):
    """An older config.json without num_dims (its run never reached the first block, which
    wrote it) resumes from generation 0 and leaves the file as it was."""
    run_dir = tmp_path / "run-v1"
    shutil.copytree(DATA / "run-v1", run_dir)
    for name in (runs.CHECKPOINT, runs.PREV_CHECKPOINT, runs.METRICS, runs.SUMMARY):
        (run_dir / name).unlink(missing_ok=True)
    data = json.loads((run_dir / runs.CONFIG).read_text())
    popsize, num_dims = data["popsize"], data.pop("num_dims")
    (run_dir / runs.CONFIG).write_text(json.dumps(data))
    written = (run_dir / runs.CONFIG).read_bytes()
    assert runs.read_run_config(run_dir).missing_sizes
    summary = evolve(None, out=run_dir, resume=True, generations=2)
    assert summary.generations == 2
    assert (run_dir / runs.CONFIG).read_bytes() == written
    saved = runs.load_checkpoint(run_dir).meta["config"]
    assert (saved["popsize"], saved["num_dims"]) == (popsize, num_dims)


def test_a_damaged_config_is_one_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / runs.CONFIG).write_text(json.dumps({"task_name": "x"}))
    with pytest.raises(ConfigError, match="not a valid esjax run config") as info:
        runs.read_run_config(run_dir)
    assert "\n" not in str(info.value)


def test_the_loop_settings_are_a_typed_table_of_their_own():
    config = resolve_config("pendulum", popsize=8, overrides=TINY)
    data = config.to_json()
    assert data["loop"] == {"rollouts_multiplier": 1, "worst_episodes": 1.0, "env_groups": "auto",
                            "validate_top": 1, "validate_episodes": None}  # fmt: skip
    assert not set(LOOP_SETTINGS) & set(data["strategy"]["settings"])
    assert config.loop == config.strategy.loop == LoopSettings(env_groups="auto")
    # Spelled as a strategy setting, as presets and --set always have.
    over = [*TINY, "strategy_settings.worst_episodes=0.5"]
    changed = resolve_config("pendulum", popsize=8, overrides=over)
    assert changed.loop.worst_episodes == 0.5
    assert changed.program() != config.program() and changed.identity() != config.identity()
    assert changed.state_key() != config.state_key()


def test_a_config_from_before_the_loop_table_reads_the_same():
    data = json.loads((DATA / "run-v1" / runs.CONFIG).read_text())
    assert "loop" not in data and "env_groups" in data["strategy"]["settings"]
    old = RunConfig.from_json(data, "config.json")
    assert old.loop == LoopSettings(env_groups="auto")
    assert not set(LOOP_SETTINGS) & set(old.strategy.settings)
    assert RunConfig.from_json(json.loads(json.dumps(old.to_json())), "config.json") == old


@pytest.mark.parametrize(
    ("loop", "message"),
    [
        ({"validate_tpo": 2}, r"config.json: loop: unknown key 'validate_tpo' \(did you mean"),
        ({"validate_top": "many"}, "config.json: loop.validate_top: expected an integer"),
        ({"worst_episodes": 0.0}, r"config.json: loop.worst_episodes: must be in \(0, 1\]"),
        ([], "config.json: loop: expected a table"),
    ],
)
def test_a_bad_loop_table_is_one_line(loop, message):
    data = resolve_config("pendulum", popsize=8, overrides=TINY).to_json()
    with pytest.raises(ConfigError, match=message) as info:
        RunConfig.from_json({**data, "loop": loop}, "config.json")
    assert "\n" not in str(info.value)
    data["strategy"]["settings"]["validate_top"] = 2  # in both places: which one counts?
    with pytest.raises(ConfigError, match=r"settings\.validate_top belongs in the loop table"):
        RunConfig.from_json(data, "config.json")
