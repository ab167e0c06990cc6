"""README's command-line tour, every ``esjax`` command in its bash blocks, run at tiny sizes.

The tour is what a new user copies first, and nothing else runs it as written: a renamed
option, preset or run file would break it silently. Each command runs in this process (as
``tests/test_run_as_data.py`` does), in README's order and in one working directory, so a
command reads the runs the earlier ones wrote. Sizes are shrunk by rules per subcommand
(:data:`SHRINKERS`); a subcommand without a rule fails the test rather than being skipped.

The guides' commands and every Python block of README and the guides run by the same rules in
``tests/test_guides.py``.

A block titled as a file is written into that directory first, as the reader writes it. A few
commands cannot run as written here: they read a file or run no earlier command makes.
:data:`PREPARED` names each such README line and what is made for it first; an entry whose
line is no longer in README fails too, so the list cannot go stale. A command whose optional
extra is not installed must fail in one line naming the extra (:data:`EXTRA_MODULES`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)

# Upper bounds on sizes README gives, and the sizes added where it gives none.
CAPS = {"--seeds": 2, "--popsize": 16, "--generations": 2, "--rollouts": 2, "--episodes": 4}
# The generations a resume runs to, at most: two more than a tiny run's.
RESUMED = 4
TINY_RUN = {"--popsize": "16", "--generations": "2", "--rollouts": "2"}
TINY_TASK = {
    "episode_length": "16",
    "evaluation.every": "1",
    "evaluation.episodes": "2",
    "test_episodes": "2",
}
# The package each optional extra a command needs provides (a --log value).
EXTRA_MODULES = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
}


def readme_commands(text: str) -> list[tuple[str, ...]]:
    """The arguments of each ``esjax`` command in README's bash blocks, in order.

    Continued lines are joined, ``# comments`` dropped, and a line of several commands joined
    by ``&&`` (the install line) gives each one that starts with ``esjax``.
    """
    commands = []
    for block in BASH_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            segments: list[list[str]] = [[]]
            for word in shlex.split(line, comments=True):
                if word == "&&":
                    segments.append([])
                else:
                    segments[-1].append(word)
            commands += [tuple(s[1:]) for s in segments if s[:1] == ["esjax"]]
    return commands


def readme_line(args: tuple[str, ...]) -> str:
    return " ".join(["esjax", *args])


def cli(args: list[str]) -> tuple[int, str]:
    """``esjax ARGS`` in this process: ``(exit code, stdout and stderr)``."""
    from esjax._src.cli.main import app

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = app(args, prog_name="esjax", standalone_mode=False)
        except SystemExit as stop:
            code = stop.code
    return int(code or 0), out.getvalue()


# ---------------------------------------------------------------------------- tiny sizes
def capped(args: list[str]) -> list[str]:
    """``args`` with each size in :data:`CAPS` lowered to its cap."""
    out = list(args)
    for i, word in enumerate(out[:-1]):
        if word in CAPS and out[i + 1].isdigit():
            out[i + 1] = str(min(int(out[i + 1]), CAPS[word]))
    return out


def tiny_run(args: list[str]) -> list[str]:
    """An ``evolve`` or ``sweep``: few members, generations and steps; a resume keeps the run's
    own sizes and goes :data:`RESUMED` generations further at most."""
    if "--resume" in args:
        out = list(args)
        for i, word in enumerate(out[:-1]):
            if word in ("--generations", "-g") and out[i + 1].isdigit():
                out[i + 1] = str(min(int(out[i + 1]), RESUMED))
        return out
    out = capped(args)
    for option, value in TINY_RUN.items():
        out += [] if option in out else [option, value]
    given = {out[i + 1].split("=")[0] for i, word in enumerate(out[:-1]) if word == "--set"}
    for key, value in TINY_TASK.items():
        out += [] if key in given else ["--set", f"{key}={value}"]
    if out[0] == "sweep" and "--episodes" not in out:
        out += ["--episodes", "2"]
    return out


def tiny_eval(args: list[str]) -> list[str]:
    out = capped(args)
    return out if "--episodes" in out else [*out, "--episodes", "4"]


def with_option(option: str, value: str) -> Callable[[list[str]], list[str]]:
    def shrink(args: list[str]) -> list[str]:
        return args if option in args else [*args, option, value]

    return shrink


def as_written(args: list[str]) -> list[str]:
    return args


SHRINKERS: dict[str, Callable[[list[str]], list[str]]] = {
    "list": as_written,
    "evolve": tiny_run,
    "sweep": tiny_run,
    "eval": tiny_eval,
    "plot": as_written,
    "export": as_written,
    "render": with_option("--steps", "8"),
    "report": with_option("--reps", "100"),
}


# ---------------------------------------------------------------------------- what README assumes
# README line -> what is made before it runs (in the working directory).
PREPARED: dict[str, Callable[[Path], None]] = {}


def missing_extra(args: list[str]) -> str | None:
    """The package of an optional extra the command needs and this environment lacks."""
    for need in [args[i + 1] for i, word in enumerate(args[:-1]) if word == "--log"]:
        module = EXTRA_MODULES.get(need)
        if module is not None and importlib.util.find_spec(module) is None:
            return module
    return None


COMMANDS = readme_commands(README.read_text())


# A block titled as a file (```toml title="my_net_task.toml"```): one README has the reader write.
TITLED_BLOCK = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```', re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One working directory for the whole tour: later commands read earlier runs, and the
    files README has the reader write are there from the start."""
    folder = tmp_path_factory.mktemp("tour")
    for name, body in TITLED_BLOCK.findall(README.read_text()):
        (folder / name).write_text(body)
    return folder


