"""``esjax.Trainer``: live objects in, pure jittable training functions out.

Each check is against a computation the trainer does not share: the command line's own run of
the same task and seed, single trainings against one vmapped program, trainers built per
setting against one program vmapped over it, and learning judged by a plain Python loop over
gymnax's own env with the network applied by its own framework.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import equinox as eqx
import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import esjax
from esjax import Trainer
from esjax._src.specs.config import ConfigError
from esjax.policies import MLP

REPO = Path(__file__).resolve().parents[1]
CURVE = ("fitness_mean", "fitness_best", "fitness_std", "nonfinite")


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- one engine
def test_the_trainers_curve_is_the_command_lines_on_the_same_seed(tmp_path):
    """``esjax evolve pendulum --seed 3`` and ``Trainer.from_task("pendulum")`` started from
    ``esjax.seed_key(3)`` train the same generations (the console script, in its own process)."""
    sets = ["episode_length=40", "evaluation.every=2", "evaluation.episodes=2", "test_episodes=2"]
    out = tmp_path / "run"
    command = [str(Path(sys.executable).parent / "esjax"), "evolve", "pendulum", "--popsize",
               "16", "--generations", "6", "--seed", "3", "--out", str(out)]  # fmt: skip
    for item in sets:
        command += ["--set", item]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    trainer = Trainer.from_task("pendulum", popsize=16, generations=6, overrides=sets)
    _, metrics = trainer.run(trainer.init(esjax.seed_key(3)), 6)
    for name in CURVE:
        close(metrics[name], [row[name] for row in rows])
    assert np.cumsum(metrics["env_steps"]).tolist() == [row["env_steps"] for row in rows]
    assert metrics["generation"].tolist() == [row["generation"] for row in rows]


def test_vmap_over_eight_seeds_equals_eight_single_trainings():
    trainer = Trainer("CartPole-v1", MLP(hidden=(8,)), popsize=16, generations=3,
                      episode_length=50)  # fmt: skip
    keys = jax.vmap(esjax.seed_key)(jnp.arange(8))
    states, together = jax.jit(jax.vmap(trainer.train))(keys)
    for seed in range(8):
        state, alone = trainer.train(esjax.seed_key(seed))
        for name in CURVE:
            close(together[name][seed], alone[name])
        close(states.strategy.mean[seed], state.strategy.mean)
    assert not np.allclose(together["fitness_mean"][0], together["fitness_mean"][1])


def test_a_setting_vmapped_equals_a_trainer_built_with_it():
    """``vmap`` over the learning rate and the env sampler's bounds gives what trainers built
    with each value give."""
    sampler = {"length": {"dist": "uniform", "low": 0.4, "high": 0.6}}
    common = dict(popsize=16, generations=3, episode_length=40, env_sampler=sampler)
    trainer = Trainer("CartPole-v1", MLP(hidden=(8,)), **common)
    assert {"learning_rate", "std_init", "length.low"} <= set(trainer.traced_settings)
    rates, lows = jnp.array([0.01, 0.05, 0.2]), jnp.array([0.3, 0.4, 0.5])
    keys = jax.vmap(esjax.seed_key)(jnp.zeros(3, jnp.int32))

    def train(key, rate, low):
        return trainer.train(key, settings={"learning_rate": rate, "length.low": low})

    _, swept = jax.jit(jax.vmap(train))(keys, rates, lows)
    for i, (rate, low) in enumerate(zip(rates.tolist(), lows.tolist(), strict=True)):
        bounds = {"length": {**sampler["length"], "low": low}}
        own = Trainer("CartPole-v1", MLP(hidden=(8,)), settings={"learning_rate": rate},
                      **{**common, "env_sampler": bounds})  # fmt: skip
        _, alone = own.train(esjax.seed_key(0))
        close(swept["fitness_mean"][i], alone["fitness_mean"])


def test_the_callback_is_called_from_inside_the_jitted_loop():
    seen = []
    trainer = Trainer("CartPole-v1", MLP(hidden=(8,)), popsize=8, generations=3,
                      episode_length=20, callback=lambda g, m: seen.append(
                          (int(g), float(m["fitness_mean"]))))  # fmt: skip
    _, metrics = jax.jit(trainer.train)(esjax.seed_key(0))
    jax.effects_barrier()
    assert seen == list(zip([1, 2, 3], metrics["fitness_mean"].tolist(), strict=True))


# ---------------------------------------------------------------------------- users' networks
class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(jnp.tanh(nn.Dense(16)(x)))


def _networks():
    """A network in each framework, and how its own framework applies the trainer's params."""
    linen = LinenMLP()
    stack = nnx.Sequential(nnx.Linear(4, 16, rngs=nnx.Rngs(0)), nnx.tanh,
                           nnx.Linear(16, 2, rngs=nnx.Rngs(10)))  # fmt: skip
    graph, _, rest = nnx.split(stack, nnx.Param, ...)
    mlp = eqx.nn.MLP(4, 2, 16, 1, activation=jnp.tanh, key=jax.random.key(0))
    static = eqx.partition(mlp, eqx.is_inexact_array)[1]

    def plain_init(key):
        k1, k2 = jax.random.split(key)
        normal = jax.random.normal
        return {"w1": 0.5 * normal(k1, (4, 16)), "w2": 0.5 * normal(k2, (16, 2))}

    def plain_apply(params, x):
        return jnp.tanh(x @ params["w1"]) @ params["w2"]

    return {
        "linen": (linen, linen.apply),
        "nnx": (stack, lambda p, x: nnx.merge(graph, p, rest)(x)),
        "equinox": (mlp, lambda p, x: eqx.combine(p, static)(x)),
        "plain": ((plain_init, plain_apply), plain_apply),
    }


