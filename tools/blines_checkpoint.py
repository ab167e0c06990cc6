"""Read a gymnax-blines ES checkpoint (``agents/<env>/es.pkl``) without running its pickle.

gymnax-blines publishes its trained ES agents as pickles: a dict holding the training log, the
network's parameters as NumPy arrays and its config (a ``dotmap.DotMap``). A pickle can call any
importable function while it loads, so this reader admits only what those files contain: NumPy
arrays and dtypes, ``OrderedDict``, and the config, which becomes a plain dict. Anything else is
refused before it is built. It is for re-testing the published agents (benchmarks/README.md,
"Pendulum against the optimum"); esjax itself never reads a pickle.

The network is evosax 0.1's ``MLP`` as gymnax-blines configures it: ``Dense`` layers with a
hidden activation, then for a ``gaussian`` output one ``Dense`` for the mean and one for a
shared log-variance (an action is the mean plus that noise), for ``categorical`` one ``Dense``
of logits. Re-implemented here from that description, as a plain function of the arrays.

    python tools/blines_checkpoint.py es.pkl      # its layers and its logged curve
"""

from __future__ import annotations

import argparse
import importlib
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_ADMITTED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),  # arrays as NumPy 2 pickles them (protocol 5)
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
}


class _Config(dict):
    """Stands in for ``dotmap.DotMap``: keeps the pickled fields, runs no code of its own."""

    def __setstate__(self, state: Any) -> None:
        self.update(state if isinstance(state, dict) else {})


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("dotmap", "DotMap"):
            return _Config
        if (module, name) in _ADMITTED:
            return getattr(importlib.import_module(module), name)
        raise pickle.UnpicklingError(f"{module}.{name} is not an array or a dict: refused")


def read(path: str | Path) -> dict[str, Any]:
    """The checkpoint's ``network`` (arrays), ``log_steps``, ``log_return`` and config fields."""
    with open(path, "rb") as file:
        data = _ArraysOnly(file).load()
    if not isinstance(data, dict) or "network" not in data:
        raise ValueError(f"{path}: not a gymnax-blines checkpoint (no 'network' entry)")
    layers = data["network"]["params"]
    config = _plain(data.get("train_config", {}))
    params = {name: {k: np.asarray(v) for k, v in layer.items()} for name, layer in layers.items()}
    return {
        "params": params,
        "log_steps": np.asarray(data.get("log_steps", []), dtype=np.int64),
        "log_return": np.asarray(data.get("log_return", []), dtype=np.float64),
        "network": _plain(config.get("network_config", {})),
        "env_name": config.get("env_name"),
    }


def _plain(value: Any) -> Any:
    """A DotMap's fields as nested dicts (its ``_map`` holds them)."""
    if isinstance(value, dict):
        fields = value.get("_map", value)
        return {k: _plain(v) for k, v in fields.items() if not str(k).startswith("_")}
    return value


def policy(checkpoint: dict[str, Any]) -> Callable[[jax.Array, jax.Array, bool], jax.Array]:
    """``act(obs, key, sample) -> action`` for a checkpoint's MLP.

    With ``sample`` a gaussian head adds its noise and a categorical head samples, as the
    published agents were tested; without, the mean or the argmax.
    """
    network = checkpoint["network"]
    activations = {"relu": jax.nn.relu, "tanh": jnp.tanh, "gelu": jax.nn.gelu}
    hidden_fn = activations[network.get("hidden_activation", "relu")]
    hidden = int(network.get("num_hidden_layers", 2))
    output = network.get("output_activation", "identity")
    params = jax.tree.map(jnp.asarray, checkpoint["params"])
    names = [f"Dense_{i}" for i in range(len(params))]

    def dense(x, name):
        return x @ params[name]["kernel"] + params[name]["bias"]

    def act(obs: jax.Array, key: jax.Array, sample: bool) -> jax.Array:
        x = obs.reshape(-1)
        for name in names[:hidden]:
            x = hidden_fn(dense(x, name))
        if output == "gaussian":
            mean = dense(x, names[hidden])
            std = jnp.exp(0.5 * dense(x, names[hidden + 1]))
            noisy = mean + std * jax.random.normal(key, mean.shape)
            return jnp.where(sample, noisy, mean)
        logits = dense(x, names[hidden])
        if output == "categorical":
            return jnp.where(sample, jax.random.categorical(key, logits), jnp.argmax(logits))
        return jnp.tanh(logits) if output == "tanh" else logits

    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    args = parser.parse_args()
    checkpoint = read(args.checkpoint)
    print(f"env {checkpoint['env_name']}, network {checkpoint['network']}")
    for name, layer in checkpoint["params"].items():
        print(f"  {name}: " + ", ".join(f"{k} {v.shape}" for k, v in layer.items()))
    curve = zip(checkpoint["log_steps"], checkpoint["log_return"], strict=False)
    print("logged test returns: " + "; ".join(f"{s / 1e6:.1f} M: {r:.1f}" for s, r in curve))


if __name__ == "__main__":
    main()
