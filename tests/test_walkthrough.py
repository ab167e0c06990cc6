"""examples/walkthrough.ipynb: every cell runs at the tiny size, and the committed outputs come
from a full-size run of the code cells as they stand (tools/run_walkthrough.py)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

import esjax

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "walkthrough.ipynb"
# What the full-size outputs must show inline: the fitness curve, the meta heatmap, the
# seeds' performance profile and the sweep's; and the rendered episode.
FIGURES = {"image/png": 4, "image/gif": 1}
MAX_BYTES = 4 * 2**20  # the committed notebook, outputs and all


def load_runner():
    spec = importlib.util.spec_from_file_location(
        "run_walkthrough", REPO / "tools" / "run_walkthrough.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def declared_sizes(notebook) -> dict[str, dict]:
    """``FULL_SIZE`` and ``TINY_SIZE`` as the settings cell writes them (read, not run)."""
    found = {}
    for cell in code_cells(notebook):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                name = getattr(node.targets[0], "id", None)
                if name in ("FULL_SIZE", "TINY_SIZE"):
                    found[name] = ast.literal_eval(node.value)
    assert set(found) == {"FULL_SIZE", "TINY_SIZE"}, "the settings cell lost FULL_SIZE or TINY_SIZE"
    return found


def stamp(notebook) -> dict:
    """The JSON line the last code cell prints."""
    last = code_cells(notebook)[-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.output_type == "stream")
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, "the last cell printed no stamp"
    return json.loads(lines[-1])


def figures(notebook) -> dict[str, int]:
    counts = dict.fromkeys(FIGURES, 0)
    for cell in code_cells(notebook):
        for output in cell.outputs:
            for mime in FIGURES:
                if mime in output.get("data", {}):
                    counts[mime] += 1
    return counts


def errors(notebook) -> list[str]:
    return [
        f"{output.ename}: {output.evalue}"
        for cell in code_cells(notebook)
        for output in cell.outputs
        if output.output_type == "error"
    ]


def test_committed_outputs_are_from_a_full_run_of_this_code():
    runner = load_runner()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert NOTEBOOK.stat().st_size < MAX_BYTES
    recorded = notebook.metadata.get(runner.METADATA_KEY, {})
    assert recorded.get("size") == "full", "outputs not from a full-size run"
    assert recorded.get("code_sha256") == runner.code_digest(notebook), (
        "code cells changed since the outputs were made: python tools/run_walkthrough.py"
    )
    counts = [cell.execution_count for cell in code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1)), "cells not run once each, top to bottom"
    assert errors(notebook) == []
    made = stamp(notebook)
    assert made["size"] == "full"
    assert made["settings"] == declared_sizes(notebook)["FULL_SIZE"]
    assert made["esjax"] == esjax.__version__
    assert figures(notebook) == FIGURES


def test_every_cell_runs_at_the_tiny_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's run directories and GIFs
    notebook, _ = load_runner().execute(NOTEBOOK, "tiny", timeout_s=600)  # a cell's error raises
    assert errors(notebook) == []
    made = stamp(notebook)
    assert made["size"] == "tiny"
    assert made["settings"] == declared_sizes(notebook)["TINY_SIZE"]
    assert figures(notebook) == FIGURES
    assert list(tmp_path.glob("esjax-walkthrough-*/pendulum/config.json"))


def test_both_sizes_set_the_same_fields():
    sizes = declared_sizes(nbformat.read(NOTEBOOK, as_version=4))
    assert set(sizes["TINY_SIZE"]) == set(sizes["FULL_SIZE"])
