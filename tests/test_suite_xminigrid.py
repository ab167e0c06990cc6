"""The xminigrid adapter plays as xminigrid's own env does, stepped in a plain Python loop.

Skipped, naming the extra, where xminigrid is not installed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.envs.core import make_env
from esjax._src.policies.networks import CNN, MLP
from esjax._src.rollout.episode import episode_keys, step_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError

ENV = "MiniGrid-Empty-8x8"
# From the start (1, 1), facing along the second axis, to the goal at (6, 6): 11 steps.
FORWARD, TURN_RIGHT = 0, 1
TO_THE_GOAL = [FORWARD] * 5 + [TURN_RIGHT] + [FORWARD] * 5


@pytest.fixture(scope="module")
def xminigrid():
    return pytest.importorskip(
        "xminigrid", reason='xminigrid is not installed (pip install "esjax[xminigrid]")'
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_rollout_matches_xminigrid_stepped_in_a_python_loop(xminigrid, seed):
    """xminigrid's own truncation (max_steps 20, from env_kwargs) ends before esjax's 30."""
    rollout = PopulationRollout(f"xminigrid:{ENV}", MLP(hidden=(8,)), 30,
                                env_kwargs={"max_steps": 20}, deterministic=False)  # fmt: skip
    params = rollout.init_params(jax.random.key(seed))
    key = jax.random.key(100 + seed)
    result = rollout.single(key, params, trajectory=True)

    env, env_params = xminigrid.make(ENV)
    env_params = env_params.replace(max_steps=20)
    _, k_reset, k_steps = episode_keys(key)
    timestep = env.reset(env_params, k_reset)
    step = jax.jit(env.step)  # eager, each step dispatches op by op: seconds a step
    total, length = 0.0, 0
    for t, _ in enumerate(step_keys(k_steps, 30)):  # the step key is not used by xminigrid
        obs = np.asarray(timestep.observation, np.float32).reshape(-1)
        np.testing.assert_array_equal(result.trajectory.obs[t], obs)
        timestep = step(env_params, timestep, result.trajectory.action[t])
        np.testing.assert_allclose(result.trajectory.reward[t], timestep.reward)
        total, length = total + float(timestep.reward), length + 1
        if bool(timestep.last()):
            break
    assert length == 20
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)


@pytest.mark.parametrize(("max_steps", "ends_by"), [(256, "termination"), (8, "truncation")])
def test_a_fixed_action_sequence_ends_as_in_xminigrid(xminigrid, max_steps, ends_by):
    """Reaching the goal is termination (discount 0); running out of steps is truncation."""
    adapted, params = make_env(f"xminigrid:{ENV}", {"max_steps": max_steps})
    env, env_params = xminigrid.make(ENV, max_steps=max_steps)
    key = jax.random.key(3)
    obs, state = adapted.reset(key, params)
    timestep = env.reset(env_params, key)
    step, own_step = jax.jit(adapted.step), jax.jit(env.step)
    for action in TO_THE_GOAL:
        obs, state, reward, terminated, truncated, _ = step(key, state, action, params)
        timestep = own_step(env_params, timestep, action)
        np.testing.assert_array_equal(obs, np.asarray(timestep.observation, np.float32))
        assert float(reward) == float(timestep.reward)
        if bool(timestep.last()):
            break
    reached_the_goal = ends_by == "termination"
    assert (bool(terminated), bool(truncated)) == (reached_the_goal, not reached_the_goal)
    assert int(timestep.state.step_num) == min(max_steps, len(TO_THE_GOAL))
    assert (float(reward) > 0) == reached_the_goal


def test_an_unknown_env_kwarg_is_one_line_naming_the_params(xminigrid):
    with pytest.raises(ConfigError, match=r"max_step not known; its params: .*max_steps"):
        make_env(f"xminigrid:{ENV}", {"max_step": 5})
    with pytest.raises(ConfigError, match="xminigrid has no env 'Empty'"):
        make_env("xminigrid:Empty", {})


def test_a_cnn_reads_the_grid_as_an_image(xminigrid):
    """The adapter keeps xminigrid's grid an image, so a CNN policy takes it: greedy actions
    and returns equal a plain loop over xminigrid's step with the conv net written out."""
    from test_cnn import reference_logits

    steps = 12
    rollout = PopulationRollout(f"xminigrid:{ENV}", CNN(channels=(4,), hidden=(8,)), steps)
    env, env_params = xminigrid.make(ENV)
    timestep = env.reset(env_params, jax.random.key(0))
    assert rollout.obs_shape == timestep.observation.shape and len(rollout.obs_shape) == 3
    params = rollout.init_params(jax.random.key(3))
    key = jax.random.key(4)
    result = rollout.single(key, params, trajectory=True)

    _, k_reset, _ = episode_keys(key)
    timestep = env.reset(env_params, k_reset)
    step, logits_of = jax.jit(env.step), jax.jit(reference_logits)
    total = 0.0
    for t in range(steps):
        action = int(jnp.argmax(logits_of(params, jnp.asarray(timestep.observation, jnp.float32))))
        assert int(result.trajectory.action[t]) == action
        timestep = step(env_params, timestep, action)
        total += float(timestep.reward)
        if bool(timestep.last()):
            break
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)
