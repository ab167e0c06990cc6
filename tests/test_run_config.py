"""The run configuration: typed, frozen, resolved once, written once.

``config.json`` is the JSON form of :class:`esjax._src.specs.config.RunConfig`; it round-trips for
every preset, is never rewritten by building the engine or resuming (a resume that goes further
records its target in ``target.json`` and the checkpoint), and run directories written by
older versions open.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tomllib
import warnings
from pathlib import Path

import pytest

from esjax._src.run import runs
from esjax._src.run.training import evolve, resolve_config
from esjax._src.specs import presets
from esjax._src.specs.config import LOOP_SETTINGS, ConfigError, LoopSettings, RunConfig

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


# ---------------------------------------------------------------------------- settings per strategy
PER_STRATEGY = DATA / "per-strategy.toml"


def preset_settings(name: str) -> dict:
    """A strategy preset's own ``[settings]``, read from its file."""
    return tomllib.loads((presets.preset_dir("strategy") / f"{name}.toml").read_text())["settings"]


def task_file(name: str) -> dict:
    """A shipped task's table, read from its file."""
    return tomllib.loads((presets.preset_dir("task") / f"{name}.toml").read_text())


def resolved(task, **kwargs) -> tuple[RunConfig, list[str]]:
    """``(config, warnings)``: every warning, not only a message's first in this process."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = resolve_config(task, **kwargs)  # at the reference popsize: no decay rescaled
    return config, [str(w.message) for w in caught]


@pytest.mark.parametrize(
    ("strategy", "name", "from_task"),
    [
        (None, "open_es", {"learning_rate": 0.2, "lr_decay": 0.985}),  # the plain keys
        ("open_es", "open_es", {"learning_rate": 0.2, "lr_decay": 0.985}),
        ("lowrank_es", "lowrank_es", {"rank": 2, "lr_decay": 0.99}),  # its table alone
        ("LowRank_ES", "lowrank_es", {"rank": 2, "lr_decay": 0.99}),  # spelt as --strategy takes
        ("pgpe", "pgpe", {"std_init": 0.3}),  # the table is spelt [strategy_settings.PGPE]
    ],
)
def test_a_strategy_takes_the_tasks_settings_for_it(strategy, name, from_task):
    """The task's settings for the strategy that runs, over that strategy preset's own; the
    other strategies' settings are not used, and nothing is said."""
    config, said = resolved(PER_STRATEGY, strategy=strategy)
    settings = config.strategy.settings
    assert config.strategy.name == name and not said
    expected = {**preset_settings(name), **from_task}
    for key in ("learning_rate", "lr_decay", "std_init", "momentum", "rank"):
        if key in expected:
            assert settings[key] == expected[key], key
    # The task is kept as the file gives it, every strategy's settings in it.
    given = tomllib.loads(PER_STRATEGY.read_text())["strategy_settings"]
    assert config.task.strategy_settings == given


def test_which_setting_wins_is_spelled_out():
    """Highest first: --set strategy_settings.KEY, the task's settings for the strategy that
    runs (its table, which --set strategy_settings.NAME.KEY edits), the strategy preset's
    [settings], the algorithm's defaults."""
    lowrank = preset_settings("lowrank_es")
    over = ["strategy_settings.lr_decay=0.95", "strategy_settings.lowrank_es.std_init=0.2"]
    config, _ = resolved(PER_STRATEGY, strategy="lowrank_es", overrides=over)
    settings = config.strategy.settings
    assert settings["lr_decay"] == 0.95  # --set, over the table's 0.99
    assert settings["std_init"] == 0.2  # the table as --set edited it, over the preset's
    assert settings["rank"] == 2  # the table, over the preset's 1
    assert lowrank["rank"] == 1 and lowrank["learning_rate"] == 0.1
    assert settings["learning_rate"] == 0.1  # the preset's: the task's 0.2 is open_es's
    assert "lr_min" not in lowrank and settings["lr_min"] == 0.0  # the algorithm's default
    # A table for another strategy is no setting of this one.
    config, _ = resolved(PER_STRATEGY, strategy="lowrank_es",
                         overrides=["strategy_settings.PGPE.std_init=0.5"])  # fmt: skip
    assert config.strategy.settings["std_init"] == lowrank["std_init"]


def test_the_popsize_rule_rescales_a_tables_decay_but_keeps_one_given_by_set():
    """At twice the reference popsize 256, 100 generations become round(100 / sqrt 2) = 71 and
    a decay d becomes d ** (100 / 71); a value the command set is kept as given."""
    config = resolve_config(PER_STRATEGY, strategy="lowrank_es", popsize=512)
    assert config.generations == 71
    assert config.strategy.settings["lr_decay"] == pytest.approx(0.99 ** (100 / 71), rel=1e-12)
    over = ["strategy_settings.lowrank_es.lr_decay=0.98"]
    config = resolve_config(PER_STRATEGY, strategy="lowrank_es", popsize=512, overrides=over)
    assert config.strategy.settings["lr_decay"] == 0.98


