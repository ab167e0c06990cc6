"""The registry of adapted env suites, named ``SUITE:NAME``: one line per suite, nothing else.

A suite is a module of its own (``esjax._src.envs.suite_navix``, ...) that says what it is in a
:class:`Suite` named ``SUITE`` and makes an env with ``make(name, env_kwargs)``: the
:class:`~esjax._src.envs.core.SuiteAdapter` protocol. :data:`SUITE_MODULES` lists those modules, and
everything that names suites follows from it: the env names that are suites' rather than a
user's code (:mod:`esjax._src.envs.core`, :mod:`esjax._src.run.trust`), ``esjax list``'s table, the
required preset per suite, and the checks that ``pyproject.toml``'s extras, the API reference and
the module layers list exactly these suites (``tests/test_suite_registry.py``).

Each suite is an optional extra (``pip install "esjax[navix]"``). This module imports neither
JAX nor an adapter until a suite's name is looked up, and an adapter imports its suite's
package only inside ``make``, so a missing suite costs nothing until a task names it and is
then one line naming the extra.

What every adapter does at the env's edge (the six-value step, one float32 observation,
termination and truncation apart, its own renderer) is written in :mod:`esjax._src.envs.suite_base`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from esjax._src.specs import live

# The adapted suites, in ``esjax list``'s order: a new suite is its module and one line here.
SUITE_MODULES: tuple[str, ...] = (
    "esjax._src.envs.suite_navix",
    "esjax._src.envs.suite_xminigrid",
    "esjax._src.envs.suite_jumanji",
    "esjax._src.envs.suite_craftax",
    "esjax._src.envs.suite_playground",
    "esjax._src.envs.suite_brax",
)


@dataclass(frozen=True)
class Suite:
    """What esjax knows of a suite without importing it: enough for ``esjax list``, the
    one-line error that names what to install, and the packaging checks.

    ``name`` is the ``SUITE`` of ``SUITE:NAME`` and the name of esjax's extra that installs
    it, whose one requirement is ``requirement`` (``pyproject.toml`` is checked against it);
    ``package`` is what the adapter imports, found on the path without importing it.
    """

    name: str
    package: str
    requirement: str
    example: str
    description: str

    def __post_init__(self) -> None:
        if not self.name.isidentifier():  # no ':' (it would split), a valid extra's name
            raise ValueError(f"a suite's name is an identifier, not {self.name!r}")
        if not self.example.startswith(f"{self.name}:"):
            raise ValueError(f"suite {self.name}: example {self.example!r} is not {self.name}:NAME")

    @property
    def extra(self) -> str:
        """esjax's extra that installs the suite: its name."""
        return self.name

    @property
    def install_hint(self) -> str:
        return f'pip install "esjax[{self.extra}]"'

    def installed(self) -> bool:
        """Whether the suite's package can be imported (found without importing it)."""
        return importlib.util.find_spec(self.package) is not None


class RegistryError(TypeError):
    """A registered module that is not a suite adapter: a mistake in esjax, in one line."""


@functools.cache
def _adapters(modules: tuple[str, ...]) -> dict[str, ModuleType]:
    """``{suite name: adapter module}``, each module imported once and its ``SUITE`` checked.

    Keyed by the registry's value, so a registry replaced (a test's toy suite) is read afresh.
    """
    found: dict[str, ModuleType] = {}
    for path in modules:
        module = importlib.import_module(path)
        suite = getattr(module, "SUITE", None)
        if not isinstance(suite, Suite) or not callable(getattr(module, "make", None)):
            raise RegistryError(
                f"{path} is registered as a suite but lacks SUITE = Suite(...) or make(name, "
                "kwargs) (the protocol is esjax._src.envs.core.SuiteAdapter)"
            )
        if suite.name in found:
            other = found[suite.name].__name__
            if other == module.__name__:
                raise RegistryError(f"{path} is registered twice")
            raise RegistryError(f"{path} and {other} both adapt a suite named {suite.name!r}")
        found[suite.name] = module
    return found


def registered() -> dict[str, Suite]:
    """Every registered suite by name, in the registry's order (imports the adapters, which
    import JAX but not their suites)."""
    return {name: module.SUITE for name, module in _adapters(SUITE_MODULES).items()}


def names_code(name: str) -> bool:
    """Whether an env or policy name is code (``module:factory``, ``file.py:factory``) rather
    than data (a gymnax id, a registered suite's ``SUITE:NAME``, a built-in policy kind):
    making it would import a module or run a file. A live name (:mod:`esjax._src.specs.live`)
    is an object this process holds, never code."""
    if live.is_live(name):
        return False
    source, colon, _ = name.rpartition(":")
    return bool(colon) and source not in registered()


def adapter(name: str) -> ModuleType:
    """The module adapting suite ``name``; see :class:`~esjax._src.envs.core.SuiteAdapter`."""
    return _adapters(SUITE_MODULES)[name]


def package_modules() -> list[str]:
    """The registered adapters that are modules of esjax (``suite_navix``, ...), read from the
    registry alone: for the checks that every module has its layer and its API page."""
    prefix = "esjax._src."
    return [path.removeprefix(prefix) for path in SUITE_MODULES if path.startswith(prefix)]


def suite_rows() -> list[tuple[str, str, str, bool, str]]:
    """``(name, extra, example env, installed?, description)`` of each suite (``esjax list``)."""
    return [
        (s.name, s.extra, s.example, s.installed(), s.description) for s in registered().values()
    ]
