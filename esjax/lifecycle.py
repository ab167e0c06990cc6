"""A run's life in one place: claim the directory, start or resume, record, checkpoint, finish.

:class:`Run` is what :func:`esjax.evolve.evolve` drives. It owns everything between blocks of
generations: the run directory, the host-side bookkeeping (env steps, wall time, best
evaluated policy), metrics rows, the checkpoint schedule, and turning the ways a run can end
early into errors that say how to continue (:class:`Interrupted`, :class:`LostProcess`,
:class:`~esjax.runs.StorageError`). The engine state and the host state change together as
one :class:`Progress`, so a checkpoint is always of one completed generation.

In a multi-process run every process computes the same replicated state; only process 0
(the *writer*) writes the run directory, the others read it to resume.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from esjax import runs
from esjax.config import ConfigError, parse_task

# Config keys a checkpoint must agree on with config.json to be resumed.
_ENGINE_KEYS = ("task", "strategy", "popsize", "rollouts", "seed", "seeds", "num_dims")


class Interrupted(Exception):
    """A run stopped by Ctrl-C after checkpointing its last completed generation."""

    def __init__(self, run_dir: str | Path, generation: int | None = None):
        self.run_dir = Path(run_dir)
        self.generation = generation
        super().__init__(str(self))

    def __str__(self) -> str:
        at = f" at generation {self.generation}" if self.generation is not None else ""
        return (
            f"interrupted{at}; checkpoint saved in {self.run_dir}. Resume with "
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

    state: Any
    host: HostState


class Run:
    """One run directory from claiming it to the summary; see the module docstring.

    Use :meth:`create` or :meth:`reopen`, then ``with run:`` around building the engine,
    :meth:`begin`, the loop of :meth:`record` calls, and :meth:`finish`.
    """

    def __init__(self, run_dir: Path, config: dict[str, Any], *, resumed: bool, writer: bool,
                 checkpoint_every_s: float):  # fmt: skip
        self.run_dir = run_dir
        self.config = config
        self.resumed = resumed
        self.writer = writer
        self.checkpoint_every_s = checkpoint_every_s
        self.engine: Any = None
        self.progress: Progress | None = None
        self.saved_generation: int | None = None
        self._started = self._last_checkpoint = time.perf_counter()
        self._wall_offset = 0.0

    # ------------------------------------------------------------------ claiming the directory
    @classmethod
    def create(cls, run_dir: str | Path, config: dict[str, Any], *, overwrite: bool,
               writer: bool, checkpoint_every_s: float) -> Run:  # fmt: skip
        """A new run in ``run_dir`` (refused if it holds anything unless ``overwrite``)."""
        if writer:
            run_dir = runs.prepare_run_dir(run_dir, resume=False, overwrite=overwrite)
        return cls(Path(run_dir), config, resumed=False, writer=writer,
                   checkpoint_every_s=checkpoint_every_s)  # fmt: skip

    @classmethod
    def reopen(cls, run_dir: str | Path, *, generations: int | None, writer: bool,
               checkpoint_every_s: float) -> Run:  # fmt: skip
        """The run in ``run_dir``, to continue (to ``generations`` in all, when given)."""
        run_dir = runs.prepare_run_dir(run_dir, resume=True, overwrite=False)
        config = runs.read_run_config(run_dir)
        if generations is not None:
            if generations <= 0:
                raise ConfigError(f"generations must be a positive integer, got {generations!r}")
            config["generations"] = generations
        return cls(Path(run_dir), config, resumed=True, writer=writer,
                   checkpoint_every_s=checkpoint_every_s)  # fmt: skip

    # ------------------------------------------------------------------ the run
    @property
    def total(self) -> int:
        return int(self.config["generations"])

    @property
    def generation(self) -> int:
        return self.progress.host.generation

    @property
    def state(self) -> Any:
        return self.progress.state

    @property
    def seed_ids(self) -> np.ndarray:
        return np.arange(self.config["seed"], self.config["seed"] + int(self.config["seeds"]))

    def wall(self) -> float:
        """Seconds this run has taken, across resumes, counted from building the engine."""
        return self._wall_offset + time.perf_counter() - self._started

    def __enter__(self) -> Run:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        import jax

        if error is None or self.progress is None:
            return
        if isinstance(error, jax.errors.JaxRuntimeError):
            # A collective with a dead peer fails (gloo: connection reset) rather than hanging;
            # the checkpoint on disk is the last one written, so the run resumes from there.
            if jax.process_count() > 1:
                raise LostProcess(self.run_dir, self.generation, error) from error
        elif isinstance(error, KeyboardInterrupt):
            if self.writer:
                runs.truncate_metrics(self.run_dir, self.generation)
            self.checkpoint()
            raise Interrupted(self.run_dir, self.generation) from None
        elif isinstance(error, OSError):  # disk full, directory read-only: keep the last one
            raise self._storage_error(error) from error

    def _storage_error(self, err: OSError) -> runs.StorageError:
        kept = (
            "no checkpoint was written"
            if self.saved_generation is None
            else f"the checkpoint of generation {self.saved_generation} is kept; resume from it"
        )
        reason = err.strerror or str(err)
        return runs.StorageError(f"{self.run_dir}: cannot write ({reason}); {kept}")

    def begin(self, engine: Any) -> None:
        """The starting point: the checkpoint of a resumed run, else generation 0 of the seeds."""
        import jax.numpy as jnp

        self.engine = engine
        config = self.config
        config["popsize"] = engine.popsize
        config["num_dims"] = engine.num_dims
        seeds = len(self.seed_ids)
        template = engine.init(jnp.asarray(self.seed_ids, jnp.int32))
        if self.resumed:
            state, host = self._restore(template)
        else:
            state = template
            host = HostState(
                generation=0,
                env_steps=np.zeros(seeds, np.int64),
                wall_s=0.0,
                best_eval=np.full(seeds, -np.inf),
                best_params=np.asarray(state.strategy.mean).copy(),
                best_obs=obs_arrays(engine, state),
                best_generation=np.zeros(seeds, np.int64),
            )
        if self.writer:
            runs.write_json(self.run_dir / runs.CONFIG, config)
        self._wall_offset = host.wall_s
        self.progress = Progress(state, host)
        self._last_checkpoint = time.perf_counter()

    def _restore(self, template: Any) -> tuple[Any, HostState]:
        """Engine and host state from the run's checkpoint (shaped like ``template``)."""
        from esjax.engine import from_host

        engine, config = self.engine, self.config
        meta, leaves = runs.load_checkpoint(self.run_dir)
        for key in _ENGINE_KEYS:
            if meta["config"].get(key) != config.get(key):
                raise ConfigError(f"{self.run_dir}: checkpoint and config.json disagree on {key!r}")
        try:
            state = engine.place(from_host(template, leaves[:-4]))
        except ValueError as err:
            raise ConfigError(f"{self.run_dir}: {err}") from err
        best_params, best_mean, best_std, best_generation = leaves[-4:]
        host = HostState(
            generation=int(meta["generation"]),
            env_steps=np.asarray(meta["env_steps"], np.int64),
            wall_s=float(meta["wall_s"]),
            best_eval=np.asarray(
                [-np.inf if x is None else x for x in meta["best_eval"]], np.float64
            ),
            best_params=best_params,
            best_obs=(best_mean, best_std) if engine.normalize_obs else None,
            best_generation=best_generation,
        )
        if self.writer:
            runs.truncate_metrics(self.run_dir, host.generation)
        self.saved_generation = host.generation
        return state, host

    def record(self, state: Any, metrics: dict[str, np.ndarray], n: int,
               evaluation: dict[str, np.ndarray] | None) -> list[dict[str, Any]]:  # fmt: skip
        """Take a completed block of ``n`` generations: metrics rows, best policy, checkpoint.

        Returns the block's metrics rows (one per generation and seed).
        """
        host = self.progress.host
        end = host.generation + n
        now = self.wall()
        rows, env_steps = _rows(metrics, n, host, now, evaluation, self.seed_ids)
        if self.writer:
            runs.append_metrics(self.run_dir, rows)
        best = _update_best(self.engine, state, host, evaluation, end)
        self.progress = Progress(state, HostState(end, env_steps, now, *best))
        due = time.perf_counter() - self._last_checkpoint >= self.checkpoint_every_s
        if end >= self.total or due:
            self.checkpoint()
        return rows

    def checkpoint(self) -> None:
        """Save the policies and a checkpoint of the last completed generation (the writer)."""
        if self.writer:
            state, host = self.progress.state, self.progress.host
            _save_policies(self.run_dir, self.engine, state, host)
            leaves = [
                *_to_host(state),
                host.best_params,
                *(host.best_obs or (np.zeros(0, np.float32), np.zeros(0, np.float32))),
                np.asarray(host.best_generation, np.int64),
            ]
            runs.save_checkpoint(self.run_dir, {**host.meta(), "config": self.config}, leaves)
            self.saved_generation = host.generation
        self._last_checkpoint = time.perf_counter()

    def finish(self) -> RunSummary:
        """Evaluate the final search mean; the writer also writes ``summary.json``."""
        import jax

        host = self.progress.host
        task = parse_task(self.config["task"], "config")
        final = jax.device_get(self.engine.evaluate(self.state))
        final_return = float(np.mean(final["eval_return"]))
        finite_best = host.best_eval[np.isfinite(host.best_eval)]
        summary = RunSummary(
            run_dir=self.run_dir,
            generations=host.generation,
            env_steps=int(np.mean(host.env_steps)),
            wall_s=self.wall(),
            final_eval_return=final_return,
            best_eval_return=float(np.mean(finite_best)) if finite_best.size else None,
            solved_threshold=task.solved_return,
        )
        if self.writer:
            threshold = summary.solved_threshold
            runs.write_json(
                self.run_dir / runs.SUMMARY,
                {
                    "generations": summary.generations,
                    "env_steps": summary.env_steps,
                    "env_steps_per_seed": [int(x) for x in host.env_steps],
                    "wall_s": summary.wall_s,
                    "final_eval_return": summary.final_eval_return,
                    "final_eval_return_per_seed": [float(x) for x in final["eval_return"]],
                    "best_eval_return": summary.best_eval_return,
                    "best_eval_return_per_seed": host.meta()["best_eval"],
                    "solved_threshold": threshold,
                    "solved": None if threshold is None else bool(final_return >= threshold),
                },
            )
        return summary


# ---------------------------------------------------------------------------- bookkeeping
def _to_host(state: Any) -> list[np.ndarray]:
    from esjax.engine import to_host

    return to_host(state)


def obs_arrays(engine: Any, state: Any) -> tuple[np.ndarray, np.ndarray] | None:
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
    obs = obs_arrays(engine, state)
    meta = {"generation": host.generation}
    runs.save_policy(
        run_dir, "final", np.asarray(state.strategy.mean), *(obs or (None, None)), meta
    )
    best_meta = {**meta, "best_eval": host.meta()["best_eval"]}
    best_meta["best_generation"] = [int(x) for x in host.best_generation]
    runs.save_policy(run_dir, "best", host.best_params, *(host.best_obs or (None, None)), best_meta)
