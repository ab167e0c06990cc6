"""Policy kinds (esjax._src.specs.policy_kinds): the registry, a kind's own settings, and a user's
flax
module as a policy (``policy.kind = "file.py:factory"``), from a task to ``esjax eval``."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from test_run_as_data import cli, eval_unsealed_copy

from esjax._src.engine.tasks import make_rollout, policy_spec
from esjax._src.policies.networks import SPECS, CodePolicy
from esjax._src.run import cache, trust
from esjax._src.specs import policy_kinds
from esjax._src.specs.config import ConfigError, parse_task, to_dict

TOY = Path(__file__).resolve().parent / "data" / "toy_policy.py"
BOX = spaces.Box(low=-2.0, high=2.0, shape=(1,), dtype=jnp.float32)


def test_every_kind_has_a_spec_and_says_truly_whether_it_carries_a_state():
    assert sorted(SPECS) == sorted(policy_kinds.KINDS)
    for name, kind in policy_kinds.KINDS.items():
        table = {"kind": name, "hidden": [4]} if name != "cnn" else {"kind": name}
        config = parse_task({"env": "Pendulum-v1", "policy": table}, "t").policy
        shape = {"obs_shape": (3, 3, 1)} if name == "cnn" else {}
        built = policy_spec(config).build(9, BOX, **shape)
        assert built.recurrent == kind.recurrent == (jax.tree.leaves(built.initial_carry()) != [])


def test_an_old_flat_policy_table_reads_back_to_the_same_json():
    old = {"kind": "lstm", "hidden": [8], "activation": "tanh", "meta_inputs": ["action"],
           "param_inputs": [], "frame_stack": 1, "channels": [16], "kernel": 3, "stride": 1,
           "lstm": 0, "ego_channel": None, "ego_radius": None, "actions": "greedy",
           "mirror": [], "mirror_actions": []}  # fmt: skip
    config = parse_task({"env": "Pendulum-v1", "policy": old}, "t").policy
    assert to_dict(config) == old and config.hidden == (8,)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"kind": "mlp", "channels": [8]}, "t: policy.channels: is for cnn policies, not mlp"),
        ({"kind": "gru", "hidden": [0]}, "t: policy.hidden: must be positive, got [0]"),
        ({"kind": "cnn", "kernel": 0}, "t: policy.kernel: must be positive, got 0"),
        ({"kind": "mlp", "hiden": [8]}, "t: policy: unknown key 'hiden' (did you mean 'hidden'?)"),
        ({"kind": "mpl"}, "t: policy.kind: unknown policy kind 'mpl' (did you mean 'mlp'?)"),
        ({"kind": ":make"}, "t: policy.kind: ':make' names code as"),
        ({"kind": "x.py:make", "width": {"a": 1}}, "t: policy.width: a factory argument"),
    ],
)
def test_a_bad_policy_table_is_one_line_naming_the_field(table, expected):
    with pytest.raises(ConfigError) as info:
        parse_task({"env": "Pendulum-v1", "policy": table}, "t")
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_a_users_module_computes_what_its_formula_says():
    """The toy's ``tanh(x W1 + b1) W2 + b2``, squashed into [-2, 2], against numpy."""
    config = parse_task({"env": "Pendulum-v1",
                         "policy": {"kind": f"{TOY}:make", "hidden": [5]}}, "t").policy  # fmt: skip
    policy = policy_spec(config).build(3, BOX)
    params = policy.init(jax.random.key(0))
    first, second = params["params"]["Dense_0"], params["params"]["Dense_1"]
    assert first["kernel"].shape == (3, 5) and second["kernel"].shape == (5, 1)
    for x in np.asarray(jax.random.normal(jax.random.key(1), (8, 3))):
        hidden = np.tanh(x @ np.asarray(first["kernel"], np.float64) + np.asarray(first["bias"]))
        out = hidden @ np.asarray(second["kernel"], np.float64) + np.asarray(second["bias"])
        action, _ = policy.apply(params, jnp.asarray(x, jnp.float32), (), None)
        np.testing.assert_allclose(np.asarray(action), -2.0 + (np.tanh(out) + 1.0) * 2.0,
                                   rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("not_a_module", "returned a list, not a network"),
        ("raises", "raised RuntimeError: no network today"),
        ("wrong_size", "to shape (3,); the action head needs (2,)"),
        ("takes_nothing", "cannot call it with"),
        ("NOT_CALLABLE", "is a int, not a factory"),
        ("missing", "has no attribute 'missing'"),
    ],
)
def test_a_bad_factory_is_one_line(factory, expected):
    task = parse_task({"env": "CartPole-v1", "policy": {"kind": f"{TOY}:{factory}"}}, "t")
    with pytest.raises(ConfigError) as info:
        make_rollout(task)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_policys_source_keys_the_kept_programs(tmp_path):
    """Kept programs are keyed by a code policy's source: an edit beside the factory changes
    the key, so an edited policy is traced again; code with no file behind it is never kept."""
    from esjax._src.run.training import program_key, resolve_config

    policy = tmp_path / "mine" / "policy.py"
    policy.parent.mkdir()
    shutil.copy(TOY, policy)

    def key(kind: str) -> dict | None:
        return program_key(resolve_config("cartpole", overrides=[f"policy.kind={kind}"]))

    plain = program_key(resolve_config("cartpole"))
    assert plain is not None and "policy_source" not in plain
    before = key(f"{policy}:make")
    assert before is not None and before["policy_source"] == cache.code_digest(f"{policy}:make")
    (policy.parent / "helper.py").write_text("SCALE = 2\n")  # a file beside it counts too
    after = key(f"{policy}:make")
    assert after is not None and after["policy_source"] != before["policy_source"]
    assert cache.code_digest("no_such_module_anywhere:make") == cache.UNREADABLE_CODE


