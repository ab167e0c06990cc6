"""What esjax steps: any env with gymnax 1.0's API.

:class:`Env` is the protocol (``reset(key, params)``, a six-value ``step(key, state, action,
params)``, ``action_space(params)``, ``observation_space(params)`` and ``default_params``);
hand an object of that shape to :class:`esjax.Trainer` or :class:`esjax.PopulationRollout`.
:func:`make_env` makes one from a gymnax id, a registered suite's ``"SUITE:NAME"`` or a
``"file.py:factory"``, and holds an object to the protocol in one line.
"""

from esjax._src.envs.core import Env as Env
from esjax._src.envs.core import make_env as make_env

__all__ = ["Env", "make_env"]
