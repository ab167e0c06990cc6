"""Experiment trackers and CSV: the scalars of ``metrics.jsonl``, elsewhere.

``metrics.jsonl`` stays the record; a tracker is a copy made as the run goes. ``RunLogger`` is an
``on_progress`` callback: at each host visit it reads the rows the run appended since the last
visit and hands them, one generation at a time, to every backend asked for. Each backend is an
optional extra (``pip install "esjax[tensorboard]"``, ``[wandb]``, ``[mlflow]``) imported only
when asked for; a missing one is a :class:`~esjax._src.specs.config.ConfigError` naming the extra.

Scalar names are the metrics' own (``fitness_mean``, ``eval_return``, ...); in a multi-seed run
each gets a ``/seed<N>`` suffix. The step is the generation.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from esjax._src.run import runs
from esjax._src.run.files import open_regular, parse_json
from esjax._src.specs.config import ConfigError
from esjax._src.specs.foreign import spreadsheet_text

BACKENDS = ("tensorboard", "wandb", "mlflow")
_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
_NOT_SCALARS = ("generation", "seed")


class Tracker(Protocol):
    def log(self, generation: int, scalars: dict[str, float]) -> None: ...
    def close(self) -> None: ...


def check_backends(names: Sequence[str]) -> tuple[str, ...]:
    """Validate ``--log`` names and that each backend is installed, before anything compiles."""
    import importlib.util

    checked = []
    for name in names:
        if name not in BACKENDS:
            raise ConfigError(f"unknown tracker {name!r}; choose from {', '.join(BACKENDS)}")
        if importlib.util.find_spec(_MODULES[name]) is None:
            raise ConfigError(f'--log {name} needs the {name} extra: pip install "esjax[{name}]"')
        if name not in checked:
            checked.append(name)
    return tuple(checked)


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's numeric fields, suffixed ``/seed<N>`` when the row names its seed."""
    suffix = f"/seed{row['seed']}" if "seed" in row else ""
    out = {}
    for key, value in row.items():
        if key in _NOT_SCALARS or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[key + suffix] = float(value)
    return out


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"task.policy.hidden": "[32, 32]", "popsize": 64, ...}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        elif value is None or isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = json.dumps(value)
    return out


