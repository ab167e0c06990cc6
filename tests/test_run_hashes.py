"""``tools/run_hashes.py``'s three tiny runs give the numbers recorded in
``tests/data/run_hashes.json``: a refactor that changes any number of a run fails here.

Exact bits depend on the CPU's vector instructions and the numeric packages' versions, and CI
runs on another machine with whatever versions pip resolves. So the exact fingerprints are
checked only where the recorded environment is this one (else the test is skipped, naming the
difference); the rounded numbers are checked everywhere. Regenerate the record, after making
sure a change of numbers is intended, with ``python tools/run_hashes.py --write``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "run_hashes.py"


def load_tool() -> ModuleType:
    """The tool as a module (``tools/`` is no package); registered, as its dataclass needs."""
    spec = importlib.util.spec_from_file_location("run_hashes", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


run_hashes = load_tool()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(run_hashes.RECORD.read_text())


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict[str, Any]:
    """The three runs made here, fingerprinted once for every test in this file."""
    return run_hashes.run_fingerprints(tmp_path_factory.mktemp("run_hashes"))


def moved_metrics(now: list[dict], then: list[dict], digits: int) -> list[str]:
    """The metric values that moved by more than one step in their last rounded digit."""
    if [sorted(row) for row in now] != [sorted(row) for row in then]:
        return ["the metrics rows or their columns differ"]
    moved = []
    for row, old_row in zip(now, then, strict=True):
        for key, value in row.items():
            old = old_row[key]
            if isinstance(value, float) and isinstance(old, float):
                scale = max(abs(value), abs(old))
                step = 10.0 ** (math.floor(math.log10(scale)) - digits + 1) if scale else 0.0
                if abs(value - old) > 1.001 * step:
                    moved.append(f"generation {row['generation']} {key}: {old} -> {value}")
            elif value != old:
                moved.append(f"generation {row['generation']} {key}: {old} -> {value}")
    return moved


def moved_weights(now: dict[str, dict], then: dict[str, dict]) -> list[str]:
    """The policy entries that moved by more than one rounding step."""
    if sorted(now) != sorted(then):
        return [f"policies {sorted(then)} -> {sorted(now)}"]
    moved = []
    for name, array in now.items():
        old = then[name]
        if len(array["quanta"]) != len(old["quanta"]):
            moved.append(f"{name}: {len(old['quanta'])} -> {len(array['quanta'])} entries")
            continue
        values = np.asarray(array["quanta"]) * array["step"]
        old_values = np.asarray(old["quanta"]) * old["step"]
        far = np.flatnonzero(np.abs(values - old_values) > 1.001 * max(array["step"], old["step"]))
        if far.size:
            moved.append(f"{name}: {far.size} entries moved, first at index {far[0]}")
    return moved


def test_the_record_holds_the_tools_runs(recorded):
    assert sorted(recorded["runs"]) == sorted(run_hashes.RUNS), "run --write after editing RUNS"
    assert recorded["significant_digits"] == run_hashes.SIGNIFICANT_DIGITS


def test_rounded_numbers_are_the_recorded_ones(found, recorded):
    """Everywhere. Equal rounded fingerprints pass at once; otherwise every number may differ
    by one rounding step (a value at a rounding boundary that the last bit tipped over)."""
    for label, prints in found.items():
        then = recorded["runs"][label]
        if prints.rounded == then["rounded"]:
            continue
        digits = recorded["significant_digits"]
        moved = moved_metrics(prints.numbers["metrics"], then["numbers"]["metrics"], digits)
        moved += moved_weights(prints.numbers["policies"], then["numbers"]["policies"])
        assert not moved, f"{label}: numbers changed:\n" + "\n".join(moved[:20])


def test_exact_fingerprints_where_the_environment_is_the_recorded_one(found, recorded):
    here, then = run_hashes.environment(), recorded["environment"]
    differ = {key: (then.get(key), here[key]) for key in here if then.get(key) != here[key]}
    if differ:
        pytest.skip(f"exact bits are pinned for another environment: {differ}")
    exact = {label: prints.exact for label, prints in found.items()}
    assert exact == {label: run["exact"] for label, run in recorded["runs"].items()}
