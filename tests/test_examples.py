"""The meta-evolution examples run end to end at a tiny scale (popsize 16, 3 generations)."""

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
        [sys.executable, str(REPO / "examples" / script), "--tiny", "--out", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("script", "extra", "splits"),
    [
        ("meta_pendulum.py", ("--task", "sign"), ["train", "extrapolate"]),
        ("meta_bandit.py", (), ["p010", "p025", "p040"]),
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
    assert (tmp_path / "table.md").read_text().startswith("|")
