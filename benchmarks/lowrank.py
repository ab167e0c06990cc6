"""Low-rank ES against batch inference, lazy OpenES and evosax's OpenES materialised by hand.

A low-rank member's weight matrix is the shared mean plus a rank-r product, so a population
steps as one ``x @ W`` matrix-matrix product per chunk plus thin corrections: nearly what one
network costs when it steps a batch of episodes. This script measures how near, on
Pendulum-v1 (MLP, tanh; 1 rollout per member), in one process, for four ways to step the same
number of episodes:

* ``batch inference``: one shared parameter set over ``popsize`` episodes
  (:meth:`PopulationRollout.batch`): each layer one matrix-matrix product; the limit.
* ``lowrank_es``: a whole jitted generation (ask, rollout, tell) of the ``lowrank_es`` preset
  through esjax's engine.
* ``open_es (lazy)``: the same with the ``open_es`` preset (antithetic OpenES, members made
  inside the rollout's chunks).
* ``evosax Open_ES``: what a user writes by hand: ``Open_ES.ask`` -> a ``(popsize, num_dims)``
  matrix -> ``vmap(unravel)`` -> :meth:`PopulationRollout.summary` -> ``Open_ES.tell``, one jit.

Env steps/s is ``popsize x steps`` over the median seconds of a call (compile and one warm-up
call excluded). Memory is XLA's analysis of each compiled program (arguments + outputs +
scratch), the same on CPU and GPU; the growth of the process's peak RSS is printed too (0 where
an earlier cell's peak was higher). A cell is run only if it fits: first esjax's shape-only
preflight (:func:`esjax._src.run.memory.estimate`), then the compiled program's own bytes, against
the memory available; otherwise it prints "does not fit". Every program runs on the first
device (chunk sizes are esjax's choice for its platform), so the script runs unchanged on a GPU.

    python benchmarks/lowrank.py                      # popsize 2048; 64-64, 256-256, 1024-1024
    python benchmarks/lowrank.py --largest            # also the largest popsize each one fits
    python benchmarks/lowrank.py --popsizes 64 --hidden 8,8 --steps 20 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import importlib.metadata
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms import Open_ES
from jax.flatten_util import ravel_pytree
from timing import median_time

from esjax._src.engine.generation import make_engine, member_layout
from esjax._src.policies.networks import MLP
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.run import memory
from esjax._src.strategies.strategy import build_strategy, load_strategy, population_floats

ENV_ID = "Pendulum-v1"
METHODS = ("batch inference", "lowrank_es", "open_es (lazy)", "evosax Open_ES")
GIB = 2**30


@dataclass
class Cell:
    """One method at one popsize: its timing and memory, or why it did not run."""

    method: str
    popsize: int
    seconds: float | None = None
    held: int = 0  # XLA's bytes for the compiled program
    rss: int = 0  # growth of the process's peak RSS while it compiled and ran
    note: str = ""

    def rate(self, steps: int) -> float | None:
        return None if self.seconds is None else self.popsize * steps / self.seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--popsizes", type=int, nargs="+", default=[2048])
    parser.add_argument(
        "--hidden",
        nargs="+",
        default=["64,64", "256,256", "1024,1024"],
        help="hidden widths of each MLP, comma-separated",
    )
    parser.add_argument("--steps", type=int, default=200, help="steps per episode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=1, help="lowrank_es's rank")
    parser.add_argument(
        "--largest",
        action="store_true",
        help="for the last --hidden, also each method at its largest popsize",
    )
    parser.add_argument(
        "--max-popsize", type=int, default=65536, help="where --largest stops doubling from 256"
    )
    return parser.parse_args()


def make_rollout(hidden: tuple[int, ...], steps: int) -> PopulationRollout:
    """The one env and policy every method steps, on the first device only: a like-for-like
    comparison of programs, not of how many CPU devices each one shards over."""
    return PopulationRollout(ENV_ID, MLP(hidden=hidden), steps, devices=jax.devices()[:1])


def strategy_spec(method: str, popsize: int, rank: int) -> Any:
    """The esjax preset a method's generation runs (OpenES's for the two that are not
    esjax's own low-rank strategy, whose memory is then counted as OpenES's)."""
    if method == "lowrank_es":
        return load_strategy("lowrank_es", {"popsize": popsize, "rank": rank})
    return load_strategy("open_es", {"popsize": popsize})


def preflight_bytes(rollout: PopulationRollout, method: str, popsize: int, rank: int) -> int:
    """What esjax's shape-only preflight says a generation of ``method`` needs: batch
    inference holds no population, evosax's by-hand path three ``popsize x num_dims`` arrays
    (noise, population, the noise ``tell`` rebuilds), the lazy paths what they say they hold."""
    spec = strategy_spec(method, popsize, rank)
    layout = member_layout(rollout)
    held = {
        "batch inference": lambda strategy, devices, chunk_for: 0,
        "evosax Open_ES": lambda strategy, devices, chunk_for: (
            3 * strategy.popsize * strategy.num_dims
        ),
    }.get(
        method,
        lambda strategy, devices, chunk_for: population_floats(
            strategy, layout, devices, chunk_for
        ),
    )
    found = memory.estimate(
        rollout,
        lambda n: build_strategy(spec, n, popsize),
        lambda n: popsize,
        held,
        seeds=1,
        rollouts=1,
    )
    return found.needed


def batch_program(rollout: PopulationRollout, popsize: int) -> tuple[Callable, tuple]:
    """``popsize`` episodes of ONE parameter set: every layer a single matrix-matrix product."""
    key = jax.random.key(0)
    params = rollout.init_params(key)

    def run(k, p):
        return rollout.batch(k, p, num_rollouts=popsize).returns

    return jax.jit(run), (key, params)


def engine_program(
    rollout: PopulationRollout, method: str, popsize: int, rank: int
) -> tuple[Callable, tuple]:
    """esjax's engine, one generation a call (a block of 1): ask, rollout, tell, as training
    runs them, so the lazy paths are measured exactly where they live."""
    spec = strategy_spec(method, popsize, rank)
    engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n, popsize), block=1)
    state = engine.init(jnp.arange(1))
    return engine.run_block, (state, jnp.asarray(1, jnp.int32))


def evosax_program(rollout: PopulationRollout, popsize: int) -> tuple[Callable, tuple]:
    """evosax's ``Open_ES`` as a user drives it: the population materialised as a matrix,
    unravelled member by member, rolled out, told (evosax minimises: the negated returns).
    Adam and std as esjax's ``open_es`` preset, so the work matches the lazy path's."""
    key = jax.random.key(0)
    flat, unravel = ravel_pytree(rollout.init_params(key))
    zeros = jnp.zeros_like(flat, dtype=jnp.float32)
    es = Open_ES(
        popsize,
        solution=zeros,
        optimizer=optax.adam(0.1, b1=0.7),
        std_schedule=optax.constant_schedule(0.15),
    )
    params = es.default_params
    state = es.init(key, zeros, params)

    def generation(k, state):
        k_ask, k_rollout, k_tell = jax.random.split(k, 3)
        population, state = es.ask(k_ask, state, params)
        returns = rollout.summary(k_rollout, jax.vmap(unravel)(population)).returns
        state, _ = es.tell(k_tell, population, -returns, state, params)
        return state

    return jax.jit(generation), (key, state)


def make_program(
    rollout: PopulationRollout, method: str, popsize: int, rank: int
) -> tuple[Callable, tuple]:
    if method == "batch inference":
        return batch_program(rollout, popsize)
    if method == "evosax Open_ES":
        return evosax_program(rollout, popsize)
    return engine_program(rollout, method, popsize, rank)


def held_bytes(compiled: Any) -> int:
    """Arguments + outputs + scratch of a compiled program, by XLA's memory analysis (what
    esjax's own check reads); 0 where the backend does not say."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # a backend without the analysis
        return 0
    parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
    return 0 if stats is None else int(sum(getattr(stats, p, 0) for p in parts))


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def size(n: float) -> str:
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / 2**20:,.1f} MiB"


