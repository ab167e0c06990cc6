"""One episode step: a saved policy played through ``load_policy`` or ``esjax render`` takes
the actions the population rollout takes on the same episode.

The references are the population rollout itself and plain Python loops over gymnax's
``env.step``; each test also shows that the defect it guards against would change the result
(an oracle told the wrong length, a sampling policy drawing from one fixed key).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.analysis.render import play_episode, render_run
from esjax._src.rollout.episode import episode_keys, split_step_key, step_keys
from esjax._src.rollout.population_rollout import ObsStats
from esjax._src.run.saved import SavedPolicy, load_policy
from esjax._src.run.training import evolve

TINY = ["episode_length=40", "evaluation.every=1", "evaluation.episodes=4"]
# A pendulum oracle: its policy is told the episode's length l, drawn per episode in training.
ORACLE = [
    *TINY,
    'policy.param_inputs=["l"]',
    "env_sampler.l.dist=uniform",
    "env_sampler.l.low=0.8",
    "env_sampler.l.high=1.2",
]
# CartPole's policy samples its action from the logits, as the MinAtar presets do.
SAMPLING = ["episode_length=60", "evaluation.every=1", "evaluation.episodes=4",
            "policy.actions=sample"]  # fmt: skip


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("oracle") / "run"
    evolve("pendulum", popsize=8, generations=2, rollouts=1, out=out, overrides=ORACLE)
    return out


@pytest.fixture(scope="module")
def sampling_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sampling") / "run"
    evolve("cartpole", popsize=8, generations=2, rollouts=1, out=out, overrides=SAMPLING)
    return out


def rollout_return(saved: SavedPolicy, env_params, key) -> float:
    """The population rollout's return on ``env_params`` (no sampler) for episode ``key``."""
    fixed = saved.rollout.replace(env_params=env_params, env_params_sampler=None)
    return float(fixed.single(key, saved.params, saved.obs_stats).returns)


def python_loop_return(controller, env, env_params, key, steps, told=None) -> float:
    """The episode ``key`` stepped with gymnax's own ``env.step`` in a Python loop.

    The controller is told ``told`` (default: the env parameters the episode really has).
    """
    _, k_reset, k_steps = episode_keys(key)
    obs, state = env.reset(k_reset, env_params)
    controller.reset(key, env_params=env_params if told is None else told)
    total = 0.0
    for step_key in step_keys(k_steps, steps):
        _, k_env = split_step_key(step_key)
        action = controller.act(np.asarray(obs))
        obs, state, reward, terminated, truncated, _ = env.step(
            k_env, state, jnp.asarray(action), env_params
        )
        total += float(reward)
        if bool(terminated) or bool(truncated):
            break
    return total


def test_an_oracle_is_told_the_episodes_own_length(oracle_run):
    saved = SavedPolicy.load(oracle_run)
    env = saved.rollout.env
    long = saved.rollout.env_params.replace(l=1.6)
    key = jax.random.key(5)
    expected = rollout_return(saved, long, key)
    steps = saved.rollout.episode_length

    through_load_policy = python_loop_return(load_policy(oracle_run), env, long, key, steps)
    _, through_render = play_episode(saved.controller(), env, long, key, steps)
    assert through_load_policy == pytest.approx(expected, rel=1e-5)
    assert through_render[-1] == pytest.approx(expected, rel=1e-5)
    # Told the task's fixed l = 1.0, as the old controller always was, the policy acts
    # otherwise: the comparison above can fail.
    fixed = saved.rollout.env_params
    wrong = python_loop_return(saved.controller(), env, long, key, steps, told=fixed)
    assert wrong != pytest.approx(expected, rel=1e-4)


def test_render_with_a_pinned_length_plays_the_rollouts_episode(oracle_run, tmp_path):
    saved = SavedPolicy.load(oracle_run)
    seed = 3
    # render's episode for --seed 3 is the rollout's episode for key(3), with l pinned.
    sampler = saved.rollout.env_params_sampler

    def pinned(key, default):
        return sampler(key, default).replace(l=1.6)

    rollout = saved.rollout.replace(env_params_sampler=pinned)
    expected = float(rollout.single(jax.random.key(seed), saved.params, saved.obs_stats).returns)
    _, total = render_run(
        oracle_run, tmp_path / "episode.gif", seed=seed, env_params=("l=1.6",), max_frames=4
    )
    assert total == pytest.approx(expected, rel=1e-5)
    assert (tmp_path / "episode.gif").read_bytes()[:3] == b"GIF"
    # The length matters to the return: the same episode at the trained l differs.
    short = float(saved.rollout.single(jax.random.key(seed), saved.params, saved.obs_stats).returns)
    assert short != pytest.approx(expected, rel=1e-3)


def test_a_sampling_controller_takes_the_rollouts_actions(sampling_run):
    saved = SavedPolicy.load(sampling_run)
    assert not saved.rollout.deterministic
    env, env_params = saved.rollout.env, saved.rollout.env_params
    key = jax.random.key(11)
    result = saved.rollout.single(key, saved.params, saved.obs_stats, trajectory=True)
    valid = np.asarray(result.trajectory.valid)
    expected = np.asarray(result.trajectory.action)[valid]
    assert valid.sum() > 8

    controller = load_policy(sampling_run)
    _, k_reset, k_steps = episode_keys(key)
    obs, state = env.reset(k_reset, env_params)
    controller.reset(key)
    actions = []
    for step_key in step_keys(k_steps, saved.rollout.episode_length):
        _, k_env = split_step_key(step_key)
        action = controller.act(np.asarray(obs))
        actions.append(int(action))
        obs, state, _, terminated, truncated, _ = env.step(k_env, state, action, env_params)
        if bool(terminated) or bool(truncated):
            break
    np.testing.assert_array_equal(actions, expected)
    # The policy really samples, so a controller that drew every action from one fixed key
    # (the old one) could not have matched: one observation, 16 keys, both actions drawn.
    episode = saved.rollout.episode
    stats = saved.obs_stats or ObsStats(jnp.zeros(episode.obs_size), jnp.ones(episode.obs_size))
    first = jnp.asarray(env.reset(k_reset, env_params)[0], jnp.float32).reshape(-1)
    start, none = episode.start(), jnp.zeros(0)
    draws = {
        int(episode.act(saved.params, stats, start, first, none, jax.random.key(i))[0])
        for i in range(16)
    }
    assert draws == {0, 1}


def test_render_of_a_stochastic_policy_is_the_rollouts_episode(sampling_run):
    saved = SavedPolicy.load(sampling_run)
    key = jax.random.key(4)
    expected = float(saved.rollout.single(key, saved.params, saved.obs_stats).returns)
    env, env_params = saved.rollout.env, saved.rollout.env_params
    _, returns = play_episode(saved.controller(), env, env_params, key, 60)
    assert returns[-1] == pytest.approx(expected, rel=1e-6)
