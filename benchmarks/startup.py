"""Warm start: how soon a second identical ``esjax evolve`` reaches its first block.

Each pair runs the same command twice in fresh processes: first with an empty compilation
cache (it compiles everything and fills the cache), then with that cache (it reads every
program back). Both report the summary's "process start → first block" (from the kernel's
process start time on Linux, so imports count) and the whole command's wall time. Pairs
alternate on a shared machine, so drift affects both sides alike; medians and the median of
the per-pair ratios are printed.

    python benchmarks/startup.py --pairs 7
    python benchmarks/startup.py cartpole --pairs 5 -- --generations 4
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_BLOCK = re.compile(r"process start → first block\D*([0-9.]+) s")


def run_once(task: str, extra: list[str], cache_dir: Path, out: Path) -> tuple[float, float]:
    """``(process start → first block, whole command)`` in seconds for one fresh process."""
    env = dict(os.environ, ESJAX_CACHE_DIR=str(cache_dir), ESJAX_NO_CACHE="", COLUMNS="200")
    command = [
        sys.executable,
        "-m",
        "esjax._src.cli.main",
        "evolve",
        task,
        *extra,
        "--out",
        str(out),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    found = FIRST_BLOCK.search(done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"esjax evolve failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return float(found.group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="pendulum")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("extra", nargs="*", help="after --: more esjax evolve arguments")
    args = parser.parse_args()
    extra = args.extra or ["--generations", "10"]

    rows = []
    with tempfile.TemporaryDirectory(prefix="esjax-startup-") as tmp:
        for pair in range(args.pairs):
            cache_dir = Path(tmp) / f"cache-{pair}"
            cold = run_once(args.task, extra, cache_dir, Path(tmp) / f"cold-{pair}")
            warm = run_once(args.task, extra, cache_dir, Path(tmp) / f"warm-{pair}")
            rows.append((cold, warm))
            print(
                f"pair {pair}: first block {cold[0]:.1f} s -> {warm[0]:.1f} s "
                f"({warm[0] / cold[0]:.0%}); whole command {cold[1]:.1f} s -> {warm[1]:.1f} s"
            )

    median = statistics.median
    cold_first, warm_first = median([c[0] for c, _ in rows]), median([w[0] for _, w in rows])
    cold_wall, warm_wall = median([c[1] for c, _ in rows]), median([w[1] for _, w in rows])
    ratios = [warm[0] / cold[0] for cold, warm in rows]
    print(
        f"\nmedian over {len(rows)} pairs: first block {cold_first:.1f} s cold, {warm_first:.1f} s "
        f"warm; warm/cold {median(ratios):.0%} (range {min(ratios):.0%}-{max(ratios):.0%}); "
        f"whole command {cold_wall:.1f} s cold, {warm_wall:.1f} s warm"
    )


if __name__ == "__main__":
    main()