def does_not_fit(method: str, popsize: int, needed: int, available: int) -> Cell:
    note = f"does not fit (needs {size(needed)}, {size(available)} available)"
    return Cell(method, popsize, held=needed, note=note)


def available_bytes(rollout: PopulationRollout) -> int:
    """Free memory of the rollout's device (the host's for a CPU), unbounded if unknown."""
    available, _ = memory.available_memory(rollout.devices)
    return available or 1 << 62


_COMPILED: dict[tuple, tuple[Any, tuple]] = {}


def compiled_program(rollout: PopulationRollout, method: str, popsize: int, rank: int):
    """The compiled program of a cell and its inputs, compiled once: ``--largest`` checks a
    program's bytes and then times that same program."""
    key = (id(rollout), method, popsize, rank)
    if key not in _COMPILED:
        _COMPILED.clear()  # keep one: an executable may hold device memory
        program, inputs = make_program(rollout, method, popsize, rank)
        _COMPILED[key] = (program.lower(*inputs).compile(), inputs)
    return _COMPILED[key]


def measure(rollout: PopulationRollout, method: str, popsize: int, args) -> Cell:
    """One cell: the shape-only preflight, then the compiled program's bytes, each against
    the memory available, and only then the timed calls (the compiled program itself, so
    what is timed is what was measured)."""
    available = available_bytes(rollout)
    needed = preflight_bytes(rollout, method, popsize, args.rank)
    if needed > available:
        return does_not_fit(method, popsize, needed, available)
    before = peak_rss()
    compiled, inputs = compiled_program(rollout, method, popsize, args.rank)
    held = held_bytes(compiled)
    if held > available:
        return does_not_fit(method, popsize, held, available)
    seconds, _ = median_time(compiled, *inputs, repeats=args.repeats)
    return Cell(method, popsize, seconds, held, peak_rss() - before)


