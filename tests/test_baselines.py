"""The analytic pendulum controller against gymnax itself, and its entry points.

The physics checks step gymnax's own ``env.step`` in a plain Python loop (vmapped over a grid
of start states, nothing from the esjax rollout); the controller sees the variant only through
the env parameters it is handed.
"""

from __future__ import annotations

import json

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.pendulum import EnvState, angle_normalize
from test_cli import SMALL, assert_clean_error, esjax

from esjax._src.engine.baselines import pendulum_torque, reference_returns
from esjax._src.engine.generation import seed_keys
from esjax._src.engine.tasks import make_rollout, make_sampler
from esjax._src.run.saved import baseline_returns
from esjax._src.specs import presets
from esjax._src.specs.config import ConfigError, parse_task

ENV, DEFAULT = gymnax.make("Pendulum-v1")
# Every start angle (0 = upright, +-pi hanging) with the reset's range of speeds, including
# the pendulum at rest at the bottom, where an energy pump alone never starts.
ANGLES, SPEEDS = np.meshgrid(np.linspace(-np.pi, np.pi, 13), [-1.0, 0.0, 1.0])
HOLD_STEPS = 50
UPRIGHT = 0.02  # rad


def angles_from_grid(env_params, told_params=None, steps: int = 199) -> np.ndarray:
    """``|angle from upright|`` per step and start, shape ``(steps, starts)``.

    A Python loop over gymnax's ``env.step`` (vmapped over the starts); the controller is told
    ``told_params`` (default: the env's own) and nothing else about the env. 199 steps: the
    200th would end gymnax's episode, and ``env.step`` would return a reset state.
    """
    told = told_params or env_params
    starts = ANGLES.size
    state = EnvState(
        theta=jnp.asarray(ANGLES.ravel(), jnp.float32),
        theta_dot=jnp.asarray(SPEEDS.ravel(), jnp.float32),
        last_u=jnp.zeros(starts),
        time=jnp.zeros(starts, jnp.int32),
    )
    obs = jax.vmap(ENV.get_obs)(state)
    step = jax.jit(jax.vmap(ENV.step, in_axes=(0, 0, 0, None)))
    torque = jax.jit(jax.vmap(pendulum_torque, in_axes=(0, None, None, None, None)))
    keys = jax.random.split(jax.random.key(0), starts)
    angles = []
    for _ in range(steps):
        action = torque(obs, told.m, told.l, told.g, told.max_torque)[:, None]
        obs, state, _, terminated, _, _ = step(keys, state, action, env_params)
        assert not np.any(terminated)
        angles.append(np.abs(np.asarray(angle_normalize(state.theta))))
    return np.asarray(angles)


def test_swings_up_and_holds_the_default_pendulum_from_every_start():
    angles = angles_from_grid(DEFAULT)
    held = angles[-HOLD_STEPS:] < UPRIGHT
    assert held.all(), f"starts not held upright: {np.flatnonzero(~held.all(axis=0))}"


@pytest.mark.parametrize(
    ("m", "l"),
    [(-1.0, 1.0), (2.5, 1.0), (-2.5, 1.0), (-0.5, 1.5), (1.0, 0.5)],
    ids=["sign-flipped", "weak", "weak-flipped", "flipped-long", "short"],
)
def test_swings_up_every_variant_it_is_told_about(m, l):
    """A negative m (reversed torque), a weak actuator (|m| > 2), other lengths."""
    held = angles_from_grid(DEFAULT.replace(m=m, l=l))[-HOLD_STEPS:] < UPRIGHT
    assert held.all(), f"starts not held upright: {np.flatnonzero(~held.all(axis=0))}"


def test_knows_the_variant_only_through_the_params_it_is_handed():
    """Told m = +1 on a pendulum whose m is -1, it pushes the wrong way and holds nothing but
    the start already balanced at rest on top (an equilibrium, where it applies no torque)."""
    flipped = DEFAULT.replace(m=-1.0)
    held = angles_from_grid(flipped, told_params=DEFAULT)[-HOLD_STEPS:] < UPRIGHT
    at_rest_on_top = (ANGLES.ravel() == 0.0) & (SPEEDS.ravel() == 0.0)
    np.testing.assert_array_equal(held.all(axis=0), at_rest_on_top)