def plain_returns(apply, params, episodes=6, length=200):
    """Mean return of greedy actions on gymnax's own CartPole, stepped in a Python loop."""
    env, env_params = gymnax.make("CartPole-v1")
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    act = jax.jit(lambda p, obs: jnp.argmax(apply(p, obs)))
    total = 0.0
    for episode in range(episodes):
        obs, state = reset(jax.random.key(1000 + episode), env_params)
        for t in range(length):
            obs, state, reward, done, _, _ = step(jax.random.key(t), state, act(params, obs),
                                                  env_params)  # fmt: skip
            total += float(reward)
            if bool(done):
                break
    return total / episodes


@pytest.mark.parametrize("strategy", ["open_es", "lowrank_es"])
@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox", "plain"])
def test_a_users_network_trains_from_python(framework, strategy):
    """Searched from the network's own weights (a start where every member takes the same
    actions whatever it sees would be a plateau; these are not), judged on gymnax's env."""
    network, apply = _networks()[framework]
    trainer = Trainer("CartPole-v1", network, strategy=strategy, popsize=32, generations=16,
                      episode_length=200)  # fmt: skip
    assert trainer.strategy.settings["mean_init"] == "policy"
    start = trainer.init(esjax.seed_key(0))
    state, _ = jax.jit(trainer.run, static_argnums=1)(start, 16)
    before = plain_returns(apply, trainer.policy_params(start))
    after = plain_returns(apply, trainer.policy_params(state))
    assert after >= 150 and after > before + 40, (before, after)


def test_a_network_object_goes_straight_into_a_population_rollout():
    rollout = esjax.PopulationRollout("CartPole-v1", LinenMLP(), episode_length=20)
    params = rollout.init_params(jax.random.key(0))
    population = jax.tree.map(lambda x: jnp.stack([x, x]), params)
    assert rollout.population(jax.random.key(1), population).returns.shape == (2, 1)


class Normed(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.LayerNorm()(nn.Dense(8)(x)))


def test_a_users_network_starts_from_its_own_init_and_esjaxs_from_zeros():
    """The LayerNorm's scale starts at 1, as flax initialises it, not at the zeros that would
    switch the layer off; esjax's own MLP keeps the preset's zero start."""
    trainer = Trainer("Pendulum-v1", Normed(), popsize=8, generations=1)
    mean = trainer.policy_params(trainer.init(esjax.seed_key(0)))
    np.testing.assert_array_equal(mean["params"]["LayerNorm_0"]["scale"], np.ones(8))
    builtin = Trainer("Pendulum-v1", MLP(hidden=(8,)), popsize=8, generations=1)
    assert not np.any(builtin.init(esjax.seed_key(0)).strategy.mean)
    asked = Trainer("Pendulum-v1", Normed(), popsize=8, generations=1,
                    settings={"mean_init": "zeros"})  # fmt: skip
    assert not np.any(asked.init(esjax.seed_key(0)).strategy.mean)


# ---------------------------------------------------------------------------- bad input
class TwoHeads(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x), nn.Dense(1)(x)[0]


class ObsAndKey(nn.Module):  # rejax's DiscretePolicy's call: (obs, rng)
    @nn.compact
    def __call__(self, obs, rng):
        return nn.Dense(2)(obs)


