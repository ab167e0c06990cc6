"""How far the acrobot reference looks ahead: mean return per plan shape and first-link length.

The reference (esjax/_src/engine/baselines.py) takes the first action of the best of every sequence
of MOVES actions, each held HOLD steps. This script plays it on gymnax's Acrobot-v1 for each shape
and length, beside two rules that need no model (torque with the elbow's or the shoulder's
speed), on the same start states, and prints one row per rule.

    python benchmarks/acrobot_reference.py --episodes 64
"""

from __future__ import annotations

import argparse
import time

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.engine.baselines import PLAN_HOLD, PLAN_MOVES, acrobot_action, acrobot_plans

LENGTHS = (0.1, 0.4, 0.7, 1.0, 1.3, 1.6, 1.9)  # acrobot-meta trains on U[0.1, 1.9]
SHAPES = ((1, 1), (3, 1), (4, 1), (3, 2), (2, 4), (3, 3), (4, 3), (3, 4), (2, 5), (3, 5))


def episode_returns(choose, length: float, episodes: int, seed: int) -> np.ndarray:
    """Returns of ``choose(obs, params)`` on ``episodes`` gymnax episodes (500 steps at most)."""
    env, default = gymnax.make("Acrobot-v1")
    params = default.replace(link_length_1=length)

    def episode(key):
        obs, state = env.reset_env(key, params)

        def step(carry, _):
            obs, state, done, total = carry
            obs, state, reward, ended, _ = env.step_env(key, state, choose(obs, params), params)
            return (obs, state, done | ended, total + jnp.where(done, 0.0, reward)), None

        start = (obs, state, jnp.asarray(False), jnp.asarray(0.0))
        (_, _, _, total), _ = jax.lax.scan(step, start, None, length=500)
        return total

    keys = jax.random.split(jax.random.key(seed), episodes)
    return np.asarray(jax.jit(jax.vmap(episode))(keys))


def rules() -> dict[str, object]:
    found = {
        "torque with the elbow's speed": lambda obs, p: jnp.where(obs[5] > 0, 2, 0),
        "torque with the shoulder's speed": lambda obs, p: jnp.where(obs[4] > 0, 2, 0),
    }
    for moves, hold in SHAPES:
        plans = acrobot_plans(moves, hold)
        mark = " (esjax's)" if (moves, hold) == (PLAN_MOVES, PLAN_HOLD) else ""
        found[f"plan {moves} moves x {hold} steps{mark}"] = lambda obs, p, plans=plans: (
            acrobot_action(obs, p, plans)
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"mean return over {args.episodes} episodes per first-link length (-500: never up)")
    print("| rule | " + " | ".join(f"l1 = {length}" for length in LENGTHS) + " | mean | wall |")
    print("|---" * (len(LENGTHS) + 3) + "|")
    for name, choose in rules().items():
        start = time.perf_counter()
        means = [episode_returns(choose, l, args.episodes, args.seed).mean() for l in LENGTHS]
        cells = " | ".join(f"{m:.1f}" for m in means)
        wall = time.perf_counter() - start
        print(f"| {name} | {cells} | {np.mean(means):.1f} | {wall:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
