"""evosax's algorithms as esjax sees them: which exist, what each can be set to, which can run.

Nothing here is written per algorithm. An algorithm's settings are

* esjax's own, for what esjax supplies to every algorithm: popsize, the initial mean, the
  Gaussian draw's PRNG, an L2 penalty, fitness shaping, and - where the constructor takes them -
  the optax optimizer with its learning-rate schedule and the standard-deviation schedule;
* every scalar field of evosax's ``default_params`` (a flax struct dataclass), default "evosax's
  value" because many are derived from popsize and the parameter count;
* every plain keyword of the constructor (a bool, int, float or enum default).

So a new evosax algorithm is usable by name without code here. The few that need something an
episode return cannot give them are refused with the reason, before anything compiles.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import evosax.algorithms as ea
import jax
import jax.numpy as jnp
from evosax.algorithms.population_based.base import PopulationBasedAlgorithm
from evosax.core import fitness_shaping as shaping

from esjax._src.specs.config import ConfigError, suggest
from esjax._src.strategies.cma import LazyCMA_ES
from esjax._src.strategies.lowrank_es import LowRank_ES

# evosax's classes by name, except that full CMA-ES is evosax's own subclassed to decompose its
# covariance lazily (esjax._src.strategies.cma); with decomposition_every = 1 it is evosax's CMA_ES
# exactly.
REGISTRY: dict[str, type[Any]] = {**ea.algorithms, "CMA_ES": LazyCMA_ES, "LowRank_ES": LowRank_ES}

OPTIMIZERS = ("sgd", "adam", "clipup")
NOISE_PRNGS = ("threefry", "rbg", "unsafe_rbg")
MEAN_INITS = ("policy", "zeros")
SHAPING_FNS = {
    "identity": shaping.identity_fitness_shaping_fn,
    "centered_rank": shaping.centered_rank_fitness_shaping_fn,
    "standardize": shaping.standardize_fitness_shaping_fn,
    "normalize": shaping.normalize_fitness_shaping_fn,
    # evosax's recombination weights (``params.weights``), for CMA-like algorithms
    "weights": shaping.weights_fitness_shaping_fn,
}

# Constructor arguments esjax always fills in itself.
_SUPPLIED = ("self", "population_size", "solution", "metrics_fn", "fitness_shaping_fn")
# A learned algorithm's network: esjax only ever uses the checkpoint shipped inside evosax, never
# a file a user hands it (loading one unpickles it).
_NEVER_EXPOSED = ("params", "params_path")
# evosax names that esjax spelled differently before settings were discovered; kept so that
# saved runs and existing presets still resolve.
RENAMED = {"use_antithetic_sampling": "antithetic", "lr_std_init": "lr_std"}
# Algorithms whose population is ``[+z, -z]`` (antithetic pairs) whatever their settings;
# otherwise an ``antithetic`` setting says so.
_ALWAYS_ANTITHETIC = ("ARS", "PGPE")

# What cannot be discovered: an algorithm that needs an input besides the fitness of whole
# episodes. Keyed by evosax class name.
REFUSED = {
    "GuidedES": "it needs a surrogate gradient of the objective every generation, which an "
    "episode return does not provide",
    "PersistentES": "it estimates gradients over truncated unrolls of one long episode (K steps "
    "per generation, state carried over); esjax evaluates whole episodes",
    "NoiseReuseES": "it estimates gradients over truncated unrolls of one long episode (K steps "
    "per generation, state carried over); esjax evaluates whole episodes",
    "SV_CMA_ES": "it runs num_populations Stein-variational searches side by side; an esjax run "
    "evolves and tests one policy",
    "SV_Open_ES": "it runs num_populations Stein-variational searches side by side; an esjax run "
    "evolves and tests one policy",
}

# Shapes of the probe used to read an algorithm's params and state (small, even popsize).
_PROBE_POPSIZE = 8
_PROBE_DIMS = (6, 12)


@dataclass(frozen=True)
class Setting:
    """One tunable: its default, its kind (``number``, ``positive``, ``nonnegative``, ``int``,
    ``bool`` or a tuple of choices)."""

    default: Any
    kind: Any
    help: str = ""


@dataclass(frozen=True)
class AlgorithmInfo:
    """What esjax knows about one evosax algorithm, read from its constructor and params."""

    name: str  # the key in ``evosax.algorithms.algorithms``
    cls: type
    description: str
    settings: dict[str, Setting]
    param_settings: dict[str, str]  # setting name -> evosax params field
    keyword_settings: dict[str, str]  # setting name -> constructor keyword
    population_based: bool  # initialised from an evaluated population, no distribution mean
    quadratic: bool  # keeps state that grows with num_dims ** 2 (a covariance or matrix)
    takes_optimizer: bool
    takes_std_schedule: bool


def register(cls: type, name: str | None = None) -> str:
    """Add an algorithm class with evosax's API (``init``, ``ask``, ``tell``,
    ``default_params``) to the registry, under ``name`` (default: its class name); the name
    then works wherever a strategy is named (``--strategy``, ``esjax.Trainer``). Returns it."""
    name = name or cls.__name__
    if not isinstance(cls, type) or not all(callable(getattr(cls, m, None))
                                            for m in ("init", "ask", "tell")):  # fmt: skip
        raise ConfigError(
            f"strategy {name!r}: a {type(cls).__name__} is not an algorithm class with "
            "evosax's API (init, ask, tell, default_params)"
        )
    if REGISTRY.get(name, cls) is not cls:
        raise ConfigError(f"strategy {name!r} is registered already, as another class")
    REGISTRY[name] = cls
    info.cache_clear()
    return name


def canonical_name(name: str) -> str | None:
    """The registry key ``name`` spells, case-insensitively, or ``None``."""
    by_lower = {key.lower(): key for key in REGISTRY}
    return by_lower.get(name.lower())


def refusal(name: str) -> str | None:
    """Why ``name`` cannot run in esjax, or ``None``; decided from the signature alone."""
    cls = REGISTRY[name]
    if cls.__name__ in REFUSED:
        return REFUSED[cls.__name__]
    for arg in inspect.signature(cls.__init__).parameters.values():
        if arg.name in _SUPPLIED or arg.kind in (arg.VAR_POSITIONAL, arg.VAR_KEYWORD):
            continue
        if arg.default is inspect.Parameter.empty:
            return f"its constructor needs {arg.name!r}, which has no default esjax could use"
    return None


def check_runnable(name: str) -> None:
    """Raise a one-line :class:`ConfigError` if ``name`` cannot run in esjax."""
    reason = refusal(name)
    if reason:
        raise ConfigError(f"evosax's {name} cannot run in esjax: {reason}")


def origin(name: str) -> str:
    """Where a registered algorithm comes from: ``"evosax"``, ``"esjax"`` (esjax's own, or
    its subclass of evosax's, such as the lazily decomposed CMA-ES), or the module of the
    user's that defines it."""
    module = REGISTRY[name].__module__
    top = module.split(".")[0]
    return top if top in ("evosax", "esjax") else module


def description(name: str) -> str:
    """The first line of the algorithm's module docstring (it carries the citation)."""
    cls = REGISTRY[name]
    doc = sys.modules[cls.__module__].__doc__ or cls.__doc__ or ""
    lines = doc.strip().splitlines()
    return lines[0] if lines else name


def _setting_kind(value: Any) -> str | None:
    """A scalar's setting kind, or ``None`` for anything that is not a plain scalar."""
    if isinstance(value, bool) or (hasattr(value, "dtype") and value.dtype == bool):
        return "bool" if jnp.ndim(value) == 0 else None
    if isinstance(value, int) or (hasattr(value, "dtype") and jnp.issubdtype(value.dtype, int)):
        return "int" if jnp.ndim(value) == 0 else None
    if isinstance(value, float) or (
        hasattr(value, "dtype") and jnp.issubdtype(value.dtype, jnp.floating)
    ):
        return "number" if jnp.ndim(value) == 0 else None
    return None


def _keyword_setting(arg: inspect.Parameter) -> Setting | None:
    """A constructor keyword as a setting, if it is a plain value a TOML file can hold."""
    default = arg.default
    if default == "auto":  # ``int | str = "auto"``: a count with a rule for its default
        return Setting("auto", "popsize", f"evosax constructor argument ({arg.name}); or 'auto'")
    if isinstance(default, enum.Enum):
        choices = tuple(member.value for member in type(default))
        return Setting(default.value, choices, f"evosax constructor argument ({arg.name})")
    if default is None:  # ``int | None = None``: an optional count
        hints = typing.get_args(arg.annotation) if not isinstance(arg.annotation, str) else ()
        kind = "int" if int in hints or "int" in str(arg.annotation) else None
        help_text = "evosax constructor argument; default: evosax's"
        return Setting(None, kind, help_text) if kind else None
    kind = _setting_kind(default)
    if kind is None:
        return None
    return Setting(default, kind, "evosax constructor argument")


def _probe(cls: type, num_dims: int) -> tuple[Any, Any]:
    """``(instance, abstract state)`` for a small problem, without compiling anything."""
    es = cls(population_size=_PROBE_POPSIZE, solution=jnp.zeros((num_dims,), jnp.float32))
    params = es.default_params
    key = jax.random.key(0)
    if isinstance(es, PopulationBasedAlgorithm):
        population = jnp.zeros((_PROBE_POPSIZE, num_dims), jnp.float32)
        fitness = jnp.zeros((_PROBE_POPSIZE,), jnp.float32)
        state = jax.eval_shape(lambda k: es.init(k, population, fitness, params), key)
    else:
        state = jax.eval_shape(lambda k: es.init(k, jnp.zeros(num_dims), params), key)
    return es, state


def _grows_quadratically(small: Any, large: Any) -> bool:
    ratio = _PROBE_DIMS[1] / _PROBE_DIMS[0]
    sizes = zip(jax.tree.leaves(small), jax.tree.leaves(large), strict=True)
    return any(b.size > ratio * a.size for a, b in sizes if a.size)


# esjax's own settings, by what an algorithm must take for each group to apply. The loop's
# (rollouts_multiplier, worst_episodes, validate_*, env_groups) travel in a run's config as a
# table of their own (:class:`esjax._src.specs.config.LoopSettings`); they are declared here all
# the same, since which of them an algorithm accepts depends on the algorithm.
_EVERY_ALGORITHM = {
    "l2_penalty": Setting(0.0, "number", "L2 penalty on the parameters, in return units"),
    "noise_prng": Setting("threefry", NOISE_PRNGS, "PRNG implementation for the ask draw"),
    "mean_init": Setting("policy", MEAN_INITS, "initial mean: the policy's own init or zeros"),
    "rollouts_multiplier": Setting(
        1,
        "int",
        "episodes per member = the task's rollouts x this, for a strategy that needs quieter "
        "returns than the task's default gives (rollouts given explicitly are kept)",
    ),
    "worst_episodes": Setting(
        1.0,
        "fraction",
        "a member's fitness is the mean of this fraction of its episodes, the worst "
        "(1: all of them); below 1 it ranks steadier members above ones that sometimes fail",
    ),
}
_POPULATION_VALIDATION = {  # population-based algorithms: their best member is re-tested
    "validate_top": Setting(
        1,
        "int",
        "members of the best by training fitness re-tested on fresh episodes at each "
        "block's end, the best of them reported (1: the best by training fitness, untested)",
    ),
    "validate_episodes": Setting(
        None, "int", "episodes per re-tested member; default: the evaluation's count"
    ),
}
# Algorithms that update from their best members only (evosax's ``num_elites``, read from the
# ``elite_ratio`` attribute its constructor sets): ARS's top directions, CMA-ES's parents.
_ELITES = {
    "elite_ratio": Setting(
        None,
        "fraction",
        "share of the population the update uses, the best by fitness (ARS: of its "
        "directions, top = ratio x popsize / 2, rounded down); default: evosax's",
    ),
}
_STD_SCHEDULE = {
    "std_decay": Setting(1.0, "nonnegative", "std multiplied by this every generation"),
    "std_min": Setting(
        0.0, "nonnegative", "floor of the decayed std (none at std_decay 1: nothing decays)"
    ),
}
_OPTIMIZER = {
    "optimizer": Setting("adam", OPTIMIZERS, "optax optimizer on the mean"),
    "learning_rate": Setting(0.05, "positive", "optimizer step size"),
    "lr_decay": Setting(1.0, "nonnegative", "learning rate multiplied by this every generation"),
    "lr_min": Setting(
        0.0, "nonnegative", "floor of the decayed learning rate (none at lr_decay 1)"
    ),
    "momentum": Setting(0.9, "number", "sgd / clipup momentum; Adam's b1"),
    "max_velocity": Setting(0.1, "positive", "clipup: largest step norm"),
    "weight_decay": Setting(0.0, "number", "decoupled decay of the mean per generation"),
}
_RANK_GROUPS = {  # groups of members sharing episode starts (ranks taken within each)
    "env_groups": Setting(
        1, "groups", "groups of members sharing episode starts; 'auto' = popsize / 32"
    ),
}
# Constructor keywords esjax supplies as objects of its own (built from the settings above).
_BUILT_BY_ESJAX = ("optimizer", "std_schedule")


@dataclass(frozen=True)
class _Probed:
    """What building an algorithm at two sizes tells: its object, params and state growth."""

    es: Any
    signature: Mapping[str, inspect.Parameter]
    fields: dict[str, Any]  # evosax's default params, by field name
    population_based: bool
    quadratic: bool


def _probed(name: str) -> _Probed:
    """Build ``name`` at two small sizes; a failure is a one-line :class:`ConfigError`."""
    cls = REGISTRY[name]
    try:
        es, small = _probe(cls, _PROBE_DIMS[0])
        _, large = _probe(cls, _PROBE_DIMS[1])
    except Exception as error:  # e.g. a learned algorithm whose checkpoint is missing
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"evosax's {name} cannot be built: {first}") from None
    params = es.default_params
    return _Probed(
        es=es,
        signature=inspect.signature(cls.__init__).parameters,
        fields={f.name: getattr(params, f.name) for f in dataclasses.fields(params)},
        population_based=isinstance(es, PopulationBasedAlgorithm),
        quadratic=_grows_quadratically(small, large),
    )


