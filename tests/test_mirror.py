"""Mirror-symmetric policies (``policy.mirror``): the network read through both views against a
plain flax call on the same params, the symmetry checked on the env itself (a pendulum episode
and its mirror image score alike in a plain loop over ``env.step``), and bad reflections
refused in one line before anything compiles."""

from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from gymnax.environments.classic_control.pendulum import EnvState

from esjax._src.engine.tasks import check_task, make_rollout
from esjax._src.policies.networks import GRU, LSTM, MLP, _MLPNet
from esjax._src.specs.config import ConfigError, parse_task
from esjax._src.specs.presets import locate

PENDULUM_SIGNS = (1.0, -1.0, -1.0)  # cos, sin, angular speed
TORQUE = spaces.Box(low=-2.0, high=2.0, shape=(1,), dtype=jnp.float32)
SHIFTED = spaces.Box(low=-1.0, high=3.0, shape=(1,), dtype=jnp.float32)


def scrambled(params, key=1, scale=0.5):
    """Parameters far from the initialisation, so a wrong reflection cannot hide in zeros."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(key), len(leaves))
    noisy = [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, noisy)


def test_mlp_outputs_are_the_mean_of_the_network_and_its_mirror_image():
    policy = MLP(hidden=(8, 8), mirror=PENDULUM_SIGNS).build(3, TORQUE, obs_shape=(3,))
    params = scrambled(policy.init(jax.random.key(0)))
    net = _MLPNet((8, 8), 1, "tanh")
    signs = jnp.asarray(PENDULUM_SIGNS)
    for x in jax.random.normal(jax.random.key(2), (5, 3)) * 2.0:
        raw = 0.5 * (net.apply(params, x) - net.apply(params, signs * x))
        expected = 2.0 * np.tanh(np.asarray(raw))  # the head: tanh into [-2, 2]
        action, carry = policy.apply(params, x, policy.initial_carry(), None)
        np.testing.assert_allclose(np.asarray(action), expected, rtol=1e-5, atol=1e-6)
        mirrored, _ = policy.apply(params, signs * x, carry, None)
        np.testing.assert_allclose(np.asarray(mirrored), -expected, rtol=1e-5, atol=1e-6)


def test_an_unmirrored_policy_is_not_symmetric_so_the_checks_above_can_fail():
    policy = MLP(hidden=(8, 8)).build(3, TORQUE, obs_shape=(3,))
    params = scrambled(policy.init(jax.random.key(0)))
    x = jnp.asarray([0.3, 0.8, 1.5])
    action, _ = policy.apply(params, x, (), None)
    mirrored, _ = policy.apply(params, x * jnp.asarray(PENDULUM_SIGNS), (), None)
    assert abs(float(action[0]) + float(mirrored[0])) > 1e-3


def test_continuous_actions_are_reflected_about_the_middle_of_their_bounds():
    """Bounds [-1, 3]: the mirror of action a is 2 - a, as an output and as a previous-action
    input."""
    policy = MLP(hidden=(6,), mirror=PENDULUM_SIGNS, meta_inputs=("action",)).build(
        3, SHIFTED, obs_shape=(3,)
    )
    params = scrambled(policy.init(jax.random.key(3)))
    for x, prev in [([0.3, 0.8, 1.5], 2.5), ([-0.9, -0.2, -4.0], -0.5)]:
        inputs = jnp.asarray([*x, prev])
        mirror_inputs = jnp.asarray([x[0], -x[1], -x[2], 2.0 - prev])
        action, _ = policy.apply(params, inputs, (), None)
        mirrored, _ = policy.apply(params, mirror_inputs, (), None)
        np.testing.assert_allclose(float(mirrored[0]), 2.0 - float(action[0]), atol=1e-5)
        assert -1.0 <= float(action[0]) <= 3.0


@pytest.mark.parametrize("cell", [LSTM, GRU])
def test_recurrent_policies_stay_symmetric_over_an_episode(cell):
    """Two streams of inputs, one the mirror of the other (observation, previous action;
    the previous reward unchanged): every action of one is the negated action of the other."""
    spec = cell(hidden=5, mirror=PENDULUM_SIGNS, meta_inputs=("action", "reward"))
    policy = spec.build(3, TORQUE, obs_shape=(3,))
    params = scrambled(policy.init(jax.random.key(4)))
    carry, mirror_carry = policy.initial_carry(), policy.initial_carry()
    prev, mirror_prev = 0.0, 0.0
    for t, obs in enumerate(jax.random.normal(jax.random.key(5), (6, 3))):
        reward = -float(t)
        x = jnp.concatenate([obs, jnp.asarray([prev, reward])])
        mirror_obs = obs * jnp.asarray(PENDULUM_SIGNS)
        xm = jnp.concatenate([mirror_obs, jnp.asarray([mirror_prev, reward])])
        action, carry = policy.apply(params, x, carry, None)
        mirrored, mirror_carry = policy.apply(params, xm, mirror_carry, None)
        np.testing.assert_allclose(float(mirrored[0]), -float(action[0]), rtol=1e-5, atol=1e-6)
        prev, mirror_prev = float(action[0]), float(mirrored[0])
    assert abs(prev) > 1e-3  # the policy is not the trivial zero


def test_discrete_actions_swap_their_logits_and_previous_action_one_hots():
    """CartPole mirrored: every component negated, push left <-> push right."""
    space = spaces.Discrete(2)
    spec = MLP(hidden=(8,), mirror=(-1.0,) * 4, mirror_actions=(1, 0), meta_inputs=("action",))
    policy = spec.build(4, space, obs_shape=(4,))
    params = scrambled(policy.init(jax.random.key(6)), scale=1.0)
    taken = set()
    for obs in jax.random.normal(jax.random.key(7), (16, 4)):
        for prev in (0, 1):
            x = jnp.concatenate([obs, jax.nn.one_hot(prev, 2)])
            xm = jnp.concatenate([-obs, jax.nn.one_hot(1 - prev, 2)])
            action, _ = policy.apply(params, x, (), None)
            mirrored, _ = policy.apply(params, xm, (), None)
            assert int(mirrored) == 1 - int(action)
            taken.add(int(action))
    assert taken == {0, 1}


def pendulum_return(policy, params, theta, speed, env_params, steps=200):
    """One episode from a chosen start in a plain Python loop over gymnax's ``step_env``."""
    env, _ = gymnax.make("Pendulum-v1")
    state = EnvState(theta=jnp.float32(theta), theta_dot=jnp.float32(speed),
                     last_u=jnp.float32(0.0), time=0)  # fmt: skip
    obs = env.get_obs(state)
    carry, total = policy.initial_carry(), 0.0
    apply = jax.jit(policy.apply)
    for _ in range(steps):
        action, carry = apply(params, obs, carry, None)
        obs, state, reward, _, _ = env.step_env(jax.random.key(0), state, action, env_params)
        total += float(reward)
    return total


