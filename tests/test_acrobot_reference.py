"""The acrobot's planning reference against gymnax's own acrobot, stepped in plain loops.

Its energy is checked against gymnax's integrator (conserved without torque, raised by a
torque that pushes with the elbow's speed); its choice against a brute force over the plans in
a Python loop; its episodes, through esjax's rollout on acrobot-meta's sampled link lengths,
against gymnax stepped episode by episode in a Python loop.
"""

from __future__ import annotations

import itertools

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.acrobot import EnvState

from esjax._src.engine.baselines import (
    PLAN_HOLD,
    PLAN_MOVES,
    acrobot_action,
    acrobot_energy,
    acrobot_plans,
    reference_returns,
)
from esjax._src.engine.generation import seed_keys
from esjax._src.engine.tasks import make_rollout, make_sampler
from esjax._src.specs import presets
from esjax._src.specs.config import ConfigError, parse_task

ENV, DEFAULT = gymnax.make("Acrobot-v1")
# Unequal links, so a term with the two links' masses, centres or inertia swapped shows.
UNEQUAL = DEFAULT.replace(
    link_mass_1=1.3, link_mass_2=0.7, link_com_pos_1=0.4, link_com_pos_2=0.6, link_moi=0.8
)
NO_TORQUE, PUSH = 1, {-1: 0, 1: 2}  # gymnax's actions index [-1, 0, +1]


def start_states(count: int, seed: int = 0, spread: float = 2.0) -> EnvState:
    """Random states: both angles anywhere within ``spread`` rad of hanging, speeds up to 2."""
    angles, speeds = jax.random.split(jax.random.key(seed))
    a = jax.random.uniform(angles, (count, 2), minval=-spread, maxval=spread)
    v = jax.random.uniform(speeds, (count, 2), minval=-2.0, maxval=2.0)
    return acrobot_state(a[:, 0], a[:, 1], v[:, 0], v[:, 1])


def acrobot_state(angle1, angle2, speed1, speed2) -> EnvState:
    """By keyword: gymnax's base ``EnvState`` puts ``time`` first."""
    time = jnp.zeros(jnp.shape(angle1), jnp.int32)
    return EnvState(
        joint_angle1=angle1, joint_angle2=angle2, velocity_1=speed1, velocity_2=speed2, time=time
    )


def stepped(state: EnvState, action, params, steps: int) -> list[EnvState]:
    """States after each of ``steps`` gymnax steps (vmapped over states), in a Python loop."""
    step = jax.jit(jax.vmap(ENV.step_env, in_axes=(None, 0, None, None)))
    out = []
    for _ in range(steps):
        _, state, _, _, _ = step(jax.random.key(0), state, action, params)
        out.append(state)
    return out


@pytest.mark.parametrize("length", [0.1, 1.0, 1.9])
def test_energy_is_conserved_by_gymnax_without_torque(length):
    """Over 10 steps without torque, gymnax's RK4 (0.2 s steps) keeps the energy of every
    state that stays slower than 5 rad/s within 0.5 % of the range over the states (faster
    swings are where a 0.2 s step's integration error grows)."""
    params = UNEQUAL.replace(link_length_1=length)
    start = start_states(32, spread=1.0)
    energy = jax.vmap(acrobot_energy, in_axes=(0, None))
    before = energy(start, params)
    states = stepped(start, NO_TORQUE, params, 10)
    after = np.stack([energy(s, params) for s in states])
    speed = np.stack([np.maximum(abs(s.velocity_1), abs(s.velocity_2)) for s in states])
    slow = speed.max(axis=0) < 5.0
    drift = np.abs(after - before).max(axis=0)
    scale = float(before.max() - before.min())
    assert scale > 1.0 and slow.sum() >= 16
    assert drift[slow].max() < 0.005 * scale


def test_energy_rises_when_the_torque_pushes_with_the_elbow():
    """The elbow torque's power is tau * theta2': over one 0.2 s step in which theta2' keeps
    its sign, pushing with it adds energy and pushing against it removes some."""
    start = start_states(64, seed=1)
    energy = jax.vmap(acrobot_energy, in_axes=(0, None))
    before = np.asarray(energy(start, UNEQUAL))
    direction = np.sign(np.asarray(start.velocity_2))
    along = jnp.where(start.velocity_2 > 0, PUSH[1], PUSH[-1])
    against = jnp.where(start.velocity_2 > 0, PUSH[-1], PUSH[1])
    step = jax.vmap(ENV.step_env, in_axes=(None, 0, 0, None))
    _, with_elbow, *_ = step(jax.random.key(0), start, along, UNEQUAL)
    _, against_elbow, *_ = step(jax.random.key(0), start, against, UNEQUAL)
    kept = (np.sign(np.asarray(with_elbow.velocity_2)) == direction) & (
        np.sign(np.asarray(against_elbow.velocity_2)) == direction
    )
    gain = np.asarray(energy(with_elbow, UNEQUAL)) - before
    loss = np.asarray(energy(against_elbow, UNEQUAL)) - before
    assert kept.sum() >= 16
    assert np.all(gain[kept] > 0) and np.all(loss[kept] < 0)


