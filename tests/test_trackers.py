"""Trackers and CSV export hold the same numbers as ``metrics.jsonl``.

Each backend's files are read back with that backend's own reader, never with esjax code:
TensorBoard's ``EventAccumulator``, W&B's ``wandb leet inspect --json`` on the offline run's
transaction log, an ``MlflowClient`` on the local file store; the CSV with Python's ``csv``
module. W&B runs offline and MLflow writes a ``file:`` store, so no test needs a network; all
three come with the dev extra.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli import SMALL, assert_clean_error, cli_env, esjax

from esjax._src.run import trackers
from esjax._src.specs.config import ConfigError

TRACKED = (*SMALL, "--generations", "3", "--seeds", "2")
LOG_ALL = ("--log", "tensorboard", "--log", "wandb", "--log", "mlflow")


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_scalars(run_dir) -> dict[int, dict[str, float]]:
    """``{generation: {"<metric>/seed<N>": value}}`` straight from ``metrics.jsonl``."""
    expected: dict[int, dict[str, float]] = {}
    for row in metrics(run_dir):
        for key, value in row.items():
            if key in ("generation", "seed") or value is None:
                continue
            expected.setdefault(row["generation"], {})[f"{key}/seed{row['seed']}"] = value
    return expected


def offline_trackers(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """W&B offline with every directory it writes under ``root``; MLflow on its default store."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(root / name.lower()))
    for name in ("WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    # esjax itself allows MLflow's file store for the run's own store.
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("tracked")
    run_dir = work / "run"
    with pytest.MonkeyPatch.context() as patch:
        offline_trackers(patch, work)
        result = esjax("evolve", "pendulum", *TRACKED, *LOG_ALL, "--out", run_dir, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir


def assert_tensorboard_holds_metrics(run_dir) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    expected: dict[str, list] = {}
    for generation, values in expected_scalars(run_dir).items():
        for tag, value in values.items():
            expected.setdefault(tag, []).append((generation, value))
    assert set(accumulator.Tags()["scalars"]) == set(expected)
    for tag, points in expected.items():
        logged = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        # TensorBoard stores simple_value as float32.
        assert logged == [(g, float(np.float32(v))) for g, v in points], tag
    assert accumulator.PluginTagToContent("hparams"), "the resolved config goes to HParams"


def wandb_records(run_dir, tmp_path) -> list[dict]:
    """The records of the run's offline transaction log, as W&B's own inspector prints them."""
    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    script = Path(sys.executable).parent / "wandb"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "wandb"]
    result = subprocess.run(
        [*command, "leet", "inspect", "--json", str(log)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def assert_wandb_holds_metrics(run_dir, tmp_path) -> None:
    records = wandb_records(run_dir, tmp_path)
    history = {}
    for record in records:
        if record["type"] == "history":
            item = record["history"]["item"]
            history[item["_step"]] = {k: v for k, v in item.items() if not k.startswith("_")}
    assert history == expected_scalars(run_dir)  # same values, same steps, per seed
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    config = {k: v for k, v in run["config"]["update"].items() if k != "_wandb"}
    assert config == json.loads((run_dir / "config.json").read_text())
    assert run["display_name"] == run_dir.name


def assert_mlflow_holds_metrics(run_dir) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("esjax").experiment_id])
    assert run.info.run_name == run_dir.name
    config = json.loads((run_dir / "config.json").read_text())
    params = run.data.params
    assert params["popsize"] == str(config["popsize"])
    learning_rate = config["strategy"]["settings"]["learning_rate"]
    assert params["strategy.settings.learning_rate"] == str(learning_rate)
    assert params["task.policy.hidden"] == json.dumps(config["task"]["policy"]["hidden"])
    logged: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        for metric in client.get_metric_history(run.info.run_id, key):
            logged.setdefault(metric.step, {})[key] = metric.value
    assert logged == expected_scalars(run_dir)


def test_tensorboard_scalars_equal_metrics_jsonl(tracked_run):
    assert {"eval_return/seed0", "fitness_mean/seed1"} <= set(expected_scalars(tracked_run)[3])
    assert_tensorboard_holds_metrics(tracked_run)


def test_wandb_offline_run_holds_metrics_and_config(tracked_run, tmp_path, monkeypatch):
    offline_trackers(monkeypatch, tmp_path)
    assert_wandb_holds_metrics(tracked_run, tmp_path)


def test_mlflow_file_store_holds_metrics_and_config(tracked_run, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3's reader asks for it too
    assert_mlflow_holds_metrics(tracked_run)


def test_each_sweep_configuration_gets_its_own_tracker_runs(tmp_path, monkeypatch):
    # Both configurations run in one program, in one process: their trackers must not mix.
    offline_trackers(monkeypatch, tmp_path)
    out = tmp_path / "sweep"
    result = esjax(
        *("sweep", "pendulum", *TRACKED, "--episodes", "4", *LOG_ALL, "--out", out),
        *("--vary", "strategy_settings.learning_rate=0.03,0.3"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run_dirs = sorted(p.parent for p in out.glob("*/config.json"))
    assert [p.name for p in run_dirs] == ["0-learning_rate=0.03", "1-learning_rate=0.3"]
    assert expected_scalars(run_dirs[0]) != expected_scalars(run_dirs[1])
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    for run_dir in run_dirs:
        assert_tensorboard_holds_metrics(run_dir)
        assert_wandb_holds_metrics(run_dir, tmp_path)
        assert_mlflow_holds_metrics(run_dir)


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


def tracker_in_a_process(name: str, cwd: Path) -> subprocess.CompletedProcess:
    """Open tracker ``name`` for ``cwd/run`` in a fresh process; a ConfigError exits 2."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom esjax._src.run import trackers\n"
        "from esjax._src.specs.config import ConfigError\ntry:\n"
        f"    trackers._TRACKERS[{name!r}](Path('run'), {{'popsize': 8}})\n"
        "except ConfigError as error:\n    print(error, file=sys.stderr)\n    sys.exit(2)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=cli_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_wandb_online_without_a_login_is_a_one_line_error(tmp_path, monkeypatch):
    offline_trackers(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no login from the user's home
    result = tracker_in_a_process("wandb", tmp_path)
    assert_clean_error(result, "--log wandb: ", "WANDB_MODE=offline")


def test_no_tracker_is_imported_unless_asked_for(tmp_path):
    code = (
        "import sys\nimport esjax._src.cli.main, esjax._src.run.training\n"
        "import esjax._src.analysis.sweeps\n"
        "import esjax._src.run.trackers\n"
        "print(sorted({'tensorboard', 'wandb', 'mlflow'} & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_unusable_mlflow_store_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    with pytest.raises(ConfigError, match=r"^--log mlflow: cannot open nosuchscheme://[^\n]*$"):
        trackers.MlflowTracker(tmp_path, {"popsize": 8})