class NoStep:
    default_params = None

    def reset(self, key, params): ...

    def action_space(self, params): ...

    def observation_space(self, params): ...


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Trainer(NoStep(), MLP()), "it has no 'step' method"),
        (lambda: Trainer("CartPole-v1", lambda x: x), "not a network esjax can train"),
        (lambda: Trainer("CartPole-v1", nn.Dense(3)), r"to shape \(3,\); the action head needs"),
        (lambda: Trainer("CartPole-v1", TwoHeads()), r"a tuple of 2 arrays \(\(2,\), \(\)\)"),
        (lambda: Trainer("CartPole-v1", ObsAndKey()), r"two arguments \(obs, rng\)"),
        (lambda: Trainer("CartPole-v1", MLP(), strategy=3), "3 is not a strategy"),
        (lambda: Trainer("CartPole-v1", MLP(), strategy=dict), "dict is not registered"),
        (lambda: Trainer("CartPole-v1", MLP(), strategy="opn_es"), "did you mean 'open_es'"),
        (lambda: Trainer("CartPole-v1", MLP(), settings={"learnin_rate": 1}), "learning_rate"),
        (lambda: small().train(jax.random.key(0), settings={"popsize": 4}),
         "'popsize' of Open_ES cannot be traced under vmap"),
        (lambda: small().train(jax.random.key(0), settings={"nope": 4}), "has no setting 'nope'"),
        (lambda: small().run(small().init(jax.random.key(0)), 2.5), "n must be a non-negative"),
    ],
    ids=["env without step", "not a network", "output size", "two outputs", "obs and key",
         "not a strategy", "unregistered class", "misspelt strategy", "misspelt setting",
         "untraceable setting", "unknown setting", "non-static n"],
)  # fmt: skip
def test_bad_input_is_one_line_naming_what_is_wrong(make, says):
    with pytest.raises(ConfigError, match=says) as raised:
        make()
    assert "\n" not in str(raised.value)


def small():
    return Trainer("CartPole-v1", MLP(hidden=(4,)), popsize=8, generations=2, episode_length=10)


def test_the_low_rank_warning_names_every_leaf_formed_whole_once():
    """Four weight matrices used elementwise (no product can split them): one warning, naming
    all four."""

    def init(key):
        return {f"gain{i}": jnp.ones((4, 2)) for i in range(4)}

    def apply(params, x):
        return sum((x[:, None] * params[f"gain{i}"]).sum(0) for i in range(4))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer("CartPole-v1", (init, apply), strategy="lowrank_es", popsize=8,
                          generations=2, episode_length=10)  # fmt: skip
        trainer.train(jax.random.key(0))
    whole = [str(w.message) for w in caught if "in full, as OpenES" in str(w.message)]
    assert len(whole) == 1, whole
    assert all(f"['gain{i}']" in whole[0] for i in range(4)), whole


