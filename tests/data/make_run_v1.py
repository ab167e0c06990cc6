"""Make the checked-in old run (``run-v1/``) and its recorded continuation (see README.md).

A run directory written by the code of its day is the only honest test that later code still
resumes it: a checkpoint written and read by the same code proves nothing about the format on
disk. This script is kept so the data can be remade, and read, to see exactly what it holds::

    python tests/data/make_run_v1.py OUT

writes ``OUT/run-v1/`` (4 generations of a tiny two-seed cartpole run, a checkpoint after
every block so ``checkpoint.prev.msgpack`` exists too) and ``OUT/run-v1-continued.json``
(what resuming a copy of it to 8 generations produced: metrics rows 5-8 without ``wall_s``,
and the final and best policies). Nothing outside ``OUT`` is written; the resumed copy lives
in a temporary directory inside ``OUT`` that is removed at the end. Both targets must not
exist yet.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The run, as keyword arguments of esjax.evolve (the test reads them back from the JSON).
EVOLVE = {
    "task": "cartpole",
    "popsize": 16,
    "rollouts": 1,
    "seed": 0,
    "seeds": 2,
    "overrides": [
        "episode_length=100",
        "policy.hidden=[8]",
        "evaluation.every=2",
        "evaluation.episodes=4",
        "normalize_obs=true",
    ],
}
GENERATIONS = 4
CONTINUED = 8
# What a run directory holds that the test needs; fitness.png and run.lock are left out.
KEEP = (
    "config.json",
    "metrics.jsonl",
    "checkpoint.msgpack",
    "checkpoint.prev.msgpack",
    "final_policy.msgpack",
    "best_policy.msgpack",
    "summary.json",
)


def _commit() -> str:
    """The commit the data is made with (``unknown`` outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("esjax", "jax", "jaxlib", "evosax", "flax", "gymnax", "numpy")
    return {name: version(name) for name in names}


def make_run(run_dir: Path) -> None:
    """4 generations, checkpointing after every block; only the files in KEEP remain."""
    import esjax

    esjax.evolve(**EVOLVE, generations=GENERATIONS, out=run_dir, checkpoint_every_s=0.0)
    for path in run_dir.iterdir():
        if path.name not in KEEP:
            path.unlink()


def continuation(run_dir: Path, scratch: Path) -> dict[str, Any]:
    """Resume a copy of ``run_dir`` to CONTINUED generations; what the continuation produced."""
    import esjax
    from esjax._src.run import runs

    copy = scratch / "run"
    shutil.copytree(run_dir, copy)
    esjax.evolve(None, out=copy, resume=True, generations=CONTINUED)
    rows = [
        {k: v for k, v in row.items() if k != "wall_s"}
        for row in runs.load_metrics(copy)
        if row["generation"] > GENERATIONS
    ]
    policies = {}
    for which in ("final", "best"):
        per_seed = [runs.read_policy(copy, which, s) for s in range(EVOLVE["seeds"])]
        policies[which] = {
            "params": [p.tolist() for _, p, _ in per_seed],
            "obs_mean": [stats[0].tolist() for _, _, stats in per_seed],
            "obs_std": [stats[1].tolist() for _, _, stats in per_seed],
        }
    return {"metrics": rows, "policies": policies}


def main(out: Path) -> None:
    run_dir, record = out / "run-v1", out / "run-v1-continued.json"
    for target in (run_dir, record):
        if target.exists():
            sys.exit(f"{target} exists; remove it first")
    out.mkdir(parents=True, exist_ok=True)
    make_run(run_dir)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        produced = continuation(run_dir, Path(scratch))
    made_by = {"commit": _commit(), "versions": _versions(), "machine": platform.machine(),
               "script": "tests/data/make_run_v1.py"}  # fmt: skip
    data = {"made_by": made_by, "evolve": EVOLVE, "generations": GENERATIONS,
            "continued_to": CONTINUED, **produced}  # fmt: skip
    record.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
