"""Strategies: a strategy becomes one evosax object, its params and its optax optimizer.

A strategy is a tuned preset (``strategies/NAME.toml``: an evosax class name, ``algorithm``, and its
``[settings]``) or any evosax algorithm by name with esjax's defaults. A task's settings for the
strategy that runs and ``--set`` overrides are merged on top (:func:`task_strategy` decides
which, in one place). Which settings an algorithm takes is read from evosax itself
(:mod:`esjax._src.strategies.algorithms`); every setting is checked against that list, so a typo is
an error that lists the valid names. No ES maths lives here: the search
itself is evosax's; this module only decides which optimizer, standard-deviation schedule, sampling
and fitness shaping it is built with.

The strategy works on a flat parameter vector (its ``solution`` is a 1-D template), so the
population is a ``(popsize, num_dims)`` array; the engine unravels it for the rollout.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from evosax.core import fitness_shaping as shaping
from evosax.core.optimizer import clipup

from esjax._src.specs import live, policy_kinds, presets
from esjax._src.specs.config import (
    LOOP_SETTINGS,
    ConfigError,
    LoopSettings,
    StrategySpec,
    TaskConfig,
    parse_override,
    suggest,
    to_dict,
)
from esjax._src.strategies import algorithms, lazy_openes
from esjax._src.strategies.algorithms import OPTIMIZERS, SHAPING_FNS, Setting, settings_table
from esjax._src.strategies.built import PopulationState, Strategy
from esjax._src.strategies.cma import resolve_decomposition_every
from esjax._src.strategies.fitness import grouped_shaping
from esjax._src.strategies.population import MATERIALISED, MemberLayout, StrategyForm

__all__ = [
    "OPTIMIZERS",
    "PopulationState",
    "Setting",
    "Strategy",
    "StrategySpec",
    "TaskStrategy",
    "build_strategy",
    "load_strategy",
    "task_strategy",
]


# A numeric setting's kind: (strictly above?, bound, how a refusal names it). A std or a step
# of zero or below searches nowhere or backwards; a negative decay flips the sign every
# generation; a negative floor is no floor.
NUMBER_BOUNDS = {
    "number": (True, -math.inf, "a number"),
    "positive": (True, 0.0, "a number above 0"),
    "nonnegative": (False, 0.0, "a number at or above 0"),
}


def _check_value(name: str, value: Any, setting: Setting, where: str, stored: bool) -> Any:
    kind = "number" if stored and setting.kind in NUMBER_BOUNDS else setting.kind
    if value is None and setting.default is None:
        return None
    if kind == "popsize":
        if value == "auto":
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ConfigError(f"{where}: {name} must be a positive integer or 'auto', got {value!r}")
    if kind in NUMBER_BOUNDS:
        above, lowest, wanted = NUMBER_BOUNDS[kind]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and math.isfinite(value) and (value > lowest if above else value >= lowest):
            return float(value)
        raise ConfigError(f"{where}: {name} must be {wanted}, got {value!r}")
    if kind == "fraction":
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
            return float(value)
        raise ConfigError(f"{where}: {name} must be a number in (0, 1], got {value!r}")
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


def resolve_layers(
    algorithm: str, layers: list[tuple[Mapping[str, Any], str]], *, stored: bool = False
) -> tuple[dict[str, Any], LoopSettings]:
    """``(settings, loop)``: defaults of ``algorithm`` overlaid by each ``(settings, source)``.

    Every layer spells the loop's settings among the strategy's; they are checked against the
    same table (an algorithm takes only those that apply to it) and then kept apart, typed.
    An unknown setting names its source and lists the settings this algorithm takes.
    ``stored``: the settings of a run made earlier, which resumes as it ran, so a numeric
    setting is held only to being a finite number, as every version checked it; the ranges
    added since (:data:`NUMBER_BOUNDS`) are for new runs.
    """
    table = settings_table(algorithm)
    settings = {name: s.default for name, s in table.items()}
    for layer, where in layers:
        for name, value in layer.items():
            if name not in table:
                raise ConfigError(
                    f"{where}: {algorithm} has no setting {name!r}{suggest(name, list(table))}; "
                    f"valid settings: {', '.join(table)}"
                )
            settings[name] = _check_value(name, value, table[name], where, stored)
    loop = LoopSettings(**{name: settings.pop(name) for name in LOOP_SETTINGS if name in settings})
    return settings, loop


def resolve_settings(
    algorithm: str, layers: list[tuple[Mapping[str, Any], str]], *, stored: bool = False
) -> dict[str, Any]:
    """The strategy's own settings of :func:`resolve_layers` (the loop's left out)."""
    return resolve_layers(algorithm, layers, stored=stored)[0]


# Settings layered on a strategy preset, lowest first: ``(settings, where they came from)``.
Layers = Sequence[tuple[Mapping[str, Any], str]]


def parse_strategy(
    name: str,
    raw: Mapping[str, Any],
    source: str,
    overrides: Mapping[str, Any] | None = None,
    overrides_source: str = "strategy_settings",
    *,
    layers: Layers = (),
) -> StrategySpec:
    """A :class:`StrategySpec` from a preset's TOML table plus a task's ``strategy_settings``
    (``overrides``), then each of ``layers`` on top."""
    valid_keys = ("description", "algorithm", "settings")
    for key in raw:
        if key not in valid_keys:
            raise ConfigError(
                f"{source}: unknown key {key!r}{suggest(key, valid_keys)}; "
                f"valid keys: {', '.join(valid_keys)}"
            )
    algorithm = algorithms.canonical_name(str(raw.get("algorithm")))
    if algorithm is None:
        valid = list(algorithms.REGISTRY)
        raise ConfigError(
            f"{source}: unknown algorithm {raw.get('algorithm')!r}"
            f"{suggest(str(raw.get('algorithm')), valid)}; valid algorithms: {', '.join(valid)}"
        )
    try:
        settings_table(algorithm)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    settings_raw = raw.get("settings", {})
    if not isinstance(settings_raw, Mapping):
        raise ConfigError(f"{source}: settings must be a table")
    every = [(settings_raw, source), (overrides or {}, overrides_source), *layers]
    settings, loop = resolve_layers(algorithm, every)
    _check_clipup(settings, every)
    return StrategySpec(name, algorithm, settings, str(raw.get("description", "")), loop)


def _check_clipup(settings: Mapping[str, Any], layers: Layers) -> None:
    """A new run's clipup takes no learning-rate schedule: evosax builds ClipUp around a
    constant step (its velocity cap is max_velocity / lr), so one would be ignored. Runs made
    before this check keep resuming with theirs, as ignored as it always was. The refusal
    names the last layer that set one of the three."""
    if settings.get("optimizer") == "clipup" and (
        settings.get("lr_decay", 1.0) != 1.0 or settings.get("lr_min", 0.0) != 0.0
    ):
        named = [where for layer, where in layers if {"optimizer", "lr_decay", "lr_min"} & {*layer}]
        where = named[-1] if named else layers[-1][1]
        raise ConfigError(
            f"{where}: lr_decay and lr_min do not apply to clipup, whose learning rate is "
            "constant; use optimizer = 'sgd' or 'adam' for a decaying step"
        )


def load_strategy(
    name_or_path: str,
    overrides: Mapping[str, Any] | None = None,
    overrides_source: str = "task",
    *,
    layers: Layers = (),
) -> StrategySpec:
    """A strategy by preset name (``open_es``), path or evosax name, with ``overrides`` on top,
    then each of ``layers``.

    Names are matched case-insensitively; a tuned preset wins over the evosax algorithm of the
    same name (``open_es`` is the preset, ``xnes`` is evosax's xNES with esjax's defaults).
    """
    where = f"{overrides_source}: strategy_settings"
    key = strategy_key(name_or_path)
    if key is not None and key not in presets.names("strategy"):  # an evosax algorithm
        algorithms.check_runnable(key)
        raw = {"algorithm": key, "description": algorithms.description(key)}
        return parse_strategy(key, raw, f"evosax {key}", overrides, where, layers=layers)
    if key is None and not name_or_path.endswith(".toml") and not Path(name_or_path).is_file():
        raise ConfigError(unknown_strategy(name_or_path))
    name, raw, source = presets.locate("strategy", key or name_or_path)
    return parse_strategy(name, raw, source, overrides, where, layers=layers)


def strategy_key(name: str) -> str | None:
    """The name a strategy is known by, as ``--strategy`` reads ``name``: the tuned preset's
    (case-insensitively; a preset wins over the evosax algorithm it tunes), else the evosax
    algorithm's as the registry spells it; ``None`` for anything else (a path, a typo)."""
    lowered = {preset.lower(): preset for preset in presets.names("strategy")}
    if name.lower() in lowered:
        return lowered[name.lower()]
    return None if name.endswith(".toml") else algorithms.canonical_name(name)


