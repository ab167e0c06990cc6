"""Trackers and CSV export hold the same numbers as ``metrics.jsonl``.

The event files are read back with TensorBoard's own reader (``EventAccumulator``) and the CSV
with Python's ``csv`` module, never with esjax code. TensorBoard comes with the dev extra;
the MLflow test runs where the mlflow extra is installed.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from test_cli import SMALL, assert_clean_error, esjax

from esjax import trackers
from esjax.config import ConfigError

# The module-scoped fixture is built once: every test here runs on one xdist worker.
pytestmark = pytest.mark.xdist_group("trackers")

TRACKED = (*SMALL, "--generations", "3", "--seeds", "2")


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("tracked")
    run_dir = work / "run"
    result = esjax(
        "evolve", "pendulum", *TRACKED, "--log", "tensorboard", "--out", run_dir, cwd=work
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


def test_tensorboard_scalars_equal_metrics_jsonl(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tracked_run / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    rows = metrics(tracked_run)
    expected = {}
    for row in rows:
        for key, value in row.items():
            if key in ("generation", "seed") or value is None:
                continue
            expected.setdefault(f"{key}/seed{row['seed']}", []).append((row["generation"], value))
    assert tags == set(expected)
    assert {"eval_return/seed0", "fitness_mean/seed1", "env_steps/seed0"} <= tags
    for tag, points in expected.items():
        logged = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        # TensorBoard stores simple_value as float32.
        assert logged == [(g, float(np.float32(v))) for g, v in points], tag
    hparams = accumulator.PluginTagToContent("hparams")
    assert hparams, "the resolved config goes to the HParams plugin"


def test_export_csv_matches_metrics_jsonl(tracked_run, tmp_path):
    result = esjax("export", tracked_run, "--csv", "--out", tmp_path / "m.csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with (tmp_path / "m.csv").open() as handle:
        table = list(csv.DictReader(handle))
    rows = metrics(tracked_run)
    assert len(table) == len(rows) == 6  # 3 generations x 2 seeds
    for line, row in zip(table, rows, strict=True):
        for key, value in row.items():
            if value is None:
                assert line[key] == ""
            else:
                assert math.isclose(float(line[key]), value, rel_tol=0, abs_tol=0), key
    stdout = esjax("export", tracked_run, "--csv", "--out", "-", cwd=tmp_path)
    assert stdout.returncode == 0
    assert stdout.stdout == (tmp_path / "m.csv").read_text()


def test_export_needs_a_format_and_a_run(tmp_path):
    assert_clean_error(esjax("export", tmp_path, "--csv", cwd=tmp_path), "not a run directory")


def test_unknown_tracker_is_a_usage_error(tmp_path):
    result = esjax("evolve", "pendulum", *SMALL, "--log", "neptune", cwd=tmp_path)
    assert_clean_error(result, "unknown tracker 'neptune'", "tensorboard")
    assert not (tmp_path / "runs").exists()


def test_a_missing_extra_names_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r'pip install "esjax\[mlflow\]"'):
        trackers.check_backends(["tensorboard", "mlflow"])


def test_scalars_and_grouping():
    rows = [
        {"generation": 2, "seed": 0, "fitness_mean": 1.5, "nonfinite": 0, "eval_return": None},
        {"generation": 2, "seed": 1, "fitness_mean": 2.5, "nonfinite": 1},
        {"generation": 1, "fitness_mean": -1.0},
    ]
    grouped = trackers.by_generation(rows)
    assert grouped == [
        (1, {"fitness_mean": -1.0}),
        (
            2,
            {
                "fitness_mean/seed0": 1.5,
                "nonfinite/seed0": 0.0,
                "fitness_mean/seed1": 2.5,
                "nonfinite/seed1": 1.0,
            },
        ),
    ]
    assert trackers.flat_config({"a": {"b": [1, 2], "c": None}, "d": 3}) == {
        "a.b": "[1, 2]",
        "a.c": None,
        "d": 3,
    }


def test_mlflow_file_store_holds_the_metrics(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    result = esjax(
        "evolve", "pendulum", *TRACKED, "--log", "mlflow", "--out", run_dir, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("esjax").experiment_id])
    assert run.data.params["popsize"] == "8"
    for row in metrics(run_dir):
        key = f"fitness_mean/seed{row['seed']}"
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert history[row["generation"]] == row["fitness_mean"]
