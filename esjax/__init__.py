"""esjax: evolution-strategies neuroevolution on JAX."""

from esjax import policies
from esjax.distributed import use_cpu_cores
from esjax.evolve import Interrupted, RunSummary, evaluate_run, evolve
from esjax.rollout import ObsStats, PopulationRollout, RolloutResult, obs_moments
from esjax.runs import load_metrics, load_policy
from esjax.sweeps import sweep

__all__ = [
    "Interrupted",
    "ObsStats",
    "PopulationRollout",
    "RolloutResult",
    "RunSummary",
    "evaluate_run",
    "evolve",
    "load_metrics",
    "load_policy",
    "obs_moments",
    "policies",
    "sweep",
    "use_cpu_cores",
]
__version__ = "0.1.0"
