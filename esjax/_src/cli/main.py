"""The ``esjax`` command line: typer options over esjax's library, results as rich tables.

What the commands do lives in the library, reached through :func:`_library` so that ``--help``
and argument errors never load JAX; errors and exit codes are :mod:`esjax._src.cli.terminal`'s.
"""

import functools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from esjax._src.cli import tables, terminal
from esjax._src.cli.options import (
    BaselineOption,
    CheckpointEveryOption,
    CoordinatorOption,
    GenerationsOption,
    GridAxisOption,
    GridOption,
    LogOption,
    NoCacheOption,
    NumProcessesOption,
    PopsizeOption,
    ProcessIdOption,
    RolloutsOption,
    RunArgument,
    SeedOption,
    SeedsOption,
    SetOption,
    StrategyOption,
    TaskArgument,
    TestEpisodesOption,
    TrustOption,
    Which,
    XAxis,
    out_option,
    overwrite_option,
    resume_option,
)
from esjax._src.cli.progress import ProgressReport, SweepProgress
from esjax._src.cli.terminal import (
    FIGURE_SUFFIXES,
    check_run_dir,
    check_suffix,
    console,
    exit_stopped,
    handles_errors,
)
from esjax._src.run import cache
from esjax._src.specs.config import ConfigError


def _library(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> ModuleType:
    """:mod:`esjax._src.cli.commands`, after JAX's devices are set (and a multi-process run
    joined)."""
    from esjax._src.cli import launch  # keeps --help and argument errors from loading JAX

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


# ---------------------------------------------------------------------------- global options
@app.callback()
def _global_options(no_cache: NoCacheOption = False) -> None:
    """Runs before every command, before anything compiles."""
    if no_cache or cache.disabled_by_env():
        cache.disable_compilation_cache()
    else:
        cache.enable_compilation_cache()


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
    task: TaskArgument = None,
    strategy: StrategyOption = None,
    popsize: PopsizeOption = None,
    generations: GenerationsOption = None,
    rollouts: RolloutsOption = None,
    seed: SeedOption = 0,
    seeds: SeedsOption = 1,
    out_dir: Annotated[
        Path | None, out_option("Run directory; default: runs/TASK-STRATEGY-TIME.")
    ] = None,
    resume: Annotated[
        bool, resume_option("Continue the run in --out from its last checkpoint.")
    ] = False,
    overwrite: Annotated[
        bool, overwrite_option("Replace an existing run directory instead of refusing.")
    ] = False,
    set_: SetOption = None,
    coordinator: CoordinatorOption = None,
    num_processes: NumProcessesOption = None,
    process_id: ProcessIdOption = None,
    checkpoint_every: CheckpointEveryOption = 30.0,
    log: LogOption = None,
    trust_code: TrustOption = False,
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
    lib.checked_start(task, overrides, resume=resume, out=out_dir)  # fail before compiling
    label = Path(task).stem if task is not None else Path(out_dir or ".").name
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
                trust_code=trust_code,
            )
    except lib.Interrupted as stop:
        exit_stopped(str(stop), stop.exit_code, lib.compiling_in_background())
    except lib.LostProcess as lost:
        terminal.exit_lost(str(lost))
    if lib.process_index() == 0:
        directory = Path(summary.run_dir)
        figure = lib.plot_runs([directory], directory / lib.FITNESS_FIGURE)
        seeds = lib.read_run_config(directory).seeds
        tables.show_evolve_summary(console, summary, seeds, figure, report.first_report_s)


