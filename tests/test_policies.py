"""The GRU policy against its cell equations written out in numpy on the same params, and the
LSTM's parameters and state kept as they were when the two began to share one build."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from esjax.config import ConfigError, parse_task
from esjax.policies import GRU, LSTM
from esjax.tasks import policy_spec

PENDULUM_TORQUE = spaces.Box(low=-2.0, high=2.0, shape=(1,), dtype=jnp.float32)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru_step(p, h, x):
    """One GRU step as the cell is defined: reset gate r, update gate z, candidate n."""
    cell = {k: {n: np.asarray(v, np.float64) for n, v in d.items()} for k, d in p.items()}

    def lin(name, v):
        out = v @ cell[name]["kernel"]
        return out + cell[name]["bias"] if "bias" in cell[name] else out

    r = sigmoid(lin("ir", x) + lin("hr", h))
    z = sigmoid(lin("iz", x) + lin("hz", h))
    n = np.tanh(lin("in", x) + r * lin("hn", h))
    return (1.0 - z) * n + z * h


def test_gru_policy_follows_the_gru_equations_and_squashes_into_the_action_bounds():
    policy = GRU(6).build(3, PENDULUM_TORQUE)
    params = policy.init(jax.random.key(0))
    # Larger weights than the initialisation, so the gates are far from 0.5 and a wrong
    # gate (r and z swapped, say) changes the output.
    params = jax.tree.map(lambda a: 3.0 * a, params)
    cell, head = params["params"]["GRUCell_0"], params["params"]["Dense_0"]
    inputs = np.asarray(jax.random.normal(jax.random.key(1), (5, 3)))

    carry, h = policy.initial_carry(), np.zeros(6)
    for x in inputs:
        action, carry = policy.apply(params, jnp.asarray(x, jnp.float32), carry, None)
        h = gru_step(cell, h, x.astype(np.float64))
        logit = h @ np.asarray(head["kernel"], np.float64) + np.asarray(head["bias"])
        expected = -2.0 + 4.0 * (np.tanh(logit) + 1.0) / 2.0
        np.testing.assert_allclose(np.asarray(carry), h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(action), expected, rtol=1e-5, atol=1e-5)
    assert np.abs(h).max() > 0.1, "the state stayed near zero: the test would not see the gates"


def test_gru_has_three_quarters_of_the_lstm_gate_weights():
    def count(spec):
        params = spec.build(4, PENDULUM_TORQUE).init(jax.random.key(0))
        return sum(a.size for a in jax.tree.leaves(params))

    head = 12 + 1
    lstm_gates, gru_gates = count(LSTM(12)) - head, count(GRU(12)) - head
    # LSTM: 4 blocks of (4 + 12) x 12 + 12 biases; GRU: 3 blocks, with one more bias vector.
    assert lstm_gates == 4 * (16 * 12 + 12)
    assert gru_gates == 3 * (16 * 12 + 12) + 12


def test_lstm_keeps_its_parameter_names_shapes_and_two_part_state():
    """Saved LSTM policies must still load: the tree is flax's OptimizedLSTMCell and a head."""
    policy = LSTM(12).build(4, PENDULUM_TORQUE)
    params = policy.init(jax.random.key(0))["params"]
    assert sorted(params) == ["Dense_0", "OptimizedLSTMCell_0"]
    cell = params["OptimizedLSTMCell_0"]
    assert sorted(cell) == ["hf", "hg", "hi", "ho", "if", "ig", "ii", "io"]
    assert cell["ii"]["kernel"].shape == (4, 12) and cell["hi"]["kernel"].shape == (12, 12)
    assert params["Dense_0"]["kernel"].shape == (12, 1)
    carry = policy.initial_carry()
    assert isinstance(carry, tuple) and [c.shape for c in carry] == [(12,), (12,)]
    _, carry = policy.apply(policy.init(jax.random.key(0)), jnp.ones(4), carry, None)
    assert [c.shape for c in carry] == [(12,), (12,)]


def test_gru_kind_in_a_preset_builds_a_gru_and_takes_one_size():
    task = parse_task({"env": "Pendulum-v1", "policy": {"kind": "gru", "hidden": [8]}}, "t.toml")
    assert policy_spec(task.policy) == GRU(8)
    with pytest.raises(ConfigError, match=r"^t.toml: policy.hidden: kind 'gru' takes one size"):
        parse_task({"env": "Pendulum-v1", "policy": {"kind": "gru", "hidden": [8, 8]}}, "t.toml")