def test_the_pendulum_preset_mirror_is_the_envs_own_symmetry():
    """A start and its mirror image (-theta, -speed) score alike under the preset's policy,
    stepped by the env itself; without the mirror they do not."""
    _, raw, source = locate("task", "pendulum")
    config = parse_task(raw, source)
    assert tuple(config.policy.mirror) == PENDULUM_SIGNS
    rollout = make_rollout(config)
    params = scrambled(rollout.policy.init(jax.random.key(8)), scale=0.3)
    env_params = rollout.env_params
    for theta, speed in [(2.0, 0.5), (-0.7, -0.9)]:
        one = pendulum_return(rollout.policy, params, theta, speed, env_params, 60)
        other = pendulum_return(rollout.policy, params, -theta, -speed, env_params, 60)
        assert one == pytest.approx(other, rel=1e-4)
    plain = MLP(hidden=config.policy.hidden, activation=config.policy.activation)
    plain_policy = plain.build(3, TORQUE, obs_shape=(3,))
    one = pendulum_return(plain_policy, params, 2.0, 0.5, env_params, 60)
    other = pendulum_return(plain_policy, params, -2.0, -0.5, env_params, 60)
    assert one != pytest.approx(other, rel=1e-3)


def test_stacked_frames_and_parameter_inputs_are_laid_out_for_the_reflection():
    """frame_stack 2 and the mass as an input: the rollout's own features, mirrored start
    against start, give the same return (the mass is not reflected)."""
    raw = {
        "env": "Pendulum-v1",
        "episode_length": 40,
        "policy": {
            "kind": "lstm",
            "hidden": [4],
            "frame_stack": 2,
            "param_inputs": ["m"],
            "meta_inputs": ["action"],
            "mirror": list(PENDULUM_SIGNS),
        },
    }
    rollout = make_rollout(parse_task(raw, "test"))
    params = scrambled(rollout.policy.init(jax.random.key(9)), scale=0.3)
    env = rollout.env
    original_reset = env.reset

    def reset_mirrored(key, env_params):
        _, state = original_reset(key, env_params)
        state = state.replace(theta=-state.theta, theta_dot=-state.theta_dot)
        return env.get_obs(state), state

    def episode_return():
        stats = rollout._stats(None)
        return float(rollout._single(jax.random.key(10), params, stats).returns)

    one = episode_return()
    env.reset = reset_mirrored  # the same episode key, its start mirrored
    try:
        other = episode_return()
    finally:
        env.reset = original_reset
    assert one == pytest.approx(other, rel=1e-4)
    assert abs(one) > 0


@pytest.mark.parametrize(
    ("env", "policy", "message"),
    [
        ("Pendulum-v1", {"mirror": [1, -1]}, "policy.mirror: 2 signs for an observation of 3"),
        ("Pendulum-v1", {"mirror": [1, -1, 0.5]}, "policy.mirror: signs must each be 1 or -1"),
        ("Pendulum-v1", {"mirror_actions": [0]}, "policy.mirror_actions: needs mirror"),
        (
            "Pendulum-v1",
            {"mirror": [1, -1, -1], "mirror_actions": [0]},
            "policy.mirror_actions: is for discrete actions",
        ),
        ("CartPole-v1", {"mirror": [-1, -1, -1, -1]}, "policy.mirror_actions: discrete actions"),
        (
            "Acrobot-v1",
            {"mirror": [1, -1, 1, -1, -1, -1], "mirror_actions": [1, 2, 0]},
            "policy.mirror_actions: must undo itself",
        ),
        ("CartPole-v1", {"kind": "cnn", "mirror": [-1] * 4}, "policy.mirror: is for mlp"),
    ],
)
def test_a_reflection_that_cannot_be_one_is_refused_in_one_line(env, policy, message):
    with pytest.raises(ConfigError) as error:
        check_task(parse_task({"env": env, "policy": policy}, "task.toml"), "task.toml")
    text = str(error.value)
    assert message in text and "\n" not in text
