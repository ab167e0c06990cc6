"""Compiled programs kept across processes: a run's generation block and evaluation, exported.

JAX's persistent compilation cache (:mod:`esjax._src.run.cache`) spares a second process XLA's
compile, but not tracing and lowering the generation block and the evaluation: about a second of
every start-up on a laptop CPU, as long as the imports. A :class:`KeptProgram` exports its function
with ``jax.export`` (a serialized StableHLO module, read back without pickle) into the cache
directory, keyed by everything the program is built from: the caller's key (a run's task,
strategy, rollouts and popsize), the arguments' shapes, dtypes and placement, the devices,
JAX's settings, and this package's source and dependency versions. A later process with the
same key calls the module it reads back instead of tracing the Python again.

It always calls the exported module, whether it traced it or read it back, so a run gives the
same numbers with or without the cache.

:meth:`KeptProgram.compile_in_background` prepares a program in a thread of its own, so that a
cold start's second program (the evaluation: trace, lower and XLA compile, 20 s for a Brax env
on a 2-core CPU) is built while the first one runs instead of after it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jax
from jax import export

from esjax._src.run.cache import keep, kept_path

if TYPE_CHECKING:  # the engine imports evosax, which starts JAX's backend on import
    from esjax._src.engine.generation import BlockProgram, Engine

SUBDIRECTORY = "esjax-programs"
COMPILE_THREAD = "esjax-compile"


def compiling_in_background() -> bool:
    """True while a :meth:`KeptProgram.compile_in_background` thread is still compiling."""
    return any(t.name.startswith(COMPILE_THREAD) and t.is_alive() for t in threading.enumerate())


class KeptProgram:
    """``fn`` (a jitted function of array pytrees) run as an exported module kept on disk.

    ``out_tree(*args)`` gives the tree of ``fn``'s result from its arguments without tracing
    ``fn`` (a module read back holds only its flat outputs); it is checked against the real
    one whenever ``fn`` is traced. ``place(args)`` puts the arguments where ``fn`` expects
    them: an exported module runs on as many devices as its arguments are on, while ``fn``
    itself could take arrays from one device and spread them. ``lower`` is ``fn``'s, for
    inspecting the compiled program.
    """

    def __init__(
        self,
        fn: Callable,
        kind: str,
        key: Any,
        out_tree: Callable[..., Any],
        place: Callable[[Any], Any] = lambda args: args,
    ):
        self.fn = fn
        self.kind = kind
        self.key = key
        self.out_tree = out_tree
        self.place = place
        self._calls: dict[Any, tuple[Any, Any]] = {}  # (an exported call or None, its out tree)
        self._building: dict[Any, threading.Thread] = {}

    def __call__(self, *args: Any) -> Any:
        args, leaves, in_tree, signature = self._placed(args)
        building = self._building.pop(signature, None)
        if building is not None:
            building.join()
        if signature not in self._calls:
            self._calls[signature] = self._prepare(args, leaves, in_tree, signature)
        call, out_tree = self._calls[signature]
        if call is None:  # not exportable: the function as it is
            return self.fn(*args)
        return jax.tree.unflatten(out_tree, call(*leaves))

    def lower(self, *args: Any) -> Any:
        lower: Callable[..., Any] = getattr(self.fn, "lower")  # noqa: B009 (jax.jit's function)
        return lower(*args)

    def compile_in_background(self, *args: Any) -> None:
        """Trace, lower and compile the program for ``args``' shapes in a thread of its own.

        The next call with such arguments waits for it and runs the same compiled program the
        call would have built itself, so the numbers do not change. A failure is left for that
        call to meet again, where the caller sees it. The thread is not a daemon: a process
        that exits while XLA compiles in a daemon thread aborts, so exit waits for it instead.
        """
        args, leaves, in_tree, signature = self._placed(args)
        if signature in self._calls or signature in self._building:
            return

        def build() -> None:
            try:
                call, out_tree = self._prepare(args, leaves, in_tree, signature)
                if call is not None:
                    call = call.lower(*leaves).compile()
            except Exception:  # the call prepares again and raises it there
                return
            self._calls[signature] = (call, out_tree)

        thread = threading.Thread(target=build, name=f"{COMPILE_THREAD}-{self.kind}")
        self._building[signature] = thread
        thread.start()

    def compiling(self) -> bool:
        """True while a thread :meth:`compile_in_background` started is still at work."""
        return any(thread.is_alive() for thread in self._building.values())

    def _placed(self, args: tuple) -> tuple[tuple, list[Any], Any, tuple]:
        """``args`` placed, their leaves and tree, and the signature programs are kept by."""
        args = self.place(args)
        leaves, in_tree = jax.tree.flatten(args)
        return args, leaves, in_tree, (str(in_tree), tuple(_describe(leaf) for leaf in leaves))

    def _cache_size(self) -> int:
        """Programs compiled in this process (for tests that a loop never recompiles)."""
        # A program compiled ahead is one compiled program, with no cache of its own.
        return sum(getattr(call, "_cache_size", lambda: 1)()
                   for call, _ in list(self._calls.values()) if call is not None)  # fmt: skip

    def _prepare(self, args, leaves, in_tree, signature) -> tuple[Any, Any]:
        """``(call, out_tree)``: the jitted call of the exported module (None where it cannot be
        kept), and the tree its flat outputs make."""
        if jax.process_count() > 1:  # every process would have to agree on the file
            return None, None
        out_tree = self.out_tree(*args)
        path = self._path(signature, leaves)
        exported = _read(path) if path is not None else None
        if exported is None or len(exported.out_avals) != out_tree.num_leaves:
            traced = {}

            def traced_for_export(*flat_args):
                out = self.fn(*jax.tree.unflatten(in_tree, flat_args))
                out_leaves, traced["tree"] = jax.tree.flatten(out)
                return out_leaves

            try:
                exported = export.export(jax.jit(traced_for_export))(*leaves)
            except Exception:  # e.g. a host callback: run the function as it is
                return None, None
            if traced["tree"] != out_tree:  # a wrong hint: trust the trace, keep nothing
                return jax.jit(exported.call), traced["tree"]
            if path is not None:
                _write(path, exported)
        return jax.jit(exported.call), out_tree

    def _path(self, signature: Any, leaves: list[Any]) -> Path | None:
        placement = sorted({str(getattr(leaf, "sharding", None)) for leaf in leaves})
        settings = {name: repr(value) for name, value in sorted(jax.config.values.items())}
        devices = [str(device) for device in jax.devices()]
        key = [self.key, signature, placement, devices, settings]
        return kept_path(SUBDIRECTORY, self.kind, key, ".stablehlo")


def _describe(leaf: Any) -> tuple:
    aval = jax.typeof(leaf)
    return (tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False)))


def _read(path: Path) -> export.Exported | None:
    """The module kept at ``path``; None when it is missing or unreadable (then re-traced)."""
    try:
        return export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # missing, truncated, another JAX's format: trace again
        return None


def _write(path: Path, exported: export.Exported) -> None:
    """Keep ``exported`` at ``path``; without the flatbuffers package nothing is kept."""
    try:
        data = exported.serialize()
    except ImportError:
        return
    keep(path, bytes(data))


def keep_programs(engine: Engine, key: Any) -> Engine:
    """``engine`` with its block and evaluation kept across processes.

    ``key`` must name everything the engine was built from (a run's task, strategy, rollouts
    and popsize); the arguments' shapes, the devices and the code are added to it.
    """
    block_tree, evaluation_tree = engine.output_trees()
    return dataclasses.replace(
        engine,
        run_block=cast(
            "BlockProgram", KeptProgram(engine.run_block, "block", key, block_tree, engine.place)
        ),
        evaluate=KeptProgram(engine.evaluate, "evaluation", key, evaluation_tree, engine.place),
    )
