"""Issue 57: a run or sweep directory is data. Nothing in one runs code the user has not
trusted, follows a link or is read unbounded, and every malformed field is one line, exit 2.

Each repro of the issue is a test here, on copies of one real tiny cartpole run with one file
edited; so are those of the seal's later issues: memory bounded by the run's own shapes, no
write through a hard link, the seal read as data and its key kept private, and the seal
covering what runs (the task and code files a run or sweep recorded when it was made).
Commands run in this process (:func:`cli`), so an exception that escapes the command line's
error handling fails the test as the traceback a user would see; the fuzz test is in
``test_run_fuzz.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from flax import serialization

from esjax._src.run import runs, trust
from esjax._src.run.training import evolve
from esjax._src.specs.config import ConfigError

SMALL = ["episode_length=32", "evaluation.every=1", "evaluation.episodes=2", "test_episodes=4"]


def cli(*args: object) -> tuple[int, str]:
    """``esjax ARGS`` in this process: ``(exit code, stdout and stderr)``."""
    from esjax._src.cli.main import app

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = app([str(a) for a in args], prog_name="esjax", standalone_mode=False)
        except SystemExit as stop:
            code = stop.code
    return int(code or 0), out.getvalue()


def eval_unsealed_copy(run: Path, copy: Path) -> tuple[int, list[str], str]:
    """``esjax eval`` of a copy of ``run`` without its seal, as a run handed over arrives:
    ``(exit code, its error lines, all it printed)``."""
    shutil.copytree(run, copy)
    (copy / trust.SEAL).unlink()
    trust._GRANTED.clear()
    code, output = cli("eval", copy, "--episodes", "2")
    return code, [line for line in output.splitlines() if line.startswith("error:")], output


def assert_one_line(code: int, output: str, *parts: str) -> None:
    assert code == 2, output
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    for part in parts:
        assert part in output, output


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A finished cartpole run made here (so sealed with this process's key)."""
    out = tmp_path_factory.mktemp("made") / "run"
    evolve("cartpole", generations=2, popsize=16, overrides=SMALL, out=out)
    return out


@pytest.fixture(autouse=True)
def forget_grants():
    trust._GRANTED.clear()
    yield
    trust._GRANTED.clear()


@pytest.fixture
def run(made, tmp_path):
    """A copy of the run, as a colleague would hand it over, with a folder beside it whose
    files must never change."""
    copy = tmp_path / "run"
    shutil.copytree(made, copy, symlinks=True)
    (tmp_path / "outside").mkdir()
    return copy


def edit_config(run_dir: Path, **task: object) -> None:
    path = run_dir / runs.CONFIG
    data = json.loads(path.read_text())
    data["task"].update(task)
    path.write_text(json.dumps(data))


EVIL = """
import pathlib
import gymnax
pathlib.Path({marker!r}).write_text("ran")
def make(**kwargs):
    return gymnax.make("CartPole-v1")
"""