# ---------------------------------------------------------------------------- run directories
WALK = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from flax import struct
    from gymnax.environments import spaces

    @struct.dataclass
    class Params:
        target: float = 0.5
        max_steps_in_episode: int = 12

    class Walk:
        '''A point on a line that is paid for being near its target.'''
        default_params = Params()
        def reset(self, key, params):
            x = jax.random.uniform(key, (), minval=-1.0, maxval=1.0)
            return x[None], x
        def step(self, key, state, action, params):
            x = state + 0.2 * jnp.clip(action[0], -1.0, 1.0)
            return x[None], x, -jnp.abs(x - params.target), False, False, {}
        def action_space(self, params):
            return spaces.Box(-1.0, 1.0, (1,))
        def observation_space(self, params):
            return spaces.Box(-5.0, 5.0, (1,))
    """
)


def walk_env():
    namespace: dict = {}
    exec(WALK, namespace)  # an env with no importable home, as a notebook's is
    return namespace["Walk"]()


def walk_trainer(**options):
    return Trainer(walk_env(), LinenMLP1(), popsize=8, generations=4, **options)


class LinenMLP1(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(jnp.tanh(nn.Dense(4)(x)))


def test_a_trainers_run_stops_and_resumes_to_the_same_numbers(tmp_path):
    """A run of objects with no importable home: evolved straight, and evolved halfway then
    resumed by another trainer of the same objects, write the same metrics and policies."""
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    esjax.evolve(walk_trainer(), out=straight, generations=4)
    esjax.evolve(walk_trainer(), out=halves, generations=2)
    esjax.evolve(walk_trainer(), out=halves, generations=4, resume=True)

    def curve(run):
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in esjax.load_metrics(run)]

    assert curve(straight) == curve(halves)
    config = json.loads((straight / "config.json").read_text())
    assert config["task"]["env"].startswith("<live>:") and "Walk" in config["task"]["env"]
    assert config["task"]["policy"]["kind"].startswith("<live>:")
    for which in ("final_policy.msgpack", "best_policy.msgpack"):
        assert (straight / which).read_bytes() == (halves / which).read_bytes()


def test_a_resume_with_another_trainer_is_one_line(tmp_path):
    run = tmp_path / "run"
    esjax.evolve(walk_trainer(), out=run, generations=2)
    with pytest.raises(ConfigError, match="its popsize is 8, this trainer's 16") as raised:
        esjax.evolve(Trainer(walk_env(), LinenMLP1(), popsize=16), out=run, resume=True)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"this run was made by another trainer: its task\.polic"):
        esjax.evolve(Trainer(walk_env(), MLP(hidden=(4,)), popsize=8), out=run, resume=True)


def test_a_run_of_objects_is_evaluated_from_python_and_refused_in_one_line_elsewhere(tmp_path):
    run = tmp_path / "run"
    esjax.evolve(walk_trainer(), out=run, generations=2)
    esjax_script = str(Path(sys.executable).parent / "esjax")
    done = subprocess.run([esjax_script, "eval", str(run)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "live Python objects" in line and "env=..., network=..." in line
    controller = esjax.load_policy(run, env=walk_env(), network=LinenMLP1())
    assert np.shape(controller.act(np.zeros(1))) == (1,)
    tested = esjax.evaluate_run(run, episodes=3, env=walk_env(), network=LinenMLP1())
    assert len(tested["returns"]) == 3


STOPPED = textwrap.dedent(
    """
    import os, signal, sys
    import esjax
    from esjax import Trainer
    sys.path.insert(0, {tests!r})
    from test_trainer import LinenMLP1, walk_env

    def stop(generation, metrics):
        if int(generation) == 3 and sys.argv[2] == "stop":
            os.kill(os.getpid(), signal.SIGTERM)

    trainer = Trainer(walk_env(), LinenMLP1(), popsize=8, generations=6, callback=stop)
    resume = sys.argv[2] == "resume"
    try:
        esjax.evolve(trainer, out=sys.argv[1], resume=resume, block=1)
    except esjax.Interrupted as stopped:
        sys.exit(stopped.exit_code)
    """
)


def test_a_trainers_run_stopped_by_a_signal_resumes_in_another_process(tmp_path):
    """SIGTERM in the middle of the run (sent by the trainer's callback at generation 3):
    checkpoint and exit 143; a new process with new objects resumes it to the numbers of a run
    never stopped."""
    script = tmp_path / "evolve_walk.py"
    script.write_text(STOPPED.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args):
        return subprocess.run([sys.executable, str(script), *map(str, args)], env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip

    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    assert run(stopped, "stop").returncode == 128 + 15
    assert run(stopped, "resume").returncode == 0
    assert run(straight, "go").returncode == 0

    def curve(path):
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in esjax.load_metrics(path)]

    assert len(curve(stopped)) == 6
    assert curve(stopped) == curve(straight)


def test_a_gymnax_env_object_is_recorded_by_its_id(tmp_path):
    """What can be recorded is: gymnax's own env object by its id and the params changed, so
    the command line evaluates the run like any other."""
    env, params = gymnax.make("CartPole-v1")
    trainer = Trainer(env, MLP(hidden=(4,)), env_params=params.replace(gravity=12.0),
                      popsize=8, generations=2, episode_length=20)  # fmt: skip
    assert trainer.config.task.env == "CartPole-v1"
    assert trainer.config.task.env_params == {"gravity": 12.0}
    assert trainer.config.task.policy.kind == "mlp"
    esjax.evolve(trainer, out=tmp_path / "run")
    tested = esjax.evaluate_run(tmp_path / "run", episodes=2)
    assert len(tested["returns"]) == 2


def test_a_presets_network_settings_do_not_reach_a_users_network(tmp_path):
    """pendulum's mirror and hidden sizes are for its own MLP: with --set policy.kind naming a
    user's network, neither is applied, and one line says which settings the network gets."""
    from esjax._src.run.training import resolve_config

    kind = f"policy.kind={REPO / 'tests' / 'data' / 'networks.py'}:plain_mlp"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = resolve_config("pendulum", overrides=[kind, "policy.frame_stack=2"])
    assert config.task.policy.mirror == ()
    assert config.task.policy.settings.extras == {}
    notes = [str(w.message) for w in caught if "is not given the task's" in str(w.message)]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "policy.mirror=[1, -1, -1]" in notes[0] and "policy.hidden=[256]" in notes[0]
    kept = resolve_config("pendulum", overrides=[kind, "policy.mirror=[1, -1, -1]"])
    assert kept.task.policy.mirror == (1, -1, -1)
