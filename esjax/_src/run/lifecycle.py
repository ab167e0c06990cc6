"""A run's life in one place: claim the directory, start or resume, record, checkpoint, stop.

:class:`Run` is what :func:`esjax._src.run.loop.drive` drives (for ``esjax evolve``, and for each of
a sweep's configurations). It owns everything between blocks of generations but their timing:
the run directory, the host-side bookkeeping (env steps, wall time, best evaluated policy),
metrics rows, checkpoints, and turning the ways a run can end early into errors that say how
to continue (:class:`Interrupted`, :class:`LostProcess`,
:class:`~esjax._src.run.runs.StorageError`). The engine state and the host state change together as
one :class:`Progress`, so a checkpoint is always of one completed generation.

A run can be killed at any instant and resumed to the same result:

* **One writer.** The writer holds an exclusive ``flock`` on ``run.lock`` in the directory from
  before it writes anything until it exits; the kernel drops it however the process ends, so
  there are no stale locks. A second run, resume or overwrite of a live run is refused.
* **Resumable from the start.** ``config.json`` is written as soon as the lock is held, and
  never again (a resume that goes further records its target in ``target.json`` at once,
  and in every checkpoint); a run directory with a config and no checkpoint resumes from
  generation 0 (the seeds decide it). A resume with generations left removes the run's old
  ``summary.json`` first: a run without one is unfinished.
* **Stop signals.** SIGTERM, SIGINT, SIGHUP and SIGUSR1 (what schedulers, containers and
  Ctrl-C send before a kill) only set a flag; the loop finishes the block in flight,
  checkpoints it and raises :class:`Interrupted` (exit code 128 + the signal number). A
  second signal while checkpointing just sets the flag again. After the last generation, a
  signal leaves the final test before its next policy (or at its end, during the last); the
  run resumes straight to the test.

In a multi-process run every process computes the same replicated state; only process 0
(the *writer*) writes the run directory, the others read it to resume.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.run import codefiles, runs, trust
from esjax._src.run.files import open_regular
from esjax._src.specs.config import ConfigError, RunConfig

if TYPE_CHECKING:  # for type hints only: both import evosax, which starts JAX's backend
    from esjax._src.engine.generation import Engine, RunState
    from esjax._src.run.saved import Verdict

_log = logging.getLogger(__name__)

# What Ctrl-C, schedulers (Slurm, Kubernetes, `docker stop`) and hang-ups send before a kill.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
# What a failed write says before a run has begun; any other OSError there (a user env's missing
# file, an unreadable checkpoint) is not about the disk and is left as it is.
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class BackendModules(NamedTuple):
    engine: Any
    saved: Any
    strategies: Any
    trainer: Any
    resolve: Any


def backend_modules() -> BackendModules:
    """:mod:`esjax._src.engine.generation`, :mod:`esjax._src.run.saved`,
    :mod:`esjax._src.strategies.strategy`, :mod:`esjax._src.engine.trainer` and
    :mod:`esjax._src.engine.resolve`, imported when first needed by the host modules.

    They import evosax, which makes JAX arrays on import and so starts JAX's backend.
    ``from esjax import evolve`` must leave the backend to :mod:`esjax._src.engine.distributed`
    (its CPU device count, ``jax.distributed.initialize``), so that ``esjax.use_cpu_cores()``
    called after it still takes effect.
    """
    from esjax._src.engine import backend  # they start JAX's backend: not at import
    from esjax._src.run import saved  # they start JAX's backend: not at import

    return BackendModules(
        backend.generation, saved, backend.strategy, backend.trainer, backend.resolve
    )


class Interrupted(Exception):
    """A run stopped by a signal (or Ctrl-C) after checkpointing its last completed generation."""

    def __init__(
        self, run_dir: str | Path, generation: int | None = None, signum: int = signal.SIGINT
    ):
        self.run_dir = Path(run_dir)
        self.generation = generation
        self.signum = int(signum)
        super().__init__(str(self))

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum

    def __str__(self) -> str:
        at = f" at generation {self.generation}" if self.generation is not None else ""
        name = signal.Signals(self.signum).name
        return (
            f"interrupted by {name}{at}; checkpoint saved in {self.run_dir}. Resume with "
            f"`esjax evolve --resume --out {self.run_dir}` or "
            f"evolve(..., out={str(self.run_dir)!r}, resume=True)"
        )


class LostProcess(RuntimeError):
    """A multi-process run lost a peer; the last checkpoint in the run directory resumes it.

    A script that catches it should leave with ``os._exit(code)`` (the CLI does): a normal
    interpreter exit runs JAX's distributed shutdown, a barrier that waits for the dead peer.
    """

    def __init__(self, run_dir: str | Path, generation: int, cause: Exception):
        self.run_dir = Path(run_dir)
        self.generation = generation
        super().__init__(
            f"lost a process of this multi-process run after generation {generation} ({cause}); "
            f"restart every process with `esjax evolve --resume --out {self.run_dir}` "
            "(same --coordinator/--num-processes) to continue from the last checkpoint"
        )


class RunInUse(ConfigError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """An exclusive ``flock`` on the run's lock file, held for the life of the run.

    The kernel releases it when the process ends, however it ends, so a lock is never stale.
    The file holds the owner's PID, for the message a second writer gets.
    """

    def __init__(self, fd: int):
        self._fd = fd

    @classmethod
    def take(cls, run_dir: Path) -> RunLock:
        path = run_dir / runs.LOCK
        try:  # never through a link: the lock file is truncated to hold the PID
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except OSError as err:
            reason = err.strerror or str(err)
            message = f"{run_dir}: cannot write to the run directory: {reason}"
            raise runs.StorageError(message) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunInUse(
                f"{run_dir} is in use by a running esjax process (PID {holder}); wait for it "
                "to end or stop it (it checkpoints on SIGTERM), then --resume"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def sign(self) -> None:
        """Write this process's PID into the lock file (once the run will go ahead)."""
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        # The file stays: unlinking it would let a newcomer lock a fresh inode while a process
        # that opened the old one still believes it holds the lock.
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _contents(run_dir: Path) -> list[Path]:
    """What a directory holds apart from a lock file (a run killed before writing anything)."""
    if not run_dir.is_dir():
        return []
    return [p for p in run_dir.iterdir() if p.name != runs.LOCK]


