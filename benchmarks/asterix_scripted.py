"""A hand-written Asterix-MinAtar controller: how much a purely reactive policy can score.

Asterix's evolved presets are judged against a uniformly random policy (0.52). This script
says where the other end lies: a rule that reads gymnax's observation (player, enemy, trail
and gold channels), never steps into a cell an enemy holds or is about to enter, and among
the safe moves takes the one that brings it nearest to a gold piece. It judges danger in the
player's neighbourhood only, as a linear policy on the centred view of
tasks/asterix-minatar.toml can; the gold it heads for may be anywhere.

    python benchmarks/asterix_scripted.py --episodes 16

Plain Python over gymnax's jitted ``env.step``, one episode at a time.
"""

from __future__ import annotations

import argparse
import functools

import gymnax
import jax
import numpy as np

# gymnax's minimal action set: no-op, left, up, right, down, as (row, column) moves.
MOVES = {0: (0, 0), 1: (0, -1), 2: (-1, 0), 3: (0, 1), 4: (1, 0)}
PLAYER, ENEMY, TRAIL, GOLD = range(4)


def threatened(obs: np.ndarray, row: int, col: int, reach: int) -> bool:
    """An enemy stands on (row, col), or within ``reach`` cells of it in that row heading
    towards it: its trail lies on its far side, or it stands on the grid's edge, where a
    newly spawned enemy has no trail yet."""
    for offset in range(-reach, reach + 1):
        x = col + offset
        if not 0 <= x <= 9 or obs[row, x, ENEMY] == 0:
            continue
        if offset == 0:
            return True
        behind = x + (1 if offset > 0 else -1)
        if not 0 <= behind <= 9 or obs[row, behind, TRAIL] > 0:
            return True
    return False


def act(obs: np.ndarray, reach: int) -> int:
    """The safe move nearest to gold (Manhattan distance); no-op when none is safe."""
    row, col = np.argwhere(obs[:, :, PLAYER] > 0)[0]
    golds = np.argwhere(obs[:, :, GOLD] > 0)
    best, best_distance = 0, None
    for action, (dy, dx) in MOVES.items():
        y, x = min(8, max(1, row + dy)), min(9, max(0, col + dx))
        if threatened(obs, y, x, reach):
            continue
        distance = min((abs(gy - y) + abs(gx - x) for gy, gx in golds), default=0)
        if best_distance is None or distance < best_distance:
            best, best_distance = action, distance
    return best


@functools.cache
def _env():
    env, params = gymnax.make("Asterix-MinAtar")
    return jax.jit(env.reset), jax.jit(env.step), params


def episode_return(seed: int, reach: int, steps: int = 1000) -> tuple[float, int]:
    """One episode of the rule from seed ``seed``'s key: (return, steps until it ended)."""
    reset, step, params = _env()
    key = jax.random.key(seed)
    obs, state = reset(key, params)
    total = 0.0
    for t in range(steps):
        key, step_key = jax.random.split(key)
        action = act(np.asarray(obs), reach)
        obs, state, reward, done, *_ = step(step_key, state, action, params)
        total += float(reward)
        if bool(done):
            return total, t + 1
    return total, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--reach", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for reach in args.reach:
        results = [episode_return(seed, reach) for seed in range(args.episodes)]
        returns = np.array([r for r, _ in results])
        lengths = np.array([n for _, n in results])
        error = returns.std(ddof=1) / np.sqrt(len(returns))
        print(
            f"reach {reach}: mean return {returns.mean():.2f} ± {error:.2f} (standard error; "
            f"min {returns.min():.0f}, max {returns.max():.0f}) over {len(returns)} episodes, "
            f"mean length {lengths.mean():.0f} steps"
        )


if __name__ == "__main__":
    main()
