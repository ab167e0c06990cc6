"""esjax's implementation: internal, free to change between releases.

What users import is what :mod:`esjax` exports (and its public submodules ``esjax.policies``,
``esjax.strategies`` and ``esjax.envs``); everything under ``esjax._src`` is the code behind
those names, laid out in layers in the order data flows: specs → envs → policies → strategies
→ rollout → engine → run → analysis → cli. A lower layer never imports a higher one.
"""
