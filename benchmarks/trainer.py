"""esjax.Trainer against esjax evolve, a user's own loop, and seeds one by one, in one process.

Three questions, on Pendulum-v1 with an MLP 64-64 (tanh) and 200-step episodes, OpenES with
Adam (learning rate 0.1), std 0.15, antithetic pairs and centred ranks:

1. **Trainer against ``esjax evolve``** (the pendulum preset at ``--popsize``): the env steps
   per second of one jitted ``Trainer.train`` against ``esjax.evolve``'s own (its training
   wall time, evaluations and the final test excluded), the same generations.
2. **Trainer against a hand loop**: what a user writes without esjax, gymnax's
   ``RolloutWrapper`` and evosax's ``Open_ES`` ``ask``/``tell``, each jitted, in a Python
   loop; and the same loop with esjax's ``PopulationRollout`` in place of the wrapper.
3. **Seeds**: at popsize 64, ``jax.vmap(trainer.train)`` over 16 seeds against 16 trainings
   one after another.

Every timing is the median of ``--repeats`` runs after one that compiles; ratios are of those
medians. ::

    python benchmarks/trainer.py                      # popsize 1024, 20 generations
    python benchmarks/trainer.py --popsize 256 --generations 10 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core, as `esjax evolve` uses

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from evosax.algorithms import Open_ES  # noqa: E402
from gymnax.experimental import RolloutWrapper  # noqa: E402

from esjax import Trainer  # noqa: E402
from esjax.policies import MLP  # noqa: E402

ENV_ID, STEPS = "Pendulum-v1", 200
SETTINGS = {"learning_rate": 0.1, "std_init": 0.15, "momentum": 0.9, "env_groups": 1}


class PeerMLP(nn.Module):
    """The network a user writes for gymnax's wrapper: torque squashed into [-2, 2]."""

    @nn.compact
    def __call__(self, obs, key=None):
        x = jnp.tanh(nn.Dense(64)(obs))
        x = jnp.tanh(nn.Dense(64)(x))
        return 2.0 * jnp.tanh(nn.Dense(1)(x))


def median_seconds(run, repeats: int) -> float:
    run()  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def trainer_rate(popsize: int, generations: int, repeats: int) -> float:
    trainer = Trainer(ENV_ID, MLP(hidden=(64, 64)), popsize=popsize, generations=generations,
                      episode_length=STEPS, settings=SETTINGS)  # fmt: skip
    train = jax.jit(trainer.train)
    seconds = median_seconds(lambda: jax.block_until_ready(train(esjax.seed_key(0))), repeats)
    return popsize * STEPS * generations / seconds


def evolve_rate(popsize: int, generations: int, repeats: int) -> float:
    """``esjax evolve pendulum``'s training rate: env steps over the run's wall time, which
    counts from the first block (compile included for the first call, so it is discarded)."""
    sets = ["policy.hidden=[64, 64]", "policy.activation=tanh", "policy.mirror=[]",
            f"evaluation.every={generations}", "evaluation.episodes=1", "test_episodes=1",
            *(f"strategy_settings.{k}={v!r}".replace("'", '"') for k, v in SETTINGS.items()),
            "strategy_settings.lr_decay=1.0"]  # fmt: skip
    rates = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(repeats + 1):
            summary = esjax.evolve("pendulum", popsize=popsize, generations=generations,
                                   overrides=sets, out=Path(folder) / f"run{i}")  # fmt: skip
            rates.append(summary.env_steps / summary.wall_s)
    return statistics.median(rates[1:])


def hand_loop_rate(popsize: int, generations: int, repeats: int, esjax_rollout: bool) -> float:
    """A user's loop: evosax's ask and tell and a population rollout, each jitted."""
    net = PeerMLP()
    params = net.init(jax.random.key(0), jnp.zeros(3))
    es = Open_ES(popsize, params, optimizer=optax.adam(0.1, b1=0.9),
                 std_schedule=optax.constant_schedule(0.15))  # fmt: skip
    if esjax_rollout:
        rollout = esjax.PopulationRollout(ENV_ID, MLP(hidden=(64, 64)), episode_length=STEPS)
        params = rollout.init_params(jax.random.key(0))
        es = Open_ES(popsize, params, optimizer=optax.adam(0.1, b1=0.9),
                     std_schedule=optax.constant_schedule(0.15))  # fmt: skip

        def returns(key, population):
            return rollout.population(key, population).returns[:, 0]
    else:
        wrapper = RolloutWrapper(net.apply, env_name=ENV_ID, num_env_steps=STEPS)

        def returns(key, population):
            return wrapper.population_rollout(key[None], population)[-1].reshape(-1)

    ask, tell, evaluate = jax.jit(es.ask), jax.jit(es.tell), jax.jit(returns)

    def run():
        key = jax.random.key(0)
        state = es.init(key, params, es.default_params)
        for _ in range(generations):
            key, k_ask, k_eval, k_tell = jax.random.split(key, 4)
            population, state = ask(k_ask, state, es.default_params)
            fitness = -evaluate(k_eval, population)  # evosax minimises
            state, _ = tell(k_tell, population, fitness, state, es.default_params)
        jax.block_until_ready(state)

    return popsize * STEPS * generations / median_seconds(run, repeats)


def seeds_speedup(popsize: int, generations: int, seeds: int, repeats: int) -> float:
    trainer = Trainer(ENV_ID, MLP(hidden=(64, 64)), popsize=popsize, generations=generations,
                      episode_length=STEPS, settings=SETTINGS)  # fmt: skip
    keys = jax.vmap(esjax.seed_key)(jnp.arange(seeds))
    together = jax.jit(jax.vmap(trainer.train))
    one = jax.jit(trainer.train)

    def one_by_one():
        for seed in range(seeds):
            jax.block_until_ready(one(keys[seed]))

    vmapped = median_seconds(lambda: jax.block_until_ready(together(keys)), repeats)
    return median_seconds(one_by_one, repeats) / vmapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popsize", type=int, default=1024)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--seeds-popsize", type=int, default=64)
    args = parser.parse_args()
    p, g, r = args.popsize, args.generations, args.repeats
    print(f"jax {jax.__version__}, {jax.default_backend()}, {len(jax.devices())} devices; "
          f"{ENV_ID}, MLP 64-64, popsize {p}, {g} generations, median of {r}")  # fmt: skip
    trainer = trainer_rate(p, g, r)
    rows = {
        "esjax.Trainer (jitted train)": trainer,
        "esjax evolve": evolve_rate(p, g, r),
        "hand loop: gymnax RolloutWrapper + evosax": hand_loop_rate(p, g, r, False),
        "hand loop: esjax PopulationRollout + evosax": hand_loop_rate(p, g, r, True),
    }
    print(f"{'system':<46} | {'env steps/s':>11} | {'Trainer / it':>12}")
    for name, rate in rows.items():
        print(f"{name:<46} | {rate / 1e6:>9.3f} M | {trainer / rate:>11.2f}x")
    speedup = seeds_speedup(args.seeds_popsize, g, args.seeds, r)
    print(f"popsize {args.seeds_popsize}: vmap over {args.seeds} seeds is {speedup:.2f}x "
          f"faster than {args.seeds} trainings one after another")  # fmt: skip


if __name__ == "__main__":
    main()