def remove_written(directory: Path, names: Sequence[str], folders: Sequence[str] = ()) -> None:
    """Remove what esjax writes in ``directory``: the files ``names``, the folders ``folders``
    (trackers' logs) and esjax's temporary files; anything else stays. A link is removed as a
    link, never followed; a folder where a file should be is refused, untouched."""
    for path in sorted(directory.iterdir()):
        name = path.name
        temporary = name.startswith(".") and name.endswith(".tmp")
        if name not in names and name not in folders and not temporary:
            continue
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        elif name in folders:
            shutil.rmtree(path)
        else:
            raise ConfigError(f"{path}: a folder where esjax writes a file; not removing it")


# What esjax writes in a run directory, for --overwrite (the lock file stays: see RunLock).
RUN_FILES = (
    runs.CONFIG, runs.METRICS, runs.CHECKPOINT, runs.PREV_CHECKPOINT, runs.DAMAGED_CHECKPOINT,
    runs.SUMMARY, runs.FITNESS_FIGURE, runs.TARGET, trust.SEAL, codefiles.CODE,
    *runs.POLICIES.values(),
    *runs.DERIVED_FILES,
)  # fmt: skip
RUN_FOLDERS = runs.TRACKER_FOLDERS


def claim(run_dir: Path, *, resume: bool, overwrite: bool) -> tuple[RunLock, bool]:
    """Lock ``run_dir`` for this process (creating it for a new run); ``(lock, created)``.

    Checks that need no lock (a file in the way, a directory that is no run) come first, so
    a refused directory gets no lock file; everything else is decided under the lock.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir} exists and is not a directory")
    if resume and not runs.is_run_dir(run_dir):
        raise ConfigError(f"{run_dir}: not an esjax run (no {runs.CONFIG}); nothing to resume")
    if not resume and _contents(run_dir) and not runs.is_run_dir(run_dir):
        if not overwrite:
            raise ConfigError(f"{run_dir} exists; use --resume or --overwrite")
        raise ConfigError(f"{run_dir} is not an esjax run directory; refusing to overwrite it")
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        reason = err.strerror or str(err)
        raise runs.StorageError(f"{run_dir}: cannot create the run directory: {reason}") from None
    lock = None
    try:
        lock = RunLock.take(run_dir)
        runs.check_writable(run_dir)
        if not resume and _contents(run_dir):
            if not overwrite:
                raise ConfigError(f"{run_dir} exists; use --resume or --overwrite")
            remove_written(run_dir, RUN_FILES, RUN_FOLDERS)
        lock.sign()  # a refused claim leaves every file as it was, the lock file included
    except BaseException:
        if lock is None:  # the directory may be another process's live run: touch nothing
            if created:
                with contextlib.suppress(OSError):
                    run_dir.rmdir()  # only if still empty
        else:
            if created:  # ours alone: we hold its lock
                shutil.rmtree(run_dir, ignore_errors=True)
            lock.release()
        raise
    return lock, created


class StopSignals:
    """While entered (in the main thread), the stop signals set :attr:`received` instead of
    killing; the previous handlers come back on exit, so library callers keep theirs."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:  # the first signal names the stop; later ones change nothing
            self.received = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()


