"""The race on a sweep's task file, run for real: ``sweep --resume`` must never run the code.

A sweep directory handed over (not sealed by this user) names its task by a path, as sweeps
made before they recorded their task's table do. An attacker who can rewrite that file swaps
it, every millisecond, between a task that names only data (CartPole) and one naming
``evil.py:make``, whose import writes a marker file. A resume that read the file once for its
trust check and again to build the env would, now and then, pass the check on the data version
and import the code; read once, it either runs the data task or refuses the code in one line.

The script makes a tiny sweep with the ``esjax`` console script, crafts that directory, and
resumes it ``--tries`` times (each from the crafted directory as handed over) while a thread
swaps the file; it prints the exit codes and how many times the code ran, and exits 1 if it
ran at all. Run it on another checkout with ``PYTHONPATH=/tmp/old python tools/race_sweep_task.py``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

TASK = 'env = "CartPole-v1"\nepisode_length = 16\ntest_episodes = 4\n'
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\nfrom gymnax import make\n"
SMALL = ["--popsize", "8", "--generations", "1", "--set", "evaluation.every=1",
         "--set", "evaluation.episodes=2"]  # fmt: skip


def esjax(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "esjax"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "esjax._src.cli.main"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def crafted_sweep(root: Path) -> tuple[Path, Path, Path]:
    """``(sweep directory, its task file, the marker the code writes)``."""
    (root / "data.toml").write_text(TASK)
    sweep = root / "sweep"
    made = esjax("sweep", root / "data.toml", "--vary", "strategy_settings.learning_rate=0.05,0.1",
                 "--out", sweep, *SMALL, cwd=root)  # fmt: skip
    if made.returncode != 0:
        sys.exit(f"making the sweep failed:\n{made.stderr}")
    marker, task = root / "ran", root / "race.toml"
    (root / "evil.py").write_text(EVIL.format(marker=str(marker)))
    record = json.loads((sweep / "sweep.json").read_text())
    record["spec"]["task"] = str(task)
    for recorded in ("task_table", "task_name", "task_source", "code"):
        record["spec"].pop(recorded, None)
    (sweep / "sweep.json").write_text(json.dumps(record))
    (sweep / "trust.sig").unlink(missing_ok=True)  # handed over: not this user's
    shutil.copytree(sweep, root / "handed-over")
    return sweep, task, marker


def swapping(task: Path, stop: threading.Event) -> None:
    """Swap ``task`` between the data version and the code version until ``stop``."""
    versions = [TASK, f'env = "{task.parent / "evil.py"}:make"\nepisode_length = 16\n']
    staged = []
    for i, text in enumerate(versions):
        path = task.with_name(f".race-{i}.toml")
        path.write_text(text)
        staged.append(path)
    i = 0
    while not stop.is_set():
        shutil.copyfile(staged[i % 2], task.with_name(".race.tmp"))
        os.replace(task.with_name(".race.tmp"), task)
        i += 1
        stop.wait(0.001)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    tries = parser.parse_args().tries
    with tempfile.TemporaryDirectory(prefix="esjax-race-") as folder:
        root = Path(folder)
        os.environ.setdefault("ESJAX_TRUST_KEY", str(root / "trust.key"))
        sweep, task, marker = crafted_sweep(root)
        task.write_text(TASK)
        stop = threading.Event()
        thread = threading.Thread(target=swapping, args=(task, stop), daemon=True)
        thread.start()
        codes: collections.Counter[int] = collections.Counter()
        ran = 0
        try:
            for _ in range(tries):
                shutil.rmtree(sweep)
                shutil.copytree(root / "handed-over", sweep)
                marker.unlink(missing_ok=True)
                done = esjax("sweep", "--resume", "--out", sweep, cwd=root)
                codes[done.returncode] += 1
                ran += marker.exists()
                if done.returncode not in (0, 2) or "Traceback" in done.stderr:
                    print(done.stderr[-2000:], file=sys.stderr)
        finally:
            stop.set()
            thread.join()
    print(f"{tries} resumes while the task file was swapped every millisecond: exit codes "
          f"{dict(sorted(codes.items()))}; the code ran {ran} time(s)")  # fmt: skip
    return 1 if ran else 0


if __name__ == "__main__":
    sys.exit(main())
