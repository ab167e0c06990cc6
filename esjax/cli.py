"""The ``esjax`` command line: a thin typer app over esjax's library.

This module parses arguments, prints tables and turns errors into messages and exit codes: a
config problem is one red line on stderr and exit code 2 (no traceback); a run stopped by
Ctrl-C, SIGTERM, SIGHUP or SIGUSR1 checkpoints and exits with 128 + the signal number (130 for
Ctrl-C, 143 for SIGTERM). What the commands do lives in the library, reached through
:func:`_library`, so that ``--help`` and argument errors never load JAX.
"""

import functools
import json
import math
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from esjax import cache
from esjax.config import ConfigError
from esjax.progress import ProgressReport, count, duration, number

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_LOST = 3


def _library(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> ModuleType:
    """:mod:`esjax.commands`, after JAX's devices are set (and a multi-process run joined)."""
    from esjax import launch  # keeps --help and argument errors from loading JAX

    return launch.library(coordinator, num_processes, process_id)


def _example(*lines: str) -> str:
    """A help epilog (markdown) listing example command lines."""
    return "**Examples**\n\n```\n" + "\n".join(lines) + "\n```"


app = typer.Typer(
    name="esjax",
    help=(
        "Evolution strategies for neural controllers on JAX: evolve a policy, test it, plot its "
        "fitness curves and watch it. `esjax COMMAND --help` shows each command's options."
    ),
    epilog=_example(
        "esjax list",
        "esjax evolve pendulum --popsize 2048 --out runs/pendulum",
        "esjax eval runs/pendulum --json",
        "esjax plot runs/pendulum",
        "esjax render runs/pendulum",
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class XAxis(StrEnum):
    generations = "generations"
    env_steps = "env_steps"
    wall_s = "wall_s"


class Which(StrEnum):
    final = "final"
    best = "best"


def print_error(message: str) -> None:
    """One red line on stderr, never wrapped."""
    err.print(Text(f"error: {message}", style="bold red"), soft_wrap=True)


def handles_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Config errors become one line and exit code 2; Ctrl-C becomes exit code 130."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ConfigError as error:
            print_error(str(error))
            raise typer.Exit(EXIT_CONFIG) from None
        except KeyboardInterrupt:
            err.print(Text("interrupted", style="yellow"))
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def _run_dir(path: Path) -> Path:
    if not path.is_dir():
        raise ConfigError(f"{path}: no such run directory")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: not a run directory (no config.json)")
    return path


# ---------------------------------------------------------------------------- global options
@app.callback()
def _global_options(
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            envvar="ESJAX_NO_CACHE",
            help="Compile afresh: do not read or write the per-user compilation cache "
            "(~/.cache/esjax/xla; ESJAX_CACHE_DIR moves it, ESJAX_CACHE_MAX_MB caps it).",
        ),
    ] = False,
) -> None:
    """Runs before every command, before anything compiles."""
    if no_cache or cache.disabled_by_env():
        cache.disable_compilation_cache()
    else:
        cache.enable_compilation_cache()


# ---------------------------------------------------------------------------- trackers
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


# ---------------------------------------------------------------------------- commands
@app.command(
    epilog=_example(
        "esjax evolve pendulum --popsize 2048",
        "esjax evolve cartpole --strategy pgpe --seeds 5 --out runs/cartpole-pgpe",
        "esjax evolve my_task.toml --set policy.hidden=[32,32] --set evaluation.every=5",
        "esjax evolve pendulum --out runs/pendulum --resume",
    )
)
@handles_errors
def evolve(
    task: Annotated[
        str | None,
        typer.Argument(
            metavar="TASK",
            help="Task preset name (see `esjax list`) or a TOML file; optional with --resume.",
            show_default=False,
        ),
    ] = None,
    strategy: StrategyOption = None,
    popsize: PopsizeOption = None,
    generations: Annotated[
        int | None, typer.Option("--generations", "-g", help="Generations to run.")
    ] = None,
    rollouts: RolloutsOption = None,
    seed: Annotated[int, typer.Option(help="Random seed (the first one with --seeds).")] = 0,
    seeds: Annotated[
        int, typer.Option(min=1, help="Independent seeds run side by side (vmapped).")
    ] = 1,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory; default: runs/TASK-STRATEGY-TIME."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in --out from its last checkpoint.")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace an existing run directory instead of refusing."),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Override a task field, e.g. `policy.hidden=[32,32]`; repeatable.",
        ),
    ] = None,
    coordinator: Annotated[
        str | None,
        typer.Option(
            envvar="ESJAX_COORDINATOR",
            metavar="HOST:PORT",
            help="Multi-process run: address of process 0's coordinator.",
        ),
    ] = None,
    num_processes: Annotated[
        int | None,
        typer.Option(envvar="ESJAX_NUM_PROCESSES", min=1, help="Multi-process run: processes."),
    ] = None,
    process_id: Annotated[
        int | None,
        typer.Option(envvar="ESJAX_PROCESS_ID", min=0, help="Multi-process run: this one's index."),
    ] = None,
    checkpoint_every: Annotated[
        float,
        typer.Option(
            "--checkpoint-every",
            metavar="SECONDS",
            min=0.0,
            help="Seconds between periodic checkpoints (one is always written at the end).",
        ),
    ] = 30.0,
    log: Annotated[list[str] | None, LOG_OPTION] = None,
) -> None:
    """Evolve a policy for TASK and write a run directory (metrics, checkpoints, fitness.png).

    Shows live progress (generation, best and mean fitness, last evaluation return, env
    steps/s, ETA), then a summary table and whether the task's solve threshold was reached.
    An existing run directory is never replaced silently: pass --resume or --overwrite.
    Ctrl-C, SIGTERM, SIGHUP or SIGUSR1 (what schedulers send before a kill) finish the block
    in flight, write a checkpoint and print the command that resumes; a run killed outright
    resumes from its last checkpoint. Only one process at a time may write a run directory.
    """
    overrides = tuple(set_ or ())
    lib = _library(coordinator, num_processes, process_id)
    if task is None and not resume:
        raise ConfigError("missing TASK: a preset name (see `esjax list`) or a TOML file")
    if resume and out_dir is None:
        raise ConfigError("--resume needs the run directory: --out RUN")
    if task is not None:
        lib.checked_task(task, overrides)  # fail fast, before anything compiles
    label = Path(task).stem if task is not None else Path(out_dir).name
    shown_seeds = lib.read_run_config(out_dir).seeds if resume else seeds
    report = ProgressReport(console, f"evolve {label}", seeds=shown_seeds)
    try:
        with report, lib.tracking(log, report, out_dir if resume else None) as on_progress:
            summary = lib.evolve(
                task,
                strategy=strategy,
                popsize=popsize,
                generations=generations,
                rollouts=rollouts,
                seed=seed,
                seeds=seeds,
                out=out_dir,
                resume=resume,
                overwrite=overwrite,
                overrides=overrides,
                checkpoint_every_s=checkpoint_every,
                on_progress=on_progress,
            )
    except lib.Interrupted as stop:
        err.print(Text(str(stop), style="yellow"), soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None
    except lib.LostProcess as lost:
        print_error(str(lost))
        sys.stderr.flush()
        sys.stdout.flush()
        # Skip JAX's shutdown barrier: it would wait for the lost process until its timeout.
        os._exit(EXIT_LOST)
    if lib.process_index() == 0:
        _finish_evolve(lib, summary, report)


def _finish_evolve(lib: ModuleType, summary: Any, report: ProgressReport) -> None:
    """The run's summary table and the verdict its summary.json holds (esjax.saved.verdict)."""
    run_dir = Path(summary.run_dir)
    figure = lib.plot_runs([run_dir], run_dir / "fitness.png")
    seeds = lib.read_run_config(run_dir).seeds
    judged = summary.verdict

    table = Table(title="esjax evolve", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("run directory", str(run_dir))
    table.add_row("generations", f"{summary.generations:,}")
    per_seed = " per seed" if seeds > 1 else ""
    table.add_row("env steps", f"{summary.env_steps:,}{per_seed}")
    table.add_row("wall time (from building the task)", duration(summary.wall_s))
    if summary.wall_s:
        rate = count(seeds * summary.env_steps / summary.wall_s)
        table.add_row("env steps/s", f"{rate} (all seeds, with compilation)")
    table.add_row("process start → first block", f"{report.first_report_s or math.nan:.1f} s")
    table.add_row("eval return (final)", number(summary.final_eval_return))
    table.add_row("eval return (best)", number(summary.best_eval_return))
    if judged is not None:
        table.add_row("test return (final, fresh episodes)", number(judged.final_return))
        table.add_row("test return (best, fresh episodes)", number(judged.best_return))
    table.add_row("fitness plot", str(figure))
    console.print(table)
    if judged is not None:
        # The final policy on episodes that neither training nor the choice of the best
        # policy saw. The best policy is shown above, not judged.
        value, threshold = judged.final_return, judged.threshold
        verdict = "≥" if judged.solved else "<"
        text = f"test return {value:.1f} {verdict} {threshold:g} (final policy, fresh episodes)"
        if judged.solved:
            console.print(Text(f"Solved: {text}.", style="bold green"))
        else:
            console.print(Text(f"Not solved: {text}.", style="yellow"))
    console.print(
        f"Next: [cyan]esjax eval {run_dir}[/cyan] · [cyan]esjax render {run_dir}[/cyan]",
        soft_wrap=True,
    )


class Baseline(StrEnum):
    analytic = "analytic"
    zero = "zero"


@app.command(
    name="eval",
    epilog=_example(
        "esjax eval runs/pendulum",
        "esjax eval runs/pendulum --episodes 512 --json",
        "esjax eval runs/meta-sign --split extrapolate --baseline analytic",
        "esjax eval runs/meta-pendulum --split test --which best",
        "esjax eval runs/meta-pendulum --grid",
        "esjax eval runs/meta-pendulum --grid-axis m=0.25:4:9 --grid-axis l=0.5,1,2 --out ml.json",
    ),
)
@handles_errors
def eval_(
    run: Annotated[
        Path, typer.Argument(metavar="RUN", help="A run directory written by esjax evolve.")
    ],
    episodes: Annotated[
        int, typer.Option("--episodes", "-n", min=1, help="Test episodes (per cell with --grid).")
    ] = 128,
    split: Annotated[
        str | None,
        typer.Option(help="Env-parameter split to test on (a task's [splits]); default: train."),
    ] = None,
    which: Annotated[
        Which, typer.Option(help="Policy to test: the final search mean or the best evaluated.")
    ] = Which.final,
    seed: Annotated[
        int, typer.Option(help="Which seed of a --seeds run: 0 is the first.", min=0)
    ] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
    grid: Annotated[
        bool,
        typer.Option(
            "--grid",
            help="Test on every cell of a 2-D grid of env parameters (the task's [grid] table): "
            "a table of mean returns, RUN/grid.json and a heatmap RUN/grid.png.",
        ),
    ] = False,
    grid_axis: Annotated[
        list[str] | None,
        typer.Option(
            "--grid-axis",
            metavar="NAME=LOW:HIGH:COUNT",
            help="A grid axis instead of the task's: COUNT log-spaced values from LOW to HIGH, "
            "or NAME=V1,V2,... Give two (rows, then columns); implies --grid.",
        ),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="--grid: the JSON to write (the heatmap goes next to it as .png)."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="--grid: replace an existing JSON and heatmap.")
    ] = False,
    baseline: Annotated[
        Baseline | None,
        typer.Option(
            help="Also test a reference on the same episodes: analytic (a controller told the "
            "true env parameters; pendulum tasks) or zero (zero action); prints the policy's "
            "score 0 = zero action, 1 = analytic.",
        ),
    ] = None,
) -> None:
    """Test return of a run's saved policy: mean, std, min and max over fresh episodes.

    With `--grid`, the same test episodes on every cell of a grid of fixed env parameters
    (e.g. mass x length), compiled once for the whole grid; the training range is outlined.
    With `--baseline`, a reference controller on the same episodes, and the normalised score.
    """
    _run_dir(run)
    if baseline is not None and (grid or grid_axis):
        raise ConfigError("--baseline and --grid exclude each other")
    if (out_file is not None or overwrite) and not (grid or grid_axis):
        raise ConfigError("--out and --overwrite go with --grid")
    lib = _library()
    if baseline is not None:
        record = lib.baseline_record(run, episodes, split, seed, which.value, baseline.value)
        _print_record(record) if as_json else _show_baseline(record)
    elif grid or grid_axis:
        record, json_path, png_path = lib.grid_record(
            run,
            grid_axis or (),
            episodes=episodes,
            seed=seed,
            which=which.value,
            out=out_file,
            overwrite=overwrite,
            split=split,
        )
        _print_record(record) if as_json else _show_grid(record, json_path, png_path)
    else:
        record = lib.policy_record(run, episodes, split, seed, which.value)
        _print_record(record) if as_json else _show_policy(record)


def _print_record(record: dict[str, Any]) -> None:
    """``--json``: one JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(record) + "\n")


def _show_policy(record: dict[str, Any]) -> None:
    table = Table(
        title=f"test return of {record['run']} ({record['which']} policy)", title_justify="left"
    )
    for name in ("episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="right")
    table.add_row(
        str(record["episodes"]),
        *(number(record[k], 2) for k in ("mean", "std", "min", "max")),
    )
    console.print(table)


def _show_baseline(record: dict[str, Any]) -> None:
    """``eval --baseline``: the policy, the zero action and the reference, and the score."""
    title = (
        f"test return on {record['run']}'s test episodes ({record['split']}, seed {record['seed']})"
    )
    table = Table(title=title, title_justify="left")
    for name in ("policy", "episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for name, stats in record["returns"].items():
        table.add_row(name, str(record["episodes"]), *(number(stats[k], 2) for k in stats))
    console.print(table)
    if "score_vs_analytic" in record:
        console.print(
            f"normalised score (0 = zero action, 1 = analytic): {record['score_vs_analytic']:.3f}"
        )


def _show_grid(record: dict[str, Any], json_path: Path, png_path: Path) -> None:
    """``eval --grid``: mean test return per cell; the training range in bold."""
    rows, cols = record["values"]
    row_name, col_name = record["axes"]
    table = Table(
        title=f"mean test return of {record['run']} ({record['which']} policy, "
        f"{record['episodes']} episodes per cell)",
        title_justify="left",
        caption="bold: inside the training range",
        caption_justify="left",
    )
    table.add_column(f"{row_name} \\ {col_name}", justify="right", style="cyan")
    for value in cols:
        table.add_column(f"{value:.3g}", justify="right")
    for value, means, inside in zip(rows, record["mean"], record["in_training"], strict=True):
        cells = [
            Text(number(m, 0), style="bold" if i else "dim")
            for m, i in zip(means, inside, strict=True)
        ]
        table.add_row(f"{value:.3g}", *cells)
    console.print(table)
    console.print(f"wrote {json_path} and {png_path}", soft_wrap=True)


@app.command(
    epilog=_example(
        "esjax plot runs/pendulum",
        "esjax plot runs/cartpole-s0 runs/cartpole-s1 runs/cartpole-s2 --out cartpole.png",
        "esjax plot runs/pendulum-open_es runs/pendulum-pgpe --x env_steps --out compare.png",
    )
)
@handles_errors
def plot(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN", help="One or more run directories.")],
    x: Annotated[XAxis, typer.Option("--x", help="What the x axis counts.")] = XAxis.generations,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Figure (.png, .pdf, .svg); default: RUN/fitness.png, ./fitness.png for several.",
        ),
    ] = None,
    title: Annotated[str | None, typer.Option(help="Figure title.")] = None,
) -> None:
    """Fitness curves: training fitness and evaluation return, in two panels.

    Runs whose configurations differ only in their seed (and the seeds of one run) are drawn
    as a mean line with a 95% confidence band; other runs get their own colour.
    """
    for run in runs:
        _run_dir(run)
    target = out_file or (runs[0] / "fitness.png" if len(runs) == 1 else Path("fitness.png"))
    path = _library().plot_runs(runs, target, x=x.value, title=title)
    console.print(f"wrote {path}", soft_wrap=True)


@app.command(
    epilog=_example(
        "esjax render runs/pendulum",
        "esjax render runs/pendulum --param l=1.6 --param m=2 --out long-pendulum.gif",
        "esjax render runs/meta-pendulum --split test --seed 3",
    )
)
@handles_errors
def render(
    run: Annotated[
        Path, typer.Argument(metavar="RUN", help="A run directory written by esjax evolve.")
    ],
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="GIF to write; default: RUN/episode.gif."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the episode and of the sampled variant.")] = 0,
    split: Annotated[
        str | None, typer.Option(help="Draw the env variant from this split; default: train.")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param", metavar="NAME=VALUE", help="Pin an env parameter, e.g. l=1.6; repeatable."
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Steps to play; default: the episode length.")
    ] = None,
    fps: Annotated[int, typer.Option(min=1, help="Frames per second of the GIF.")] = 25,
    which: Annotated[Which, typer.Option(help="The final search mean or the best.")] = Which.final,
) -> None:
    """Animate one episode of a run's policy as a GIF.

    Drawn from the env state and its parameters: a longer or heavier pendulum, a longer pole or
    acrobot link looks it. Renders the classic-control envs, MinAtar games (from the state's
    channels), Catch, DeepSea, FourRooms, MetaMaze, PointRobot, and bandits and bsuite chains
    as a diagram of the episode so far.
    """
    _run_dir(run)
    path, total = _library().render_run(
        run,
        out_file,
        which=which.value,
        seed=seed,
        split=split,
        env_params=tuple(param or ()),
        steps=steps,
        fps=fps,
    )
    console.print(f"wrote {path} (episode return {total:.1f})", soft_wrap=True)


@app.command(
    epilog=_example(
        "esjax sweep pendulum --vary strategy_settings.learning_rate=0.03,0.1,0.3 --seeds 2",
        "esjax sweep pendulum --vary strategy_settings.learning_rate=0.03,0.1 "
        "--vary strategy_settings.std_init=0.05,0.1 --seeds 5 --out runs/lr-std",
        "esjax sweep --resume --out runs/lr-std",
    )
)
@handles_errors
def sweep(
    task: Annotated[
        str | None,
        typer.Argument(
            metavar="TASK",
            help="Task preset name or TOML file; optional with --resume.",
            show_default=False,
        ),
    ] = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(
            "--vary",
            metavar="KEY=V1,V2,...",
            help="A setting and its values (keys as for --set); repeat for a cross product.",
        ),
    ] = None,
    seeds: Annotated[
        int, typer.Option(min=1, help="Seeds per configuration, run side by side (vmapped).")
    ] = 1,
    seed: Annotated[int, typer.Option(min=0, help="First seed of every configuration.")] = 0,
    strategy: StrategyOption = None,
    popsize: PopsizeOption = None,
    generations: Annotated[
        int | None, typer.Option("--generations", "-g", help="Generations per configuration.")
    ] = None,
    rollouts: RolloutsOption = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Override a task field in every run."),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Sweep directory; default: runs/sweep-TASK-TIME."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the sweep in --out where it stopped.")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing sweep directory.")
    ] = False,
    episodes: Annotated[
        int, typer.Option("--episodes", "-n", min=1, help="Fresh test episodes per policy.")
    ] = 128,
    log: Annotated[list[str] | None, LOG_OPTION] = None,
) -> None:
    """Run TASK for every combination of the --vary values x seeds; compare them.

    Each configuration is a run directory inside the sweep directory (readable by eval, plot
    and render); sweep.json holds each configuration's final and best test return per seed,
    their mean and 95% interval, each seed's verdict (its final policy's test return against the
    solve threshold) and the env steps until an evaluation first reached it; sweep.png draws a
    line per configuration (a heatmap of the final test return for two numeric keys).
    """
    if task is None and not resume:
        raise ConfigError("missing TASK: a preset name (see `esjax list`) or a TOML file")
    if resume and out_dir is None:
        raise ConfigError("--resume needs the sweep directory: --out SWEEP")
    lib = _library()
    if task is not None:
        lib.checked_task(task, tuple(set_ or ()))  # fail fast, before anything compiles
    reports: list[ProgressReport] = []
    shown_seeds = int(lib.read_spec(out_dir)["seeds"]) if resume else seeds

    def announce(configuration: Any, index: int, total: int) -> None:
        if reports:
            reports[-1].__exit__(None, None, None)
        label = ", ".join(configuration.overrides)
        console.print(f"[bold]configuration {index + 1}/{total}[/bold]: {label}", soft_wrap=True)
        report = ProgressReport(console, configuration.name, seeds=shown_seeds)
        reports.append(report.__enter__())

    def progress(row: dict[str, Any]) -> None:
        # A program runs several configurations; the bar follows the first one.
        if Path(row["run_dir"]).name == reports[-1].label:
            reports[-1](row)

    try:
        record = lib.sweep(
            task,
            vary or (),
            seeds=seeds,
            seed=seed,
            strategy=strategy,
            popsize=popsize,
            generations=generations,
            rollouts=rollouts,
            overrides=tuple(set_ or ()),
            out=out_dir,
            resume=resume,
            overwrite=overwrite,
            test_episodes=episodes,
            log=tuple(log or ()),
            on_progress=progress,
            on_configuration=announce,
        )
    except lib.SweepInterrupted as stop:
        err.print(Text(str(stop), style="yellow"), soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if reports:
            reports[-1].__exit__(None, None, None)
    _show_sweep(record, lib.sweep_rows(record), out_dir)


def _show_sweep(record: dict[str, Any], rows: list[dict[str, Any]], out_dir: Path | None) -> None:
    """The sweep's table: test return per configuration (mean ± half its 95% interval)."""

    def cell(interval: tuple[float | None, float | None]) -> str:
        mean, half = interval
        return number(mean) if half is None else f"{number(mean)} ± {number(half)}"

    n = record["spec"]["seeds"]
    table = Table(
        title=f"sweep of {record['spec']['task']}: test return over {n} seed(s), 95% interval",
        title_justify="left",
    )
    columns = ("configuration", "final", "best", "seeds solved", "env steps to threshold")
    for name in columns:
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for row in rows:
        solved, reached = row["solved"], row["env_steps_to_threshold"]
        table.add_row(
            row["configuration"],
            cell(row["final"]),
            cell(row["best"]),
            f"{solved[0]}/{solved[1]}" if solved else "-",
            count(reached) if reached else "-",
        )
    console.print(table)
    where = record.get("sweep_dir") or out_dir
    if where is not None:
        console.print(f"wrote {Path(where) / 'sweep.json'} and {Path(where) / 'sweep.png'}")


