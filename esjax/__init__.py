"""esjax: evolution-strategies neuroevolution on JAX.

The public names are imported on first use (PEP 562): importing JAX, flax and evosax takes a
second or more, which ``import esjax.specs.config``, ``esjax --help`` and ``esjax`` argument errors
never need. ``from esjax import evolve, PopulationRollout`` works as if they were imported here.
"""

import importlib
from typing import Any

from esjax.specs.version import __version__

# Each public name and the module it lives in.
_HOMES = {
    "Interrupted": "esjax.run.training",
    "RunSummary": "esjax.run.training",
    "evolve": "esjax.run.training",
    "ObsStats": "esjax.rollout.population_rollout",
    "PopulationRollout": "esjax.rollout.population_rollout",
    "RolloutResult": "esjax.rollout.population_rollout",
    "obs_moments": "esjax.rollout.population_rollout",
    "load_metrics": "esjax.run.runs",
    "sweep": "esjax.analysis.sweeps",
    "use_cpu_cores": "esjax.engine.distributed",
    "SavedPolicy": "esjax.run.saved",
    "evaluate_run": "esjax.run.saved",
    "load_policy": "esjax.run.saved",
    "report": "esjax.analysis.reporting",
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
