"""The JAX side of esjax in one import, for the host modules to take when they first need it.

Importing any of these imports evosax, which creates JAX arrays on import and so starts JAX's
backend; ``from esjax import evolve`` must leave that to :mod:`esjax._src.engine.distributed`
(its CPU device count, ``jax.distributed.initialize``), so the host imports this module inside
the functions that need it (:func:`esjax._src.run.lifecycle.backend_modules`).
"""

from esjax._src.engine import generation, resolve, trainer
from esjax._src.strategies import strategy

__all__ = ["generation", "resolve", "strategy", "trainer"]
