"""The compiled generation loop: one compilation, block-independent results, seeds, keys."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control.pendulum import Pendulum

from esjax._src.engine.generation import (
    generation_keys,
    group_keys,
    make_engine,
    norm_init,
    norm_stats,
    norm_update,
    seed_keys,
)
from esjax._src.policies.networks import MLP
from esjax._src.rollout.population_rollout import PopulationRollout, RolloutResult
from esjax._src.strategies.strategy import build_strategy, load_strategy

ROOT = Path(__file__).resolve().parents[1]
POP, STEPS, EPISODES = 8, 16, 4


def small_engine(env="Pendulum-v1", normalize_obs=True, block=4, strategy="open_es", **settings):
    rollout = PopulationRollout(env, MLP(hidden=(8,)), STEPS)
    spec = load_strategy(strategy, {"popsize": POP, **settings})
    return make_engine(
        rollout,
        rollout,
        lambda n: build_strategy(spec, n),
        block=block,
        eval_episodes=EPISODES,
        normalize_obs=normalize_obs,
    )


@pytest.fixture(scope="module")
def engine():
    return small_engine()


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def assert_same(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_block_compiles_once_and_boundaries_do_not_matter(engine):
    seeds = jnp.arange(1)
    start = engine.init(seeds)
    # 6 generations as 4 + 2, as 2 + 2 + 2, and as 1 + 3 + 2: one program, identical results.
    plans = [(4, 2), (2, 2, 2), (1, 3, 2)]
    finals, rows = [], []
    for plan in plans:
        state, metrics = start, []
        for n in plan:
            state, m = engine.run_block(state, jnp.asarray(n, jnp.int32))
            metrics.append(np.asarray(m["fitness_mean"])[:n, 0])
        finals.append(state)
        rows.append(np.concatenate(metrics))
    assert engine.run_block._cache_size() == 1
    for state, row in zip(finals[1:], rows[1:], strict=True):
        assert_same(finals[0], state)
        np.testing.assert_array_equal(rows[0], row)
    assert int(finals[0].generation[0]) == 6
    assert int(finals[0].strategy.generation_counter[0]) == 6


def test_padded_steps_do_nothing(engine):
    state = engine.init(jnp.arange(1))
    same, metrics = engine.run_block(state, jnp.asarray(0, jnp.int32))
    assert_same(state, same)
    assert np.all(np.asarray(metrics["env_steps"]) == 0)


def test_seed_vmap_matches_separate_runs(engine):
    both = engine.init(jnp.arange(3, 5))
    both, m_both = engine.run_block(both, jnp.asarray(3, jnp.int32))
    for i, seed in enumerate((3, 4)):
        one = engine.init(jnp.asarray([seed]))
        one, m_one = engine.run_block(one, jnp.asarray(3, jnp.int32))
        # Same computation per seed; a batch of 2 may round a last bit differently from 1.
        for x, y in zip(leaves(both), leaves(one), strict=True):
            np.testing.assert_allclose(x[i], y[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            np.asarray(m_both["fitness_mean"])[:3, i],
            np.asarray(m_one["fitness_mean"])[:3, 0],
            rtol=1e-5,
        )
    evaluation = engine.evaluate(both)
    assert evaluation["eval_return"].shape == (2,)


def _key_set(keys):
    data = np.asarray(jax.random.key_data(keys)).reshape(-1, 2)
    return {tuple(row) for row in data}


def _episode_keys(rollout, key, members, episodes):
    """Every key a population call uses: per-rollout keys and the per-episode split below them."""
    per_rollout = rollout.rollout_keys(key, members, episodes).reshape(-1)
    below = jax.vmap(lambda k: jax.random.split(k, 3))(per_rollout).reshape(-1)
    return _key_set(per_rollout) | _key_set(below)


def test_evaluation_keys_never_overlap_training_keys(engine):
    state = engine.init(jnp.arange(2))
    rollout = engine.rollout
    for s in range(2):
        training, key = set(), state.key[s]
        for _ in range(5):
            key, k_ask, k_rollout, k_tell = generation_keys(key)
            training |= _key_set(jnp.stack([k_ask, k_tell]))
            for k_group in group_keys(k_rollout, 4):  # as with env_groups = 4
                training |= _episode_keys(rollout, k_group, POP, 1)
        roots = seed_keys(s)
        evaluation = _episode_keys(rollout, jax.random.wrap_key_data(state.eval_key[s]), 2, 16)
        test = _episode_keys(rollout, roots["test"], 1, 16)
        assert training and evaluation and test
        assert not training & evaluation
        assert not training & test
        assert not evaluation & test
    # The evaluation episodes are fixed: the same keys at every evaluation.
    later, _ = engine.run_block(state, jnp.asarray(2, jnp.int32))
    np.testing.assert_array_equal(later.eval_key, state.eval_key)


def test_env_groups_share_starts_within_a_group_only():
    engine = small_engine(strategy="open_es")
    spec = load_strategy("open_es", {"popsize": POP, "env_groups": 2})
    grouped = make_engine(
        engine.rollout, engine.rollout, lambda n: build_strategy(spec, n), eval_episodes=EPISODES
    )
    # Every member is the same policy, so returns differ only through the episode starts.
    params = jax.vmap(grouped.unravel)(jnp.zeros((POP, grouped.num_dims)))
    returns = np.asarray(grouped.population_rollout(jax.random.key(0), params, None).returns[:, 0])
    # Mirrored pairs (i, i + POP/2) share a group; groups are {0, 1, 4, 5} and {2, 3, 6, 7}.
    first, second = returns[[0, 1, 4, 5]], returns[[2, 3, 6, 7]]
    assert np.all(first == first[0]) and np.all(second == second[0])
    assert first[0] != second[0]
    state = grouped.init(jnp.arange(1))
    state, _ = grouped.run_block(state, jnp.asarray(2, jnp.int32))
    assert np.all(np.isfinite(np.asarray(state.strategy.mean)))


def test_ars_mirrored_pairs_share_a_start_with_env_groups():
    # ARS's own runs give each direction its own start; here each pair (i, i + POP/2) does.
    spec = load_strategy("ARS", {"popsize": POP, "env_groups": POP // 2})
    rollout = PopulationRollout("Pendulum-v1", MLP(hidden=(8,)), STEPS)
    grouped = make_engine(
        rollout, rollout, lambda n: build_strategy(spec, n), eval_episodes=EPISODES
    )
    params = jax.vmap(grouped.unravel)(jnp.zeros((POP, grouped.num_dims)))
    returns = np.asarray(grouped.population_rollout(jax.random.key(0), params, None).returns[:, 0])
    half = POP // 2
    np.testing.assert_array_equal(returns[:half], returns[half:])
    assert len(set(returns[:half].tolist())) == half


def test_running_moments_match_pooled_moments():
    rng = np.random.default_rng(0)
    norm = norm_init(3)
    observations = []
    for _ in range(4):
        lengths = rng.integers(1, 6, size=(5, 2))
        obs = [rng.normal(2.0, 3.0, size=(n, 3)) for n in lengths.reshape(-1)]
        observations.extend(obs)
        result = RolloutResult(
            returns=jnp.zeros((5, 2)),
            lengths=jnp.asarray(lengths),
            obs_sum=jnp.asarray(np.stack([o.sum(0) for o in obs]).reshape(5, 2, 3)),
            obs_sq_sum=jnp.asarray(np.stack([(o * o).sum(0) for o in obs]).reshape(5, 2, 3)),
        )
        norm = norm_update(norm, result)
    pooled = np.concatenate(observations)
    stats = norm_stats(norm)
    assert float(norm.count) == len(pooled)
    np.testing.assert_allclose(stats.mean, pooled.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.std, pooled.std(0), rtol=1e-3)
    fresh = norm_stats(norm_init(3))
    np.testing.assert_array_equal(fresh.mean, 0.0)
    np.testing.assert_array_equal(fresh.std, 1.0)


class ExplodingPendulum(Pendulum):
    """Pendulum whose reward is NaN whenever the torque is strongly positive."""

    def step_env(self, key, state, action, params):
        obs, state, reward, done, info = super().step_env(key, state, action, params)
        bad = jnp.squeeze(action) > 1.0
        return obs, state, jnp.where(bad, jnp.nan, reward), done, info


def test_nan_returns_do_not_poison_the_run():
    engine = small_engine(env=ExplodingPendulum(), normalize_obs=True)
    # Large perturbations guarantee that some members (at times all) produce NaN returns.
    state = engine.init(jnp.arange(1))
    state = state.replace(strategy=state.strategy.replace(std=jnp.full((1,), 2.0)))
    state = engine.place(state)
    state, metrics = engine.run_block(state, jnp.asarray(3, jnp.int32))
    nonfinite = np.asarray(metrics["nonfinite"])[:3, 0]
    assert nonfinite.sum() > 0
    floats = [x for x in leaves(state) if np.issubdtype(x.dtype, np.floating)]
    assert all(np.all(np.isfinite(x)) for x in floats)
    means = np.asarray(metrics["fitness_mean"])[:3, 0]
    # A statistic over finite members only: NaN exactly when no member was finite.
    np.testing.assert_array_equal(np.isnan(means), nonfinite == POP)


def test_observations_are_normalised_from_training_rollouts_only(engine):
    state = engine.init(jnp.arange(1))
    assert float(state.norm.count[0]) == 0
    after, metrics = engine.run_block(state, jnp.asarray(2, jnp.int32))
    # Every valid training step is counted once; evaluation does not update the statistics.
    assert float(after.norm.count[0]) == float(np.asarray(metrics["env_steps"])[:2, 0].sum())
    engine.evaluate(after)
    assert float(after.norm.count[0]) == float(np.asarray(metrics["env_steps"])[:2, 0].sum())


def test_two_cpu_devices_with_seeds(tmp_path):
    """The sharded rollout inside the scanned, seed-vmapped loop (a fresh process: 2 devices)."""
    script = textwrap.dedent(
        f"""
        import esjax
        esjax.use_cpu_cores(2)
        import jax, jax.numpy as jnp, numpy as np
        assert len(jax.devices()) == 2
        from esjax._src.run.training import evolve
        from esjax._src.run.runs import load_metrics
        common = dict(popsize={POP}, seeds=2, overrides=[
            "episode_length={STEPS}", "policy.hidden=[8]", "evaluation.every=2",
            "evaluation.episodes={EPISODES}", "normalize_obs=true"])
        a = evolve("pendulum", generations=4, out=r"{tmp_path}/a", **common)
        b = evolve("pendulum", generations=2, out=r"{tmp_path}/b", **common)
        b = evolve("pendulum", generations=4, out=r"{tmp_path}/b", resume=True)
        ra, rb = load_metrics(a.run_dir), load_metrics(b.run_dir)
        strip = lambda rows: [{{k: v for k, v in r.items() if k != "wall_s"}} for r in rows]
        assert strip(ra) == strip(rb), (ra, rb)
        assert {{r["seed"] for r in ra}} == {{0, 1}}
        assert a.final_eval_return == b.final_eval_return
        from esjax._src.run.training import engine_for, _ENGINES
        (task, engine), = {{id(v): v for v in _ENGINES.values()}}.values()
        assert engine.run_block._cache_size() == 1, engine.run_block._cache_size()
        print("ok")
        """
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_reported_sums_are_the_same_bits_at_any_number_of_stacked_runs():
    """A run's metrics must not round differently alone than inside an 80-run sweep."""
    from esjax._src.strategies.fitness import ordered_sum

    x = jax.random.normal(jax.random.key(0), (80, 300)) * 100.0
    summed = jax.jit(jax.vmap(ordered_sum))
    every = np.asarray(summed(x))
    for runs in (1, 5, 16):
        np.testing.assert_array_equal(np.asarray(summed(x[:runs])), every[:runs])
    np.testing.assert_allclose(every, np.asarray(x, np.float64).sum(-1), rtol=0, atol=1e-2)
    assert float(ordered_sum(jnp.ones(5))) == 5.0


