"""Policy kinds: what each ``[policy] kind`` takes from a task file, checks and is.

A kind owns its settings: a small frozen dataclass of the ``[policy]`` keys only it reads
(``hidden`` and ``activation`` for ``mlp``; ``channels``, ``kernel``, ... for ``cnn``), their
checks, and whether its policy carries a state between steps. Every kind shares the keys that
say what a policy is shown and how its outputs become actions (:data:`SHARED_KEYS`, on
:class:`esjax._src.specs.config.PolicyConfig`). :data:`KINDS` is the one list of kinds.

This module is read with the task file, before JAX is loaded, so that a mistake in the
``[policy]`` table is a one-line error at once; the network each kind builds is its spec in
:mod:`esjax._src.policies.networks` (``SPECS``, keyed by the same names).

A kind may also be code: ``kind = "package.module:factory"`` or ``"path/to/file.py:factory"``
names a user's network in any JAX framework (:class:`CodeKind`); every other key of the table
goes to that factory as a keyword argument (see :mod:`esjax._src.policies.user`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from esjax._src.specs import live

# The [policy] keys every kind takes: what the policy is shown and how its outputs are read.
SHARED_KEYS = (
    "kind", "meta_inputs", "param_inputs", "frame_stack", "actions", "mirror", "mirror_actions",
)  # fmt: skip


# A value a kind cannot be built with: the field, and what is wrong with it in one line.
Problem = tuple[str, str]


def positive_problem(**sizes: int | Sequence[int]) -> Problem | None:
    """The first named size (one size or a list of them) that is not positive, or None: the
    one check behind every network size, from a task file or from Python."""
    for name, value in sizes.items():
        listed = (value,) if isinstance(value, int) else tuple(value)
        if not all(int(size) > 0 for size in listed):
            shown = value if isinstance(value, int) else list(listed)
            return name, f"must be positive, got {shown}"
    return None


class PolicyKind(Protocol):
    """What esjax asks of a kind of policy (``[policy] kind = NAME``).

    A new kind is a settings dataclass, an object of this shape in :data:`KINDS`, and the spec
    that builds its network in :mod:`esjax._src.policies.networks` (``SPECS``), under the same name.
    """

    @property
    def name(self) -> str:
        """The name a task gives as ``kind``."""
        ...

    @property
    def settings_type(self) -> type:
        """Its own frozen dataclass of ``[policy]`` keys, with their defaults, read strictly (an
        unknown key or a wrong type is one line naming it)."""
        ...

    @property
    def recurrent(self) -> bool:
        """Whether its policy carries a state from step to step (memory lesions reset it)."""
        ...

    @property
    def mirrorable(self) -> bool:
        """Whether ``mirror`` and ``mirror_actions`` apply to it
        (:mod:`esjax._src.policies.mirror`)."""
        ...

    def problem(self, settings: Any) -> Problem | None:
        """The first setting the network could not be built with, or None; the caller says
        it in one line naming the field, before anything is built."""
        ...


# ---------------------------------------------------------------------------- the built-ins
# Every built-in kind's sizes default alike (hidden [64, 64], tanh): a task that switches kind
# with --set keeps the numbers it had before kinds owned their settings.
@dataclass(frozen=True)
class MLPSettings:
    """``hidden`` layers of ``activation``; no hidden layer (``[]``) is a linear policy."""

    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"


@dataclass(frozen=True)
class RecurrentSettings:
    """``hidden``: the one cell size, as a one-item list (``[32]``), as task files give it."""

    hidden: tuple[int, ...] = (64, 64)


@dataclass(frozen=True)
class CNNSettings:
    """``channels`` conv layers of ``kernel`` x ``kernel`` and ``stride``, then ``hidden`` dense
    layers; ``lstm`` > 0 adds a recurrent cell of that size. ``ego_channel`` centres the image
    on the cell lit in that channel, cut to ``ego_radius`` cells each way (default: the whole
    grid from any cell; :func:`esjax._src.policies.networks.centred_view`)."""

    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    channels: tuple[int, ...] = (16,)
    kernel: int = 3
    stride: int = 1
    lstm: int = 0
    ego_channel: int | None = None
    ego_radius: int | None = None


@dataclass(frozen=True)
class MLPKind:
    name: str = "mlp"
    settings_type: type = MLPSettings
    recurrent: bool = False
    mirrorable: bool = True

    def problem(self, settings: MLPSettings) -> Problem | None:
        return positive_problem(hidden=settings.hidden)


@dataclass(frozen=True)
class RecurrentKind:
    """An LSTM or a GRU cell (``name``), then a linear action head."""

    name: str
    settings_type: type = RecurrentSettings
    recurrent: bool = True
    mirrorable: bool = True

    def problem(self, settings: RecurrentSettings) -> Problem | None:
        if len(settings.hidden) != 1:
            return "hidden", f"kind {self.name!r} takes one size (the cell's), e.g. [32]"
        return positive_problem(hidden=settings.hidden)


@dataclass(frozen=True)
class CNNKind:
    name: str = "cnn"
    settings_type: type = CNNSettings
    recurrent: bool = False  # unless its lstm is set: see is_recurrent
    mirrorable: bool = False

    def problem(self, settings: CNNSettings) -> Problem | None:
        found = positive_problem(hidden=settings.hidden, channels=settings.channels,
                                 kernel=settings.kernel, stride=settings.stride)  # fmt: skip
        if found:
            return found
        if settings.lstm < 0:
            return "lstm", f"must be >= 0, got {settings.lstm}"
        for name, low in (("ego_channel", 0), ("ego_radius", 1)):
            value = getattr(settings, name)
            if value is not None and value < low:
                return name, f"must be >= {low}, got {value}"
        if settings.ego_radius is not None and settings.ego_channel is None:
            return "ego_radius", "needs ego_channel, the channel the view centres on"
        return None


# The one list of policy kinds, by the name a task gives.
KINDS: dict[str, PolicyKind] = {
    kind.name: kind for kind in (MLPKind(), RecurrentKind("lstm"), RecurrentKind("gru"), CNNKind())
}


def is_recurrent(kind: PolicyKind, settings: Any) -> bool:
    """Whether a policy of ``kind`` with ``settings`` carries a state (a cnn with an lstm)."""
    return kind.recurrent or bool(getattr(settings, "lstm", 0))


# ---------------------------------------------------------------------------- code
def names_code(kind: str) -> bool:
    """Whether ``kind`` names a user's code (``module:factory``, ``file.py:factory``): building
    the policy would import a module or run a file. A live name (:mod:`esjax._src.specs.live`)
    is not code: it is an object this process holds, or a one-line refusal."""
    return ":" in kind and not live.is_live(kind)


@dataclass(frozen=True)
class CodeSettings:
    """A code kind's settings: every ``[policy]`` key beyond the shared ones, passed to its
    factory as keyword arguments."""

    extras: Mapping[str, Any] = field(default_factory=dict)


# What a factory argument from a task file may be.
EXTRA_TYPES = (bool, int, float, str, list, tuple)


@dataclass(frozen=True)
class CodeKind:
    """A user's network (any JAX framework), made by the factory ``name`` names
    (:func:`names_code`)."""

    name: str
    settings_type: type = CodeSettings
    recurrent: bool = False
    mirrorable: bool = True

    def problem(self, settings: CodeSettings) -> Problem | None:
        source, _, factory = self.name.rpartition(":")
        if not source.strip() or not factory.strip():
            return "kind", (f"{self.name!r} names code as 'package.module:factory' or "
                            "'path/to/file.py:factory'")  # fmt: skip
        for key, value in settings.extras.items():
            if not isinstance(value, EXTRA_TYPES):
                return key, f"a factory argument is a number, string, boolean or list: {value!r}"
        return None


@dataclass(frozen=True)
class LiveKind(CodeKind):
    """A network object handed over from Python (:class:`esjax.Trainer`), named by its live
    name: it takes no factory arguments, since nothing makes it."""

    def problem(self, settings: CodeSettings) -> Problem | None:
        if settings.extras:
            key = next(iter(settings.extras))
            return key, "a network handed over from Python takes no [policy] arguments"
        return None


def kind_named(name: str) -> PolicyKind | None:
    """The kind a task's ``kind`` names: a built-in, code, or a live object; None for none."""
    if name in KINDS:
        return KINDS[name]
    if live.is_live(name):
        return LiveKind(name)
    return CodeKind(name) if names_code(name) else None


def legacy_defaults() -> dict[str, Any]:
    """Every built-in kind's settings at their defaults, by key.

    ``config.json`` has always held one flat ``policy`` table with every built-in key; runs
    keep writing it so, and a key another kind owns reads back only at its default.
    """
    found: dict[str, Any] = {}
    for kind in KINDS.values():
        for item in dataclasses.fields(kind.settings_type):
            found.setdefault(item.name, item.default)
    return found