def unknown_strategy(name: str) -> str:
    """The message for a strategy name that is neither a preset nor an evosax algorithm."""
    preset_names = presets.names("strategy")
    valid = {n.lower(): n for n in [*algorithms.REGISTRY, *preset_names]}  # presets win
    hint = suggest(name.lower(), list(valid))
    if hint:  # names match case-insensitively, so suggest the way they are spelled
        hint = f" (did you mean {valid[hint.split(chr(39))[1]]!r}?)"
    return (
        f"unknown strategy {name!r}{hint}; "
        f"valid strategy names: {', '.join(preset_names)} (tuned presets), "
        f"or any evosax algorithm: {', '.join(algorithms.REGISTRY)}"
    )


class TaskStrategy(NamedTuple):
    """The strategy a run of a task uses, with what the run took from the task and the command."""

    spec: StrategySpec  # the strategy preset with the task's settings for it and --set on top
    explicit: frozenset[str]  # settings the command set for it: the popsize rule keeps them
    dropped: dict[str, Any]  # the task's default settings this strategy runs without
    note: str | None  # one line naming ``dropped``, for a warning; None when none are


def task_strategy(
    task: TaskConfig,
    source: str,
    *,
    strategy: str | None = None,
    own: str | None = None,
    overrides: Sequence[str] = (),
) -> TaskStrategy:
    """The one place a run's strategy settings are decided (``esjax evolve``, ``evolve()`` and
    every configuration of a sweep come through here).

    ``strategy`` is the one asked for (``--strategy``; default: the task's), ``own`` the one
    the task file names (default ``task.strategy``; ``--set strategy=...`` changes the task
    but not whom its settings were written for), ``overrides`` the ``--set`` strings the task
    was loaded with and ``source`` the file, for messages. Each setting is taken from the
    first of these that gives it:

    1. ``--set strategy_settings.KEY=VALUE``: the command line, for whichever strategy runs;
    2. the task's settings for the strategy that runs: the plain keys of
       ``[strategy_settings]`` if it is the task's own strategy, else its
       ``[strategy_settings.NAME]`` table (which ``--set strategy_settings.NAME.KEY=VALUE``
       edits), else none, and the plain keys are dropped (``note`` names them);
    3. the strategy preset's ``[settings]`` (``strategies/NAME.toml``);
    4. the algorithm's defaults (esjax's, then evosax's).

    Every ``[strategy_settings.NAME]`` table is checked, used or not: NAME must be a strategy
    ``--strategy`` accepts (not the task's own) and its settings ones that strategy takes,
    with values of their kinds; a refusal is one line naming the file and the table.
    """
    own = task.strategy if own is None else own
    name = strategy or task.strategy
    key, own_key = strategy_key(name) or name, strategy_key(own) or own
    tables = _checked_tables(task, source, own_key)
    flat, explicit = _explicit_settings(overrides, key)
    dropped: dict[str, Any] = {}
    task_layer: Mapping[str, Any]
    if key == own_key:
        task_layer, where = task.default_settings, f"{source}: strategy_settings"
    elif key in tables:
        written, task_layer = tables[key]
        where = f"{source}: strategy_settings.{written}"
    else:  # the task has no settings for this strategy; those it has are another's
        task_layer, where = {}, f"{source}: strategy_settings"
        dropped = {k: v for k, v in task.default_settings.items() if k not in flat}
    task_layer = {k: v for k, v in task_layer.items() if k not in flat}  # --set names its own
    spec = load_strategy(name, layers=[(task_layer, where), (flat, "--set strategy_settings")])
    spec = _users_network_start(task, spec, {**task_layer, **flat})
    note = None
    if dropped:  # spelled as --set takes them, so a user can keep one
        given = ", ".join(f"{k}={json.dumps(v)}" for k, v in dropped.items())
        note = (
            f"{source}: its [strategy_settings] are tuned for {own} and it has no "
            f"[strategy_settings.{spec.name}], so {spec.name} runs without {given} "
            "(--set strategy_settings.KEY=VALUE keeps one)"
        )
    return TaskStrategy(spec, frozenset(explicit), dropped, note)


