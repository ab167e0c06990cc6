"""esjax: evolution-strategies neuroevolution on JAX."""

from esjax import policies
from esjax.distributed import use_cpu_cores
from esjax.rollout import ObsStats, PopulationRollout, RolloutResult, obs_moments

__all__ = [
    "ObsStats",
    "PopulationRollout",
    "RolloutResult",
    "obs_moments",
    "policies",
    "use_cpu_cores",
]
__version__ = "0.1.0"
