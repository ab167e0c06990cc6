"""How many decimals a number is written with, for tables and Markdown a person reads.

Only ``math``: ``esjax report``'s Markdown (host) and its terminal table (interface) size their
numbers by the same rule, and the command line imports this without NumPy (about 0.1 s that
``esjax --help`` does not pay).
"""

from __future__ import annotations

import math


def decimals(*values: float | None, significant: int = 3, most: int = 4) -> int:
    """Decimals that show ``significant`` figures of the largest of ``values`` (at least one,
    at most ``most``): one rule for a return and its interval alike.

    A fixed one decimal fits a return of 1,770.7 and hides one of 0.70 [0.67, 0.75] (a MinAtar
    or bandit task) as ``0.7 [0.7, 0.7]``. Zero, None and non-finite values are left out.
    """
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 1
    magnitude = math.floor(math.log10(max(finite)))
    return min(most, max(1, significant - 1 - magnitude))
