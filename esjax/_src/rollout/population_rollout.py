"""Population rollouts: one jitted call evaluates every member of a population on a gymnax env.

Each episode is a ``lax.scan`` over steps, run in segments that stop once every episode of the
batch has ended: a population of early crashes does not pay for the full episode length.
Episodes are ``vmap``-ed over env keys (and sampled env parameters), then over population
members. At large popsizes the members are evaluated in cache-sized chunks (``lax.map`` with
``batch_size``): when all 2048 members advance one step together, every member's weights are
streamed from memory at every step; a chunk keeps its weights in cache for the whole episode.

Rollouts return summaries only (returns, valid lengths, masked observation moments), so peak
memory does not grow with episode length; ``trajectory=True`` opts into per-step data.
``summary`` goes one step further for a training generation: each device reduces its own
members, and only one return per member crosses devices.

Where each job lives: the step itself is :class:`esjax._src.rollout.episode.EpisodeStep` and
:func:`esjax._src.envs.core.env_step`; which device steps which members is
:mod:`esjax._src.rollout.sharding`; the masked scan step, the early-exit loop and the chunking are
this module's functions, and :class:`PopulationRollout` binds an env, a policy and devices to them
behind four jitted calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from esjax._src.envs.core import Env, EnvParams, env_step, make_env
from esjax._src.policies.networks import Policy, PolicySpec, as_spec
from esjax._src.rollout import sharding
from esjax._src.rollout.episode import EpisodeStep, episode_keys, split_step_key, step_keys
from esjax._src.strategies.fitness import member_returns
from esjax._src.strategies.population import Population, as_population

PyTree = Any
EnvParamsSampler = Callable[[jax.Array, EnvParams], EnvParams]


@runtime_checkable
class BoundedSampler(Protocol):
    """An env params sampler whose numeric ranges (its *bounds*) may be replaced, by traced
    arrays too, so runs that differ only in them share one compiled rollout
    (:class:`esjax._src.engine.tasks.ParamSampler`)."""

    def __call__(self, key: jax.Array, default_params: EnvParams) -> EnvParams: ...

    def bounds(self) -> dict[str, float]:
        """The bounds by name (``"<param>.<field>"``), with this sampler's values."""
        ...

    def with_bounds(self, values: Mapping[str, ArrayLike]) -> BoundedSampler:
        """This sampler with some bounds replaced."""
        ...


# Bytes of member weights a chunk may hold: about a per-core L2 cache (measured best on the
# MLP 64-64 at 2048 members, see benchmarks/README.md).
CHUNK_PARAM_BYTES = 1 << 20
# About the steps between checks for "has every episode in the batch ended?": an episode loop
# stops at the first check after its last episode ends, so a population that dies in 12 steps
# of a 1000-step episode does not pay for the other 988 (see segment_steps).
SEGMENT_STEPS = 16


@struct.dataclass
class ObsStats:
    """Observation normalisation statistics applied before the policy sees an observation."""

    mean: jax.Array
    std: jax.Array


@struct.dataclass
class RolloutResult:
    """Per-rollout summaries; leading axes are ``(popsize, num_rollouts)`` for ``population``.

    ``obs_sum`` and ``obs_sq_sum`` are sums of the raw observations over valid steps only, so
    normalisation statistics never see steps after termination.
    """

    returns: jax.Array
    lengths: jax.Array
    obs_sum: jax.Array
    obs_sq_sum: jax.Array
    trajectory: PyTree = None


@struct.dataclass
class PopulationSummary:
    """A population's rollouts reduced to what a training generation needs, on every device.

    ``returns`` is each member's mean return over its rollouts, shape ``(popsize,)``;
    ``lengths`` (valid env steps) and the observation sums are totals over all members and
    rollouts. Only ``returns`` grows with the population, so it is the only per-member data
    that crosses devices. :func:`obs_moments` accepts it like a :class:`RolloutResult`.
    """

    returns: jax.Array
    lengths: jax.Array
    obs_sum: jax.Array
    obs_sq_sum: jax.Array


