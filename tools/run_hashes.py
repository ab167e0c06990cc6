"""Fingerprints of three small runs, to show a refactor left every number unchanged.

Each run's ``metrics.jsonl`` (without wall times) and every seed's final and best saved policy
are hashed together. Run it once on the old code and once on the new, e.g. with the old tree
unpacked by ``git archive OLD | tar -x -C /tmp/old``::

    PYTHONPATH=/tmp/old python tools/run_hashes.py
    python tools/run_hashes.py
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python tools/run_hashes.py

The same hashes mean byte-identical results. The runs cover two seeds in one program, member
groups that share episodes (``env_groups``) and a population algorithm that re-tests its
leaders (``validate_top``).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from esjax.runs import load_metrics, read_policy
from esjax.training import evolve

SHORT = ["evaluation.every=2", "evaluation.episodes=4"]
RUNS = {
    "cartpole, 2 seeds": ("cartpole", {"seeds": 2}, ["episode_length=50", *SHORT]),
    "pendulum, env_groups=2": (
        "pendulum",
        {"seeds": 1},
        ["episode_length=40", *SHORT, "strategy_settings.env_groups=2"],
    ),
    "SimpleGA, validate_top=4": (
        "cartpole",
        {"seeds": 1, "strategy": "SimpleGA"},
        ["episode_length=50", *SHORT, "strategy_settings.validate_top=4",
         "strategy_settings.validate_episodes=4"],
    ),
}  # fmt: skip


def fingerprint(run_dir: Path, seeds: int) -> str:
    rows = [{k: v for k, v in row.items() if k != "wall_s"} for row in load_metrics(run_dir)]
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode())
    for seed in range(seeds):
        for which in ("final", "best"):
            digest.update(read_policy(run_dir, which, seed)[1].tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for label, (task, settings, overrides) in RUNS.items():
            out = Path(scratch) / task
            evolve(task, popsize=16, generations=4, rollouts=2, out=out, overwrite=True,
                   overrides=overrides, **settings)  # fmt: skip
            print(f"{label:26s} {fingerprint(out, settings['seeds'])}")


if __name__ == "__main__":
    main()