def test_rollout_matches_a_plain_gymnax_loop_on_sampled_variants():
    """``reference_returns`` on pendulum-sign's extrapolate split against a Python loop.

    The loop splits each episode key as the rollout does (``params, reset, episode``), draws m
    with the task's sampler, and feeds the controller the drawn params.
    """
    _, raw, source = presets.locate("task", "pendulum-sign")
    task = parse_task(raw, source)
    rollout = make_rollout(task, split="extrapolate", deterministic=True)
    key, episodes = seed_keys(7)["test"], 3
    returns = reference_returns(rollout, key, episodes, "analytic")
    sampler = make_sampler(task.splits["extrapolate"])
    torque = jax.jit(pendulum_torque)
    step = jax.jit(ENV.step)
    expected, masses = [], []
    for episode_key in jax.random.split(key, episodes):
        k_params, k_reset, k_episode = jax.random.split(episode_key, 3)
        params = sampler(k_params, DEFAULT)
        masses.append(float(params.m))
        obs, state = ENV.reset(k_reset, params)
        total = 0.0
        for step_key in jax.random.split(k_episode, task.episode_length):
            _, k_env = jax.random.split(step_key)
            action = torque(obs, params.m, params.l, params.g, params.max_torque)[None]
            obs, state, reward, *_ = step(k_env, state, action, params)
            total += float(reward)
        expected.append(total)
    assert all(2.0 <= abs(m) <= 3.0 for m in masses)
    np.testing.assert_allclose(returns, expected, rtol=1e-4, atol=1e-2)
    zero = reference_returns(rollout, key, episodes, "zero")
    assert np.all(returns > zero + 300)  # it swings up; zero torque never does


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny pendulum-sign and cartpole runs (popsize 8, 16-step episodes, 1 generation)."""
    work = tmp_path_factory.mktemp("baselines")
    made = {}
    for task in ("pendulum-sign", "cartpole"):
        small = (*SMALL, "--generations", "1", "--seeds", "2", "--set", "policy.hidden=[8]")
        result = esjax("evolve", task, *small, "--out", work / task, cwd=work)
        assert result.returncode == 0, result.stdout + result.stderr
        made[task] = work / task
    return work, made


def test_eval_baseline_reports_the_reference_on_the_policy_s_episodes(runs):
    work, made = runs
    run_dir = made["pendulum-sign"]
    args = ("--split", "extrapolate", "--seed", "1", "-n", "5", "--json")
    result = esjax("eval", run_dir, *args, "--baseline", "analytic", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(result.stdout)
    plain = json.loads(esjax("eval", run_dir, *args, cwd=work).stdout)
    returns = record["returns"]
    assert returns["policy (final)"]["mean"] == pytest.approx(plain["mean"])
    analytic = baseline_returns(run_dir, 5, "extrapolate", seed=1)
    assert returns["analytic"]["mean"] == pytest.approx(float(analytic.mean()), rel=1e-5)
    zero, top = returns["zero action"]["mean"], returns["analytic"]["mean"]
    assert top > zero  # 16 steps: the swing-up has only begun
    expected = (plain["mean"] - zero) / (top - zero)
    assert record["score_vs_analytic"] == pytest.approx(expected)
    table = esjax("eval", run_dir, "-n", "3", "--baseline", "analytic", cwd=work)
    assert table.returncode == 0, table.stderr
    assert "analytic" in table.stdout and "normalised score" in table.stdout


def test_eval_baseline_errors_are_one_line(runs):
    work, made = runs
    result = esjax("eval", made["cartpole"], "--baseline", "analytic", cwd=work)
    assert_clean_error(result, "no analytic controller for CartPole-v1")
    grid = ("--grid-axis", "length=0.5,1", "--grid-axis", "masspole=0.05,0.1")
    result = esjax("eval", made["cartpole"], *grid, "--baseline", "analytic", cwd=work)
    assert_clean_error(result, "no analytic controller for CartPole-v1")
    # A grid pins what it varies, so the controller must be told it, as every drawn param.
    grid = ("--grid-axis", "m=1,2", "--grid-axis", "dt=0.05,0.1", "--out", work / "dt.json")
    result = esjax("eval", made["pendulum-sign"], *grid, "--baseline", "analytic", cwd=work)
    assert_clean_error(result, "analytic controller for Pendulum-v1 is not told dt")
    assert not (work / "dt.json").exists()
    result = esjax("eval", made["pendulum-sign"], "--baseline", "oracle", cwd=work)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    with pytest.raises(ConfigError, match="unknown baseline"):
        baseline_returns(made["pendulum-sign"], 2, baseline="oracle")


def test_a_grid_checks_what_the_analytic_controller_is_told_and_only_it():
    """An oracle policy told only m, on an m x l grid: the zero and random references are no
    controller of their own, so nothing is refused; the analytic one is told m and l, not dt."""
    from esjax._src.engine.baselines import baseline_rollout, check_told_pinned

    _, raw, source = presets.locate("task", "pendulum-sign")
    raw = {**raw, "policy": {**raw.get("policy", {}), "param_inputs": ["m"], "meta_inputs": []}}
    rollout = make_rollout(parse_task(raw, source))
    assert rollout.param_inputs == ("m",)
    for baseline in ("zero", "random", "analytic"):
        check_told_pinned(baseline_rollout(rollout, baseline), baseline, ["m", "l"], "--grid")
    with pytest.raises(ConfigError, match=r"--grid: the analytic controller .* not told dt"):
        check_told_pinned(baseline_rollout(rollout, "analytic"), "analytic", ["m", "dt"], "--grid")


def test_zero_baseline_is_the_zero_weight_policy_on_the_same_episodes(runs):
    from esjax._src.analysis.meta import seed_means

    _, made = runs
    run_dir = made["pendulum-sign"]
    assert seed_means(run_dir, 4, "train", baseline="zero") == pytest.approx(
        seed_means(run_dir, 4, "train", zero=True)
    )
    analytic = seed_means(run_dir, 4, "train", baseline="analytic")
    assert len(analytic) == 2 and analytic[0] != analytic[1]  # each seed's own episodes


def test_random_baseline_plays_uniform_actions_like_a_plain_loop():
    """CartPole's random-action return against gymnax stepped in a Python loop with NumPy's
    uniform actions: the same distribution, so the means agree within sampling error."""
    task = parse_task({"env": "CartPole-v1", "episode_length": 500}, "test")
    rollout = make_rollout(task)
    esjax_returns = reference_returns(rollout, jax.random.key(3), 512, "random")

    env, params = gymnax.make("CartPole-v1")
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    loop_returns = []
    for episode in range(200):
        key = jax.random.key(episode)
        _, state = env.reset(key, params)
        total, done, t = 0.0, False, 0
        while not done and t < 500:
            key, k_step = jax.random.split(key)
            _, state, reward, terminated, truncated, _ = step(
                k_step, state, int(rng.integers(2)), params
            )
            total, t = total + float(reward), t + 1
            done = bool(terminated) or bool(truncated)
        loop_returns.append(total)
    loop_returns = np.asarray(loop_returns)
    spread = np.hypot(esjax_returns.std() / np.sqrt(512), loop_returns.std() / np.sqrt(200))
    assert abs(esjax_returns.mean() - loop_returns.mean()) < 4 * spread
    # A random policy is far from the trained one and from always pushing one way (~9 steps).
    assert 15 < esjax_returns.mean() < 35


def test_random_baseline_draws_continuous_actions_uniformly_in_the_bounds():
    """Pendulum's torque bounds [-2, 2]: the drawn actions pass a Kolmogorov-Smirnov test."""
    from scipy import stats

    from esjax._src.engine.baselines import random_policy

    rollout = make_rollout(parse_task({"env": "Pendulum-v1"}, "test"))
    policy = random_policy(rollout.policy)
    keys = jax.random.split(jax.random.key(0), 4000)
    x = jnp.zeros(policy.input_size)
    actions = jax.vmap(lambda k: policy.apply(policy.init(k), x, (), k)[0])(keys)
    assert actions.shape == (4000, 1)
    assert stats.kstest(np.asarray(actions[:, 0]), stats.uniform(-2, 4).cdf).pvalue > 0.001


def test_normalised_score_refuses_an_oracle_no_better_than_zero_actions():
    """0 at zero actions, 1 at the oracle, by hand; an oracle equal to zero actions has no
    scale, which is a clear error rather than an inf or nan that reads like a score."""
    from esjax._src.analysis.meta import normalised

    assert normalised(-300.0, -900.0, -100.0) == pytest.approx(0.75)
    assert normalised(-900.0, -900.0, -100.0) == 0.0
    with pytest.raises(ValueError, match="oracle's return equals the zero-action return"):
        normalised(-150.0, -200.0, -200.0)
