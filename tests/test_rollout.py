"""PopulationRollout against an independent reference: a plain Python loop over ``env.step``.

The reference below never touches ``esjax._src.rollout.population_rollout``. It reproduces the
documented key discipline of one episode:

* ``key -> split(key, 3) = (k_params, k_reset, k_episode)``;
* env params ``sampler(k_params, default_params)`` (or the fixed params);
* ``env.reset(k_reset, env_params)``;
* per-step keys ``split(k_episode, episode_length)``, each split into ``(k_act, k_env)``;
* ``policy.apply(params, policy.policy_input(normalized_obs, prev_action, prev_reward,
  prev_done), carry, k_act)``, then gymnax's public ``env.step(k_env, ...)``;
* accumulation up to and including the first step with ``terminated | truncated``.

Every test is small (popsize <= 8, short episodes): the machine is shared.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import esjax
import esjax._src.rollout.population_rollout as rollout_module
from esjax._src.policies.networks import GRU, LSTM, MLP

RTOL = 1e-5
ATOL = 1e-4


# --------------------------------------------------------------------------- reference
@dataclasses.dataclass
class Episode:
    ret: float
    length: int
    obs_sum: np.ndarray
    obs_sq_sum: np.ndarray
    rewards: list[float]
    observations: list[np.ndarray]
    actions: list[np.ndarray]


class Reference:
    """One episode as a plain Python ``for`` loop over gymnax's public ``env.step``.

    Only the policy evaluation is jitted (for speed); the environment loop, the carry
    threading, the termination check and all accumulation happen here in Python.
    """

    def __init__(self, env_id: str, policy, env_params=None, sampler=None):
        self.env, default_params = gymnax.make(env_id)
        self.default_params = default_params if env_params is None else env_params
        self.sampler = sampler
        self.policy = policy

        def act(params, obs, mean, std, prev_action, prev_reward, prev_done, carry, key):
            k_act, k_env = jax.random.split(key)
            x = policy.policy_input((obs - mean) / std, prev_action, prev_reward, prev_done)
            action, carry = policy.apply(params, x, carry, k_act)
            return action, carry, k_env

        self._act = jax.jit(act)

    def env_params_for(self, k_params):
        if self.sampler is None:
            return self.default_params
        return self.sampler(k_params, self.default_params)

    def zero_action(self):
        head = self.policy.head
        if head.discrete:
            return jnp.int32(-1)  # no previous action: its one-hot feature is all zeros
        return jnp.zeros(head.shape, jnp.float32)

    def run(self, key, params, episode_length: int, obs_stats=None) -> Episode:
        k_params, k_reset, k_episode = jax.random.split(key, 3)
        env_params = self.env_params_for(k_params)
        obs, state = self.env.reset(k_reset, env_params)
        obs = jnp.asarray(obs, jnp.float32).reshape(-1)
        if obs_stats is None:
            mean, std = jnp.zeros_like(obs), jnp.ones_like(obs)
        else:
            mean, std = obs_stats.mean, obs_stats.std
        carry = self.policy.initial_carry()
        prev_action = self.zero_action()
        prev_reward = jnp.float32(0.0)
        prev_done = jnp.float32(0.0)
        step_keys = jax.random.split(k_episode, episode_length)

        ep = Episode(0.0, 0, np.zeros(obs.shape), np.zeros(obs.shape), [], [], [])
        for t in range(episode_length):
            action, carry, k_env = self._act(
                params, obs, mean, std, prev_action, prev_reward, prev_done, carry, step_keys[t]
            )
            obs_np = np.asarray(obs, np.float64)
            ep.obs_sum += obs_np
            ep.obs_sq_sum += obs_np * obs_np
            ep.observations.append(obs_np)
            ep.actions.append(np.asarray(action))
            obs, state, reward, terminated, truncated, _ = self.env.step(
                k_env, state, action, env_params
            )
            obs = jnp.asarray(obs, jnp.float32).reshape(-1)
            reward = jnp.asarray(reward, jnp.float32).reshape(())
            ep.ret += float(reward)
            ep.rewards.append(float(reward))
            ep.length += 1
            if bool(terminated) or bool(truncated):
                break
            prev_action, prev_reward, prev_done = action, reward, jnp.float32(0.0)
        return ep

    def population(self, rollout_keys, pop_params, episode_length, obs_stats=None):
        """Episodes ``[member][rollout]``; ``rollout_keys`` is ``(R,)`` or ``(popsize, R)``."""
        popsize = jax.tree.leaves(pop_params)[0].shape[0]
        shared = rollout_keys.ndim == 1
        out = []
        for i in range(popsize):
            params = jax.tree.map(lambda x, i=i: x[i], pop_params)
            keys = rollout_keys if shared else rollout_keys[i]
            out.append([self.run(k, params, episode_length, obs_stats) for k in keys])
        return out


def field(episodes, name):
    return np.array([[getattr(ep, name) for ep in row] for row in episodes])


def build_policy(env_id: str, spec, deterministic: bool = True):
    env, params = gymnax.make(env_id)
    obs, _ = env.reset(jax.random.key(0), params)
    return spec.build(int(jnp.size(obs)), env.action_space(params), deterministic)


def init_pop(ro, key, popsize):
    return jax.vmap(ro.init_params)(jax.random.split(key, popsize))


def acrobot_pump(gain: float, rest: float):
    """Single-layer Acrobot controller: torque follows ``gain * velocity_1``.

    Logits are ``[-gain * v1, rest, gain * v1]``: no torque while ``|gain * v1| < rest``.
    A negative gain pumps energy into the swing and can reach the goal height (terminate)
    within 120 steps; a positive gain damps it and never terminates.
    """
    kernel = jnp.zeros((6, 3)).at[4, 2].set(gain).at[4, 0].set(-gain)
    return {"params": {"Dense_0": {"kernel": kernel, "bias": jnp.array([0.0, rest, 0.0])}}}


def stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


# --------------------------------------------------------------------------- 1. MLP
def test_pendulum_mlp_population_matches_reference_loop():
    T, pop, R = 60, 4, 2
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((16,)), T)
    key = jax.random.key(1)
    pop_params = init_pop(ro, jax.random.key(2), pop)
    res = ro.population(key, pop_params, R)

    assert res.returns.shape == (pop, R)
    ref = Reference("Pendulum-v1", ro.policy).population(
        ro.rollout_keys(key, pop, R), pop_params, T
    )
    np.testing.assert_allclose(res.returns, field(ref, "ret"), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(res.lengths, np.full((pop, R), T))
    np.testing.assert_array_equal(field(ref, "length"), np.full((pop, R), T))
    # Not a degenerate comparison: members and rollouts really differ.
    assert np.unique(np.round(np.asarray(res.returns), 3)).size == pop * R


def test_raw_uint32_keys_are_accepted_like_typed_keys():
    """gymnax-style ``jax.random.PRNGKey`` arrays give the same episodes as ``jax.random.key``."""
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((8,)), 20)
    pop_params = init_pop(ro, jax.random.key(2), 3)
    typed = ro.population(jax.random.key(1), pop_params, 2)
    raw = ro.population(jax.random.PRNGKey(1), pop_params, 2)
    np.testing.assert_array_equal(raw.returns, typed.returns)


# ------------------------------------------------------------ 2. recurrent: LSTM and GRU
@pytest.mark.parametrize("cell", [LSTM, GRU])
@pytest.mark.parametrize(("env_id", "T"), [("Pendulum-v1", 40), ("CartPole-v1", 60)])
def test_recurrent_policy_with_meta_inputs_matches_reference_loop(env_id, T, cell):
    pop, R = 3, 2
    spec = cell(8, meta_inputs=("action", "reward", "done"))
    ro = esjax.PopulationRollout(env_id, spec, T)
    key = jax.random.key(11)
    pop_params = init_pop(ro, jax.random.key(12), pop)
    res = ro.population(key, pop_params, R)

    ref = Reference(env_id, ro.policy).population(ro.rollout_keys(key, pop, R), pop_params, T)
    np.testing.assert_allclose(res.returns, field(ref, "ret"), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(res.lengths, field(ref, "length"))
    np.testing.assert_allclose(res.obs_sum, field(ref, "obs_sum"), rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- 3. masking
def _masking_case(env_id):
    if env_id == "CartPole-v1":
        T = 60
        # Sampled actions, so the per-step action keys matter as well.
        ro = esjax.PopulationRollout(env_id, MLP((8,)), T, deterministic=False)
        pop_params = init_pop(ro, jax.random.key(21), 4)
        # Non-trivial normalisation, to check obs_sum stays on raw observations.
        stats = esjax.ObsStats(jnp.array([0.1, -0.2, 0.05, 0.3]), jnp.array([0.5, 2.0, 0.1, 1.5]))
        return ro, T, pop_params, stats
    T = 120
    ro = esjax.PopulationRollout(env_id, MLP(hidden=()), T)
    gains = [(-1.0, -1.0), (1.0, -1.0), (-3.0, 0.5), (-2.0, 0.2)]
    pop_params = stack([acrobot_pump(g, rest) for g, rest in gains])
    return ro, T, pop_params, None


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
def test_masking_after_termination_matches_reference(env_id):
    ro, T, pop_params, stats = _masking_case(env_id)
    pop, R = jax.tree.leaves(pop_params)[0].shape[0], 2
    key = jax.random.key(22)
    res = ro.population(key, pop_params, R, obs_stats=stats)
    ref = Reference(env_id, ro.policy).population(
        ro.rollout_keys(key, pop, R), pop_params, T, stats
    )

    lengths = np.asarray(res.lengths)
    assert (lengths < T).any(), f"no rollout ended early: {lengths}"
    np.testing.assert_array_equal(lengths, field(ref, "length"))
    np.testing.assert_allclose(res.returns, field(ref, "ret"), rtol=RTOL, atol=ATOL)
    # Acrobot's RK4 dynamics amplify float32 rounding differences between the fused scan
    # and separately jitted env.step calls to ~1e-5 relative per step; sums over 120 steps
    # then drift by up to ~1e-3 absolute. CartPole stays at the default tolerance.
    rtol, atol = (1e-4, 2e-3) if env_id == "Acrobot-v1" else (RTOL, ATOL)
    np.testing.assert_allclose(res.obs_sum, field(ref, "obs_sum"), rtol=rtol, atol=atol)
    np.testing.assert_allclose(res.obs_sq_sum, field(ref, "obs_sq_sum"), rtol=rtol, atol=atol)
    assert np.unique(lengths).size > 2, f"too little variety in episode lengths: {lengths}"
    if env_id == "CartPole-v1":
        # CartPole pays 1 per step, including the terminating one.
        np.testing.assert_array_equal(np.asarray(res.returns), lengths.astype(np.float32))


@pytest.mark.parametrize("length", [16, 50, 200, 211])
def test_episode_loop_stops_once_every_episode_in_the_batch_has_ended(length):
    """The segmented loop gives lax.scan's summaries, yet runs only to the last death."""
    segment = rollout_module.segment_steps(length)
    death_steps = jnp.array([3, 21, 7])  # the step each episode of the batch ends on

    def step(carry, key):
        alive, ret, executed, death = carry
        reward = jax.random.uniform(key)
        ret = ret + jnp.where(alive, reward, 0.0)
        alive = jnp.logical_and(alive, executed + 1 < death)
        return (alive, ret, executed + 1, death), None

    keys = jax.random.split(jax.random.key(5), length)

    def looped(death):
        init = (jnp.array(True), jnp.zeros(()), jnp.zeros((), jnp.int32), death)
        return rollout_module._scan_while_alive(step, init, keys, lambda c: c[0])

    def scanned(death):
        init = (jnp.array(True), jnp.zeros(()), jnp.zeros((), jnp.int32), death)
        return jax.lax.scan(step, init, keys)[0]

    fast, full = jax.vmap(looped)(death_steps), jax.vmap(scanned)(death_steps)
    np.testing.assert_array_equal(fast[1], full[1])  # the same returns, to the bit
    np.testing.assert_array_equal(fast[0], full[0])
    # Whole segments until the last episode has ended, then the steps that do not fill one.
    full_segments, rest = divmod(length, segment)
    segments_run = min(full_segments, -(-int(death_steps.max()) // segment))
    if full_segments < 2:  # a single segment is a plain scan
        segments_run, rest = 0, length
    # Under vmap the batch loops until its last episode ends; each ended one stays frozen.
    assert int(fast[2].max()) == segments_run * segment + rest
    assert int(full[2].min()) == length
    if length >= 200:
        assert int(fast[2].max()) < 50


def test_truncation_at_env_time_limit_matches_reference():
    T = 30
    env_params = gymnax.make("Pendulum-v1")[1].replace(max_steps_in_episode=20)
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((8,)), T, env_params=env_params)
    params = ro.init_params(jax.random.key(31))
    key = jax.random.key(32)
    res = ro.batch(key, params, 2)
    ref = Reference("Pendulum-v1", ro.policy, env_params=env_params)
    episodes = [ref.run(k, params, T) for k in jax.random.split(key, 2)]
    np.testing.assert_array_equal(res.lengths, [20, 20])
    np.testing.assert_array_equal(res.lengths, [ep.length for ep in episodes])
    np.testing.assert_allclose(res.returns, [ep.ret for ep in episodes], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "env_id, episode_length, max_steps, can_end",
    [
        ("Pendulum-v1", 100, 100, False),  # only the time limit ends it, at the episode's end
        ("Pendulum-v1", 30, 20, True),  # the time limit comes before the episode's end
        ("BernoulliBandit-misc", 100, 100, False),
        ("CartPole-v1", 200, 500, True),  # the pole falls
        ("Catch-bsuite", 20, None, True),  # the ball lands
    ],
)
def test_early_exit_is_left_out_only_where_no_episode_can_end_before_its_length(
    env_id, episode_length, max_steps, can_end
):
    """The default skips the episode loop's checks only where they could never stop it."""
    env, params = gymnax.make(env_id)
    if max_steps is not None:
        params = params.replace(max_steps_in_episode=max_steps)
    assert rollout_module.can_end_early(env, params, episode_length) is can_end
    ro = esjax.PopulationRollout(env_id, MLP((4,)), episode_length, env_params=params)
    assert ro.early_exit is can_end
    # Either way the numbers are the same: a Python loop over env.step is the reference.
    other = esjax.PopulationRollout(
        env_id, MLP((4,)), episode_length, env_params=params, early_exit=not can_end
    )
    weights = ro.init_params(jax.random.key(3))
    key = jax.random.key(4)
    res, res_other = ro.batch(key, weights, 2), other.batch(key, weights, 2)
    np.testing.assert_array_equal(res.returns, res_other.returns)
    np.testing.assert_array_equal(res.lengths, res_other.lengths)
    ref = Reference(env_id, ro.policy, env_params=params)
    episodes = [ref.run(k, weights, episode_length) for k in jax.random.split(key, 2)]
    np.testing.assert_array_equal(res.lengths, [ep.length for ep in episodes])
    np.testing.assert_allclose(res.returns, [ep.ret for ep in episodes], rtol=RTOL, atol=ATOL)


class PassThrough:
    """A do-nothing wrapper around a gymnax env; esjax then has to go through ``env.step``."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params):
        return self._env.step(key, state, action, params)

    def reset(self, key, params):
        return self._env.reset(key, params)


@pytest.mark.parametrize(
    "wrapped",
    [
        pytest.param(False, id="gymnax-env"),
        pytest.param(True, id="wrapped-env"),
    ],
)
def test_stochastic_env_uses_step_keys_like_env_step(wrapped):
    """Acrobot with torque noise: the env consumes its step key, so the key path is visible."""
    T = 40
    env, default_params = gymnax.make("Acrobot-v1")
    env_params = default_params.replace(torque_noise_max=1.0)
    target = PassThrough(env) if wrapped else "Acrobot-v1"
    ro = esjax.PopulationRollout(target, MLP(hidden=()), T, env_params=env_params)
    params = acrobot_pump(-1.0, -1.0)
    key = jax.random.key(35)
    res = ro.batch(key, params, 2)
    ref = Reference("Acrobot-v1", ro.policy, env_params=env_params)
    episodes = [ref.run(k, params, T) for k in jax.random.split(key, 2)]
    np.testing.assert_array_equal(res.lengths, [ep.length for ep in episodes])
    np.testing.assert_allclose(
        res.obs_sum, np.stack([ep.obs_sum for ep in episodes]), rtol=1e-4, atol=2e-3
    )


# --------------------------------------------------------------------------- 4. LSTM carry
def test_lstm_carry_is_threaded_and_reset_between_rollouts():
    T = 40
    policy = build_policy("Pendulum-v1", LSTM(8, meta_inputs=("reward",)))
    no_memory = dataclasses.replace(
        policy, apply=lambda p, x, c, k: policy.apply(p, x, policy.initial_carry(), k)
    )
    ro = esjax.PopulationRollout("Pendulum-v1", policy, T)
    ro_reset = esjax.PopulationRollout("Pendulum-v1", no_memory, T)
    assert ro.policy is policy
    params = ro.init_params(jax.random.key(41))
    key = jax.random.key(42)

    with_carry = ro.single(key, params)
    without_carry = ro_reset.single(key, params)
    ref_with = Reference("Pendulum-v1", policy).run(key, params, T)
    ref_without = Reference("Pendulum-v1", no_memory).run(key, params, T)
    np.testing.assert_allclose(with_carry.returns, ref_with.ret, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(without_carry.returns, ref_without.ret, rtol=RTOL, atol=ATOL)
    assert abs(float(with_carry.returns) - float(without_carry.returns)) > 1e-2, (
        "resetting the LSTM carry every step did not change the return: carry not used"
    )

    # Reset between rollouts: a batch equals independent single() calls on the same keys.
    batch = ro.batch(key, params, 2)
    singles = [ro.single(k, params) for k in jax.random.split(key, 2)]
    np.testing.assert_allclose(
        batch.returns, [float(s.returns) for s in singles], rtol=RTOL, atol=ATOL
    )
    np.testing.assert_allclose(
        batch.obs_sum, np.stack([s.obs_sum for s in singles]), rtol=RTOL, atol=ATOL
    )
    assert float(batch.returns[0]) != float(batch.returns[1])


# --------------------------------------------------------------------------- 5. env params
def pendulum_sampler(key, params):
    k_m, k_l = jax.random.split(key)
    return params.replace(
        m=jax.random.uniform(k_m, minval=0.3, maxval=3.0),
        l=jax.random.uniform(k_l, minval=0.3, maxval=3.0),
    )


def test_env_params_sampler_is_used_per_rollout():
    T, pop, R = 40, 2, 2
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((8,)), T, env_params_sampler=pendulum_sampler)
    ro_fixed = esjax.PopulationRollout("Pendulum-v1", MLP((8,)), T)
    pop_params = init_pop(ro, jax.random.key(51), pop)
    # Strong weights so the torque (which the mass and length scale) matters.
    pop_params = jax.tree.map(lambda x: 5.0 * x, pop_params)
    key = jax.random.key(52)

    sampled = ro.population(key, pop_params, R)
    fixed = ro_fixed.population(key, pop_params, R)
    keys = ro.rollout_keys(key, pop, R)
    ref = Reference("Pendulum-v1", ro.policy, sampler=pendulum_sampler)
    np.testing.assert_allclose(
        sampled.returns, field(ref.population(keys, pop_params, T), "ret"), rtol=RTOL, atol=ATOL
    )
    ref_fixed = Reference("Pendulum-v1", ro_fixed.policy)
    np.testing.assert_allclose(
        fixed.returns,
        field(ref_fixed.population(keys, pop_params, T), "ret"),
        rtol=RTOL,
        atol=ATOL,
    )
    assert np.all(np.abs(np.asarray(sampled.returns) - np.asarray(fixed.returns)) > 1e-3)

    # Each rollout draws its own params from its own k_params.
    drawn = [ro.sample_env_params(jax.random.split(k, 3)[0]) for k in keys]
    assert float(drawn[0].m) != float(drawn[1].m)
    assert float(drawn[0].l) != float(drawn[1].l)
    expected = pendulum_sampler(jax.random.split(keys[0], 3)[0], ro_fixed.env_params)
    assert float(drawn[0].m) == float(expected.m)
    assert ro_fixed.sample_env_params(keys[0]) is ro_fixed.env_params


# --------------------------------------------------------------------------- 6. env keys
def test_common_env_keys_flag():
    T, pop, R = 30, 4, 2
    key = jax.random.key(61)
    spec = MLP((8,))
    ro_common = esjax.PopulationRollout("Pendulum-v1", spec, T, common_env_keys=True)
    ro_own = esjax.PopulationRollout("Pendulum-v1", spec, T, common_env_keys=False)
    member = ro_common.init_params(jax.random.key(62))
    clones = jax.tree.map(lambda x: jnp.stack([x] * pop), member)

    common = np.asarray(ro_common.population(key, clones, R).returns)
    own = np.asarray(ro_own.population(key, clones, R).returns)
    np.testing.assert_array_equal(common, np.broadcast_to(common[0], common.shape))
    for r in range(R):
        assert np.unique(own[:, r]).size == pop, f"identical members share env keys: {own}"

    keys = ro_own.rollout_keys(key, pop, R)
    assert keys.shape == (pop, R)
    ref = Reference("Pendulum-v1", ro_own.policy).population(keys, clones, T)
    np.testing.assert_allclose(own, field(ref, "ret"), rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- 7. sharding
SHARDING_SCRIPT = textwrap.dedent(
    """
    import esjax
    n = esjax.use_cpu_cores(2)
    import jax
    import numpy as np
    from esjax._src.policies.networks import LSTM

    assert n == 2 and len(jax.devices()) == 2, (n, jax.devices())
    spec = LSTM(8, meta_inputs=("action", "reward"))
    key = jax.random.key(71)
    # Shared env keys at both popsizes; per-member keys (which get padded too) at 7 only.
    for common, popsizes in ((True, (7, 8)), (False, (7,))):
        # Sampled actions: every member takes its own path, so a shuffled or shifted member
        # order cannot go unnoticed.
        kw = dict(common_env_keys=common, deterministic=False)
        sharded = esjax.PopulationRollout("CartPole-v1", spec, 40, **kw)
        local = esjax.PopulationRollout("CartPole-v1", spec, 40, devices=jax.devices()[:1], **kw)
        assert len(sharded.devices) == 2 and len(local.devices) == 1
        for popsize in popsizes:
            pop = jax.vmap(sharded.init_params)(jax.random.split(jax.random.key(72), popsize))
            # Scaled apart so that, under common action noise, no two members act alike
            # (the distinctness check below guards the test's power).
            pop = jax.tree.map(lambda x: 3.0 * x, pop)
            a = sharded.population(key, pop, 2)
            b = local.population(key, pop, 2)
            assert a.returns.shape == (popsize, 2), a.returns.shape
            for name in ("returns", "lengths", "obs_sum", "obs_sq_sum"):
                x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (name, x, y)
            rows = np.asarray(a.obs_sum).reshape(popsize, -1)
            assert np.unique(rows, axis=0).shape[0] == popsize, rows
            print("OK", common, popsize)
    """
)


def test_sharded_population_is_bit_identical_to_single_device(tmp_path):
    env = dict(os.environ)
    # The child imports the same esjax as this process.
    package_root = str(Path(esjax.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SHARDING_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # `python -c` puts the cwd first on sys.path: keep it neutral
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == 3, proc.stdout


# --------------------------------------------------------------------------- 8. trajectory
def test_trajectory_is_opt_in_and_consistent_with_summaries():
    T, pop, R = 50, 3, 2
    ro = esjax.PopulationRollout("CartPole-v1", MLP((8,)), T)
    pop_params = init_pop(ro, jax.random.key(81), pop)
    params = jax.tree.map(lambda x: x[0], pop_params)
    key = jax.random.key(82)

    assert ro.single(key, params).trajectory is None
    assert ro.population(key, pop_params, R).trajectory is None

    one = ro.single(key, params, trajectory=True)
    tr = one.trajectory
    assert tr.obs.shape == (T, 4)
    assert tr.action.shape == (T,)
    assert tr.reward.shape == tr.done.shape == tr.valid.shape == (T,)
    valid = np.asarray(tr.valid)
    np.testing.assert_allclose(np.sum(np.where(valid, tr.reward, 0.0)), one.returns, rtol=RTOL)
    assert valid.sum() == int(one.lengths)

    ep = Reference("CartPole-v1", ro.policy).run(key, params, T)
    n = ep.length
    assert n < T, "episode did not terminate; masking not exercised"
    assert valid[:n].all() and not valid[n:].any()
    np.testing.assert_allclose(tr.obs[:n], np.stack(ep.observations), rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(tr.action[:n], np.stack(ep.actions))
    np.testing.assert_allclose(tr.reward[:n], ep.rewards, rtol=RTOL)

    res = ro.population(key, pop_params, R, trajectory=True)
    assert res.trajectory.obs.shape == (pop, R, T, 4)
    assert res.trajectory.reward.shape == (pop, R, T)
    masked = np.where(res.trajectory.valid, res.trajectory.reward, 0.0).sum(-1)
    np.testing.assert_allclose(masked, res.returns, rtol=RTOL)
    np.testing.assert_array_equal(np.asarray(res.trajectory.valid).sum(-1), res.lengths)


# --------------------------------------------------------------------------- 9. memory
def _compiled_bytes(episode_length, what="returns", early_exit=None):
    ro = esjax.PopulationRollout(
        "Pendulum-v1", MLP((16, 16)), episode_length, early_exit=early_exit
    )
    key = jax.random.key(91)
    pop_params = init_pop(ro, jax.random.key(92), 4)
    fn = {
        "returns": jax.jit(lambda k, p: ro.population(k, p, 2).returns),
        "trajectory": jax.jit(lambda k, p: ro.population(k, p, 2, trajectory=True).trajectory),
    }[what]
    stats = fn.lower(key, pop_params).compile().memory_analysis()
    if stats is None:
        return None
    return stats.temp_size_in_bytes + stats.output_size_in_bytes + stats.argument_size_in_bytes


@pytest.mark.parametrize("early_exit", [False, True], ids=["plain_scan", "early_exit_loop"])
def test_memory_does_not_grow_with_episode_length(early_exit):
    short = _compiled_bytes(200, early_exit=early_exit)
    if short is None:
        pytest.skip("compiled.memory_analysis() returned None on this backend: no byte counts")
    long = _compiled_bytes(1000, early_exit=early_exit)
    assert long <= 1.10 * short, f"{short} bytes at 200 steps, {long} bytes at 1000 steps"


def test_the_memory_measurement_sees_per_step_storage():
    """Trajectories do grow with episode length, so the test above could fail."""
    traj_short = _compiled_bytes(200, "trajectory")
    if traj_short is None:
        pytest.skip("compiled.memory_analysis() returned None on this backend: no byte counts")
    traj_long = _compiled_bytes(1000, "trajectory")
    assert traj_long > 2 * traj_short, (traj_short, traj_long)


# --------------------------------------------------------------------------- 10. heads
def _mlp_logits(params, x):
    p = params["params"]
    h = jnp.tanh(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
    return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


def test_discrete_head_argmax_when_deterministic_and_samples_otherwise():
    spec = MLP((8,), "tanh")
    greedy = esjax.PopulationRollout("CartPole-v1", spec, 10, deterministic=True).policy
    sampling = esjax.PopulationRollout("CartPole-v1", spec, 10, deterministic=False).policy
    params = greedy.init(jax.random.key(101))
    params = jax.tree.map(lambda x: 3.0 * x, params)
    xs = 2.0 * jax.random.normal(jax.random.key(102), (32, 4))
    keys = jax.random.split(jax.random.key(103), 32)

    actions = jax.vmap(lambda x, k: greedy.apply(params, x, (), k)[0])(xs, keys)
    expected = jnp.argmax(jax.vmap(lambda x: _mlp_logits(params, x))(xs), axis=-1)
    assert actions.dtype == jnp.int32
    np.testing.assert_array_equal(actions, expected)
    assert np.unique(np.asarray(expected)).size == 2, "inputs do not exercise both actions"
    # Greedy: the key does not matter.
    other_keys = jax.random.split(jax.random.key(104), 32)
    again = jax.vmap(lambda x, k: greedy.apply(params, x, (), k)[0])(xs, other_keys)
    np.testing.assert_array_equal(actions, again)

    # Sampling from flat logits: different keys give different actions.
    flat = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "Dense_1" in jax.tree_util.keystr(path) else x,
        params,
    )
    x0 = xs[0]
    np.testing.assert_array_equal(_mlp_logits(flat, x0), jnp.zeros(2))
    many = jax.random.split(jax.random.key(105), 200)
    sampled = np.asarray(jax.vmap(lambda k: sampling.apply(flat, x0, (), k)[0])(many))
    assert set(np.unique(sampled)) == {0, 1}
    assert 60 < sampled.sum() < 140, sampled.sum()
    greedy_flat = np.asarray(jax.vmap(lambda k: greedy.apply(flat, x0, (), k)[0])(many))
    assert np.unique(greedy_flat).size == 1


def test_continuous_head_stays_within_action_bounds():
    env, env_params = gymnax.make("Pendulum-v1")
    space = env.action_space(env_params)
    policy = esjax.PopulationRollout("Pendulum-v1", MLP((8,)), 10).policy
    params = jax.tree.map(lambda x: 20.0 * x, policy.init(jax.random.key(111)))
    xs = 3.0 * jax.random.normal(jax.random.key(112), (256, 3))
    actions = jax.vmap(lambda x: policy.apply(params, x, (), jax.random.key(0))[0])(xs)
    actions = np.asarray(actions)
    assert actions.shape == (256, *space.shape)
    low, high = float(np.min(space.low)), float(np.max(space.high))
    assert (actions >= low).all() and (actions <= high).all(), (actions.min(), actions.max())
    # Saturated outputs reach both ends of the range (not e.g. squashed into [0, high]).
    span = high - low
    assert actions.min() < low + 0.05 * span and actions.max() > high - 0.05 * span


# --------------------------------------------------------------------------- 11. bad input
@pytest.mark.parametrize("episode_length", [0, -5])
def test_non_positive_episode_length_rejected(episode_length):
    with pytest.raises(ValueError, match="episode_length must be positive"):
        esjax.PopulationRollout("Pendulum-v1", MLP((4,)), episode_length)


def test_non_positive_num_rollouts_rejected():
    ro = esjax.PopulationRollout("Pendulum-v1", MLP((4,)), 5)
    params = ro.init_params(jax.random.key(0))
    pop_params = jax.tree.map(lambda x: jnp.stack([x, x]), params)
    with pytest.raises(ValueError, match="num_rollouts must be positive, got 0"):
        ro.batch(jax.random.key(1), params, 0)
    with pytest.raises(ValueError, match="num_rollouts must be positive, got -1"):
        ro.population(jax.random.key(1), pop_params, -1)


def test_unknown_env_id_rejected():
    with pytest.raises(ValueError, match="does not know env id 'NoSuchEnv-v9'"):
        esjax.PopulationRollout("NoSuchEnv-v9", MLP((4,)), 5)


@pytest.mark.parametrize("spec", [MLP((4,), meta_inputs=("velocity",)), LSTM(4, ("velocity",))])
def test_unknown_meta_input_rejected(spec):
    with pytest.raises(ValueError, match="unknown meta input 'velocity'"):
        esjax.PopulationRollout("CartPole-v1", spec, 5)


def test_unknown_activation_rejected():
    with pytest.raises(ValueError, match="unknown activation 'sigmoidal'"):
        esjax.PopulationRollout("CartPole-v1", MLP((4,), activation="sigmoidal"), 5)


class _AcceleratorStub:
    platform = "gpu"


def test_chunks_population_to_cache_on_cpu_only():
    """On CPU a large population is cut into cache-sized chunks; on an accelerator it is not."""
    policy = MLP((256, 256))
    cpu = esjax.PopulationRollout("Pendulum-v1", policy, 10)
    params = jax.vmap(cpu.init_params)(jax.random.split(jax.random.key(0), 4))
    pop = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], (4096, *x.shape[1:])), params)
    assert cpu.auto_chunk_size(4096, pop) < 4096
    gpu = esjax.PopulationRollout("Pendulum-v1", policy, 10, devices=[_AcceleratorStub()])
    assert gpu.auto_chunk_size(4096, pop) == 4096
    pinned = esjax.PopulationRollout("Pendulum-v1", policy, 10, chunk_size=64)
    assert pinned.auto_chunk_size(4096, pop) == 64


def test_chunks_shrink_with_the_runs_a_vmap_steps_together():
    """Seeds or sweep configurations vmapped around a rollout share its cache-sized chunk."""
    cpu = esjax.PopulationRollout("Pendulum-v1", MLP((32, 32)), 10)
    params = jax.vmap(cpu.init_params)(jax.random.split(jax.random.key(0), 2))
    alone = cpu.auto_chunk_size(4096, params)
    member_bytes = sum(x[0].nbytes for x in jax.tree.leaves(params))
    assert alone * member_bytes <= rollout_module.CHUNK_PARAM_BYTES < 2 * alone * member_bytes
    assert cpu.auto_chunk_size(4096, params, runs=16) == alone // 16
    assert cpu.auto_chunk_size(4096, params, runs=10 * alone) == 1


def _runs_fresh(*lines: str) -> None:
    """Run ``lines`` in a fresh interpreter (imports are per process) and expect 'ok'."""
    script = "\n".join(
        ["import sys", "from esjax._src.envs.core import import_gymnax", *lines, "print('ok')"]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_gymnax_loads_without_seaborn_until_something_reads_it():
    """The stand-in keeps seaborn unexecuted through gymnax's import, then is the real one."""
    _runs_fresh(
        "import_gymnax()",
        "import gymnax.environments.misc.pong as pong",
        "assert 'seaborn.palettes' not in sys.modules",
        "first = pong.sns.color_palette('cubehelix', 3)",
        "real = sys.modules['seaborn']",
        "assert 'seaborn.palettes' in sys.modules and real is not pong.sns",
        "assert pong.sns.color_palette('cubehelix', 3) == first",
        "assert sys.modules['seaborn'] is real",
    )


def test_every_command_s_imports_leave_seaborn_and_pyplot_unloaded():
    """What each CLI command imports (esjax._src.cli.commands, and the baselines, evaluation and
    saved policies under it) never imports gymnax past the stand-ins: a module that imports
    gymnax directly at its top would load seaborn and pyplot, over a second of every start."""
    _runs_fresh(
        "import esjax._src.cli.commands, esjax._src.engine.baselines",
        "import esjax._src.analysis.evaluation",
        "import esjax._src.run.saved",
        "assert 'seaborn.palettes' not in sys.modules",
        "assert 'matplotlib.figure' not in sys.modules",
    )


def test_gymnax_loads_without_pyplot_until_something_reads_it():
    """pyplot stays unexecuted through gymnax's import; any way of reaching it gets the real one."""
    _runs_fresh(
        "import_gymnax()",
        "import gymnax.environments.bsuite.catch as catch",
        "assert 'matplotlib.figure' not in sys.modules",
        "import matplotlib",
        "matplotlib.use('Agg')",
        "import matplotlib.pyplot",
        "figure = matplotlib.pyplot.figure()",
        "real = sys.modules['matplotlib.pyplot']",
        "assert 'matplotlib.figure' in sys.modules and real is not catch.plt",
        "assert matplotlib.pyplot is real and catch.plt.gcf() is figure",
        "assert matplotlib.get_backend().lower() == 'agg'",
    )
