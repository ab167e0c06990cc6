"""esjax against EvoJAX on EvoJAX's own task and network, in one process.

EvoJAX (``pip install evojax``; a benchmark peer, not a dependency of esjax) trains with its
``SimManager`` (every member's episode one ``lax.scan`` of the full length, ``pmap`` over the
devices) and an algorithm's ``ask``/``tell``. The work timed is the loop of
``evojax.Trainer.run`` without its logging, tests and saved models: PGPE on
``CartPoleSwingUp`` with ``MLPPolicy`` (5-64-64-1, tanh), one episode per member.

esjax trains the same ``CartPoleSwingUp`` object, seen through the gymnax-style protocol by
:class:`EvoJAXTask` (the walkthrough's "other common style" of env: ``reset(key) -> state``,
``step(state, action)``), with the same network (``esjax.policies.MLP``, tanh, the action
squashed into [-1, 1]), PGPE at the same settings (esjax's ``pgpe`` preset: evosax's PGPE with
ClipUp), the same popsize and episode length, as one jitted ``esjax.Trainer.train``, twice:

- **the same work**: every episode runs its whole length, rewards after the first ``done``
  masked, as ``SimManager`` does; env steps per second then compare the machinery alone;
- **as esjax runs any env**: an episode ends at its first ``done`` and a chunk of members
  stops once all its episodes have; the seconds per generation are what a user waits.

Both use one CPU device per core (``esjax.use_cpu_cores``; ``SimManager`` then ``pmap``s over
them). Env steps are what each system steps (EvoJAX: popsize x episode length a generation;
esjax: what its metrics count). Each timing is the median of ``--repeats`` rounds after one
that compiles, the systems alternating within a round. EvoJAX 0.2.17 needs the
``jax.tree_map`` alias that JAX removed; the script restores it, the one change to EvoJAX. ::

    python benchmarks/evojax_side_by_side.py           # popsize 256, 1000 steps, 10 generations
    python benchmarks/evojax_side_by_side.py --popsize 1024 --steps 500 --repeats 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import dataclass

import esjax

esjax.use_cpu_cores()  # before JAX starts: one CPU device per core, for both systems

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# EvoJAX 0.2.17 (its latest release) calls ``jax.tree_map``, which JAX has since removed; its
# multi-device path fails without it. The alias is the function JAX replaced it with, and the
# one change made to EvoJAX here.
if not hasattr(jax, "tree_map"):
    jax.tree_map = jax.tree.map

from evojax.algo import PGPE  # noqa: E402
from evojax.policy.mlp import MLPPolicy  # noqa: E402
from evojax.sim_mgr import SimManager  # noqa: E402
from evojax.task.cartpole import CartPoleSwingUp  # noqa: E402
from flax import struct  # noqa: E402

from esjax.policies import MLP  # noqa: E402

# EvoJAX's PGPE set to esjax's `pgpe` preset (strategies/pgpe.toml), which is close to its own
# defaults: ClipUp at 0.15 with momentum 0.9 and speed at most 0.3, the std from 0.1 at rate 0.1
# and at most 20 % a generation, centred ranks, the centre from zeros.
EVOJAX_PGPE = {"optimizer": "clipup", "optimizer_config": {"momentum": 0.9, "max_speed": 0.3},
               "center_learning_rate": 0.15, "stdev_learning_rate": 0.1, "init_stdev": 0.1,
               "stdev_max_change": 0.2, "solution_ranking": True}  # fmt: skip


@dataclass(frozen=True)
class Box:
    low: float
    high: float
    shape: tuple[int, ...]
    dtype: object = jnp.float32


@struct.dataclass
class NoParams:
    max_steps_in_episode: int = struct.field(pytree_node=False, default=1000)


class EvoJAXTask:
    """An EvoJAX ``VectorizedTask`` (batched ``reset(keys)``, ``step(states, actions) ->
    (states, rewards, dones)``) as one gymnax-style env: each call steps a batch of one, and
    esjax's step key goes into the task's state, so an episode replays exactly.

    ``stop_at_done=True`` ends the episode at the task's first ``done``, as esjax runs any env
    (a chunk of members stops stepping once all its episodes have ended). ``False`` does
    EvoJAX's own work: every episode runs its whole length, the task resetting itself after a
    ``done`` and the rewards after the first ``done`` masked, as ``SimManager`` masks them."""

    def __init__(self, task, stop_at_done: bool):
        self.task, self.stop_at_done = task, stop_at_done
        self.default_params = NoParams(max_steps_in_episode=task.max_steps)

    def reset(self, key, params):
        state = jax.tree.map(lambda x: x[0], self.task.reset(key[None]))
        return state.obs, (state, jnp.bool_(False))

    def step(self, key, state, action, params):
        inner, ended = state
        batch = jax.tree.map(lambda x: x[None], inner.replace(key=key))
        batch, reward, done = self.task.step(batch, jnp.reshape(action, (1, -1)))
        inner, reward, done = jax.tree.map(lambda x: x[0], batch), reward[0], done[0] > 0
        if self.stop_at_done:
            return inner.obs, (inner, done), reward, done, jnp.bool_(False), {}
        reward = jnp.where(ended, 0.0, reward)
        return inner.obs, (inner, ended | done), reward, jnp.bool_(False), jnp.bool_(False), {}

    def action_space(self, params):
        return Box(-1.0, 1.0, self.task.act_shape)

    def observation_space(self, params):
        return Box(-jnp.inf, jnp.inf, self.task.obs_shape)


def evojax_generations(popsize: int, steps: int, generations: int):
    """EvoJAX's training loop (``evojax.Trainer.run``'s: ask, evaluate, tell), as a function
    of no arguments that runs ``generations`` and returns ``(env steps, last mean fitness)``."""
    quiet = logging.getLogger("evojax-benchmark")
    quiet.setLevel(logging.WARNING)
    task = CartPoleSwingUp(max_steps=steps, test=False)
    policy = MLPPolicy(input_dim=5, hidden_dims=[64, 64], output_dim=1, logger=quiet)
    solver = PGPE(
        pop_size=popsize, param_size=policy.num_params, seed=0, logger=quiet, **EVOJAX_PGPE
    )
    sim = SimManager(n_repeats=1, test_n_repeats=1, pop_size=popsize, n_evaluations=16,
                     policy_net=policy, train_vec_task=task, valid_vec_task=task, seed=0,
                     logger=quiet)  # fmt: skip

    def run():
        for _ in range(generations):
            scores, _ = sim.eval_params(params=solver.ask(), test=False)
            solver.tell(fitness=scores)
        jax.block_until_ready((solver.best_params, scores))
        return popsize * steps * generations, float(np.mean(scores))

    return run, policy.num_params


def esjax_generations(popsize: int, steps: int, generations: int, stop_at_done: bool):
    """The same work through ``esjax.Trainer`` (the ``pgpe`` preset): one jitted ``train``,
    returning ``(env steps it stepped, last mean fitness)``."""
    env = EvoJAXTask(CartPoleSwingUp(max_steps=steps, test=False), stop_at_done)
    trainer = esjax.Trainer(env, MLP(hidden=(64, 64)), strategy="pgpe", popsize=popsize,
                            generations=generations, episode_length=steps)  # fmt: skip
    train = jax.jit(trainer.train)

    def run():
        _, metrics = jax.block_until_ready(train(esjax.seed_key(0)))
        return int(np.sum(metrics["env_steps"])), float(metrics["fitness_mean"][-1])

    return run, trainer.num_dims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--popsize", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1000, help="episode length")
    parser.add_argument("--generations", type=int, default=10, help="per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from importlib.metadata import version

    g = args.generations
    evojax, same, stops = ("EvoJAX (SimManager + PGPE)", "esjax, the same work",
                           "esjax as it runs (stops at done)")  # fmt: skip
    systems = {
        evojax: evojax_generations(args.popsize, args.steps, g),
        same: esjax_generations(args.popsize, args.steps, g, stop_at_done=False),
        stops: esjax_generations(args.popsize, args.steps, g, stop_at_done=True),
    }
    print(f"jax {jax.__version__}, evojax {version('evojax')}, {jax.default_backend()}, "
          f"{jax.device_count()} devices; CartPoleSwingUp, {args.steps}-step episodes, "
          f"popsize {args.popsize}, {g} generations a call, median of {args.repeats}",
          flush=True)  # fmt: skip
    for name, (run, dims) in systems.items():
        start = time.perf_counter()
        run()  # compiles
        print(f"  {name}: {dims} parameters, first call {time.perf_counter() - start:.1f} s",
              flush=True)  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    last: dict[str, tuple[int, float]] = {}
    for _ in range(args.repeats):  # the systems alternate, so drift falls on all alike
        for name, (run, _) in systems.items():
            start = time.perf_counter()
            last[name] = run()
            seconds[name].append(time.perf_counter() - start)
    wall = {name: statistics.median(values) for name, values in seconds.items()}
    print(
        "\n| system | s per generation | env steps/s | env steps a generation | "
        "its time / esjax's on the same work | last mean fitness |"
    )
    print("|---|---|---|---|---|---|")
    for name, seconds_a_call in wall.items():
        steps, fitness = last[name]
        print(
            f"| {name} | {seconds_a_call / g:.3f} | {steps / seconds_a_call / 1e6:.3f} M | "
            f"{steps // g:,} | {seconds_a_call / wall[same]:.2f}x | {fitness:.1f} |"
        )
    print(
        f"\nesjax / EvoJAX on the same work: {wall[evojax] / wall[same]:.2f}x env steps/s; "
        f"as esjax runs it: {wall[evojax] / wall[stops]:.2f}x generations/s"
    )


if __name__ == "__main__":
    main()
