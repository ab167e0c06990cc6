"""esjax: evolution-strategies neuroevolution on JAX.

The public names are imported on first use (PEP 562): importing JAX, flax and evosax takes a
second or more, which ``import esjax._src.specs.config``, ``esjax --help`` and ``esjax`` argument
errors never need. ``from esjax import evolve, PopulationRollout`` works as if they were imported
here.
"""

import importlib
from typing import Any

from esjax._src.specs.version import __version__

# Each public name and the module it lives in.
_HOMES = {
    "Interrupted": "esjax._src.run.training",
    "RunSummary": "esjax._src.run.training",
    "evolve": "esjax._src.run.training",
    "Trainer": "esjax._src.engine.trainer",
    "seed_key": "esjax._src.engine.generation",
    "ObsStats": "esjax._src.rollout.population_rollout",
    "PopulationRollout": "esjax._src.rollout.population_rollout",
    "RolloutResult": "esjax._src.rollout.population_rollout",
    "obs_moments": "esjax._src.rollout.population_rollout",
    "load_metrics": "esjax._src.run.runs",
    "sweep": "esjax._src.analysis.sweeps",
    "use_cpu_cores": "esjax._src.engine.distributed",
    "SavedPolicy": "esjax._src.run.saved",
    "evaluate_run": "esjax._src.run.saved",
    "load_policy": "esjax._src.run.saved",
    "report": "esjax._src.analysis.reporting",
    "plot_runs": "esjax._src.analysis.plotting",
}
_SUBMODULES = ("envs", "policies", "strategies")

__all__ = [
    "Interrupted",
    "ObsStats",
    "PopulationRollout",
    "RolloutResult",
    "RunSummary",
    "SavedPolicy",
    "Trainer",
    "__version__",
    "envs",
    "evaluate_run",
    "evolve",
    "load_metrics",
    "load_policy",
    "obs_moments",
    "plot_runs",
    "policies",
    "report",
    "seed_key",
    "strategies",
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