@struct.dataclass
class Trajectory:
    """Per-step data, only with ``trajectory=True``; ``valid`` masks post-termination steps."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    done: jax.Array
    valid: jax.Array


def tree_select(keep_new: jax.Array, new: PyTree, old: PyTree) -> PyTree:
    """``new`` where ``keep_new`` holds, else ``old``, leaf by leaf."""
    return jax.tree.map(lambda a, b: jnp.where(keep_new, a, b), new, old)


class PopulationRollout:
    """Evaluate a policy, a batch of rollouts, or a whole population on a gymnax env.

    Args:
        env: a gymnax env id (``"Pendulum-v1"``) or any gymnax-style env object.
        policy: a policy spec (``esjax.policies.MLP`` / ``LSTM`` / ``GRU`` / ``CNN``), your own
            network (a flax linen or NNX module, an equinox module, plain ``(init, apply)``
            functions) or a built :class:`Policy`.
        episode_length: steps per episode (default: the env's ``max_steps_in_episode``).
        env_params: fixed env params (default: the env's defaults).
        env_params_sampler: ``(key, default_params) -> params`` drawn once per rollout; this is
            how task variants (masses, lengths, bandit probabilities) enter.
        common_env_keys: every member sees the same env keys (common random numbers), so
            antithetic pairs are compared on the same starts. ``False`` gives each member its own.
        deterministic: greedy actions for discrete heads (sampled otherwise).
        chunk_size: members evaluated together; ``None`` picks a cache-sized chunk.
        devices: devices to shard the population over (default: all devices, every process's
            in a multi-process run). A CPU host shows one device per core after
            :func:`esjax.use_cpu_cores`.
        param_inputs: env parameter names whose values are appended to every observation the
            policy sees (an oracle that knows the variant it is given).
        frame_stack: the policy sees the last ``frame_stack`` observations (zeros before the
            first), a memory that needs no recurrence.
        early_exit: stop an episode batch once every episode in it has ended. The default
            (``None``) does so unless the env can never end an episode before
            ``episode_length`` (Pendulum, the bandits): there is nothing to skip there, and
            the loop that checks compiles about 30 % slower than a plain scan.
    """

    def __init__(
        self,
        env: str | Env,
        policy: PolicySpec | Policy,
        episode_length: int | None = None,
        *,
        env_params: EnvParams = None,
        env_kwargs: dict | None = None,
        env_params_sampler: EnvParamsSampler | None = None,
        common_env_keys: bool = True,
        deterministic: bool = True,
        chunk_size: int | None = None,
        devices: list | None = None,
        param_inputs: tuple[str, ...] = (),
        frame_stack: int = 1,
        early_exit: bool | None = None,
        reward_shift: float = 0.0,
    ):
        self.env, default_params = make_env(env, env_kwargs, params=env_params)
        # What built this rollout, for replace(): the env object (already made) and the policy.
        self._built_from = dict(
            env=self.env, policy=policy, episode_length=episode_length, env_params=env_params,
            env_params_sampler=env_params_sampler, common_env_keys=common_env_keys,
            deterministic=deterministic, chunk_size=chunk_size, devices=devices,
            param_inputs=param_inputs, frame_stack=frame_stack, early_exit=early_exit,
            reward_shift=reward_shift,
        )  # fmt: skip
        self.env_params = default_params if env_params is None else env_params
        self.env_params_sampler = env_params_sampler
        self.common_env_keys = common_env_keys
        self.deterministic = deterministic
        self.chunk_size = chunk_size
        self.devices = list(devices) if devices is not None else jax.devices()
        self.episode_length = _episode_length(episode_length, self.env_params)
        if early_exit is None:
            early_exit = can_end_early(self.env, self.env_params, self.episode_length)
        self.early_exit = bool(early_exit)
        # Subtracted from each step's reward in the returns this rollout sums (never in what a
        # policy is shown): ARS's training rollouts drop locomotion's per-step alive bonus so
        # standing still stops paying. Test and evaluation rollouts keep it at 0.
        self.reward_shift = float(reward_shift)
        self.obs_shape, self.episode = _bind_episode(
            self.env, self.env_params, policy, deterministic, param_inputs, frame_stack
        )
        self.policy, self.obs_size = self.episode.policy, self.episode.obs_size
        self.param_inputs, self.frame_stack = self.episode.param_inputs, self.episode.frame_stack

        self._single = jax.jit(partial(_episode, self), static_argnames=("trajectory",))
        self._batch = jax.jit(
            partial(_episodes, self), static_argnames=("num_rollouts", "trajectory")
        )
        self._population = jax.jit(
            partial(_population, self), static_argnames=("num_rollouts", "trajectory")
        )
        self._summary = jax.jit(
            partial(_summary, self), static_argnames=("num_rollouts", "runs", "worst_episodes")
        )

    # ------------------------------------------------------------------ public API
    def replace(self, **changes: Any) -> PopulationRollout:
        """A new rollout like this one with some constructor arguments changed.

        A rollout's jitted functions trace what it holds, so a variant (a lesioned policy, a
        sampler that pins a grid cell) is a new rollout rather than an edited one.
        ``policy`` may be a built :class:`Policy`.
        """
        unknown = sorted(set(changes) - set(self._built_from))
        if unknown:
            raise TypeError(f"PopulationRollout has no argument {unknown[0]!r}")
        return PopulationRollout(**{**self._built_from, **changes})

    def init_params(self, key: jax.Array) -> PyTree:
        """One member's parameter pytree."""
        return self.policy.init(key)

    def single(
        self,
        key: jax.Array,
        params: PyTree,
        obs_stats: ObsStats | None = None,
        trajectory: bool = False,
    ) -> RolloutResult:
        """One episode of one member; scalar summaries."""
        return self._single(key, params, self._stats(obs_stats), trajectory=trajectory)

    def batch(
        self,
        key: jax.Array,
        params: PyTree,
        num_rollouts: int,
        obs_stats: ObsStats | None = None,
        trajectory: bool = False,
    ) -> RolloutResult:
        """``num_rollouts`` episodes of one member; summaries of shape ``(num_rollouts,)``."""
        _check_positive("num_rollouts", num_rollouts)
        return self._batch(key, params, self._stats(obs_stats), num_rollouts=num_rollouts,
                           trajectory=trajectory)  # fmt: skip

    def population(
        self,
        key: jax.Array,
        pop_params: PyTree,
        num_rollouts: int = 1,
        obs_stats: ObsStats | None = None,
        trajectory: bool = False,
        bounds: dict[str, jax.Array] | None = None,
    ) -> RolloutResult:
        """Every member (leading axis of ``pop_params``) for ``num_rollouts`` episodes each.

        ``key`` is one key (split as :meth:`rollout_keys` does) or every member's rollout keys,
        shape ``(popsize, num_rollouts)``, for callers that choose episode starts per member.
        Results stay sharded over the devices, member by member. ``bounds`` replaces some of
        the env sampler's bounds (see :meth:`sample_env_params`).
        """
        args = self._population_args(key, pop_params, num_rollouts, obs_stats, bounds)
        return self._population(*args, num_rollouts=num_rollouts, trajectory=trajectory)

    def compile_population(
        self,
        key: jax.Array,
        pop_params: PyTree,
        num_rollouts: int = 1,
        obs_stats: ObsStats | None = None,
    ) -> int:
        """Compile :meth:`population` for these arguments' shapes, without running it; returns
        the bytes its run will hold on each device (XLA's memory analysis: arguments, outputs
        and scratch), 0 where the backend does not say.

        A later call with arguments of the same shapes, dtypes and placement finds the
        program compiled (JAX keeps it with the jitted function), so a caller can compile
        ahead, in a thread of its own, what it will run later, or check that it fits before
        running it. The numbers do not change.
        """
        args = self._population_args(key, pop_params, num_rollouts, obs_stats, None)
        lowered = self._population.lower(*args, num_rollouts=num_rollouts, trajectory=False)
        return _held_bytes(lowered.compile())

    def _population_args(self, key, pop_params, num_rollouts, obs_stats, bounds) -> tuple:
        """What :meth:`population` hands its jitted program, in one place: a program compiled
        ahead is found again only for arguments of the very same shapes and kinds."""
        _check_positive("num_rollouts", num_rollouts)
        return key, pop_params, self._stats(obs_stats), bounds or {}

    def summary(
        self,
        key: jax.Array,
        pop_params: PyTree,
        num_rollouts: int = 1,
        obs_stats: ObsStats | None = None,
        runs: int = 1,
        bounds: dict[str, jax.Array] | None = None,
        worst_episodes: float = 1.0,
    ) -> PopulationSummary:
        """``population`` reduced on each device, then made the same on every device.

        Each device averages its members' returns over their rollouts and sums their lengths
        and observation sums; then one all-gather of one float per member and one all-reduce
        of ``1 + 2 * obs_size`` numbers. Padding members never enter either. ``key`` as in
        :meth:`population`. ``runs``: how many calls a ``vmap`` around this one batches
        together (seeds, sweep configurations); chunks shrink so that all of them together
        stay cache-sized (:meth:`auto_chunk_size`). ``bounds`` as in :meth:`population`.
        ``worst_episodes``: each member's return is the mean of this fraction of its rollouts,
        the lowest (:func:`esjax._src.strategies.fitness.member_returns`).
        """
        _check_summary_args(num_rollouts, runs, worst_episodes)
        return self._summary(key, pop_params, self._stats(obs_stats), bounds or {},
                             num_rollouts=num_rollouts, runs=int(runs),
                             worst_episodes=float(worst_episodes))  # fmt: skip

    def rollout_keys(self, key: jax.Array, popsize: int, num_rollouts: int) -> jax.Array:
        """The per-rollout keys ``population`` uses: shared across members or one per member."""
        if self.common_env_keys:
            return jax.random.split(key, num_rollouts)
        return jax.random.split(key, (popsize, num_rollouts))

    def sample_env_params(
        self, key: jax.Array, bounds: dict[str, jax.Array] | None = None
    ) -> EnvParams:
        """The env params a rollout with this key runs on.

        ``bounds`` (possibly traced) replace the sampler's own through its ``with_bounds``
        (:class:`BoundedSampler`), so runs that differ only in a sampler's range share one
        compiled rollout.
        """
        if self.env_params_sampler is None:
            return self.env_params
        sampler = self.env_params_sampler
        if bounds:
            if not isinstance(sampler, BoundedSampler):
                raise TypeError(f"bounds given, but the env params sampler {sampler!r} has none")
            sampler = sampler.with_bounds(bounds)
        return sampler(key, self.env_params)

    def auto_chunk_size(self, popsize: int, members: Population | PyTree, runs: int = 1) -> int:
        """Members per chunk of ``members`` (a population, or parameters with a leading member
        axis: shapes are enough), by :meth:`chunk_members`."""
        return self.chunk_members(popsize, as_population(members).member_bytes(), runs)

    def chunk_members(self, popsize: int, member_bytes: int, runs: int = 1) -> int:
        """Members per chunk when each holds ``member_bytes`` in it: ``chunk_size`` if pinned,
        else :func:`cache_chunk_size` for these devices. Read when a population is traced, so
        a later ``chunk_size`` applies then."""
        platform = self.devices[0].platform
        return cache_chunk_size(popsize, member_bytes, runs, pinned=self.chunk_size,
                                platform=platform)  # fmt: skip

    # ------------------------------------------------------------------ implementation
    def _stats(self, obs_stats: ObsStats | None) -> ObsStats:
        if obs_stats is None:
            return ObsStats(jnp.zeros(self.obs_size), jnp.ones(self.obs_size))
        return obs_stats


def _held_bytes(compiled: Any) -> int:
    """Bytes a compiled program holds on each device (arguments, outputs, scratch), by XLA's
    memory analysis; 0 where the backend does not say."""
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # a backend without the analysis: nothing to say
        return 0
    if analysis is None:
        return 0
    parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
    return int(sum(getattr(analysis, part, 0) for part in parts))


# ---------------------------------------------------------------------------- the programs
# What a rollout's jitted functions trace, each taking the rollout first (its env, episode and
# settings are constants of the program).
def _episode(rollout, key, params, obs_stats, trajectory=False, bounds=None):
    """One episode of one member: :func:`_masked_step` scanned over the step keys, stopped
    early (:func:`_scan_while_alive`) once the episode has ended if ``early_exit``."""
    k_params, k_reset, k_episode = episode_keys(key)
    env_params = rollout.sample_env_params(k_params, bounds)
    init = _start_carry(rollout.env, rollout.episode, env_params, k_reset)
    step = _masked_step(rollout.env, rollout.episode, env_params, params, obs_stats, trajectory,
                        rollout.reward_shift)  # fmt: skip
    keys = step_keys(k_episode, rollout.episode_length)
    if trajectory or not rollout.early_exit:
        final, traj = jax.lax.scan(step, init, keys)
    else:
        final, traj = _scan_while_alive(step, init, keys, lambda carry: carry[3]), None
    ret, length, obs_sum, obs_sq_sum = final[4:8]
    return RolloutResult(ret, length, obs_sum, obs_sq_sum, traj)


def _episodes(rollout, key, params, obs_stats, num_rollouts, trajectory=False):
    return _over_keys(rollout, jax.random.split(key, num_rollouts), params, obs_stats, trajectory)


def _over_keys(rollout, keys, params, obs_stats, trajectory, bounds=None):
    episodes = jax.vmap(partial(_episode, rollout), in_axes=(0, None, None, None, None))
    return episodes(keys, params, obs_stats, trajectory, bounds)


def _population(rollout, key, pop_params, obs_stats, bounds, num_rollouts, trajectory=False):
    population = as_population(pop_params)
    keys = _member_keys(key, population.popsize, num_rollouts, rollout.rollout_keys)

    def local(keys, members, inputs, valid, axis):
        return _population_local(rollout, keys, members, *inputs, trajectory)

    inputs, out_specs = (obs_stats, bounds), P(sharding.AXIS)
    result = sharding.over_devices(local, rollout.devices, keys, population, inputs, out_specs)
    return jax.tree.map(population.in_member_order, result)


def _summary(rollout, key, pop_params, obs_stats, bounds, num_rollouts, runs=1, worst_episodes=1.0):
    population = as_population(pop_params)
    keys = _member_keys(key, population.popsize, num_rollouts, rollout.rollout_keys)

    def local(keys, members, inputs, valid, axis):
        result = _population_local(rollout, keys, members, *inputs, False, runs)
        return _reduce_members(result, valid, axis, worst_episodes)

    inputs = (obs_stats, bounds)
    summary = sharding.over_devices(local, rollout.devices, keys, population, inputs, P())
    return summary.replace(returns=population.in_member_order(summary.returns))


def _population_local(rollout, keys, population, obs_stats, bounds, trajectory, runs=1):
    """One device's members, each over its rollouts, a chunk at a time (:func:`map_members`)."""

    def member(member_keys, params):
        return _over_keys(rollout, member_keys, params, obs_stats, trajectory, bounds)

    return map_members(member, keys, population, partial(rollout.auto_chunk_size, runs=runs))


def _bind_episode(
    env: Env,
    env_params: EnvParams,
    policy: PolicySpec | Policy,
    deterministic: bool,
    param_inputs: tuple[str, ...],
    frame_stack: int,
) -> tuple[tuple[int, ...], EpisodeStep]:
    """The env's observation shape and the episode step of ``policy`` built for this env.

    The policy's input size follows from what it is shown: ``frame_stack`` observations and
    the ``param_inputs`` values, checked here against the env's parameters. A built
    :class:`Policy` is taken as it is.
    """
    # Traced, not run: an eager reset dispatches op by op, seconds for a MuJoCo model.
    obs = jax.eval_shape(lambda key: env.reset(key, env_params)[0], jax.random.key(0))
    obs_shape = tuple(obs.shape)
    obs_size = math.prod(obs_shape)
    valid_params = [n for n in vars(env_params) if not n.startswith("_")]
    for name in param_inputs:
        if name not in valid_params:
            raise ValueError(
                f"param input {name!r} is not an env parameter; valid: {', '.join(valid_params)}"
            )
    if int(frame_stack) <= 0:
        raise ValueError(f"frame_stack must be positive, got {frame_stack}")
    param_inputs, frame_stack = tuple(param_inputs), int(frame_stack)
    if not isinstance(policy, Policy):
        policy = as_spec(policy)  # a user's network object, as it is
        features = obs_size * frame_stack + len(param_inputs)
        action_space = env.action_space(env_params)
        policy = policy.build(
            features, action_space, deterministic, obs_shape=obs_shape, frame_stack=frame_stack
        )
    return obs_shape, EpisodeStep(policy, obs_size, frame_stack, param_inputs)


def _episode_length(episode_length: int | None, env_params: EnvParams) -> int:
    """The steps per episode asked for, or the env's own time limit."""
    if episode_length is None:
        episode_length = int(env_params.max_steps_in_episode)
    if int(episode_length) <= 0:
        raise ValueError(f"episode_length must be positive, got {episode_length}")
    return int(episode_length)


def _start_carry(
    env: Env, episode: EpisodeStep, env_params: EnvParams, k_reset: jax.Array
) -> tuple:
    """The carry of :func:`_masked_step` after a reset: alive, nothing summed yet.

    ``(obs, env_state, policy_state, alive, return, length, obs_sum, obs_sq_sum)``.
    """
    obs, env_state = env.reset(k_reset, env_params)
    obs = jnp.asarray(obs, jnp.float32).reshape(-1)
    zero = jnp.zeros((), jnp.float32)
    return (obs, env_state, episode.start(), jnp.array(True), zero,
            jnp.zeros((), jnp.int32), jnp.zeros_like(obs), jnp.zeros_like(obs))  # fmt: skip


def _masked_step(
    env: Env,
    episode: EpisodeStep,
    env_params: EnvParams,
    params: PyTree,
    obs_stats: ObsStats,
    trajectory: bool,
    reward_shift: float = 0.0,
) -> Callable[[tuple, jax.Array], tuple[tuple, Trajectory | None]]:
    """The scan step of one episode: :class:`EpisodeStep` and :func:`env_step`, masked.

    A batch of episodes steps together until the last one ends, so every step after an
    episode's end must leave its summaries as they were: only steps taken while alive count,
    and the env and the recurrent state are frozen past the boundary.
    """
    policy = episode.policy
    known_params = episode.known_params(env_params)

    def step(carry, step_key):
        obs, env_state, pstate, alive, ret, length, obs_sum, obs_sq_sum = carry
        k_act, k_env = split_step_key(step_key)
        action, pstate = episode.act(params, obs_stats, pstate, obs, known_params, k_act)
        next_obs, next_state, reward, done = env_step(env, k_env, env_state, action, env_params)
        next_obs = jnp.asarray(next_obs, jnp.float32).reshape(-1)
        reward = jnp.asarray(reward, jnp.float32).reshape(())
        # Masking: only steps taken while alive count. `where`, not a product, so a NaN
        # reward after termination cannot leak into the return.
        ret = ret + jnp.where(alive, reward - reward_shift, 0.0)
        length = length + alive.astype(jnp.int32)
        obs_sum = obs_sum + jnp.where(alive, obs, 0.0)
        obs_sq_sum = obs_sq_sum + jnp.where(alive, obs * obs, 0.0)
        ended = jnp.logical_and(alive, done)
        # After termination the env is frozen and the recurrent state reset, so nothing
        # computed past the boundary depends on the finished episode.
        keep = jnp.logical_and(alive, ~done)
        next_state = tree_select(keep, next_state, env_state)
        next_obs = jnp.where(keep, next_obs, obs)
        pstate = pstate.replace(carry=tree_select(keep, pstate.carry, policy.initial_carry()))
        pstate = episode.observe(pstate, action, reward, done.astype(jnp.float32))
        new_carry = (next_obs, next_state, pstate, keep, ret, length, obs_sum, obs_sq_sum)
        out = Trajectory(obs, action, reward, ended | ~alive, alive) if trajectory else None
        return new_carry, out

    return step


def _member_keys(
    key: jax.Array, popsize: int, num_rollouts: int, rollout_keys: Callable
) -> jax.Array:
    """Shared keys ``(num_rollouts,)`` or every member's ``(popsize, num_rollouts)``.

    One key is split by ``rollout_keys`` (:meth:`PopulationRollout.rollout_keys`); member
    keys chosen by the caller are checked and taken as they are.
    """
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):  # a raw uint32 key (PRNGKey)
        key = jax.random.wrap_key_data(key)
    if key.ndim == 0:
        return rollout_keys(key, popsize, num_rollouts)
    if key.shape != (popsize, num_rollouts):
        raise ValueError(f"member keys must have shape {(popsize, num_rollouts)}, got {key.shape}")
    return key


