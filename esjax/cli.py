"""The ``esjax`` command line: a thin typer app over :mod:`esjax.evolve`, plotting and rendering.

Everything a test needs without the CLI lives in the library; this module parses arguments,
reports progress and turns errors into messages and exit codes: a config problem is one red
line on stderr and exit code 2 (no traceback); a run stopped by Ctrl-C, SIGTERM, SIGHUP or
SIGUSR1 checkpoints and exits with 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).
JAX-heavy modules are imported inside the commands so that ``--help`` and ``list`` are quick.
"""

import contextlib
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from esjax.config import ConfigError


def _process_start() -> float:
    """``time.perf_counter()`` at the moment this process started.

    Importing esjax (JAX, flax) takes a second or more before this module runs, so "process
    start" is read from the kernel where it says (Linux: ``/proc/self/stat``, to 10 ms). It is
    this module's import elsewhere, and in a process that imported it long after starting (a
    notebook, a test session), where the process's age says nothing about esjax.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0.0 <= age < 60.0 else now


_STARTED = _process_start()
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_LOST = 3


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


def _number(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _count(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# ---------------------------------------------------------------------------- progress
class ProgressReport:
    """The ``on_progress`` callback: a live bar on a terminal, a line every few seconds in logs."""

    def __init__(self, console: Console, label: str, seeds: int = 1, log_every_s: float = 5.0):
        self.console = console
        self.label = label
        self.seeds = seeds  # on_progress gets one row per seed; they are shown averaged
        self.log_every_s = log_every_s
        self.first_report_s: float | None = None  # process start -> first generation block
        self.last_eval: float | None = None
        self._prev: tuple[int, float, float] | None = None  # (generation, env_steps, wall_s)
        self._rows: list[dict[str, Any]] = []  # this generation's rows, one per seed
        self._last_log = -math.inf
        self._progress = None
        self._task = None

    def __enter__(self) -> "ProgressReport":
        if self.console.is_terminal:
            from rich import progress as rp

            self._progress = rp.Progress(
                rp.TextColumn("[bold]{task.description}"),
                rp.BarColumn(),
                rp.MofNCompleteColumn(),
                rp.TextColumn("{task.fields[stats]}"),
                rp.TimeElapsedColumn(),
                rp.TextColumn("ETA {task.fields[eta]}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.label, total=None, stats="compiling…", eta="-"
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, metrics: dict[str, Any]) -> None:
        """One row per seed for the last generation of a block; shown once all seeds are in."""
        now = time.perf_counter()
        if self.first_report_s is None:
            self.first_report_s = now - _STARTED
        gen = int(metrics.get("generation", 0))
        if self._rows and gen != self._rows[0].get("generation"):
            self._rows = []
        self._rows.append(metrics)
        if len(self._rows) < self.seeds:
            return
        self._show(now, gen, self._rows)

    def _show(self, now: float, gen: int, rows: list[dict[str, Any]]) -> None:
        def mean(key: str) -> float | None:
            values = [float(r[key]) for r in rows if r.get(key) is not None]
            return sum(values) / len(values) if values else None

        total = rows[0].get("generations")
        steps = sum(float(r.get("env_steps", 0)) for r in rows)
        wall = float(rows[0].get("wall_s", 0.0))
        rate, eta = math.nan, None
        if self._prev is not None and wall > self._prev[2] and gen > self._prev[0]:
            prev_gen, prev_steps, prev_wall = self._prev
            rate = (steps - prev_steps) / (wall - prev_wall)
            if total is not None:
                eta = (float(total) - gen) * (wall - prev_wall) / (gen - prev_gen)
        elif wall > 0:
            rate = steps / wall  # first block: includes compilation
        self._prev = (gen, steps, wall)
        if mean("eval_return") is not None:
            self.last_eval = mean("eval_return")
        stats = (
            f"best {_number(mean('fitness_best'))}  "
            f"mean {_number(mean('fitness_mean'))}  "
            f"eval {_number(self.last_eval)}  "
            f"{_count(rate) if math.isfinite(rate) else '-'} steps/s"
        )
        if self._progress is not None:
            self._progress.update(
                self._task, completed=gen, total=total, stats=stats, eta=_duration(eta)
            )
            return
        last = total is not None and gen >= int(total)
        evaluated = mean("eval_return") is not None
        if now - self._last_log >= self.log_every_s or last or evaluated:
            self._last_log = now
            done = f"{gen}/{int(total)}" if total is not None else f"{gen}"
            self.console.print(f"gen {done}  {stats}  ETA {_duration(eta)}", soft_wrap=True)


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
    from esjax import cache

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


@contextlib.contextmanager
def _tracking(backends: list[str] | None, report: Any, resumed: Path | None):
    """The ``on_progress`` callback: ``report``, after copying new metrics to the trackers."""
    if not backends:
        yield report
        return
    from esjax.runs import load_metrics
    from esjax.trackers import RunLogger

    done = max((int(r["generation"]) for r in load_metrics(resumed)), default=0) if resumed else 0
    with RunLogger(backends, skip_through=done, then=report) as logger:
        yield logger


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
    if coordinator is not None or num_processes not in (None, 1):
        from esjax.distributed import initialize

        try:
            initialize(coordinator, num_processes, process_id)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    if task is None and not resume:
        raise ConfigError("missing TASK: a preset name (see `esjax list`) or a TOML file")
    if resume and out_dir is None:
        raise ConfigError("--resume needs the run directory: --out RUN")
    if task is not None:
        _check_task(task, overrides)
    from esjax.evolve import Interrupted, LostProcess
    from esjax.evolve import evolve as run_evolution

    label = Path(task).stem if task is not None else Path(out_dir).name
    shown_seeds = seeds
    if resume:
        from esjax.runs import read_run_config

        shown_seeds = read_run_config(out_dir).seeds
    report = ProgressReport(console, f"evolve {label}", seeds=shown_seeds)
    try:
        with report, _tracking(log, report, out_dir if resume else None) as on_progress:
            summary = run_evolution(
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
    except Interrupted as stop:
        err.print(Text(str(stop), style="yellow"), soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None
    except LostProcess as lost:
        print_error(str(lost))
        sys.stderr.flush()
        sys.stdout.flush()
        # Skip JAX's shutdown barrier: it would wait for the lost process until its timeout.
        os._exit(EXIT_LOST)
    import jax

    if jax.process_index() == 0:
        _finish_evolve(summary, report)


def _check_task(task: str, overrides: tuple[str, ...]) -> None:
    """Fail fast, before anything compiles: unknown task, bad preset, bad ``--set``, bad env id."""
    from esjax import presets
    from esjax.tasks import check_task

    _, config, _, source = presets.load_task(task, overrides)
    check_task(config, source)  # the library decides what an env id and its params are


def _finish_evolve(summary: Any, report: ProgressReport) -> None:
    from esjax.plotting import plot_runs
    from esjax.runs import read_run_config

    run_dir = Path(summary.run_dir)
    figure = plot_runs([run_dir], run_dir / "fitness.png")
    config = read_run_config(run_dir)
    judged = summary.verdict

    table = Table(title="esjax evolve", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("run directory", str(run_dir))
    table.add_row("generations", f"{summary.generations:,}")
    seeds = config.seeds
    per_seed = " per seed" if seeds > 1 else ""
    table.add_row("env steps", f"{summary.env_steps:,}{per_seed}")
    table.add_row("wall time (from building the task)", _duration(summary.wall_s))
    if summary.wall_s:
        rate = _count(seeds * summary.env_steps / summary.wall_s)
        table.add_row("env steps/s", f"{rate} (all seeds, with compilation)")
    table.add_row("process start → first block", f"{report.first_report_s or math.nan:.1f} s")
    table.add_row("eval return (final)", _number(summary.final_eval_return))
    table.add_row("eval return (best)", _number(summary.best_eval_return))
    if judged is not None:
        table.add_row("test return (final, fresh episodes)", _number(judged.final_return))
        table.add_row("test return (best, fresh episodes)", _number(judged.best_return))
    table.add_row("fitness plot", str(figure))
    console.print(table)
    if judged is not None:
        # The one verdict (esjax.saved): the final policy on episodes that neither training
        # nor the choice of the best policy saw. The best policy is shown above, not judged.
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
    if baseline is not None:
        if out_file is not None or overwrite:
            raise ConfigError("--out and --overwrite go with --grid")
        _eval_baseline(run, episodes, split, which, seed, as_json, baseline)
        return
    if grid or grid_axis:
        _eval_grid(run, episodes, split, which, seed, as_json, grid_axis or (), out_file, overwrite)
        return
    if out_file is not None or overwrite:
        raise ConfigError("--out and --overwrite go with --grid")
    from esjax.saved import evaluate_run

    result = evaluate_run(run, episodes=episodes, split=split, seed=seed, which=which.value)
    record = {
        "run": str(run),
        "which": which.value,
        "split": split or "train",
        **{k: _plain(v) for k, v in result.items()},
    }
    if as_json:
        sys.stdout.write(json.dumps(record) + "\n")
        return
    table = Table(title=f"test return of {run} ({which.value} policy)", title_justify="left")
    for name in ("episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="right")
    table.add_row(
        str(record["episodes"]),
        *(_number(record[k], 2) for k in ("mean", "std", "min", "max")),
    )
    console.print(table)


def _eval_baseline(
    run: Path,
    episodes: int,
    split: str | None,
    which: Which,
    seed: int,
    as_json: bool,
    baseline: Baseline,
) -> None:
    """``eval --baseline``: the policy, the zero action and the reference on the same episodes."""
    import numpy as np

    from esjax.saved import baseline_returns, evaluate_run, make_test_rollout

    config, rollout = make_test_rollout(run, split)
    if baseline is Baseline.analytic:
        from esjax.baselines import baseline_rollout

        baseline_rollout(rollout, baseline.value)  # no controller for this env: fail first
    policy = evaluate_run(run, episodes, split, seed, which.value, built=(config, rollout))
    rows = {f"policy ({which.value})": policy["returns"]}
    for name in dict.fromkeys(("zero", baseline.value)):
        returns = baseline_returns(run, episodes, split, seed, name, built=(config, rollout))
        rows["zero action" if name == "zero" else name] = [float(r) for r in returns]
    summary = {
        name: {
            "mean": float(np.mean(r)),
            "std": float(np.std(r)),
            "min": float(np.min(r)),
            "max": float(np.max(r)),
        }
        for name, r in rows.items()
    }
    record = {
        "run": str(run),
        "which": which.value,
        "split": split or "train",
        "seed": seed,
        "episodes": episodes,
        "returns": summary,
    }
    if baseline is Baseline.analytic:
        zero, top = summary["zero action"]["mean"], summary["analytic"]["mean"]
        record["score_vs_analytic"] = (policy["mean"] - zero) / (top - zero)
    if as_json:
        sys.stdout.write(json.dumps(record) + "\n")
        return
    title = f"test return on {run}'s test episodes ({record['split']}, seed {seed})"
    table = Table(title=title, title_justify="left")
    for name in ("policy", "episodes", "mean", "std", "min", "max"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for name, stats in summary.items():
        table.add_row(name, str(episodes), *(_number(stats[k], 2) for k in stats))
    console.print(table)
    if "score_vs_analytic" in record:
        console.print(
            f"normalised score (0 = zero action, 1 = analytic): {record['score_vs_analytic']:.3f}"
        )


def _eval_grid(
    run: Path,
    episodes: int,
    split: str | None,
    which: Which,
    seed: int,
    as_json: bool,
    specs: list[str] | tuple[str, ...],
    out_file: Path | None,
    overwrite: bool,
) -> None:
    """``eval --grid``: every check that needs no compile comes before the compile."""
    from esjax import meta

    if split is not None:
        raise ConfigError("--split and --grid exclude each other: a grid pins the parameters")
    json_path = out_file or run / "grid.json"
    if json_path.suffix != ".json":
        raise ConfigError(f"--out {json_path}: expected a .json file (the heatmap goes next to it)")
    png_path = json_path.with_suffix(".png")
    existing = [str(p) for p in (json_path, png_path) if p.exists()]
    if existing and not overwrite:
        raise ConfigError(f"{existing[0]} exists; pass --overwrite to replace it, or --out")
    axes = meta.grid_axes(run, specs)
    from esjax.plotting import plot_grid
    from esjax.runs import write_json

    record = meta.evaluate_grid(run, axes, episodes=episodes, seed=seed, which=which.value)
    record["figure"] = png_path.name
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_json(json_path, record)
    plot_grid(record, png_path)
    if as_json:
        sys.stdout.write(json.dumps(record) + "\n")
        return
    rows, cols = record["values"]
    row_name, col_name = record["axes"]
    table = Table(
        title=f"mean test return of {run} ({which.value} policy, {episodes} episodes per cell)",
        title_justify="left",
        caption="bold: inside the training range",
        caption_justify="left",
    )
    table.add_column(f"{row_name} \\ {col_name}", justify="right", style="cyan")
    for value in cols:
        table.add_column(f"{value:.3g}", justify="right")
    for value, means, inside in zip(rows, record["mean"], record["in_training"], strict=True):
        cells = [
            Text(_number(m, 0), style="bold" if i else "dim")
            for m, i in zip(means, inside, strict=True)
        ]
        table.add_row(f"{value:.3g}", *cells)
    console.print(table)
    console.print(f"wrote {json_path} and {png_path}", soft_wrap=True)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON-ready Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


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
    from esjax.plotting import plot_runs

    target = out_file or (runs[0] / "fitness.png" if len(runs) == 1 else Path("fitness.png"))
    path = plot_runs(runs, target, x=x.value, title=title)
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
    from esjax.render import render_run

    path, total = render_run(
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
    if task is not None:
        _check_task(task, tuple(set_ or ()))
    from esjax.sweeps import SweepInterrupted
    from esjax.sweeps import sweep as run_sweep

    reports: list[ProgressReport] = []
    shown_seeds = seeds
    if resume:
        from esjax.sweeps import read_spec

        shown_seeds = int(read_spec(out_dir)["seeds"])

    def announce(configuration: Any, index: int, count: int) -> None:
        if reports:
            reports[-1].__exit__(None, None, None)
        label = ", ".join(configuration.overrides)
        console.print(f"[bold]configuration {index + 1}/{count}[/bold]: {label}", soft_wrap=True)
        report = ProgressReport(console, configuration.name, seeds=shown_seeds)
        reports.append(report.__enter__())

    def progress(row: dict[str, Any]) -> None:
        # A program runs several configurations; the bar follows the first one.
        if Path(row["run_dir"]).name == reports[-1].label:
            reports[-1](row)

    try:
        record = run_sweep(
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
    except SweepInterrupted as stop:
        err.print(Text(str(stop), style="yellow"), soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if reports:
            reports[-1].__exit__(None, None, None)
    _show_sweep(record, out_dir)


def _show_sweep(record: dict[str, Any], out_dir: Path | None) -> None:
    def cell(stats: dict[str, Any]) -> str:
        if stats.get("low") is None:
            return _number(stats.get("mean"))
        half = (stats["high"] - stats["low"]) / 2
        return f"{_number(stats['mean'])} ± {_number(half)}"

    n = record["spec"]["seeds"]
    table = Table(
        title=f"sweep of {record['spec']['task']}: test return over {n} seed(s), 95% interval",
        title_justify="left",
    )
    columns = ("configuration", "final", "best", "seeds solved", "env steps to threshold")
    for name in columns:
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for entry in record["configurations"]:
        verdicts = entry["solved_per_seed"]
        reached = entry["env_steps_to_threshold"]["mean_over_reached"]
        table.add_row(
            ", ".join(entry["overrides"]),
            cell(entry["final_test_return"]),
            cell(entry["best_test_return"]),
            f"{entry['solved_seeds']}/{len(verdicts)}" if verdicts else "-",
            _count(reached) if reached else "-",
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
    from esjax.runs import atomic_write
    from esjax.trackers import metrics_csv

    text = metrics_csv(run)
    if out_file is not None and str(out_file) == "-":
        sys.stdout.write(text)
        return
    target = out_file or run / "metrics.csv"
    try:
        atomic_write(target, text.encode())
    except OSError as error:
        raise ConfigError(f"{target}: cannot write ({error.strerror or error})") from None
    console.print(f"wrote {target}", soft_wrap=True)


@app.command(name="list", epilog=_example("esjax list"))
@handles_errors
def list_() -> None:
    """Task presets, tuned strategy presets and every evosax algorithm, with descriptions."""
    from esjax import presets
    from esjax.strategies import catalogue

    table = Table(title="Tasks", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("description")
    for name, text in presets.describe("task"):
        table.add_row(name, text)
    console.print(table)
    console.print()
    table = Table(title="Strategies", title_justify="left", show_edge=False)
    table.add_column("name", style="cyan", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("description")
    styles = {"tuned preset": "bold green", "evosax": "", "cannot run": "dim"}
    for name, kind, text in catalogue():
        table.add_row(name, Text(kind, style=styles[kind]), text)
    console.print(table)
    console.print()
    console.print(
        "Names are case-insensitive; a tuned preset wins over the evosax algorithm it tunes."
    )
    console.print(r"Run one: [cyan]esjax evolve TASK \[--strategy NAME][/cyan]")


def main() -> None:
    """Console-script entry point: one JAX CPU device per core, then the typer app."""
    from esjax.distributed import use_cpu_cores

    use_cpu_cores()  # before anything creates an array (gymnax does at import)
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
