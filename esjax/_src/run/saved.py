"""A run's saved policies: loaded once, controlled step by step, tested, and judged.

Everything that reads a run's ``final`` or ``best`` policy goes through here:

- :func:`make_test_rollout` builds the rollout of the run's task (and split) once, acting as
  the task trains (greedy or sampled), so many policies and seeds are tested with one compile;
- :class:`SavedPolicy` holds one seed's parameters and observation statistics;
  :meth:`SavedPolicy.controller` plays it step by step for given env parameters (what
  ``esjax.load_policy`` and ``esjax render`` use), :meth:`SavedPolicy.test_returns` tests it;
- :func:`verdict` is the one meaning of *solved*: the final policy's mean return on fresh test
  episodes reaches the task's ``solved_return``. ``summary.json``, the CLI and sweeps all use
  it; the best policy is reported beside it, never as the verdict.

The test episodes come from the run's ``test`` key root
(:func:`esjax._src.engine.generation.seed_keys`), disjoint from training and from the evaluations
that chose the best policy.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from esjax._src.engine.baselines import check_baseline, reference_returns
from esjax._src.engine.generation import flat_template, seed_keys
from esjax._src.engine.tasks import shared_rollout
from esjax._src.envs.core import EnvParams, make_env
from esjax._src.policies.networks import UserNetwork, as_spec
from esjax._src.rollout.episode import EpisodeStep, episode_keys, split_step_key, step_keys
from esjax._src.rollout.population_rollout import ObsStats, PopulationRollout, PyTree
from esjax._src.run import runs, trust
from esjax._src.run.memory import check_program_fits
from esjax._src.run.programs import COMPILE_THREAD
from esjax._src.specs import live
from esjax._src.specs.config import DEFAULT_TEST_EPISODES, ConfigError, RunConfig, TaskConfig

# Fresh test episodes per seed behind the verdict and ``esjax eval``'s default, unless the task
# sets its own ``test_episodes``.
TEST_EPISODES = DEFAULT_TEST_EPISODES

_log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- a rollout for tests
def make_test_rollout(
    run_dir: str | Path, split: str | None = None
) -> tuple[RunConfig, PopulationRollout]:
    """``(config, rollout)``: the run's config and a rollout of its task (and split) for testing.

    Rollouts are shared between runs of the same task in one process (a sweep's
    configurations, the seeds of a run), so each compiles once.
    """
    config = runs.read_run_config(run_dir)
    trust.check_run(run_dir, config.task)  # before its env is made: a run is data until trusted
    rollout = shared_rollout(config.task, split=split, source=str(run_dir))
    trust.complete_records(run_dir, config.task, writer=False)  # what building it imported
    return config, rollout


@functools.lru_cache(maxsize=8)
def _one_member_population(rollout: PopulationRollout) -> Callable:
    """Flat parameters -> a one-member population of ``rollout``'s policy, as one program.

    Built once per rollout: a sweep tests every configuration's policies, seed by seed, through
    the same rollout (run eagerly, every leaf's slice would be a program of its own).
    """
    _, unravel = flat_template(rollout, jax.random.key(0))
    return jax.jit(lambda flat: jax.tree.map(lambda x: x[None], unravel(flat)))


# ---------------------------------------------------------------------------- one saved policy
@dataclass(frozen=True)
class SavedPolicy:
    """One seed's saved policy with the run's config and a rollout of its task."""

    run_dir: Path
    config: RunConfig
    task: TaskConfig
    which: str
    seed: int  # the seed's index within the run
    flat: np.ndarray
    obs_stats: ObsStats | None
    rollout: PopulationRollout

    @classmethod
    def load(
        cls,
        run_dir: str | Path,
        which: str = "final",
        seed: int = 0,
        *,
        built: tuple[RunConfig, PopulationRollout] | None = None,
    ) -> SavedPolicy:
        """Read ``which`` policy of seed index ``seed``; ``built``: a :func:`make_test_rollout`."""
        config, rollout = built or make_test_rollout(run_dir)
        task = config.task
        # The task's policy, by shape (nothing allocated), bounds the file before it is read.
        template, _ = flat_template(rollout, jax.random.key(0))
        shape = (int(template.size), int(rollout.obs_size))
        _, flat, stats = runs.read_policy(run_dir, which, seed, config=config, shape=shape)
        if flat.shape != template.shape:
            raise ConfigError(
                f"{run_dir}: saved policy has {flat.size} parameters, the task's policy needs "
                f"{template.size}"
            )
        if stats is not None and stats[0].shape != (rollout.obs_size,):
            raise ConfigError(
                f"{Path(run_dir) / runs.POLICIES[which]}: observation statistics of shape "
                f"{stats[0].shape}, the "
                f"task's observations {rollout.obs_size} numbers"
            )
        obs_stats = ObsStats(*(jnp.asarray(s) for s in stats)) if stats is not None else None
        return cls(Path(run_dir), config, task, which, seed, flat, obs_stats, rollout)

    @property
    def params(self) -> PyTree:
        """The policy's parameter pytree."""
        _, unravel = flat_template(self.rollout, jax.random.key(0))
        return unravel(jnp.asarray(self.flat))

    def controller(self, env_params: EnvParams = None, key: jax.Array | None = None) -> Controller:
        """A step-by-step controller for episodes on ``env_params`` (default: the task's)."""
        rollout = self.rollout
        return Controller(
            rollout.episode,
            self.params,
            self.obs_stats,
            rollout.env_params if env_params is None else env_params,
            rollout.episode_length,
            key=key,
            task=self.task,
        )

    def test_inputs(self, *, zero: bool = False) -> tuple[jax.Array, PyTree, ObsStats | None]:
        """``(test key, params as a one-member population, obs stats)`` for ``population``.

        ``zero`` sets every weight to zero (the zero-action baseline on the same episodes).
        Callers that batch the rollout themselves (``esjax eval --grid``) test on the same
        episodes as :meth:`test_returns`.
        """
        flat = np.zeros_like(self.flat) if zero else self.flat
        params = _one_member_population(self.rollout)(flat)
        return fresh_test_key(self.config, self.seed), params, self.obs_stats

    def test_returns(self, episodes: int = TEST_EPISODES, *, zero: bool = False) -> np.ndarray:
        """Per-episode returns on the run's fresh test episodes."""
        if not isinstance(episodes, int) or episodes <= 0:
            raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
        key, params, obs_stats = self.test_inputs(zero=zero)
        return np.asarray(self.rollout.population(key, params, episodes, obs_stats).returns[0])

    def check_test_fits(self, episodes: int) -> None:
        """A ConfigError when testing ``episodes`` episodes at once would not fit in memory.
        Compiles the test's program, which the test then finds compiled; once per program
        and count in a process (a sweep's summary tests every seed's two policies)."""
        checked = (self.rollout, episodes)
        if checked in _FITTING_TESTS:
            return
        key, params, obs_stats = self.test_inputs()
        needed = self.rollout.compile_population(key, params, episodes, obs_stats)
        # One member runs on one device (esjax._src.rollout.sharding.over_devices): its bytes are
        # counted once.
        device = self.rollout.devices[0]
        check_program_fits(needed, device, f"testing {episodes:,} episodes", "--episodes")
        _FITTING_TESTS.add(checked)


def load_policy(
    run_dir: str | Path,
    which: str = "final",
    seed: int = 0,
    *,
    trust_code: bool = False,
    env: Any = None,
    network: Any = None,
) -> Controller:
    """The final (search mean) or best evaluated policy of seed index ``seed`` of a run.

    Code the run's task names (a ``module:factory`` env) is imported only when this user made
    the run, or with ``trust_code`` (:mod:`esjax._src.run.trust`). A run made by a
    :class:`esjax.Trainer` from objects (an env or a network defined in a notebook) takes them
    again as ``env=`` and ``network=``: nothing in the run directory can rebuild them.
    """
    if trust_code:
        trust.grant([run_dir])
    bind_objects(run_dir, env=env, network=network)
    return SavedPolicy.load(run_dir, which, seed).controller()


def bind_objects(run_dir: str | Path, *, env: Any = None, network: Any = None) -> None:
    """Let the objects given stand for the live env and network a run recorded
    (:mod:`esjax._src.specs.live`), each checked at its door; one line where the run recorded
    none of that kind."""
    if env is None and network is None:
        return
    task = runs.read_run_config(run_dir).task
    for what, given, name in (("env", env, task.env), ("network", network, task.policy.kind)):
        if given is None:
            continue
        if not live.is_live(name):
            raise ConfigError(
                f"{run_dir}: this run's {what} is {name!r}, which it rebuilds itself; "
                f"{what}= is for a run made from a Python object"
            )
        live.bind(name, make_env(given) if what == "env" else _network_object(given))


def _network_object(network: Any) -> Any:
    """A user's network object as a live name stands for it (checked for being one)."""
    spec = as_spec(network)
    return spec.network if isinstance(spec, UserNetwork) else network


def evaluate_run(
    run_dir: str | Path,
    episodes: int | None = None,
    split: str | None = None,
    seed: int = 0,
    which: str = "final",
    built: tuple[RunConfig, PopulationRollout] | None = None,
    *,
    trust_code: bool = False,
    env: Any = None,
    network: Any = None,
) -> dict[str, Any]:
    """Test returns of a saved policy on held-out episodes (``trust_code``, ``env`` and
    ``network``: as :func:`load_policy`).

    Deterministic actions (unless the task samples them) and the policy's frozen
    normalisation statistics; ``seed`` is the seed index within the run; ``split`` a task
    split (default: the training distribution); ``built`` a :func:`make_test_rollout` to reuse;
    ``episodes`` default: the task's ``test_episodes``, the verdict's.
    """
    if episodes is not None and (not isinstance(episodes, int) or episodes <= 0):
        # checked before the test rollout is built (seconds), so a bad count fails at once
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    if trust_code:
        trust.grant([run_dir])
    bind_objects(run_dir, env=env, network=network)
    built = built or make_test_rollout(run_dir, split)
    policy = SavedPolicy.load(run_dir, which, seed, built=built)
    if episodes is None:
        episodes = built[0].task.test_episodes
    policy.check_test_fits(episodes)  # the caller's count, or a task's: checked before it runs
    returns = policy.test_returns(episodes)
    return {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "min": float(np.min(returns)),
        "max": float(np.max(returns)),
        "episodes": episodes,
        "returns": [float(r) for r in returns],
    }


def baseline_returns(
    run_dir: str | Path,
    episodes: int,
    split: str | None = None,
    seed: int = 0,
    baseline: str = "analytic",
    *,
    built: tuple[RunConfig, PopulationRollout] | None = None,
) -> np.ndarray:
    """Per-episode returns of a baseline (:mod:`esjax._src.engine.baselines`) on a run's test
    episodes.

    The episodes :func:`evaluate_run` tests the run's policy on (seed index ``seed``): the
    run's test key root, its task and ``split``. ``built``: a :func:`make_test_rollout`.
    """
    check_baseline(baseline)
    if not isinstance(episodes, int) or episodes <= 0:
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    config, rollout = built or make_test_rollout(run_dir, split)
    return reference_returns(rollout, fresh_test_key(config, seed), episodes, baseline)


def fresh_test_key(config: RunConfig, seed: int) -> jax.Array:
    """The key of the fresh test episodes of a run's seed index ``seed`` (0: the first)."""
    return seed_keys(config.seed + seed)["test"]


# ---------------------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class Verdict:
    """Whether a run is solved, by the one definition (see the module docstring)."""

    threshold: float | None
    final_per_seed: tuple[float, ...]  # mean test return of each seed's final policy
    best_per_seed: tuple[float, ...]  # reported beside the verdict, never part of it
    episodes: int = TEST_EPISODES  # the fresh test episodes each mean is taken over

    @property
    def final_return(self) -> float:
        return float(np.mean(self.final_per_seed))

    @property
    def best_return(self) -> float:
        return float(np.mean(self.best_per_seed))

    @property
    def solved(self) -> bool | None:
        """The seeds' mean final test return reaches the threshold (None without one)."""
        return None if self.threshold is None else solved(self.final_return, self.threshold)

    @property
    def solved_per_seed(self) -> tuple[bool, ...] | None:
        if self.threshold is None:
            return None
        return tuple(solved(value, self.threshold) for value in self.final_per_seed)

    def to_json(self) -> dict[str, Any]:
        return {
            "solved_threshold": self.threshold,
            "solved": self.solved,
            "solved_per_seed": None if self.solved_per_seed is None else list(self.solved_per_seed),
            "test_episodes": self.episodes,
            "final_test_return": self.final_return,
            "final_test_return_per_seed": list(self.final_per_seed),
            "best_test_return": self.best_return,
            "best_test_return_per_seed": list(self.best_per_seed),
        }


def solved(test_return: float, threshold: float) -> bool:
    """The one rule: a final policy's mean test return at or above the task's threshold."""
    return bool(test_return >= threshold)


class VerdictStopped(Exception):
    """The final test was left unfinished because ``stopped()`` turned true (a stop signal)."""


def verdict(
    run_dir: str | Path,
    seeds: int,
    threshold: float | None,
    stopped: Callable[[], bool] = lambda: False,
) -> Verdict:
    """Test every seed's final and best saved policy on the task's ``test_episodes`` fresh
    episodes and judge the run.

    ``stopped`` is asked while the test program compiles and around each policy's test; once
    it is true, :class:`VerdictStopped` is raised rather than testing the rest, so a stop signal
    does not wait out a long test (the policies are on disk: a resume tests them again). A
    signal during the last policy's test stops the run too: the command exits as signalled,
    whatever policy the signal fell on.
    """
    built = make_test_rollout(run_dir)
    episodes = built[0].task.test_episodes
    _wait_for_test_compile(built[1], episodes, stopped)
    tested: dict[str, list[float]] = {"final": [], "best": []}
    for which, returns in tested.items():
        for s in range(seeds):
            if stopped():
                raise VerdictStopped(run_dir)
            policy = SavedPolicy.load(run_dir, which, s, built=built)
            returns.append(float(np.mean(policy.test_returns(episodes))))
    if stopped():
        raise VerdictStopped(run_dir)
    return Verdict(threshold, tuple(tested["final"]), tuple(tested["best"]), episodes)


def compile_verdicts_in_background(run_dirs: Sequence[str | Path]) -> None:
    """Compile the programs :func:`verdict` will test these runs' policies with, one after
    another in a thread of its own, while the runs train.

    A cold start would otherwise compile them after the last generation. The thread compiles
    for a one-member population of each run's shapes, the call
    :meth:`SavedPolicy.test_returns` makes, so the test finds it compiled and runs the program
    it would have built itself. One thread for all: a sweep's configurations mostly share one
    program, and after the first, the rest come from the persistent cache. A failure is only
    logged; the test builds the program again and raises it where the caller sees it. The
    thread is not a daemon (a process that exits while XLA compiles in one aborts), and is
    named so that a stopped run does not wait for it (:func:`esjax._src.cli.terminal.exit_stopped`).
    """
    for done in [k for k, thread in _TEST_COMPILES.items() if not thread.is_alive()]:
        del _TEST_COMPILES[done]
    jobs: dict[tuple[PopulationRollout, int], tuple[Path, RunConfig]] = {}
    for run_dir in run_dirs:
        config, rollout = make_test_rollout(run_dir)
        job = (rollout, config.task.test_episodes)
        if job not in _TEST_COMPILES:
            jobs.setdefault(job, (Path(run_dir), config))
    if not jobs:
        return

    def build() -> None:
        for (rollout, episodes), (run_dir, config) in jobs.items():
            try:
                template, _ = flat_template(rollout, jax.random.key(0))
                zeros = np.zeros(template.shape, template.dtype)
                # Statistics of None stand for saved ones: the rollout fills in the same shapes.
                policy = SavedPolicy(run_dir, config, config.task, "final", 0, zeros, None, rollout)
                rollout.compile_population(*policy.test_inputs()[:2], episodes)
            except Exception:  # the test builds the program again and raises it there
                _log.debug("compiling a test program ahead failed", exc_info=True)

    thread = threading.Thread(target=build, name=f"{COMPILE_THREAD}-test")
    for job in jobs:
        _TEST_COMPILES[job] = thread
    thread.start()


def _wait_for_test_compile(
    rollout: PopulationRollout, episodes: int, stopped: Callable[[], bool]
) -> None:
    """Join a background compile of this test program (compiling it twice at once gains
    nothing), in short slices: a signal does not end a thread's join, and ``stopped`` ends the
    wait with :class:`VerdictStopped`."""
    thread = _TEST_COMPILES.get((rollout, episodes))
    while thread is not None and thread.is_alive():
        if stopped():  # the thread stays listed: a test in this process later waits for it
            raise VerdictStopped(rollout)
        thread.join(0.05)
    _TEST_COMPILES.pop((rollout, episodes), None)


# (test rollout, episodes) -> the thread compiling its test program (compile_verdicts_in_background)
_TEST_COMPILES: dict[tuple[PopulationRollout, int], threading.Thread] = {}
# (test rollout, episodes) whose test was found to fit in memory (SavedPolicy.check_test_fits)
_FITTING_TESTS: set[tuple[PopulationRollout, int]] = set()


def read_verdict(summary: dict[str, Any]) -> Verdict | None:
    """The verdict a ``summary.json`` holds, or None when the run was not tested."""
    final, best = (
        summary.get("final_test_return_per_seed"),
        summary.get("best_test_return_per_seed"),
    )
    if final is None or best is None:
        return None
    episodes = int(summary.get("test_episodes", TEST_EPISODES))
    return Verdict(summary.get("solved_threshold"), tuple(final), tuple(best), episodes)


# ---------------------------------------------------------------------------- control
class Controller:
    """A trained policy for a plain Python control loop: NumPy observation in, action out.

    ``reset()`` at the start of every episode, then ``act(observation)`` once per step. A policy
    that sees the previous reward (meta-RL inputs) takes it as ``act(observation, reward=r)``,
    ``r`` being the reward the previous action earned. The step is
    :class:`esjax._src.rollout.episode.EpisodeStep`'s, as in training: an oracle policy is told the
    episode's own env parameters (``reset(env_params=...)``), and a policy that samples its
    actions draws them from the episode's step keys. ``reset(key, env_params)`` with the key
    :meth:`esjax.PopulationRollout.single` takes, and the env parameters that episode runs on
    (a sampler draws them from the key's first part), plays that episode's actions; without a
    key each episode draws a fresh one.
    """

    def __init__(
        self,
        episode: EpisodeStep,
        params: PyTree,
        obs_stats: ObsStats | None,
        env_params: EnvParams,
        episode_length: int,
        *,
        key: jax.Array | None = None,
        task: TaskConfig | None = None,
    ):
        self.task = task
        self.params = params
        self.obs_stats = obs_stats
        self.episode = episode
        self.episode_length = int(episode_length)
        size = episode.obs_size
        stats = obs_stats or ObsStats(jnp.zeros(size), jnp.ones(size))

        def step(params, state, obs, reward, known, step_key):
            state = state.replace(prev_reward=reward)
            k_act, _ = split_step_key(step_key)
            action, state = episode.act(params, stats, state, obs.reshape(-1), known, k_act)
            return action, state.replace(prev_action=action)

        self._step = jax.jit(step)
        self._episode_step_keys = jax.jit(
            lambda key: (episode_keys(key)[2], step_keys(episode_keys(key)[2], episode_length))
        )
        self._known = jax.jit(episode.known_params)
        self._stream = jax.random.key(0) if key is None else key
        self.env_params = env_params
        self.reset(key)

    def reset(self, key: jax.Array | None = None, env_params: EnvParams = None) -> None:
        """Start an episode: forget the recurrent state, stacked frames and previous action.

        ``key``: the episode's key as the rollout takes it; ``env_params``: the episode's env
        parameters, when they differ from the last episode's.
        """
        if key is None:
            self._stream, key = jax.random.split(self._stream)
        if env_params is not None:
            self.env_params = env_params
        self._known_params = self._known(self.env_params)
        self._k_steps, self._keys = self._episode_step_keys(key)
        self._t = 0
        self._state = self.episode.start()

    def step_key(self, t: int) -> jax.Array:
        """The key of step ``t`` of the current episode, as the rollout splits it.

        Its action half drives a sampling policy; its env half is for whoever steps the env
        (``esjax render``), so a stochastic env replays the rollout's episode too.
        """
        if t < self.episode_length:
            return self._keys[t]
        return jax.random.fold_in(self._k_steps, t)  # past the rollout's episode length

    def act(self, observation: ArrayLike, reward: float = 0.0) -> np.ndarray:
        """The action for ``observation``; ``reward`` is what the previous action earned."""
        step_key = self.step_key(self._t)
        self._t += 1
        action, self._state = self._step(
            self.params,
            self._state,
            jnp.asarray(observation, jnp.float32),
            jnp.float32(reward),
            self._known_params,
            step_key,
        )
        return np.asarray(action)