def _users_network_start(
    task: TaskConfig, spec: StrategySpec, given: Mapping[str, Any]
) -> StrategySpec:
    """A user's network (code or an object) is searched from its own initialisation, as it
    was written (a LayerNorm's scale of 0 would switch it off), unless the task or the command
    sets ``mean_init``; esjax's own networks keep the preset's start."""
    kind = task.policy.kind
    users = policy_kinds.names_code(kind) or live.is_live(kind)
    if not users or "mean_init" not in spec.settings or "mean_init" in given:
        return spec
    return dataclasses.replace(spec, settings={**spec.settings, "mean_init": "policy"})


def _checked_tables(
    task: TaskConfig, source: str, own_key: str
) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """``{strategy key: (name as written, settings)}`` of the task's per-strategy tables, each
    checked as the strategy it names would read it."""
    found: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for written, table in task.settings_tables.items():
        where = f"{source}: strategy_settings.{written}"
        key = strategy_key(written)
        if key is None:
            raise ConfigError(f"{where}: a table of settings for an {unknown_strategy(written)}")
        if key == own_key:
            raise ConfigError(
                f"{where}: {written} is this task's own strategy; its settings are the plain "
                "keys of [strategy_settings]"
            )
        if key in found:
            raise ConfigError(f"{where}: a second table for {key} (strategy_settings."
                              f"{found[key][0]} is one)")  # fmt: skip
        try:
            load_strategy(key, layers=[(table, where)])
        except ConfigError as error:
            message = str(error)
            raise ConfigError(message if where in message else f"{where}: {message}") from None
        found[key] = (written, table)
    return found


