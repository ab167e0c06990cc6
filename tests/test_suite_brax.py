"""Brax through esjax plays as Brax's own env does, stepped in a plain Python loop.

Skipped where Brax is not installed (``pip install "esjax[brax]"``).
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from esjax._src.envs.core import make_env
from esjax._src.envs.suite_brax import UNMAINTAINED_WARNING
from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError

ENV = "inverted_pendulum"
STEPS = 50


@pytest.fixture(scope="module")
def brax_envs():
    return pytest.importorskip(
        "brax.envs", reason='brax is not installed (pip install "esjax[brax]")'
    )


def test_the_adapter_matches_brax_stepped_in_a_python_loop(brax_envs, seed=1):
    """Observations, rewards and the step the pole falls at agree with Brax's own env."""
    rollout = PopulationRollout(f"brax:{ENV}", MLP(hidden=(8,)), STEPS,
                                env_kwargs={"backend": "positional"})  # fmt: skip
    # Large weights push the cart hard one way: the pole falls after 8 steps.
    params = jax.tree.map(lambda p: 10 * p, rollout.init_params(jax.random.key(seed)))
    key = jax.random.key(10 + seed)
    result = rollout.single(key, params, trajectory=True)

    env = brax_envs.get_environment(ENV, backend="positional")
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(episode_keys(key)[1])
    total, length = 0.0, 0
    for t in range(STEPS):
        np.testing.assert_allclose(result.trajectory.obs[t], state.obs, rtol=1e-5, atol=1e-6)
        state = step(state, result.trajectory.action[t])
        np.testing.assert_allclose(result.trajectory.reward[t], state.reward, rtol=1e-5)
        assert bool(result.trajectory.done[t]) == bool(state.done)
        total, length = total + float(state.reward), length + 1
        if bool(state.done):
            break
    assert length < STEPS  # the pole fell: Brax's termination ended the episode
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)


def test_returns_stay_finite_where_episodes_end_on_the_generalized_backend(brax_envs):
    """Brax's default backend: hoppers fall long before 100 steps, and no NaN reaches a return.

    Past its end an episode's env state is frozen at its last live step and its rewards
    masked by ``where``, so what the generalized backend may return for a fallen hopper
    stepped on (NaN rewards, issue 32) never counts.
    """
    rollout = PopulationRollout("brax:hopper", MLP(hidden=(8,)), 100)
    pop = jax.vmap(rollout.init_params)(jax.random.split(jax.random.key(0), 8))
    result = rollout.population(jax.random.key(1), pop, num_rollouts=2)
    assert (np.asarray(result.lengths) < 100).all()
    assert np.isfinite(np.asarray(result.returns)).all()


def test_env_kwargs_reach_the_constructor_and_the_warning_stays_quiet(brax_envs, recwarn):
    env, params = make_env("brax:hopper", {"backend": "spring", "n_frames": 2,
                                           "terminate_when_unhealthy": False})  # fmt: skip
    assert env.env._backend == "spring" and env.env._n_frames == 2
    assert not env.env._terminate_when_unhealthy
    assert params.max_steps_in_episode == 1000
    assert env.observation_space(params).shape == (11,)
    assert env.action_space(params).shape == (3,)
    assert not [w for w in recwarn if UNMAINTAINED_WARNING in str(w.message)]


@pytest.mark.parametrize(
    ("env_name", "kwargs", "message"),
    [
        ("hoper", {}, "brax has no env 'hoper' (did you mean 'hopper'?)"),
        ("hopper", {"backnd": "spring"}, "env_kwargs key 'backnd' (did you mean 'backend'?)"),
        ("hopper", {"backend": "sprung"}, "unknown backend 'sprung' (did you mean 'spring'?)"),
    ],
)
def test_a_bad_name_or_option_is_one_line(brax_envs, env_name, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        make_env(f"brax:{env_name}", kwargs)
    assert "\n" not in str(err.value)


def test_raw_actions_reach_brax_unclipped_and_pay_its_control_cost(brax_envs):
    """ARS's linear policy on hopper: actions outside [-1, 1] reach Brax as they are.

    The reference steps Brax's own env in a Python loop with actions computed in numpy from
    its observations; hopper's control cost is charged on the action given, so a clipped or
    squashed action would change every reward.
    """
    rollout = PopulationRollout("brax:hopper", MLP(hidden=(), raw_actions=True), 20,
                                env_kwargs={"backend": "positional"})  # fmt: skip
    params = jax.tree.map(lambda p: 3.0 * p + 0.5, rollout.init_params(jax.random.key(0)))
    dense = params["params"]["Dense_0"]
    kernel, bias = np.asarray(dense["kernel"], np.float64), np.asarray(dense["bias"], np.float64)
    key = jax.random.key(7)
    result = rollout.single(key, params, trajectory=True)

    env = brax_envs.get_environment("hopper", backend="positional")
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(episode_keys(key)[1])
    total, largest = 0.0, 0.0
    for t in range(int(result.lengths)):
        action = np.asarray(state.obs, np.float64) @ kernel + bias
        largest = max(largest, float(np.abs(action).max()))
        np.testing.assert_allclose(result.trajectory.action[t], action, rtol=1e-4, atol=1e-4)
        state = step(state, jax.numpy.asarray(action, jax.numpy.float32))
        np.testing.assert_allclose(result.trajectory.reward[t], state.reward, rtol=1e-5, atol=1e-6)
        total += float(state.reward)
    assert largest > 1.0, "every action stayed inside the bounds: the test would not see a clip"
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-5)
