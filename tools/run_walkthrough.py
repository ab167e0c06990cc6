"""Execute examples/walkthrough.ipynb and keep its outputs in the file.

    python tools/run_walkthrough.py              # full size, about 5 minutes; rewrites the notebook
    python tools/run_walkthrough.py --size tiny --out /tmp/walkthrough.ipynb   # what the test runs

The notebook runs in a kernel of this Python (``python3``, from ipykernel), in ``examples/``,
with ``ESJAX_WALKTHROUGH_SIZE`` set. A full-size run records a digest of the code cells in the
notebook's metadata (``esjax_walkthrough``); ``tests/test_walkthrough.py`` checks that digest
and the settings stamped in the last cell's output against the notebook as it stands, so
outputs left over from older code fail the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "walkthrough.ipynb"
SIZE_VARIABLE = "ESJAX_WALKTHROUGH_SIZE"
METADATA_KEY = "esjax_walkthrough"


def code_digest(notebook) -> str:
    """SHA-256 of the code cells' sources, in order: what the outputs were made from."""
    h = hashlib.sha256()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode())
            h.update(b"\0")
    return h.hexdigest()


def execute(path: Path, size: str, timeout_s: int = 900):
    """The notebook at ``path`` executed at ``size`` (``full`` or ``tiny``); a failing cell raises
    ``nbclient.exceptions.CellExecutionError``. Returns ``(notebook, wall seconds)``."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=timeout_s,
        resources={"metadata": {"path": str(path.parent)}},
    )
    previous = os.environ.get(SIZE_VARIABLE)
    os.environ[SIZE_VARIABLE] = size  # the kernel inherits this process's environment
    try:
        start = time.perf_counter()
        client.execute()
        wall_s = time.perf_counter() - start
    finally:
        if previous is None:
            os.environ.pop(SIZE_VARIABLE, None)
        else:
            os.environ[SIZE_VARIABLE] = previous
    return notebook, wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--out", type=Path, default=None, help="default: the notebook itself")
    args = parser.parse_args()
    import nbformat

    notebook, wall_s = execute(NOTEBOOK, args.size)
    notebook.metadata[METADATA_KEY] = {"size": args.size, "code_sha256": code_digest(notebook)}
    out = args.out or NOTEBOOK
    nbformat.write(notebook, out)
    print(f"{args.size}: executed in {wall_s:.1f} s, written to {out}")


if __name__ == "__main__":
    main()
