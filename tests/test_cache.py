"""The persistent compilation cache: a program read back from disk gives the same numbers.

Each run is its own process (a cache only matters across processes): a first one compiles and
writes the cache, a second one reads it; both are compared with a run that never touches a
cache. JAX's monitoring events say whether the second process really read from the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_cli import SMALL, cli_env

from esjax._src.run import cache

REPO = Path(__file__).resolve().parents[1]

# One tiny run in a fresh process; prints cache hits/misses and the final search mean.
RUN_ONCE = textwrap.dedent(
    """
    import json, sys
    import jax
    import numpy as np
    from esjax._src.run import cache
    from esjax._src.run.training import evolve
    from esjax._src.run.runs import read_policy

    events = {"hits": 0, "misses": 0}
    def count(name, **_):
        if name == "/jax/compilation_cache/cache_hits":
            events["hits"] += 1
        elif name == "/jax/compilation_cache/cache_misses":
            events["misses"] += 1
    jax.monitoring.register_event_listener(count)
    traced = set()  # the Python functions this process traced
    def trace(name, seconds, fun_name=None, **_):
        if name == "/jax/core/compile/jaxpr_trace_duration":
            traced.add(fun_name)
    jax.monitoring.register_event_duration_secs_listener(trace)
    if sys.argv[1] != "off":
        cache.enable_compilation_cache(sys.argv[1])
    out = sys.argv[2]
    evolve("pendulum", popsize=8, rollouts=1, generations=3, seeds=2, out=out,
           overrides=["episode_length=16", "evaluation.every=1", "evaluation.episodes=4"])
    _, flat, _ = read_policy(out, "final", 1)
    rows = [json.loads(line) for line in open(out + "/metrics.jsonl")]
    for row in rows:
        row.pop("wall_s")
    result = {**events, "traced": sorted(traced), "mean": np.asarray(flat).tolist(), "rows": rows}
    print(json.dumps(result))
    """
)


def run_once(cache_dir: Path | str, out: Path) -> dict:
    env = dict(cli_env(), ESJAX_NO_CACHE="")
    result = subprocess.run(
        [sys.executable, "-c", RUN_ONCE, str(cache_dir), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_cached_program_gives_identical_results(tmp_path):
    cache_dir = tmp_path / "cache"
    first = run_once(cache_dir, tmp_path / "first")
    # The first process compiles (misses) and writes the cache; it may also hit entries it wrote
    # itself, when one program is compiled twice in a process (eager ops of the same shape).
    assert first["misses"] > 0
    assert any(cache_dir.iterdir())
    second = run_once(cache_dir, tmp_path / "second")
    assert second["hits"] > 0
    assert second["misses"] == 0  # every program came from disk
    # The generation block and the evaluation were read back as exported modules, not traced,
    # and the strategy's traced settings were read back, not found by tracing it again.
    assert "traced_for_export" in first["traced"] and "step" in first["traced"]
    assert "traced_for_export" not in second["traced"] and "step" not in second["traced"]
    kept = list((cache_dir / "esjax-programs").iterdir())
    assert sorted(p.name.split("-")[0] for p in kept) == ["block", "evaluation"]
    for path in kept:  # a damaged module is traced again, never trusted
        path.write_bytes(path.read_bytes()[:100])
    damaged = run_once(cache_dir, tmp_path / "damaged")
    assert "traced_for_export" in damaged["traced"]
    uncached = run_once("off", tmp_path / "uncached")
    assert uncached["hits"] == 0 and uncached["misses"] == 0
    assert not (tmp_path / "off").exists()
    for run in (first, second, damaged):
        assert run["mean"] == uncached["mean"]  # bit for bit, as JSON floats round-trip
        assert run["rows"] == uncached["rows"]


def test_cli_uses_the_cache_by_default_and_no_cache_turns_it_off(tmp_path):
    env_dir = tmp_path / "xdg"
    base = ("evolve", "pendulum", *SMALL, "--generations", "1")
    env = dict(cli_env(), XDG_CACHE_HOME=str(env_dir), ESJAX_NO_CACHE="")
    env.pop(cache.ENV_DIR, None)

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "esjax._src.cli.main", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)

    off = run("--no-cache", *base, "--out", "off")
    assert off.returncode == 0, off.stderr
    assert not (env_dir / "esjax").exists()
    on = run(*base, "--out", "on")
    assert on.returncode == 0, on.stderr
    assert any((env_dir / "esjax" / "xla").iterdir())


def test_an_unwritable_cache_is_a_warning_not_a_failure(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    env = dict(cli_env(), ESJAX_CACHE_DIR=str(blocker / "xla"), ESJAX_NO_CACHE="")
    command = [sys.executable, "-m", "esjax._src.cli.main", "evolve", "pendulum", *SMALL]
    result = subprocess.run(
        [*command, "--generations", "1", "--out", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "compilation cache" in result.stderr and "running without it" in result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "run" / "summary.json").is_file()


def test_prune_keeps_the_newest_entries_under_the_cap(tmp_path):
    for i in range(5):
        path = tmp_path / f"entry-{i}"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    removed = cache.prune(tmp_path, 250)
    assert removed == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry-3", "entry-4"]
    assert cache.prune(tmp_path, 250) == 0


def test_cache_dir_follows_xdg_and_the_override(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.default_cache_dir() == tmp_path / "esjax" / "xla"
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "elsewhere"))
    assert cache.default_cache_dir() == tmp_path / "elsewhere"
    for value, disabled in (("", False), ("0", False), ("1", True), ("yes", True)):
        monkeypatch.setenv(cache.ENV_DISABLE, value)
        assert cache.disabled_by_env() is disabled


def test_remembered_keeps_a_result_beside_the_cache_and_only_while_it_is_on(tmp_path):
    import jax

    calls = []

    def compute():
        calls.append(1)
        return ["learning_rate", 0.5]

    saved = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        assert len(calls) == 2  # no cache, nothing kept

        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        (kept,) = (tmp_path / "esjax-remembered").iterdir()
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        assert len(calls) == 3  # read back the second time
        assert cache.remembered("test", {"a": 2}, compute) == ["learning_rate", 0.5]
        assert len(calls) == 4  # another key is computed

        kept.write_text("{not json")  # a damaged entry is recomputed and rewritten
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        assert len(calls) == 5
        assert json.loads(kept.read_text()) == {"value": ["learning_rate", 0.5]}

        blocker = tmp_path / "a-file"
        blocker.write_text("")
        jax.config.update("jax_compilation_cache_dir", str(blocker))  # cannot hold a directory
        assert cache.remembered("test", {"a": 1}, compute) == ["learning_rate", 0.5]
        assert len(calls) == 6
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_traced_settings_read_back_equal_the_ones_found_by_tracing(tmp_path):
    import jax

    from esjax._src.run.cache import remembered
    from esjax._src.strategies.strategy import build_strategy, load_strategy, traced_settings

    saved = jax.config.jax_compilation_cache_dir
    try:
        for name in ("open_es", "cma_es"):
            strategy = build_strategy(load_strategy(name), 40, 8)
            jax.config.update("jax_compilation_cache_dir", None)
            found = traced_settings(strategy, remembered)
            assert "std_init" in found
            jax.config.update("jax_compilation_cache_dir", str(tmp_path))
            assert traced_settings(strategy, remembered) == found  # computed and written
            assert traced_settings(strategy, remembered) == found  # read back
            assert traced_settings(strategy) == found  # strategies alone keep nothing
        assert len(list((tmp_path / "esjax-remembered").iterdir())) == 2
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_the_code_fingerprint_sees_a_library_edited_in_place():
    """A patched env or strategy with an unchanged version must not reuse a kept program."""
    import importlib.util

    source = Path(importlib.util.find_spec("gymnax").origin).parent / "environments" / "spaces.py"
    before = source.stat()
    fingerprint = cache.code_fingerprint.__wrapped__
    try:
        first = fingerprint()
        assert fingerprint() == first
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        assert fingerprint() != first
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert fingerprint() == first


SCALED_ENV = """
from gymnax.environments.classic_control.cartpole import CartPole

