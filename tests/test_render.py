"""Renders: every env esjax draws gives a non-empty picture that follows the state, and an env
it cannot draw is refused in one line."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from esjax.config import ConfigError
from esjax.render import SCENES, channel_image, frame


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
