"""The options the ``esjax`` commands share, declared once (typer's ``Annotated`` aliases).

A flag that two commands take means the same in both; one that differs only in its help
(``--out`` names a run or a sweep directory) is made by a function taking that help.
"""

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


# Choices of options, as typer shows them.
class XAxis(StrEnum):
    generations = "generations"
    env_steps = "env_steps"
    wall_s = "wall_s"


class Which(StrEnum):
    final = "final"
    best = "best"


class Baseline(StrEnum):
    """``esjax eval --baseline``: :data:`esjax._src.specs.config.BASELINES`, spelled out for typer
    (``tests/test_cli.py`` checks they agree)."""

    analytic = "analytic"
    random = "random"
    zero = "zero"


LOG_OPTION = typer.Option(
    "--log",
    metavar="BACKEND",
    help="Also log the metrics and the config to tensorboard, wandb or mlflow (each an extra: "
    'pip install "esjax[tensorboard]"); repeatable.',
)
# Options that `evolve` and `sweep` share, declared once.
StrategyOption = Annotated[
    str | None,
    typer.Option(
        "--strategy",
        "-s",
        help="Strategy preset or any evosax algorithm (see `esjax list`); default: the task's.",
    ),
]
PopsizeOption = Annotated[
    int | None, typer.Option("--popsize", "-p", help="Members per generation.")
]
RolloutsOption = Annotated[
    int | None, typer.Option("--rollouts", "-r", help="Episodes per member per generation.")
]
RunArgument = Annotated[
    Path, typer.Argument(metavar="RUN", help="A run directory written by esjax evolve.")
]
# A run or sweep names code (a module:factory env) that esjax imports only if this user made
# it here, or with this flag (esjax._src.run.trust).
TrustOption = Annotated[
    bool,
    typer.Option(
        "--trust-code",
        help="Import the code (a module:factory env) that a run or sweep made elsewhere names; "
        "read it first.",
    ),
]
TaskArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="TASK",
        help="Task preset name (see `esjax list`) or a TOML file; optional with --resume.",
        show_default=False,
    ),
]
GenerationsOption = Annotated[
    int | None, typer.Option("--generations", "-g", help="Generations to run.")
]
SeedOption = Annotated[
    int, typer.Option(min=0, max=2**31 - 1, help="Random seed (the first one with --seeds).")
]
SeedsOption = Annotated[
    int, typer.Option(min=1, help="Independent seeds run side by side (vmapped).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a task field, e.g. `policy.hidden=[32,32]`; repeatable.",
    ),
]
LogOption = Annotated[list[str] | None, LOG_OPTION]
CoordinatorOption = Annotated[
    str | None,
    typer.Option(
        envvar="ESJAX_COORDINATOR",
        metavar="HOST:PORT",
        help="Multi-process run: address of process 0's coordinator.",
    ),
]
NumProcessesOption = Annotated[
    int | None,
    typer.Option(envvar="ESJAX_NUM_PROCESSES", min=1, help="Multi-process run: processes."),
]
ProcessIdOption = Annotated[
    int | None,
    typer.Option(envvar="ESJAX_PROCESS_ID", min=0, help="Multi-process run: this one's index."),
]
CheckpointEveryOption = Annotated[
    float,
    typer.Option(
        "--checkpoint-every",
        metavar="SECONDS",
        min=0.0,
        help="Seconds between periodic checkpoints (one is always written at the end).",
    ),
]


def out_option(help: str) -> typer.models.OptionInfo:
    """``--out``/``-o``, a directory esjax writes (a run's or a sweep's)."""
    return typer.Option("--out", "-o", help=help)


def resume_option(help: str) -> typer.models.OptionInfo:
    return typer.Option("--resume", help=help)


def overwrite_option(help: str) -> typer.models.OptionInfo:
    return typer.Option("--overwrite", help=help)


NoCacheOption = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        envvar="ESJAX_NO_CACHE",
        help="Compile afresh: do not read or write the per-user compilation cache "
        "(~/.cache/esjax/xla; ESJAX_CACHE_DIR moves it, ESJAX_CACHE_MAX_MB caps it).",
    ),
]


# `esjax eval`'s own options with a long help.
TestEpisodesOption = Annotated[
    int | None,
    typer.Option(
        "--episodes",
        "-n",
        min=1,
        help="Test episodes (per cell with --grid); default: the task's test_episodes (128 "
        "unless it sets its own), the solved verdict's.",
    ),
]
GridOption = Annotated[
    bool,
    typer.Option(
        "--grid",
        help="Test on every cell of a 2-D grid of env parameters (the task's [grid] table): "
        "a table of mean returns, RUN/grid.json and a heatmap RUN/grid.png.",
    ),
]
GridAxisOption = Annotated[
    list[str] | None,
    typer.Option(
        "--grid-axis",
        metavar="NAME=LOW:HIGH:COUNT",
        help="A grid axis instead of the task's: COUNT log-spaced values from LOW to HIGH, "
        "or NAME=V1,V2,... Give two (rows, then columns); implies --grid.",
    ),
]
BaselineOption = Annotated[
    Baseline | None,
    typer.Option(
        help="Also test a reference on the same episodes: analytic (a controller told the "
        "true env parameters; pendulum and acrobot tasks; prints the policy's score "
        "0 = zero action, 1 = analytic), random (uniformly random actions; prints the "
        "policy's margin over it) or zero (zero action). With --grid: the reference's mean "
        "per cell and the policy's score, which the heatmap shows (zero: its mean only).",
    ),
]
