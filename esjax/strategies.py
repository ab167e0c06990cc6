"""Strategies: a strategy preset becomes one evosax object, its params and its optax optimizer.

A preset (``strategies/NAME.toml``) names an evosax 0.3 class (``algorithm``) and its
``[settings]``; a task's ``strategy_settings`` and ``--set`` overrides are merged on top. Every
setting is checked against the class's own list, so a typo is an error that lists the valid
names. No ES maths lives here: the search itself is evosax's; this module only decides which
optimizer, standard-deviation schedule, sampling and fitness shaping it is built with.

The strategy works on a flat parameter vector (its ``solution`` is a 1-D template), so the
population is a ``(popsize, num_dims)`` array; the engine unravels it for the rollout.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import evosax.algorithms as ea
import jax
import jax.numpy as jnp
import optax
from evosax.core import fitness_shaping as shaping
from evosax.core.optimizer import clipup

from esjax.cma import LazyCMA_ES, resolve_decomposition_every
from esjax.config import ConfigError, suggest
from esjax.fitness import grouped_shaping

OPTIMIZERS = ("sgd", "adam", "clipup")
FITNESS_SHAPING = ("centered_rank", "standardize", "normalize")
NOISE_PRNGS = ("threefry", "rbg", "unsafe_rbg")
MEAN_INITS = ("policy", "zeros")
_SHAPING_FNS = {
    "centered_rank": shaping.centered_rank_fitness_shaping_fn,
    "standardize": shaping.standardize_fitness_shaping_fn,
    "normalize": shaping.normalize_fitness_shaping_fn,
}


@dataclass(frozen=True)
class Setting:
    """One tunable: its default, its kind (``number``, ``int``, ``bool`` or a tuple of choices)."""

    default: Any
    kind: Any
    help: str = ""


# Settings every algorithm takes.
_COMMON = {
    "popsize": Setting(256, "popsize", "members per generation; 'auto' = 4 + 3 ln(num_dims)"),
    "l2_penalty": Setting(0.0, "number", "L2 penalty on the parameters, in return units"),
    "noise_prng": Setting("threefry", NOISE_PRNGS, "PRNG implementation for the ask draw"),
    "mean_init": Setting("policy", MEAN_INITS, "initial mean: the policy's own init or zeros"),
}
# Settings of gradient-following strategies (an optax optimizer moves the mean).
_OPTIMIZED = {
    "optimizer": Setting("adam", OPTIMIZERS, "optax optimizer on the mean"),
    "learning_rate": Setting(0.05, "number", "optimizer step size"),
    "lr_decay": Setting(1.0, "number", "learning rate multiplied by this every generation"),
    "lr_min": Setting(0.0, "number", "floor of the decayed learning rate"),
    "momentum": Setting(0.9, "number", "sgd / clipup momentum; Adam's b1"),
    "max_velocity": Setting(0.1, "number", "clipup: largest step norm"),
    "weight_decay": Setting(0.0, "number", "decoupled decay of the mean per generation (AdamW)"),
}

ALGORITHMS: dict[str, dict[str, Setting]] = {
    "Open_ES": {
        **_COMMON,
        **_OPTIMIZED,
        "std_init": Setting(0.1, "number", "perturbation standard deviation"),
        "std_decay": Setting(1.0, "number", "std multiplied by this every generation"),
        "std_min": Setting(0.0, "number", "floor of the decayed std"),
        "antithetic": Setting(True, "bool", "mirrored perturbations (+z, -z)"),
        "fitness_shaping": Setting("centered_rank", FITNESS_SHAPING, "raw fitness -> weights"),
        "env_groups": Setting(
            1, "groups", "groups of members sharing episode starts; 'auto' = popsize / 32"
        ),
    },
    "PGPE": {
        **_COMMON,
        **_OPTIMIZED,
        "optimizer": Setting("clipup", OPTIMIZERS, "optax optimizer on the mean"),
        "learning_rate": Setting(0.15, "number", "optimizer step size"),
        "max_velocity": Setting(0.3, "number", "clipup: largest step norm"),
        "std_init": Setting(0.1, "number", "initial per-parameter std"),
        "std_lr": Setting(0.1, "number", "std learning rate"),
        "std_max_change": Setting(0.2, "number", "largest relative std change per generation"),
        "fitness_shaping": Setting("centered_rank", FITNESS_SHAPING, "raw fitness -> weights"),
        "env_groups": Setting(
            1, "groups", "groups of members sharing episode starts; 'auto' = popsize / 32"
        ),
    },
    "SNES": {
        **_COMMON,
        **_OPTIMIZED,
        "optimizer": Setting("sgd", OPTIMIZERS, "optax optimizer on the mean"),
        "learning_rate": Setting(1.0, "number", "mean step size (1.0 = natural gradient)"),
        "momentum": Setting(0.0, "number", "sgd momentum"),
        "std_init": Setting(0.1, "number", "initial per-parameter std"),
        "lr_std": Setting(None, "number", "std learning rate; default (3 + ln n) / (5 sqrt n)"),
    },
    "Sep_CMA_ES": {
        **_COMMON,
        "std_init": Setting(0.1, "number", "initial step size"),
        "std_min": Setting(0.0, "number", "smallest step size"),
        "std_max": Setting(1e8, "number", "largest step size"),
    },
    "CMA_ES": {
        **_COMMON,
        "popsize": Setting("auto", "popsize", "members per generation; 'auto' = 4 + 3 ln(n)"),
        "std_init": Setting(0.1, "number", "initial step size"),
        "std_min": Setting(0.0, "number", "smallest step size"),
        "std_max": Setting(1e8, "number", "largest step size"),
        "decomposition_every": Setting(
            "auto", "popsize", "generations between eigendecompositions; 'auto' = pycma's rule"
        ),
    },
}
# Classes whose ask draws mirrored pairs and so needs an even population.
_EVEN_POPSIZE = {"Open_ES", "PGPE"}


@dataclass(frozen=True)
class StrategySpec:
    """A resolved strategy preset: evosax class name and every setting (defaults filled in)."""

    name: str
    algorithm: str
    settings: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "algorithm": self.algorithm,
            "description": self.description,
            "settings": dict(self.settings),
        }


def _check_value(name: str, value: Any, setting: Setting, where: str) -> Any:
    kind = setting.kind
    if value is None and setting.default is None:
        return None
    if kind == "popsize":
        if value == "auto":
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ConfigError(f"{where}: {name} must be a positive integer or 'auto', got {value!r}")
    if kind == "number":
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
    if kind == "groups" and value == "auto":
        return value
    if kind in ("int", "groups"):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ConfigError(f"{where}: {name} must be a positive integer, got {value!r}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: {name} must be true or false, got {value!r}")
    if value not in kind:
        raise ConfigError(
            f"{where}: {name} = {value!r} is not valid{suggest(str(value), kind)}; "
            f"choose from {', '.join(kind)}"
        )
    return value


def resolve_settings(algorithm: str, layers: list[tuple[Mapping[str, Any], str]]) -> dict[str, Any]:
    """Defaults of ``algorithm`` overlaid by each ``(settings, source)`` layer in turn.

    An unknown setting names its source and lists the settings this algorithm takes.
    """
    table = ALGORITHMS[algorithm]
    settings = {name: s.default for name, s in table.items()}
    for layer, where in layers:
        for name, value in layer.items():
            if name not in table:
                raise ConfigError(
                    f"{where}: {algorithm} has no setting {name!r}{suggest(name, list(table))}; "
                    f"valid settings: {', '.join(table)}"
                )
            settings[name] = _check_value(name, value, table[name], where)
    return settings


def parse_strategy(
    name: str,
    raw: Mapping[str, Any],
    source: str,
    overrides: Mapping[str, Any] | None = None,
    overrides_source: str = "strategy_settings",
) -> StrategySpec:
    """A :class:`StrategySpec` from a preset's TOML table plus a task's ``strategy_settings``."""
    valid_keys = ("description", "algorithm", "settings")
    for key in raw:
        if key not in valid_keys:
            raise ConfigError(
                f"{source}: unknown key {key!r}{suggest(key, valid_keys)}; "
                f"valid keys: {', '.join(valid_keys)}"
            )
    algorithm = raw.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise ConfigError(
            f"{source}: unknown algorithm {algorithm!r}"
            f"{suggest(str(algorithm), list(ALGORITHMS))}; "
            f"valid algorithms: {', '.join(ALGORITHMS)}"
        )
    settings_raw = raw.get("settings", {})
    if not isinstance(settings_raw, Mapping):
        raise ConfigError(f"{source}: settings must be a table")
    settings = resolve_settings(
        algorithm, [(settings_raw, source), (overrides or {}, overrides_source)]
    )
    return StrategySpec(name, algorithm, settings, str(raw.get("description", "")))


def load_strategy(
    name_or_path: str, overrides: Mapping[str, Any] | None = None, overrides_source: str = "task"
) -> StrategySpec:
    """A strategy preset by name (``open_es``) or path, with ``overrides`` on top."""
    from esjax.presets import locate

    name, raw, source = locate("strategy", name_or_path)
    return parse_strategy(name, raw, source, overrides, f"{overrides_source}: strategy_settings")


def resolve_popsize(spec: StrategySpec, num_dims: int, popsize: int | None = None) -> int:
    """The population size: an explicit one, else the spec's (``auto`` = 4 + 3 ln n, even)."""
    value = popsize if popsize is not None else spec.settings["popsize"]
    if value == "auto":
        value = 4 + int(3 * math.log(num_dims))
        value += value % 2
    value = int(value)
    if value < 2:
        raise ConfigError(f"popsize must be at least 2, got {value}")
    if spec.algorithm in _EVEN_POPSIZE and value % 2:
        raise ConfigError(
            f"popsize {value}: {spec.algorithm} samples mirrored pairs, so popsize must be even"
        )
    groups = env_groups(spec, value)
    if value % (2 * groups if mirrored(spec) else groups):
        raise ConfigError(
            f"popsize {value} does not split into env_groups = {groups} groups"
            + (" of mirrored pairs" if mirrored(spec) else "")
        )
    return value


