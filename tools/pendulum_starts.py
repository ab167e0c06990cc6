"""Return of a saved Pendulum-v1 policy from each start in a grid of angles and speeds.

    python tools/pendulum_starts.py RUN [--seed S] [--which final|best]

Rows are start angles (0 = upright), columns start speeds; each cell is one 200-step episode
stepped by gymnax's own ``step_env``. A policy that swings up well from one side and badly from
the other shows as rows that differ from their mirror rows (angle -> -angle, speed -> -speed):
what `policy.mirror` removes (benchmarks/README.md, "Mirror-symmetric policies").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments.classic_control.pendulum import EnvState

from esjax._src.run.saved import load_policy

ANGLES = np.linspace(-np.pi, np.pi, 13)[:-1]  # every 30 degrees, the bottom first
SPEEDS = np.array([-1.0, 0.0, 1.0])  # gymnax's reset draws speeds in [-1, 1]


def start_returns(run: str, seed: int, which: str, steps: int = 200) -> np.ndarray:
    """``(angles, speeds)`` episode returns of one saved policy."""
    angle, speed = np.meshgrid(ANGLES, SPEEDS, indexing="ij")
    returns = policy_returns(run, seed, which, angle.ravel(), speed.ravel(), steps)
    return returns.reshape(angle.shape)


def policy_returns(
    run: str, seed: int, which: str, angles: np.ndarray, speeds: np.ndarray, steps: int = 200
) -> np.ndarray:
    """The episode return of one saved policy from each start ``(angles[i], speeds[i])``."""
    controller = load_policy(run, which, seed)
    policy_step = controller._step  # the compiled step the Python controller runs
    known, key = controller._known_params, controller.step_key(0)  # greedy: the key is unread

    def act(policy_state, obs, _):
        return policy_step(controller.params, policy_state, obs, 0.0, known, key)

    keys = jax.random.split(jax.random.key(0), len(angles))  # Pendulum-v1 never reads them
    return episode_returns(act, controller.episode.start(), angles, speeds, keys, steps)


def episode_returns(
    act: Callable, initial: Any, angles: np.ndarray, speeds: np.ndarray, keys: jax.Array,
    steps: int = 200,
) -> np.ndarray:  # fmt: skip
    """The return of a controller from each start ``(angles[i], speeds[i])``.

    ``act(carry, obs, key) -> (action, carry)`` from the carry ``initial``; each episode is
    stepped by gymnax's own ``step_env``, with ``keys[i]`` split into one key per step.
    """
    env, env_params = gymnax.make("Pendulum-v1")

    def episode(angle, speed, key):
        state = EnvState(theta=angle, theta_dot=speed, last_u=jnp.float32(0.0), time=0)

        def step(carry, step_key):
            state, obs, policy_carry = carry
            action, policy_carry = act(policy_carry, obs, step_key)
            obs, state, reward, _, _ = env.step_env(step_key, state, action, env_params)
            return (state, obs, policy_carry), reward

        start = (state, env.get_obs(state), initial)
        _, rewards = jax.lax.scan(step, start, jax.random.split(key, steps))
        return rewards.sum()

    starts = (jnp.asarray(angles, jnp.float32), jnp.asarray(speeds, jnp.float32), keys)
    return np.asarray(jax.jit(jax.vmap(episode))(*starts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--seed", type=int, default=0, help="seed index within the run")
    parser.add_argument("--which", default="final", choices=("final", "best"))
    args = parser.parse_args()
    returns = start_returns(args.run, args.seed, args.which)
    print("angle \\ speed " + "".join(f"{s:>9.1f}" for s in SPEEDS))
    for angle, row in zip(ANGLES, returns, strict=True):
        print(f"{angle:>+13.2f} " + "".join(f"{r:>9.1f}" for r in row))
    mirror = returns[(-np.arange(len(ANGLES))) % len(ANGLES)][:, ::-1]
    gap = np.abs(returns - mirror).max()
    print(f"mean {returns.mean():.1f}; largest gap between mirror-image starts {gap:.1f}")


if __name__ == "__main__":
    main()