def _esjax_settings(name: str, probed: _Probed) -> dict[str, Setting]:
    """The settings esjax supplies itself, in the order they are listed to a user."""
    takes_std_schedule = "std_schedule" in probed.signature
    settings = {
        "popsize": Setting(
            "auto" if probed.quadratic else 256,
            "popsize",
            "members per generation; 'auto' = 4 + 3 ln(num_dims)",
        ),
        **_EVERY_ALGORITHM,
    }
    if takes_std_schedule or "std_init" in probed.fields or probed.population_based:
        spread = "; also the spread of the initial population" if probed.population_based else ""
        settings["std_init"] = Setting(0.1, "positive", "initial perturbation std" + spread)
    if probed.population_based:
        settings.update(_POPULATION_VALIDATION)
    if uses_elites(REGISTRY[name]):
        settings.update(_ELITES)
    if takes_std_schedule:
        settings.update(_STD_SCHEDULE)
    if "optimizer" in probed.signature:
        settings.update(_OPTIMIZER)
    shaping_default = default_shaping(name)
    default_name = next((n for n, fn in SHAPING_FNS.items() if fn is shaping_default), "evosax")
    shaping_names = [n for n in SHAPING_FNS if n != "weights" or "weights" in probed.fields]
    if default_name == "evosax":
        shaping_names.insert(0, "evosax")
    settings["fitness_shaping"] = Setting(
        default_name, tuple(shaping_names), "raw fitness -> what the update sees"
    )
    # Groups apply where ranks are taken within a group, and to antithetic pairs: a pair that
    # shares its start compares its two directions on the same episode (ARS's own runs give
    # every pair a start of its own).
    if default_name == "centered_rank" or name in _ALWAYS_ANTITHETIC:
        settings.update(_RANK_GROUPS)
    return settings