# Members per group with env_groups = "auto": enough for a within-group ranking to carry
# magnitude information (measured on Pendulum at popsize 256 and 2048), while a generation
# still averages over popsize / 32 different episode starts.
MEMBERS_PER_GROUP = 32


def env_groups(spec: StrategySpec, popsize: int) -> int:
    """The number of member groups (1 for strategies that do not group)."""
    groups = spec.settings.get("env_groups", 1)
    if groups != "auto":
        return int(groups)
    unit = 2 if mirrored(spec) else 1
    groups = max(1, popsize // MEMBERS_PER_GROUP)
    while popsize % (unit * groups):
        groups -= 1
    return groups


def mirrored(spec: StrategySpec) -> bool:
    """Whether the strategy's population is ``[+z, -z]`` (member i mirrors i + popsize/2)."""
    return spec.algorithm == "PGPE" or (spec.algorithm == "Open_ES" and spec.settings["antithetic"])


def _decaying(value: float, decay: float, floor: float) -> optax.Schedule:
    if decay == 1.0:
        return optax.constant_schedule(value)
    return optax.exponential_decay(value, 1, decay, end_value=floor)


def make_optimizer(settings: Mapping[str, Any]) -> optax.GradientTransformation:
    """The optax optimizer a spec asks for, with its learning-rate schedule."""
    lr = _decaying(settings["learning_rate"], settings["lr_decay"], settings["lr_min"])
    kind = settings["optimizer"]
    decay = settings["weight_decay"]
    if kind == "adam":
        b1 = settings["momentum"]
        return optax.adamw(lr, b1=b1, weight_decay=decay) if decay else optax.adam(lr, b1=b1)
    if kind == "sgd":
        inner = optax.sgd(lr, momentum=settings["momentum"] or None)
    else:
        # clipup's learning rate is a constant in evosax's construction.
        inner = clipup(
            settings["learning_rate"],
            max_velocity=settings["max_velocity"],
            momentum=settings["momentum"],
        )
    if not decay:
        return inner
    # Decoupled decay: shrink the mean by lr * decay per step, as AdamW does.
    return optax.chain(inner, optax.add_decayed_weights(-decay * settings["learning_rate"]))


def _shaping(spec: StrategySpec, default: Callable) -> Callable:
    settings = spec.settings
    fn = _SHAPING_FNS[settings["fitness_shaping"]] if "fitness_shaping" in settings else default
    if settings.get("env_groups", 1) > 1:
        fn = grouped_shaping(fn, settings["env_groups"], mirrored(spec))
    if settings["l2_penalty"]:
        fn = shaping.add_weight_decay(fn, settings["l2_penalty"])
    return fn


@dataclass(frozen=True)
class Strategy:
    """One evosax object and its params, built once per run; pure ``init``/``ask``/``tell``.

    ``es`` is never mutated, so the engine can close over it in jitted code.
    """

    spec: StrategySpec
    es: Any
    params: Any
    popsize: int
    num_dims: int

    def initial_mean(self, policy_init: jax.Array) -> jax.Array:
        """Where the search starts: the policy's initialisation, or all zeros."""
        if self.spec.settings["mean_init"] == "zeros":
            return jnp.zeros_like(policy_init)
        return policy_init

    def init(self, key: jax.Array, mean: jax.Array) -> Any:
        return self.es.init(key, mean, self.params)

    def ask(self, key: jax.Array, state: Any) -> tuple[jax.Array, Any]:
        """``(population (popsize, num_dims), state)``.

        The draw may use a cheaper PRNG than the run's threefry keys: the key is turned into
        one of ``noise_prng``'s kind, deterministically, so resume and seed-vmapping still agree.
        """
        impl = self.spec.settings["noise_prng"]
        if impl != "threefry":
            key = jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=impl)
        return self.es.ask(key, state, self.params)

    def tell(self, key: jax.Array, population: jax.Array, fitness: jax.Array, state: Any) -> Any:
        state, _ = self.es.tell(key, population, fitness, state, self.params)
        return state

    def mean(self, state: Any) -> jax.Array:
        return state.mean


