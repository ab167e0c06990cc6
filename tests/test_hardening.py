"""Issue 7: esjax never loses a run, never shows a traceback for a person's mistake, and never
loads anything that runs code. Each item of the issue is its own test; ``tests/README.md``
maps the items to the test names.

Runs are tiny (popsize 8, 16-step pendulum episodes, 10 generations); subprocesses that only
fail validation are started together so their JAX imports overlap.
"""

from __future__ import annotations

import errno
import json
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import SMALL as CLI_SMALL
from test_cli import cli_env, esjax_command

from esjax._src.run import runs
from esjax._src.run.training import evolve
from esjax._src.specs.config import ConfigError, parse_task, to_dict

SMALL = ["episode_length=16", "policy.hidden=[8]", "evaluation.every=4", "evaluation.episodes=4"]
RUN = dict(popsize=8, overrides=SMALL)
TOTAL = 10


def checkpoint_arrays(run_dir):
    return runs.load_checkpoint(run_dir).arrays


def assert_same_result(run_dir, reference):
    """Same final checkpoint state (array by array, by name) and saved policy, byte for byte."""
    mine, theirs = checkpoint_arrays(run_dir), checkpoint_arrays(reference)
    assert mine.keys() == theirs.keys()
    for name, a in mine.items():
        b = theirs[name]
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    _, mine, _ = runs.read_policy(run_dir)
    _, theirs, _ = runs.read_policy(reference)
    assert mine.tobytes() == theirs.tobytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every fault test must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    evolve("pendulum", generations=TOTAL, out=out, **RUN)
    return out