def _explicit_settings(overrides: Sequence[str], key: str) -> tuple[dict[str, Any], set[str]]:
    """``(settings, names)``: the plain ``--set strategy_settings.KEY=VALUE`` settings, and the
    names of every setting the command set for strategy ``key`` (those and the ones it set in
    that strategy's table)."""
    flat: dict[str, Any] = {}
    names: set[str] = set()
    for text in overrides:
        path, value = parse_override(text)
        if path[0] != "strategy_settings" or len(path) < 2:
            continue
        if len(path) == 2 and not isinstance(value, Mapping):
            flat[path[1]] = value
            names.add(path[1])
        elif strategy_key(path[1]) == key:
            names.update([path[2]] if len(path) > 2 else value)
    return flat, names


def catalogue() -> list[tuple[str, str, str]]:
    """``(name, kind, description)`` of every strategy a user can name, tuned presets first.

    ``kind`` is ``"tuned preset"``, where an algorithm comes from (``"evosax"``, ``"esjax"``
    or the user's module that defines it: :func:`esjax._src.strategies.algorithms.origin`; it runs
    with esjax's defaults) or ``"cannot run"`` (the description then says why). Reads no evosax
    params: it is instant.
    """
    rows: list[tuple[str, str, str]] = []
    tuned: dict[str | None, list[str]] = {}
    for name, text in presets.describe("strategy"):
        algorithm = str(presets.locate("strategy", name)[1].get("algorithm", ""))
        tuned.setdefault(algorithms.canonical_name(algorithm), []).append(name)
        rows.append((name, "tuned preset", f"{text} [{algorithm}]"))
    for name in algorithms.REGISTRY:
        reason = algorithms.refusal(name)
        if reason:
            rows.append((name, "cannot run", reason))
            continue
        text = algorithms.description(name)
        if name in tuned:
            text = text.rstrip(".") + f"; tuned preset: {', '.join(tuned[name])}"
        rows.append((name, algorithms.origin(name), text))
    return rows