SCALE = {scale}


class Scaled(CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        return obs, state, reward * SCALE, done, info


def make():
    env = Scaled()
    return env, env.default_params
"""


def test_an_edited_user_env_is_traced_again_not_read_back(tmp_path):
    """Kept programs are keyed by a user env's source: after its reward is scaled by 100, the
    next process runs the new env (it once read the old program back and gave the old numbers)."""
    env_file, task = tmp_path / "scaled.py", tmp_path / "scaled.toml"
    task.write_text(f'env = "{env_file}:make"\nepisode_length = 16\npolicy.hidden = [8]\n')
    env = dict(cli_env(), ESJAX_NO_CACHE="")
    means = []
    for scale in (1, 100):
        env_file.write_text(SCALED_ENV.format(scale=scale))
        command = [sys.executable, "-m", "esjax", "evolve", str(task), "--generations", "1",
                   "--popsize", "8", "--out", str(tmp_path / f"run{scale}")]  # fmt: skip
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        rows = (tmp_path / f"run{scale}" / "metrics.jsonl").read_text().splitlines()
        means.append(json.loads(rows[0])["fitness_mean"])
    assert means[1] == pytest.approx(100 * means[0], rel=1e-5)


MAIN_ENV_RUN = """
import sys
from pathlib import Path
import esjax
from esjax._src.run import cache
{env}
cache.enable_compilation_cache()  # as the command line does; the Python API leaves it off
task = Path(sys.argv[1])
task.write_text('env = "__main__:make"\\nepisode_length = 16\\npolicy.hidden = [8]\\n')
esjax.evolve(task, generations=1, popsize=8, out=sys.argv[2])
"""


def test_an_env_without_a_file_is_never_read_back(tmp_path):
    """An env defined in ``__main__`` (a notebook's cell, ``python -c``) has no source to key
    by: its programs are not kept, so an edit between two processes is always seen."""
    env = dict(cli_env(), ESJAX_NO_CACHE="")
    means = []
    for scale in (1, 100):
        script = MAIN_ENV_RUN.format(env=SCALED_ENV.format(scale=scale))
        out = tmp_path / f"run{scale}"
        command = [sys.executable, "-c", script, str(tmp_path / "main.toml"), str(out)]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        means.append(
            json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["fitness_mean"]
        )
    assert means[1] == pytest.approx(100 * means[0], rel=1e-5)


def test_the_code_fingerprint_covers_every_sub_package(tmp_path):
    """An edit in any folder of the package (here the first layer and the command line)
    changes the fingerprint that keys kept programs, so no program outlives its code."""
    import importlib.util
    import shutil

    package = Path(cache.__file__).resolve().parents[1]
    copy = tmp_path / "esjax"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))

    def fingerprint() -> str:
        """``code_fingerprint`` of the copy: its cache module, loaded afresh from the copy,
        digests the package around it."""
        name = f"esjax_copy_cache_{len(seen)}"
        spec = importlib.util.spec_from_file_location(name, copy / "run" / "cache.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.code_fingerprint()

    seen: list[str] = []
    seen.append(fingerprint())
    assert fingerprint() == seen[0]  # the same code, the same digest
    for edited in ("specs/digits.py", "cli/tables.py"):
        with (copy / edited).open("a") as handle:
            handle.write("\n# an edit\n")
        seen.append(fingerprint())
    assert len(set(seen)) == 3