def evil_file(folder: Path, marker: Path, name: str = "evil.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(EVIL.format(marker=str(marker))))
    return path


# ---------------------------------------------------------------------------- code execution
@pytest.mark.parametrize("command", ["eval", "render", "resume", "load_policy"])
def test_os_system_in_a_shared_config_runs_nothing(run, tmp_path, command):
    marker = tmp_path / "outside" / "PWNED"
    edit_config(run, env="os:system", env_kwargs={"command": f"touch {marker}"})
    if command == "load_policy":
        from esjax import load_policy

        with pytest.raises(trust.UntrustedCode, match="os:system"):
            load_policy(run)
    else:
        args = {"eval": ["eval", run], "render": ["render", run],
                "resume": ["evolve", "--resume", "--out", run]}[command]  # fmt: skip
        assert_one_line(*cli(*args), "'os:system'", "--trust-code")
    assert not marker.exists()


@pytest.mark.parametrize("command", ["eval", "render", "resume", "load_policy"])
def test_a_python_file_inside_a_shared_run_is_not_run(run, tmp_path, command):
    marker = tmp_path / "outside" / "ran"
    evil = evil_file(run, marker)
    edit_config(run, env=f"{evil}:make", env_kwargs={})
    if command == "load_policy":
        from esjax import load_policy

        with pytest.raises(trust.UntrustedCode):
            load_policy(run)
    else:
        args = {"eval": ["eval", run], "render": ["render", run],
                "resume": ["evolve", "--resume", "--out", run]}[command]  # fmt: skip
        assert_one_line(*cli(*args), "evil.py:make")
    assert not marker.exists()


@pytest.mark.parametrize("name", ["evil.py:make", "evilmod:make"])
def test_code_beside_the_working_directory_is_not_run(run, tmp_path, monkeypatch, name):
    marker = tmp_path / "outside" / "ran"
    evil_file(run, marker, "evilmod.py" if name.startswith("evilmod") else "evil.py")
    edit_config(run, env=name, env_kwargs={})
    monkeypatch.chdir(run)
    assert_one_line(*cli("eval", "."), name)
    assert not marker.exists()


def test_trust_code_is_the_users_say_so(run, tmp_path):
    """With --trust-code the named code runs (the door is there); a run made here needs none."""
    marker = tmp_path / "outside" / "ran"
    evil = evil_file(run, marker)
    edit_config(run, env=f"{evil}:make", env_kwargs={})
    code, output = cli("eval", run, "--trust-code", "--episodes", "2", "--json")
    assert code == 0, output
    assert marker.exists()
    assert json.loads(output.strip().splitlines()[-1])["episodes"] == 2


def test_a_run_made_here_with_its_own_env_file_needs_no_flag(tmp_path):
    marker = tmp_path / "made-marker"
    evil = evil_file(tmp_path, marker, "mine.py")
    task = tmp_path / "mine.toml"
    task.write_text(f'env = "{evil}:make"\nepisode_length = 16\ntest_episodes = 4\n')
    out = tmp_path / "mine"
    evolve(str(task), generations=1, popsize=8, out=out)
    assert (out / trust.SEAL).is_file()
    code, output = cli("eval", out, "--episodes", "2")
    assert code == 0, output
    # The same run copied to another user (another key) is foreign there.
    other = tmp_path / "other.key"
    other.write_text("f" * 64)
    other.chmod(0o600)
    os.environ[trust.KEY_ENV], saved = str(other), os.environ[trust.KEY_ENV]
    try:
        assert_one_line(*cli("eval", out), "mine.py:make")
    finally:
        os.environ[trust.KEY_ENV] = saved


def test_report_does_not_run_a_shared_runs_code(run, tmp_path):
    """report.py tests a run again when its task has no random_return but a solved_return."""
    marker = tmp_path / "outside" / "ran"
    evil = evil_file(run, marker)
    edit_config(run, env=f"{evil}:make", env_kwargs={}, random_return=None, solved_return=100.0)
    assert_one_line(*cli("report", run, "--out", tmp_path / "report"), "evil.py:make")
    summary = json.loads((run / runs.SUMMARY).read_text())
    summary.pop("final_test_return_per_seed", None)
    (run / runs.SUMMARY).write_text(json.dumps(summary))
    edit_config(run, random_return=0.0)
    assert_one_line(*cli("report", run, "--out", tmp_path / "report"), "evil.py:make")
    assert not marker.exists()


@pytest.fixture(scope="module")
def made_sweep(tmp_path_factory):
    from esjax._src.analysis.sweeps import sweep

    out = tmp_path_factory.mktemp("sweep") / "sweep"
    sweep("cartpole", ["strategy_settings.learning_rate=0.05,0.1"], generations=1, popsize=8,
          overrides=SMALL, out=out)  # fmt: skip
    return out


def test_a_shared_sweeps_spec_runs_no_code(made_sweep, tmp_path):
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    marker = tmp_path / "PWNED"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["spec"]["overrides"] = ["env=os:system", f'env_kwargs.command="touch {marker}"']
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    assert_one_line(*cli("sweep", "--resume", "--out", sweep_dir), "'os:system'")
    assert not marker.exists()


def test_a_sweeps_runs_stay_inside_it(made_sweep, run, tmp_path):
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    for bad in (str(run), "../run", ".."):
        record["configurations"][0]["run_dir"] = bad
        (sweep_dir / "sweep.json").write_text(json.dumps(record))
        assert_one_line(*cli("report", sweep_dir, "--out", tmp_path / "r"), "not a folder")
    # A configuration's folder that is a link to a run elsewhere is refused too.
    name = json.loads((made_sweep / "sweep.json").read_text())["configurations"][0]["run_dir"]
    record["configurations"][0]["run_dir"] = name
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    shutil.rmtree(sweep_dir / name)
    (sweep_dir / name).symlink_to(run)
    assert_one_line(*cli("report", sweep_dir, "--out", tmp_path / "r"), "symbolic link")


# ---------------------------------------------------------------------------- links
def test_a_lock_file_link_truncates_nothing(run, tmp_path):
    notes = tmp_path / "outside" / "notes.txt"
    notes.write_text("my notes\n")
    (run / runs.LOCK).unlink()
    (run / runs.LOCK).symlink_to(notes)
    assert_one_line(*cli("evolve", "--resume", "--out", run), "symbolic link")
    assert_one_line(*cli("evolve", "cartpole", "--overwrite", "--out", run), "symbolic link")
    assert notes.read_text() == "my notes\n"


@pytest.mark.parametrize("name", ["fitness.png", "report.png", "episode.gif"])
def test_figures_replace_a_link_rather_than_write_through_it(run, tmp_path, name):
    target = tmp_path / "outside" / "precious"
    target.write_text("precious")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    args = {"fitness.png": ["plot", run], "report.png": ["report", run],
            "episode.gif": ["render", run, "--steps", "3"]}[name]  # fmt: skip
    if name == "report.png":  # a profile is drawn for a task with a threshold
        edit_config(run, solved_return=100.0, random_return=10.0)
    code, output = cli(*args)
    assert code == 0, output
    assert target.read_text() == "precious"
    assert not (run / name).is_symlink() and (run / name).stat().st_size > 0


def test_a_dangling_metrics_link_is_refused_not_created(run, tmp_path):
    target = tmp_path / "outside" / "created.jsonl"
    (run / runs.METRICS).unlink()
    (run / runs.METRICS).symlink_to(target)
    assert_one_line(*cli("evolve", "--resume", "--generations", "3", "--out", run), "link")
    assert not target.exists()


def test_overwrite_removes_only_esjax_files_and_follows_no_link(run, tmp_path):
    folder = tmp_path / "outside" / "data"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    (run / "tensorboard").symlink_to(folder)
    (run / "notes.txt").write_text("mine")
    settings = [part for setting in SMALL for part in ("--set", setting)]
    code, output = cli("evolve", "cartpole", "--overwrite", "--out", run, "--generations", "1",
                       "--popsize", "8", *settings)  # fmt: skip
    assert code == 0, output
    assert (folder / "keep.txt").read_text() == "keep"
    assert (run / "notes.txt").read_text() == "mine"
    assert not (run / "tensorboard").exists()


def test_a_trackers_folder_that_is_a_link_gets_no_event_files(run, tmp_path):
    folder = tmp_path / "outside" / "logs"
    folder.mkdir()
    (run / "tensorboard").symlink_to(folder)
    code, output = cli("evolve", "--resume", "--generations", "3", "--out", run,
                       "--log", "tensorboard")  # fmt: skip
    assert_one_line(code, output, "tensorboard: a symbolic link")
    assert not any(folder.iterdir())


def test_a_sweeps_task_path_that_is_a_fifo_is_refused_not_waited_on(made_sweep, tmp_path):
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    fifo = tmp_path / "task.toml"
    os.mkfifo(fifo)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["spec"]["task"] = str(fifo)
    for recorded in ("task_table", "task_name", "task_source"):  # a sweep from before these
        del record["spec"][recorded]
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    assert_one_line(*cli("sweep", "--resume", "--out", sweep_dir), "task.toml")


# ---------------------------------------------------------------------------- memory
def test_dev_zero_is_refused_before_it_is_read(run):
    (run / "final_policy.msgpack").unlink()
    (run / "final_policy.msgpack").symlink_to("/dev/zero")
    assert_one_line(*cli("eval", run), "final_policy.msgpack")
    (run / runs.CONFIG).rename(run / "config.real")
    (run / runs.CONFIG).symlink_to("/dev/zero")
    assert_one_line(*cli("eval", run), "config.json")


def test_a_huge_policy_file_is_refused_by_its_size(run):
    path = run / "final_policy.msgpack"
    with path.open("r+b") as handle:
        handle.truncate(1 << 40)  # sparse: a terabyte on paper, nothing on disk
    assert_one_line(*cli("eval", run), "more than such a file can be")


def test_a_tasks_test_episodes_go_through_the_memory_check(run, tmp_path):
    edit_config(run, test_episodes=1_000_000_000)
    assert_one_line(*cli("eval", run), "testing 1,000,000,000 episodes")
    out = tmp_path / "new"
    code, output = cli("evolve", "cartpole", "--set", "test_episodes=1000000000", "--out", out)
    assert_one_line(code, output, "testing 1,000,000,000 episodes")
    assert not out.exists()  # refused before training, so no run to resume into the same end


# ---------------------------------------------------------------------------- malformed files
def _repack(path: Path, change) -> None:
    outer = serialization.msgpack_restore(path.read_bytes())
    change(outer)
    path.write_bytes(serialization.msgpack_serialize(outer))


def _inner(change):
    def edit(outer):
        inner = serialization.msgpack_restore(outer["payload"])
        change(inner)
        outer["payload"] = serialization.msgpack_serialize(inner)
        outer["sha256"] = hashlib.sha256(outer["payload"]).hexdigest()

    return edit


def _arrays(change):
    return _inner(lambda inner: change(inner["arrays"]))


POLICY_EDITS = {
    "no sha256": lambda outer: outer.pop("sha256"),
    "string payload": lambda outer: outer.update(payload="text"),
    "inner not a dict": lambda outer: outer.update(
        payload=serialization.msgpack_serialize([1, 2]),
        sha256=hashlib.sha256(serialization.msgpack_serialize([1, 2])).hexdigest(),
    ),
    "truncated inner": lambda outer: outer.update(
        payload=outer["payload"][:20], sha256=hashlib.sha256(outer["payload"][:20]).hexdigest()
    ),
    "text arrays": _arrays(lambda a: a.update(params=np.array([["x"]]))),
    "no params": _arrays(lambda a: a.pop("params")),
    "0-d params": _arrays(lambda a: a.update(params=np.float32(1.0))),
    "mean without std": _arrays(lambda a: a.update(obs_mean=np.zeros((1, 4), np.float32))),
    "wrong-shape stats": _arrays(
        lambda a: a.update(obs_mean=np.zeros((1, 9), np.float32), obs_std=np.ones((1, 9)))
    ),
    "meta not a table": _inner(lambda inner: inner.update(meta="[1, 2]")),
}  # fmt: skip


@pytest.mark.parametrize("edit", list(POLICY_EDITS))
def test_a_malformed_policy_file_is_one_line(run, edit):
    _repack(run / "final_policy.msgpack", POLICY_EDITS[edit])
    assert_one_line(*cli("eval", run), "final_policy.msgpack")


CHECKPOINT_EDITS = {
    "no generation": lambda meta: meta.pop("generation"),
    "no config": lambda meta: meta.pop("config"),
    "empty env_steps": lambda meta: meta.update(env_steps=[]),
    "non-numeric best_eval": lambda meta: meta.update(best_eval=["x"]),
    "negative generation": lambda meta: meta.update(generation=-5),
}


@pytest.mark.parametrize("edit", list(CHECKPOINT_EDITS))
def test_malformed_checkpoint_metadata_is_one_line_and_loses_nothing(run, edit):
    def change(inner):
        meta = json.loads(inner["meta"])
        CHECKPOINT_EDITS[edit](meta)
        inner["meta"] = json.dumps(meta)

    for name in (runs.CHECKPOINT, runs.PREV_CHECKPOINT):
        if (run / name).exists():
            _repack(run / name, _inner(change))
    rows = (run / runs.METRICS).read_text()
    assert_one_line(*cli("evolve", "--resume", "--generations", "4", "--out", run), "checkpoint")
    assert (run / runs.METRICS).read_text() == rows


CONFIG_EDITS = {
    "infinite popsize": (lambda d: d.update(popsize=float("inf")), "popsize"),
    "deep nesting": (lambda d: d.update(scaling=json.loads("[" * 5000 + "]" * 5000)), "deeply"),
    "huge episode_length": (lambda d: d["task"].update(episode_length=10**12), "episode_length"),
    "negative seeds": (lambda d: d.update(seeds=-1), "seeds"),
}


@pytest.mark.parametrize("edit", list(CONFIG_EDITS))
def test_a_malformed_config_is_one_line(run, edit):
    change, part = CONFIG_EDITS[edit]
    path = run / runs.CONFIG
    data = json.loads(path.read_text())
    if edit == "deep nesting":  # json.dumps itself cannot write what it cannot read back
        path.write_text(path.read_text()[:-2] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}")
    else:
        change(data)
        path.write_text(json.dumps(data))
    for args in (["eval", run], ["evolve", "--resume", "--out", run]):
        assert_one_line(*cli(*args), part)


def test_a_huge_episode_length_through_set_leaves_no_run(tmp_path):
    out = tmp_path / "new"
    code, output = cli("evolve", "cartpole", "--set", "episode_length=1000000000000", "--out", out)
    assert_one_line(code, output, "episode_length")
    assert not out.exists()


METRICS_EDITS = {
    "deep nesting": '{"generation": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}",
    "text fitness": '{"generation": 1, "fitness_mean": "abc"}',
    "text generation": '{"generation": "x", "fitness_mean": 1.0}',
    "mixed seed types": '{"generation": 1, "seed": "0", "fitness_mean": 1.0}',
    "no generation": '{"fitness_mean": 1.0}',
}


@pytest.mark.parametrize("edit", list(METRICS_EDITS))
def test_a_malformed_metrics_row_is_one_line(run, edit):
    with (run / runs.METRICS).open("a") as handle:
        handle.write(METRICS_EDITS[edit] + "\n")
    commands = [["plot", run], ["export", run, "--csv"],
                ["evolve", "--resume", "--generations", "3", "--out", run]]  # fmt: skip
    for args in commands:
        code, output = cli(*args)
        if edit == "deep nesting":  # read as a damaged line and skipped, as a torn one is
            assert code == 0, output
        else:
            assert_one_line(code, output, "metrics.jsonl")


def test_a_deeply_nested_summary_or_task_file_is_one_line(run, tmp_path):
    (run / runs.SUMMARY).write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line(*cli("report", run, "--out", tmp_path / "r"), "summary.json")
    task = tmp_path / "deep.toml"
    task.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_one_line(*cli("evolve", task, "--out", tmp_path / "deep"), "deep.toml")


def test_the_parsers_refuse_what_they_cannot_bound(tmp_path):
    from esjax._src.run.files import read_json

    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(ConfigError, match="more than such a file can be"):
        read_json(path, 100)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_json(fifo, 100)  # refused at once: a FIFO's open would wait for a writer


# ---------------------------------------------------------------------------- memory: bounded by
# what the run's own shapes imply, and by what a figure draws


def test_a_huge_checkpoint_is_refused_by_what_the_runs_state_holds(run):
    """Bounded by the run's own shapes, before a byte is read (not by the machine's memory)."""
    for name in (runs.CHECKPOINT, runs.PREV_CHECKPOINT):
        if (run / name).exists():
            with (run / name).open("r+b") as handle:
                handle.truncate(256 * 2**20)  # sparse
    code, output = cli("evolve", "--resume", "--generations", "3", "--out", run)
    assert_one_line(code, output, "checkpoint.msgpack", "more than such a file can be")


def test_a_policy_is_bounded_by_its_tasks_shapes_not_by_the_configs_claim(run):
    edit = json.loads((run / runs.CONFIG).read_text())
    edit["num_dims"] = 2**31 - 1
    (run / runs.CONFIG).write_text(json.dumps(edit))
    with (run / "final_policy.msgpack").open("r+b") as handle:
        handle.truncate(64 * 2**20)  # sparse: a policy of 16 M parameters, for 2 inputs
    assert_one_line(*cli("eval", run), "final_policy.msgpack", "more than such a file can be")


def test_metrics_are_read_as_a_stream_kept_as_much_as_a_figure_draws(run, tmp_path):
    """30,000 rows are drawn from the few a figure needs: memory follows the figure."""
    import tracemalloc

    from esjax._src.analysis import plotting

    rows = "".join(
        json.dumps({"generation": g, "env_steps": g, "fitness_mean": 1.0, "fitness_best": 2.0,
                    "eval_return": 3.0 if g % 10 == 0 else None}) + "\n"
        for g in range(1, 30_001)
    )  # fmt: skip
    (run / runs.METRICS).write_text(rows)
    tracemalloc.start()
    try:
        kept = plotting.curve_rows(run, seeds=1, points=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    training = [row["generation"] for row in kept if "fitness_mean" in row]
    evaluations = [row["generation"] for row in kept if "eval_return" in row]
    assert len(training) <= 65 and len(evaluations) <= 65
    assert training[0] == 1 and training[-1] == 30_000  # the whole run, thinned
    assert evaluations[0] == 10 and evaluations[-1] == 30_000
    assert peak < 4 * 2**20, peak  # the rows alone take about 15 MB
    code, output = cli("plot", run)
    assert code == 0, output


# ---------------------------------------------------------------------------- hard links, the seal
# read as data, the trust key


def test_a_hard_linked_lock_or_metrics_file_is_never_written_through(run, tmp_path):
    notes = tmp_path / "outside" / "notes.txt"
    notes.write_text("my notes\n")
    (run / runs.LOCK).unlink()
    os.link(notes, run / runs.LOCK)
    assert_one_line(*cli("evolve", "--resume", "--out", run), "hard link")
    assert_one_line(*cli("evolve", "cartpole", "--overwrite", "--out", run), "hard link")
    assert notes.read_text() == "my notes\n"
    (run / runs.LOCK).unlink()
    kept = tmp_path / "outside" / "kept.txt"  # a hard link under a name esjax does not write
    kept.write_text("kept\n")
    os.link(kept, run / "kept.txt")
    os.link(notes, run / "linked.jsonl")
    (run / runs.METRICS).unlink()
    os.link(notes, run / runs.METRICS)
    from esjax._src.run.files import append_bytes

    with pytest.raises(ConfigError, match="hard link"):
        append_bytes(run / "linked.jsonl", b"{}\n")
    code, output = cli("evolve", "--resume", "--generations", "3", "--out", run)
    assert code == 0, output
    assert notes.read_text() == "my notes\n" and kept.read_text() == "kept\n"


@pytest.mark.parametrize("sig", [b"\xc3\xa9" * 32 + b"\n", b"g" * 64, b"ab" * 100, b""])
def test_a_malformed_seal_is_no_seal(run, tmp_path, sig):
    """trust.sig is read as data: anything but 64 hex digits is 'not sealed', one line."""
    marker = tmp_path / "outside" / "ran"
    edit_config(run, env=f"{evil_file(run, marker)}:make", env_kwargs={})
    (run / trust.SEAL).write_bytes(sig)
    assert_one_line(*cli("eval", run), "evil.py:make", "--trust-code")
    assert not marker.exists()


def test_the_trust_key_is_named_by_an_absolute_path_and_kept_private(made, tmp_path):
    """A relative ESJAX_TRUST_KEY would be found in the working directory: inside a folder
    holding a run sealed with its own trust.key, that run's code would run."""
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    key = attacker / "trust.key"
    key.write_text("a" * 64)
    key.chmod(0o600)
    run = attacker / "run"
    shutil.copytree(made, run, symlinks=True)
    marker = tmp_path / "ran"
    edit_config(run, env=f"{evil_file(attacker, marker)}:make", env_kwargs={})
    saved = os.environ[trust.KEY_ENV]
    try:
        os.environ[trust.KEY_ENV] = str(key)
        trust.seal_run(run, runs.read_run_config(run).task)  # sealed with the attacker's key
        os.environ[trust.KEY_ENV] = "trust.key"
        with contextlib.chdir(attacker):
            assert_one_line(*cli("eval", "run"), "ESJAX_TRUST_KEY=trust.key", "absolute")
        assert not marker.exists()
        os.environ[trust.KEY_ENV] = str(key)
        key.chmod(0o644)
        assert_one_line(*cli("eval", run), "read or written by others", "chmod 600")
        key.chmod(0o600)
        owner = os.getuid() + 1
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "getuid", lambda: owner)
            assert_one_line(*cli("eval", run), "belongs to another user")
    finally:
        os.environ[trust.KEY_ENV] = saved
    assert not marker.exists()


# ---------------------------------------------------------------------------- the seal covers
# what runs: the task and the code files a run or sweep recorded when it was made.

OWN = """
import gymnax
def make(**kwargs):
    return gymnax.make("CartPole-v1")
"""


def fresh_process(*modules: str, folders: tuple[Path, ...] = ()) -> None:
    """What a new process would have: none of the users' code loaded (the test process loads
    each run's), and none of their folders on the import path."""
    from esjax._src.engine.tasks import forget_shared_rollouts
    from esjax._src.envs import usercode
    from esjax._src.run import imports, training

    usercode._PROVIDED.clear()
    usercode._LOADED.clear()
    usercode._SEALED.clear()
    for name in list(imports._LOADED):  # the helpers the code imported, sealed
        sys.modules.pop(name, None)
    for table in (imports._ROOTS, imports._LOADED, imports._EXPECTED, imports._EXPECTED_BY,
                  imports._IMPORTED_BY, imports._SOURCE_OF):  # fmt: skip
        table.clear()
    forget_shared_rollouts()  # rollouts hold the envs their code made
    training._ENGINES.clear()
    for name in modules:
        sys.modules.pop(name, None)
    for folder in folders:
        while str(folder) in sys.path:
            sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def made_own(tmp_path_factory):
    """``(run, project folder)``: a run of the user's own module ``own_env`` (found in the
    working directory, as the ``esjax`` script finds it), made from its project folder."""
    project = tmp_path_factory.mktemp("project")
    (project / "own_env.py").write_text(OWN)
    (project / "own.toml").write_text('env = "own_env:make"\nepisode_length = 16\n'
                                      "test_episodes = 4\n")  # fmt: skip
    out = tmp_path_factory.mktemp("own") / "run"
    with contextlib.chdir(project):
        evolve("own.toml", generations=1, popsize=8, out=out)
    fresh_process("own_env", folders=(project,))
    return out, project


def test_a_module_found_in_the_working_directory_runs_from_its_file_from_anywhere(
    made_own, tmp_path, monkeypatch
):
    """The run recorded ``own_env``'s file: evaluated from another folder it runs that file
    (it used to be 'no module named'), and a folder holding an own_env.py of its own runs
    nothing of it."""
    run, project = made_own
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    fresh_process("own_env", folders=(project,))
    code, output = cli("eval", run, "--episodes", "2", "--json")
    assert code == 0, output
    marker = tmp_path / "outside" / "ran"
    (tmp_path / "outside").mkdir()
    evil_file(tmp_path, marker, "own_env.py")
    monkeypatch.chdir(tmp_path)
    fresh_process("own_env", folders=(project,))
    code, output = cli("eval", run, "--episodes", "2", "--json")
    assert code == 0, output
    assert not marker.exists()
    recorded = str((project / "own_env.py").resolve())
    assert sys.modules["own_env"].__file__ == recorded
    assert json.loads((run / "code.json").read_text())["code"]["own_env"]["file"] == recorded
    fresh_process("own_env", folders=(project,))


def test_a_run_from_before_code_was_recorded_reads_back_and_its_resume_records_it(
    made_own, tmp_path, monkeypatch
):
    """An older run (sealed over its code's names, no code.json) evaluates as it did; its
    first resume records its code's file, which then runs from any folder."""
    run = tmp_path / "run"
    shutil.copytree(made_own[0], run, symlinks=True)
    project = made_own[1]
    (run / "code.json").unlink()
    trust.seal(run, "run", trust.run_code(runs.read_run_config(run).task))  # as sealed before
    monkeypatch.chdir(project)
    fresh_process("own_env", folders=(project,))
    code, output = cli("eval", run, "--episodes", "2")
    assert code == 0, output
    code, output = cli("evolve", "--resume", "--out", run, "--generations", "2")
    assert code == 0, output
    recorded = json.loads((run / "code.json").read_text())["code"]["own_env"]["file"]
    assert recorded == str((project / "own_env.py").resolve())
    monkeypatch.chdir(tmp_path)
    fresh_process("own_env", folders=(project,))
    code, output = cli("eval", run, "--episodes", "2")
    assert code == 0, output
    fresh_process("own_env", folders=(project,))


def test_a_sweep_resumed_from_another_folder_runs_its_own_task(made_sweep, tmp_path, monkeypatch):
    """A sweep made from ``sw.toml`` in the user's project keeps that task's table: resumed
    from a folder (a clone) with an ``sw.toml`` of its own, that file is never read."""
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["spec"]["task"] = "sw.toml"  # as made by `esjax sweep sw.toml` in the project
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    trust.seal_sweep(sweep_dir, record["spec"])
    clone, marker = tmp_path / "clone", tmp_path / "outside" / "ran"
    clone.mkdir()
    (tmp_path / "outside").mkdir()
    evil = evil_file(clone, marker)
    (clone / "sw.toml").write_text(f'env = "{evil}:make"\nepisode_length = 16\n')
    monkeypatch.chdir(clone)
    code, output = cli("sweep", "--resume", "--out", sweep_dir)
    assert code == 0, output
    assert not marker.exists()


def test_a_sweeps_task_changed_after_the_check_is_not_what_runs(made_sweep, tmp_path, monkeypatch):
    """The race: a task file that names only data while the trust check reads it, and code
    right after. The sweep reads it once; what it checked is what it runs."""
    from esjax._src.specs import presets

    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    (sweep_dir / trust.SEAL).unlink()  # not this user's: only a task naming data may run
    task = tmp_path / "race.toml"
    task.write_text((presets.preset_dir("task") / "cartpole.toml").read_text())
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["spec"]["task"] = str(task)
    for recorded in ("task_table", "task_name", "task_source"):  # a sweep from before these
        record["spec"].pop(recorded, None)
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    marker = tmp_path / "ran"
    evil = evil_file(tmp_path, marker)
    checked = trust.check_sweep

    def then_swapped(*args, **kwargs):
        found = checked(*args, **kwargs)
        task.write_text(f'env = "{evil}:make"\nepisode_length = 16\ntest_episodes = 4\n')
        return found

    monkeypatch.setattr(trust, "check_sweep", then_swapped)
    code, output = cli("sweep", "--resume", "--out", sweep_dir)
    assert code in (0, 2), output
    assert not marker.exists()


def test_an_edited_env_file_is_refused_once_then_sealed_again_by_trust_code(tmp_path):
    """The seal covers the code's content: an edited env file is one line naming it, until
    --trust-code takes it and seals it again; no flag is needed after."""
    marker = tmp_path / "ran"
    env = tmp_path / "mine.py"
    env.write_text(OWN)
    task = tmp_path / "mine.toml"
    task.write_text(f'env = "{env}:make"\nepisode_length = 16\ntest_episodes = 4\n')
    out = tmp_path / "run"
    evolve(str(task), generations=1, popsize=8, out=out)
    fresh_process()
    env.write_text(OWN + f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    assert_one_line(*cli("eval", out), f"{env.resolve()} has changed", "--trust-code")
    assert not marker.exists()
    code, output = cli("eval", out, "--trust-code", "--episodes", "2")
    assert code == 0, output
    assert marker.exists()
    marker.unlink()
    fresh_process()
    code, output = cli("evolve", "--resume", "--out", out, "--generations", "2")
    assert code == 0, output
    assert marker.exists()  # the new content, sealed by this user's --trust-code


def test_an_exception_while_importing_a_users_code_is_one_line(tmp_path, monkeypatch):
    """At the env door and the policy door alike: one line naming the code, exit 2."""
    (tmp_path / "broken_env.py").write_text("raise RuntimeError('the env module broke')\n")
    (tmp_path / "broken_policy.py").write_text("import no_such_dependency_here\n")
    env_task = tmp_path / "env.toml"
    env_task.write_text('env = "broken_env:make"\nepisode_length = 16\n')
    policy_task = tmp_path / "policy.toml"
    policy_task.write_text('env = "CartPole-v1"\n[policy]\nkind = "broken_policy.py:make"\n')
    monkeypatch.chdir(tmp_path)
    code, output = cli("evolve", env_task, "--out", tmp_path / "a")
    assert_one_line(code, output, "broken_env:make", "RuntimeError: the env module broke")
    code, output = cli("evolve", policy_task, "--out", tmp_path / "b")
    assert_one_line(code, output, "broken_policy.py:make", "no_such_dependency_here")
    assert "Traceback" not in output
    sys.modules.pop("broken_env", None)


def test_the_repros_from_the_console_script(made_sweep, tmp_path):
    """The seal's repros as a user types them: a sweep resumed from a clone with its own
    sw.toml, a hard-linked run.lock, a malformed trust.sig."""
    from test_cli import assert_clean_error
    from test_cli import esjax as script

    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["spec"]["task"] = "sw.toml"
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    trust.seal_sweep(sweep_dir, record["spec"])
    clone, marker = tmp_path / "clone", tmp_path / "ran"
    clone.mkdir()
    evil = evil_file(clone, marker)
    (clone / "sw.toml").write_text(f'env = "{evil}:make"\nepisode_length = 16\n')
    done = script("sweep", "--resume", "--out", sweep_dir, cwd=clone)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    run = sweep_dir / record["configurations"][0]["run_dir"]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (run / runs.LOCK).unlink()
    os.link(notes, run / runs.LOCK)
    assert_clean_error(script("evolve", "--resume", "--out", run, cwd=tmp_path), "hard link")
    assert notes.read_text() == "my notes\n"
    edit_config(run, env=f"{evil}:make")
    (run / trust.SEAL).write_bytes(b"\xff" * 64)
    assert_clean_error(script("eval", run, cwd=tmp_path), "--trust-code")
    assert not marker.exists()


# ---------------------------------------------------------------------------- issue 76: all of a
# run's code sealed, every file of a run checked where it is read, work bounded by the run's own
# shapes, foreign text shown as text; each case from the console script.

HELPED = """
import os

import gymnax
import hbeside
from hpkg import core


def make(**kwargs):
    if os.environ.get("ESJAX_TEST_EXTRA"):  # an import its run did not see when it was sealed
        import hpkg.extra
    core.hello()
    return gymnax.make("CartPole-v1")
"""
HELPED_MODULES = ("helped_env", "hpkg", "hpkg.core", "hpkg.extra", "hbeside")


@pytest.fixture(scope="module")
def made_helped(tmp_path_factory):
    """``(run, project folder)``: a run of ``helped_env``, whose module imports a package of
    helpers beside it (``hpkg``) and a module beside it (``hbeside``)."""
    project = tmp_path_factory.mktemp("helped")
    (project / "helped_env.py").write_text(HELPED)
    (project / "hbeside.py").write_text("X = 1\n")
    (project / "hpkg").mkdir()
    (project / "hpkg" / "__init__.py").write_text('"""Helpers."""\n')
    (project / "hpkg" / "core.py").write_text("def hello():\n    return 1\n")
    (project / "hpkg" / "extra.py").write_text("Y = 2\n")
    (project / "helped.toml").write_text('env = "helped_env:make"\nepisode_length = 16\n'
                                         "test_episodes = 4\n")  # fmt: skip
    out = tmp_path_factory.mktemp("helped-run") / "run"
    with contextlib.chdir(project):
        evolve("helped.toml", generations=1, popsize=8, out=out)
    fresh_process(*HELPED_MODULES, folders=(project,))
    return out, project


def marker_code(marker: Path) -> str:
    return f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"


def test_a_helper_in_a_package_beside_the_code_is_sealed_with_it(made_helped, tmp_path):
    """Case 1: the run recorded the modules its code imported; code appended to one in a
    package beside the recorded file is one line naming that file, and runs nowhere."""
    from test_cli import assert_clean_error
    from test_cli import esjax as script

    run, project = made_helped
    imported = json.loads((run / "code.json").read_text())["code"]["helped_env"]["imports"]
    assert sorted(imported) == ["hbeside", "hpkg", "hpkg.core"]
    core, marker = project / "hpkg" / "core.py", tmp_path / "ran"
    original = core.read_text()
    try:
        core.write_text(original + marker_code(marker))
        failed = script("eval", run, "--episodes", "2", cwd=tmp_path)
        assert_clean_error(failed, f"{core.resolve()} has changed", "--trust-code")
        assert not marker.exists()
    finally:
        core.write_text(original)
    done = script("eval", run, "--episodes", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_module_the_code_did_not_import_when_sealed_is_refused(
    made_helped, tmp_path, monkeypatch
):
    """What the sealed code imports beyond its records (here, a branch an environment
    variable takes) is refused in one line, not run."""
    run, project = made_helped
    monkeypatch.setenv("ESJAX_TEST_EXTRA", "1")
    monkeypatch.chdir(tmp_path)
    fresh_process(*HELPED_MODULES, folders=(project,))
    try:
        code, output = cli("eval", run, "--episodes", "2")
        assert_one_line(code, output, str((project / "hpkg" / "extra.py").resolve()),
                        "did not record it")  # fmt: skip
        assert "hpkg.extra" not in sys.modules
    finally:
        fresh_process(*HELPED_MODULES, folders=(project,))


def test_a_run_sealed_before_imports_were_recorded_reads_back_and_its_resume_records_them(
    made_helped, tmp_path, monkeypatch
):
    """An older run's code.json has no imports: it evaluates as it did, a reader writes
    nothing, and its first resume records what its code imports."""
    from esjax._src.run import codefiles

    run, project = tmp_path / "run", made_helped[1]
    shutil.copytree(made_helped[0], run, symlinks=True)
    document = json.loads((run / "code.json").read_text())
    del document["code"]["helped_env"]["imports"]
    (run / "code.json").write_text(json.dumps(document))
    records = codefiles.read_records(run)
    trust.seal(run, "run", trust.run_code(runs.read_run_config(run).task, records))  # as before
    monkeypatch.chdir(tmp_path)
    fresh_process(*HELPED_MODULES, folders=(project,))
    code, output = cli("eval", run, "--episodes", "2")
    assert code == 0, output
    assert "imports" not in json.loads((run / "code.json").read_text())["code"]["helped_env"]
    fresh_process(*HELPED_MODULES, folders=(project,))
    code, output = cli("evolve", "--resume", "--out", run, "--generations", "2")
    assert code == 0, output
    imported = json.loads((run / "code.json").read_text())["code"]["helped_env"]["imports"]
    assert sorted(imported) == ["hbeside", "hpkg", "hpkg.core"]
    fresh_process(*HELPED_MODULES, folders=(project,))


def plant_pyc(source: Path, marker: Path) -> Path:
    """A ``__pycache__`` entry for ``source`` whose header carries its size and time, as
    Python checks them, holding the source's code plus a line that writes ``marker``."""
    import importlib.util
    import marshal
    import struct

    info = source.stat()
    code = compile(source.read_text() + marker_code(marker), str(source), "exec")
    header = struct.pack("<III", 0, int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF)
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(importlib.util.MAGIC_NUMBER + header + marshal.dumps(code))
    return cached


def test_a_planted_pycache_of_recorded_code_never_runs(made_helped, tmp_path):
    """Case 2: a .pyc beside unchanged recorded sources, which Python itself would run; the
    run's code runs from the sources it checked."""
    import subprocess

    from test_cli import cli_env
    from test_cli import esjax as script

    run, project = made_helped
    marker = tmp_path / "ran"
    names = ("helped_env.py", "hbeside.py", "hpkg/__init__.py", "hpkg/core.py")
    planted = [plant_pyc(project / name, marker) for name in names]
    try:
        python = subprocess.run([sys.executable, "-c", "import hbeside"], cwd=project,
                                env=cli_env(), capture_output=True, text=True)  # fmt: skip
        assert python.returncode == 0 and marker.exists(), python.stderr  # the .pyc is live
        marker.unlink()
        done = script("eval", run, "--episodes", "2", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert not marker.exists()
    finally:
        for path in planted:
            path.unlink()


def test_env_params_the_env_cannot_simulate_or_draw_are_one_line_for_every_command(run, tmp_path):
    """Case 3: a config.json's env_params go through the guard --param goes through, for
    every command that reads the run; --set refuses the same value before a run exists."""
    from test_cli import assert_clean_error
    from test_cli import esjax as script

    edit_config(run, env_params={"masspole": -5})
    rendered = script("render", run, "--steps", "3", cwd=tmp_path)
    assert_clean_error(rendered, "env_params: masspole = -5", "cannot simulate or draw it")
    for args in (["eval", run], ["report", run, "--out", tmp_path / "r"], ["plot", run],
                 ["evolve", "--resume", "--out", run, "--generations", "3"]):  # fmt: skip
        assert_one_line(*cli(*args), "masspole = -5")
    out = tmp_path / "new"
    code, output = cli("evolve", "cartpole", "--set", "env_params.masspole=-5", "--out", out)
    assert_one_line(code, output, "masspole = -5", "cannot simulate or draw it")
    assert not out.exists()


def test_a_report_of_a_run_claiming_more_seeds_than_its_policies_hold_is_one_line(run, tmp_path):
    """Case 4: config.json claims 500,000 seeds and summary.json holds as many returns (5 MB);
    the run's final policy holds one, and the report says so at once."""
    import time

    from test_cli import assert_clean_error
    from test_cli import esjax as script

    config = json.loads((run / runs.CONFIG).read_text())
    config["seeds"] = 500_000
    (run / runs.CONFIG).write_text(json.dumps(config))
    summary = json.loads((run / runs.SUMMARY).read_text())
    for key, value in list(summary.items()):
        if key.endswith("_per_seed"):
            summary[key] = value[:1] * 500_000
    (run / runs.SUMMARY).write_text(json.dumps(summary))
    start = time.perf_counter()
    done = script("report", run, "--out", tmp_path / "r", cwd=tmp_path)
    print(f"report of the 500,000-seed claim: {time.perf_counter() - start:.1f} s")
    assert_clean_error(done, "says 500,000 seeds, its final policy holds 1")
    assert not (tmp_path / "r").exists()


def test_a_cell_of_more_seeds_than_a_report_resamples_is_capped_with_a_note(monkeypatch):
    from esjax._src.analysis import reporting

    monkeypatch.setattr(reporting, "MAX_SEEDS", 4)
    returns = tuple(float(i) for i in range(10))
    cell = reporting.Cell("cartpole", "CartPole-v1", ("run",), tuple(range(10)), returns,
                          (True,) * 10, 5.0, 0.0, 4, "{}")  # fmt: skip
    notes: list[str] = []
    capped = reporting._capped({"open_es": {"cartpole": cell}}, notes)["open_es"]["cartpole"]
    assert capped.returns == (0.0, 1.0, 2.0, 3.0) and capped.seed_ids == (0, 1, 2, 3)
    assert capped.solved == (True,) * 4
    assert notes == ["open_es on cartpole: 10 seeds; the report uses the first 4"]


ANSI = "\x1b[31mred\x1b[0m\x1b]0;a new title\x07"


def assert_shown_as_text(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output, repr(output)
    assert "\\x1b[31mred" in output and "\\x1b]0;a new title\\x07" in output, output


def test_foreign_text_reaches_neither_the_terminal_nor_a_spreadsheet_raw(made_sweep, run, tmp_path):
    """Case 5: an ANSI colour and an OSC title in a sweep's configuration, a formula as a
    metrics key, and a solved_return no axis can hold."""
    import csv

    from test_cli import esjax as script

    from esjax._src.analysis import plotting

    sweep_dir = tmp_path / "sweep"
    shutil.copytree(made_sweep, sweep_dir, symlinks=True)
    record = json.loads((sweep_dir / "sweep.json").read_text())
    record["configurations"][0]["overrides"] = [f"strategy_settings.learning_rate=0.05{ANSI}"]
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    done = script("report", sweep_dir, "--out", tmp_path / "r", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert_shown_as_text(done.stdout + done.stderr)
    assert_shown_as_text((tmp_path / "r" / "report.md").read_text())
    rows = [json.loads(line) for line in (run / runs.METRICS).read_text().splitlines()]
    rows[0]['=HYPERLINK("http://example.com","open")'] = 1.0
    (run / runs.METRICS).write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = script("export", run, "--csv", "--out", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = list(csv.reader(io.StringIO(done.stdout)))
    assert '\'=HYPERLINK("http://example.com","open")' in table[0]
    for cell in (cell for row in table for cell in row):
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        assert not cell.startswith("-") or float(cell) < 0, cell  # a negative number only
    edit_config(run, solved_return=1e308)
    done = script("plot", run, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    figure = plotting._fitness_figure(plotting.group_runs([run]), "generations", None, 1e308)
    assert all(max(map(abs, ax.get_ylim())) < 1e6 for ax in figure.axes)  # the curves' scale
    rows[0]["fitness_mean"], rows[0]["fitness_best"] = 1e308, -1e308  # no axis holds these
    (run / runs.METRICS).write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, output = cli("plot", run)
    assert_one_line(code, output, "fitness.png: cannot draw these numbers")


def test_esjax_list_shows_a_task_files_description_as_text(tmp_path):
    """Case 5: a task preset whose description holds an ANSI colour and an OSC title, listed
    by a copy of esjax whose task folder holds it."""
    from test_cli import REPO
    from test_cli import esjax as script

    copy = tmp_path / "copy"
    shutil.copytree(REPO / "esjax", copy / "esjax", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "strategies", copy / "strategies")
    (copy / "tasks").mkdir()
    (copy / "tasks" / "crafted.toml").write_text(
        f'description = {json.dumps(ANSI)}\nenv = "CartPole-v1"\n'  # TOML reads JSON's escapes
    )
    done = script("list", cwd=tmp_path, extra_path=str(copy))
    assert done.returncode == 0, done.stderr
    assert "crafted" in done.stdout
    assert_shown_as_text(done.stdout + done.stderr)


def test_a_library_warning_is_one_line(capsys):
    """Case 5: another library's warning, as the console script shows every warning."""
    from esjax._src.cli import terminal

    warning = RuntimeWarning("overflow encountered in multiply\n  steps = self._steps * scale")
    terminal.show_warning(warning, RuntimeWarning, "/x/site-packages/matplotlib/ticker.py", 2247)
    shown = capsys.readouterr().err.strip().splitlines()
    assert shown == ["warning: RuntimeWarning in matplotlib: overflow encountered in multiply"]
