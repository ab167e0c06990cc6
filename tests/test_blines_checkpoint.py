"""tools/blines_checkpoint.py: a gymnax-blines pickle is read as arrays, nothing runs."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "blines_checkpoint.py"


@pytest.fixture(scope="module")
def reader():
    spec = importlib.util.spec_from_file_location("blines_checkpoint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_checkpoint(path: Path, params: dict, network: dict) -> None:
    """A pickle shaped like gymnax-blines' es.pkl: its config pickled as a ``dotmap.DotMap``."""
    dotmap = types.ModuleType("dotmap")

    class DotMap(dict):
        def __reduce__(self):
            return (DotMap, (), {"_map": dict(self)})

    DotMap.__module__, DotMap.__qualname__ = "dotmap", "DotMap"
    dotmap.DotMap = DotMap
    sys.modules["dotmap"] = dotmap
    try:
        data = {
            "log_steps": [np.array(100, np.int32)],  # 0-d arrays, as in the real files
            "log_return": [np.array(-150.0, np.float32)],
            "network": {"params": params},
            "train_config": DotMap(env_name="Pendulum-v1", network_config=DotMap(network)),
        }
        path.write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        del sys.modules["dotmap"]


def test_the_network_matches_a_numpy_forward_pass(reader, tmp_path):
    rng = np.random.default_rng(0)
    sizes = [(3, 8), (8, 8), (8, 1), (8, 1)]  # two hidden layers, mean and log-variance heads
    params = {
        f"Dense_{i}": {"kernel": rng.normal(size=s).astype(np.float32),
                       "bias": rng.normal(size=s[1]).astype(np.float32)}
        for i, s in enumerate(sizes)
    }  # fmt: skip
    network = {"num_hidden_layers": 2, "hidden_activation": "relu", "output_activation": "gaussian"}
    path = tmp_path / "es.pkl"
    _write_checkpoint(path, params, network)
    checkpoint = reader.read(path)
    assert checkpoint["env_name"] == "Pendulum-v1"
    assert checkpoint["network"]["output_activation"] == "gaussian"
    act = reader.policy(checkpoint)
    obs = np.array([0.3, -0.9, 1.7], np.float32)
    hidden = np.maximum(obs @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"], 0)
    hidden = np.maximum(hidden @ params["Dense_1"]["kernel"] + params["Dense_1"]["bias"], 0)
    mean = hidden @ params["Dense_2"]["kernel"] + params["Dense_2"]["bias"]
    std = np.exp(0.5 * (hidden @ params["Dense_3"]["kernel"] + params["Dense_3"]["bias"]))
    key = jax.random.key(0)
    np.testing.assert_allclose(act(obs, key, False), mean, rtol=1e-5)
    noise = np.asarray(jax.random.normal(key, mean.shape))
    np.testing.assert_allclose(act(obs, key, True), mean + std * noise, rtol=1e-5)


def test_a_pickle_that_would_run_code_is_refused(reader, tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"network": Payload()}))
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        reader.read(path)
    assert not marker.exists()