def test_a_strategy_without_settings_in_the_task_says_which_it_drops():
    """pendulum's [strategy_settings] are open_es's and it has no table for SNES: SNES runs on
    its preset's settings and one line names what it runs without, spelled as --set would keep
    it."""
    assert "snes" not in task_file("pendulum")["strategy_settings"]
    config, said = resolved("pendulum", strategy="snes")
    assert config.strategy.settings["lr_decay"] == 1.0  # the sgd optimizer's, not the task's
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith("tasks/pendulum.toml: ")
    assert "lr_decay=0.985" in said[0] and "[strategy_settings.snes]" in said[0]
    # A setting given by --set is not dropped; with every one given, nothing is said.
    config, said = resolved(PER_STRATEGY, strategy="snes",
                            overrides=["strategy_settings.learning_rate=0.5"])  # fmt: skip
    assert config.strategy.settings["learning_rate"] == 0.5
    assert len(said) == 1 and "lr_decay=0.985" in said[0] and "learning_rate" not in said[0]
    assert not resolved("pendulum", strategy="snes",
                        overrides=["strategy_settings.lr_decay=0.985"])[1]  # fmt: skip
    # A task with no settings of its own drops none; an empty table says "the preset's alone".
    assert not resolved("cartpole", strategy="lowrank_es")[1]
    empty = ["strategy_settings.snes={}"]
    config, said = resolved("pendulum", strategy="snes", overrides=empty)
    assert not said and config.strategy.settings["lr_decay"] == 1.0
    # A refused command says only why.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConfigError, match="popsize must be a positive"):
            resolve_config("pendulum", strategy="lowrank_es", popsize=0)
    assert not caught


@pytest.mark.parametrize(
    ("table", "parts"),
    [
        ({"lowrnk_es": {"rank": 2}}, ["strategy_settings.lowrnk_es: ", "unknown strategy",
                                      "did you mean 'lowrank_es'"]),
        ({"lowrank_es": {"rnak": 2}}, ["strategy_settings.lowrank_es: ", "no setting 'rnak'",
                                       "did you mean 'rank'"]),
        ({"lowrank_es": {"rank": "two"}}, ["strategy_settings.lowrank_es: ",
                                           "rank must be a positive integer, got 'two'"]),
        ({"pgpe": {"std_init": True}}, ["strategy_settings.pgpe: ", "std_init must be"]),
        ({"open_es": {"std_init": 0.1}}, ["strategy_settings.open_es: ", "own strategy"]),
        ({"pgpe": {}, "PGPE": {}}, ["strategy_settings.PGPE: ", "a second table for pgpe"]),
        ({"GuidedES": {}}, ["strategy_settings.GuidedES: ", "cannot run in esjax"]),
        ({"pgpe": {"optimizer": "clipup", "lr_decay": 0.9}},
         ["strategy_settings.pgpe: ", "do not apply to clipup"]),
    ],
)  # fmt: skip
def test_a_bad_table_is_refused_in_one_line_naming_the_file_and_the_key(tmp_path, table, parts):
    """Checked whichever strategy runs: a table not used now would be by another command."""
    path = tmp_path / "task.toml"
    lines = ['env = "Pendulum-v1"']
    for name, settings in table.items():
        lines += [f"[strategy_settings.{name}]", *(f"{k} = {json.dumps(v)}" for k, v in
                                                   settings.items())]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        resolve_config(path, popsize=8)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for part in parts:
        assert part in message, message


def test_a_stored_task_reads_back_with_its_tables_or_without(tmp_path):
    """config.json holds the task as given (every table) and the settings the run resolved; it
    reads back equal, with tables and without, and a run of it resumes on its own settings."""
    config = resolve_config(PER_STRATEGY, strategy="lowrank_es", popsize=8, generations=2)
    data = json.loads(json.dumps(config.to_json()))
    assert data["strategy"]["settings"]["rank"] == 2  # resolved, as today
    assert data["task"]["strategy_settings"]["lowrank_es"] == {"rank": 2, "lr_decay": 0.99}
    assert RunConfig.from_json(data, "config.json") == config
    plain = resolve_config("pendulum", popsize=8)
    plain_data = json.loads(json.dumps(plain.to_json()))
    assert plain_data["task"]["strategy_settings"] == task_file("pendulum")["strategy_settings"]
    assert RunConfig.from_json(plain_data, "config.json") == plain
    old = json.loads((DATA / "run-v1" / runs.CONFIG).read_text())  # written before tables
    task = RunConfig.from_json(old, "config.json").task
    assert task.strategy_settings == task.default_settings == old["task"]["strategy_settings"]
    assert task.settings_tables == {}
    # A run of the task with its tables resumes as it was made.
    out = tmp_path / "run"
    evolve(PER_STRATEGY, strategy="lowrank_es", popsize=8, generations=1, out=out)
    written = (out / runs.CONFIG).read_bytes()
    assert runs.read_run_config(out).strategy.settings["rank"] == 2
    assert evolve(None, out=out, resume=True, generations=2).generations == 2
    assert (out / runs.CONFIG).read_bytes() == written


def test_a_sweep_over_a_tables_number_shares_one_program():
    """The sweep's configurations resolve as a run does, and differ only in a traced number
    when --vary edits the table of the strategy that runs."""
    from esjax._src.analysis.sweeps import structure

    configs = [
        resolve_config(PER_STRATEGY, strategy="lowrank_es", popsize=8,
                       overrides=[f"strategy_settings.lowrank_es.learning_rate={rate}"])
        for rate in (0.05, 0.2)
    ]  # fmt: skip
    assert [c.strategy.settings["learning_rate"] for c in configs] == [0.05, 0.2]
    assert structure(configs[0], ("learning_rate",)) == structure(configs[1], ("learning_rate",))
    assert structure(configs[0], ()) != structure(configs[1], ())