def measure_safely(rollout: PopulationRollout, method: str, popsize: int, args) -> Cell:
    """:func:`measure`, with a failure printed in its cell rather than ending the table
    (its last line; the traceback's end goes to the console)."""
    try:
        return measure(rollout, method, popsize, args)
    except Exception as error:  # a method that fails must not hide the others' numbers
        import traceback

        print("".join(traceback.format_exception(error)[-3:]).rstrip())
        return Cell(method, popsize, note=f"failed: {type(error).__name__}")


def row(label: str, cell: Cell, batch: Cell | None, steps: int) -> str:
    """One table line; the ratio is to batch inference at the same popsize and network."""
    rate = cell.rate(steps)
    if rate is None:
        return f"| {label} | {cell.popsize} | {cell.method} | {cell.note} | | | | |"
    base = batch.rate(steps) if batch is not None else None
    ratio = f"{rate / base:.3f}x" if base else "-"
    return (
        f"| {label} | {cell.popsize} | {cell.method} | {cell.seconds * 1e3:,.2f} | "
        f"{rate / 1e6:,.3f} M | {ratio} | {cell.held / 2**20:,.1f} | "
        f"{cell.rss / 2**20:,.1f} |"
    )


def print_header(args: argparse.Namespace) -> None:
    device = jax.devices()[0]
    available, where = memory.available_memory([device])
    free = "unknown" if available is None else size(available)
    print(
        f"jax {jax.__version__}, evosax {importlib.metadata.version('evosax')}, "
        f"device {device.device_kind} ({device.platform}), {free} available ({where})"
    )
    print(
        f"{ENV_ID}, MLP tanh, {args.steps}-step episodes, 1 rollout per member, "
        f"lowrank_es rank {args.rank}, median of {args.repeats} after a warm-up call"
    )
    print(
        "| MLP | popsize | method | ms / generation | env steps/s | / batch inference "
        "| XLA MiB | peak RSS + MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")


def run_table(args: argparse.Namespace, hiddens: list[tuple[int, ...]]) -> None:
    """Every network x popsize x method, batch inference first so every ratio has its base."""
    for hidden in hiddens:
        rollout = make_rollout(hidden, args.steps)
        label = "-".join(map(str, hidden))
        for popsize in args.popsizes:
            batch = measure_safely(rollout, METHODS[0], popsize, args)
            print(row(label, batch, batch, args.steps), flush=True)
            for method in METHODS[1:]:
                cell = measure_safely(rollout, method, popsize, args)
                print(row(label, cell, batch, args.steps), flush=True)


def fits(rollout: PopulationRollout, method: str, popsize: int, args) -> bool:
    """Whether ``method`` fits at ``popsize``: the preflight, then the compiled bytes."""
    available = available_bytes(rollout)
    if preflight_bytes(rollout, method, popsize, args.rank) > available:
        return False
    compiled, _ = compiled_program(rollout, method, popsize, args.rank)
    return held_bytes(compiled) <= available


def largest_popsize(rollout: PopulationRollout, method: str, args) -> int | None:
    """The largest of 256, 512, ... (up to ``--max-popsize``) where ``method`` fits: doubled
    on the cheap preflight, then halved until the compiled program fits too."""
    available = available_bytes(rollout)
    candidates = []
    popsize = 256
    while popsize <= args.max_popsize:
        if preflight_bytes(rollout, method, popsize, args.rank) > available:
            break
        candidates.append(popsize)
        popsize *= 2
    for popsize in reversed(candidates):
        if fits(rollout, method, popsize, args):
            return popsize
    return None


def run_largest(args: argparse.Namespace, hidden: tuple[int, ...]) -> None:
    """Each method at the largest popsize it fits (rows labelled "largest"), against batch
    inference at that popsize (printed once per popsize, unlabelled where it is not batch
    inference's own largest)."""
    rollout = make_rollout(hidden, args.steps)
    name = "-".join(map(str, hidden))
    batches: dict[int, Cell] = {}
    top = largest_popsize(rollout, METHODS[0], args)
    for method in METHODS:
        popsize = top if method == METHODS[0] else largest_popsize(rollout, method, args)
        if popsize is None:
            print(f"| {name} largest | < 256 | {method} | does not fit at 256 | | | | |")
            continue
        if popsize not in batches:
            batches[popsize] = measure_safely(rollout, METHODS[0], popsize, args)
            label = f"{name} largest" if popsize == top else name
            print(row(label, batches[popsize], batches[popsize], args.steps), flush=True)
        if method != METHODS[0]:
            cell = measure_safely(rollout, method, popsize, args)
            print(row(f"{name} largest", cell, batches[popsize], args.steps), flush=True)


def main() -> None:
    args = parse_args()
    hiddens = [tuple(int(w) for w in h.split(",")) for h in args.hidden]
    print_header(args)
    run_table(args, hiddens)
    if args.largest:
        run_largest(args, hiddens[-1])


if __name__ == "__main__":
    main()
