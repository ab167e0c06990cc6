"""The built-in policy networks, as specs that know only their sizes.

Pass one to :class:`esjax.Trainer` or :class:`esjax.PopulationRollout` as the network; the
action head is read from the env's action space. Your own network in flax (linen or NNX),
equinox or plain ``(init, apply)`` functions is passed the same way, as it is.
"""

from esjax._src.policies.networks import CNN as CNN
from esjax._src.policies.networks import GRU as GRU
from esjax._src.policies.networks import LSTM as LSTM
from esjax._src.policies.networks import MLP as MLP

__all__ = ["CNN", "GRU", "LSTM", "MLP"]
