"""Any network under low-rank ES: the same MLP written four ways, and a recurrent cell.

The tanh MLP 256-256 is esjax's built-in ``mlp`` and a user's network in flax linen, flax NNX,
equinox and plain ``(init, apply)`` functions (``tests/data/networks.py``). Each steps a whole
jitted generation of esjax's engine (ask, rollout, tell) on Pendulum-v1 under ``lowrank_es``
(rank 1) and under lazy ``open_es`` (members made whole inside their chunk), in one process;
every generation is compiled first, then timed once per round in turn, so a drift of the
machine's speed falls on all alike (the ``lowrank_es`` generations in rounds of their own,
then the ``open_es`` ones, then the cell's two). The table gives env steps/s (the median of
``--repeats`` rounds), each network's ratio to the built-in MLP under ``lowrank_es`` (the
median of the rounds' own ratios), and each network's low-rank rate over its own rate under
``open_es``.

The recurrent cell (an Elman cell of 256 units, plain functions) steps under ``lowrank_es``
twice: through :func:`esjax._src.policies.perturb.splitting`, and with each member's weights formed
whole in its chunk (the same members, :func:`esjax._src.policies.perturb.materialise`), so the ratio
is what the split products save on a network a user wrote.

    python benchmarks/any_network.py                 # popsize 2048, 200-step episodes
    python benchmarks/any_network.py --popsize 64 --steps 20 --repeats 1 --hidden 16  # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeAlias

import jax
import jax.numpy as jnp

from esjax._src.engine.generation import make_engine
from esjax._src.policies import perturb
from esjax._src.policies.networks import MLP, CodePolicy
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.strategies.population import PairedMembers
from esjax._src.strategies.strategy import build_strategy, load_strategy

ENV_ID = "Pendulum-v1"
NETWORKS = Path(__file__).resolve().parents[1] / "tests" / "data" / "networks.py"
FRAMEWORKS = ("linen", "nnx", "equinox", "plain")
Key: TypeAlias = tuple[str, str]  # (network, strategy or how the cell's members are formed)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popsize", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=256, help="width of each layer / cell")
    parser.add_argument("--steps", type=int, default=200, help="steps per episode")
    parser.add_argument("--repeats", type=int, default=7, help="rounds over every generation")
    return parser.parse_args()


def policy(name: str, hidden: int) -> MLP | CodePolicy:
    if name == "built-in":
        return MLP(hidden=(hidden, hidden))
    factory = "plain_cell" if name == "cell" else f"{name}_mlp"
    return CodePolicy(f"{NETWORKS}:{factory}", {"hidden": (hidden, hidden)})


def generation(name: str, strategy: str, args: argparse.Namespace) -> Callable[[], float]:
    """One jitted generation (ask, rollout, tell), compiled: a call times it once, in seconds."""
    rollout = PopulationRollout(ENV_ID, policy(name, args.hidden), args.steps,
                                devices=jax.devices()[:1])  # fmt: skip
    spec = load_strategy(strategy, {"popsize": args.popsize})
    engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n), block=1)
    state, active = engine.init(jnp.arange(1)), jnp.asarray(1, jnp.int32)
    jax.block_until_ready(engine.run_block(state, active))

    def timed() -> float:
        start = time.perf_counter()
        jax.block_until_ready(engine.run_block(state, active))
        return time.perf_counter() - start

    return timed


def timed_rounds(
    timers: dict[Key, Callable[[], float]], args: argparse.Namespace
) -> dict[Key, list[float]]:
    """Each generation's env steps/s in ``--repeats`` rounds, each round timing every generation
    once in turn, so a drift of the machine's speed falls on all of them alike."""
    found: dict[Key, list[float]] = {name: [] for name in timers}
    for _ in range(args.repeats):
        for name, timed in timers.items():
            found[name].append(args.popsize * args.steps / timed())
    return found


def ratio(rounds: dict[Key, list[float]], name: Key, to: Key) -> float:
    """The median over rounds of ``name``'s rate over ``to``'s in the same round: the machine's
    drift between rounds cancels, where a ratio of two medians keeps it (three runs of the
    median-of-rates ratio put the same linen network at 0.83x, 0.89x and 1.06x the built-in)."""
    return statistics.median(a / b for a, b in zip(rounds[name], rounds[to], strict=True))


@contextlib.contextmanager
def members_formed_whole() -> Iterator[None]:
    """Low-rank members with their weights formed in their chunk: the materialised path."""
    split = PairedMembers.member
    PairedMembers.member = lambda self, ident: perturb.materialise(split(self, ident))
    try:
        yield
    finally:
        PairedMembers.member = split


def main() -> None:
    args = parse_args()
    device = jax.devices()[0]
    print(f"jax {jax.__version__}, {device.device_kind} ({device.platform}); {ENV_ID}, "
          f"popsize {args.popsize}, {args.steps}-step episodes, tanh MLP {args.hidden}-"
          f"{args.hidden}, median of {args.repeats} interleaved rounds")  # fmt: skip
    print(
        "| network | lowrank_es r1 env steps/s | / built-in | open_es (lazy) | low-rank / open_es |"
    )
    print("|---|---|---|---|---|")
    names = ("built-in", *FRAMEWORKS)
    groups = [{(n, strategy): generation(n, strategy, args) for n in names}
              for strategy in ("lowrank_es", "open_es")]  # fmt: skip
    cell = {("cell", "split"): generation("cell", "lowrank_es", args)}
    with members_formed_whole():
        cell[("cell", "whole")] = generation("cell", "lowrank_es", args)
    groups.append(cell)
    # Each group in rounds of its own: in rounds shared with the open_es generations and the
    # cell formed whole, the same linen network came out at 0.83x-1.06x the built-in in 4 runs.
    rounds = {key: rates for group in groups for key, rates in timed_rounds(group, args).items()}
    median = {key: statistics.median(rates) for key, rates in rounds.items()}
    for name in names:
        lowrank, openes = (name, "lowrank_es"), (name, "open_es")
        print(f"| {name} | {median[lowrank] / 1e6:.3f} M | "
              f"{ratio(rounds, lowrank, ('built-in', 'lowrank_es')):.2f}x | "
              f"{median[openes] / 1e6:.3f} M | {median[lowrank] / median[openes]:.2f}x |",
              flush=True)  # fmt: skip
    split, whole = ("cell", "split"), ("cell", "whole")
    print(f"\nElman cell of {args.hidden} units (plain functions) under lowrank_es r1: split "
          f"{median[split] / 1e6:.3f} M env steps/s, formed whole {median[whole] / 1e6:.3f} M: "
          f"{ratio(rounds, split, whole):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
