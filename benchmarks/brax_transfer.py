"""A policy trained on one Brax backend, run on the others: is its gait physics or an artefact?

Brax's backends simulate the same model with different physics (``spring``: impulses and
springs; ``positional``: position-based dynamics; ``mjx``: MuJoCo's own solver). A preset that
trains on the fastest one should show what its policy does elsewhere: a gait that still moves
forward on another backend exploits nothing peculiar to the one it learnt on.

Each backend's env is Brax's own, stepped in a plain Python loop with the run's saved final
policy (``esjax.load_policy``, observation normalisation included) until Brax's termination or
``--steps``; the return is the env's own reward, summed.

    python benchmarks/brax_transfer.py runs/halfcheetah --env halfcheetah \
        --backends spring positional mjx --episodes 3
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import esjax

esjax.use_cpu_cores()  # before JAX starts, as every esjax run does

import jax  # noqa: E402
import numpy as np  # noqa: E402
from brax import envs  # noqa: E402

from esjax._src.envs.suite_brax import BACKENDS, EPISODE_LENGTH, UNMAINTAINED_WARNING  # noqa: E402

warnings.filterwarnings("ignore", message=UNMAINTAINED_WARNING, category=UserWarning)


def episode_return(step, reset, controller, seed: int, steps: int) -> float:
    """One episode of ``controller`` from reset key ``seed``: the env's summed reward."""
    state = reset(jax.random.key(seed))
    controller.reset(jax.random.key(seed))
    total = 0.0
    for _ in range(steps):
        state = step(state, controller.act(np.asarray(state.obs)))
        total += float(state.reward)
        if float(state.done):
            break
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an esjax run directory trained on a Brax env")
    p.add_argument("--env", required=True, help="Brax env name, e.g. halfcheetah")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--steps", type=int, default=EPISODE_LENGTH, help="episode length")
    p.add_argument("--seed", type=int, default=0, help="which seed of a --seeds run")
    args = p.parse_args()
    controller = esjax.load_policy(args.run, seed=args.seed)
    print(f"{args.run} (seed {args.seed}) on brax:{args.env}, {args.episodes} episodes each")
    print("| backend | returns | mean |\n|---|---|---|")
    for backend in args.backends:
        env = envs.get_environment(args.env, backend=backend)
        step, reset = jax.jit(env.step), jax.jit(env.reset)
        returns = [
            episode_return(step, reset, controller, 100 + k, args.steps)
            for k in range(args.episodes)
        ]
        shown = ", ".join(f"{r:.1f}" for r in returns)
        print(f"| {backend} | {shown} | {statistics.mean(returns):.1f} |", flush=True)


if __name__ == "__main__":
    main()
