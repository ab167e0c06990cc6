"""gymnax's MinAtar games stepped alone: env steps/s, and where Seaquest's step spends its time.

    python benchmarks/minatar_speed.py                  # the five games, 64 and 1,024 envs
    python benchmarks/minatar_speed.py --parts          # Seaquest's step, part by part

Why: a Seaquest preset runs far slower than the other MinAtar presets at the same sizes, and
the cause is the env, not the policy or esjax's loop. The same jitted ``lax.scan`` of a
``vmap``-ed ``env.step`` (uniformly random actions, gymnax's own auto-reset) is timed for each
game; ``--parts`` times each of Seaquest's transition functions the same way, from a reset
state, so the numbers say which part of the game's own code costs what. Medians of
``--repeats`` calls after a compiling call.
"""

from __future__ import annotations

import argparse

import gymnax
import jax
from timing import median_time

GAMES = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar",
         "Seaquest-MinAtar")  # fmt: skip


def steps_per_second(name: str, envs: int, steps: int, repeats: int) -> float:
    env, params = gymnax.make(name)

    def run(key):
        _, state = jax.vmap(env.reset, (0, None))(jax.random.split(key, envs), params)

        def step(state, k):
            actions = jax.random.randint(k, (envs,), 0, env.num_actions)
            keys = jax.random.split(k, envs)
            _, state, reward, *_ = jax.vmap(env.step, (0, 0, 0, None))(keys, state, actions, params)
            return state, reward.sum()

        return jax.lax.scan(step, state, jax.random.split(key, steps))[1].sum()

    seconds, _ = median_time(jax.jit(run), jax.random.key(0), repeats=repeats)
    return envs * steps / seconds


def seaquest_parts(envs: int, steps: int, repeats: int) -> dict[str, float]:
    """Microseconds per env-step of each of Seaquest's transition functions."""
    env, params = gymnax.make("Seaquest-MinAtar")
    _, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(0), envs), params)
    parts = {
        "_spawn_entities": lambda s, k: env._spawn_entities(*jax.random.split(k), s, params),
        "_step_agent": lambda s, k: env._step_agent(s, env.action_set[0], params),
        "_step_friendly_bullets": lambda s, k: env._step_friendly_bullets(s)[0],
        "_step_divers": lambda s, k: env._step_divers(s, params),
        "_step_enemy_subs": lambda s, k: env._step_enemy_subs(s, params)[0],
        "_step_enemy_bullets": lambda s, k: env._step_enemy_bullets(s)[0],
        "_step_enemy_fish": lambda s, k: env._step_enemy_fish(s)[0],
        "_step_timers": lambda s, k: env._step_timers(s, params)[0],
        "get_obs": lambda s, k: s.replace(oxygen=s.oxygen + (env.get_obs(s, params).sum() > 0)),
    }
    times = {}
    for name, part in parts.items():

        def run(state, key, part=part):
            def step(state, k):
                return jax.vmap(part)(state, jax.random.split(k, envs)), None

            return jax.lax.scan(step, state, jax.random.split(key, steps))[0]

        seconds, _ = median_time(jax.jit(run), state, jax.random.key(1), repeats=repeats)
        times[name] = seconds / (envs * steps) * 1e6
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="*", default=[64, 1024])
    parser.add_argument("--steps", type=int, default=50, help="steps per timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", action="store_true", help="Seaquest's step, part by part")
    args = parser.parse_args()
    print(f"devices: {jax.devices()}")
    if args.parts:
        envs = args.envs[0]
        times = seaquest_parts(envs, args.steps, args.repeats)
        for name, micros in sorted(times.items(), key=lambda item: -item[1]):
            print(f"Seaquest {name:<24} {micros:7.2f} us per env-step ({envs} envs)")
        print(f"sum of the parts: {sum(times.values()):.1f} us per env-step")
        return
    for name in GAMES:
        rates = [steps_per_second(name, n, args.steps, args.repeats) for n in args.envs]
        cells = ", ".join(
            f"{n} envs {r / 1e3:,.1f} k" for n, r in zip(args.envs, rates, strict=True)
        )
        print(f"{name:<22} env steps/s: {cells}", flush=True)


if __name__ == "__main__":
    main()
