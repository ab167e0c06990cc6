"""Adapted suites play as the suite's own env does, stepped in a plain Python loop on the same keys.

Each suite is an optional extra; its tests are skipped, saying which extra, where it is not
installed (tests/test_envs.py checks the one-line error a task naming it gets then).
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys, split_step_key, step_keys
from esjax._src.rollout.population_rollout import PopulationRollout

NAVIX_ENV = "Navix-Empty-5x5-v0"


@pytest.fixture(scope="module")
def navix():
    return pytest.importorskip(
        "navix", reason='navix is not installed (pip install "esjax[navix]")'
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_navix_adapter_matches_navix_stepped_in_a_python_loop(navix, seed):
    """navix's own truncation (max_steps 20) ends episodes before esjax's 30 steps."""
    rollout = PopulationRollout(f"navix:{NAVIX_ENV}", MLP(hidden=(8,)), 30,
                                env_kwargs={"max_steps": 20}, deterministic=False)  # fmt: skip
    params = rollout.init_params(jax.random.key(seed))
    key = jax.random.key(100 + seed)
    result = rollout.single(key, params, trajectory=True)

    env = navix.make(NAVIX_ENV, max_steps=20)
    _, k_reset, k_steps = episode_keys(key)
    timestep = env.reset(k_reset)
    total, length = 0.0, 0
    for t, step_key in enumerate(step_keys(k_steps, 30)):
        obs = np.asarray(timestep.observation, np.float32).reshape(-1)
        np.testing.assert_array_equal(result.trajectory.obs[t], obs)
        split_step_key(step_key)  # navix draws from the key in its state, not the step's
        timestep = env.step(timestep, result.trajectory.action[t])
        np.testing.assert_allclose(result.trajectory.reward[t], timestep.reward)
        total, length = total + float(timestep.reward), length + 1
        if bool(timestep.is_done()):
            break
    assert length <= 20
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)


def test_state_env_steps_a_brax_style_state_and_reports_termination():
    """The adapter Brax and Playground share, on a stand-in that counts to 3 and then ends."""
    from esjax._src.envs.suite_base import StateEnv

    class Counter:
        action_size = 2

        def reset(self, key):
            return types.SimpleNamespace(obs={"t": jnp.zeros(1)}, reward=0.0, done=0.0)

        def step(self, state, action):
            t = state.obs["t"] + 1
            return types.SimpleNamespace(
                obs={"t": t}, reward=jnp.sum(action), done=1.0 * (t[0] >= 3)
            )

    env = StateEnv(Counter(), episode_length=7)
    assert env.default_params.max_steps_in_episode == 7
    assert env.observation_space(None).shape == (1,)
    assert env.action_space(None).shape == (2,)
    obs, state = env.reset(jax.random.key(0), None)
    dones = []
    for _ in range(3):
        obs, state, reward, terminated, truncated, _ = env.step(None, state, jnp.ones(2), None)
        assert float(reward) == 2.0 and not bool(truncated)
        dones.append(bool(terminated))
    assert dones == [False, False, True]
    assert obs.dtype == jnp.float32 and float(obs[0]) == 3.0


def test_timestep_outcome_tells_termination_from_truncation():
    """dm_env's rule: a last step with discount 0 is termination, any other last step truncation."""
    from esjax._src.envs.suite_base import timestep_outcome

    def step(last, discount, reward=1.5):
        return types.SimpleNamespace(last=lambda: jnp.asarray(last), discount=jnp.asarray(discount),
                                     reward=jnp.asarray(reward))  # fmt: skip

    cases = {(False, 1.0): (False, False), (True, 0.0): (True, False), (True, 1.0): (False, True)}
    for (last, discount), expected in cases.items():
        reward, terminated, truncated = timestep_outcome(step(last, discount))
        assert (bool(terminated), bool(truncated)) == expected
        assert reward.dtype == jnp.float32 and float(reward) == 1.5


def test_what_a_policy_sees_of_a_suites_observation():
    """A dict's ``state`` entry alone; one array with its shape; other pytrees joined in order."""
    from esjax._src.envs.suite_base import policy_observation

    state = jnp.arange(3.0)
    privileged = jnp.arange(10.0, 17.0)
    np.testing.assert_array_equal(
        policy_observation({"privileged_state": privileged, "state": state}), state
    )
    image = jnp.arange(24, dtype=jnp.uint8).reshape(2, 3, 4)
    seen = policy_observation(image)
    assert seen.shape == (2, 3, 4) and seen.dtype == jnp.float32
    np.testing.assert_array_equal(seen, np.asarray(image, np.float32))
    grid, count = np.ones((2, 2), np.int32), np.int32(5)
    joined = policy_observation({"grid": grid, "steps": count})
    np.testing.assert_array_equal(joined, np.array([1, 1, 1, 1, 5], np.float32))


def test_a_dict_observation_gives_the_policy_its_state_entry():
    """Playground's locomotion envs: ``obs = {"state", "privileged_state"}``; the policy sees
    the state (Playground's own trainers' ``policy_obs_key``), not the critic's extras."""
    from esjax._src.envs.suite_base import StateEnv

    class Legged:
        action_size = 1

        def reset(self, key):
            obs = {"state": jnp.ones(4), "privileged_state": jnp.full(9, 7.0)}
            return types.SimpleNamespace(obs=obs, reward=0.0, done=0.0)

        def step(self, state, action):
            return state

    env = StateEnv(Legged(), episode_length=5)
    assert env.observation_space(None).shape == (4,)
    obs, state = env.reset(jax.random.key(0), None)
    np.testing.assert_array_equal(obs, np.ones(4, np.float32))
    np.testing.assert_array_equal(env.step(None, state, jnp.zeros(1), None)[0], obs)
