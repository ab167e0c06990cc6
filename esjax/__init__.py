"""esjax: evolution-strategies neuroevolution on JAX.

The public names are imported on first use (PEP 562): importing JAX, flax and evosax takes a
second or more, which ``import esjax.config``, ``esjax --help`` and ``esjax`` argument errors
never need. ``from esjax import evolve, PopulationRollout`` works as if they were imported here.
"""

import importlib
import sys
import types
from typing import Any

from esjax.version import __version__

# Each public name and the module it lives in.
_HOMES = {
    "Interrupted": "esjax.evolve",
    "RunSummary": "esjax.evolve",
    "evolve": "esjax.evolve",
    "ObsStats": "esjax.rollout",
    "PopulationRollout": "esjax.rollout",
    "RolloutResult": "esjax.rollout",
    "obs_moments": "esjax.rollout",
    "load_metrics": "esjax.runs",
    "sweep": "esjax.sweeps",
    "use_cpu_cores": "esjax.distributed",
    "SavedPolicy": "esjax.saved",
    "evaluate_run": "esjax.saved",
    "load_policy": "esjax.saved",
    "report": "esjax.report",
}
_SUBMODULES = ("policies",)

__all__ = [
    "Interrupted",
    "ObsStats",
    "PopulationRollout",
    "RolloutResult",
    "RunSummary",
    "SavedPolicy",
    "__version__",
    "evaluate_run",
    "evolve",
    "load_metrics",
    "load_policy",
    "obs_moments",
    "policies",
    "report",
    "sweep",
    "use_cpu_cores",
]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'esjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """esjax's module type: ``esjax.evolve`` and ``esjax.report`` stay the functions after the
    modules of those names are imported (the import system then sets the package attribute of
    that name to the module)."""

    @property
    def evolve(self) -> Any:
        return importlib.import_module("esjax.evolve").evolve

    @evolve.setter
    def evolve(self, module: Any) -> None:
        """The import system naming the submodule here: the function keeps the name."""

    @property
    def report(self) -> Any:
        return importlib.import_module("esjax.report").report

    @report.setter
    def report(self, module: Any) -> None:
        """As for ``evolve``: the function keeps the name."""


sys.modules[__name__].__class__ = _Package
