"""``esjax.Trainer``: live objects in, pure training functions out.

A trainer binds an env, a network and a strategy once, and gives pure, jittable functions of
keys and states, the habit of PureJaxRL and rejax::

    trainer = esjax.Trainer(env, MyModule(), strategy="open_es", popsize=256, generations=100)
    state, metrics = jax.jit(trainer.train)(jax.random.key(0))
    states, metrics = jax.jit(jax.vmap(trainer.train))(jax.random.split(key, 8))  # 8 seeds

``esjax evolve``, ``esjax sweep`` and ``esjax.evolve()`` are built on the same object: the
command line resolves a task into a trainer (:meth:`Trainer.from_config`) and drives its
engine block by block with a run directory around it, so a trainer's curve and the command
line's on the same seed are the same generations of the same step
(:func:`esjax._src.engine.generation.generation`).

What a trainer is given is recorded as a task: a gymnax id, a suite's ``SUITE:NAME``, a file's
factory and esjax's own networks by name, anything else (an env or a network defined in a
notebook) by a live name that stands for the object in this process
(:mod:`esjax._src.specs.live`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from esjax._src.engine import generation as gen
from esjax._src.engine.resolve import resolve_task
from esjax._src.engine.tasks import make_rollout
from esjax._src.envs import core as envs
from esjax._src.policies.networks import as_spec, policy_config
from esjax._src.specs import live
from esjax._src.specs.config import ConfigError, RunConfig, StrategySpec, TaskConfig, to_dict
from esjax._src.specs.presets import LoadedTask, TaskTable, load_task
from esjax._src.strategies import algorithms
from esjax._src.strategies import strategy as strategies

PyTree = Any
# Generations one compiled block of the command line scans; evaluation intervals longer than
# this take several.
MAX_BLOCK = 50
# ``callback(generation, metrics)``, called from inside the jitted loop after each generation.
Callback = Callable[[jax.Array, dict[str, jax.Array]], None]


class Trainer:
    """An env, a network and a strategy bound into pure training functions.

    Args:
        env: an object with gymnax's ``reset(key, params)`` and ``step(key, state, action,
            params)`` (and its two spaces), a gymnax id (``"Pendulum-v1"``) or a suite's
            ``"SUITE:NAME"``.
        network: a flax linen or NNX module, an equinox module, plain ``(init, apply)``
            functions (with ``initial_carry`` third for a recurrent one), or a spec of
            :mod:`esjax.policies` (``MLP(hidden=(64, 64))``). The action head is read from the
            env's action space. An NNX or equinox module is searched from its own weights, a
            linen module or plain functions from their ``init``; esjax's own specs from the
            strategy's ``mean_init`` (zeros for ``open_es``).
        strategy: a name ``esjax list`` shows (``"open_es"``, ``"lowrank_es"``, ``"snes"``, an
            evosax algorithm's name), an evosax algorithm class, or a strategy class registered
            with :func:`esjax.strategies.register`.
        popsize: members per generation (default: the strategy's).
        generations: what :meth:`train` runs.
        env_params: fixed env params (an ``EnvParams`` object, or a dict of fields to change).
        episode_length: steps per episode (default: the params' ``max_steps_in_episode``).
        rollouts: episodes per member per generation.
        settings: the strategy's settings (``{"learning_rate": 0.05, "std_init": 0.1}``); what
            :meth:`train` is given replaces those that can be traced.
        env_sampler: env parameters drawn per episode, as a task's ``[env_sampler]``
            (``{"m": {"dist": "uniform", "low": 0.5, "high": 1.5}}``).
        splits: held-out variants by name, each drawn like ``env_sampler``, for
            :meth:`evaluate`'s ``split`` (a task's ``[splits.NAME]``).
        normalize_obs: normalise observations by their running moments.
        actions: ``"greedy"``, ``"sample"`` (discrete) or ``"raw"`` (continuous, unsquashed).
        eval_every, eval_episodes: how often, and on how many episodes, a run of this trainer
            (:func:`esjax.evolve`) tests its search mean.
        solved_return: the test return at which such a run counts as solved.
        callback: ``callback(generation, metrics)``, called from inside the jitted loop.
    """

    def __init__(
        self,
        env: Any,
        network: Any,
        *,
        strategy: Any = "open_es",
        popsize: int | None = None,
        generations: int = 100,
        env_params: Any = None,
        episode_length: int | None = None,
        rollouts: int = 1,
        settings: Mapping[str, Any] | None = None,
        env_sampler: Mapping[str, Any] | None = None,
        splits: Mapping[str, Mapping[str, Any]] | None = None,
        normalize_obs: bool = False,
        actions: str | None = None,
        eval_every: int = 10,
        eval_episodes: int = 128,
        solved_return: float | None = None,
        callback: Callback | None = None,
    ):
        env_name, fixed = _recorded_env(env, env_params)
        policy = policy_config(as_spec(network))
        if actions is not None:
            policy = dataclasses.replace(policy, actions=actions)
        name = _strategy_name(strategy)
        table = {
            **to_dict(TaskConfig(env=env_name, policy=policy)),
            "episode_length": episode_length,
            "rollouts": rollouts,
            "generations": generations,
            "env_params": fixed,
            "env_sampler": dict(env_sampler or {}),
            "splits": {name: dict(table) for name, table in (splits or {}).items()},
            "normalize_obs": normalize_obs,
            "evaluation": {"every": eval_every, "episodes": eval_episodes},
            "solved_return": solved_return,
            "strategy": name,
            "strategy_settings": dict(settings or {}),
        }
        table = {key: value for key, value in table.items() if value is not None}
        loaded = load_task(TaskTable(_task_name(env_name), table, "Trainer"))
        config, notes = resolve_task(loaded, popsize=popsize, generations=generations)
        for note in notes:
            warnings.warn(note, stacklevel=2)
        self._bind(config, callback)

    # ------------------------------------------------------------------ other doors
    @classmethod
    def from_task(
        cls,
        task: str | Path | TaskConfig,
        *,
        strategy: str | None = None,
        popsize: int | None = None,
        generations: int | None = None,
        rollouts: int | None = None,
        settings: Mapping[str, Any] | None = None,
        overrides: Sequence[str] = (),
        callback: Callback | None = None,
    ) -> Trainer:
        """The trainer a preset name or a TOML file describes, as ``esjax evolve`` reads it:
        ``overrides`` are ``--set`` strings, ``settings`` the strategy's settings on top."""
        more = [f"strategy_settings.{k}={json.dumps(v)}" for k, v in (settings or {}).items()]
        loaded = load_task(task, [*overrides, *more])
        return cls._from_loaded(loaded, strategy=strategy, popsize=popsize,
                               generations=generations, rollouts=rollouts,
                               overrides=[*overrides, *more], callback=callback)  # fmt: skip

    @classmethod
    def _from_loaded(
        cls, loaded: LoadedTask, *, callback: Callback | None = None, **arguments: Any
    ) -> Trainer:
        """The trainer of a task already loaded with its overrides (``arguments``: those of
        :func:`esjax._src.engine.resolve.resolve_task`)."""
        config, notes = resolve_task(loaded, **arguments)
        for note in notes:
            warnings.warn(note, stacklevel=3)
        trainer = cls.__new__(cls)
        trainer._bind(config, callback)
        return trainer

    @classmethod
    def from_config(
        cls,
        config: RunConfig,
        *,
        remember: strategies.Remember = strategies.compute_now,
        callback: Callback | None = None,
    ) -> Trainer:
        """The trainer of a resolved config (a run's ``config.json``): what the command line
        drives. ``remember`` may hand back what an earlier process computed for the same key
        (the host's disk cache); nothing here reads or writes files itself."""
        trainer = cls.__new__(cls)
        trainer._bind(config, callback, remember)
        return trainer

    def _bind(
        self,
        config: RunConfig,
        callback: Callback | None,
        remember: strategies.Remember = strategies.compute_now,
    ) -> None:
        self.config = config
        self.callback = callback
        self.engine = build_engine(config, remember, callback)
        self.step = self.engine.step
        self._init = jax.jit(functools.partial(gen.init_state, self.step))
        self._run = jax.jit(self._scan, static_argnums=1)
        self._evaluate = jax.jit(self._mean_returns, static_argnums=(2, 3))
        self._split_rollouts: dict[str, Any] = {}

    # ------------------------------------------------------------------ what it is
    @property
    def popsize(self) -> int:
        return self.config.popsize

    @property
    def generations(self) -> int:
        """What :meth:`train` runs."""
        return self.config.generations

    @property
    def num_dims(self) -> int:
        """Parameters per member."""
        return self.engine.num_dims

    @property
    def strategy(self) -> StrategySpec:
        """The strategy's resolved settings."""
        return self.engine.strategy.spec

    @property
    def traced_settings(self) -> tuple[str, ...]:
        """What :meth:`train`'s ``settings`` may hold: the strategy's settings that are arrays
        in the program, then the env sampler's bounds (``"m.low"``, ...)."""
        return self.engine.traced_names

    # ------------------------------------------------------------------ pure functions
    def init(self, key: jax.Array, settings: Mapping[str, Any] | None = None) -> gen.RunState:
        """A run's state before its first generation (``key``: ``jax.random.key(seed)``, which
        is :func:`esjax.seed_key`; the command line's ``--seed S`` starts from the same)."""
        hyper, bounds = self._values(settings)
        return self._init(_typed_key(key), hyper, bounds)

    def run(self, state: gen.RunState, n: int) -> tuple[gen.RunState, dict[str, jax.Array]]:
        """``n`` generations (static) from ``state``; the metrics are ``(n,)`` arrays named as in
        ``metrics.jsonl``: ``generation``, ``fitness_mean``, ``fitness_best``, ``fitness_std``,
        ``nonfinite`` and ``env_steps``, the generation's own env steps (``metrics.jsonl``
        holds their running sum)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(f"run: n must be a non-negative int (static), got {n!r}")
        return self._run(state, n)

    def train(
        self, key: jax.Array, settings: Mapping[str, Any] | None = None
    ) -> tuple[gen.RunState, dict[str, jax.Array]]:
        """:meth:`init` then :meth:`run` for :attr:`generations`."""
        return self.run(self.init(key, settings), self.generations)

    def evaluate(
        self,
        state: gen.RunState,
        key: jax.Array,
        episodes: int | None = None,
        split: str | None = None,
    ) -> jax.Array:
        """The search mean's returns on ``episodes`` fresh episodes of ``key`` (default: the
        task's ``test_episodes``): deterministic actions as trained, statistics frozen; on the
        training variants, or on the held-out ``split``."""
        episodes = self.config.task.test_episodes if episodes is None else episodes
        if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes <= 0:
            raise ConfigError(f"evaluate: episodes must be a positive int, got {episodes!r}")
        if split not in (None, "train") and split not in self._split_rollouts:
            self._split_rollouts[split] = make_rollout(self.config.task, split=split)
        return self._evaluate(state, _typed_key(key), episodes, split)

    def policy_params(self, state: gen.RunState) -> PyTree:
        """The search mean as the network takes it: a linen module's variables, an NNX
        module's ``nnx.Param`` state (``nnx.merge(graphdef, params)``), an equinox module's
        arrays (``eqx.combine(params, static)``), or a spec's or plain functions' pytree."""
        return self.step.unravel(state.strategy.mean)

    # ------------------------------------------------------------------ inside
    def _values(
        self, settings: Mapping[str, Any] | None
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """The state's traced settings and bounds: this trainer's, with ``settings`` on top."""
        given = dict(settings or {})
        engine = self.engine
        for name in given:
            if name not in engine.traced_names:
                raise ConfigError(untraced(name, self.strategy, engine.traced_names))
        values = {**engine.hyper, **engine.bounds, **given}

        def arrays(names: Sequence[str]) -> dict[str, jax.Array]:
            return {name: jnp.asarray(values[name], jnp.float32) for name in names}

        return arrays(engine.hyper_names), arrays(list(engine.bounds))

    def _scan(self, state: gen.RunState, n: int) -> tuple[gen.RunState, dict[str, jax.Array]]:
        step = self.step

        def body(state: gen.RunState, _: None) -> tuple[gen.RunState, dict[str, jax.Array]]:
            state, metrics = gen.generation(step, state)  # calls the callback
            return state, {"generation": state.generation, **metrics}

        state, metrics = jax.lax.scan(body, state, None, length=n)
        if step.validate_top > 1:
            state = gen.report_validated(step, state)
        return state, metrics

    def _mean_returns(
        self, state: gen.RunState, key: jax.Array, episodes: int, split: str | None
    ) -> jax.Array:
        members = state.strategy.mean[None]
        if split in (None, "train"):
            return gen.held_out_returns(self.step, state, members, key, episodes)[0]
        rollout = self._split_rollouts[split]
        params = jax.vmap(self.step.unravel)(members)
        return rollout.population(key, params, episodes, self.step.obs_stats(state)).returns[0]


def build_engine(
    config: RunConfig,
    remember: strategies.Remember = strategies.compute_now,
    callback: Callback | None = None,
) -> gen.Engine:
    """The compiled programs of a resolved config, made by
    :func:`esjax._src.engine.generation.make_engine`: what every trainer, and so every run,
    steps."""
    task = config.task
    spec = completed_spec(config)
    # Training and evaluation episodes differ only in their keys, so one rollout serves both.
    # The engine's own: a caller may change an engine's rollout (a pinned chunk size), and no
    # other engine or sizing may see that.
    rollout = make_rollout(task, source=config.task_name)
    # A reward shift makes training returns differ from the env's, so training gets its own.
    train_rollout = (
        make_rollout(task, source=config.task_name, reward_shift=task.reward_shift)
        if task.reward_shift
        else rollout
    )
    return gen.make_engine(
        train_rollout,
        rollout,
        lambda n: strategies.build_strategy(spec, n, config.popsize),
        rollouts=config.rollouts,
        block=min(task.evaluation.every, MAX_BLOCK),
        eval_episodes=task.evaluation.episodes,
        normalize_obs=task.normalize_obs,
        remember=remember,
        callback=callback,
    )


def completed_spec(config: RunConfig) -> StrategySpec:
    """The run's strategy with settings esjax added since the run was made at their defaults."""
    spec = config.strategy
    layers: list[tuple[Mapping[str, Any], str]] = [(spec.settings, "config")]
    settings = strategies.resolve_settings(spec.algorithm, layers, stored=True)
    return dataclasses.replace(spec, settings=settings)


def untraced(name: str, spec: StrategySpec, traced: Sequence[str]) -> str:
    """The line for a setting that :meth:`Trainer.train` cannot take as an array."""
    if name in spec.settings:
        return (
            f"setting {name!r} of {spec.algorithm} cannot be traced under vmap: it decides the "
            f"program's shape or branches; give it to Trainer(settings=...) and build a trainer "
            f"per value. Traceable: {', '.join(traced) or 'none'}"
        )
    return f"{spec.algorithm} has no setting {name!r}; traceable: {', '.join(traced) or 'none'}"


# ---------------------------------------------------------------------------- what is recorded
def _recorded_env(env: Any, env_params: Any) -> tuple[str, dict[str, Any]]:
    """``(env name, fixed params)`` as a task records them: a gymnax id or a suite's name with
    the params that differ from its defaults where they can be written down, else the live
    name of the object (and its params) in this process."""
    if isinstance(env, str):
        if env_params is None or isinstance(env_params, Mapping):
            return env, dict(env_params or {})
        made, defaults = envs.make_env(env)
        changed = envs.params_overrides(env_params, defaults)
        if changed is not None:
            return env, changed
        return live.name_for((made, env_params), env), {}
    made, params = envs.make_env(env, params=None if isinstance(env_params, Mapping)
                                 else env_params)  # fmt: skip
    found = envs.gymnax_id(made)
    if found is not None:
        changed = envs.params_overrides(params, envs.make_env(found)[1])
        if changed is not None:
            return found, {**changed, **dict(env_params if isinstance(env_params, Mapping)
                                             else {})}  # fmt: skip
    if isinstance(env_params, Mapping) and env_params:
        params = params.replace(**env_params)
    return live.name_for((made, params), live.describe(made)), {}


def _task_name(env_name: str) -> str:
    """What a trainer's run is named after: its env."""
    if live.is_live(env_name):
        return live.label(env_name).rsplit(".", 1)[-1].lower()
    return env_name.rsplit(":", 1)[-1].rsplit("/", 1)[-1].lower()


def _strategy_name(strategy: Any) -> str:
    """A strategy as ``--strategy`` names it: a name as it is, a class by its registry name."""
    if isinstance(strategy, str):
        return strategy
    if isinstance(strategy, type):
        for name, registered in algorithms.REGISTRY.items():
            if registered is strategy:
                return name
        if strategy.__name__ in algorithms.REGISTRY:  # evosax's CMA_ES, run lazily by esjax
            return strategy.__name__
        raise ConfigError(
            f"strategy {strategy.__name__} is not registered: register it with "
            "esjax.strategies.register(cls), or pass a name `esjax list` shows"
        )
    raise ConfigError(
        f"strategy {strategy!r} is not a strategy: pass a name `esjax list` shows, an evosax "
        "algorithm class, or a class registered with esjax.strategies.register"
    )


def _typed_key(key: jax.Array) -> jax.Array:
    """``key`` as a typed key (a raw ``uint32[2]`` one is wrapped)."""
    if jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)