def test_validated_report_is_the_leader_that_tests_best_and_leaves_the_search_alone():
    top = 4
    plain = small_engine(strategy="SimpleGA", block=3)
    validated = small_engine(strategy="SimpleGA", block=3, validate_top=top, validate_episodes=6)
    seeds = jnp.arange(2)
    a, _ = plain.run_block(plain.init(seeds), jnp.asarray(3, jnp.int32))
    b, _ = validated.run_block(validated.init(seeds), jnp.asarray(3, jnp.int32))
    # The member is chosen on the generation's own key: blocks of 1 + 2 report the same one.
    split, _ = validated.run_block(validated.init(seeds), jnp.asarray(1, jnp.int32))
    split, _ = validated.run_block(split, jnp.asarray(2, jnp.int32))
    assert_same(split, b)
    # The search is untouched: population, fitness, keys and statistics are bit-identical.
    assert_same(a.strategy.algorithm, b.strategy.algorithm)
    assert_same((a.key, a.norm, a.gen_best), (b.key, b.norm, b.gen_best))
    chose_another = False
    for seed in range(2):
        fitness = np.asarray(a.strategy.algorithm.fitness[seed])
        population = np.asarray(a.strategy.algorithm.population[seed])
        leaders = population[np.argsort(fitness, kind="stable")[:top]]
        # Without validation the report is the best by training fitness (evosax minimises).
        np.testing.assert_array_equal(np.asarray(a.strategy.mean[seed]), leaders[0])
        # Each leader tested on its own, on the episodes of this generation's validation key.
        key = jax.random.fold_in(jax.random.wrap_key_data(b.eval_key[seed]), b.generation[seed])
        stats = norm_stats(jax.tree.map(lambda x, s=seed: x[s], b.norm))
        scores = [
            float(
                np.mean(
                    validated.eval_rollout.population(
                        key,
                        jax.tree.map(lambda x: x[None], validated.unravel(leader)),
                        6,
                        stats,
                    ).returns
                )
            )
            for leader in leaders
        ]
        reported = np.asarray(b.strategy.mean[seed])
        index = [i for i, leader in enumerate(leaders) if np.array_equal(leader, reported)]
        assert index, "the reported member is not one of the leaders"
        np.testing.assert_allclose(scores[index[0]], max(scores), rtol=1e-5)
        chose_another |= index[0] != 0
    assert chose_another, "validation never changed the report: the test shows nothing"


