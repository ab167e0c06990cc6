"""The host loop: blocks of generations on the device, everything between them on the host.

One loop drives one :class:`esjax._src.run.lifecycle.Run` (``esjax evolve``) or several whose states
are stacked along the seed axis in one compiled program (a sweep's configurations). Between
blocks it hands each run its slice of the state, metrics and evaluation to record, takes the
periodic checkpoint of every run together, reports each run's newest rows, and turns a stop
signal (or Ctrl-C) into a checkpoint of every run and the caller's error.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.run.lifecycle import Run, StopSignals, compile_tests_ahead

if TYPE_CHECKING:  # for type hints only: it imports evosax, which starts JAX's backend
    from esjax._src.engine.generation import Engine, RunState

Report = Callable[[dict[str, Any]], None]
Tree = TypeVar("Tree")


def drive(
    engine: Engine,
    together: Sequence[Run],
    *,
    block: int,
    signals: StopSignals,
    checkpoint_every_s: float,
    interrupted: Callable[[int, int], Exception],
    reports: Sequence[Report | None],
) -> None:
    """Run ``together`` (begun, at the same generation and target) to their target.

    ``block`` caps the generations per host visit; a block also ends at each evaluation. The
    first visit runs one generation; the evaluation program then compiles in the background
    while the next ones run, so a cold start's first evaluation does not wait for it; after
    it, the final test's program (:meth:`Run.finish`) compiles in the background likewise.
    ``reports[i]`` gets run ``i``'s rows of each block's last generation. After a stop signal
    in ``signals`` every run checkpoints and ``interrupted(generation, signum)`` is raised.
    """
    first = together[0]
    every = first.config.task.evaluation.every
    total = first.total
    state = stacked_state(engine, together)
    last_checkpoint = time.perf_counter()
    # One process of several exports nothing (KeptProgram), so it has nothing to compile ahead.
    alone = jax.process_count() == 1
    compile_ahead = getattr(engine.evaluate, "compile_in_background", None) if alone else None
    tests_ahead = alone  # the final test's program, from the first evaluation on
    try:
        while first.generation < total:
            if signals.received is not None:
                _stop(together, interrupted, signals.received)
            g = first.generation
            n = min(block, (g // every + 1) * every - g, total - g)
            if compile_ahead is not None:
                n = 1  # the evaluation then compiles beside the rest of the generations
            state, metrics = engine.run_block(state, jnp.asarray(n, jnp.int32))
            metrics = jax.device_get(metrics)
            if compile_ahead is not None:
                if ((g + n) // every + 1) * every <= total and (g + n) % every:
                    compile_ahead(state)
                compile_ahead = None
            evaluation = None
            if (g + n) % every == 0:
                # Wait for a compile in short slices: a signal does not end a thread's join.
                while signals.received is None and _compiling(engine.evaluate):
                    time.sleep(0.05)
                # Still compiling: the wait ended on a stop signal.
                if _compiling(engine.evaluate) and signals.received is not None:
                    # Rather than wait out the compile, stop at the last recorded generation:
                    # the resumed run redoes this block, with the same numbers.
                    _stop(together, interrupted, signals.received)
                evaluation = jax.device_get(engine.evaluate(state))
            blocks = []
            for run, share in zip(together, _shares(together, state, metrics, evaluation),
                                  strict=True):  # fmt: skip
                run_state, run_metrics, run_evaluation = share
                blocks.append(run.record(run_state, run_metrics, n, run_evaluation))
            if tests_ahead and evaluation is not None and g + n < total:
                compile_tests_ahead(together)
                tests_ahead = False
            if g + n < total and time.perf_counter() - last_checkpoint >= checkpoint_every_s:
                for run in together:
                    run.checkpoint()
                last_checkpoint = time.perf_counter()
            for run, rows, report in zip(together, blocks, reports, strict=True):
                if report is not None:
                    _report(run, rows, report)
    except KeyboardInterrupt:
        _stop(together, interrupted, signal.SIGINT)


def _compiling(program: object) -> bool:
    """Whether ``program`` is still compiling in the background (a KeptProgram's thread)."""
    compiling = getattr(program, "compiling", None)
    return compiling is not None and compiling()


def stacked_state(engine: Engine, together: Sequence[Run]) -> RunState:
    """The runs' states as one, along the seed axis (one run's state as it is)."""
    if len(together) == 1:
        return together[0].state
    state = jax.tree.map(lambda *xs: jnp.concatenate(xs), *(run.state for run in together))
    return engine.place(state)


def _shares(
    together: Sequence[Run],
    state: RunState,
    metrics: dict[str, np.ndarray],
    evaluation: dict[str, np.ndarray] | None,
) -> list[tuple[RunState, dict[str, np.ndarray], dict[str, np.ndarray] | None]]:
    """Each run's ``(state, metrics, evaluation)`` of a block of the stacked program."""
    if len(together) == 1:
        return [(state, metrics, evaluation)]
    seeds = len(together[0].seed_ids)
    host_state = jax.device_get(state)
    shares = []
    for c in range(len(together)):
        part = slice(c * seeds, (c + 1) * seeds)
        shares.append(
            (
                _part(host_state, part),
                _part(metrics, part, axis=1),
                None if evaluation is None else _part(evaluation, part),
            )
        )
    return shares


def _part(tree: Tree, part: slice, axis: int = 0) -> Tree:
    return jax.tree.map(lambda x: np.asarray(x)[(slice(None),) * axis + (part,)], tree)


def _report(run: Run, rows: list[dict[str, Any]], report: Report) -> None:
    """The block's last generation, one row per seed, with what a progress line needs."""
    for row in rows[-len(run.seed_ids) :]:
        seed = int(row.get("seed", run.seed_ids[0]))
        report({**row, "generations": run.total, "seed": seed, "run_dir": str(run.run_dir)})


def _stop(together: Sequence[Run], interrupted: Callable[[int, int], Exception], signum: int):
    """Checkpoint every run at its last completed generation, then raise the caller's error."""
    for run in together:
        run.stop()
    raise interrupted(min(run.generation for run in together), signum) from None
