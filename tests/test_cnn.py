"""The CNN policy: its logits equal a plain flax/lax computation on the same params, and a
population rollout with it equals a plain Python loop over ``env.step``."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.policies.networks import CNN
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import ConfigError, parse_task


def reference_features(params, image, extras, stride=1):
    """The conv torso written out with ``nn.Conv`` / ``nn.Dense`` called on their own params."""
    torso = params["params"].get("torso", {})  # none: a linear policy
    x = image
    i = 0
    while f"Conv_{i}" in torso:
        kernel = torso[f"Conv_{i}"]["kernel"]
        conv = nn.Conv(kernel.shape[-1], kernel.shape[:2], (stride, stride), "VALID")
        x = jax.nn.relu(conv.apply({"params": torso[f"Conv_{i}"]}, x))
        i += 1
    x = jnp.concatenate([x.reshape(-1), extras])
    i = 0
    while f"Dense_{i}" in torso:
        kernel = torso[f"Dense_{i}"]["kernel"]
        x = jax.nn.relu(nn.Dense(kernel.shape[-1]).apply({"params": torso[f"Dense_{i}"]}, x))
        i += 1
    return x


def reference_logits(params, image, extras=(), stride=1):
    head = params["params"]["Dense_0"]
    features = reference_features(params, image, jnp.asarray(extras, jnp.float32), stride)
    return features @ head["kernel"] + head["bias"]


def breakout_policy(spec, deterministic=True, frame_stack=1):
    """The policy bound as a rollout on Breakout-MinAtar binds it, with a jitted ``apply``."""
    from gymnax.environments.spaces import Discrete

    size = 10 * 10 * 4 * frame_stack
    policy = spec.build(
        size, Discrete(3), deterministic, obs_shape=(10, 10, 4), frame_stack=frame_stack
    )
    return policy, dataclasses.replace(policy, apply=jax.jit(policy.apply))


@pytest.mark.parametrize("stride", [1, 2])
def test_cnn_logits_match_a_plain_flax_call(stride):
    spec = CNN(channels=(8, 4), kernel=3, stride=stride, hidden=(16,), activation="relu")
    _, policy = breakout_policy(spec, deterministic=False)
    params = policy.init(jax.random.key(1))
    image = jax.random.uniform(jax.random.key(2), (10, 10, 4))
    expected = reference_logits(params, image, stride=stride)
    for seed in range(5):
        key = jax.random.key(10 + seed)
        action, carry = policy.apply(params, image.reshape(-1), (), key)
        assert carry == ()
        assert int(action) == int(jax.random.categorical(key, expected))
    # Deterministic head: the argmax of the same logits.
    greedy = CNN(channels=(8, 4), kernel=3, stride=stride, hidden=(16,), activation="relu")
    _, det_policy = breakout_policy(greedy)
    action, _ = det_policy.apply(params, image.reshape(-1), (), jax.random.key(0))
    assert int(action) == int(jnp.argmax(expected))


def test_stacked_frames_are_channels_oldest_first_and_extras_join_the_features():
    spec = CNN(channels=(4,), hidden=(8,), meta_inputs=("reward",))
    _, policy = breakout_policy(spec, frame_stack=2)
    old, new = jax.random.uniform(jax.random.key(4), (2, 10, 10, 4))
    x = jnp.concatenate([old.reshape(-1), new.reshape(-1), jnp.array([0.7])])
    assert x.shape == (policy.input_size,)
    stacked = jnp.concatenate([old, new], axis=-1)
    for seed in range(5):
        params = policy.init(jax.random.key(seed))
        action, _ = policy.apply(params, x, (), jax.random.key(0))
        assert int(action) == int(jnp.argmax(reference_logits(params, stacked, [0.7])))


def test_cnn_lstm_carries_state_through_an_lstm_cell():
    spec = CNN(channels=(4,), hidden=(8,), lstm=6)
    _, policy = breakout_policy(spec)
    assert policy.recurrent
    params = policy.init(jax.random.key(5))
    carry = policy.initial_carry()
    image = jax.random.uniform(jax.random.key(6), (10, 10, 4))
    cell = nn.OptimizedLSTMCell(6)
    expected_carry = carry
    for _ in range(3):
        _, carry = policy.apply(params, image.reshape(-1), carry, jax.random.key(0))
        features = reference_features(params, image, jnp.zeros((0,)))
        expected_carry, _ = cell.apply(
            {"params": params["params"]["OptimizedLSTMCell_0"]}, expected_carry, features
        )
    np.testing.assert_allclose(carry[0], expected_carry[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(carry[1], expected_carry[1], rtol=1e-5, atol=1e-6)


def test_population_rollout_with_cnn_equals_a_python_loop():
    import gymnax

    steps = 60
    spec = CNN(channels=(4,), hidden=(8,))
    rollout = PopulationRollout("Breakout-MinAtar", spec, steps)
    keys = jax.random.split(jax.random.key(7), 3)
    pop = jax.vmap(rollout.init_params)(keys)
    key = jax.random.key(8)
    result = rollout.population(key, pop, num_rollouts=2)

    env, env_params = gymnax.make("Breakout-MinAtar")
    step = jax.jit(env.step)
    logits_of = jax.jit(reference_logits)
    for member in range(3):
        params = jax.tree.map(lambda a, m=member: a[m], pop)
        for r, rollout_key in enumerate(rollout.rollout_keys(key, 3, 2)):
            _, k_reset, k_episode = jax.random.split(rollout_key, 3)
            obs, state = env.reset(k_reset, env_params)
            total = 0.0
            for step_key in jax.random.split(k_episode, steps):
                _, k_env = jax.random.split(step_key)
                logits = logits_of(params, jnp.asarray(obs, jnp.float32))
                obs, state, reward, term, trunc, _ = step(
                    k_env, state, jnp.argmax(logits), env_params
                )
                total += float(reward)
                if bool(term | trunc):
                    break
            assert float(result.returns[member, r]) == pytest.approx(total)


def test_cnn_rejects_flat_observations_in_one_line():
    with pytest.raises(ValueError, match="needs image observations") as info:
        PopulationRollout("CartPole-v1", CNN(), 8)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="do not fit"):
        PopulationRollout("Breakout-MinAtar", CNN(channels=(4, 4, 4, 4, 4), kernel=3), 8)


def test_cnn_preset_fields_parse_and_are_checked():
    task = parse_task(
        {"env": "Breakout-MinAtar", "policy": {"kind": "cnn", "channels": [8], "lstm": 4}}, "t"
    )
    assert task.policy.channels == (8,) and task.policy.lstm == 4
    with pytest.raises(ConfigError, match=r"policy\.kernel"):
        parse_task({"env": "Breakout-MinAtar", "policy": {"kind": "cnn", "kernel": 0}}, "t")


def window_by_hand(image: np.ndarray, row: int, col: int, radius: int) -> np.ndarray:
    """The window around (row, col), cell by cell; beyond the grid reads as zero."""
    height, width, depth = image.shape
    out = np.zeros((2 * radius + 1, 2 * radius + 1, depth), image.dtype)
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            if 0 <= row + dy < height and 0 <= col + dx < width:
                out[dy + radius, dx + radius] = image[row + dy, col + dx]
    return out


@pytest.mark.parametrize(("row", "col", "radius"), [(0, 0, 2), (4, 9, 3), (9, 5, 9), (6, 2, 1)])
def test_centred_view_is_the_window_around_the_agent(row, col, radius):
    from esjax._src.policies.networks import centred_view

    rng = np.random.default_rng(row * 10 + col)
    image = rng.integers(0, 2, (10, 10, 4)).astype(np.float32)
    image[:, :, 0] = 0
    image[row, col, 0] = 1  # the agent, alone in its channel
    got = np.asarray(centred_view(jnp.asarray(image), 0, radius))
    np.testing.assert_array_equal(got, window_by_hand(image, row, col, radius))


@pytest.mark.parametrize("channels", [(), (4,)])
def test_a_centred_policy_sees_the_window_around_the_newest_frames_agent(channels):
    """The network's outputs (raw continuous actions, so nothing is sampled away) are a plain
    flax call on the window cut by hand around the agent of the newest stacked frame, and not
    on the window around the older frame's agent, which stands elsewhere."""
    from gymnax.environments.spaces import Box

    spec = CNN(channels=channels, hidden=(), ego_channel=0, ego_radius=3, raw_actions=True)
    policy = spec.build(2 * 400, Box(-1.0, 1.0, (3,)), obs_shape=(10, 10, 4), frame_stack=2)
    old, new = np.zeros((2, 10, 10, 4), np.float32)
    old[1, 1, 0] = new[6, 8, 0] = 1  # the agent, then and now
    new[6, 7, 1] = new[2, 2, 3] = old[5, 5, 2] = old[1, 2, 1] = 1
    x = jnp.asarray(np.concatenate([old.reshape(-1), new.reshape(-1)]))
    stacked = np.concatenate([old, new], axis=-1)
    for seed in range(3):
        params = policy.init(jax.random.key(seed))
        outputs, _ = policy.apply(params, x, (), jax.random.key(0))
        now = reference_logits(params, jnp.asarray(window_by_hand(stacked, 6, 8, 3)))
        then = reference_logits(params, jnp.asarray(window_by_hand(stacked, 1, 1, 3)))
        np.testing.assert_allclose(outputs, now, rtol=1e-5, atol=1e-6)
        assert not np.allclose(outputs, then, rtol=1e-3, atol=1e-4)


