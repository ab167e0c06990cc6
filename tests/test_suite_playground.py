"""MuJoCo Playground through esjax plays as Playground's own env does, stepped in a Python loop.

Skipped where Playground is not installed (``pip install "esjax[playground]"``).
"""

from __future__ import annotations

import re
import time

import jax
import numpy as np
import pytest

from esjax._src.envs.core import make_env
from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError

ENV = "CartpoleBalance"
STEPS = 50


@pytest.fixture(scope="module")
def registry():
    playground = pytest.importorskip(
        "mujoco_playground", reason='playground is not installed (pip install "esjax[playground]")'
    )
    return playground.registry


def test_the_adapter_matches_playground_stepped_in_a_python_loop(registry):
    """Observations, rewards and ``done`` agree step by step for one episode's actions."""
    rollout = PopulationRollout(f"playground:{ENV}", MLP(hidden=(8,)), STEPS)
    params = rollout.init_params(jax.random.key(0))
    key = jax.random.key(7)
    result = rollout.single(key, params, trajectory=True)

    env = registry.load(ENV, config_overrides={"impl": "jax"})
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(episode_keys(key)[1])
    for t in range(STEPS):
        np.testing.assert_allclose(result.trajectory.obs[t], state.obs, rtol=1e-5, atol=1e-6)
        state = step(state, result.trajectory.action[t])
        np.testing.assert_allclose(result.trajectory.reward[t], state.reward, rtol=1e-5)
        assert bool(result.trajectory.done[t]) == bool(state.done)
    assert int(result.lengths) == STEPS  # DM Control never ends early
    np.testing.assert_allclose(float(result.returns), result.trajectory.reward.sum(), rtol=1e-6)


def test_the_adapter_selects_the_jax_implementation_and_builds_fast(registry):
    """Playground's default is warp; esjax's shape probe is traced, never an eager reset."""
    started = time.perf_counter()
    env, params = make_env(f"playground:{ENV}")
    PopulationRollout(env, MLP(hidden=(8,)), 10)
    assert time.perf_counter() - started < 10.0  # an eager reset alone takes 15 s or more
    assert env.env._config.impl == "jax"
    assert params.max_steps_in_episode == 1000
    assert env.observation_space(params).shape == (5,)
    assert env.action_space(params).shape == (1,)


def test_env_kwargs_override_the_config_by_flat_or_nested_names(registry):
    env, params = make_env(f"playground:{ENV}",
                           {"episode_length": 200, "vision_config": {"nworld": 8}})  # fmt: skip
    assert params.max_steps_in_episode == 200
    assert env.env._config.vision_config.nworld == 8
    env, _ = make_env(f"playground:{ENV}", {"vision_config.nworld": 4, "impl": "jax"})
    assert env.env._config.vision_config.nworld == 4


@pytest.mark.parametrize(
    ("env_name", "kwargs", "message"),
    [
        ("CartpoleBalanse", {}, "did you mean 'CartpoleBalance'"),
        (ENV, {"impll": "jax"}, "unknown env_kwargs key 'impll' (did you mean 'impl'?)"),
        (ENV, {"ctrl_dt": "fast"}, "ctrl_dt"),
    ],
)
def test_a_bad_name_or_option_is_one_line(registry, env_name, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        make_env(f"playground:{env_name}", kwargs)
    assert "\n" not in str(err.value)