def test_a_reward_shift_lowers_each_training_return_by_its_episode_length():
    """CartPole pays 1 a step, so a shift of 1 makes every return 0; lengths are untouched."""
    plain = PopulationRollout("CartPole-v1", MLP(hidden=(8,)), 100)
    shifted = plain.replace(reward_shift=1.0)
    params = jax.vmap(plain.init_params)(jax.random.split(jax.random.key(0), POP))
    key = jax.random.key(3)
    a, b = plain.population(key, params, 2), shifted.population(key, params, 2)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert np.all(np.asarray(a.returns) > 5)
    np.testing.assert_allclose(b.returns, a.returns - a.lengths, atol=1e-4)


def test_a_reward_shift_trains_on_shifted_returns_and_evaluates_on_the_envs(tmp_path):
    """The first generation's members are the same with or without the shift: its fitness is
    the plain one less the mean episode length; test returns stay in the env's own units."""
    from esjax._src.run.runs import load_metrics
    from esjax._src.run.training import evolve

    overrides = ["evaluation.every=1", "evaluation.episodes=8", "policy.hidden=[8]"]
    plain = evolve("cartpole", popsize=POP, generations=2, out=tmp_path / "plain",
                   overrides=overrides)  # fmt: skip
    shifted = evolve("cartpole", popsize=POP, generations=2, out=tmp_path / "shifted",
                     overrides=[*overrides, "reward_shift=1.0"])  # fmt: skip
    first_plain, first_shifted = load_metrics(plain.run_dir)[0], load_metrics(shifted.run_dir)[0]
    mean_length = first_plain["env_steps"] / (POP * 2)  # cartpole plays 2 rollouts a member
    assert first_shifted["env_steps"] == first_plain["env_steps"]
    assert first_shifted["fitness_mean"] == pytest.approx(
        first_plain["fitness_mean"] - mean_length, abs=1e-3
    )
    # Evaluation and test returns are CartPole's own (every step pays 1), not the shifted ones.
    assert shifted.final_eval_return > 5
    assert min(shifted.verdict.final_per_seed) > 5


