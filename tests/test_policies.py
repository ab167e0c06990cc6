"""The GRU policy against its cell equations written out in numpy on the same params, and the
LSTM's parameters and state kept as they were when the two began to share one build."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from esjax._src.engine.tasks import check_task, policy_spec
from esjax._src.policies.networks import GRU, LSTM, MLP
from esjax._src.specs.config import ConfigError, parse_task

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


def test_raw_actions_are_the_linear_outputs_unbounded_and_tanh_stays_in_bounds():
    # ARS's linear policy: obs @ W + b reaches the env as it is, beyond the bounds too.
    raw = MLP(hidden=(), raw_actions=True).build(3, PENDULUM_TORQUE)
    squashed = MLP(hidden=()).build(3, PENDULUM_TORQUE)
    params = jax.tree.map(lambda a: 20.0 * a + 1.0, raw.init(jax.random.key(0)))
    dense = params["params"]["Dense_0"]
    obs = np.asarray(jax.random.normal(jax.random.key(1), (16, 3)))
    expected = obs @ np.asarray(dense["kernel"], np.float64) + np.asarray(dense["bias"])
    for x, want in zip(obs, expected, strict=True):
        action, _ = raw.apply(params, jnp.asarray(x, jnp.float32), (), None)
        np.testing.assert_allclose(np.asarray(action), want, rtol=1e-5, atol=1e-5)
        bounded, _ = squashed.apply(params, jnp.asarray(x, jnp.float32), (), None)
        np.testing.assert_allclose(np.asarray(bounded), 2.0 * np.tanh(want), rtol=1e-5, atol=1e-5)
    assert np.abs(expected).max() > 2.0, "no output left the bounds: the test would not see a clip"
    with pytest.raises(ValueError, match="continuous"):
        MLP(hidden=(), raw_actions=True).build(3, spaces.Discrete(3))


ASYMMETRIC_ENV = """
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("point_mass_example", {example!r})
example = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


class OneSided(example.PointMass):
    def action_space(self, params):
        return example.Box(0.0, 1.0, (1,))


def make_env():
    params = example.EnvParams()
    return OneSided(params), params
"""


@pytest.mark.parametrize(
    "policy", [{"kind": "mlp"}, {"kind": "gru", "hidden": [8]}, {"kind": "cnn", "hidden": [8]}]
)
def test_actions_raw_reaches_every_policy_kind(policy):
    for actions, raw in (("raw", True), ("greedy", False)):
        spec = policy_spec(
            parse_task(
                {"env": "Pendulum-v1", "policy": {**policy, "actions": actions}}, "t.toml"
            ).policy
        )
        assert spec.raw_actions is raw


def test_a_mirrored_raw_policy_needs_bounds_symmetric_about_zero(tmp_path):
    # A mirrored policy negates its raw outputs: a reflection about the middle only at 0.
    example = Path(__file__).resolve().parents[1] / "examples" / "custom_env.py"
    (tmp_path / "one_sided.py").write_text(ASYMMETRIC_ENV.format(example=str(example)))
    policy = {"kind": "mlp", "hidden": [], "mirror": [-1, -1, -1], "actions": "raw"}
    task = parse_task({"env": f"{tmp_path}/one_sided.py:make_env", "policy": policy}, "t.toml")
    with pytest.raises(ConfigError, match="symmetric about 0"):
        check_task(task, "t.toml")
    one_sided = spaces.Box(low=0.0, high=1.0, shape=(1,), dtype=jnp.float32)
    with pytest.raises(ValueError, match="symmetric about 0"):  # the Python API alike
        MLP(hidden=(), mirror=(-1.0, -1.0, -1.0), raw_actions=True).build(3, one_sided)
    # The example's own force bounds, [-1, 1], are symmetric: accepted.
    check_task(parse_task({"env": f"{example}:make_env", "policy": policy}, "t.toml"), "t.toml")
