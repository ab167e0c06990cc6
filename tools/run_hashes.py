"""Fingerprints of three small runs, to show a refactor left every number unchanged.

Each run's ``metrics.jsonl`` (without wall times) and every seed's final and best saved policy
are hashed together, twice (:func:`fingerprint`):

- **exact**: the bytes as written. The same exact fingerprint means byte-identical results, but
  only on the same CPU features and library versions: XLA may round the last bit differently
  with other vector instructions (AVX2 against AVX-512) or another jax.
- **rounded**: the metrics' floats rounded to :data:`SIGNIFICANT_DIGITS` significant digits and
  each policy array to whole multiples of a step that many digits below its largest entry
  (:class:`Fingerprint`'s ``numbers``), so last-bit differences between CPUs mostly give the
  same fingerprint while any real change of a number gives another. Mostly: a value within a
  last-bit difference of a rounding boundary lands on the other side of it on another CPU
  (limiting XLA to SSE4.2 here flipped a few of the 386 cartpole weights), so the test keeps
  the rounded numbers too and, when only the rounded fingerprint moved, accepts numbers that
  each moved by at most one rounding step.

Run it once on the old code and once on the new, e.g. with the old tree unpacked by
``git archive OLD | tar -x -C /tmp/old``::

    PYTHONPATH=/tmp/old python tools/run_hashes.py
    python tools/run_hashes.py
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python tools/run_hashes.py

``--write`` also records the fingerprints and this machine's environment in
``tests/data/run_hashes.json``, which ``tests/test_run_hashes.py`` checks. The runs cover two
seeds in one program, member groups that share episodes (``env_groups``) and a population
algorithm that re-tests its leaders (``validate_top``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import tempfile
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from esjax import evolve
from esjax._src.run.runs import load_metrics, read_policy

RECORD = Path(__file__).resolve().parents[1] / "tests" / "data" / "run_hashes.json"
SIGNIFICANT_DIGITS = 5
# Packages whose versions decide the exact bits: the compiler, and the code it compiles.
NUMERIC_PACKAGES = ("jax", "jaxlib", "numpy", "evosax", "gymnax", "flax", "optax")
# The /proc/cpuinfo flags that change which vector instructions XLA's CPU backend emits.
XLA_CPU_FLAGS = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw",
    "avx512vl", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile", "amx_bf16", "amx_int8",
)  # fmt: skip

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


@dataclass(frozen=True)
class Fingerprint:
    """A run's two fingerprints, 16 hex digits each (see the module docstring), and the rounded
    numbers behind the second: ``{"metrics": rows, "policies": {"SEED/WHICH": array}}``."""

    exact: str
    rounded: str
    numbers: dict[str, Any]


def round_metric(value: Any) -> Any:
    """A float to :data:`SIGNIFICANT_DIGITS` significant digits; anything else as it is."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value + 0.0:.{SIGNIFICANT_DIGITS - 1}e}")  # + 0.0: -0.0 reads as 0.0
    return value


def round_array(array: np.ndarray) -> dict[str, Any]:
    """``array`` as whole multiples (``quanta``) of a ``step`` :data:`SIGNIFICANT_DIGITS`
    digits below its largest magnitude, so a near-zero entry is judged at the array's scale,
    not its own (a weight that is noise around zero would otherwise never round the same)."""
    values = np.nan_to_num(np.asarray(array, dtype=np.float64).ravel(), posinf=0.0, neginf=0.0)
    largest = float(np.max(np.abs(values), initial=0.0))
    exponent = math.floor(math.log10(largest)) if largest > 0 else 0
    step = 10.0 ** (exponent - (SIGNIFICANT_DIGITS - 1))
    return {"step": step, "quanta": np.round(values / step).astype(np.int64).tolist()}


def fingerprint(run_dir: Path, seeds: int) -> Fingerprint:
    """Both fingerprints of a finished run, from one read of its metrics and policies."""
    rows = [{k: v for k, v in row.items() if k != "wall_s"} for row in load_metrics(run_dir)]
    exact = hashlib.sha256(json.dumps(rows, sort_keys=True).encode())
    numbers: dict[str, Any] = {
        "metrics": [{k: round_metric(v) for k, v in row.items()} for row in rows],
        "policies": {},
    }
    for seed in range(seeds):
        for which in ("final", "best"):
            params = read_policy(run_dir, which, seed)[1]
            exact.update(params.tobytes())
            numbers["policies"][f"{seed}/{which}"] = round_array(params)
    rounded = hashlib.sha256(json.dumps(numbers, sort_keys=True).encode())
    return Fingerprint(exact.hexdigest()[:16], rounded.hexdigest()[:16], numbers)


def run_fingerprints(scratch: Path) -> dict[str, Fingerprint]:
    """Run :data:`RUNS` inside ``scratch`` and fingerprint each, by label."""
    found = {}
    for label, (task, settings, overrides) in RUNS.items():
        out = scratch / task
        evolve(task, popsize=16, generations=4, rollouts=2, out=out, overwrite=True,
               overrides=overrides, **settings)  # fmt: skip
        found[label] = fingerprint(out, settings["seeds"])
    return found


def environment() -> dict[str, Any]:
    """What decides the exact bits here: the numeric packages' versions, the CPU's
    vector-instruction flags (empty where ``/proc/cpuinfo`` cannot be read) and ``XLA_FLAGS``."""
    versions = {}
    for name in NUMERIC_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags.update(line.partition(":")[2].split())
    except OSError:
        pass
    return {
        "machine": platform.machine(),
        "cpu_flags": [flag for flag in XLA_CPU_FLAGS if flag in flags],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),  # e.g. --xla_cpu_max_isa changes the bits
        "packages": versions,
    }


def record(found: dict[str, Fingerprint]) -> str:
    """The JSON that ``--write`` keeps and the test compares against; each list of numbers on
    one line, so the file stays short and a changed run shows as changed lines."""
    text = json.dumps(
        {
            "significant_digits": SIGNIFICANT_DIGITS,
            "environment": environment(),
            "runs": {label: asdict(prints) for label, prints in found.items()},
        },
        indent=1,
    )
    return re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record them in {RECORD}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        found = run_fingerprints(Path(scratch))
    print(f"{'run':26s} {'exact':16s} rounded")
    for label, prints in found.items():
        print(f"{label:26s} {prints.exact} {prints.rounded}")
    if args.write:
        RECORD.write_text(record(found))
        print(f"written: {RECORD}")


if __name__ == "__main__":
    main()
