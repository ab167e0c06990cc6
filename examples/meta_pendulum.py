"""One LSTM for many pendulums: meta-evolution through esjax.Trainer.

Every episode draws the pendulum's mass and length. The LSTM sees the observation and its own
previous action, never the mass or length, so it must tell a heavy, long pendulum from a
light, short one by how it moves. It is tested on held-out pendulums heavier and longer than
any it trained on, against an MLP that has no memory. ``--tiny`` runs in seconds.
(benchmarks/meta_pendulum.py is the full study of docs/meta.md.)
"""

import functools
import sys

import jax
import numpy as np

import esjax
from esjax.policies import LSTM, MLP


def uniform(low, high):
    return {"dist": "uniform", "low": low, "high": high}


TINY = "--tiny" in sys.argv
SEEDS = jax.random.split(jax.random.key(0), 3)  # three seeds, trained in one program
for name, network in [("LSTM", LSTM(hidden=32, meta_inputs=("action",))), ("MLP", MLP())]:
    trainer = esjax.Trainer(
        "Pendulum-v1", network, popsize=16 if TINY else 512, generations=2 if TINY else 150,
        env_sampler={"m": uniform(0.5, 1.5), "l": uniform(0.5, 1.5)},
        splits={"heavier and longer": {"m": uniform(1.5, 2.0), "l": uniform(1.5, 2.0)}},
    )  # fmt: skip
    states, _ = jax.jit(jax.vmap(trainer.train))(SEEDS)
    for split in ["train", "heavier and longer"]:
        test = functools.partial(trainer.evaluate, key=jax.random.key(1), episodes=64, split=split)
        returns = jax.vmap(test)(states)
        per_seed = np.asarray(returns.mean(axis=1))
        print(f"{name:>4} on {split:>18}: {per_seed.mean():8.1f} (seeds {per_seed.round(1)})")