def build_strategy(spec: StrategySpec, num_dims: int, popsize: int | None = None) -> Strategy:
    """The evosax object for ``spec`` over a flat ``num_dims`` vector."""
    n = resolve_popsize(spec, num_dims, popsize)
    if "env_groups" in spec.settings:
        # Concrete from here on: the engine reads the group count from the built strategy.
        spec = dataclasses.replace(
            spec, settings={**spec.settings, "env_groups": env_groups(spec, n)}
        )
    s = spec.settings
    solution = jnp.zeros((num_dims,), jnp.float32)
    algorithm = spec.algorithm
    if algorithm == "Open_ES":
        es = ea.Open_ES(
            n,
            solution,
            use_antithetic_sampling=s["antithetic"],
            optimizer=make_optimizer(s),
            std_schedule=_decaying(s["std_init"], s["std_decay"], s["std_min"]),
            fitness_shaping_fn=_shaping(spec, shaping.centered_rank_fitness_shaping_fn),
        )
        params = es.default_params
    elif algorithm == "PGPE":
        es = ea.PGPE(
            n,
            solution,
            optimizer=make_optimizer(s),
            fitness_shaping_fn=_shaping(spec, shaping.centered_rank_fitness_shaping_fn),
        )
        params = es.default_params.replace(
            std_init=s["std_init"], std_lr=s["std_lr"], std_max_change=s["std_max_change"]
        )
    elif algorithm == "SNES":
        es = ea.SNES(
            n,
            solution,
            optimizer=make_optimizer(s),
            fitness_shaping_fn=_shaping(spec, shaping.weights_fitness_shaping_fn),
        )
        params = es.default_params.replace(std_init=jnp.asarray(s["std_init"]))
        if s["lr_std"] is not None:
            params = params.replace(lr_std_init=jnp.asarray(s["lr_std"]))
    else:  # CMA_ES, Sep_CMA_ES
        cls = ea.CMA_ES if algorithm == "CMA_ES" else ea.Sep_CMA_ES
        kwargs = {"decomposition_every": s["decomposition_every"]} if cls is ea.CMA_ES else {}
        cls = LazyCMA_ES if cls is ea.CMA_ES else cls
        fitness_shaping_fn = _shaping(spec, shaping.weights_fitness_shaping_fn)
        es = cls(n, solution, fitness_shaping_fn=fitness_shaping_fn, **kwargs)
        params = es.default_params.replace(
            std_init=jnp.asarray(s["std_init"]), std_min=s["std_min"], std_max=s["std_max"]
        )
    return Strategy(spec, es, params, n, num_dims)


