"""A preset of every adapted suite trains, evaluates and reloads from the command line.

Tiny sizes (2 generations of 4 members, 8-step episodes, 2 evaluation and test episodes): what
is checked is that the preset as shipped builds its env, policy and strategy, writes a run, and
that ``esjax eval`` and :func:`esjax.load_policy` read that run back. One preset per suite, its
cheapest to compile: the others on the same suite share its adapter, and
tests/test_run_config.py resolves every preset (a MuJoCo preset's CLI round takes minutes of
compiling: cheetah-run's took 440 s on the 2-core CI box). A preset's suite is installed by the
``dev`` extra; where one is missing (an install without it) its preset is skipped, and the test
that every suite has a preset still runs. The command-line processes compile without LLVM's
optimisations (``XLA_FLAGS``): the program is the same, and compiling it is most of each round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import jax
import numpy as np
import pytest

from esjax import load_policy
from esjax._src.envs.core import make_env
from esjax._src.envs.suites import registered

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"


def _suite_presets() -> dict[str, str]:
    """Preset name -> suite name, for every ``tasks/*.toml`` whose env is ``SUITE:NAME``."""
    presets = {}
    for path in sorted(TASKS.glob("*.toml")):
        env = tomllib.loads(path.read_text())["env"]
        suite = env.split(":", 1)[0]
        if ":" in env and suite in registered():
            presets[path.stem] = suite
    return presets


PRESETS = _suite_presets()
# The preset each suite's CLI round runs where a suite ships several (cheapest to compile).
CHOSEN = {"playground": "pendulum-swingup", "brax": "halfcheetah"}


def _one_per_suite() -> list[str]:
    chosen = {}
    for preset, suite in PRESETS.items():
        chosen.setdefault(suite, CHOSEN.get(suite, preset))
    return sorted(chosen.values())


def test_every_registered_suite_ships_a_preset():
    """A suite's preset is part of adding it: the registry says which suites there are."""
    lacking = sorted(set(registered()) - set(PRESETS.values()))
    assert not lacking, (
        f"add a preset tasks/{lacking[0]}-ENV.toml naming env = '{lacking[0]}:ENV' "
        "(CONTRIBUTING.md's Ship step)"
    )
    assert set(PRESETS.values()) == set(registered())
    assert all(PRESETS[preset] == suite for suite, preset in CHOSEN.items())


# Compiling is what these rounds spend their time on; what is checked does not depend on how
# fast the compiled program runs.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
# Sizes that leave the preset's parts as shipped (the ones each check reads are set here).
TINY = ("--popsize", "4", "--set", "episode_length=8", "--set", "evaluation.every=1",
        "--set", "evaluation.episodes=2", "--set", "test_episodes=2")  # fmt: skip


def _esjax(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), FAST_COMPILE]))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XLA_FLAGS=flags)
    return subprocess.run([sys.executable, "-m", "esjax", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.parametrize("preset", _one_per_suite())
def test_the_preset_trains_evaluates_and_reloads(preset, tmp_path):
    suite = registered()[PRESETS[preset]]
    if not suite.installed():
        pytest.skip(f"{suite.name} is not installed ({suite.install_hint})")
    run = tmp_path / "run"
    done = _esjax("evolve", preset, "--generations", "2", "--out", str(run), *TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    # Brax's note that its pipelines are unmaintained is silenced by the adapter.
    assert "maintained" not in done.stdout + done.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert rows[-1]["generation"] == 2
    assert np.isfinite(rows[-1]["eval_return"])

    # By default on the run's test_episodes: with a solved_return, the final test's program,
    # read back from the compilation cache.
    evaluated = _esjax("eval", str(run), "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    record = json.loads(evaluated.stdout)
    assert record["episodes"] == 2 and np.isfinite(record["mean"])

    # The saved policy drives the adapted env in a plain Python loop.
    task = tomllib.loads((TASKS / f"{preset}.toml").read_text())
    env, env_params = make_env(task["env"], task.get("env_kwargs", {}))
    controller = load_policy(run)
    # Jitted: un-jitted, a MuJoCo env's reset and step run op by op (tens of seconds each).
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    obs, state = reset(jax.random.key(0), env_params)
    for t in range(3):
        action = controller.act(np.asarray(obs))
        space = env.action_space(env_params)
        if hasattr(space, "n"):
            assert 0 <= int(action) < space.n
        else:
            assert action.shape == tuple(space.shape)
            assert np.all((space.low <= action) & (action <= space.high))
        obs, state, reward, *_ = step(jax.random.key(t), state, action, env_params)
        assert np.all(np.isfinite(np.asarray(obs))) and np.isfinite(float(reward))


def test_a_sweep_stacks_an_adapted_envs_configurations(tmp_path):
    """Two learning rates of navix-empty, stacked with their seeds: both finish and are tested."""
    pytest.importorskip("navix", reason='navix is not installed (pip install "esjax[navix]")')
    out = tmp_path / "sweep"
    done = _esjax("sweep", "navix-empty", "--vary", "strategy_settings.learning_rate=0.05,0.2",
                  "--generations", "2", "--seeds", "2", "--out", str(out), *TINY)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "sweep.json").read_text())
    assert len(record["configurations"]) == 2
    for config in record["configurations"]:
        per_seed = config["final_test_return"]["per_seed"]
        assert len(per_seed) == 2 and np.all(np.isfinite(per_seed))