def test_readme_has_a_tour():
    assert len(COMMANDS) >= 10, COMMANDS
    assert ("evolve", "pendulum") in COMMANDS  # the install line's first run


def test_every_prepared_line_is_still_in_readme():
    stale = set(PREPARED) - {readme_line(args) for args in COMMANDS}
    assert not stale, f"PREPARED names lines README no longer has: {sorted(stale)}"


@pytest.mark.parametrize(
    "args", COMMANDS, ids=[f"{i:02d}-{readme_line(a)}" for i, a in enumerate(COMMANDS)]
)
def test_readme_command_runs(args, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    shrink = SHRINKERS.get(args[0])
    assert shrink is not None, (
        f"README runs `{readme_line(args)}`; add a rule for `esjax {args[0]}` to SHRINKERS"
    )
    prepare = PREPARED.get(readme_line(args))
    if prepare is not None:
        prepare(workdir)
    command = shrink(list(args))
    code, output = cli(command)
    extra = missing_extra(command)
    if extra is not None:
        assert code == 2 and 'pip install "esjax[' in output, output
        return
    assert code == 0, f"{shlex.join(command)}\n{output}"
    if "--out" in command:
        assert (workdir / command[command.index("--out") + 1]).exists(), output


# ---------------------------------------------------------------------------- the Python tier
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# The sizes README's Python examples give, lowered for the test: the one rule, the code as written.
PYTHON_SIZES = {"popsize": 16, "generations": 2}


def trainer_example(text: str) -> str:
    """README's first Python block: a user's env object and flax module, trained from Python."""
    blocks = PYTHON_BLOCK.findall(text.split("\n## Python\n", 1)[1])
    assert blocks and "esjax.Trainer(" in blocks[0], "README's Python section lost its Trainer"
    return blocks[0]


def test_readmes_trainer_example_runs_as_written_and_writes_no_file(tmp_path, monkeypatch):
    """At most 12 lines, no file written (the working directory stays empty), every seed
    trained: only its popsize and generations are lowered."""
    code = trainer_example(README.read_text())
    assert len(code.strip().splitlines()) <= 12
    for name, value in PYTHON_SIZES.items():
        code, count = re.subn(rf"\b{name}=\d+", f"{name}={value}", code)
        assert count == 1, f"README's Trainer example gives no {name}="
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["metrics"]["fitness_mean"].shape == (4, PYTHON_SIZES["generations"])
    assert namespace["trainer"].config.task.env == "Pendulum-v1"  # gymnax's env, by its id
    assert list(tmp_path.iterdir()) == []
