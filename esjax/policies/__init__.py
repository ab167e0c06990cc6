"""Policies.

The networks a member's parameters drive: MLP, LSTM, GRU, CNN and a user's network in any JAX
framework, bound to an env as pure ``init``, ``initial_carry`` and ``apply``; mirror-symmetric
policies; and the one place every network meets a low-rank member (``perturb``).

``from esjax.policies import MLP, LSTM, GRU, CNN`` are the specs a user builds a
:class:`~esjax.rollout.population_rollout.PopulationRollout` with.
"""

from esjax.policies.networks import CNN, GRU, LSTM, MLP

__all__ = ["CNN", "GRU", "LSTM", "MLP"]
