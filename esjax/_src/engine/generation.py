"""The training engine: one pure generation step, scanned in jitted blocks, vmapped over seeds.

A generation is ``ask -> population rollout -> fitness -> tell`` (plus the running observation
moments when the task normalises observations). ``run_block`` scans a fixed number of
generations and is compiled once: how many of them actually run is an argument, and the
scan index decides through ``lax.cond`` whether a step runs, so a block of 3 and a block of 10
execute the very same step program. That is what makes an interrupted, resumed run
bit-identical to an uninterrupted one, whatever the block boundaries were.

With the loop setting ``env_groups`` the population is split into groups that share
episode starts (common random numbers within a group, fresh starts across groups); each member
is handed its group's keys, so the population is still one sharded, cache-chunked call.

Across devices no parameters move. Each device steps its own members and reduces them, and
their mean returns are all-gathered before fitness shaping and ``tell``, which run replicated.
A materialised population is drawn whole on every device from the shared key; antithetic
OpenES's noise is drawn by pairs, each device its own share, and ``tell`` gathers one partial
sum per block of pairs instead (:mod:`esjax._src.strategies.lazy_openes`, ``docs/scaling.md``).

Every function here takes and returns a batch of runs with a leading *seed* axis; one seed is
a batch of one. Nothing in this module prints or writes files.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from esjax._src.rollout.population_rollout import (
    BoundedSampler,
    EnvParamsSampler,
    ObsStats,
    PopulationRollout,
    PopulationSummary,
    RolloutResult,
    obs_moments,
    tree_select,
)
from esjax._src.strategies.fitness import (
    mean_and_std,
    return_stats,
    to_fitness,
    ungroup_members,
)
from esjax._src.strategies.population import MemberLayout
from esjax._src.strategies.strategy import (
    Remember,
    Strategy,
    antithetic,
    compute_now,
    form_for,
    traced_settings,
    with_settings,
)

PyTree = Any
# Smallest std used to normalise an observation dimension; a constant input stays finite.
MIN_OBS_STD = 1e-2


# ---------------------------------------------------------------------------- keys
def seed_key(seed: int | jax.Array) -> jax.Array:
    """The key a run of seed ``seed`` starts from: ``esjax evolve --seed S`` trains what
    ``Trainer.init(seed_key(S))`` starts (it is ``jax.random.key(S)``)."""
    return jax.random.key(seed)


def run_keys(key: jax.Array) -> dict[str, jax.Array]:
    """Independent roots of one run from its key: training, parameter init, evaluation and
    final test.

    Training keys descend only from ``train``; the evaluation episodes use ``evaluation``
    (fixed for the whole run) and :func:`esjax._src.run.saved.evaluate_run` uses ``test``, so no
    evaluation episode ever replays a training episode.
    """
    train, init, evaluation, test = jax.random.split(key, 4)
    return {"train": train, "init": init, "evaluation": evaluation, "test": test}


def seed_keys(seed: int | jax.Array) -> dict[str, jax.Array]:
    """:func:`run_keys` of seed ``seed``'s key."""
    return run_keys(seed_key(seed))