# ---------------------------------------------------------------------------- bad input (CLI)
BAD_TOML = 'env = "Pendulum-v1"\nrollouts = = 2\n'
UNKNOWN_ENV = 'env = "Pendulum-v9"\nepisode_length = 16\n'
# Task files whose settings for another strategy (a [strategy_settings.NAME] table) are bad.
BAD_TABLES = {
    "table_unknown_strategy.toml": "[strategy_settings.lowrnk_es]\nrank = 2\n",
    "table_unknown_key.toml": "[strategy_settings.lowrank_es]\nrnak = 2\n",
    "table_wrong_type.toml": '[strategy_settings.lowrank_es]\nrank = "two"\n',
}
BAD_INPUT = {
    "unknown_task": (["evolve", "pendulm"], ["unknown task", "did you mean 'pendulum'"]),
    "unknown_strategy": (
        ["evolve", "pendulum", "-s", "open_ess"],
        ["unknown strategy", "did you mean 'open_es'"],
    ),
    "unknown_key": (
        ["evolve", "pendulum", "--set", "episode_lenght=16"],
        ["unknown key 'episode_lenght'", "did you mean 'episode_length'"],
    ),
    "wrong_type": (
        ["evolve", "pendulum", "--set", 'policy.hidden="big"'],
        ["policy.hidden", "expected a list of an integer"],
    ),
    "popsize_zero": (["evolve", "pendulum", "--popsize", "0"], ["popsize must be a positive"]),
    "popsize_odd": (["evolve", "pendulum", "--popsize", "7"], ["popsize must be even"]),
    "rollouts_zero": (["evolve", "pendulum", "--rollouts", "0"], ["rollouts must be a positive"]),
    "episode_length_zero": (
        ["evolve", "pendulum", "--set", "episode_length=0"],
        ["episode_length", "must be positive"],
    ),
    "test_episodes_zero": (
        ["evolve", "pendulum", "--set", "test_episodes=0"],
        ["test_episodes", "must be a positive integer"],
    ),
    "toml_does_not_parse": (["evolve", "bad.toml"], ["bad.toml", "not valid TOML"]),
    "not_a_run_directory": (
        ["evolve", "--resume", "--out", "plain"],
        ["plain", "not an esjax run"],
    ),
    "resume_a_file": (
        ["evolve", "--resume", "--out", "bad.toml"],
        ["bad.toml", "not an esjax run"],
    ),
    "unknown_env_id": (["evolve", "unknown_env.toml"], ["'Pendulum-v9'", "did you mean"]),
    "task_not_utf8": (["evolve", "latin1.toml"], ["latin1.toml", "not UTF-8"]),
    "split_named_train": (
        ["evolve", "pendulum", "--set", 'splits.train.l={dist="uniform",low=1,high=2}'],
        ["splits.train", "the training distribution"],
    ),
    "empty_strategy": (["evolve", "pendulum", "--strategy", ""], ["strategy: empty"]),
    "seed_beyond_int32": (
        ["evolve", "pendulum", "--seed", "2147483648"],
        ["--seed", "2147483647"],
    ),
    "seeds_beyond_int32": (
        ["evolve", "pendulum", "--seed", "2147483647", "--seeds", "2"],
        ["go beyond the largest, 2147483647"],
    ),
    "env_module_not_a_name": (
        ["evolve", "pendulum", "--set", 'env=".hidden:make"'],
        ["'.hidden' is not a module name"],
    ),
    "vary_value_repeated_as_read": (
        ["sweep", "pendulum", "--vary", "strategy_settings.learning_rate=0.1,0.10"],
        ["a value is repeated"],
    ),
    "plot_to_a_format_it_cannot_write": (
        ["plot", "plain", "--out", "fitness.mp4"],
        ["--out fitness.mp4", "expected a .png"],
    ),
    "render_to_a_format_it_cannot_write": (
        ["render", "plain", "--out", "episode.mp4"],
        ["--out episode.mp4", "expected a .gif file"],
    ),
    "env_kwargs_the_env_does_not_take": (
        ["evolve", "cartpole", "--set", "env_kwargs.pole_colour=2"],
        ["env: CartPole-v1: cannot make it", "env_kwargs {'pole_colour': 2}"],
    ),
    "discrete_task_continuous_setting": (
        ["evolve", "cartpole", "--set", 'env_sampler.max_torque={dist="uniform",low=1,high=2}'],
        ["'max_torque' is not a parameter", "CartPole-v1 has discrete actions"],
    ),
    "nonfinite_env_param": (
        ["evolve", "pendulum", "--set", "env_params.l=nan"],
        ["env_params.l", "must be a finite number, got nan"],
    ),
    "number_for_an_env_switch": (
        ["evolve", "metamaze", "--set", "env_params.normalize_time=1"],
        ["env_params.normalize_time", "must be true or false"],
    ),
    "switch_for_an_env_number": (
        ["evolve", "pendulum", "--set", "env_params.g=true"],
        ["env_params.g", "must be a number, got True"],
    ),
    "cnn_on_flat_observations": (
        ["evolve", "cartpole", "--set", "policy.kind=cnn"],
        ["cartpole: policy:", "needs image observations"],
    ),
    "ego_channel_beyond_the_image": (
        ["evolve", "asterix-minatar", "--set", "policy.ego_channel=7"],
        ["policy:", "ego_channel 7 is not a channel of a 4-channel image"],
    ),
    "network_that_cannot_fit": (
        ["evolve", "pendulum", "--set", "policy.hidden=[100000,100000]"],
        ["a generation needs about", "GiB", "available", "policy.hidden"],
    ),
    # Refused whichever strategy runs: another command would use the table.
    "settings_for_an_unknown_strategy": (
        ["evolve", "table_unknown_strategy.toml"],
        ["table_unknown_strategy.toml: strategy_settings.lowrnk_es: ", "unknown strategy",
         "did you mean 'lowrank_es'"],
    ),
    "unknown_key_in_a_strategys_settings": (
        ["evolve", "table_unknown_key.toml", "--strategy", "lowrank_es"],
        ["table_unknown_key.toml: strategy_settings.lowrank_es: ", "no setting 'rnak'",
         "did you mean 'rank'"],
    ),
    "wrong_type_in_a_strategys_settings": (
        ["sweep", "table_wrong_type.toml", "--vary", "generations=1,2"],
        ["table_wrong_type.toml: strategy_settings.lowrank_es: ",
         "rank must be a positive integer, got 'two'"],
    ),
    "settings_table_for_the_tasks_own_strategy": (
        ["evolve", "pendulum", "--set", "strategy_settings.open_es.std_init=0.1"],
        ["tasks/pendulum.toml: strategy_settings.open_es: ", "this task's own strategy"],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def bad_input_results(tmp_path_factory):
    """Every bad command, started at once; ``{case: (result, cwd, files before)}``."""
    started = {}
    for case, (args, _) in BAD_INPUT.items():
        cwd = tmp_path_factory.mktemp(case)
        (cwd / "bad.toml").write_text(BAD_TOML)
        (cwd / "unknown_env.toml").write_text(UNKNOWN_ENV)
        (cwd / "latin1.toml").write_bytes('description = "café"\n'.encode("latin-1"))
        for name, table in BAD_TABLES.items():
            (cwd / name).write_text(f'env = "Pendulum-v1"\n{table}')
        (cwd / "plain").mkdir()
        (cwd / "plain" / "notes.txt").write_text("mine")
        if "--out" not in args:
            args = [*args, "--out", "runs/new"]
        before = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
        proc = subprocess.Popen(
            [*esjax_command(), *args],
            cwd=cwd,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[case] = (proc, cwd, before)
    results = {}
    for case, (proc, cwd, before) in started.items():
        stdout, stderr = proc.communicate(timeout=300)
        completed = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        results[case] = (completed, cwd, before)
    return results


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_nonzero_exit_and_writes_nothing(bad_input_results, case):
    result, cwd, before = bad_input_results[case]
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for part in BAD_INPUT[case][1]:
        assert part in lines[0], lines[0]
    assert sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*")) == before


@pytest.mark.parametrize(
    "case",
    [
        "settings_for_an_unknown_strategy",
        "unknown_key_in_a_strategys_settings",
        "wrong_type_in_a_strategys_settings",
        "settings_table_for_the_tasks_own_strategy",
    ],
)
def test_bad_input_bad_settings_for_a_strategy_exit_2(bad_input_results, case):
    """A config error, as every bad task file is (issue 67)."""
    result, _, _ = bad_input_results[case]
    assert result.returncode == 2, result.stderr


# ---------------------------------------------------------------------------- faults
DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from esjax._src.run import runs
    from esjax._src.run.training import evolve

    out, total, stall = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    real_replace = os.replace
    count = [0]

    def replace(src, dst):
        # Stall inside the 3rd write of `stall`: its temp file is complete, not yet renamed.
        if Path(dst).name == stall:
            count[0] += 1
            if count[0] == 3:
                Path(out + ".stalled").touch()
                time.sleep(120)
        return real_replace(src, dst)

    os.replace = replace
    evolve("pendulum", generations=total, out=out, popsize=8, overrides=sys.argv[4:],
           block=1, checkpoint_every_s=0.0, on_progress=lambda row: time.sleep(0.15))
    """
)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "moment", ["first_checkpoint", "random_delay", "checkpoint_write", "checkpoint_rotation"]
)
def test_sigkill_at_any_moment_resumes_to_the_same_parameters(reference, tmp_path, moment):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "run"
    stall = {"checkpoint_rotation": runs.PREV_CHECKPOINT}.get(moment, runs.CHECKPOINT)
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(out), str(TOTAL), stall, *SMALL],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        if moment in ("checkpoint_write", "checkpoint_rotation"):
            _wait_for(Path(f"{out}.stalled"), proc)
        else:
            _wait_for(out / runs.CHECKPOINT, proc)
            if moment == "random_delay":
                time.sleep(random.Random(7).uniform(0.1, 1.0))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    generation = runs.load_checkpoint(out)[0]["generation"]
    assert 0 < generation < TOTAL
    evolve(None, generations=TOTAL, out=out, resume=True)
    assert_same_result(out, reference)
    rows = runs.load_metrics(out)
    assert [r["generation"] for r in rows] == list(range(1, TOTAL + 1))


def _run_with_two_checkpoints(out: Path) -> None:
    evolve("pendulum", generations=6, out=out, checkpoint_every_s=0.0, **RUN)  # saves at 4 and 6
    assert runs.load_checkpoint(out)[0]["generation"] == 6
    assert (out / runs.PREV_CHECKPOINT).is_file()


@pytest.mark.parametrize("damage", ["truncated", "bit_flip"])
def test_damaged_checkpoint_falls_back_to_the_previous_one(reference, tmp_path, damage):
    out = tmp_path / "run"
    _run_with_two_checkpoints(out)
    path = out / runs.CHECKPOINT
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"resuming from the previous checkpoint .*generation 4"):
        evolve(None, generations=TOTAL, out=out, resume=True)
    assert (out / runs.DAMAGED_CHECKPOINT).is_file()
    assert_same_result(out, reference)


def test_both_checkpoints_damaged_is_a_clean_error(tmp_path):
    out = tmp_path / "run"
    _run_with_two_checkpoints(out)
    for name in (runs.CHECKPOINT, runs.PREV_CHECKPOINT):
        (out / name).write_bytes((out / name).read_bytes()[:100])
    with pytest.raises(ConfigError, match=r"checkpoint\.msgpack: not an esjax checkpoint"):
        evolve(None, generations=TOTAL, out=out, resume=True)


def test_read_only_output_fails_before_compiling(tmp_path):
    """The write probe fails (as a read-only directory would for a non-root user)."""
    code = textwrap.dedent(
        """
        import errno, sys, tempfile
        import esjax._src.run.training

        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system")

        def no_compiling(config):
            raise AssertionError("compiled before checking the output directory")

        tempfile.mkstemp = refuse
        esjax._src.run.training.engine_for = no_compiling
        from esjax._src.cli.main import main
        sys.argv = ["esjax", *sys.argv[1:]]
        main()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "evolve", "pendulum", *CLI_SMALL, "--out", "runs/new"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0], result.stderr
    assert not (tmp_path / "runs" / "new").exists()


def test_disk_full_mid_run_keeps_the_last_good_checkpoint(reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    real_write = runs.atomic_write
    writes = []

    def disk_fills_up(path, data, **options):
        if Path(path).name == runs.CHECKPOINT:
            writes.append(path)
            if len(writes) >= 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data, **options)

    monkeypatch.setattr(runs, "atomic_write", disk_fills_up)
    # The first host visit is one generation (the evaluation then compiles beside the run).
    with pytest.raises(runs.StorageError, match=r"No space left.*generation 1 is kept"):
        evolve("pendulum", generations=TOTAL, out=out, checkpoint_every_s=0.0, **RUN)
    monkeypatch.undo()
    assert runs.load_checkpoint(out)[0]["generation"] == 1
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    evolve(None, generations=TOTAL, out=out, resume=True)
    assert_same_result(out, reference)


def test_a_resume_that_cannot_write_is_one_error_and_keeps_the_run(
    reference, tmp_path, monkeypatch
):
    """A full disk met before the first block (the metrics file rewritten to the checkpoint's
    generation) is a StorageError that keeps the checkpoint, not a raw OSError. The finished
    run's summary goes with the new target: the run is no longer finished."""
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    before = runs.load_checkpoint(out).arrays
    assert (out / runs.SUMMARY).is_file()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs, "truncate_metrics", disk_full)
    with pytest.raises(runs.StorageError, match=r"No space left.*its checkpoint is kept"):
        evolve(None, generations=TOTAL + 2, out=out, resume=True)
    monkeypatch.undo()
    after = runs.load_checkpoint(out).arrays
    assert all(after[name].tobytes() == a.tobytes() for name, a in before.items())
    assert runs.read_target(out) == TOTAL + 2 and not (out / runs.SUMMARY).exists()

    def missing(*args, **kwargs):  # not a failed write: left as it is, not called a full disk
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "data.npz")

    monkeypatch.setattr(runs, "truncate_metrics", missing)
    with pytest.raises(FileNotFoundError):
        evolve(None, out=out, resume=True)


