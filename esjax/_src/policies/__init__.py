"""Policies.

The networks a member's parameters drive: MLP, LSTM, GRU, CNN and a user's network in any JAX
framework, bound to an env as pure ``init``, ``initial_carry`` and ``apply``; mirror-symmetric
policies; and the one place every network meets a low-rank member (``perturb``).

The public specs are re-exported by :mod:`esjax.policies`.
"""

from esjax._src.policies.networks import CNN, GRU, LSTM, MLP

__all__ = ["CNN", "GRU", "LSTM", "MLP"]
