"""The jumanji adapter plays as jumanji's own env does, stepped in a plain Python loop.

Skipped, naming the extra, where jumanji is not installed.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from esjax._src.envs.core import make_env
from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys, step_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError

ENV = "Snake-v1"
UP, RIGHT = 0, 1


@pytest.fixture(scope="module")
def jumanji():
    return pytest.importorskip(
        "jumanji", reason='jumanji is not installed (pip install "esjax[jumanji]")'
    )


def flat(observation) -> np.ndarray:
    """Snake's observation (grid, step count, action mask), raveled in field order."""
    return np.concatenate([np.asarray(leaf, np.float32).ravel() for leaf in observation])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_matches_jumanji_stepped_in_a_python_loop(jumanji, seed):
    """An episode ends at jumanji's own end (a crash, or time_limit 20) before esjax's 30."""
    rollout = PopulationRollout(f"jumanji:{ENV}", MLP(hidden=(8,)), 30,
                                env_kwargs={"time_limit": 20}, deterministic=False)  # fmt: skip
    params = rollout.init_params(jax.random.key(seed))
    key = jax.random.key(100 + seed)
    result = rollout.single(key, params, trajectory=True)

    env = jumanji.make(ENV, time_limit=20)
    _, k_reset, k_steps = episode_keys(key)
    state, timestep = env.reset(k_reset)
    total, length = 0.0, 0
    for t, _ in enumerate(step_keys(k_steps, 30)):  # jumanji draws from its state's own key
        np.testing.assert_array_equal(result.trajectory.obs[t], flat(timestep.observation))
        state, timestep = env.step(state, result.trajectory.action[t])
        np.testing.assert_allclose(result.trajectory.reward[t], timestep.reward)
        total, length = total + float(timestep.reward), length + 1
        if bool(timestep.last()):
            break
    assert length <= 20
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-6)


@pytest.mark.parametrize("time_limit", [4000, 2])
def test_a_fixed_action_sequence_ends_as_in_jumanji(jumanji, time_limit):
    """A crash into the wall, or Snake's time limit, which Snake reports with discount 0 too:
    termination either way, as jumanji says."""
    adapted, params = make_env(f"jumanji:{ENV}", {"time_limit": time_limit})
    env = jumanji.make(ENV, time_limit=time_limit)
    key = jax.random.key(0)
    _, state = adapted.reset(key, params)
    own_state, timestep = env.reset(key)
    step = jax.jit(adapted.step)
    steps = 0
    for action in [RIGHT] + [UP] * 12:  # 12 rows: the wall comes first
        steps += 1
        obs, state, reward, terminated, truncated, _ = step(key, state, action, params)
        own_state, timestep = env.step(own_state, action)
        np.testing.assert_array_equal(obs, flat(timestep.observation))
        assert float(reward) == float(timestep.reward)
        if bool(timestep.last()):
            break
    assert float(timestep.discount) == 0.0
    assert (bool(terminated), bool(truncated)) == (True, False)
    assert steps <= min(time_limit, 13)


class TruncatingEnv:
    """A stand-in jumanji env that truncates (discount 1) after two steps, as LBF does."""

    def reset(self, key):
        from jumanji.types import restart

        return 0, restart(observation=jax.numpy.zeros(3))

    def step(self, state, action):
        from jumanji.types import transition, truncation

        made = truncation if state + 1 >= 2 else transition
        return state + 1, made(reward=jax.numpy.float32(1.0), observation=jax.numpy.ones(3))


def test_a_truncation_with_discount_one_is_truncation_not_termination(jumanji):
    from esjax._src.envs.suite_jumanji import JumanjiEnv

    adapted = JumanjiEnv(TruncatingEnv(), num_actions=2)
    _, state = adapted.reset(jax.random.key(0), adapted.default_params)
    ends = []
    for _ in range(2):
        _, state, _, terminated, truncated, _ = adapted.step(None, state, 0, None)
        ends.append((bool(terminated), bool(truncated)))
    assert ends == [(False, False), (False, True)]
    assert adapted.observation_space(None).shape == (3,)


def test_wrong_env_kwargs_and_names_are_one_line(jumanji):
    with pytest.raises(ConfigError, match="unexpected keyword argument 'time_limt'"):
        make_env(f"jumanji:{ENV}", {"time_limt": 5})
    with pytest.raises(ConfigError, match="jumanji has no env 'Snake'"):
        make_env("jumanji:Snake", {})


def test_a_multi_discrete_action_is_refused_in_one_line(jumanji):
    with pytest.raises(ConfigError, match="MultiDiscreteArray; esjax adapts jumanji envs"):
        make_env("jumanji:Cleaner-v0", {})