def test_a_users_module_trains_evaluates_and_a_copied_run_is_refused(tmp_path):
    run = tmp_path / "run"
    code, output = cli("evolve", "cartpole", "--set", f"policy.kind={TOY}:make",
                       "--set", "episode_length=32", "--set", "evaluation.every=1",
                       "--set", "evaluation.episodes=2", "--set", "test_episodes=4",
                       "--generations", "2", "--popsize", "8", "--out", run)  # fmt: skip
    assert code == 0, output
    assert cli("eval", run, "--episodes", "2")[0] == 0
    copy = tmp_path / "copy"
    code, errors, output = eval_unsealed_copy(run, copy)
    assert code == 2 and len(errors) == 1, output
    assert f"policy '{TOY}:make'" in errors[0] and "--trust-code" in errors[0]
    assert cli("eval", copy, "--episodes", "2", "--trust-code")[0] == 0
    trust._GRANTED.clear()


def test_a_code_kind_is_a_code_policy_with_the_tables_other_keys():
    config = parse_task({"env": "Pendulum-v1", "policy": {"kind": "m:f", "width": 3}}, "t").policy
    assert policy_spec(config) == CodePolicy("m:f", {"width": 3})
    assert to_dict(config)["width"] == 3


def test_a_relative_policy_file_is_read_beside_the_task_file(tmp_path, monkeypatch):
    """As for a user's env file: ``policy.kind = "toy.py:make"`` in a task file means the file
    beside it, made absolute once so the run's config names it from any directory."""
    from esjax._src.specs.presets import load_task

    folder = tmp_path / "tasks"
    folder.mkdir()
    shutil.copy(TOY, folder / "toy.py")
    task_file = folder / "mine.toml"
    task_file.write_text('env = "CartPole-v1"\n\n[policy]\nkind = "toy.py:make"\n')
    monkeypatch.chdir(tmp_path)  # the file is not in the working directory
    loaded = load_task(str(task_file))
    assert loaded.task.policy.kind == f"{(folder / 'toy.py').resolve()}:make"
    assert loaded.raw["policy"]["kind"] == "toy.py:make"  # what the user wrote, kept