STEP = jax.jit(ENV.step_env)
REACHED = jax.jit(ENV.is_terminated)
ENERGY = jax.jit(acrobot_energy)


def brute_force(obs: np.ndarray, params) -> int:
    """The planner's rule, written out: every plan stepped in a Python loop through gymnax."""
    obs = jnp.asarray(obs)
    state = acrobot_state(jnp.arctan2(obs[1], obs[0]), jnp.arctan2(obs[3], obs[2]), obs[4], obs[5])
    best, best_value = None, -np.inf
    for moves in itertools.product(range(3), repeat=PLAN_MOVES):
        s, value = state, None
        for t, action in enumerate(np.repeat(moves, PLAN_HOLD)):
            _, s, _, _, _ = STEP(jax.random.key(0), s, int(action), params)
            if REACHED(s, params):
                value = 1e6 - t
                break
        value = float(ENERGY(s, params)) if value is None else value
        if value > best_value:  # the first of equals, like argmax
            best, best_value = moves[0], value
    return best


def test_the_chosen_action_is_the_brute_force_s_on_random_states():
    params = DEFAULT.replace(link_length_1=0.6, link_mass_1=1.4)
    states = start_states(6, seed=2, spread=3.0)
    observations = np.asarray(jax.vmap(ENV.get_obs)(states))
    plans = acrobot_plans()
    chosen = [int(acrobot_action(jnp.asarray(o), params, plans)) for o in observations]
    assert chosen == [brute_force(o, params) for o in observations]


def test_the_told_parameters_change_the_plan():
    """Told a short or a long first link, it picks other actions on some states."""
    observations = jax.vmap(ENV.get_obs)(start_states(64, seed=3, spread=3.0))
    plans = acrobot_plans()

    def choices(length):
        params = DEFAULT.replace(link_length_1=length)
        return np.asarray(jax.vmap(lambda o: acrobot_action(o, params, plans))(observations))

    assert np.any(choices(0.1) != choices(1.9))


def test_rollout_matches_a_plain_gymnax_loop_on_sampled_lengths():
    """``reference_returns`` on acrobot-meta's episodes against a Python loop.

    The loop splits each episode key as the rollout does (``params, reset, episode``), draws
    the link length with the task's sampler, and tells the planner the drawn parameters. The
    task also fixes a shorter time step, which the planner must take from the rollout.
    """
    _, raw, source = presets.locate("task", "acrobot-meta")
    task = parse_task({**raw, "env_params": {"dt": 0.15}}, source)
    rollout = make_rollout(task, deterministic=True)
    key, episodes = seed_keys(5)["test"], 3
    returns = reference_returns(rollout, key, episodes, "analytic")
    sampler = make_sampler(task.env_sampler)
    choose = jax.jit(acrobot_action)
    step = jax.jit(ENV.step)
    plans = acrobot_plans()
    expected = []
    for episode_key in jax.random.split(key, episodes):
        k_params, k_reset, k_episode = jax.random.split(episode_key, 3)
        params = sampler(k_params, DEFAULT.replace(dt=0.15))
        obs, state = ENV.reset(k_reset, params)
        total = 0.0
        for step_key in jax.random.split(k_episode, task.episode_length):
            _, k_env = jax.random.split(step_key)
            action = choose(obs, params, plans)
            obs, state, reward, terminated, _, _ = step(k_env, state, action, params)
            total += float(reward)
            if terminated:
                break
        expected.append(total)
    np.testing.assert_allclose(returns, expected)
    assert len(set(expected)) == episodes  # distinct episodes, not one repeated


def test_swings_up_every_length_the_preset_trains_on_much_sooner_than_random():
    _, raw, source = presets.locate("task", "acrobot-meta")
    rollout = make_rollout(parse_task(raw, source), deterministic=True)
    key = jax.random.key(11)
    planner = reference_returns(rollout, key, 64, "analytic")
    random = reference_returns(rollout, key, 64, "random")
    assert planner.min() > -200 and random.mean() < -400


def test_a_drawn_param_the_planner_is_not_told_is_refused():
    _, raw, source = presets.locate("task", "acrobot-meta")
    drawn = {**raw["env_sampler"], "dt": {"dist": "uniform", "low": 0.1, "high": 0.3}}
    rollout = make_rollout(parse_task({**raw, "env_sampler": drawn}, source), deterministic=True)
    with pytest.raises(ConfigError, match="not told dt"):
        reference_returns(rollout, jax.random.key(0), 2, "analytic")