# ---------------------------------------------------------------------------- numerics
def test_nonfinite_returns_rank_worst_are_counted_and_the_search_goes_on(tmp_path):
    # A torque limit of 1e38 (finite: NaN settings are refused as bad input) makes the squared
    # action in the reward overflow, so every return is -inf.
    out = tmp_path / "run"
    overrides = [*SMALL, "env_params.max_torque=1e38"]
    summary = evolve("pendulum", generations=3, out=out, popsize=8, overrides=overrides)
    assert summary.generations == 3
    rows = runs.load_metrics(out)
    assert [r["nonfinite"] for r in rows] == [8, 8, 8]
    assert all(r["fitness_mean"] is None for r in rows)  # null: no finite member to average
    for name, leaf in checkpoint_arrays(out).items():
        if not np.issubdtype(leaf.dtype, np.floating):
            continue
        # evosax's markers of "no best member yet": the strategy was never told anything.
        if name == "state/strategy/best_fitness":
            assert np.all(leaf == np.inf), leaf
        elif name == "state/strategy/best_solution":
            assert np.all(np.isnan(leaf))
        else:
            assert np.all(np.isfinite(leaf)), name
    # Ranking: a NaN or infinite return is worse than every finite one.
    from esjax._src.strategies.fitness import to_fitness

    fitness = np.asarray(to_fitness(np.array([-1e6, np.nan, 3.0, np.inf, -np.inf])))
    assert fitness.argmin() == 2 and fitness[[1, 3, 4]].min() > fitness[0]


