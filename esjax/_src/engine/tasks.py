"""Tasks: a validated :class:`TaskConfig` becomes an env, its params, a sampler and a policy.

Variants enter through ``EnvParams``: every sampled parameter is a field of the env's params
(``m``, ``l`` for Pendulum, ``link_length_1`` for Acrobot), so a new variant needs a preset,
not code.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from esjax._src.envs.core import make_env
from esjax._src.policies.mirror import check_mirror
from esjax._src.policies.networks import ActionHead, PolicyError, PolicySpec, is_discrete, spec_for
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs import live
from esjax._src.specs.config import (
    ConfigError,
    ParamDistribution,
    PolicyConfig,
    TaskConfig,
    suggest,
    to_dict,
)

EnvParamsSampler = Callable[[jax.Array, Any], Any]


def policy_spec(config: PolicyConfig) -> PolicySpec:
    """The spec of a task's policy: its kind's (:data:`esjax._src.policies.networks.SPECS`), or a
    user's
    network's when the kind names code."""
    return spec_for(config)


def _draw(dist: ParamDistribution, key: jax.Array) -> jax.Array:
    if dist.dist == "uniform":
        return jax.random.uniform(key, minval=dist.low, maxval=dist.high)
    if dist.dist == "log_uniform":
        return jnp.exp(jax.random.uniform(key, minval=jnp.log(dist.low), maxval=jnp.log(dist.high)))
    if dist.dist == "choice":
        return jax.random.choice(key, jnp.asarray(dist.values, jnp.float32))
    k_mag, k_sign = jax.random.split(key)
    magnitude = jnp.exp(
        jax.random.uniform(k_mag, minval=jnp.log(dist.low), maxval=jnp.log(dist.high))
    )
    return jnp.where(jax.random.bernoulli(k_sign), magnitude, -magnitude)


def check_param_names(names: list[str], env_params: Any, where: str) -> None:
    """Every name must be a field of the env's params; otherwise a one-line error."""
    valid = [n for n in vars(env_params) if not n.startswith("_")]
    for name in names:
        if name not in valid:
            raise ConfigError(
                f"{where}: {name!r} is not a parameter of this env{suggest(name, valid)}; "
                f"valid: {', '.join(valid)}"
            )


@dataclass(frozen=True)
class ParamSampler:
    """``(key, default_params) -> params`` with each named field drawn from its distribution.

    A distribution's numeric fields (``low``, ``high``) are its *bounds*: they only change
    numbers inside a compiled rollout, so they may be arrays (:meth:`with_bounds`) and runs
    that differ only in them are one vmapped program. The distribution kind and a ``choice``
    list decide structure and stay constants. Bounds are named ``"<param>.<field>"``.
    """

    distributions: tuple[tuple[str, ParamDistribution], ...]

    def __call__(self, key: jax.Array, default_params: Any) -> Any:
        keys = jax.random.split(key, len(self.distributions))
        values = {}
        for k, (name, dist) in zip(keys, self.distributions, strict=True):
            current = getattr(default_params, name)
            values[name] = _draw(dist, k).astype(jnp.result_type(current))
        return default_params.replace(**values)

    def bounds(self) -> dict[str, float]:
        """The bounds by name, with this sampler's values."""
        return {
            f"{name}.{field}": float(getattr(dist, field))
            for name, dist in self.distributions
            for field in BOUND_FIELDS
            if dist.dist != "choice"
        }

    def with_bounds(self, values: Mapping[str, Any]) -> ParamSampler:
        """This sampler with some bounds replaced (by traced arrays, inside a trace)."""
        if not values:
            return self
        unknown = sorted(set(values) - set(self.bounds()))
        if unknown:
            raise ValueError(f"not bounds of this sampler: {', '.join(unknown)}")
        return ParamSampler(
            tuple(
                (name, dataclasses.replace(dist, **_fields_of(name, values)))
                for name, dist in self.distributions
            )
        )


# The numeric fields of a ParamDistribution that only change numbers (never a shape or branch).
BOUND_FIELDS = ("low", "high")