def test_the_conv_layers_must_fit_the_centred_view_not_the_image():
    with pytest.raises(ValueError, match="do not fit the 3 x 3 centred view"):
        breakout_policy(CNN(channels=(4, 4), ego_channel=0, ego_radius=1))
    # Five 3 x 3 convs do not fit the 10 x 10 image, but fit the default 19 x 19 view.
    policy, _ = breakout_policy(CNN(channels=(4,) * 5, hidden=(), ego_channel=0))
    kernel = policy.init(jax.random.key(0))["params"]["Dense_0"]["kernel"]
    assert kernel.shape == (9 * 9 * 4, 3)  # 19 - 5 * 2 = 9 cells a side


def test_ego_fields_are_checked_in_one_line():
    def task(**policy):
        return {"env": "Breakout-MinAtar", "policy": {"kind": "cnn", **policy}}

    assert parse_task(task(ego_channel=0), "t").policy.ego_radius is None
    for policy, field in [
        ({"ego_channel": -1}, "ego_channel"),
        ({"ego_channel": 0, "ego_radius": 0}, "ego_radius"),
        ({"ego_radius": 2}, "ego_radius"),
        ({"kind": "mlp", "ego_channel": 0}, "ego_channel"),
        ({"kind": "lstm", "hidden": [8], "ego_radius": 2}, "ego_radius"),
    ]:
        with pytest.raises(ConfigError, match=rf"policy\.{field}"):
            parse_task(task(**policy), "t")
    with pytest.raises(ValueError, match="not a channel of a 4-channel image") as info:
        PopulationRollout("Breakout-MinAtar", CNN(ego_channel=4), 8)
    assert "\n" not in str(info.value)
    for spec in [CNN(ego_radius=3), CNN(ego_channel=0, ego_radius=0)]:  # the Python API too
        with pytest.raises(ValueError, match="needs an ego_channel to centre on"):
            breakout_policy(spec)