@pytest.mark.parametrize("strategy", ["cma_es", "snes"])
def test_a_generation_without_a_finite_return_leaves_the_search_where_it_was(strategy, tmp_path):
    """Every return -inf: the mean-based strategies that shape by CMA-style weights would
    still step on the flat, all-tied fitness. Their search state after 3 such generations is
    the one after 1 (none of them told the strategy anything)."""
    overrides = [*SMALL, "env_params.max_torque=1e38"]
    states = {}
    for generations in (1, 3):
        out = tmp_path / f"g{generations}"
        evolve("pendulum", generations=generations, out=out, popsize=8, strategy=strategy,
               overrides=overrides)  # fmt: skip
        arrays = checkpoint_arrays(out)
        states[generations] = {k: v for k, v in arrays.items() if k.startswith("state/strategy/")}
    assert states[1].keys() == states[3].keys() and "state/strategy/mean" in states[1]
    for name, value in states[1].items():
        assert value.tobytes() == states[3][name].tobytes(), name


# ---------------------------------------------------------------------------- security
class PlantedPickle:
    """Unpickling creates ``marker``: proof that something ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickles_are_refused_never_loaded(reference, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    marker = tmp_path / "pwned"
    evil = pickle.dumps(PlantedPickle(marker))
    # Next to a good run: reported and ignored.
    for name in ("checkpoint.pkl", "policy.pkl", "state.joblib"):
        (run_dir / name).write_bytes(evil)
    with pytest.warns(UserWarning, match="never loads pickle files") as caught:
        runs.read_run_config(run_dir)
    assert len(caught) == 3
    runs.load_checkpoint(run_dir)
    # In place of the data files: refused as not-esjax data. The previous checkpoint too: a run
    # slow enough to take a periodic checkpoint has one, and a damaged newest falls back to it.
    for name in (runs.CHECKPOINT, runs.PREV_CHECKPOINT, runs.POLICIES["final"], runs.CONFIG):
        (run_dir / name).write_bytes(evil)
    with pytest.raises(ConfigError, match="not an esjax checkpoint"):
        runs.load_checkpoint(run_dir)
    with pytest.raises(ConfigError, match="not an esjax policy"):
        runs.read_policy(run_dir)
    with pytest.raises(ConfigError, match="not valid JSON"), pytest.warns(UserWarning):
        runs.read_run_config(run_dir)
    assert not marker.exists()


# ---------------------------------------------------------------------------- determinism
def test_the_same_command_twice_gives_identical_metrics(tmp_path):
    args = ["evolve", "pendulum", *CLI_SMALL, "--generations", "4", "--out", "run"]
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        procs.append(
            subprocess.Popen(
                [*esjax_command(), *args],
                cwd=tmp_path / name,
                env=cli_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr

    def without_wall_clock(path: Path) -> bytes:
        return re.sub(rb'"wall_s": [-0-9.eE+]+', b'"wall_s": _', path.read_bytes())

    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert without_wall_clock(a / runs.METRICS) == without_wall_clock(b / runs.METRICS)
    assert len(runs.load_metrics(a)) == 4
    for name in runs.POLICIES.values():
        assert (a / name).read_bytes() == (b / name).read_bytes()


# ---------------------------------------------------------------------------- property test
MAYBE_INT = st.one_of(st.integers(-3, 40), st.booleans(), st.text(max_size=3), st.floats(-2, 2))
TASK_KEYS = ("env", "episode_length", "rollouts", "popsize", "generations", "normalize_obs")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _expected_valid(raw: dict) -> bool:
    """An independent oracle for the generated presets."""
    if set(raw) - {*TASK_KEYS, "policy"} or not isinstance(raw.get("env"), str):
        return False
    for key in ("episode_length", "rollouts", "popsize", "generations"):
        if key in raw and not _positive_int(raw[key]):
            return False
    if "normalize_obs" in raw and not isinstance(raw["normalize_obs"], bool):
        return False
    policy = raw.get("policy", {})
    hidden = policy.get("hidden", [64, 64])
    kind = policy.get("kind", "mlp")
    if not all(isinstance(h, int) and not isinstance(h, bool) for h in hidden):
        return False
    return (
        kind in ("mlp", "lstm", "gru")
        and all(h > 0 for h in hidden)
        and (kind == "mlp" or len(hidden) == 1)
    )


task_tables = st.fixed_dictionaries(
    {"env": st.one_of(st.sampled_from(["Pendulum-v1", "CartPole-v1"]), st.integers())},
    optional={
        "episode_length": MAYBE_INT,
        "rollouts": MAYBE_INT,
        "popsize": MAYBE_INT,
        "generations": MAYBE_INT,
        "normalize_obs": st.one_of(st.booleans(), st.integers(0, 1)),
        "policy": st.fixed_dictionaries(
            {},
            optional={
                "kind": st.sampled_from(["mlp", "lstm", "gru", "mpl"]),
                "hidden": st.lists(st.one_of(st.integers(-2, 64), st.booleans()), max_size=3),
            },
        ),
        "episode_lenght": st.integers(1, 5),  # a typo: always rejected
    },
)


@settings(max_examples=50, deadline=None)
@given(raw=task_tables)
def test_task_loader_accepts_and_round_trips_or_rejects_in_one_line(raw):
    try:
        task = parse_task(raw, "gen.toml")
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and message.startswith("gen.toml: ")
        assert not _expected_valid(raw), message
        return
    assert _expected_valid(raw), raw
    table = json.loads(json.dumps(to_dict(task)))  # as config.json stores it
    assert parse_task(table, "config.json") == task
    assert to_dict(parse_task(table, "config.json")) == table
