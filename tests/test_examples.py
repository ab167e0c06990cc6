"""The meta-evolution examples and the study behind docs/meta.md run end to end at a tiny
scale (popsize 16, a few generations)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_example(script: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, str(REPO / script), "--tiny", "--out", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("script", "extra", "splits"),
    [
        ("benchmarks/meta_pendulum.py", ("--task", "sign"), ["train", "extrapolate"]),
        ("examples/meta_bandit.py", (), ["p010", "p025", "p040"]),
    ],
)
def test_example_tiny(tmp_path: Path, script: str, extra: tuple[str, ...], splits: list[str]):
    done = run_example(script, tmp_path, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    lstm = results["runs"]["lstm"]
    for split in splits:
        assert len(lstm[split]) == 2  # one value per seed
        assert len(lstm[f"{split}_lesion"]) == 2
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("|")
    if script.endswith("meta_pendulum.py"):  # the analytic controller on every seed's episodes
        analytic = results["runs"]["analytic"]
        for split in splits:
            assert len(analytic[split]) == len(analytic[f"{split}_zero"]) == 2
        assert "analytic controller" in table and "score vs analytic" in table


def test_merge_seeds_joins_runs_of_the_same_budget():
    """More seeds trained later join per-seed lists; a run of another budget is left out."""
    example = load_example()
    budget = "popsize 256, 500 generations"
    first = {
        "task": "t",
        "splits": ["train"],
        "runs": {
            "lstm": {
                "budget": budget,
                "wall_s": 10.0,
                "train": [1.0, 2.0],
                "train_lesion": [0.0, 0.5],
            },
            "mlp_stack4": {"budget": budget, "wall_s": 5.0, "train": [3.0]},
            "mlp_blind": {"budget": budget, "wall_s": 1.0, "train": [4.0]},
        },
    }
    later = {
        "task": "t",
        "runs": {
            "lstm": {
                "budget": budget,
                "wall_s": 4.0,
                "seeds": [2],
                "train": [5.0],
                "train_lesion": [6.0],
            },
            "mlp_blind": {"budget": "popsize 16, 3 generations", "wall_s": 1.0, "train": [7.0]},
        },
    }
    merged = example.merge_seeds(first, later)
    assert merged["runs"] == {
        "lstm": {
            "budget": budget,
            "wall_s": 14.0,
            "seeds": [0, 1, 2],
            "train": [1.0, 2.0, 5.0],
            "train_lesion": [0.0, 0.5, 6.0],
        }
    }
    assert first["runs"]["lstm"]["train"] == [1.0, 2.0]  # the inputs are not modified
    later["runs"]["lstm"]["seeds"] = [1]  # seed 1 again: refused, it would count twice
    with pytest.raises(ValueError, match=r"seeds \[1\] are in both"):
        example.merge_seeds(first, later)
    with pytest.raises(ValueError, match="task"):
        example.merge_seeds(first, {**later, "task": "other"})


def load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "meta_pendulum", REPO / "benchmarks/meta_pendulum.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_score_table_normalises_per_seed_against_analytic_and_by_means_against_oracle():
    """Worked by hand: seed 0 scores (-500 + 1000) / (-200 + 1000) = 0.625, seed 1
    (-300 + 1200) / (-300 + 1200) = 1; against the oracle's means (-400, zero -1100):
    (-500 + 1100) / 700 and (-300 + 1100) / 700."""
    example = load_example()
    results = {
        "task": "t",
        "splits": ["train"],
        "runs": {
            "analytic": {"train": [-200.0, -300.0], "train_zero": [-1000.0, -1200.0]},
            "mlp_oracle": {"train": [-350.0, -450.0], "train_zero": [-1000.0, -1200.0]},
            "lstm": {"train": [-500.0, -300.0]},
        },
    }
    assert example.vs_analytic([-500.0, -300.0], results, "train") == pytest.approx([0.625, 1.0])
    assert example.vs_oracle([-500.0, -300.0], results, "train") == pytest.approx(
        [600 / 700, 800 / 700]
    )
    table = example.score_table(results)
    lstm = next(line for line in table.splitlines() if line.startswith("| LSTM |"))
    assert "0.81 ± " in lstm and "1.00 ± " in lstm  # mean of 0.625 and 1; of 6/7 and 8/7
    assert table.splitlines()[2].startswith("| analytic controller")
    paired = example.paired_table(results)
    assert "| analytic − LSTM | +150 ± " in paired


def test_mean_of_test_sets_table_weighs_each_test_set_equally():
    """Worked by hand: seed 0's test sets -100, -300 -> -200; seed 1's -200, -600 -> -400;
    their mean is -300. The train split is shown but not averaged in."""
    example = load_example()
    results = {
        "task": "t",
        "splits": ["train", "test-1", "test-2"],
        "runs": {
            "lstm": {
                "train": [-50.0, -70.0],
                "test-1": [-100.0, -200.0],
                "test-2": [-300.0, -600.0],
                "wall_s": 12.0,
            },
        },
    }
    assert example.held_out_test_splits(results) == ["test-1", "test-2"]
    table = example.mean_of_test_sets_table(results)
    header, _, lstm = table.splitlines()
    assert "mean of the 2 test sets" in header
    cells = [c.strip() for c in lstm.strip("|").split("|")]
    assert cells[0] == "LSTM" and cells[1].startswith("-60 ± ")
    assert cells[4].startswith("-300 ± ") and cells[5] == "-200 / -400" and cells[6] == "12 s"
    assert example.all_tables(results).startswith(table)
    no_test_sets = dict(results, splits=["train", "extrapolate"])
    assert "mean of the" not in example.all_tables(no_test_sets)


def test_the_trainer_example_meta_evolves_an_lstm_and_tests_it_held_out():
    """examples/meta_pendulum.py: an LSTM and an MLP, each over three seeds in one program,
    tested on the training variants and the held-out ones, in about 40 lines."""
    script = REPO / "examples" / "meta_pendulum.py"
    assert len(script.read_text().splitlines()) <= 40
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), "--tiny"], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split(" on ")[0].strip() for line in lines] == ["LSTM", "LSTM", "MLP", "MLP"]
    assert all(len(line.split("seeds [")[1].split()) == 3 for line in lines), lines