def _fields_of(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {f: values[f"{name}.{f}"] for f in BOUND_FIELDS if f"{name}.{f}" in values}


def make_sampler(distributions: Mapping[str, ParamDistribution]) -> ParamSampler | None:
    """A :class:`ParamSampler` for the named distributions (``None`` for none)."""
    if not distributions:
        return None
    return ParamSampler(tuple(sorted(distributions.items())))


def fixed_env_params(config: TaskConfig, default_params: Any, source: str = "task") -> Any:
    """The env's default params with the preset's fixed overrides applied."""
    check_param_names(list(config.env_params), default_params, f"{source}: env_params")
    check_param_types(config.env_params, default_params, source)
    return default_params.replace(**config.env_params) if config.env_params else default_params


def check_param_types(values: Mapping[str, Any], default_params: Any, source: str) -> None:
    """A switch (MetaMaze's ``normalize_time``) takes true or false, every other param a number.

    gymnax selects with a switch's value, so a number there would fail deep inside a trace.
    Names the env does not have are left to :func:`check_param_names`.
    """
    for name, value in values.items():
        if not hasattr(default_params, name):
            continue
        is_switch = isinstance(getattr(default_params, name), bool)
        if is_switch != isinstance(value, bool):
            wanted = "true or false" if is_switch else "a number"
            raise ConfigError(f"{source}: env_params.{name} must be {wanted}, got {value!r}")


def _check_mirror(config: TaskConfig, env: Any, env_params: Any, source: str) -> None:
    """The policy's reflection fits the env's spaces (the rollout's fixed ``env_params``)."""
    policy = config.policy
    if not policy.mirror and not policy.mirror_actions:
        return
    space = env.action_space(env_params)
    head = ActionHead.from_space(space, raw=policy.actions == "raw" and not is_discrete(space))
    obs_size = math.prod(env.observation_space(env_params).shape)
    problem = check_mirror(policy.mirror, policy.mirror_actions, obs_size, head)
    if problem:
        raise ConfigError(f"{source}: policy.{problem}")


def split_sampler(config: TaskConfig, split: str | None) -> EnvParamsSampler | None:
    """The sampler for a named split (``None`` or ``"train"``: the training distribution)."""
    if split in (None, "train"):
        return make_sampler(config.env_sampler)
    if split not in config.splits:
        valid = ["train", *config.splits]
        raise ConfigError(
            f"unknown split {split!r}{suggest(split, valid)}; valid: {', '.join(valid)}"
        )
    return make_sampler(config.splits[split])


def check_task(config: TaskConfig, source: str = "task") -> None:
    """Fail before anything is written or compiled: env id, and every env parameter name.

    Parameters are fields of the env's own ``EnvParams``, so a continuous-control setting
    (``max_torque``, ``max_speed``) given to a discrete-action task (CartPole, Acrobot) is an
    error that says the env's actions are discrete.
    """
    _check_held(config)
    try:
        env, default_params = make_env(config.env, config.env_kwargs)
    except ConfigError as error:
        raise ConfigError(f"{source}: env: {error}") from None
    if config.episode_length is None and not hasattr(default_params, "max_steps_in_episode"):
        raise ConfigError(
            f"{source}: episode_length: {config.env}'s params have no max_steps_in_episode to "
            "take it from; set episode_length in the task"
        )
    if "train" in config.splits:  # the name --split and the report give the training range
        raise ConfigError(
            f"{source}: splits.train: 'train' is the training distribution ([env_sampler]); "
            "give the split another name"
        )
    discrete = is_discrete(env.action_space(default_params))
    check_param_types(config.env_params, default_params, source)
    try:
        env_params = _check_params(config, default_params, source)
    except ConfigError as error:
        if discrete:
            raise ConfigError(f"{error} ({config.env} has discrete actions)") from None
        raise
    _check_mirror(config, env, env_params, source)
    if config.policy.actions == "sample" and not discrete:
        raise ConfigError(
            f"{source}: policy.actions: 'sample' needs discrete actions; {config.env}'s are "
            "continuous (its policy is deterministic)"
        )
    if config.policy.actions == "raw" and discrete:
        raise ConfigError(
            f"{source}: policy.actions: 'raw' needs continuous actions; {config.env}'s are "
            "discrete (use 'greedy' or 'sample')"
        )


def _check_held(config: TaskConfig) -> None:
    """One line naming the live objects (an env, a network handed over from Python) the task
    names and this process does not hold: nothing in a run directory rebuilds them."""
    problem = live.check_held(config.env, config.policy.kind)
    if problem:
        raise ConfigError(problem)


def _check_params(config: TaskConfig, default_params: Any, source: str) -> Any:
    env_params = fixed_env_params(config, default_params, source)
    for split_name, dists in [("env_sampler", config.env_sampler), *config.splits.items()]:
        check_param_names(list(dists), env_params, f"{source}: {split_name}")
    check_param_names(
        list(config.policy.param_inputs), env_params, f"{source}: policy.param_inputs"
    )
    return env_params


def make_rollout(
    config: TaskConfig,
    *,
    split: str | None = None,
    deterministic: bool | None = None,
    source: str = "task",
    **kwargs: Any,
) -> PopulationRollout:
    """A :class:`~esjax._src.rollout.population_rollout.PopulationRollout` for the task (and split)
    a preset describes.

    ``deterministic`` defaults to the preset's ``policy.actions``: one rollout serves training
    and testing, so a policy is judged as it was trained.
    """
    _check_held(config)
    env, default_params = make_env(config.env, config.env_kwargs)
    env_params = _check_params(config, default_params, source)
    kwargs = {"chunk_size": task_chunk_size(config, kwargs.get("devices")), **kwargs}
    try:
        return PopulationRollout(
            env,
            policy_spec(config.policy),
            config.episode_length,
            env_params=env_params,
            env_params_sampler=split_sampler(config, split),
            deterministic=(
                config.policy.actions != "sample" if deterministic is None else deterministic
            ),
            param_inputs=config.policy.param_inputs,
            frame_stack=config.policy.frame_stack,
            **kwargs,
        )
    except PolicyError as error:  # the policy does not fit this env
        raise ConfigError(f"{source}: policy: {error}") from None


def task_chunk_size(config: TaskConfig, devices: list | None = None) -> int | None:
    """The task's ``chunk_size`` where the rollout runs on CPUs; None (the rollout's own rule)
    elsewhere.

    A preset pins chunks for a CPU's caches (MuJoCo's solver state, not the weights). On an
    accelerator the same pin would serialise a large population: 64 chunks of 32 at popsize
    2048, where the rollout's own rule steps every member at once.
    """
    devices = jax.devices() if devices is None else devices
    on_cpu = all(device.platform == "cpu" for device in devices)
    return config.chunk_size if on_cpu else None


def shared_rollout(
    config: TaskConfig, *, split: str | None = None, source: str = "task"
) -> PopulationRollout:
    """The task's rollout (and split's), built once per process for callers that only read it.

    Sizing a run, its memory check and testing saved policies all need the same rollout;
    sharing it means one build and one compile of each test program. Never change a shared
    rollout: a variant is
    :meth:`~esjax._src.rollout.population_rollout.PopulationRollout.replace`'s new one, and an
    engine builds its own with :func:`make_rollout`.
    """
    key = (json.dumps(to_dict(config), sort_keys=True), split)
    if key not in _SHARED_ROLLOUTS:
        while len(_SHARED_ROLLOUTS) >= _MAX_SHARED_ROLLOUTS:
            _SHARED_ROLLOUTS.pop(next(iter(_SHARED_ROLLOUTS)))
        _SHARED_ROLLOUTS[key] = make_rollout(config, split=split, source=source)
    return _SHARED_ROLLOUTS[key]


def forget_shared_rollouts() -> None:
    """Drop every shared rollout (with the engines, when compiled programs are cleared)."""
    _SHARED_ROLLOUTS.clear()


_SHARED_ROLLOUTS: dict[tuple[str, str | None], Any] = {}
_MAX_SHARED_ROLLOUTS = 8
