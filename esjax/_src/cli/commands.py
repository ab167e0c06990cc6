"""Everything the ``esjax`` command line calls, in one namespace: the side of esjax that loads JAX.

Import it through :func:`esjax._src.cli.launch.library`, which sets JAX's devices first: importing
this module imports evosax, which creates an array, and the first array fixes the devices.
"""

from jax import process_index

from esjax._src.analysis.evaluation import (
    baseline_record,
    grid_record,
    policy_record,
    sweep_rows,
)
from esjax._src.analysis.plotting import plot_runs
from esjax._src.analysis.render import render_run
from esjax._src.analysis.reporting import report
from esjax._src.analysis.sweeps import SweepInterrupted, read_spec, sweep
from esjax._src.envs.suites import suite_rows
from esjax._src.run.programs import compiling_in_background
from esjax._src.run.runs import FITNESS_FIGURE, read_run_config
from esjax._src.run.trackers import metrics_csv, tracking, write_metrics_csv
from esjax._src.run.training import Interrupted, LostProcess, checked_start, evolve
from esjax._src.run.trust import grant as grant_trust
from esjax._src.specs.presets import describe, task_rows
from esjax._src.strategies.strategy import catalogue

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