# ---------------------------------------------------------------------------- backends
class TensorBoardTracker:
    """Event files under ``RUN/tensorboard``: scalars plus the config for the HParams tab."""

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._summary_pb2 = summary_pb2
        self.writer = EventFileWriter(str(run_dir / "tensorboard"))
        values = {k: ("null" if v is None else v) for k, v in flat_config(config).items()}
        self._write(hparams.hparams_pb(values, trial_id=run_dir.name), 0)

    def _write(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def log(self, generation: int, scalars: dict[str, float]) -> None:
        values = [
            self._summary_pb2.Summary.Value(tag=tag, simple_value=value)
            for tag, value in scalars.items()
        ]
        self._write(self._summary_pb2.Summary(value=values), generation)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run in ``RUN/wandb`` (``WANDB_MODE=offline`` keeps it local until ``wandb sync``)."""

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        import wandb

        # A sweep opens one run per configuration in one process; without create_new, W&B
        # hands back the run already open and the configurations' scalars would mix.
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "esjax"),
                name=run_dir.name,
                dir=str(run_dir),
                config=config,
                reinit="create_new",
            )
        except wandb.errors.Error as error:  # e.g. online without `wandb login`
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ConfigError(
                f"--log wandb: {message} (WANDB_MODE=offline keeps the run local)"
            ) from None

    def log(self, generation: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=generation)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """An MLflow run in ``$MLFLOW_TRACKING_URI``, else a local file store ``RUN/mlruns``."""

    BATCH = 500  # MLflow takes at most 1000 metrics and 100 params per call

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (run_dir / "mlruns").resolve().as_uri()
            # MLflow 3 refuses a file store unless this is set; the run's own store is one.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            self.client = MlflowClient(tracking_uri=uri)
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "esjax")
            experiment = self.client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else self.client.create_experiment(name)
            )
            self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id
        except MlflowException as error:
            message = str(error.message).splitlines()[0]
            raise ConfigError(f"--log mlflow: cannot open {uri}: {message}") from None
        params = [Param(k, str(v)) for k, v in flat_config(config).items()]
        for start in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, generation: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, generation) for k, v in scalars.items()]
        for start in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + self.BATCH])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


_TRACKERS: dict[str, Callable[[Path, dict[str, Any]], Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
}


# ---------------------------------------------------------------------------- following a run
def by_generation(rows: Iterable[dict[str, Any]]) -> list[tuple[int, dict[str, float]]]:
    """Rows grouped into one scalar dict per generation (all seeds), in generation order."""
    grouped: dict[int, dict[str, float]] = {}
    for row in rows:
        grouped.setdefault(int(row["generation"]), {}).update(scalars(row))
    return sorted(grouped.items())


def check_no_tracker_links(run_dir: Path) -> None:
    """A tracker's folder in a run must be a folder of its own: a tracker writes through no
    link in a run (one to a folder elsewhere would receive its event files)."""
    for folder in runs.TRACKER_FOLDERS:
        if (run_dir / folder).is_symlink():
            raise ConfigError(
                f"{run_dir / folder}: a symbolic link; esjax follows no link in a run"
            )


class RunLogger:
    """An ``on_progress`` callback that copies new ``metrics.jsonl`` rows to trackers.

    Opens the trackers on the first report (when the run directory and its resolved config
    exist). ``skip_through`` is the last generation already logged (a resumed run: the
    generations before it were sent by the earlier process). ``then`` is called after, with
    the same report (e.g. the CLI's progress bar). Call :meth:`close` when the run ends.
    """

    def __init__(
        self,
        names: Sequence[str],
        *,
        run_dir: str | Path | None = None,
        skip_through: int = 0,
        then: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.names = check_backends(names)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.skip_through = skip_through
        self.then = then
        self.trackers: list[Tracker] = []
        self._offset = 0
        self._opened = False

    def __call__(self, progress: dict[str, Any]) -> None:
        if self.run_dir is None and progress.get("run_dir"):
            self.run_dir = Path(progress["run_dir"])
        self.flush()
        if self.then is not None:
            self.then(progress)

    def flush(self) -> None:
        """Send every complete row appended since the last call."""
        if self.run_dir is None or not self.names:
            return
        if not self._opened:
            config = runs.read_run_config(self.run_dir).to_json()
            check_no_tracker_links(self.run_dir)
            self.trackers = [_TRACKERS[name](self.run_dir, config) for name in self.names]
            self._opened = True
        path = self.run_dir / runs.METRICS
        if not runs.is_regular(path):
            return
        fd = open_regular(path)  # the run's own file: no link followed
        try:
            data = os.pread(fd, runs.METRICS_LIMIT, self._offset)
        finally:
            os.close(fd)
        complete = data[: data.rfind(b"\n") + 1]  # a row still being written waits
        lines = [line for line in complete.splitlines() if line.strip()]
        where = f"{path}: from byte {self._offset}"
        self._offset += len(complete)
        rows = [runs.check_row(parse_json(line, where), where) for line in lines]
        rows = [row for row in rows if row["generation"] > self.skip_through]
        for generation, values in by_generation(rows):
            for tracker in self.trackers:
                tracker.log(generation, values)

    def close(self) -> None:
        self.flush()
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def tracking(
    backends: Sequence[str] | None,
    report: Callable[[dict[str, Any]], None],
    resumed: str | Path | None = None,
) -> Iterator[Callable[[dict[str, Any]], None]]:
    """The ``on_progress`` callback: ``report``, after copying new metrics to the trackers.

    Without ``backends`` it is ``report`` itself. ``resumed`` is the run directory of a resumed
    run: the generations it already holds were sent by the process that wrote them, so they
    are skipped. The trackers are closed (their last rows sent) when the block exits.
    """
    if not backends:
        yield report
        return
    done = 0
    if resumed is not None:
        check_no_tracker_links(Path(resumed))  # before the run goes on, not at its first report
        done = max((int(r["generation"]) for r in runs.iter_metrics(resumed)), default=0)
    with RunLogger(backends, skip_through=done, then=report) as logger:
        yield logger


# ---------------------------------------------------------------------------- CSV
def metrics_csv(run_dir: str | Path) -> str:
    """``metrics.jsonl`` as CSV: one row per generation and seed, every field a column.

    Columns are the union of the rows' fields in first-seen order (evaluation columns are
    empty in generations without an evaluation); non-finite numbers are written as ``nan``.
    A field's name or text value that a spreadsheet would run as a formula (``=HYPERLINK(...)``
    as a metrics key) is written as text (:func:`esjax._src.specs.foreign.spreadsheet_text`).
    """
    columns: list[str] = []
    for row in runs.iter_metrics(run_dir):  # two passes over the stream: no list of rows
        columns += [key for key in row if key not in columns]
        if len(columns) > MAX_CSV_COLUMNS:
            raise ConfigError(f"{run_dir}: metrics rows of more than {MAX_CSV_COLUMNS} fields")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([spreadsheet_text(column) for column in columns])
    for row in runs.iter_metrics(run_dir):
        writer.writerow([_csv_value(row.get(column)) for column in columns])
    return buffer.getvalue()


# The most columns a metrics CSV has: esjax writes about a dozen fields.
MAX_CSV_COLUMNS = 256


def write_metrics_csv(run_dir: str | Path, target: str | Path | None = None) -> Path:
    """Write :func:`metrics_csv` to ``target`` (default ``RUN/metrics.csv``) and return its path.

    A file that cannot be written is a :class:`~esjax._src.specs.config.ConfigError` naming it.
    """
    text = metrics_csv(run_dir)
    path = Path(target) if target is not None else Path(run_dir) / runs.METRICS_CSV
    try:
        runs.atomic_write(path, text.encode(), through_special=target is not None)
    except OSError as error:
        raise ConfigError(f"{path}: cannot write ({error.strerror or error})") from None
    return path


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str):
        return spreadsheet_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
