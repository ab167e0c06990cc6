"""Validated specs: TOML presets and ``--set`` overrides become frozen dataclasses.

Parsing is strict so that a typo never silently falls back to a default: an unknown key, a
wrong type or an impossible value raises :class:`ConfigError` with a one-line message that
names the file, the key, what was expected and, for unknown keys, the nearest valid one.
This module knows nothing about JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os
import stat
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esjax._src.specs import policy_kinds


class ConfigError(ValueError):
    """A config problem a person can fix; its message is one line."""


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted names of the leaves that differ between two JSON-like dicts (for an error that
    says what changed, not only that something did)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [k for key in keys
                for k in changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if old == new else [prefix.rstrip(".") or "the config"]


def suggest(name: str, valid: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the nearest valid name, or an empty string."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# The largest task file read (the largest preset is a few kilobytes).
TOML_LIMIT = 1024 * 1024
# The largest integer a setting may hold: sizes, steps and seeds are int32 on the device.
MAX_INT = 2**31 - 1


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = _read_regular(path, TOML_LIMIT + 1)
        if len(data) > TOML_LIMIT:
            raise ConfigError(f"{path}: larger than a task file can be ({TOML_LIMIT:,} bytes)")
        return tomllib.loads(data.decode())
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a task file") from None
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: no such file") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from err
    except UnicodeDecodeError as err:  # TOML is UTF-8
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err


def _read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path``: a FIFO or device a task's path
    names (a sweep's record may name any) is refused at once, never waited on or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return os.read(fd, limit)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[list[str], Any]:
    """``"strategy.lr=0.1"`` -> ``(["strategy", "lr"], 0.1)``; values are read as TOML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    path = [part.strip() for part in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word such as adam or Pendulum-v1
    return path, value


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``raw`` with each ``key.sub=value`` set; unknown keys are caught by parsing."""
    result = _deep_copy(raw)
    for text in overrides:
        path, value = parse_override(text)
        node = result
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a table")
            node = child
        node[path[-1]] = value
    return result


def _deep_copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in raw.items()}


# ---------------------------------------------------------------------------- strict parsing
def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a table"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(_at(where, f"expected {_type_name(tp)}, got {value!r}"))
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        if isinstance(value, list | tuple):
            return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
        raise ConfigError(_at(where, f"expected {_type_name(tp)}, got {value!r}"))
    if origin is dict:
        _, value_type = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(_at(where, f"expected a table, got {value!r}"))
        return {str(k): _convert(v, value_type, _child(where, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(_at(where, f"expected a table, got {value!r}"))
        if hasattr(tp, "from_table"):  # a table whose keys depend on one of them
            return tp.from_table(value, where)
        return parse_into(typing.cast(type, tp), value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"unsupported config type {tp!r}")
    raise ConfigError(_at(where, f"expected {_type_name(tp)}, got {value!r}"))


def parse_into(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and wrong types.

    ``where`` prefixes every message: ``"FILE:"`` at the top, ``"FILE: policy"`` below it.
    After construction the dataclass's ``validate()`` (if any) checks values against each other.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            raise ConfigError(
                _at(
                    where,
                    f"unknown key {key!r}{suggest(key, list(fields))}; "
                    f"valid keys: {', '.join(fields)}",
                )
            )
    kwargs = {}
    for name in fields:
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], _child(where, name))
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(_at(where, f"missing required key {missing[0]!r}"))
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(where)
    return obj


def to_dict(obj: Any) -> Any:
    """A JSON/TOML-ready view of a spec (tuples become lists)."""
    if hasattr(obj, "to_table"):
        return obj.to_table()
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    return obj


def _integer(value: Any, name: str, source: str) -> int:
    """``int(value)`` for a count read from a file; infinity or NaN there names the field."""
    try:
        return int(value)
    except (OverflowError, ValueError):
        raise ConfigError(f"{source}: {name}: not an integer ({value!r:.40})") from None


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise ConfigError(_at(where, message))


def _at(where: str, message: str) -> str:
    """``"FILE: key.path: message"``; ``where`` is ``"FILE:"`` at the top level."""
    return f"{where.rstrip(':')}: {message}" if where else message


def _child(where: str, name: str) -> str:
    if not where:
        return name
    return f"{where} {name}" if where.endswith(":") else f"{where}.{name}"


# ---------------------------------------------------------------------------- task specs
DISTRIBUTIONS = ("uniform", "log_uniform", "choice", "random_sign")
ACTION_MODES = ("greedy", "sample", "raw")
# What a policy's test returns can be set against (``esjax eval --baseline``).
BASELINES = ("analytic", "random", "zero")


def baseline_label(baseline: str) -> str:
    """A baseline's key among a record's returns: "zero" alone would not say what was played."""
    return "zero action" if baseline == "zero" else baseline


# Fresh test episodes per seed behind the solved verdict, unless a task sets ``test_episodes``.
DEFAULT_TEST_EPISODES = 128


@dataclass(frozen=True)
class ParamDistribution:
    """How one env parameter is drawn per rollout.

    ``uniform`` / ``log_uniform`` over ``[low, high]``; ``choice`` among ``values``;
    ``random_sign``: a magnitude drawn log-uniformly from ``[low, high]`` times a random sign.
    """

    dist: str
    low: float = 0.0
    high: float = 0.0
    values: tuple[float, ...] = ()

    def validate(self, where: str) -> None:
        _require(
            self.dist in DISTRIBUTIONS,
            _child(where, "dist"),
            f"unknown distribution {self.dist!r}{suggest(self.dist, DISTRIBUTIONS)}; "
            f"choose from {', '.join(DISTRIBUTIONS)}",
        )
        if self.dist == "choice":
            _require(len(self.values) > 0, _child(where, "values"), "choice needs a non-empty list")
        else:
            _require(
                self.low <= self.high, where, f"low ({self.low}) must be <= high ({self.high})"
            )
        if self.dist in ("log_uniform", "random_sign"):
            _require(
                self.low > 0, _child(where, "low"), f"{self.dist} needs low > 0, got {self.low}"
            )


# Where a parameter of a physical env must lie for the env to simulate it and esjax to draw it:
# a length or a time step of 0 divides by zero in the dynamics, and a negative mass has no
# radius to draw. A pendulum's mass may be negative: its sign flips the actuator, a variant
# pendulum-sign trains on.
PARAM_DOMAINS: dict[str, dict[str, str]] = {
    "CartPole-v1": {"masscart": "positive", "masspole": "non-negative", "length": "positive",
                    "tau": "positive"},
    "Pendulum-v1": {"m": "nonzero", "l": "positive", "dt": "positive"},
    "Acrobot-v1": {"link_length_1": "positive", "link_length_2": "positive",
                   "link_mass_1": "non-negative", "link_mass_2": "non-negative",
                   "link_moi": "positive", "dt": "positive"},
}  # fmt: skip
# Whether a closed interval [low, high] of values lies inside each domain.
_DOMAIN_HOLDS: dict[str, Callable[[float, float], bool]] = {
    "positive": lambda low, high: low > 0,
    "non-negative": lambda low, high: low >= 0,
    "nonzero": lambda low, high: low > 0 or high < 0,
}
_DOMAIN_WORDS = {"positive": "above 0", "non-negative": "0 or more", "nonzero": "other than 0"}


def check_param_values(env: object, values: Mapping[str, Any], where: str) -> None:
    """The one guard on fixed env parameters, wherever they come from (a task file, ``--set``,
    a run's ``config.json``, ``render --param``, a grid's axis): each number finite and inside
    the range its env can simulate and draw (:data:`PARAM_DOMAINS`); else one line naming it."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue  # a switch, or not a number: the env's own types say what it takes
        if not math.isfinite(value):
            raise ConfigError(_at(where, f"{name} = {value!r} is not a finite number"))
        _check_in_domain(env, name, float(value), float(value), f"{name} = {value!r}", where)


def check_param_ranges(
    env: object, distributions: Mapping[str, ParamDistribution], where: str
) -> None:
    """:func:`check_param_values` for what a sampler or a split draws: every value each
    distribution can give lies inside its parameter's range."""
    for name, dist in distributions.items():
        if dist.dist == "choice":
            for value in dist.values:
                check_param_values(env, {name: value}, where)
            continue
        spans = [(dist.low, dist.high)]
        if dist.dist == "random_sign":
            spans.append((-dist.high, -dist.low))
        for low, high in spans:
            _check_in_domain(env, name, low, high, f"{name} from {low:g} to {high:g}", where)


def _check_in_domain(
    env: object, name: str, low: float, high: float, what: str, where: str
) -> None:
    domain = PARAM_DOMAINS.get(env, {}).get(name) if isinstance(env, str) else None
    if domain is not None and not _DOMAIN_HOLDS[domain](low, high):
        raise ConfigError(
            _at(where, f"{what}: {env} cannot simulate or draw it ({name} must be "
                       f"{_DOMAIN_WORDS[domain]})")
        )  # fmt: skip


@dataclass(frozen=True)
class PolicyConfig:
    """A task's ``[policy]`` table: the kind, what it is shown, how its outputs are read, and
    the kind's own settings (:mod:`esjax._src.specs.policy_kinds`: ``hidden`` for ``mlp``, ``lstm``
    and ``gru``, ``channels`` for ``cnn``, ..., or a user's factory's arguments).

    ``param_inputs`` names env parameters appended to the observation (an oracle baseline);
    ``frame_stack`` feeds the last k observations (a memory without recurrence).

    ``actions``, for discrete actions: ``"greedy"`` takes the argmax of the logits;
    ``"sample"`` draws from their softmax in training and testing alike. A sampled policy's
    expected return changes smoothly with its weights, so ES sees a gradient where a greedy one
    sits on a plateau of identical episodes (a deterministic game such as Breakout-MinAtar).
    Continuous actions are ``tanh`` squashed into the env's bounds, except with ``"raw"``: the
    network's outputs go to the env as they are, and the env applies its bounds (ARS's linear
    policies; Brax charges its control cost on the action given, so large actions cost more).

    ``mirror`` (kinds that take it): each observation component's sign when the env is
    seen in a mirror, e.g. ``[1, -1, -1]`` for the pendulum's cos, sin and speed; the policy
    then answers a mirrored state with the mirrored action (:mod:`esjax._src.policies.mirror`).
    ``mirror_actions`` (discrete actions): the action each action becomes in the mirror.

    A kind's settings read as attributes of the whole (``task.policy.hidden``).
    """

    kind: str = "mlp"
    meta_inputs: tuple[str, ...] = ()
    param_inputs: tuple[str, ...] = ()
    frame_stack: int = 1
    actions: str = "greedy"
    mirror: tuple[float, ...] = ()
    mirror_actions: tuple[int, ...] = ()
    settings: object = field(default_factory=policy_kinds.MLPSettings)

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("settings")
        if settings is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(settings, name)
        except AttributeError:
            raise AttributeError(f"a {self.kind} policy has no setting {name!r}") from None

    @property
    def policy_kind(self) -> policy_kinds.PolicyKind:
        kind = policy_kinds.kind_named(self.kind)
        assert kind is not None, "validated when parsed"
        return kind

    @classmethod
    def from_table(cls, data: Mapping[str, Any], where: str) -> PolicyConfig:
        """A ``[policy]`` table read strictly: the shared keys here, the rest by the kind."""
        kind_name = _convert(data.get("kind", "mlp"), str, _child(where, "kind"))
        kind = policy_kinds.kind_named(kind_name)
        if kind is None:
            names = list(policy_kinds.KINDS)
            message = (
                f"unknown policy kind {kind_name!r}{suggest(kind_name, names)}; choose from "
                f"{', '.join(names)}, or name your own network's factory ('file.py:factory')"
            )
            raise ConfigError(_at(_child(where, "kind"), message))
        hints = typing.get_type_hints(cls)
        shared = {name: _convert(value, hints[name], _child(where, name))
                  for name, value in data.items() if name in policy_kinds.SHARED_KEYS}  # fmt: skip
        own = {name: value for name, value in data.items() if name not in shared}
        if isinstance(kind, policy_kinds.CodeKind):
            settings: object = policy_kinds.CodeSettings(own)
        else:
            settings = parse_into(kind.settings_type, _owned(kind, own, where), where)
        problem = kind.problem(settings)
        if problem:
            raise ConfigError(_at(_child(where, problem[0]), problem[1]))
        config = cls(**{**shared, "kind": kind_name}, settings=settings)
        config.validate(where)
        return config

    def to_table(self) -> dict[str, Any]:
        """The table as ``config.json`` holds it: flat, and for a built-in kind with every
        built-in key (another kind's at its default), the shape runs have always had."""
        shared = {name: to_dict(getattr(self, name)) for name in policy_kinds.SHARED_KEYS}
        if isinstance(self.settings, policy_kinds.CodeSettings):
            return {**shared, **to_dict(self.settings.extras)}
        own = {**policy_kinds.legacy_defaults(), **to_dict(self.settings)}
        return {**shared, **to_dict(own)}

    def validate(self, where: str) -> None:
        _require(
            self.actions in ACTION_MODES,
            _child(where, "actions"),
            f"unknown action mode {self.actions!r}{suggest(self.actions, ACTION_MODES)}; "
            f"choose from {', '.join(ACTION_MODES)}",
        )
        if not self.policy_kind.mirrorable:
            takers = [name for name, kind in policy_kinds.KINDS.items() if kind.mirrorable]
            _require(
                not self.mirror and not self.mirror_actions,
                _child(where, "mirror"),
                f"is for {_listed(takers)} policies, not {self.kind}",
            )
        _require(
            self.frame_stack > 0,
            _child(where, "frame_stack"),
            f"must be positive, got {self.frame_stack}",
        )


def _owned(kind: policy_kinds.PolicyKind, table: Mapping[str, Any], where: str) -> dict:
    """``table`` without the built-in keys ``kind`` does not own, which an old ``config.json``
    holds at their defaults; one set to anything else is a line naming the kinds that take it.
    """
    owned = _field_names(kind.settings_type)
    legacy = policy_kinds.legacy_defaults()
    for name, value in table.items():
        if name in owned:
            continue
        if name not in legacy:
            valid = [*policy_kinds.SHARED_KEYS, *owned]
            raise ConfigError(_at(where, f"unknown key {name!r}{suggest(name, valid)}; "
                                         f"valid keys: {', '.join(valid)}"))  # fmt: skip
        if value != to_dict(legacy[name]):
            takers = [other.name for other in policy_kinds.KINDS.values()
                      if name in _field_names(other.settings_type)]  # fmt: skip
            raise ConfigError(
                _at(_child(where, name), f"is for {_listed(takers)} policies, not {kind.name}")
            )
    return {name: value for name, value in table.items() if name in owned}


def _field_names(cls: type) -> set[str]:
    return {item.name for item in dataclasses.fields(cls)}


def _listed(names: Sequence[str]) -> str:
    """``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate the search mean (and best member) every ``every`` generations."""

    every: int = 10
    episodes: int = 128

    def validate(self, where: str) -> None:
        _require(self.every > 0, _child(where, "every"), f"must be positive, got {self.every}")
        _require(
            self.episodes > 0, _child(where, "episodes"), f"must be positive, got {self.episodes}"
        )


@dataclass(frozen=True)
class GridAxis:
    """One axis of ``esjax eval --grid``: an env parameter and the values it takes."""

    param: str
    values: tuple[float, ...]

    def validate(self, where: str) -> None:
        _require(len(self.values) > 0, _child(where, "values"), "needs at least one value")


@dataclass(frozen=True)
class ScalingConfig:
    """Inputs of the popsize rule (:mod:`esjax._src.specs.popsize_rule`): how settings follow
    popsize.

    ``reference_popsize`` is the popsize the task's ``generations`` and schedule were tuned
    at (default: the task's ``popsize``, else the strategy preset's); the env-step budget
    grows as ``(popsize / reference_popsize) ** budget_exponent`` and the strategy's learning
    rate as ``(popsize / reference_popsize) ** lr_exponent``.
    """

    reference_popsize: int | None = None
    budget_exponent: float = 0.5
    min_generations: int = 10
    lr_exponent: float = 0.0

    def validate(self, where: str) -> None:
        if self.reference_popsize is not None:
            _require(
                self.reference_popsize > 0,
                _child(where, "reference_popsize"),
                f"must be positive, got {self.reference_popsize}",
            )
        _require(
            0.0 <= self.budget_exponent <= 1.0,
            _child(where, "budget_exponent"),
            f"must be between 0 and 1, got {self.budget_exponent}",
        )
        _require(
            self.min_generations > 0,
            _child(where, "min_generations"),
            f"must be positive, got {self.min_generations}",
        )
        _require(
            -1.0 <= self.lr_exponent <= 1.0,
            _child(where, "lr_exponent"),
            f"must be between -1 and 1, got {self.lr_exponent}",
        )


def split_strategy_settings(table: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(default settings, per-strategy tables)`` of a task's ``[strategy_settings]``.

    Its plain keys are the settings of the task's own ``strategy``; each sub-table
    (``[strategy_settings.lowrank_es]``) holds the settings of the strategy it is named after.
    No strategy setting takes a table, so a value that is one can only be such a sub-table.
    The two are told apart here alone, so the task file, ``config.json`` and ``esjax list``
    read them the same way.
    """
    tables = {name: value for name, value in table.items() if isinstance(value, Mapping)}
    plain = {name: value for name, value in table.items() if name not in tables}
    return plain, tables


@dataclass(frozen=True)
class TaskConfig:
    """One task preset (``tasks/NAME.toml``).

    ``strategy`` is the strategy a run uses unless ``--strategy`` names another, and the plain
    keys of ``[strategy_settings]`` are that strategy's settings (tuned for it).
    ``[strategy_settings.NAME]`` sub-tables hold the settings for another strategy NAME (a
    preset name such as ``lowrank_es``, or an evosax algorithm, spelled as ``--strategy``
    takes it), used when a run names it. ``strategy_settings`` holds both as the file does,
    so ``config.json`` stores the task as it was given; :attr:`default_settings` and
    :attr:`settings_tables` read them apart, and
    :func:`esjax._src.strategies.strategy.task_strategy` decides which a run takes.
    """

    env: str
    description: str = ""
    episode_length: int | None = None
    rollouts: int = 1
    popsize: int | None = None
    normalize_obs: bool = False
    # Subtracted from every training step's reward (ARS's shift for an alive bonus); evaluation
    # and test returns are the env's own.
    reward_shift: float = 0.0
    generations: int = 100
    env_params: dict[str, float | bool] = field(default_factory=dict)
    # Options for the env's maker: gymnax's ``make``, a suite's adapter or a user's factory
    # (``env = "file.py:factory"``), as keyword arguments.
    env_kwargs: dict[str, int | float | bool | str] = field(default_factory=dict)
    env_sampler: dict[str, ParamDistribution] = field(default_factory=dict)
    splits: dict[str, dict[str, ParamDistribution]] = field(default_factory=dict)
    # ``rows`` and ``columns``: the default axes of ``esjax eval RUN --grid``.
    grid: dict[str, GridAxis] = field(default_factory=dict)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    strategy: str = "open_es"
    strategy_settings: dict[str, Any] = field(default_factory=dict)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    # Test return at which the task counts as solved (reported at the end of a run, drawn in plots).
    solved_return: float | None = None
    # The mean return of a uniformly random policy on this task: the floor of ``esjax report``'s
    # normalised score (0 = random, 1 = solved_return). Unset, the report measures it.
    random_return: float | None = None
    # Fresh test episodes behind the solved verdict and ``esjax eval``'s default: raise it where
    # one episode's return is noisy (UmbrellaChain's distractor rewards: a standard deviation of
    # 3, so 128 episodes leave a standard error of 0.27 on a return of at most 1).
    test_episodes: int = DEFAULT_TEST_EPISODES
    # Members of one seed per device that step together in a rollout on a CPU
    # (``PopulationRollout``'s ``chunk_size``; seeds run side by side step together, so
    # ``--seeds N`` steps N times as many). Unset, chunks are sized to keep the weights in
    # cache; an env whose own state dwarfs the weights (a MuJoCo model) can run faster in
    # smaller chunks. An accelerator ignores it and steps the whole population at once.
    chunk_size: int | None = None

    @property
    def default_settings(self) -> dict[str, Any]:
        """The plain keys of ``[strategy_settings]``: the settings of the task's ``strategy``."""
        return split_strategy_settings(self.strategy_settings)[0]

    @property
    def settings_tables(self) -> dict[str, Any]:
        """``{strategy name as written: its settings}``: the ``[strategy_settings.NAME]`` tables."""
        return split_strategy_settings(self.strategy_settings)[1]

    def validate(self, where: str) -> None:
        # Read from a task file, --set or a run's config.json alike: every command is guarded.
        check_param_values(self.env, self.env_params, _child(where, "env_params"))
        for name, distributions in [
            ("env_sampler", self.env_sampler),
            *((f"splits.{split}", table) for split, table in self.splits.items()),
        ]:
            check_param_ranges(self.env, distributions, _child(where, name))
        if self.chunk_size is not None:
            _require(
                self.chunk_size > 0,
                _child(where, "chunk_size"),
                f"must be positive, got {self.chunk_size}",
            )
        if self.episode_length is not None:
            _require(
                self.episode_length > 0,
                _child(where, "episode_length"),
                f"must be positive, got {self.episode_length}",
            )
        _require(
            self.rollouts > 0, _child(where, "rollouts"), f"must be positive, got {self.rollouts}"
        )
        _require(
            math.isfinite(self.reward_shift),
            _child(where, "reward_shift"),
            f"must be a finite number, got {self.reward_shift}",
        )
        if self.popsize is not None:
            _require(
                self.popsize > 0, _child(where, "popsize"), f"must be positive, got {self.popsize}"
            )
        _require(
            self.generations > 0,
            _child(where, "generations"),
            f"must be positive, got {self.generations}",
        )
        _require(
            isinstance(self.test_episodes, int) and self.test_episodes > 0,
            _child(where, "test_episodes"),
            f"must be a positive integer, got {self.test_episodes!r}",
        )
        if self.random_return is not None:
            _require(
                math.isfinite(self.random_return),
                _child(where, "random_return"),
                f"must be a finite number, got {self.random_return}",
            )
        if self.grid:
            _require(
                sorted(self.grid) == ["columns", "rows"],
                _child(where, "grid"),
                f"needs exactly 'rows' and 'columns', got {', '.join(map(repr, self.grid))}",
            )
            _require(
                self.grid["rows"].param != self.grid["columns"].param,
                _child(where, "grid"),
                "rows and columns must be different parameters",
            )


def parse_task(raw: Mapping[str, Any], source: str, overrides: Sequence[str] = ()) -> TaskConfig:
    """A :class:`TaskConfig` from a TOML table with ``--set`` ``overrides`` applied first,
    validated as one; ``source`` names the file in messages. (Finding and reading the table is
    :func:`esjax._src.specs.presets.load_task`'s job.)"""
    if overrides:
        raw = apply_overrides(raw, overrides)
    check_finite(raw, f"{source}:")
    return parse_into(TaskConfig, raw, f"{source}:")


def check_finite(value: Any, where: str) -> None:
    """Refuse NaN or infinity anywhere in a (nested) table or list.

    TOML and ``--set`` accept ``nan`` and ``inf``; as an env parameter, a sampler bound or a
    strategy setting they would compile and train on garbage, so they are bad input. The walk
    is generic: it needs no list of which settings are numbers.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not math.isfinite(float(value)):
            raise ConfigError(_at(where, f"must be a finite number, got {value}"))
    elif isinstance(value, numbers.Integral) and not -MAX_INT <= int(value) <= MAX_INT:
        raise ConfigError(_at(where, f"must be at most {MAX_INT} in size, got {value}"))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_finite(item, _child(where, str(key)))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_finite(item, f"{where}[{i}]")


# ---------------------------------------------------------------------------- a resolved run
@dataclass(frozen=True)
class LoopSettings:
    """How the generation loop around the strategy runs; ``config.json``'s ``loop`` table.

    evosax never sees these: the engine reads them (episodes per member, how a member's
    episodes become its fitness, which members share episode starts, which leaders are
    re-tested). They are spelled where a strategy's settings are (a preset's ``[settings]``,
    a task's ``strategy_settings``, ``--set strategy_settings.NAME``) because which of them an
    algorithm accepts depends on the algorithm (:mod:`esjax._src.strategies.algorithms` declares
    them); a resolved spec keeps them here, typed, apart from the settings passed on to evosax.
    """

    rollouts_multiplier: int = 1  # episodes per member = the task's rollouts x this
    worst_episodes: float = 1.0  # fitness: the mean of this fraction of the worst episodes
    env_groups: int | str = 1  # groups of members sharing episode starts, or "auto"
    validate_top: int = 1  # leaders re-tested on fresh episodes (1: none)
    validate_episodes: int | None = None  # episodes per re-tested leader (None: evaluation's)

    def validate(self, where: str) -> None:
        for name in ("rollouts_multiplier", "validate_top"):
            value = getattr(self, name)
            _require(value > 0, _child(where, name), f"must be positive, got {value}")
        _require(
            0.0 < self.worst_episodes <= 1.0,
            _child(where, "worst_episodes"),
            f"must be in (0, 1], got {self.worst_episodes}",
        )
        _require(
            self.env_groups == "auto" or (isinstance(self.env_groups, int) and self.env_groups > 0),
            _child(where, "env_groups"),
            f"must be a positive integer or 'auto', got {self.env_groups!r}",
        )
        if self.validate_episodes is not None:
            _require(
                self.validate_episodes > 0,
                _child(where, "validate_episodes"),
                f"must be positive, got {self.validate_episodes}",
            )


LOOP_SETTINGS = tuple(f.name for f in dataclasses.fields(LoopSettings))


@dataclass(frozen=True)
class StrategySpec:
    """A resolved strategy: evosax class name, every setting (defaults filled in), the loop's.

    ``settings`` are what the strategy is built from; ``loop`` what the engine runs it with.
    The loop settings live on the spec, not beside it, because building the strategy needs
    one of them (``env_groups`` shapes the fitness and constrains popsize) and every spelling
    of them is a strategy setting's.
    """

    name: str
    algorithm: str
    settings: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    loop: LoopSettings = field(default_factory=LoopSettings)

    def to_dict(self) -> dict[str, Any]:
        """The strategy as ``config.json`` holds it; the loop is a table of its own there."""
        return {
            "name": self.name,
            "algorithm": self.algorithm,
            "description": self.description,
            "settings": dict(self.settings),
        }


def parse_loop(data: Mapping[str, Any], settings: dict[str, Any], source: str) -> LoopSettings:
    """A run config's loop settings: its ``loop`` table, else (older runs) its strategy's.

    A config written before the table existed kept them among the strategy's settings; they
    are taken out of ``settings`` (the caller's copy) so that both read the same.
    """
    legacy = {name: settings.pop(name) for name in LOOP_SETTINGS if name in settings}
    if "loop" not in data:
        return parse_into(LoopSettings, legacy, f"{source}: strategy.settings")
    if legacy:
        raise ConfigError(
            f"{source}: strategy.settings.{next(iter(legacy))} belongs in the loop table"
        )
    return _convert(data["loop"], LoopSettings, f"{source}: loop")


@dataclass(frozen=True)
class RunConfig:
    """Everything a run is, resolved once before anything is written; ``config.json`` holds it.

    Frozen: building the engine or resuming never changes it. Which fields matter for what is
    said here once: :meth:`program` (the compiled program), :meth:`state_key` (what a
    checkpoint's state must match) and :meth:`identity` (runs that differ only in their seeds
    and length are one configuration, drawn as one band).
    """

    task_name: str
    task: TaskConfig
    strategy: StrategySpec
    popsize: int  # members per generation, resolved (the strategy's own default applied)
    num_dims: int  # parameters per member
    rollouts: int  # episodes per member per generation
    generations: int  # asked for when the run was created; a resume may go further
    seed: int
    seeds: int
    scaling: dict[str, Any] | None = None  # what the popsize rule changed, for the record
    overrides: tuple[str, ...] = ()
    esjax_version: str = ""

    @property
    def loop(self) -> LoopSettings:
        """How the generation loop runs (the strategy spec holds it: it is built from it)."""
        return self.strategy.loop

    @property
    def seed_ids(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    # ------------------------------------------------------------------ what matters for what
    def program(self) -> dict[str, Any]:
        """The fields the compiled generation block and evaluation are built from."""
        return {
            "task": to_dict(self.task),
            "strategy": self.strategy.to_dict(),
            "loop": to_dict(self.strategy.loop),
            "rollouts": self.rollouts,
            "popsize": self.popsize,
        }

    def program_key(self) -> str:
        return json.dumps(self.program(), sort_keys=True)

    def state_key(self) -> dict[str, Any]:
        """What a checkpoint's state depends on: the program, the seeds and the member size."""
        return {**self.program(), "seed": self.seed, "seeds": self.seeds,
                "num_dims": self.num_dims}  # fmt: skip

    def identity(self) -> dict[str, Any]:
        """The configuration, without what only names its seeds, length and the version."""
        data = self.to_json()
        for name in ("seed", "seeds", "generations", "esjax_version", "num_dims"):
            data.pop(name)
        return data

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        return {
            "esjax_version": self.esjax_version,
            "task_name": self.task_name,
            "task": to_dict(self.task),
            "strategy": self.strategy.to_dict(),
            "loop": to_dict(self.strategy.loop),
            "popsize": self.popsize,
            "num_dims": self.num_dims,
            "rollouts": self.rollouts,
            "generations": self.generations,
            "scaling": self.scaling,
            "seed": self.seed,
            "seeds": self.seeds,
            "overrides": list(self.overrides),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> RunConfig:
        """A run config from ``config.json`` (or a checkpoint's copy of it).

        Older run directories are read as they are: a config written before the first block
        lacks ``popsize`` and ``num_dims`` (:attr:`missing_sizes`; the host resolves them from
        the task, as that run's start did); one written before the ``loop`` table holds the
        loop settings among the strategy's (:func:`parse_loop`).
        """
        try:
            strategy = data["strategy"]
            settings = dict(strategy["settings"])
            check_finite(settings, f"{source}: strategy.settings")
            loop = parse_loop(data, settings, source)
            config = cls(
                task_name=str(data["task_name"]),
                task=parse_task(data["task"], f"{source}: task"),
                strategy=StrategySpec(
                    strategy["name"],
                    strategy["algorithm"],
                    settings,
                    strategy.get("description", ""),
                    loop,
                ),
                popsize=_integer(data.get("popsize") or 0, "popsize", source),
                num_dims=_integer(data.get("num_dims") or 0, "num_dims", source),
                rollouts=_integer(data["rollouts"], "rollouts", source),
                generations=_integer(data["generations"], "generations", source),
                seed=_integer(data.get("seed", 0), "seed", source),
                seeds=_integer(data.get("seeds", 1), "seeds", source),
                scaling=data.get("scaling"),
                overrides=tuple(data.get("overrides") or ()),
                esjax_version=str(data.get("esjax_version", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"{source}: not a valid esjax run config ({err!r:.200})") from None
        config.check_sizes(source)
        return config

    def check_sizes(self, source: str) -> None:
        """The run's counts in range: what an edited ``config.json`` could otherwise carry to an
        allocation or a device integer."""
        for name, low in (("popsize", 0), ("num_dims", 0), ("rollouts", 1), ("generations", 1),
                          ("seed", 0), ("seeds", 1)):  # fmt: skip
            value = getattr(self, name)
            _require(low <= value <= MAX_INT, f"{source}: {name}",
                     f"must be between {low} and {MAX_INT}, got {value}")  # fmt: skip
        last = self.seed + self.seeds - 1
        _require(last <= MAX_INT, f"{source}: seeds", f"{self.seed}..{last} go beyond {MAX_INT}")

    @property
    def missing_sizes(self) -> bool:
        """True for a config from before sizes were resolved up front (popsize, num_dims)."""
        return self.popsize <= 0 or self.num_dims <= 0
