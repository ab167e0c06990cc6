"""The craftax adapter plays as Craftax's own env does, stepped in a plain Python loop.

Skipped, naming the extra, where craftax is not installed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.envs.core import make_env
from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys, split_step_key, step_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError

ENV = "Craftax-Classic-Symbolic-v1"


@pytest.fixture(scope="module")
def craftax_env():
    craftax = pytest.importorskip(
        "craftax.craftax_env", reason='craftax is not installed (pip install "esjax[craftax]")'
    )
    return craftax.make_craftax_env_from_name


@pytest.mark.parametrize("seed", [0])  # one: each seed costs ~40 s of compile
def test_rollout_matches_craftax_stepped_in_a_python_loop(craftax_env, seed):
    """Craftax's own time limit (max_timesteps 20, from env_kwargs) ends before esjax's 30."""
    rollout = PopulationRollout(f"craftax:{ENV}", MLP(hidden=(8,)), 30,
                                env_kwargs={"max_timesteps": 20}, deterministic=False)  # fmt: skip
    params = rollout.init_params(jax.random.key(seed))
    key = jax.random.key(100 + seed)
    result = rollout.single(key, params, trajectory=True)

    env = craftax_env(ENV, auto_reset=False)
    env_params = env.default_params.replace(max_timesteps=20)
    _, k_reset, k_steps = episode_keys(key)
    obs, state = env.reset(k_reset, env_params)
    step = jax.jit(env.step)
    total, length = 0.0, 0
    for t, step_key in enumerate(step_keys(k_steps, 30)):
        np.testing.assert_array_equal(result.trajectory.obs[t], obs)
        _, k_env = split_step_key(step_key)
        obs, state, reward, done, _ = step(k_env, state, result.trajectory.action[t], env_params)
        np.testing.assert_allclose(result.trajectory.reward[t], reward)
        total, length = total + float(reward), length + 1
        if bool(done):
            break
    assert length == 20
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)


@pytest.mark.parametrize("auto_reset", [False, True])
def test_death_is_termination_and_the_time_limit_truncation(craftax_env, auto_reset):
    """With or without Craftax's auto-reset (which hands back the next episode's start)."""
    adapted, params = make_env(f"craftax:{ENV}", {"max_timesteps": 3, "auto_reset": auto_reset})
    key = jax.random.key(0)
    _, state = adapted.reset(key, params)
    step = jax.jit(adapted.step)
    ends = []
    for t in range(3):
        _, state, _, terminated, truncated, _ = step(jax.random.key(t), state, 0, params)
        ends.append((bool(terminated), bool(truncated)))
    assert ends == [(False, False), (False, False), (False, True)]

    _, state = adapted.reset(key, params)
    dead = state.replace(player_health=jnp.zeros_like(state.player_health))
    _, _, _, terminated, truncated, _ = step(key, dead, 0, params)
    assert (bool(terminated), bool(truncated)) == (True, False)


def test_auto_reset_is_off_unless_asked_for(craftax_env):
    adapted, _ = make_env(f"craftax:{ENV}", {})
    assert type(adapted.env).__name__.endswith("NoAutoReset")
    adapted, _ = make_env(f"craftax:{ENV}", {"auto_reset": True})
    assert not type(adapted.env).__name__.endswith("NoAutoReset")


def test_wrong_env_kwargs_and_names_are_one_line(craftax_env):
    with pytest.raises(ConfigError, match="max_timestep not known; its params: max_timesteps"):
        make_env(f"craftax:{ENV}", {"max_timestep": 5})
    with pytest.raises(ConfigError, match="auto_reset must be true or false"):
        make_env(f"craftax:{ENV}", {"auto_reset": 1})
    with pytest.raises(ConfigError, match="craftax has no env 'Craftax-Classic'"):
        make_env("craftax:Craftax-Classic", {})