@dataclass(frozen=True)
class RunSummary:
    """What a finished run reached; returns are means over seeds."""

    run_dir: Path
    generations: int
    env_steps: int
    wall_s: float
    final_eval_return: float | None
    best_eval_return: float | None
    solved_threshold: float | None = None
    # The verdict on fresh test episodes (esjax._src.run.saved.verdict); None without a threshold.
    verdict: Verdict | None = None

    @property
    def solved(self) -> bool | None:
        return None if self.verdict is None else self.verdict.solved


@dataclass(frozen=True)
class HostState:
    """Host-side run state saved in checkpoints next to the engine state."""

    generation: int
    env_steps: np.ndarray  # per seed
    wall_s: float
    best_eval: np.ndarray  # per seed; -inf before the first evaluation
    best_params: np.ndarray  # per seed, flat
    best_obs: tuple[np.ndarray, np.ndarray] | None
    best_generation: np.ndarray

    def meta(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "env_steps": [int(x) for x in self.env_steps],
            "wall_s": self.wall_s,
            "best_eval": [None if not math.isfinite(x) else float(x) for x in self.best_eval],
            "best_generation": [int(x) for x in self.best_generation],
        }


@dataclass(frozen=True)
class Progress:
    """The engine state after the last completed generation and the host state that goes with it.

    Replaced as a whole (one assignment), so whatever stops the run sees a matching pair.
    """

    state: RunState
    host: HostState