def uses_elites(cls: type) -> bool:
    """Whether ``cls`` (or an algorithm it extends) updates from its ``num_elites`` best.

    evosax's base class defines ``num_elites`` for every algorithm; only the algorithms that
    read it, in their own source, are given an ``elite_ratio`` setting.
    """
    return any(
        klass.__module__.startswith("evosax.algorithms.")
        and not klass.__module__.endswith(".base")
        and "num_elites" in inspect.getsource(klass)
        for klass in cls.__mro__
    )


def _add_keyword_settings(settings: dict[str, Setting], probed: _Probed) -> dict[str, str]:
    """Add the constructor's plain keywords to ``settings``; ``{setting: keyword}``."""
    keyword_settings = {}
    for arg in probed.signature.values():
        if arg.name in (*_SUPPLIED, *_NEVER_EXPOSED, *_BUILT_BY_ESJAX):
            continue
        setting = _keyword_setting(arg)
        if setting is not None:
            name_here = RENAMED.get(arg.name, arg.name)
            settings.setdefault(name_here, setting)
            keyword_settings[name_here] = arg.name
    return keyword_settings


def _add_param_settings(settings: dict[str, Setting], probed: _Probed) -> dict[str, str]:
    """Add evosax's scalar params fields to ``settings``; ``{setting: params field}``."""
    param_settings = {}
    for field_name, value in probed.fields.items():
        kind = _setting_kind(value)
        if kind is None:  # arrays sized by popsize or num_dims, networks: derived, not tunable
            continue
        name_here = RENAMED.get(field_name, field_name)
        if name_here not in settings:
            settings[name_here] = Setting(
                None, kind, "evosax params field; default: evosax's (may depend on popsize, n)"
            )
        param_settings[name_here] = field_name
    return param_settings


