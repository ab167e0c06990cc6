"""Strategies: every evosax algorithm by name, esjax's own, and yours.

A strategy is named as ``esjax list`` shows it (``"open_es"``, ``"lowrank_es"``, ``"snes"``) or
passed as an evosax algorithm class. Your own algorithm, a class with evosax's API, is
registered once and then named like any other, on the command line and in
:class:`esjax.Trainer` alike.
"""

from esjax._src.strategies.algorithms import register as register

__all__ = ["register"]