def test_an_evaluation_compiled_in_the_background_gives_the_same_numbers():
    """The program built in a thread is the one a call builds itself: same bits, one compile."""
    from esjax._src.run.programs import compiling_in_background, keep_programs

    def kept():
        return keep_programs(small_engine(normalize_obs=False), key="background-test")

    ahead, plain = kept(), kept()
    state = ahead.init(jnp.arange(2))
    state, _ = ahead.run_block(state, jnp.asarray(2, jnp.int32))
    ahead.evaluate.compile_in_background(state)
    (building,) = ahead.evaluate._building.values()
    result = ahead.evaluate(state)  # waits for the thread
    assert not building.is_alive() and not ahead.evaluate._building
    assert not ahead.evaluate.compiling() and not compiling_in_background()
    ((call, _),) = ahead.evaluate._calls.values()
    assert isinstance(call, jax.stages.Compiled)  # the call used the thread's program
    assert_same(result, plain.evaluate(state))
    assert_same(ahead.evaluate(state), result)
    assert ahead.evaluate._cache_size() == 1


def test_a_background_compile_that_fails_fails_at_the_call():
    from esjax._src.run.programs import KeptProgram

    def broken(x):
        raise ValueError("cannot trace this")

    program = KeptProgram(jax.jit(broken), "broken", "background-test", lambda x: None)
    program.compile_in_background(jnp.ones(3))  # the thread swallows it...
    with pytest.raises(ValueError, match="cannot trace this"):
        program(jnp.ones(3))  # ...and the caller meets it
