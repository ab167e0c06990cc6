"""The host loop: resolve a run, drive the engine block by block, log, checkpoint, resume.

``evolve`` is what the CLI's ``esjax evolve`` calls. Between blocks it evaluates on schedule,
appends metrics, saves policies and (at most every ``checkpoint_every_s`` seconds, and always
at the end or on Ctrl-C) an atomic checkpoint. A run resumed from a checkpoint continues
bit-identically: the generation step is the same compiled program whatever the block
boundaries, and everything it reads is in the checkpoint.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from esjax import runs
from esjax.config import ConfigError, TaskConfig, apply_overrides, parse_task, to_dict

# Generations one compiled block scans; evaluation intervals longer than this take several.
MAX_BLOCK = 50
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


# ---------------------------------------------------------------------------- resolving a run
def _load_task(
    task: str | Path | TaskConfig, overrides: Sequence[str]
) -> tuple[str, TaskConfig, dict]:
    """``(name, parsed task, raw table before overrides)``."""
    from esjax.presets import locate

    if isinstance(task, TaskConfig):
        raw = to_dict(task)
        name = Path(task.env).stem.lower() or "task"
        source = "task"
    else:
        name, raw, source = locate("task", str(task))
    return name, parse_task(apply_overrides(raw, overrides), source), raw


def resolve_config(
    task: str | Path | TaskConfig,
    *,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    seed: int = 0,
    seeds: int = 1,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """The resolved, JSON-able config of a new run (what ``config.json`` holds)."""
    from esjax.strategies import load_strategy, resolve_popsize
    from esjax.tasks import check_task

    overrides = list(overrides)
    name, task_config, raw = _load_task(task, overrides)
    check_task(task_config, name)
    strategy_name = strategy or task_config.strategy
    # A task's strategy_settings are tuned for its own strategy; with another strategy only the
    # settings given explicitly as overrides apply.
    own = strategy_name == raw.get("strategy", "open_es")
    explicit = apply_overrides({}, [o for o in overrides if o.startswith("strategy_settings.")])
    settings = dict(task_config.strategy_settings) if own else {}
    settings.update(explicit.get("strategy_settings", {}))
    spec = load_strategy(strategy_name, settings, overrides_source=name)
    for label, value in (
        ("generations", generations),
        ("rollouts", rollouts),
        ("popsize", popsize),
    ):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ConfigError(f"{label} must be a positive integer, got {value!r}")
    if (popsize or task_config.popsize) is not None:
        resolve_popsize(spec, 1, popsize or task_config.popsize)  # odd for a mirrored ES, ...
    if not isinstance(seeds, int) or seeds <= 0:
        raise ConfigError(f"seeds must be a positive integer, got {seeds!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    from esjax import __version__

    return {
        "esjax_version": __version__,
        "task_name": name,
        "task": to_dict(task_config),
        "strategy": spec.to_dict(),
        "popsize": popsize or task_config.popsize,  # None: the strategy's own default
        "rollouts": rollouts or task_config.rollouts,
        "generations": generations or task_config.generations,
        "seed": seed,
        "seeds": seeds,
        "overrides": overrides,
    }


def build_engine(config: dict[str, Any]):
    """``(task, engine)`` for a resolved config.

    Engines are kept for the life of the process (a few at most), so evolving, resuming or
    re-running the same configuration does not compile it again.
    """
    import jax

    def cache_key(popsize):
        parts = {k: config.get(k) for k in ("task", "strategy", "rollouts")}
        return json.dumps({**parts, "popsize": popsize}, sort_keys=True) + repr(jax.devices())

    key = cache_key(config.get("popsize"))
    if key not in _ENGINES:
        while len(_ENGINES) >= _MAX_ENGINES:
            _ENGINES.pop(next(iter(_ENGINES)))
        built = _build_engine(config)
        _ENGINES[key] = _ENGINES[cache_key(built[1].popsize)] = built
    return _ENGINES[key]


_ENGINES: dict[str, Any] = {}
_MAX_ENGINES = 4


def clear_engine_cache() -> None:
    """Forget built engines (and JAX's compiled programs): the next run compiles afresh."""
    import jax

    _ENGINES.clear()
    jax.clear_caches()


def _build_engine(config: dict[str, Any]):
    from esjax.engine import make_engine
    from esjax.strategies import StrategySpec, build_strategy, resolve_settings, strategy_cost_hint
    from esjax.tasks import make_rollout

    where = "config"
    task = parse_task(config["task"], where)
    s = config["strategy"]
    spec = StrategySpec(
        s["name"], s["algorithm"], resolve_settings(s["algorithm"], [(s["settings"], where)]),
        s.get("description", ""),
    )  # fmt: skip
    # Training and evaluation episodes differ only in their keys, so one rollout serves both.
    rollout = make_rollout(task, deterministic=True, source=config["task_name"])
    engine = make_engine(
        rollout,
        rollout,
        lambda n: build_strategy(spec, n, config.get("popsize")),
        rollouts=config["rollouts"],
        block=min(task.evaluation.every, MAX_BLOCK),
        eval_episodes=task.evaluation.episodes,
        normalize_obs=task.normalize_obs,
    )
    steps = config["rollouts"] * engine.rollout.episode_length
    hint = strategy_cost_hint(spec, engine.num_dims, engine.popsize, steps)
    if hint:
        warnings.warn(hint, stacklevel=4)
    return task, engine


def _default_run_dir(config: dict[str, Any]) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{config['task_name']}-{config['strategy']['name']}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


# ---------------------------------------------------------------------------- the loop
@dataclass
class _Host:
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


def evolve(
    task: str | Path | TaskConfig | None,
    *,
    strategy: str | None = None,
    popsize: int | None = None,
    generations: int | None = None,
    rollouts: int | None = None,
    seed: int = 0,
    seeds: int = 1,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    overrides: Sequence[str] = (),
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    block: int | None = None,
    checkpoint_every_s: float = 30.0,
) -> RunSummary:
    """Evolve a policy for ``task`` and return what it reached; see the module docstring.

    ``seeds`` runs seeds ``seed, seed+1, ...`` in one compiled program. ``block`` is how many
    generations run between host visits (default and most: the task's evaluation interval,
    capped at ``MAX_BLOCK``); it changes when progress is reported, never the result. With
    ``resume=True`` the run in ``out`` continues (``generations`` may extend it); the other
    settings come from its config.
    """
    import jax
    import jax.numpy as jnp

    from esjax.engine import from_host, to_host

    # In a multi-process run every process computes the same replicated state; only process 0
    # writes the run directory (the others read it to resume).
    writer = jax.process_index() == 0
    if resume:
        if out is None:
            raise ConfigError("resume needs the run directory (out=...)")
        run_dir = runs.prepare_run_dir(out, resume=True, overwrite=False)
        config = runs.read_run_config(run_dir)
        _check_resume_args(config, task, strategy, popsize, rollouts, seeds, overrides)
        if generations is not None:
            if generations <= 0:
                raise ConfigError(f"generations must be a positive integer, got {generations!r}")
            config["generations"] = generations
    else:
        config = resolve_config(
            task,
            strategy=strategy,
            popsize=popsize,
            generations=generations,
            rollouts=rollouts,
            seed=seed,
            seeds=seeds,
            overrides=overrides,
        )
        run_dir = out if out is not None else _default_run_dir(config)
        if writer:
            run_dir = runs.prepare_run_dir(run_dir, resume=False, overwrite=overwrite)
        run_dir = Path(run_dir)

    start = time.perf_counter()
    task_config, engine = build_engine(config)
    if block is not None and (not isinstance(block, int) or block <= 0):
        raise ConfigError(f"block must be a positive integer, got {block!r}")
    per_visit = min(block or engine.block, engine.block)
    config["popsize"] = engine.popsize
    config["num_dims"] = engine.num_dims
    total = int(config["generations"])
    num_seeds = int(config["seeds"])
    seed_ids = np.arange(config["seed"], config["seed"] + num_seeds)
    every = task_config.evaluation.every

    template = engine.init(jnp.asarray(seed_ids, jnp.int32))
    if resume:
        meta, leaves = runs.load_checkpoint(run_dir)
        for key in _ENGINE_KEYS:
            if meta["config"].get(key) != config.get(key):
                raise ConfigError(f"{run_dir}: checkpoint and config.json disagree on {key!r}")
        try:
            state = engine.place(from_host(template, leaves[:-4]))
        except ValueError as err:
            raise ConfigError(f"{run_dir}: {err}") from err
        best_params, best_mean, best_std, best_generation = leaves[-4:]
        host = _Host(
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
        if writer:
            runs.truncate_metrics(run_dir, host.generation)
    else:
        state = template
        flat = np.asarray(state.strategy.mean)
        obs = _obs_arrays(engine, state)
        host = _Host(
            generation=0,
            env_steps=np.zeros(num_seeds, np.int64),
            wall_s=0.0,
            best_eval=np.full(num_seeds, -np.inf),
            best_params=flat.copy(),
            best_obs=obs,
            best_generation=np.zeros(num_seeds, np.int64),
        )
    if writer:
        runs.write_json(run_dir / runs.CONFIG, config)
    wall_offset = host.wall_s
    last_checkpoint = time.perf_counter()
    saved_generation = host.generation if resume else None

    def wall() -> float:
        return wall_offset + time.perf_counter() - start

    def commit_files(state, host) -> None:
        if not writer:
            return
        _save_policies(run_dir, engine, state, host)
        leaves = [
            *to_host(state),
            host.best_params,
            *(host.best_obs or (np.zeros(0, np.float32), np.zeros(0, np.float32))),
            np.asarray(host.best_generation, np.int64),
        ]
        runs.save_checkpoint(run_dir, {**host.meta(), "config": config}, leaves)
        nonlocal saved_generation
        saved_generation = host.generation

    try:
        while host.generation < total:
            g = host.generation
            next_eval = (g // every + 1) * every
            n = min(per_visit, next_eval - g, total - g)
            new_state, metrics = engine.run_block(state, jnp.asarray(n, jnp.int32))
            metrics = jax.device_get(metrics)
            end = g + n
            evaluation = None
            if end % every == 0:
                evaluation = jax.device_get(engine.evaluate(new_state))
            now = wall()
            rows, env_steps = _rows(metrics, n, g, host, now, evaluation, seed_ids)
            if writer:
                runs.append_metrics(run_dir, rows)
            best = _update_best(engine, new_state, host, evaluation, end)
            host = _Host(end, env_steps, now, *best)
            state = new_state
            if (
                host.generation >= total
                or time.perf_counter() - last_checkpoint >= checkpoint_every_s
            ):
                commit_files(state, host)
                last_checkpoint = time.perf_counter()
            if on_progress is not None:
                for row in rows[-num_seeds:]:
                    on_progress(
                        {
                            **row,
                            "generations": total,
                            "seed": int(row.get("seed", seed_ids[0])),
                            "run_dir": str(run_dir),
                        }
                    )
    except jax.errors.JaxRuntimeError as error:
        # A collective with a dead peer fails (gloo: connection reset) rather than hanging; the
        # checkpoint on disk is the last one written, so the run resumes from there.
        if jax.process_count() > 1:
            raise LostProcess(run_dir, host.generation, error) from error
        raise
    except KeyboardInterrupt:
        if writer:
            runs.truncate_metrics(run_dir, host.generation)
        commit_files(state, host)
        raise Interrupted(run_dir, host.generation) from None
    except OSError as err:  # disk full, directory turned read-only: keep the last checkpoint
        kept = (
            "no checkpoint was written"
            if saved_generation is None
            else f"the checkpoint of generation {saved_generation} is kept; resume from it"
        )
        reason = err.strerror or str(err)
        raise runs.StorageError(f"{run_dir}: cannot write ({reason}); {kept}") from err

    final = jax.device_get(engine.evaluate(state))
    final_return = float(np.mean(final["eval_return"]))
    finite_best = host.best_eval[np.isfinite(host.best_eval)]
    best_return = float(np.mean(finite_best)) if finite_best.size else None
    summary = RunSummary(
        run_dir=Path(run_dir),
        generations=host.generation,
        env_steps=int(np.mean(host.env_steps)),
        wall_s=wall(),
        final_eval_return=final_return,
        best_eval_return=best_return,
        solved_threshold=task_config.solved_return,
    )
    if not writer:
        return summary
    runs.write_json(
        run_dir / runs.SUMMARY,
        {
            "generations": summary.generations,
            "env_steps": summary.env_steps,
            "env_steps_per_seed": [int(x) for x in host.env_steps],
            "wall_s": summary.wall_s,
            "final_eval_return": summary.final_eval_return,
            "final_eval_return_per_seed": [float(x) for x in final["eval_return"]],
            "best_eval_return": summary.best_eval_return,
            "best_eval_return_per_seed": host.meta()["best_eval"],
            "solved_threshold": summary.solved_threshold,
            "solved": (
                None
                if summary.solved_threshold is None
                else bool(final_return >= summary.solved_threshold)
            ),
        },
    )
    return summary


def _check_resume_args(config, task, strategy, popsize, rollouts, seeds, overrides) -> None:
    """On resume the run's own config rules; an argument that contradicts it is an error."""
    if isinstance(task, str) and not task.endswith(".toml") and task != config["task_name"]:
        raise ConfigError(f"this run is task {config['task_name']!r}, not {task!r}")
    given = {"strategy": strategy, "popsize": popsize, "rollouts": rollouts}
    stored = {
        "strategy": config["strategy"]["name"],
        "popsize": config.get("popsize"),
        "rollouts": config["rollouts"],
    }
    for key, value in given.items():
        if value is not None and value != stored[key]:
            raise ConfigError(f"cannot change {key} on resume (run has {stored[key]!r})")
    if seeds not in (1, config["seeds"]):
        raise ConfigError(f"cannot change seeds on resume (run has {config['seeds']})")
    if overrides and list(overrides) != list(config.get("overrides", [])):
        raise ConfigError("cannot change overrides (--set) on resume")


def _obs_arrays(engine, state) -> tuple[np.ndarray, np.ndarray] | None:
    stats = engine.obs_stats(state)
    if stats is None:
        return None
    return np.asarray(stats.mean), np.asarray(stats.std)


def _rows(metrics, n, g, host, now, evaluation, seed_ids):
    """Metrics rows for generations ``g+1 .. g+n`` (one per seed), wall time interpolated."""
    rows = []
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
        obs = _obs_arrays(engine, state)
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
    obs = _obs_arrays(engine, state)
    meta = {"generation": host.generation}
    runs.save_policy(
        run_dir, "final", np.asarray(state.strategy.mean), *(obs or (None, None)), meta
    )
    best_meta = {**meta, "best_eval": host.meta()["best_eval"]}
    best_meta["best_generation"] = [int(x) for x in host.best_generation]
    runs.save_policy(run_dir, "best", host.best_params, *(host.best_obs or (None, None)), best_meta)


# ---------------------------------------------------------------------------- evaluation
def make_test_rollout(run_dir: str | Path, split: str | None = None):
    """The run's config and a deterministic rollout of its task (and split) for testing."""
    from esjax.tasks import make_rollout

    config = runs.read_run_config(run_dir)
    task = parse_task(config["task"], f"{run_dir}/{runs.CONFIG}")
    return config, make_rollout(task, split=split, deterministic=True, source=str(run_dir))


def saved_policy_returns(
    run_dir: str | Path,
    episodes: int,
    seed: int,
    which: str,
    built: tuple[dict, Any],
    *,
    zero: bool = False,
) -> np.ndarray:
    """Per-episode test returns of a saved policy through ``built = make_test_rollout(...)``.

    Passing the built rollout lets callers test several policies or seeds with one compile.
    ``zero`` sets every weight to zero (the zero-action baseline on the same episodes).
    """
    _, rollout = built
    key, params, obs_stats = saved_policy_inputs(run_dir, seed, which, built, zero=zero)
    return np.asarray(rollout.population(key, params, episodes, obs_stats).returns[0])


def saved_policy_inputs(
    run_dir: str | Path,
    seed: int,
    which: str,
    built: tuple[dict, Any],
    *,
    zero: bool = False,
) -> tuple[Any, Any, Any]:
    """``(test key, params as a one-member population, obs stats)`` for ``rollout.population``.

    Separate from :func:`saved_policy_returns` so that callers which batch the rollout
    themselves (``esjax eval --grid``, one compile for every cell) test on the same episodes.
    """
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from esjax.engine import seed_keys
    from esjax.rollout import ObsStats

    config, rollout = built
    _, flat, stats = runs.read_policy(run_dir, which, seed)
    _, unravel = ravel_pytree(rollout.init_params(jax.random.key(0)))
    flat = jnp.zeros_like(jnp.asarray(flat)) if zero else jnp.asarray(flat)
    params = jax.tree.map(lambda x: x[None], unravel(flat))
    obs_stats = ObsStats(*(jnp.asarray(s) for s in stats)) if stats is not None else None
    key = seed_keys(int(config["seed"]) + seed)["test"]
    return key, params, obs_stats


def evaluate_run(
    run_dir: str | Path,
    episodes: int = 128,
    split: str | None = None,
    seed: int = 0,
    which: str = "final",
    built: tuple[dict, Any] | None = None,
) -> dict[str, Any]:
    """Test returns of a saved policy on held-out episodes.

    Deterministic actions and the policy's frozen normalisation statistics; the episodes come
    from the run's *test* key root, disjoint from both training and the evaluations that chose
    the best policy. ``seed`` is the seed index within the run; ``split`` a task split
    (default: the training distribution); ``built`` a :func:`make_test_rollout` to reuse.
    """
    if not isinstance(episodes, int) or episodes <= 0:
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    built = built or make_test_rollout(run_dir, split)
    returns = saved_policy_returns(run_dir, episodes, seed, which, built)
    return {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "min": float(np.min(returns)),
        "max": float(np.max(returns)),
        "episodes": episodes,
        "returns": [float(r) for r in returns],
    }
