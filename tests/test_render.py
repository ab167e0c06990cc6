"""Renders: every env esjax draws gives a non-empty picture that follows the state, and an env
it cannot draw is refused in one line."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from esjax._src.analysis.render import SCENES, channel_image, frame, play_episode
from esjax._src.rollout.episode import episode_keys, split_step_key
from esjax._src.specs.config import ConfigError


def states_after_random_steps(env_id: str, steps: int = 20):
    import gymnax

    env, params = gymnax.make(env_id)
    key = jax.random.key(3)
    _, state = env.reset(key, params)
    step = jax.jit(env.step_env)
    states = [state]
    space = env.action_space(params)
    for i in range(steps):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, i))
        _, state, _, done, _ = step(k_step, state, space.sample(k_act), params)
        if bool(done):
            break
        states.append(state)
    return params, states


@pytest.mark.parametrize("env_id", sorted(SCENES))
def test_each_render_draws_a_picture_that_follows_the_state(env_id):
    params, states = states_after_random_steps(env_id)
    first = frame(env_id, states[0], params)
    last = frame(env_id, states[-1], params)
    assert first.ndim == 3 and first.shape[-1] == 4 and first.shape[0] > 50
    colours = np.unique(first[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) > 3, "an empty or one-colour frame"
    assert len(states) > 1
    assert not np.array_equal(first, last), "the frame does not change with the state"


def test_channel_image_gives_each_channel_its_colour():
    obs = np.zeros((2, 2, 3), np.float32)
    obs[0, 0, 0] = 1.0
    obs[1, 1, 2] = 1.0
    image = channel_image(obs)
    assert image.shape == (2, 2, 3)
    assert np.all(image[0, 1] == 0) and np.all(image[1, 0] == 0)
    assert not np.allclose(image[0, 0], image[1, 1])
    assert image[0, 0].max() > 0 and image[1, 1].max() > 0


def test_an_env_without_a_render_is_refused_in_one_line():
    import gymnax

    _, params = gymnax.make("Reacher-misc")
    with pytest.raises(ConfigError, match="no renderer for env 'Reacher-misc'") as info:
        frame("Reacher-misc", None, params)
    assert "\n" not in str(info.value)


class ScriptedController:
    """The controller :func:`play_episode` drives, with actions drawn from the action space by
    a fixed key, so a plain loop over the env can replay the same episode."""

    def __init__(self, space):
        self.space = space

    def reset(self, key, env_params=None):
        self._keys = jax.random.split(key, 64)
        self._t = 0

    def step_key(self, t):
        return self._keys[t]

    def act(self, observation, reward=0.0):
        action = self.space.sample(jax.random.fold_in(jax.random.key(7), self._t))
        self._t += 1
        return np.asarray(action)


def plain_episode(env, params, controller, key, steps):
    """Every state of the episode by gymnax's ``step_env``, which never resets, on the keys
    ``play_episode`` hands ``env_step``; stops at termination or truncation. Compiled like
    ``play_episode``'s steps, so the floats round alike."""
    _, k_reset, _ = episode_keys(key)
    obs, state = jax.jit(env.reset)(k_reset, params)
    step = jax.jit(env.step_env)
    controller.reset(key, env_params=params)
    states = [state]
    for t in range(steps):
        _, k_env = split_step_key(controller.step_key(t))
        k_step, _ = jax.random.split(k_env)
        action = controller.act(np.asarray(obs))
        obs, state, _, terminated, _ = step(k_step, state, action, params)
        states.append(state)
        if bool(terminated) or bool(env.is_truncated(state, params)):
            break
    return states


@pytest.mark.parametrize("env_id", sorted(SCENES))
def test_the_last_frame_is_the_state_the_episode_ended_in(env_id):
    """gymnax's ``step`` hands back the next episode's start on the last step; the drawn
    episode must end on its own last state (DeepSea's last frame was once the reset board)."""
    import gymnax

    env, params = gymnax.make(env_id)
    key, steps = jax.random.key(11), 24
    space = env.action_space(params)
    played, _ = play_episode(ScriptedController(space), env, params, key, steps)
    expected = plain_episode(env, params, ScriptedController(space), key, steps)
    assert len(played) == len(expected)
    for got, want in zip(played, expected, strict=True):
        jax.tree.map(np.testing.assert_array_equal, got, want)


def test_a_deep_sea_episode_ends_on_the_bottom_row():
    import gymnax

    env, params = gymnax.make("DeepSea-bsuite")
    controller = ScriptedController(env.action_space(params))
    states, _ = play_episode(controller, env, params, jax.random.key(2), 3 * env.size)
    assert len(states) == env.size + 1
    assert [int(s.row) for s in states] == list(range(env.size + 1))