@app.command(
    name="eval",
    epilog=_example(
        "esjax eval runs/pendulum",
        "esjax eval runs/pendulum --episodes 512 --json",
        "esjax eval runs/meta-sign --split extrapolate --baseline analytic",
        "esjax eval runs/meta-pendulum --split test --which best",
        "esjax eval runs/meta-pendulum --grid",
        "esjax eval runs/acrobot-meta --grid --baseline analytic",
        "esjax eval runs/meta-pendulum --grid-axis m=0.25:4:9 --grid-axis l=0.5,1,2 --out ml.json",
    ),
)
@handles_errors
def eval_(
    run: RunArgument,
    episodes: TestEpisodesOption = None,
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
    grid: GridOption = False,
    grid_axis: GridAxisOption = None,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="--grid: the JSON to write (the heatmap goes next to it as .png)."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="--grid: replace an existing JSON and heatmap.")
    ] = False,
    baseline: BaselineOption = None,
    trust_code: TrustOption = False,
) -> None:
    """Test return of a run's saved policy: mean, std, min and max over fresh episodes.

    With `--grid`, the same test episodes on every cell of a grid of fixed env parameters
    (e.g. mass x length), compiled once for the whole grid; the training range is outlined.
    With `--baseline`, a reference controller on the same episodes, and the normalised score
    (with `--grid`, on every cell).
    """
    check_run_dir(run)
    if (out_file is not None or overwrite) and not (grid or grid_axis):
        raise ConfigError("--out and --overwrite go with --grid")
    lib = _library()
    if trust_code:
        lib.grant_trust([run])
    if grid or grid_axis:
        record, json_path, png_path = lib.grid_record(
            run,
            grid_axis or (),
            **({} if episodes is None else {"episodes": episodes}),
            seed=seed,
            which=which.value,
            out=out_file,
            overwrite=overwrite,
            split=split,
            baseline=None if baseline is None else baseline.value,
        )
        show = functools.partial(tables.show_grid_test, console, paths=(json_path, png_path))
    elif baseline is not None:
        record = lib.baseline_record(run, episodes, split, seed, which.value, baseline.value)
        show = functools.partial(tables.show_baseline_test, console)
    else:
        record = lib.policy_record(run, episodes, split, seed, which.value)
        show = functools.partial(tables.show_policy_test, console)
    if as_json:
        sys.stdout.write(json.dumps(record) + "\n")
    else:
        show(record)


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
    check_suffix(out_file, FIGURE_SUFFIXES)
    for run in runs:
        check_run_dir(run)
    lib = _library()
    default = lib.FITNESS_FIGURE
    target = out_file or (runs[0] / default if len(runs) == 1 else Path(default))
    path = lib.plot_runs(runs, target, x=x.value, title=title)
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
    run: RunArgument,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="GIF to write; default: RUN/episode.gif."),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(min=0, max=2**31 - 1, help="Seed of the episode and of the sampled variant."),
    ] = 0,
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
    trust_code: TrustOption = False,
) -> None:
    """Animate one episode of a run's policy as a GIF.

    Drawn from the env state and its parameters: a longer or heavier pendulum, a longer pole or
    acrobot link looks it. Renders the classic-control envs, MinAtar games (from the state's
    channels), Catch, DeepSea, FourRooms, MetaMaze, PointRobot, and bandits and bsuite chains
    as a diagram of the episode so far. A suite's env (SUITE:NAME) is drawn by the suite's own
    renderer; Brax and Playground need OpenGL for MuJoCo's (MUJOCO_GL=egl or osmesa headless).
    """
    check_suffix(out_file, (".gif",))
    check_run_dir(run)
    import matplotlib  # the GIF is drawn off-screen: a suite's pyplot viewer opens no window

    matplotlib.use("agg")
    path, total = _library().render_run(
        run,
        out_file,
        which=which.value,
        seed=seed,
        split=split,
        env_params=tuple(param or ()),
        steps=steps,
        fps=fps,
        trust_code=trust_code,
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
    task: TaskArgument = None,
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
    seed: Annotated[
        int, typer.Option(min=0, max=2**31 - 1, help="First seed of every configuration.")
    ] = 0,
    strategy: StrategyOption = None,
    popsize: PopsizeOption = None,
    generations: Annotated[
        int | None, typer.Option("--generations", "-g", help="Generations per configuration.")
    ] = None,
    rollouts: RolloutsOption = None,
    set_: SetOption = None,
    out_dir: Annotated[
        Path | None, out_option("Sweep directory; default: runs/sweep-TASK-TIME.")
    ] = None,
    resume: Annotated[bool, resume_option("Continue the sweep in --out where it stopped.")] = False,
    overwrite: Annotated[bool, overwrite_option("Replace an existing sweep directory.")] = False,
    episodes: Annotated[
        int | None,
        typer.Option(
            "--episodes",
            "-n",
            min=1,
            help="Fresh test episodes per policy; default: the task's test_episodes.",
        ),
    ] = None,
    log: LogOption = None,
    trust_code: TrustOption = False,
) -> None:
    """Run TASK for every combination of the --vary values x seeds; compare them.

    Each configuration is a run directory inside the sweep directory (readable by eval, plot
    and render); sweep.json holds each configuration's final and best test return per seed,
    their mean and 95% interval, each seed's verdict (its final policy's test return against the
    solve threshold) and the env steps until an evaluation first reached it; sweep.png draws a
    line per configuration (a heatmap of the final test return for two numeric keys).
    """
    lib = _library()
    lib.checked_start(task, tuple(set_ or ()), resume=resume, out=out_dir, directory="sweep")
    shown_seeds = int(lib.read_spec(out_dir)["seeds"]) if resume else seeds
    try:
        with SweepProgress(console, seeds=shown_seeds) as progress:
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
                on_configuration=progress.announce,
                trust_code=trust_code,
            )
    except lib.SweepInterrupted as stop:
        exit_stopped(str(stop), stop.exit_code, lib.compiling_in_background())
    tables.show_sweep(console, record, lib.sweep_rows(record), out_dir)