def generation_keys(key_data: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(next, k_ask, k_rollout, k_tell)`` from a generation's key; the parent is not reused."""
    next_key, k_ask, k_rollout, k_tell = jax.random.split(jax.random.wrap_key_data(key_data), 4)
    return jax.random.key_data(next_key), k_ask, k_rollout, k_tell


def group_keys(k_rollout: jax.Array, groups: int) -> jax.Array:
    """The rollout key of each member group (one group: the generation's rollout key itself)."""
    return k_rollout[None] if groups == 1 else jax.random.split(k_rollout, groups)


# ---------------------------------------------------------------------------- observation moments
@struct.dataclass
class NormState:
    """Running count, mean and sum of squared deviations (M2) of valid training observations."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array


def norm_init(size: int) -> NormState:
    return NormState(jnp.zeros((), jnp.float32), jnp.zeros(size), jnp.zeros(size))


def norm_update(norm: NormState, result: RolloutResult | PopulationSummary) -> NormState:
    """Merge one generation's masked moments (Chan et al.'s parallel update)."""
    count, mean, var = obs_moments(result)
    total = norm.count + count
    safe = jnp.maximum(total, 1.0)
    delta = mean - norm.mean
    new_mean = norm.mean + delta * (count / safe)
    new_m2 = norm.m2 + var * count + delta * delta * (norm.count * count / safe)
    return NormState(total, new_mean, new_m2)


def norm_stats(norm: NormState) -> ObsStats:
    """Frozen statistics for a rollout: identity until the first observation is counted."""
    var = norm.m2 / jnp.maximum(norm.count, 1.0)
    std = jnp.where(norm.count > 0, jnp.sqrt(var), 1.0)
    return ObsStats(norm.mean, jnp.maximum(std, MIN_OBS_STD))


# ---------------------------------------------------------------------------- state
@struct.dataclass
class RunState:
    """Everything a run needs to continue; every leaf is a plain array (keys as key data)."""

    strategy: Any
    norm: NormState
    key: jax.Array
    eval_key: jax.Array
    generation: jax.Array
    gen_best: jax.Array  # flat parameters of the last generation's best member
    # The strategy's float settings (learning rate, std, decays, ...) as arrays, so that runs
    # differing only in them are one vmapped program (a sweep); see :attr:`Engine.hyper`.
    hyper: dict[str, jax.Array] = struct.field(default_factory=dict)
    # The env sampler's numeric bounds ("m.low", ...) as arrays, for the same reason; last, so a
    # checkpoint from before they were state is completed with the config's values.
    bounds: dict[str, jax.Array] = struct.field(default_factory=dict)

    if TYPE_CHECKING:  # added by flax's struct.dataclass, which type checkers do not see

        def replace(self, **changes: Any) -> RunState: ...


class BlockProgram(Protocol):
    """:attr:`Engine.run_block`: ``jax.jit``'s function, or a program kept on disk
    (:class:`esjax._src.run.programs.KeptProgram`); either is lowered to inspect what it compiles
    to."""

    def __call__(self, state: RunState, n: jax.Array) -> tuple[RunState, dict[str, jax.Array]]: ...

    def lower(self, state: RunState, n: jax.Array) -> jax.stages.Lowered: ...


@dataclass(frozen=True)
class Engine:
    """A task's rollouts and a strategy bound into jitted ``init``, ``run_block`` and ``evaluate``.

    * ``init(seeds, values=None) -> RunState`` with a leading seed axis; ``values`` maps each
      name in :attr:`hyper` and :attr:`bounds` to one value per seed (default: the strategy's
      own settings and the env sampler's own bounds).
    * ``run_block(state, n) -> (state, metrics)`` runs the first ``n`` of ``block`` generations;
      ``metrics`` leaves have shape ``(block, seeds)`` and rows ``>= n`` are padding.
    * ``evaluate(state) -> dict`` test returns of the search mean and of the last generation's
      best member over the fixed evaluation episodes: deterministic actions, frozen statistics.
    """

    step: StepConfig  # what every generation is built from; the programs below are bound to it
    num_dims: int
    hyper_names: tuple[str, ...]
    bounds: dict[str, float]  # the env sampler's bounds (traced, see RunState.bounds)
    sharding: NamedSharding
    population_rollout: Callable[..., RolloutResult]
    population_summary: Callable[..., PopulationSummary]
    init_batch: Callable[[jax.Array, dict[str, jax.Array], dict[str, jax.Array]], RunState]
    run_block: BlockProgram
    evaluate: Callable[[RunState], dict[str, jax.Array]]

    @property
    def rollout(self) -> PopulationRollout:
        return self.step.rollout

    @property
    def eval_rollout(self) -> PopulationRollout:
        return self.step.eval_rollout

    @property
    def strategy(self) -> Strategy:
        return self.step.strategy

    @property
    def unravel(self) -> Callable[[jax.Array], PyTree]:
        return self.step.layout.unravel

    @property
    def rollouts(self) -> int:
        return self.step.rollouts

    @property
    def block(self) -> int:
        return self.step.block

    @property
    def eval_episodes(self) -> int:
        return self.step.eval_episodes

    @property
    def normalize_obs(self) -> bool:
        return self.step.normalize_obs

    @property
    def popsize(self) -> int:
        return self.step.popsize

    @property
    def hyper(self) -> dict[str, float]:
        """The settings that are arrays in the compiled program, with this engine's values."""
        return {name: self.strategy.spec.settings[name] for name in self.hyper_names}

    @property
    def traced_names(self) -> tuple[str, ...]:
        """Every number that is an array in the compiled program: settings, then bounds."""
        return (*self.hyper_names, *self.bounds)

    def init(self, seeds: jax.Array, values: Mapping[str, ArrayLike] | None = None) -> RunState:
        seeds = jnp.asarray(seeds)
        values = {**self.hyper, **self.bounds, **(values or {})}

        def batch(names):
            return {
                name: jnp.broadcast_to(jnp.asarray(values[name], jnp.float32), seeds.shape)
                for name in names
            }

        return self.init_batch(seeds, batch(self.hyper_names), batch(self.bounds))

    def with_values(self, values: dict[str, float]) -> Engine:
        """This engine (the same compiled programs) with other values of :attr:`traced_names`."""
        spec = self.strategy.spec
        settings = {k: v for k, v in values.items() if k in self.hyper_names}
        spec = dataclasses.replace(spec, settings={**spec.settings, **settings})
        bounds = {k: values.get(k, v) for k, v in self.bounds.items()}
        strategy = dataclasses.replace(self.strategy, spec=spec)
        step = dataclasses.replace(self.step, strategy=strategy)
        return dataclasses.replace(self, step=step, bounds=bounds)

    def place(self, tree: PyTree) -> PyTree:
        """Arrays placed as the compiled functions expect them (replicated on the devices)."""
        return jax.device_put(tree, self.sharding)

    def obs_stats(self, state: RunState) -> ObsStats | None:
        """The (per-seed) statistics a policy of this state sees, or ``None`` without them."""
        return jax.vmap(norm_stats)(state.norm) if self.normalize_obs else None

    def policy_params(self, flat: jax.Array) -> PyTree:
        """Flat parameters (with a leading seed axis) as policy pytrees."""
        return jax.vmap(self.unravel)(flat)

    def mean_params(self, state: RunState) -> jax.Array:
        return state.strategy.mean

    def output_trees(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """``(block_tree, evaluation_tree)``: each takes the program's arguments and returns
        the structure of what :attr:`run_block` and :attr:`evaluate` return, from shapes
        alone (what :class:`esjax._src.run.programs.KeptProgram` needs to read a kept program
        back)."""
        metrics = generation_metric_shapes(self.popsize)
        pair = jax.ShapeDtypeStruct((2,), jnp.float32)  # of the (mean, best) members
        evaluation = jax.tree.structure(jax.eval_shape(evaluation_metrics, pair, pair))

        def block_tree(state: RunState, n_active: jax.Array) -> Any:
            return jax.tree.structure((state, metrics))

        return block_tree, lambda state: evaluation


def member_layout(rollout: PopulationRollout) -> MemberLayout:
    """A member's parameters as strategies see them: flat, how they unravel into the policy's
    pytree, and where its network multiplies by each leaf (read off the network once)."""
    template, unravel = flat_template(rollout, jax.random.key(0))
    return MemberLayout.of(unravel, int(template.size), rollout.policy.plan)


def flat_template(
    rollout: PopulationRollout, key: jax.Array
) -> tuple[jax.ShapeDtypeStruct, Callable]:
    """A member's flat parameter vector (its shape only) and how to unravel one.

    Found by tracing the policy's initialiser, not running it: run eagerly, every one of its
    small ops would be a program of its own to compile (or read from the cache) at start-up.
    """
    found = {}

    def flat_init(k):
        flat, found["unravel"] = ravel_pytree(rollout.init_params(k))
        return flat.astype(jnp.float32)

    shape = jax.eval_shape(flat_init, key)
    return shape, found["unravel"]


@dataclass(frozen=True)
class StepConfig:
    """What one generation is built from: rollouts, strategy and the loop's settings.

    Static: it shapes the compiled program and never enters a trace as data. The functions
    below take it first and are pure in everything else (the optax / brax-training style),
    so each job of a generation has a name and a home of its own.
    """

    rollout: PopulationRollout
    eval_rollout: PopulationRollout
    strategy: Strategy
    layout: MemberLayout  # a member's parameters: how they unravel, where they multiply
    mesh: Mesh
    rollouts: int
    block: int
    eval_episodes: int
    normalize_obs: bool
    env_groups: int  # members in this many groups, each sharing its episodes
    validate_top: int  # leading members re-tested before one is reported (1: none)
    validate_episodes: int
    worst_episodes: float  # a member's return: the mean of this fraction of its worst episodes
    antithetic: bool  # members come in antithetic pairs
    # ``callback(generation, metrics)`` after each generation, from inside the compiled loop
    # (:class:`esjax.Trainer`'s): under vmap, once per run.
    callback: Callable[[jax.Array, dict[str, jax.Array]], None] | None = None

    @classmethod
    def build(
        cls,
        rollout: PopulationRollout,
        eval_rollout: PopulationRollout,
        strategy: Strategy,
        layout: MemberLayout,
        *,
        rollouts: int,
        block: int,
        eval_episodes: int,
        normalize_obs: bool,
        callback: Callable[[jax.Array, dict[str, jax.Array]], None] | None = None,
    ) -> StepConfig:
        """The loop's settings read once from the strategy's spec (:class:`LoopSettings`)."""
        loop = strategy.spec.loop
        return cls(
            rollout=rollout,
            eval_rollout=eval_rollout,
            strategy=strategy,
            layout=layout,
            mesh=Mesh(np.array(rollout.devices), ("population",)),
            rollouts=int(rollouts),
            block=int(block),
            eval_episodes=int(eval_episodes),
            normalize_obs=bool(normalize_obs),
            env_groups=int(loop.env_groups),
            validate_top=min(int(loop.validate_top), strategy.popsize),
            validate_episodes=int(loop.validate_episodes or eval_episodes),
            worst_episodes=float(loop.worst_episodes),
            antithetic=antithetic(strategy.spec),
            callback=callback,
        )

    @property
    def popsize(self) -> int:
        return self.strategy.popsize

    @property
    def unravel(self) -> Callable[[jax.Array], PyTree]:
        return self.layout.unravel

    @property
    def sampler(self) -> EnvParamsSampler | None:
        return self.rollout.env_params_sampler

    def obs_stats(self, state: RunState) -> ObsStats | None:
        """The statistics the policy sees in ``state`` (None without normalisation)."""
        return norm_stats(state.norm) if self.normalize_obs else None


def member_keys(config: StepConfig, key: jax.Array) -> jax.Array:
    """The rollout key, or with ``env_groups`` every member's keys from its group's key.

    A member gets exactly the keys a rollout of its group alone would give it, so the whole
    population is still one sharded call (chunked to cache like any population).
    """
    groups, rollout = config.env_groups, config.rollout
    if groups == 1:
        return key
    size = config.popsize // groups
    per_group = jax.vmap(lambda k: rollout.rollout_keys(k, size, config.rollouts))(
        group_keys(key, groups)
    )
    data = jax.random.key_data(per_group)
    if rollout.common_env_keys:  # (groups, rollouts, 2) -> (groups, size, rollouts, 2)
        data = jnp.broadcast_to(data[:, None], (groups, size, *data.shape[1:]))
    return jax.random.wrap_key_data(ungroup_members(data, config.antithetic))


def population_rollout(
    config: StepConfig, key: jax.Array, params: PyTree, obs_stats: ObsStats | None
) -> RolloutResult:
    """Every member's episodes, sharded by member; with ``env_groups`` per-group starts."""
    return config.rollout.population(member_keys(config, key), params, config.rollouts, obs_stats)


def population_summary(
    config: StepConfig,
    key: jax.Array,
    params: PyTree,
    obs_stats: ObsStats | None,
    runs: int = 1,
    bounds: dict[str, jax.Array] | None = None,
) -> PopulationSummary:
    """Every member's mean return and the totals, the same on every device.

    What crosses devices here is one all-gather of one float per member and one small
    all-reduce (:meth:`PopulationRollout.summary`); ranking and ``tell`` then run replicated,
    so no sort is ever distributed. ``runs``: the seeds vmapped around it; ``bounds``: the env
    sampler's (traced) bounds.
    """
    return config.rollout.summary(member_keys(config, key), params, config.rollouts, obs_stats,
                                  runs, bounds, config.worst_episodes)  # fmt: skip


def init_state(
    config: StepConfig, key: jax.Array, hyper: dict[str, jax.Array], bounds: dict
) -> RunState:
    """One run's state before its first generation, from its key (:func:`seed_key`)."""
    keys = run_keys(key)
    policy_init, _ = ravel_pytree(config.rollout.init_params(keys["init"]))
    mean = config.strategy.initial_mean(policy_init.astype(jnp.float32))
    k_strategy, train = jax.random.split(keys["train"])
    return _strong(
        RunState(
            strategy=with_settings(config.strategy, hyper).init(k_strategy, mean),
            norm=norm_init(config.rollout.obs_size),
            key=jax.random.key_data(train),
            eval_key=jax.random.key_data(keys["evaluation"]),
            generation=jnp.zeros((), jnp.int32),
            gen_best=mean,
            hyper=hyper,
            bounds=bounds,
        )
    )


def init_seed(
    config: StepConfig, seed: jax.Array, hyper: dict[str, jax.Array], bounds: dict
) -> RunState:
    """:func:`init_state` of seed ``seed``'s key: how the command line starts a run."""
    return init_state(config, seed_key(seed), hyper, bounds)


def generation(
    config: StepConfig, state: RunState, runs: int = 1
) -> tuple[RunState, dict[str, jax.Array]]:
    """One generation of one seed: ask, roll out, tell, update the observation moments."""
    # Members are made inside rollout chunks, whatever the strategy's form. Placed by the form:
    # a materialised population replicated, antithetic OpenES's noise split by pairs over the
    # devices, low-rank members drawn where they are stepped; parameters never cross devices.
    strategy = with_settings(config.strategy, state.hyper)
    form = form_for(strategy)
    next_key, k_ask, k_rollout, k_tell = generation_keys(state.key)
    population, sstate = form.ask(strategy, k_ask, state.strategy, config.layout, config.mesh)
    summary = population_summary(config, k_rollout, population, config.obs_stats(state), runs,
                                 state.bounds)  # fmt: skip
    returns = summary.returns  # replicated: everything below runs on every device
    told = form.tell(strategy, k_tell, population, to_fitness(returns), sstate)
    if not strategy.population_based:
        # A generation with no finite return carries no signal: a mean-based search stays
        # where it was (CMA-style weights would otherwise move the mean and shrink the
        # covariance on a flat, all-tied fitness). A population-based one (GA, DE, PSO) goes
        # on, its variation alone moving it, as evosax's own loop would.
        sstate = tree_select(jnp.any(jnp.isfinite(returns)), told, sstate)
    else:
        sstate = told
    norm = norm_update(state.norm, summary) if config.normalize_obs else state.norm
    best = jnp.argmax(jnp.where(jnp.isfinite(returns), returns, -jnp.inf))
    new_state = RunState(
        strategy=sstate,
        norm=norm,
        key=next_key,
        eval_key=state.eval_key,
        generation=state.generation + 1,
        gen_best=population.member_flat(best),
        hyper=state.hyper,
        bounds=state.bounds,
    )
    metrics = generation_metrics(returns, summary.lengths)
    if config.callback is not None:
        reported = {"generation": new_state.generation, **metrics}
        jax.debug.callback(config.callback, new_state.generation, reported)
    return _strong(new_state), metrics


def generation_block(
    config: StepConfig, state: RunState, n_active: jax.Array, runs: int = 1
) -> tuple[RunState, dict[str, jax.Array]]:
    """The first ``n_active`` of ``config.block`` generations of one seed, in one scan."""
    step = functools.partial(generation, config, runs=runs)
    # The metrics' shapes, without tracing a whole generation a second time to find them.
    shapes = generation_metric_shapes(config.popsize)
    padding = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def body(state, index):
        # ``index`` and ``n_active`` are not batched over seeds, so under vmap this stays a
        # real conditional: padded steps cost nothing and never touch the state.
        return jax.lax.cond(index < n_active, step, lambda s: (s, padding), state)

    state, metrics = jax.lax.scan(body, state, jnp.arange(config.block))
    if config.validate_top > 1:
        state = report_validated(config, state)
    return state, metrics


def run_block(
    config: StepConfig, state: RunState, n_active: jax.Array
) -> tuple[RunState, dict[str, jax.Array]]:
    """:func:`generation_block` for every seed of ``state`` (its leading axis) at once."""
    # Every seed's population steps together inside the rollout's chunks, so the chunks are
    # sized for all of them (a sweep stacks hundreds of runs here).
    one = functools.partial(generation_block, config, runs=int(state.generation.shape[0]))
    return jax.vmap(one, in_axes=(0, None), out_axes=(0, 1))(state, n_active)


def report_validated(config: StepConfig, state: RunState) -> RunState:
    """Report the best of the leading members on fresh episodes, not the luckiest draw.

    A population-based algorithm reports the member with the best training fitness; with few
    noisy rollouts that is the luckiest of many near-equal members (a GA's population
    converges to them), and one that tests worse than most. Each of ``validate_top`` leaders
    is re-tested on ``validate_episodes`` evaluation-like episodes drawn afresh per generation
    (from the evaluation key folded with the generation: other episodes than the evaluation's,
    though under threefry's partitionable splitting that key is evaluation episode
    ``generation``'s, whose sub-keys seed the first validation episodes), and the best is
    reported. Ties go to the
    better training fitness, so the episodes must be enough to show a rare failure. Only the
    report changes: the search reads its population, never this member. The key depends on
    the generation alone, so resumed or differently blocked runs report the same member.
    """
    candidates = config.strategy.leading_members(state.strategy, config.validate_top)
    key = jax.random.fold_in(jax.random.wrap_key_data(state.eval_key), state.generation)
    returns = held_out_returns(config, state, candidates, key, config.validate_episodes)
    scores, _ = mean_and_std(returns)
    chosen = candidates[jnp.argmax(jnp.where(jnp.isfinite(scores), scores, -jnp.inf))]
    return state.replace(strategy=config.strategy.report(state.strategy, chosen))


def held_out_returns(
    config: StepConfig, state: RunState, members: jax.Array, key: jax.Array, episodes: int
) -> jax.Array:
    """``(members, episodes)`` returns of flat ``members`` through the evaluation rollout.

    Frozen statistics, on the episodes of ``key``: evaluation and validation alike.
    """
    # Evaluation episodes are drawn with this run's bounds when the sampler is the same.
    same = config.eval_rollout.env_params_sampler is config.sampler
    result = config.eval_rollout.population(
        key,
        jax.vmap(config.unravel)(members),
        episodes,
        config.obs_stats(state),
        bounds=state.bounds if same else None,
    )
    return result.returns


def evaluate(config: StepConfig, state: RunState) -> dict[str, jax.Array]:
    """The search mean and the last generation's best member on the evaluation episodes."""
    members = jnp.stack([state.strategy.mean, state.gen_best])
    key = jax.random.wrap_key_data(state.eval_key)
    returns = held_out_returns(config, state, members, key, config.eval_episodes)
    mean, std = mean_and_std(returns)  # over episodes, of (mean, best)
    return evaluation_metrics(mean, std)


def make_engine(
    rollout: PopulationRollout,
    eval_rollout: PopulationRollout,
    strategy_fn: Callable[[int], Strategy],
    *,
    rollouts: int = 1,
    block: int = 10,
    eval_episodes: int = 128,
    normalize_obs: bool = False,
    remember: Remember = compute_now,
    callback: Callable[[jax.Array, dict[str, jax.Array]], None] | None = None,
) -> Engine:
    """Bind rollouts and a strategy (built by ``strategy_fn(num_dims)``, once) into an engine.

    The one place an :class:`Engine` is made. ``remember(kind, key, compute)`` may return a
    result an earlier process computed for the same key (the host passes
    :func:`esjax._src.run.cache.remembered`); nothing here reads or writes files itself.
    """
    layout = member_layout(rollout)
    num_dims = layout.num_dims
    strategy = strategy_fn(num_dims)
    if int(block) <= 0:
        raise ValueError(f"block must be positive, got {block}")
    config = StepConfig.build(rollout, eval_rollout, strategy, layout, rollouts=rollouts,
                              block=block, eval_episodes=eval_episodes,
                              normalize_obs=normalize_obs, callback=callback)  # fmt: skip
    # Numbers of the env sampler (its ranges) are arrays too, so a sweep over them is one program.
    sampler = rollout.env_params_sampler
    bounds = sampler.bounds() if isinstance(sampler, BoundedSampler) else {}
    # The state lives replicated on the rollout's devices, in and out of every call, so a block
    # fed the previous block's output (or a restored checkpoint) never recompiles.
    replicated = NamedSharding(config.mesh, P())
    bind = functools.partial
    return Engine(
        step=config,
        num_dims=num_dims,
        hyper_names=traced_settings(strategy, remember),
        bounds=bounds,
        sharding=replicated,
        population_rollout=bind(population_rollout, config),
        population_summary=bind(population_summary, config),
        init_batch=jax.jit(jax.vmap(bind(init_seed, config)), out_shardings=replicated),
        run_block=jax.jit(bind(run_block, config), out_shardings=replicated),
        evaluate=jax.jit(jax.vmap(bind(evaluate, config))),
    )


def generation_metrics(returns: jax.Array, lengths: jax.Array) -> dict[str, jax.Array]:
    """What a generation reports: its members' return statistics and the env steps it took."""
    return {**return_stats(returns), "env_steps": lengths.astype(jnp.int32)}


def generation_metric_shapes(popsize: int) -> dict[str, jax.ShapeDtypeStruct]:
    """The shapes of one generation's :func:`generation_metrics`, without running one."""
    returns = jax.ShapeDtypeStruct((popsize,), jnp.float32)
    return jax.eval_shape(generation_metrics, returns, jax.ShapeDtypeStruct((), jnp.int32))


def evaluation_metrics(mean: jax.Array, std: jax.Array) -> dict[str, jax.Array]:
    """What an evaluation reports, from the mean and std of the (mean, best) members' returns."""
    return {"eval_return": mean[0], "eval_best_return": mean[1], "eval_return_std": std[0]}


def _strong(tree: PyTree) -> PyTree:
    """Every leaf as a strongly typed array of its own dtype.

    evosax keeps Python scalars in some states (a constant std, the generation counter); left
    weakly typed they would make a state restored from a checkpoint a different type from the
    one the block was compiled for.
    """
    return jax.tree.map(lambda x: jnp.asarray(x).astype(jnp.asarray(x).dtype), tree)


# ---------------------------------------------------------------------------- host conversions
# Checkpoints name every array by where it sits in the state, so restoring matches arrays by
# name: a reordered RunState or a changed evosax state is restored correctly or refused, never
# mis-assigned between arrays of equal shape (as restoring by position could).
STATE_PREFIX = "state/"


def _key_name(key: object) -> str:
    """One pytree path entry as written in checkpoints.

    Spelled out here rather than taken from ``jax.tree_util.keystr``, whose format is JAX's to
    change, while these names are a file format.
    """
    for attr in ("name", "key", "idx"):  # GetAttrKey; DictKey and FlattenedIndexKey; SequenceKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    raise TypeError(f"cannot name the pytree path entry {key!r}")


def leaf_names(tree: PyTree, prefix: str = STATE_PREFIX) -> list[str]:
    """The checkpoint name of every leaf of ``tree``, in ``jax.tree.leaves`` order."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    names = [prefix + "/".join(_key_name(k) for k in path) for path in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"two state arrays would share a checkpoint name: {names}")
    return names


def check_arrays(
    arrays: Mapping[str, np.ndarray | jax.Array], expected: Mapping[str, np.ndarray | jax.Array]
) -> None:
    """Refuse ``arrays`` unless they have exactly ``expected``'s names, shapes and dtypes.

    One line naming the first offending array, so a damaged or foreign checkpoint says what is
    wrong with it instead of failing later inside a compiled block.
    """
    missing = [name for name in expected if name not in arrays]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"checkpoint lacks array {missing[0]!r}{more}")
    extra = [name for name in arrays if name not in expected]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ValueError(f"checkpoint array {extra[0]!r}{more} is not part of this run")
    for name, want in expected.items():
        got = arrays[name]
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            raise ValueError(
                f"checkpoint array {name!r} is {got.dtype}{list(got.shape)}, "
                f"this run needs {want.dtype}{list(want.shape)}"
            )


def to_host(state: RunState) -> dict[str, np.ndarray]:
    """The state's leaves as NumPy arrays named by their path (``state/strategy/mean``, ...)."""
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(jax.device_get(state))]
    return dict(zip(leaf_names(state), leaves, strict=True))


def from_host(template: RunState, arrays: Mapping[str, np.ndarray]) -> RunState:
    """A state shaped like ``template`` from :func:`to_host` arrays, matched by name only.

    Names outside ``state/`` (the host's part of a checkpoint) are left to the caller; a
    missing, unknown or differently shaped ``state/`` array is a ValueError naming it.
    """
    expected = dict(zip(leaf_names(template), jax.tree.leaves(template), strict=True))
    mine = {name: array for name, array in arrays.items() if name.startswith(STATE_PREFIX)}
    check_arrays(mine, expected)
    leaves = [np.asarray(mine[name]) for name in expected]
    return jax.tree.unflatten(jax.tree.structure(template), leaves)


def phase_functions(engine: Engine) -> dict[str, Callable]:
    """Jitted pieces of one generation of one seed, for timing where a generation goes.

    ``generation(key, sstate)`` is the fused step; ``ask(key, sstate) -> population``,
    ``rollout(key, population) -> returns`` (each member's mean return, reduced and gathered
    as in the loop) and ``tell(key, population, returns, sstate)`` are its parts compiled on
    their own.
    """
    strategy, layout, mesh = engine.strategy, engine.step.layout, engine.step.mesh
    form = form_for(strategy)

    def generation(key, sstate):
        k_ask, k_rollout, k_tell = jax.random.split(key, 3)
        population = ask(k_ask, sstate)
        returns = rollout(k_rollout, population)
        return tell(k_tell, population, returns, sstate)

    def ask(key, sstate):
        return form.ask(strategy, key, sstate, layout, mesh)[0]  # placed as in the loop

    def rollout(key, population):
        return engine.population_summary(key, population, None).returns

    def tell(key, population, returns, sstate):
        return form.tell(strategy, key, population, to_fitness(returns), sstate)

    return {
        "generation": jax.jit(generation),
        "ask": jax.jit(ask),
        "rollout": jax.jit(rollout),
        "tell": jax.jit(tell),
    }