@functools.cache
def info(name: str) -> AlgorithmInfo:
    """Everything esjax reads from evosax about ``name`` (a registry key); built once."""
    check_runnable(name)
    probed = _probed(name)
    settings = _esjax_settings(name, probed)
    keyword_settings = _add_keyword_settings(settings, probed)
    param_settings = _add_param_settings(settings, probed)
    return AlgorithmInfo(
        name=name,
        cls=REGISTRY[name],
        description=description(name),
        settings=settings,
        param_settings=param_settings,
        keyword_settings=keyword_settings,
        population_based=probed.population_based,
        quadratic=probed.quadratic,
        takes_optimizer="optimizer" in probed.signature,
        takes_std_schedule="std_schedule" in probed.signature,
    )


def settings_table(algorithm: str) -> dict[str, Setting]:
    """The settings ``algorithm`` takes, with defaults; an unknown name is a one-line error."""
    if algorithm not in REGISTRY:
        raise ConfigError(
            f"unknown algorithm {algorithm!r}{suggest(str(algorithm), list(REGISTRY))}; "
            f"valid algorithms: {', '.join(REGISTRY)}"
        )
    return info(algorithm).settings


def constructor_kwargs(algorithm: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The constructor keywords a spec's settings set (``None`` keeps evosax's default)."""
    signature = inspect.signature(REGISTRY[algorithm].__init__).parameters
    kwargs = {}
    for name, evosax_name in info(algorithm).keyword_settings.items():
        value = settings.get(name)
        if value is None:
            continue
        default = signature[evosax_name].default
        kwargs[evosax_name] = type(default)(value) if isinstance(default, enum.Enum) else value
    return kwargs


def default_shaping(algorithm: str) -> Any:
    """The fitness-shaping function evosax's constructor uses when given none."""
    klass: type[Any]
    for klass in REGISTRY[algorithm].__mro__:  # a subclass may pass it on through **kwargs
        arg = inspect.signature(klass.__init__).parameters.get("fitness_shaping_fn")
        if arg is not None and arg.default is not inspect.Parameter.empty:
            return arg.default
    return shaping.identity_fitness_shaping_fn


def is_antithetic(algorithm: str, settings: dict[str, Any]) -> bool:
    """Whether the population is ``[+z, -z]`` (member i is the negative of i - popsize/2)."""
    return algorithm in _ALWAYS_ANTITHETIC or bool(settings.get("antithetic", False))
