"""Everything the ``esjax`` command line calls, in one namespace: the side of esjax that loads JAX.

Import it through :func:`esjax.cli.launch.library`, which sets JAX's devices first: importing this
module imports evosax, which creates an array, and the first array fixes the devices.
"""

from jax import process_index

from esjax.analysis.evaluation import (
    baseline_record,
    grid_record,
    policy_record,
    sweep_rows,
)
from esjax.analysis.plotting import plot_runs
from esjax.analysis.render import render_run
from esjax.analysis.reporting import report
from esjax.analysis.sweeps import SweepInterrupted, read_spec, sweep
from esjax.engine.preflight import checked_start
from esjax.envs.suites import suite_rows
from esjax.run.programs import compiling_in_background
from esjax.run.runs import FITNESS_FIGURE, read_run_config
from esjax.run.trackers import metrics_csv, tracking, write_metrics_csv
from esjax.run.training import Interrupted, LostProcess, evolve
from esjax.run.trust import grant as grant_trust
from esjax.specs.presets import describe, task_rows
from esjax.strategies.strategy import catalogue

__all__ = [
    "FITNESS_FIGURE",
    "Interrupted",
    "LostProcess",
    "SweepInterrupted",
    "baseline_record",
    "catalogue",
    "checked_start",
    "compiling_in_background",
    "describe",
    "evolve",
    "grant_trust",
    "grid_record",
    "metrics_csv",
    "plot_runs",
    "policy_record",
    "process_index",
    "read_run_config",
    "read_spec",
    "render_run",
    "report",
    "suite_rows",
    "sweep",
    "sweep_rows",
    "task_rows",
    "tracking",
    "write_metrics_csv",
]