@app.command(
    epilog=_example(
        "esjax export runs/pendulum --csv",
        "esjax export runs/pendulum --csv --out - | head",
    )
)
@handles_errors
def export(
    run: RunArgument,
    csv: Annotated[
        bool, typer.Option("--csv", help="metrics.jsonl as CSV, one row per generation and seed.")
    ] = False,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="File to write (`-`: stdout); default: RUN/metrics.csv."),
    ] = None,
) -> None:
    """Write a run's metrics in another format for spreadsheets and notebooks."""
    check_run_dir(run)
    if not csv:
        raise ConfigError("choose a format: --csv")
    lib = _library()
    if out_file is not None and str(out_file) == "-":
        sys.stdout.write(lib.metrics_csv(run))
    else:
        console.print(f"wrote {lib.write_metrics_csv(run, out_file)}", soft_wrap=True)


@app.command(
    epilog=_example(
        "esjax report runs/cartpole-16seeds",
        "esjax report runs/lr-std --reps 5000 --json",
        "esjax report pgpe=runs/cartpole-pgpe pgpe=runs/acrobot-pgpe "
        "open_es=runs/cartpole-open_es open_es=runs/acrobot-open_es --out reports/pgpe-vs-open_es",
    )
)
@handles_errors
def report(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="[LABEL=]PATH",
            help="Run or sweep directories; LABEL= puts runs of several tasks in one "
            "configuration (default: the directory's name; a sweep's --vary values).",
        ),
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Where report.json, report.md and report.png go; default: PATH for one, "
            "the working directory for several.",
        ),
    ] = None,
    reps: Annotated[int, typer.Option(min=1, help="Bootstrap resamples per interval.")] = 2000,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print report.json instead of the tables.")
    ] = False,
    trust_code: TrustOption = False,
) -> None:
    """Success rates, normalised IQM and mean with 95% intervals, performance profiles.

    Scores are each seed's final policy's test return on fresh episodes (the solved verdict's
    number). Per configuration and task: seeds solved with a Wilson interval, mean and IQM
    return. Per configuration: IQM and mean of returns normalised to 0 = random policy and
    1 = the task's solved_return, with stratified-bootstrap intervals (seeds resampled within
    each task); for two configurations, the probability that one beats the other.
    """
    record = _library().report(paths, out_dir, reps=reps, trust_code=trust_code)
    if as_json:
        sys.stdout.write(json.dumps(record) + "\n")
    else:
        tables.show_report(console, record)


@app.command(name="list", epilog=_example("esjax list"))
@handles_errors
def list_() -> None:
    """Task presets, strategies, and the env suites with whether each is installed."""
    lib = _library()
    tables.show_catalogue(console, lib.task_rows(), lib.catalogue(), lib.suite_rows())


def main() -> None:
    """Console-script entry point: the typer app; usage errors are one line."""
    terminal.run_app(app, "esjax")


if __name__ == "__main__":
    main()
