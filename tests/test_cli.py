"""The ``esjax`` console script, driven in a subprocess as a user would.

One tiny evolve run (popsize 8, 16-step episodes, 3 generations) is shared by the tests that
inspect a run directory; every error path is checked for its exit code, its message and the
absence of a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from esjax._src.envs.suites import suite_rows
from esjax._src.specs import presets

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = (
    "--popsize", "8", "--rollouts", "1",
    "--set", "episode_length=16", "--set", "evaluation.every=1",
    "--set", "evaluation.episodes=4", "--set", "solved_return=-5000",
)  # fmt: skip
TINY = (*SMALL, "--generations", "3")


def esjax_command() -> list[str]:
    """The installed console script next to this interpreter, else
    ``python -m esjax._src.cli.main``."""
    script = Path(sys.executable).parent / ("esjax.exe" if os.name == "nt" else "esjax")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "esjax._src.cli.main"]


def cli_env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="200", TERM="dumb", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def esjax(
    *args: str, cwd: Path, timeout: float = 300, extra_path: str | None = None
) -> subprocess.CompletedProcess:
    """The console script in ``cwd``; ``extra_path`` goes first on its ``PYTHONPATH``."""
    env = cli_env()
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([extra_path, env["PYTHONPATH"]])
    return subprocess.run(
        [*esjax_command(), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_clean_error(result: subprocess.CompletedProcess, *parts: str, code: int = 2) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for part in parts:
        assert part in lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished tiny pendulum run: ``(run_dir, completed process, seconds it took)``."""
    work = tmp_path_factory.mktemp("cli")
    run_dir = work / "runs" / "tiny"
    start = time.perf_counter()
    result = esjax("evolve", "pendulum", *TINY, "--out", run_dir, cwd=work)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir, result, elapsed


