"""Population rollout throughput: esjax vs gymnax ``RolloutWrapper`` vs evosax ``GymnaxProblem``.

All evaluate the same work in this one process: Pendulum-v1, an MLP 3-64-64-1 (tanh,
tanh-squashed torque), 200-step episodes, one population of parameters. esjax runs
twice: sharded over one CPU device per core (its default under ``esjax.use_cpu_cores()``) and
pinned to a single device, which isolates the effect of chunking from the use of both
cores. Prints env steps/s (median of repeats, compile excluded), the ratio of esjax to
each peer, and the memory XLA plans for each compiled call (arguments + outputs +
temporaries), at 200 and 1,000 steps.

    python benchmarks/rollout.py                    # popsize 2048, 1 and 8 rollouts
    python benchmarks/rollout.py --popsize 256 --rollouts 1 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from esjax import PopulationRollout  # noqa: E402
from esjax._src.policies.networks import MLP  # noqa: E402

ENV_ID = "Pendulum-v1"


class PeerMLP(nn.Module):
    """The same network for the peers, with the call signature they expect."""

    @nn.compact
    def __call__(self, obs, key=None):
        x = jnp.tanh(nn.Dense(64)(obs))
        x = jnp.tanh(nn.Dense(64)(x))
        return 2.0 * jnp.tanh(nn.Dense(1)(x))  # Pendulum bounds are +-2


def planned_bytes(jitted, *args) -> int:
    stats = jitted.lower(*args).compile().memory_analysis()
    if stats is None:
        return -1
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes)


def time_call(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_contenders(popsize: int, rollouts: int, steps: int):
    key = jax.random.key(0)
    esjax_ro = PopulationRollout(ENV_ID, MLP(hidden=(64, 64)), episode_length=steps)
    esjax_one = PopulationRollout(
        ENV_ID, MLP(hidden=(64, 64)), episode_length=steps, devices=jax.devices()[:1]
    )
    params = esjax_ro.init_params(key)
    pop = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(key, (popsize, *x.shape)), params)

    def esjax_fn(k, p):
        return esjax_ro.population(k, p, num_rollouts=rollouts).returns

    def esjax_one_fn(k, p):
        return esjax_one.population(k, p, num_rollouts=rollouts).returns

    from gymnax.experimental import RolloutWrapper

    peer_net = PeerMLP()
    wrapper = RolloutWrapper(peer_net.apply, env_name=ENV_ID, num_env_steps=steps)
    peer_params = jax.tree.map(
        lambda x: x + 0.1 * jax.random.normal(key, (popsize, *x.shape)),
        peer_net.init(key, jnp.zeros(3)),
    )

    def wrapper_fn(k, p):
        keys = jax.random.split(k, rollouts)
        return wrapper.population_rollout(keys, p)[-1]

    from evosax.problems import GymnaxProblem

    problem = GymnaxProblem(
        ENV_ID, peer_net, episode_length=steps, num_rollouts=rollouts, use_normalize_obs=False
    )
    problem_state = problem.init(key)

    def problem_fn(k, p):
        return problem.eval(k, p, problem_state)[0]

    # esjax's engine asks for the population inside its jitted loop, replicated on the devices
    # it shards over; the peers are single-device programs and get theirs on the default one.
    replicated = NamedSharding(Mesh(np.array(esjax_ro.devices), ("population",)), P())
    return {
        "esjax": (jax.jit(esjax_fn), (key, jax.device_put(pop, replicated))),
        "esjax, one device": (jax.jit(esjax_one_fn), (key, pop)),
        "gymnax RolloutWrapper": (jax.jit(wrapper_fn), (key, peer_params)),
        "evosax GymnaxProblem": (jax.jit(problem_fn), (key, peer_params)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popsize", type=int, default=2048)
    parser.add_argument("--rollouts", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--long-steps", type=int, default=1000)
    args = parser.parse_args()

    print(
        f"jax {jax.__version__}, backend {jax.default_backend()}, {len(jax.devices())} devices, "
        f"{ENV_ID}, MLP 64-64 tanh, median of {args.repeats}"
    )
    header = (
        f"{'popsize x rollouts':>18} | {'system':<22} | {'steps/s':>10} | {'esjax ratio':>11} "
        f"| {'MiB @' + str(args.steps):>9} | {'MiB @' + str(args.long_steps):>10}"
    )
    print(header)
    print("-" * len(header))
    for rollouts in args.rollouts:
        contenders = make_contenders(args.popsize, rollouts, args.steps)
        long_contenders = make_contenders(args.popsize, rollouts, args.long_steps)
        env_steps = args.popsize * rollouts * args.steps
        rates = {}
        for name, (fn, fn_args) in contenders.items():
            rates[name] = env_steps / time_call(fn, fn_args, args.repeats)
        for name, (fn, fn_args) in contenders.items():
            mem_short = planned_bytes(fn, *fn_args) / 2**20
            long_fn, long_args = long_contenders[name]
            mem_long = planned_bytes(long_fn, *long_args) / 2**20
            ratio = rates["esjax"] / rates[name]
            print(
                f"{f'{args.popsize} x {rollouts}':>18} | {name:<22} | {rates[name] / 1e6:>8.2f} M "
                f"| {ratio:>10.2f}x | {mem_short:>9.1f} | {mem_long:>10.1f}"
            )


if __name__ == "__main__":
    main()