def _reduce_members(
    result: RolloutResult, valid: jax.Array, axis: str | None, worst_episodes: float
) -> PopulationSummary:
    """One device's results reduced to a :class:`PopulationSummary`, the same on every device.

    Returns are reduced per member and in the member's own order of additions, so they are the
    same bits on any number of devices, and then gathered (one float per member); the sums are
    partial sums per device, padding members left out, then all-reduced.
    """
    returns = member_returns(result.returns, worst_episodes)
    lengths = jnp.sum(jnp.where(valid[:, None], result.lengths, 0))
    obs_sum = jnp.sum(jnp.where(valid[:, None, None], result.obs_sum, 0.0), axis=(0, 1))
    obs_sq = jnp.sum(jnp.where(valid[:, None, None], result.obs_sq_sum, 0.0), axis=(0, 1))
    if axis is not None:
        returns = jax.lax.all_gather(returns, axis, tiled=True)
        lengths, obs_sum, obs_sq = jax.lax.psum((lengths, obs_sum, obs_sq), axis)
    return PopulationSummary(returns, lengths, obs_sum, obs_sq)


def cache_chunk_size(
    popsize: int,
    member_bytes: int,
    runs: int = 1,
    *,
    pinned: int | None = None,
    platform: str = "cpu",
) -> int:
    """Members per chunk: cache-sized on CPU; the whole population if small or on a GPU.

    ``member_bytes``: what a chunk holds per member
    (:meth:`~esjax._src.strategies.population.Population.member_bytes`). Under a ``vmap`` over
    ``runs`` populations (seeds, sweep configurations) each chunk step holds ``runs`` times its
    members, so the cache's share of one run is divided. ``pinned`` (a rollout's
    ``chunk_size``) overrides the choice. The budget is this module's
    ``CHUNK_PARAM_BYTES``, read at every call.
    """
    if pinned is not None:
        return max(1, min(int(pinned), popsize))
    if platform != "cpu":
        # A GPU hides memory latency with thousands of members in flight; chunking it
        # serialises the population (measured 25x slower on one GPU at 2048 members).
        return int(popsize)
    runs = max(1, int(runs))
    # A power of two divides the usual popsizes, so no ragged last chunk is compiled; at
    # least 8 members step together over all runs.
    fits = (CHUNK_PARAM_BYTES // (member_bytes * runs)).bit_length() - 1
    chunk = 1 << max(0, fits, (8 // runs).bit_length() - 1)
    return int(min(popsize, chunk))


def map_members(
    over_keys: Callable[[jax.Array, PyTree], PyTree],
    keys: jax.Array,
    population: Population,
    chunk_size: Callable[[int, Population], int],
) -> PyTree:
    """``over_keys(member_keys, params)`` for every member, ``chunk_size(popsize, population)``
    at a time.

    At large popsizes, when all members advance one step together every member's weights are
    streamed from memory at every step; a chunk (``lax.map`` with ``batch_size``) keeps its
    weights in cache for the whole episode. Members' parameters are made inside their chunk
    (:meth:`~esjax._src.strategies.population.Population.member`), so a population that is not
    materialised never exists as a whole. Shared keys ``(num_rollouts,)`` go to every member;
    per-member keys ``(popsize, num_rollouts)`` are mapped with the members.
    """
    ids, decode = population.members(), population.member
    popsize = population.popsize
    chunk = chunk_size(popsize, population)

    if keys.ndim == 1:  # every member runs the same episode keys

        def member(ident):
            return over_keys(keys, decode(ident))

        xs = ids
    else:

        def member(args):
            ident, member_keys = args
            return over_keys(member_keys, decode(ident))

        xs = (ids, keys)

    if chunk >= popsize:
        return jax.vmap(member)(xs)
    return jax.lax.map(member, xs, batch_size=chunk)


def can_end_early(env: Env, env_params: EnvParams, episode_length: int) -> bool:
    """Whether an episode of ``env`` may end before ``episode_length`` steps.

    False only when it provably cannot: gymnax's ``is_terminated`` traces to a constant
    ``False`` and the env's time limit is not shorter than the episode. Anything else
    (another env API, a state-dependent end) counts as may-end, which costs compile time but
    never changes a result.
    """
    is_terminated = getattr(env, "is_terminated", None)
    max_steps = getattr(env_params, "max_steps_in_episode", None)
    if is_terminated is None or max_steps is None:
        return True

    def ended_after_reset(key):
        return is_terminated(env.reset(key, env_params)[1], env_params)

    try:
        if int(max_steps) < episode_length:
            return True
        # Traced, not run: an eager reset costs ~0.3 s of dispatch on every construction.
        outputs = jax.make_jaxpr(ended_after_reset)(jax.random.key(0)).jaxpr.outvars
    except Exception:  # an env we cannot inspect: assume it may end early
        return True
    # A constant output is a jaxpr literal, the one kind of output that carries a ``val``.
    constant = getattr(outputs[0], "val", None) if len(outputs) == 1 else None
    return constant is None or bool(constant)


def segment_steps(length: int) -> int:
    """Steps per segment of an episode loop: a divisor of ``length`` near SEGMENT_STEPS.

    A divisor leaves no remainder to scan after the loop, which would compile the step a
    second time.
    """
    if length <= SEGMENT_STEPS:
        return length
    divisors = [d for d in range(SEGMENT_STEPS // 2, 2 * SEGMENT_STEPS + 1) if length % d == 0]
    if not divisors:
        return SEGMENT_STEPS
    return min(divisors, key=lambda d: (abs(d - SEGMENT_STEPS), d))


def _scan_while_alive(step, init, step_keys, alive):
    """``lax.scan(step, init, step_keys)``'s final carry, stopping once ``alive(carry)`` is False.

    The scan runs in segments of :func:`segment_steps` inside a ``while_loop``. Under ``vmap``
    the loop goes on while any episode of the batch is alive, and the ended ones are frozen by
    the step itself, so the final carry's summaries are those of the full scan.
    """
    length = step_keys.shape[0]
    segment = segment_steps(length)
    full_segments, rest = divmod(length, segment)
    if full_segments < 2:
        # Nothing to skip, and a while_loop compiles ~30 % slower than the plain scan.
        return jax.lax.scan(step, init, step_keys)[0]

    def go_on(state):
        carry, index = state
        return jnp.logical_and(index < full_segments, alive(carry))

    def run_segment(state):
        carry, index = state
        keys = jax.lax.dynamic_slice_in_dim(step_keys, index * segment, segment)
        carry, _ = jax.lax.scan(step, carry, keys)
        return carry, index + 1

    carry, _ = jax.lax.while_loop(go_on, run_segment, (init, jnp.zeros((), jnp.int32)))
    if rest:
        carry, _ = jax.lax.scan(step, carry, step_keys[full_segments * segment :])
    return carry


def _check_positive(name: str, value: int) -> None:
    if int(value) <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def _check_summary_args(num_rollouts: int, runs: int, worst_episodes: float) -> None:
    _check_positive("num_rollouts", num_rollouts)
    _check_positive("runs", runs)
    if not 0.0 < worst_episodes <= 1.0:
        raise ValueError(f"worst_episodes must be in (0, 1], got {worst_episodes}")


def obs_moments(
    result: RolloutResult | PopulationSummary,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Count, mean and variance of the valid observations in a result, over all its rollouts.

    A :class:`PopulationSummary` holds the totals already (no leading axes to sum over).
    """
    count = jnp.sum(result.lengths).astype(jnp.float32)
    axes = tuple(range(result.obs_sum.ndim - 1))
    total = jnp.sum(result.obs_sum, axis=axes)
    total_sq = jnp.sum(result.obs_sq_sum, axis=axes)
    safe = jnp.maximum(count, 1.0)
    mean = total / safe
    var = jnp.maximum(total_sq / safe - mean * mean, 0.0)
    return count, mean, var