def resolve_popsize(spec: StrategySpec, num_dims: int, popsize: int | None = None) -> int:
    """The population size: an explicit one, else the spec's (``auto`` = 4 + 3 ln n, even)."""
    value = popsize if popsize is not None else spec.settings["popsize"]
    if value == "auto":
        value = 4 + int(3 * math.log(num_dims))
        value += value % 2
    value = int(value)
    if value < 2:
        raise ConfigError(f"popsize must be at least 2, got {value}")
    if antithetic(spec) and value % 2:
        raise ConfigError(
            f"popsize {value}: {spec.algorithm} samples antithetic pairs, so popsize must be even"
        )
    groups = env_groups(spec, value)
    if value % (2 * groups if antithetic(spec) else groups):
        raise ConfigError(
            f"popsize {value} does not split into env_groups = {groups} groups"
            + (" of antithetic pairs" if antithetic(spec) else "")
        )
    return value


# Members per group with env_groups = "auto": enough for a within-group ranking to carry
# magnitude information (measured on Pendulum at popsize 256 and 2048), while a generation
# still averages over popsize / 32 different episode starts.
MEMBERS_PER_GROUP = 32


def env_groups(spec: StrategySpec, popsize: int) -> int:
    """The number of member groups (1 for strategies that do not group)."""
    groups = spec.loop.env_groups
    if groups != "auto":
        return int(groups)
    unit = 2 if antithetic(spec) else 1
    groups = max(1, popsize // MEMBERS_PER_GROUP)
    while popsize % (unit * groups):
        groups -= 1
    return groups


def antithetic(spec: StrategySpec) -> bool:
    """Whether the strategy's population is ``[+z, -z]``: member ``i + popsize / 2`` is the
    negative of member ``i``'s noise."""
    return algorithms.is_antithetic(spec.algorithm, spec.settings)


def _decaying(value: Any, decay: Any, floor: Any) -> optax.Schedule:
    """``value * decay ** count`` held at ``floor``; constant for a decay of 1 (or 0).

    optax's exponential decay with one transition step, written so that any of the three may
    be a traced array (a sweep vmaps them): the branches optax takes in Python are ``where``s.
    A growing schedule (decay above 1) is capped at ``floor`` only when one is set: the
    default floor of 0 would otherwise hold it at 0 from the start.
    """

    def schedule(count: jax.Array) -> jax.Array:
        p = count / 1
        decayed = jnp.where(count <= 0, value, value * jnp.power(decay, p))
        capped = jnp.where(floor > 0.0, jnp.minimum(decayed, floor), decayed)
        clipped = jnp.where(decay < 1.0, jnp.maximum(decayed, floor), capped)
        constant = (decay == 1.0) | (decay == 0.0)
        return jnp.where(constant, jnp.asarray(value, clipped.dtype), clipped)

    return schedule


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
    """The fitness shaping a spec asks for (``evosax`` = the class default), grouped, penalised."""
    settings = spec.settings
    fn = SHAPING_FNS.get(settings["fitness_shaping"], default)
    groups = spec.loop.env_groups  # a count once built (``"auto"`` resolved)
    if isinstance(groups, int) and groups > 1:
        fn = grouped_shaping(fn, groups, antithetic(spec))
    if settings["l2_penalty"]:
        fn = shaping.add_weight_decay(fn, settings["l2_penalty"])
    return fn


def _param_value(default: Any, value: Any) -> Any:
    """``value`` in the type evosax's default params use for that field."""
    if hasattr(default, "dtype"):
        return jnp.asarray(value, default.dtype)
    return type(default)(value)


def evosax_class(algorithm: str) -> type:
    """The class esjax builds for ``algorithm``: the one place to substitute another."""
    return algorithms.REGISTRY[algorithm]


def build_strategy(spec: StrategySpec, num_dims: int, popsize: int | None = None) -> Strategy:
    """The evosax object for ``spec`` over a flat ``num_dims`` vector.

    Constructor arguments and params fields come from the spec's settings by the names
    :mod:`esjax._src.strategies.algorithms` discovered; a setting left at ``None`` keeps evosax's
    own value.
    """
    n = resolve_popsize(spec, num_dims, popsize)
    # Concrete from here on: the engine reads the group count from the built strategy.
    spec = dataclasses.replace(
        spec, loop=dataclasses.replace(spec.loop, env_groups=env_groups(spec, n))
    )
    s = spec.settings
    found = algorithms.info(spec.algorithm)
    cls = evosax_class(spec.algorithm)
    # An algorithm of esjax's or a user's may refuse some of esjax's own settings (the
    # low-rank strategy: an L2 penalty, which reads members it never forms).
    problem = algorithm_form(spec.algorithm).check_settings(s)
    if problem:
        raise ConfigError(f"{spec.algorithm}: {problem}")
    kwargs = algorithms.constructor_kwargs(spec.algorithm, s)
    if found.takes_optimizer:
        kwargs["optimizer"] = make_optimizer(s)
    if found.takes_std_schedule:
        kwargs["std_schedule"] = _decaying(s["std_init"], s["std_decay"], s["std_min"])
    default_shaping = algorithms.default_shaping(spec.algorithm)
    kwargs["fitness_shaping_fn"] = _shaping(spec, default_shaping)
    solution = jnp.zeros((num_dims,), jnp.float32)
    try:
        es = cls(n, solution, **kwargs)
    except (AssertionError, ValueError) as error:  # evosax checks its arguments with asserts
        reason = str(error).strip() or type(error).__name__
        raise ConfigError(
            f"{spec.algorithm} cannot be built with popsize {n} and {num_dims} parameters: {reason}"
        ) from None
    if s.get("elite_ratio") is not None:
        _set_elite_ratio(es, s["elite_ratio"])
    defaults = es.default_params
    replace = {
        evosax_name: _param_value(getattr(defaults, evosax_name), s[name])
        for name, evosax_name in found.param_settings.items()
        if s.get(name) is not None
    }
    params = defaults.replace(**replace)
    return Strategy(spec, es, params, n, num_dims, found.population_based)


def _set_elite_ratio(es: Any, ratio: float) -> None:
    """Set evosax's ``elite_ratio``, an attribute rather than a constructor argument, before the
    params that derive from it (CMA-ES's recombination weights) are read.

    iAMaLGaM also sizes its anticipated-mean-shift group from the ratio, once, in its
    constructor (evosax 0.3: ``0.5 * ratio * n / (n - elites)`` of the other ``n - 1``
    members); that size is derived again here, or it would stay at the default ratio's. A
    ratio near 1 would ask for more members than there are (or divide by zero): it is held at
    ``n - 1``, as evosax draws the group without replacement.
    """
    es.elite_ratio = ratio
    if hasattr(es, "ams_population_size"):
        n, elites = es.population_size, es.num_elites
        share = 0.5 * ratio * n / (n - elites) if elites < n else 1.0
        es.ams_population_size = min(int(share * (n - 1)), n - 1)


def with_settings(strategy: Strategy, values: Mapping[str, Any]) -> Strategy:
    """``strategy`` rebuilt with some settings replaced (by traced arrays, inside a trace)."""
    if not values:
        return strategy
    spec = dataclasses.replace(strategy.spec, settings={**strategy.spec.settings, **values})
    return build_strategy(spec, strategy.num_dims, strategy.popsize)


# Settings read once, when the engine is built (a shape), not by the strategy's ask and tell:
# tracing them would pass the check below while the compiled program kept the built value, so
# configurations of a sweep differing only in them would silently run the same search. (The
# loop's settings, such as worst_episodes, are not among the strategy's settings at all.)
BUILD_TIME_SETTINGS = frozenset({"popsize", "elite_ratio"})


# ``remember(kind, key, compute)``: ``compute()``, or what an earlier process computed for ``key``.
Remember = Callable[[str, Any, Callable[[], Any]], Any]


def compute_now(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """A :data:`Remember` that remembers nothing: strategies read and write no files; the host
    hands in one that keeps results on disk (:func:`esjax._src.run.cache.remembered`)."""
    return compute()


def traced_settings(strategy: Strategy, remember: Remember = compute_now) -> tuple[str, ...]:
    """The float settings that can be arrays inside the compiled generation, by trying it.

    A candidate is every setting whose value is a float. It is traced if building the strategy
    with it as an array and tracing ``init``, ``ask`` and ``tell`` works: a setting that
    decides structure (a Python branch, a shape, a constructor check) cannot be traced, so it
    stays a constant and configurations that differ in it compile separately.
    """
    candidates = sorted(
        name
        for name, value in strategy.spec.settings.items()
        if isinstance(value, float) and name not in BUILD_TIME_SETTINGS
    )

    def works(names: Sequence[str]) -> bool:
        def step(values):
            built = with_settings(strategy, values)
            key = jax.random.key(0)
            mean = jnp.zeros((strategy.num_dims,), jnp.float32)
            state = built.init(key, mean)
            population, state = built.ask(key, state)
            fitness = jnp.zeros((strategy.popsize,), jnp.float32)
            return built.tell(key, population, fitness, state)

        values = {n: jnp.float32(strategy.spec.settings[n]) for n in names}
        try:
            jax.eval_shape(step, values)
        except Exception:  # a concretization, a bool of a tracer, a failed evosax assert, ...
            return False
        return True

    def search() -> list[str]:
        if works(candidates):
            return candidates
        found = [name for name in candidates if works([name])]
        while found and not works(found):  # two that trace alone but not together: keep fewer
            found.pop()
        return found

    # Tracing the strategy up to a dozen times is a noticeable share of a warm start.
    spec = strategy.spec
    key = [spec.algorithm, spec.settings, to_dict(spec.loop), strategy.num_dims, strategy.popsize]
    return tuple(remember("traced-settings", key, search))


def strategy_cost_hint(strategy: Strategy, steps_per_member: int) -> str | None:
    """A one-line warning when the strategy's own maths likely rivals the rollouts' cost.

    A rough count of floating-point work per generation: the rollouts evaluate an MLP of
    ``num_dims`` weights (~2 flops each) at every step of every member's episodes; diagonal
    strategies touch each of ``popsize x num_dims`` noise entries a few dozen times (drawing a
    Gaussian dominates), or as often as the algorithm's ``flops_per_entry`` says; full-matrix
    strategies (CMA-ES, xNES, ...) also multiply by and decompose an n x n matrix.
    """
    spec, num_dims, popsize = strategy.spec, strategy.num_dims, strategy.popsize
    n, p = float(num_dims), float(popsize)
    rollout = 2.0 * n * p * steps_per_member
    full = algorithms.info(spec.algorithm).quadratic
    # A lazily decomposed CMA-ES pays the n^3 decomposition once every k generations.
    every = spec.settings.get("decomposition_every")
    every = resolve_decomposition_every(every, num_dims, popsize) if every is not None else 1
    # A form says what it spends per member and parameter (the low-rank strategy only
    # multiplies thin factors: no Gaussian per entry).
    per_entry = form_for(strategy).flops_per_entry(strategy)
    cost = 4.0 * p * n * n + 10.0 * n**3 / every if full else per_entry * p * n
    # Below ~1e8 flops (milliseconds) the strategy's cost is not worth a warning.
    if cost < 0.5 * rollout or cost < 1e8:
        return None
    advice = (
        "raise decomposition_every, or prefer sep_cma_es, snes or open_es above ~1000 parameters"
        if full
        else "longer episodes or more rollouts per member amortise it"
    )
    return (
        f"{spec.algorithm} at {num_dims} parameters x popsize {popsize} may cost about "
        f"{cost / rollout:.1f}x the rollouts per generation; {advice}"
    )


# Forms of algorithms esjax does not own (evosax's OpenES), tried after the algorithm's own:
# the first whose ``applies`` accepts a run's strategy steps it. An algorithm of esjax's or a
# user's declares its form itself, as its class attribute ``form``.
ADOPTED_FORMS: tuple[StrategyForm, ...] = (lazy_openes.LAZY_OPENES,)
# What a declared form must have (the members of :class:`StrategyForm`).
FORM_MEMBERS = ("name", "applies", "check_settings", "flops_per_entry", "held_floats", "ask",
                "tell")  # fmt: skip


def declared_form(algorithm: type) -> StrategyForm | None:
    """The form ``algorithm`` declares as its class attribute ``form``, held to the protocol
    in one line; None where it declares none."""
    form = getattr(algorithm, "form", None)
    if form is None:
        return None
    missing = [name for name in FORM_MEMBERS if not hasattr(form, name)]
    if missing:
        raise ConfigError(
            f"{algorithm.__name__}.form has no {missing[0]!r} "
            "(the protocol is esjax._src.strategies.population.StrategyForm)"
        )
    return form


def algorithm_form(name: str) -> StrategyForm:
    """The form an algorithm of the registry declares, else evosax's own (materialised)."""
    return declared_form(algorithms.REGISTRY[name]) or MATERIALISED


def form_for(strategy: Strategy) -> StrategyForm:
    """How the engine steps ``strategy``: its algorithm's own form where that applies, else the
    first of :data:`ADOPTED_FORMS` that does, else :data:`MATERIALISED`."""
    own = declared_form(type(strategy.es))
    candidates = (*([own] if own is not None else []), *ADOPTED_FORMS)
    return next((form for form in candidates if form.applies(strategy)), MATERIALISED)


def population_floats(
    strategy: Strategy, layout: MemberLayout, devices: int, chunk_for: Callable[[int], int]
) -> int:
    """Floats one device holds for a generation's population, for the memory preflight: its
    form's own count, with the chunk of members the rollout steps at once (``chunk_for``: from
    the bytes a member holds in a chunk to members per chunk). Shapes only: nothing is drawn."""
    form = form_for(strategy)
    found: list[int] = []

    def held(key: jax.Array) -> None:
        state = strategy.init(key, jnp.zeros((strategy.num_dims,), jnp.float32))
        population, _ = form.ask(strategy, key, state, layout, None)
        chunk = chunk_for(population.member_bytes())
        found.append(form.held_floats(strategy, layout, devices, chunk))

    jax.eval_shape(held, jax.random.key(0))
    return found[0]