class Run:
    """One run directory from claiming it to the summary; see the module docstring.

    Use :meth:`create` or :meth:`reopen`, then ``with run:`` around building the engine,
    :meth:`begin`, the loop of :meth:`record` calls (:func:`esjax._src.run.loop.drive`), and
    :meth:`finish`. When to checkpoint between blocks, and what a stop signal raises, is the
    loop's to decide: it may drive several runs stacked in one state.
    """

    def __init__(self, run_dir: Path, config: RunConfig, *, resumed: bool, writer: bool,
                 lock: RunLock | None = None, created: bool = False,
                 target: int | None = None):  # fmt: skip
        self.run_dir = run_dir
        self.config = config
        # Generations to reach: config.generations, unless a resume asked for more (or an
        # earlier such resume recorded its target; config.json is never rewritten).
        self._target = target
        self.resumed = resumed
        self.writer = writer
        self._lock = lock
        self._created = created
        self.signals = StopSignals()
        self._engine: Engine | None = None
        self._progress: Progress | None = None
        self.saved_generation: int | None = None
        self._started = time.perf_counter()
        self._wall_offset = 0.0

    # ------------------------------------------------------------------ claiming the directory
    @classmethod
    def create(cls, run_dir: str | Path, config: RunConfig, *, overwrite: bool,
               writer: bool) -> Run:  # fmt: skip
        """A new run in ``run_dir`` (refused if it holds anything unless ``overwrite``).

        The config is written at once, so the run resumes (from generation 0) from here on.
        """
        run_dir, lock, created = Path(run_dir), None, False
        if writer:
            lock, created = claim(run_dir, resume=False, overwrite=overwrite)
            try:
                runs.write_run_config(run_dir, config)
                trust.seal_run(run_dir, config.task)
            except (OSError, ConfigError) as err:
                if created:
                    shutil.rmtree(run_dir, ignore_errors=True)
                lock.release()
                if isinstance(err, ConfigError):
                    raise
                reason = err.strerror or str(err)
                raise runs.StorageError(f"{run_dir}: cannot write ({reason})") from None
        return cls(run_dir, config, resumed=False, writer=writer, lock=lock, created=created)

    @classmethod
    def reopen(cls, run_dir: str | Path, *, generations: int | None, writer: bool,
               prepare: Callable[[RunConfig], RunConfig] | None = None,
               trust_code: bool = False) -> Run:  # fmt: skip
        """The run in ``run_dir``, to continue (to ``generations`` in all, when given).

        ``prepare(config)`` may refuse the run's config (arguments that contradict it) and
        returns the config to run (an older run's, completed). A new target is recorded at
        once (:func:`esjax._src.run.runs.write_target`), so a kill before the next checkpoint cannot
        make a later plain resume fall back to the old one. Code the run names is imported
        only when this user made the run, from the files it recorded, or with ``trust_code``
        (:mod:`esjax._src.run.trust`), which also seals it as this user's, as it is now.
        """
        if generations is not None and (not isinstance(generations, int) or generations <= 0):
            raise ConfigError(f"generations must be a positive integer, got {generations!r}")
        run_dir, lock = Path(run_dir), None
        if writer:
            lock, _ = claim(run_dir, resume=True, overwrite=False)
        try:
            config = runs.read_run_config(run_dir)
            trust.check_run(run_dir, config.task, trust_code, writer=writer)
            if prepare is not None:
                config = prepare(config)
            if generations is not None and writer:
                runs.write_target(run_dir, generations)
                runs.drop_summary_short_of(run_dir, generations)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        target = generations if generations is not None else runs.read_target(run_dir)
        return cls(run_dir, config, resumed=True, writer=writer, lock=lock, target=target)

    def release(self) -> None:
        """Give up the directory without running (what ``with run:`` does on leaving)."""
        if self._lock is not None:
            self._lock.release()

    # ------------------------------------------------------------------ the run
    @property
    def total(self) -> int:
        return self._target or self.config.generations

    @property
    def engine(self) -> Engine:
        """The engine :meth:`begin` was given."""
        if self._engine is None:
            raise RuntimeError(f"{self.run_dir}: the run has not begun (Run.begin)")
        return self._engine

    @property
    def progress(self) -> Progress:
        """The engine and host state of the last completed generation, from :meth:`begin` on."""
        if self._progress is None:
            raise RuntimeError(f"{self.run_dir}: the run has not begun (Run.begin)")
        return self._progress

    @property
    def generation(self) -> int:
        return self.progress.host.generation

    @property
    def state(self) -> RunState:
        return self.progress.state

    @property
    def seed_ids(self) -> np.ndarray:
        return np.asarray(self.config.seed_ids)

    def wall(self) -> float:
        """Seconds this run has taken, across resumes, counted from building the engine."""
        return self._wall_offset + time.perf_counter() - self._started

    def __enter__(self) -> Run:
        self.signals.__enter__()
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            self._translate(error)
        finally:
            self.signals.__exit__()
            self.release()

    def _translate(self, error: BaseException | None) -> None:
        """Re-raise how the run ended as what the caller can act on (see the module docstring)."""
        if error is None:
            return
        if self._progress is None:
            if isinstance(error, ConfigError) and self.writer and not self.resumed:
                self._discard()
            elif isinstance(error, OSError) and self.writer and error.errno in WRITE_FAILURES:
                raise self._storage_error(error) from error  # e.g. resuming onto a full disk
            return
        if isinstance(error, jax.errors.JaxRuntimeError):
            # A collective with a dead peer fails (gloo: connection reset) rather than hanging;
            # the checkpoint on disk is the last one written, so the run resumes from there.
            if jax.process_count() > 1:
                raise LostProcess(self.run_dir, self.generation, error) from error
        elif isinstance(error, KeyboardInterrupt):
            self.stop()
            raise Interrupted(self.run_dir, self.generation) from None
        elif isinstance(error, OSError):  # disk full, directory read-only: keep the last one
            raise self._storage_error(error) from error

    def _discard(self) -> None:
        """Leave no run behind when a new one is refused before it starts (e.g. cannot fit)."""
        if self._created:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            return
        for path in _contents(self.run_dir):
            with contextlib.suppress(OSError):
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    def stop(self) -> None:
        """Make the directory end at the last completed generation: metrics rows past it (a
        block interrupted while being recorded) go, and that generation is checkpointed."""
        if self.writer:
            runs.truncate_metrics(self.run_dir, self.generation)
        self.checkpoint()

    def _storage_error(self, err: OSError) -> runs.StorageError:
        if self.saved_generation is not None:
            kept = f"the checkpoint of generation {self.saved_generation} is kept; resume from it"
        elif self.resumed and runs.has_checkpoint(self.run_dir):
            kept = "its checkpoint is kept; resume from it"
        else:
            kept = "no checkpoint was written; --resume starts again from generation 0"
        reason = err.strerror or str(err)
        return runs.StorageError(f"{self.run_dir}: cannot write ({reason}); {kept}")

    def begin(self, engine: Engine) -> None:
        """The starting point: the run's checkpoint, else generation 0 of its seeds.

        A resumed run without a checkpoint (killed before its first one) starts from
        generation 0 again, which is exactly where it started. A reopened run with generations
        left is no longer finished: its old ``summary.json`` goes before anything runs.
        """
        self._engine = engine
        if self.writer:  # the engine built the run's code: what that imported is recorded
            trust.complete_records(self.run_dir, self.config.task, writer=True)
        template = engine.init(jnp.asarray(self.seed_ids, jnp.int32))
        fresh = fresh_host(engine, template, len(self.seed_ids))
        if self.resumed and runs.has_checkpoint(self.run_dir):
            state, host, target = restore(self.run_dir, self.config, engine, template, fresh)
            self._target = self._target or target
            if self.writer:
                runs.truncate_metrics(self.run_dir, host.generation)
            self.saved_generation = host.generation
        else:
            if self.resumed and self.writer:
                runs.truncate_metrics(self.run_dir, 0)
            state, host = template, fresh
        self._wall_offset = host.wall_s
        self._progress = Progress(state, host)
        if self.writer and host.generation < self.total:
            (self.run_dir / runs.SUMMARY).unlink(missing_ok=True)

    def record(self, state: RunState, metrics: dict[str, np.ndarray], n: int,
               evaluation: dict[str, np.ndarray] | None) -> list[dict[str, Any]]:  # fmt: skip
        """Take a completed block of ``n`` generations: metrics rows, best policy, and the
        checkpoint when it reaches the run's target.

        Returns the block's metrics rows (one per generation and seed).
        """
        host = self.progress.host
        end = host.generation + n
        now = self.wall()
        rows, env_steps = _rows(metrics, n, host, now, evaluation, self.seed_ids)
        if self.writer:
            runs.append_metrics(self.run_dir, rows)
        best = _update_best(self.engine, state, host, evaluation, end)
        self._progress = Progress(state, HostState(end, env_steps, now, *best))
        if end >= self.total:
            self.checkpoint()
        return rows

    def checkpoint(self) -> None:
        """Save the policies and a checkpoint of the last completed generation (the writer)."""
        if self.writer:
            state, host = self.progress.state, self.progress.host
            _save_policies(self.run_dir, self.engine, state, host)
            arrays = checkpoint_arrays(state, host)
            meta = {
                **host.meta(),
                "config": self.config.to_json(),
                "target_generations": self.total,
            }
            runs.save_checkpoint(self.run_dir, meta, arrays)
            self.saved_generation = host.generation

    @property
    def tested(self) -> bool:
        """Whether :meth:`finish` tests this run's policies: the writer's, with a threshold."""
        return self.writer and self.config.task.solved_return is not None

    def finish(
        self,
        signals: StopSignals | None = None,
        interrupted: Callable[[int, int], Exception] | None = None,
    ) -> RunSummary:
        """Evaluate the final search mean and judge the run; the writer writes ``summary.json``.

        With a ``solved_return`` the writer tests every seed's saved final and best policy on
        fresh test episodes (:func:`esjax._src.run.saved.verdict`, the one meaning of *solved*). A
        stop signal in ``signals`` (default: the run's own) leaves that test unfinished and raises
        ``interrupted(generation, signum)`` (default: :class:`Interrupted`): the run is
        checkpointed at its last generation already, so a resume goes straight to the test.
        """
        signals = signals or self.signals
        host = self.progress.host
        threshold = self.config.task.solved_return
        final = jax.device_get(self.engine.evaluate(self.state))
        wall_s = self.wall()  # the run's own time; testing its policies comes after
        judged = None
        if self.tested:
            saved = backend_modules().saved
            seeds = len(self.seed_ids)
            try:
                judged = saved.verdict(
                    self.run_dir, seeds, threshold, lambda: signals.received is not None
                )
            except saved.VerdictStopped:
                signum = signals.received
                assert signum is not None  # the test stops only once a signal is received
                stop = interrupted or (lambda g, n: Interrupted(self.run_dir, g, n))
                raise stop(self.generation, signum) from None
        summary = run_summary(self.run_dir, host, final, wall_s, threshold, judged)
        if self.writer:
            runs.write_json(self.run_dir / runs.SUMMARY, _summary_json(summary, host, final))
        return summary