@app.command(
    epilog=_example(
        "esjax export runs/pendulum --csv",
        "esjax export runs/pendulum --csv --out - | head",
    )
)
@handles_errors
def export(
    run: Annotated[
        Path, typer.Argument(metavar="RUN", help="A run directory written by esjax evolve.")
    ],
    csv: Annotated[
        bool, typer.Option("--csv", help="metrics.jsonl as CSV, one row per generation and seed.")
    ] = False,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="File to write (`-`: stdout); default: RUN/metrics.csv."),
    ] = None,
) -> None:
    """Write a run's metrics in another format for spreadsheets and notebooks."""
    _run_dir(run)
    if not csv:
        raise ConfigError("choose a format: --csv")
    lib = _library()
    text = lib.metrics_csv(run)
    if out_file is not None and str(out_file) == "-":
        sys.stdout.write(text)
        return
    target = out_file or run / "metrics.csv"
    try:
        lib.atomic_write(target, text.encode())
    except OSError as error:
        raise ConfigError(f"{target}: cannot write ({error.strerror or error})") from None
    console.print(f"wrote {target}", soft_wrap=True)


@app.command(name="list", epilog=_example("esjax list"))
@handles_errors
def list_() -> None:
    """Task presets, tuned strategy presets and every evosax algorithm, with descriptions."""
    lib = _library()
    table = Table(title="Tasks", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("description")
    for name, text in lib.describe("task"):
        table.add_row(name, text)
    console.print(table)
    console.print()
    table = Table(title="Strategies", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("description")
    styles = {"tuned preset": "bold green", "evosax": "", "cannot run": "dim"}
    for name, kind, text in lib.catalogue():
        table.add_row(name, Text(kind, style=styles[kind]), text)
    console.print(table)
    console.print()
    console.print(
        "Names are case-insensitive; a tuned preset wins over the evosax algorithm it tunes."
    )
    console.print(r"Run one: [cyan]esjax evolve TASK \[--strategy NAME][/cyan]")


def main() -> None:
    """Console-script entry point: the typer app; usage errors are one line."""
    try:
        code = app(prog_name="esjax", standalone_mode=False)
    except typer.TyperException as err:  # a usage error: one line, not typer's boxed panel
        if not err.format_message().strip():  # bare `esjax`: the help is already printed
            sys.exit(getattr(err, "exit_code", 2))
        ctx = getattr(err, "ctx", None)
        where = ctx.command_path if ctx is not None else "esjax"
        message = " ".join(err.format_message().split())
        print_error(f"{where}: {message} (see `{where} --help`)")
        sys.exit(getattr(err, "exit_code", 2))
    except typer.Abort:
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
