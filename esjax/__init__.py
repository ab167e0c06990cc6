"""esjax: evolution-strategies neuroevolution on JAX."""

import importlib
from typing import Any

from esjax import policies
from esjax.distributed import use_cpu_cores
from esjax.evolve import Interrupted, RunSummary, evolve
from esjax.rollout import ObsStats, PopulationRollout, RolloutResult, obs_moments
from esjax.runs import load_metrics
from esjax.sweeps import sweep
from esjax.version import __version__

# Imported on first use: the saved-policy path brings in the engine and every evosax
# strategy (about 0.2 s), which commands such as ``esjax --help`` never need.
_ON_FIRST_USE = {"SavedPolicy": "esjax.saved", "evaluate_run": "esjax.saved",
                 "load_policy": "esjax.saved"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'esjax' has no attribute {name!r}")


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
    "sweep",
    "use_cpu_cores",
]