def strategy_cost_hint(
    spec: StrategySpec, num_dims: int, popsize: int, steps_per_member: int
) -> str | None:
    """A one-line warning when the strategy's own maths likely rivals the rollouts' cost.

    A rough count of floating-point work per generation: the rollouts evaluate an MLP of
    ``num_dims`` weights (~2 flops each) at every step of every member's episodes; diagonal
    strategies touch each of ``popsize x num_dims`` noise entries a few dozen times (drawing a
    Gaussian dominates); full CMA-ES also multiplies by and decomposes an n x n covariance.
    """
    n, p = float(num_dims), float(popsize)
    rollout = 2.0 * n * p * steps_per_member
    full = spec.algorithm == "CMA_ES"
    if full:  # the O(n^3) decomposition runs once every decomposition_every generations
        every = resolve_decomposition_every(spec.settings["decomposition_every"], num_dims, popsize)
        strategy = 4.0 * p * n * n + 10.0 * n**3 / every
    else:
        strategy = 30.0 * p * n
    # Below ~1e8 flops (milliseconds) the strategy's cost is not worth a warning.
    if strategy < 0.5 * rollout or strategy < 1e8:
        return None
    advice = (
        "raise decomposition_every, or prefer sep_cma_es, snes or open_es above ~1000 parameters"
        if spec.algorithm == "CMA_ES"
        else "longer episodes or more rollouts per member amortise it"
    )
    return (
        f"{spec.algorithm} at {num_dims} parameters x popsize {popsize} may cost about "
        f"{strategy / rollout:.1f}x the rollouts per generation; {advice}"
    )