def compile_tests_ahead(together: Sequence[Run]) -> None:
    """Start compiling the test each run's :meth:`Run.finish` will run (:attr:`Run.tested`),
    beside the generations left. A failure here is not the run's: the test meets it again at
    the end, where it is reported."""
    tested = [run.run_dir for run in together if run.tested]
    if tested:
        try:
            backend_modules().saved.compile_verdicts_in_background(tested)
        except Exception:
            _log.debug("starting to compile the test programs ahead failed", exc_info=True)


def fresh_host(engine: Engine, template: RunState, seeds: int) -> HostState:
    """The host state of a run at generation 0, whose engine state is ``template``."""
    return HostState(
        generation=0,
        env_steps=np.zeros(seeds, np.int64),
        wall_s=0.0,
        best_eval=np.full(seeds, -np.inf),
        best_params=np.asarray(template.strategy.mean).copy(),
        best_obs=obs_arrays(engine, template),
        best_generation=np.zeros(seeds, np.int64),
    )


def restore(
    run_dir: Path, config: RunConfig, engine: Engine, template: RunState, fresh: HostState
) -> tuple[RunState, HostState, int | None]:
    """Engine state, host state and recorded target from the run's checkpoint, its arrays
    matched by name to what a fresh start of this run (``template``, ``fresh``) holds."""
    expected = checkpoint_arrays(template, fresh)
    # Bounded by what this run's state holds, by shape: a larger file is refused unread.
    checkpoint = runs.load_checkpoint(
        run_dir, runs.checkpoint_limit(expected.values(), config.seeds)
    )
    meta = checkpoint.meta
    check_meta(run_dir / runs.CHECKPOINT, meta, config.seeds)
    _check_same_run(run_dir, meta, config)
    try:
        arrays = migrate_checkpoint(checkpoint, template).arrays
        engines = backend_modules().engine
        engines.check_arrays(arrays, expected)
        state = engine.place(engines.from_host(template, arrays))
    except ValueError as err:
        raise ConfigError(f"{run_dir}: {err}") from None
    best_params, best_mean, best_std, best_generation = (arrays[n] for n in HOST_ARRAYS)
    host = HostState(
        generation=int(meta["generation"]),
        env_steps=np.asarray(meta["env_steps"], np.int64),
        wall_s=float(meta["wall_s"]),
        best_eval=np.asarray([-np.inf if x is None else x for x in meta["best_eval"]], np.float64),
        best_params=best_params,
        best_obs=(best_mean, best_std) if engine.normalize_obs else None,
        best_generation=best_generation,
    )
    # An earlier resume may have asked for more generations (before target files existed).
    return state, host, meta.get("target_generations")


