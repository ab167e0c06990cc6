"""Meta-evolution evaluation: baselines, memory lesion, normalised scores and intervals.

A normalised score puts a policy's mean test return on the scale
``0 = zero torque (all-zero action), 1 = the oracle`` (an MLP evolved with the true env
parameters as input): ``(R - R_zero) / (R_oracle - R_zero)``, per split, with the means taken
over the same held-out test episodes (the ``test`` key root of :func:`esjax.evolve.evaluate_run`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Two-sided 95% Student-t quantiles by degrees of freedom (n - 1).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (0 for a single value)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return float(x.mean()), 0.0
    t = _T95.get(x.size - 1, 1.96)
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(x.size))


def normalised(value: float, zero: float, oracle: float) -> float:
    """``0`` at the zero-action return, ``1`` at the oracle's."""
    return (value - zero) / (oracle - zero)


def _test_rollout(run_dir: str | Path, split: str | None, lesion: bool):
    from esjax.evolve import make_test_rollout
    from esjax.policies import memory_lesion

    config, rollout = make_test_rollout(run_dir, split)
    if lesion:
        # Swapped before the first call, so the jitted rollouts trace the lesioned policy.
        rollout.policy = memory_lesion(rollout.policy)
    return config, rollout


def evaluate_policy(
    run_dir: str | Path,
    episodes: int = 128,
    split: str | None = None,
    seed: int = 0,
    which: str = "final",
    *,
    lesion: bool = False,
    zero: bool = False,
    _rollout: Any = None,
) -> np.ndarray:
    """Test returns of a run's policy, like :func:`esjax.evolve.evaluate_run`, with two variants.

    ``lesion``: the LSTM's state is reset before every step (:func:`memory_lesion`).
    ``zero``: every weight set to zero, so the action is zero (zero torque) whatever the input:
    the normalised score's floor, on exactly the episodes the policy is tested on.
    """
    from esjax.evolve import saved_policy_returns

    built = _rollout or _test_rollout(run_dir, split, lesion)
    return saved_policy_returns(run_dir, episodes, seed, which, built, zero=zero)


def run_seeds(run_dir: str | Path) -> int:
    """How many seeds a run directory holds."""
    from esjax import runs

    return int(runs.read_run_config(run_dir).get("seeds", 1))


def seed_means(
    run_dir: str | Path,
    episodes: int,
    split: str | None,
    *,
    lesion: bool = False,
    zero: bool = False,
    which: str = "final",
) -> list[float]:
    """Mean test return of every seed of a run (one compiled rollout for all seeds)."""
    built = _test_rollout(run_dir, split, lesion)
    return [
        float(
            evaluate_policy(
                run_dir, episodes, split, s, which, lesion=lesion, zero=zero, _rollout=built
            ).mean()
        )
        for s in range(run_seeds(run_dir))
    ]