# ---------------------------------------------------------------------------- evolve
def test_evolve_writes_a_run_directory_with_a_plot(run):
    run_dir, _, elapsed = run
    print(f"tiny evolve run, process start to exit: {elapsed:.1f} s")
    for name in ("config.json", "metrics.jsonl", "fitness.png"):
        assert (run_dir / name).is_file(), name
    config = json.loads((run_dir / "config.json").read_text())
    assert config["popsize"] == 8
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(row["generation"] for row in metrics) == 3
    assert any(row.get("eval_return") is not None for row in metrics)
    png = (run_dir / "fitness.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 20_000


def test_evolve_reports_progress_and_a_summary(run):
    run_dir, result, _ = run
    out = result.stdout
    assert "gen 3/3" in out  # progress lines when stdout is not a terminal
    assert "steps/s" in out
    for field in ("run directory", "generations", "env steps", "test return", "fitness plot"):
        assert field in out
    assert str(run_dir) in out
    assert "Solved: test return" in out  # solved_return=-5000 is always reached


def test_another_strategy_says_in_one_line_which_task_settings_it_drops(tmp_path):
    """pendulum's [strategy_settings] are open_es's: a run with SNES (for which the task has no
    table) says so in one warning line, and runs (issue 67)."""
    result = esjax("evolve", "pendulum", "--strategy", "snes", *SMALL, "--generations", "1",
                   "--out", tmp_path / "run", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("warning: tasks/pendulum.toml: "), line
    assert "lr_decay=0.985" in line and "[strategy_settings.snes]" in line
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["strategy"]["name"] == "snes"
    assert config["strategy"]["settings"]["lr_decay"] == 1.0  # the sgd optimizer's, not the task's


def test_existing_run_directory_is_never_overwritten(run):
    run_dir, _, _ = run
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    result = esjax("evolve", "pendulum", *TINY, "--out", run_dir, cwd=run_dir.parent)
    assert_clean_error(result, str(run_dir), "--resume", "--overwrite")
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before


# ---------------------------------------------------------------------------- eval, plot, render
def test_eval_json(run):
    run_dir, _, _ = run
    result = esjax("eval", run_dir, "--episodes", "4", "--json", cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["episodes"] == 4
    assert record["min"] <= record["mean"] <= record["max"]
    assert record["std"] >= 0
    assert -16 * 16.3 <= record["min"] <= 0  # pendulum reward per step lies in [-16.3, 0]


def test_plot_several_runs_and_x_axes(run, tmp_path):
    run_dir, _, _ = run
    out = tmp_path / "compare.png"
    result = esjax("plot", run_dir, run_dir, "--x", "env_steps", "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
    bad = esjax("plot", run_dir, "--x", "steps", cwd=tmp_path)  # a usage error
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: esjax plot: Invalid value for '--x': Value error, 'steps' is not one of "
        "'generations', 'env_steps', 'wall_s'. (see `esjax plot --help`)"
    ]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["bogus"], "error: esjax: No such command 'bogus'."),
        (["evolve", "pendulum", "--sett", "x=1"], "error: esjax evolve: No such option: --sett"),
        (["evolve", "pendulum", "--popsize", "abc"], "error: esjax evolve: Invalid value for"),
    ],
)
def test_usage_errors_are_one_line(args, expected, tmp_path):
    result = esjax(*args, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_render_gif(run, tmp_path):
    run_dir, _, _ = run
    out = tmp_path / "long.gif"
    result = esjax(
        "render", run_dir, "--steps", "6", "--param", "l=1.6", "--out", out, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    bad = esjax("render", run_dir, "--param", "length=2", "--out", out, cwd=tmp_path)
    assert_clean_error(bad, "'length'", "valid")
    bad = esjax("render", run_dir, "--param", "g=nan", "--out", out, cwd=tmp_path)
    assert_clean_error(bad, "--param 'g=nan'", "finite")
    # A value the env cannot simulate or draw is the same one line as from a task or a run.
    bad = esjax("render", run_dir, "--steps", "2", "--param", "l=0", "--out", out, cwd=tmp_path)
    assert_clean_error(bad, "--param: l = 0: Pendulum-v1 cannot simulate or draw it")
    # A negative mass flips the actuator (pendulum-sign trains on it): it is drawn.
    flipped = esjax("render", run_dir, "--steps", "2", "--param", "m=-1", "--out", out,
                    cwd=tmp_path)  # fmt: skip
    assert flipped.returncode == 0, flipped.stderr


# ---------------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_checkpoints_and_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "interrupted"
    args = [*SMALL, "--generations", "100000", "--out", str(run_dir)]
    proc = subprocess.Popen(
        [*esjax_command(), "evolve", "pendulum", *args],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(240, proc.kill)  # readline() below has no timeout of its own
    watchdog.start()
    try:
        first = proc.stdout.readline()  # the first progress line: training has started
        assert first.startswith("gen "), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    assert "--resume" in stderr
    done = max(
        json.loads(line)["generation"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    )
    # as the message says: only the run directory is needed to resume
    resumed = esjax(
        "evolve", "--resume", "--out", run_dir, "--generations", done + 2, cwd=tmp_path
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["generation"] for row in rows] == list(range(1, done + 3))


# ---------------------------------------------------------------------------- errors, list, help
def test_unknown_task_lists_valid_names(tmp_path):
    result = esjax("evolve", "pendulm", cwd=tmp_path)
    assert_clean_error(result, "unknown task 'pendulm'", "did you mean 'pendulum'")
    for name in presets.names("task"):
        assert name in result.stderr


def test_unknown_strategy_lists_valid_names(tmp_path):
    result = esjax("evolve", "pendulum", *TINY, "--strategy", "no_such_es", cwd=tmp_path)
    assert_clean_error(result, "no_such_es")
    for name in presets.names("strategy"):
        assert name in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_override_and_bad_run_directory(tmp_path):
    result = esjax("evolve", "pendulum", "--set", "polcy.hidden=[8]", cwd=tmp_path)
    assert_clean_error(result, "'polcy'", "did you mean 'policy'")
    result = esjax("evolve", "pendulum", "--set", "rollouts=zero", cwd=tmp_path)
    assert_clean_error(result, "rollouts", "expected an integer")
    assert_clean_error(esjax("eval", tmp_path / "nope", cwd=tmp_path), "no such run directory")
    assert_clean_error(esjax("render", tmp_path, cwd=tmp_path), "not a run directory")


def test_task_is_required_unless_resuming(tmp_path):
    assert_clean_error(esjax("evolve", cwd=tmp_path), "missing TASK")
    assert_clean_error(esjax("evolve", "--resume", cwd=tmp_path), "--out")
    result = esjax("evolve", "--resume", "--out", tmp_path / "none", cwd=tmp_path)
    assert_clean_error(result, "none")


def test_a_task_file_path_is_validated(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('env = "Pendulum-v1"\nepisode_lenght = 16\n')
    result = esjax("evolve", path, cwd=tmp_path)
    assert_clean_error(result, str(path), "did you mean 'episode_length'")
    path.write_text('env = "Pendulum-v2"\n')
    result = esjax("evolve", path, "--out", tmp_path / "run", cwd=tmp_path)
    assert_clean_error(result, str(path), "'Pendulum-v2'", "did you mean 'Pendulum-v1'")
    assert not (tmp_path / "run").exists()


def test_usage_errors_exit_2(tmp_path):
    result = esjax("evolve", "pendulum", "--popsize", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_list_shows_tasks_and_strategies(tmp_path):
    start = time.perf_counter()
    result = esjax("list", cwd=tmp_path)
    print(f"esjax list: {time.perf_counter() - start:.2f} s")
    assert result.returncode == 0, result.stderr
    for kind in ("task", "strategy"):
        for name, description in presets.describe(kind):
            assert name in result.stdout
            assert description[:30] in result.stdout
    lines = result.stdout.splitlines()
    for name, strategies, _ in presets.task_rows():  # the strategies each task has settings for
        row = next(line for line in lines if line.split() and line.split()[0] == name)
        assert ", ".join(strategies) in row, row
    for _, extra, example, installed, _ in suite_rows():  # each suite, installed or what to install
        assert example in result.stdout
        assert ("yes" if installed else f'pip install "esjax[{extra}]"') in result.stdout


HELP = {
    "": ["evolve", "eval", "plot", "render", "list"],
    "evolve": ["TASK", "--strategy", "--popsize", "--generations", "--rollouts", "--seed",
               "--seeds", "--out", "--resume", "--overwrite", "--set"],
    "eval": ["RUN", "--episodes", "--json", "--split", "--which", "--seed", "--grid", "--grid-axis",
             "--out", "--overwrite", "NAME=LOW:HIGH:COUNT"],
    "plot": ["RUN", "--x", "--out", "--title", "env_steps", "wall_s"],
    "render": ["RUN", "--out", "--seed", "--split", "--param", "--steps", "--fps", "--which"],
    "list": [],
}  # fmt: skip


def test_the_command_line_and_the_specs_import_without_jax(tmp_path):
    """``esjax --help`` and argument errors cost no JAX start-up: the CLI loads JAX on first use."""
    code = (
        "import sys\nimport esjax, esjax._src.cli.main, esjax._src.specs.config\n"
        "import esjax._src.specs.presets\n"
        "print(sorted({'jax', 'flax', 'evosax', 'gymnax'} & set(sys.modules)))\n"
        "from esjax import evolve, sweep, PopulationRollout, SavedPolicy, policies\n"
        "import esjax._src.run.training\n"
        "print(callable(esjax.evolve), evolve is esjax.evolve, 'sweep' in dir(esjax))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True True True"]


def test_top_level_help_from_the_console_script(tmp_path):
    result = esjax("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Usage: esjax" in result.stdout
    for word in [*HELP[""], "Examples", "esjax evolve pendulum"]:
        assert word in result.stdout, word


@pytest.mark.parametrize("command", list(HELP))
def test_help_is_complete_with_an_example(command):
    from typer.testing import CliRunner

    from esjax._src.cli.main import app

    runner = CliRunner()
    args = [*filter(None, [command]), "--help"]
    result = runner.invoke(app, args, prog_name="esjax", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Usage: esjax" in result.output
    assert "Examples" in result.output
    assert f"esjax {command}".strip() in result.output.split("Examples", 1)[1]
    for word in HELP[command]:
        assert word in result.output, word


def test_a_file_the_command_cannot_use_is_one_line_and_exit_2(tmp_path):
    """Where --out points into a folder that cannot be made, or at a directory: the operating
    system's reason with the path, not a traceback."""
    import typer

    from esjax._src.cli.terminal import handles_errors

    @handles_errors
    def writes_into_a_file_as_a_folder():
        (tmp_path / "file").write_text("x")
        (tmp_path / "file" / "out.png").write_text("y")

    with pytest.raises(typer.Exit) as stopped:
        writes_into_a_file_as_a_folder()
    assert stopped.value.exit_code == 2


def test_the_baseline_choices_are_the_configs():
    from esjax._src.cli.options import Baseline
    from esjax._src.specs.config import BASELINES

    assert [choice.value for choice in Baseline] == list(BASELINES)