def run_summary(run_dir: Path, host: HostState, final: dict, wall_s: float,
                threshold: float | None, judged: Verdict | None) -> RunSummary:  # fmt: skip
    """What a run reached: means over seeds of its final and best evaluation returns."""
    finite_best = host.best_eval[np.isfinite(host.best_eval)]
    return RunSummary(
        run_dir=run_dir,
        generations=host.generation,
        env_steps=int(np.mean(host.env_steps)),
        wall_s=wall_s,
        final_eval_return=float(np.mean(final["eval_return"])),
        best_eval_return=float(np.mean(finite_best)) if finite_best.size else None,
        solved_threshold=threshold,
        verdict=judged,
    )


def check_meta(path: Path, meta: dict[str, Any], seeds: int) -> None:
    """A checkpoint's bookkeeping as esjax writes it, each field in range: an edited one is one
    line, never a resume from a negative generation or a traceback."""

    def count(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def number(value: object) -> bool:  # NaN stands for "never evaluated", as esjax writes it
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        return value != value or -1e300 < value < 1e300

    checks = {
        "config": isinstance(meta.get("config"), dict),
        "generation": count(meta.get("generation")) and meta["generation"] <= runs.MAX_GENERATIONS,
        "env_steps": isinstance(meta.get("env_steps"), list)
        and len(meta["env_steps"]) == seeds
        and all(count(x) and x < 2**63 for x in meta["env_steps"]),
        "wall_s": number(meta.get("wall_s")) and not math.isnan(meta["wall_s"]),
        "best_eval": isinstance(meta.get("best_eval"), list)
        and len(meta["best_eval"]) == seeds
        and all(x is None or number(x) for x in meta["best_eval"]),
        "target_generations": meta.get("target_generations") is None
        or (
            count(meta["target_generations"])
            and 0 < meta["target_generations"] <= runs.MAX_GENERATIONS
        ),
    }
    for field, ok in checks.items():
        if not ok:
            raise ConfigError(f"{path}: {field} is missing or not what esjax writes")


def _check_same_run(run_dir: Path, meta: dict[str, Any], config: RunConfig) -> None:
    """A checkpoint resumes only the run whose state it holds (same program, seeds, sizes)."""
    saved = RunConfig.from_json(meta["config"], f"{run_dir}/{runs.CHECKPOINT}").state_key()
    for key, value in config.state_key().items():
        if saved.get(key) != value:
            raise ConfigError(f"{run_dir}: checkpoint and config.json disagree on {key!r}")


def _summary_json(summary: RunSummary, host: HostState, final: dict) -> dict[str, Any]:
    """What ``summary.json`` holds: evaluation returns, and the verdict when there is one."""
    tested = summary.verdict.to_json() if summary.verdict is not None else {}
    return {
        "generations": summary.generations,
        "env_steps": summary.env_steps,
        "env_steps_per_seed": [int(x) for x in host.env_steps],
        "wall_s": summary.wall_s,
        "final_eval_return": summary.final_eval_return,
        "final_eval_return_per_seed": [float(x) for x in final["eval_return"]],
        "best_eval_return": summary.best_eval_return,
        "best_eval_return_per_seed": host.meta()["best_eval"],
        "solved_threshold": summary.solved_threshold,
        "solved": None,
        **tested,
    }


# ---------------------------------------------------------------------------- checkpoint contents
# A checkpoint holds the engine state's arrays, named by
# :func:`esjax._src.engine.generation.to_host` (``state/...``), and these host arrays. A run that
# does not normalise observations stores its best policy's observation statistics as empty arrays.
HOST_ARRAYS = (
    "host/best_params",
    "host/best_obs_mean",
    "host/best_obs_std",
    "host/best_generation",
)
# Version 1 stored RunState's leaves by position: its fields in this order, each field's own
# leaves in JAX's order (evosax's state fields as declared, dict keys sorted), then HOST_ARRAYS.
# Frozen here, so that reordering RunState later cannot change how a version 1 file is read.
_V1_FIELDS = ("strategy", "norm/count", "norm/mean", "norm/m2", "key", "eval_key",
              "generation", "gen_best", "hyper", "bounds")  # fmt: skip
_V1_SORTED = ("hyper", "bounds")  # dicts: JAX flattens them in sorted key order


def checkpoint_arrays(state: RunState, host: HostState) -> dict[str, np.ndarray]:
    """Everything a checkpoint stores, by name: the engine state's arrays, then the host's."""
    best_obs = host.best_obs or (np.zeros(0, np.float32), np.zeros(0, np.float32))
    values = (host.best_params, *best_obs, np.asarray(host.best_generation, np.int64))
    named = backend_modules().engine.to_host(state)
    return {**named, **dict(zip(HOST_ARRAYS, map(np.asarray, values), strict=True))}


def migrate_checkpoint(checkpoint: runs.Checkpoint, template: RunState) -> runs.Checkpoint:
    """``checkpoint`` in the current format (arrays by name), whatever version it was written in.

    Every resume loads its checkpoint through here, so a format change adds a step here and old
    run directories keep resuming. ``template`` is this run's engine state at generation 0
    (``engine.init(seeds)``): its tree gives the names a version 1 file did not store, in the
    order that file stored them, and the values of state the file predates. Shapes and dtypes
    are checked by name afterwards (:func:`esjax._src.engine.generation.check_arrays`).
    """
    if checkpoint.version == 1:
        named = _name_v1_arrays(checkpoint.arrays, template)
        checkpoint = runs.Checkpoint(checkpoint.meta, named, 2)
    if checkpoint.version != runs.CHECKPOINT_VERSION:
        raise ConfigError(f"checkpoint format version {checkpoint.version} is not supported")
    return checkpoint


def _v1_order(state_names: list[str]) -> list[str]:
    """``state_names`` (in the state tree's leaf order) in the order version 1 stored them.

    Version 1 wrote ``jax.tree.leaves`` of the state of its day, laid out as ``_V1_FIELDS``.
    """
    prefix = backend_modules().engine.STATE_PREFIX

    def position(i: int, name: str) -> tuple[int, Any]:
        path = name.removeprefix(prefix)
        for field, top in enumerate(_V1_FIELDS):
            if path == top or path.startswith(top + "/"):
                return field, (path if top in _V1_SORTED else i)
        raise ConfigError(f"state array {name!r} did not exist in version 1 checkpoints")

    ranked = sorted((position(i, name), name) for i, name in enumerate(state_names))
    return [name for _, name in ranked]


def _name_v1_arrays(arrays: dict[str, np.ndarray], template: RunState) -> dict[str, np.ndarray]:
    """Version 1 to 2: give the positional arrays (``00000``, ...) their names.

    The evosax state's own leaves are taken in the installed evosax's order, as version 1
    itself restored them; shapes and dtypes are then checked by name. A file from before the
    strategy settings (``hyper``), or the env sampler's bounds, were state lacks them; they
    get this run's values, which come from the same config.
    """
    engine = backend_modules().engine
    expected = engine.to_host(template)  # in the tree's own leaf order, whatever the names
    names = _v1_order(list(expected))
    prefix = engine.STATE_PREFIX
    late = {top: [n for n in names if n.startswith(f"{prefix}{top}/")] for top in _V1_SORTED}
    leaves = [arrays[key] for key in sorted(arrays)]
    count = len(leaves) - len(HOST_ARRAYS)
    for absent in ([], late["bounds"], late["hyper"] + late["bounds"]):
        present = [name for name in names if name not in absent]
        if len(present) == count:
            break
    else:
        raise ConfigError(
            f"version 1 checkpoint holds {len(leaves)} arrays, this run needs "
            f"{len(names) + len(HOST_ARRAYS)}"
        )
    named = dict(zip(present, leaves[:count], strict=True))
    named.update({name: np.asarray(expected[name]) for name in absent})
    named.update(zip(HOST_ARRAYS, leaves[count:], strict=True))
    return named


# ---------------------------------------------------------------------------- bookkeeping
def obs_arrays(engine: Engine, state: RunState) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-seed observation statistics of ``state`` as NumPy arrays, or ``None`` without them."""
    stats = engine.obs_stats(state)
    if stats is None:
        return None
    return np.asarray(stats.mean), np.asarray(stats.std)


def _rows(metrics, n, host, now, evaluation, seed_ids):
    """Metrics rows for the ``n`` generations after ``host`` (one per seed), wall interpolated."""
    rows = []
    g = host.generation
    env_steps = host.env_steps.copy()
    multi = len(seed_ids) > 1
    for i in range(n):
        wall_s = host.wall_s + (now - host.wall_s) * (i + 1) / n
        for s, seed in enumerate(seed_ids):
            env_steps[s] += int(metrics["env_steps"][i, s])
            row = {
                "generation": g + i + 1,
                "env_steps": int(env_steps[s]),
                "wall_s": round(wall_s, 4),
                "fitness_mean": float(metrics["fitness_mean"][i, s]),
                "fitness_best": float(metrics["fitness_best"][i, s]),
                "fitness_std": float(metrics["fitness_std"][i, s]),
                "nonfinite": int(metrics["nonfinite"][i, s]),
            }
            if evaluation is not None and i == n - 1:
                row["eval_return"] = float(evaluation["eval_return"][s])
                row["eval_return_std"] = float(evaluation["eval_return_std"][s])
                row["eval_best_return"] = float(evaluation["eval_best_return"][s])
            if multi:
                row["seed"] = int(seed)
            rows.append(row)
    return rows, env_steps


def _update_best(engine, state, host, evaluation, generation):
    """Keep, per seed, the best evaluated parameters (search mean or generation best)."""
    best_eval = host.best_eval.copy()
    best_params = host.best_params.copy()
    best_generation = host.best_generation.copy()
    best_obs = None if host.best_obs is None else (host.best_obs[0].copy(), host.best_obs[1].copy())
    if evaluation is not None:
        mean = np.asarray(state.strategy.mean)
        member = np.asarray(state.gen_best)
        obs = obs_arrays(engine, state)
        for s in range(len(best_eval)):
            candidates = [
                (evaluation["eval_return"][s], mean[s]),
                (evaluation["eval_best_return"][s], member[s]),
            ]
            value, params = max(candidates, key=lambda c: -np.inf if np.isnan(c[0]) else c[0])
            if value > best_eval[s]:
                best_eval[s] = value
                best_params[s] = params
                best_generation[s] = generation
                if obs is not None:
                    best_obs[0][s], best_obs[1][s] = obs[0][s], obs[1][s]
    return best_eval, best_params, best_obs, best_generation


def _save_policies(run_dir, engine, state, host) -> None:
    obs_mean, obs_std = obs_arrays(engine, state) or (None, None)
    meta = {"generation": host.generation}
    runs.save_policy(run_dir, "final", np.asarray(state.strategy.mean), obs_mean, obs_std, meta)
    best_meta = {**meta, "best_eval": host.meta()["best_eval"]}
    best_meta["best_generation"] = [int(x) for x in host.best_generation]
    best_mean, best_std = host.best_obs or (None, None)
    runs.save_policy(run_dir, "best", host.best_params, best_mean, best_std, best_meta)
