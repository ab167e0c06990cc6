"""Task presets: every shipped one loads; a broken one fails in one line saying where and why."""

from __future__ import annotations

import io
import shutil
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from rich.console import Console

from esjax._src.cli.tables import show_catalogue
from esjax._src.specs import presets
from esjax._src.specs.config import ConfigError, apply_overrides, parse_task

REQUIRED_TASKS = ("pendulum", "cartpole", "acrobot", "mountaincar-continuous")


def load(name_or_path: str, overrides=()):
    _, raw, source = presets.locate("task", name_or_path)
    return parse_task(apply_overrides(raw, overrides), source)


# Presets on gymnax envs; those on other suites (``SUITE:NAME``) need their extra and are
# trained, evaluated and reloaded from the command line in tests/test_suite_presets.py.
GYMNAX_TASKS = [name for name in presets.names("task") if ":" not in load(name).env]


def test_required_presets_are_shipped():
    assert set(REQUIRED_TASKS) <= set(presets.names("task"))


@pytest.mark.parametrize("name", GYMNAX_TASKS)
def test_every_task_preset_loads_and_names_real_env_params(name):
    from esjax._src.engine.tasks import check_param_names, fixed_env_params
    from esjax._src.envs.core import make_env

    task = load(name)
    assert task.description, f"{name} needs a one-line description for `esjax list`"
    _, default_params = make_env(task.env)
    params = fixed_env_params(task, default_params, name)
    for split, dists in [("env_sampler", task.env_sampler), *task.splits.items()]:
        check_param_names(list(dists), params, f"{name}: {split}")
    if task.episode_length is not None:
        assert task.episode_length <= int(params.max_steps_in_episode)


@pytest.mark.parametrize(
    ("name", "threshold"),
    [("cartpole", 475.0), ("acrobot", -100.0), ("mountaincar-continuous", 90.0)],
)
def test_solve_thresholds(name, threshold):
    assert load(name).solved_return == threshold


def test_describe_gives_one_line_per_preset():
    for kind in ("task", "strategy"):
        rows = presets.describe(kind)
        assert [name for name, _ in rows] == presets.names(kind)
        assert all("\n" not in text for _, text in rows)


def test_the_task_list_names_the_strategies_each_task_has_settings_for(tmp_path, monkeypatch):
    """``esjax list``: a task's own strategy, then each [strategy_settings.NAME] as written."""
    rows = {name: strategies for name, strategies, _ in presets.task_rows()}
    assert list(rows) == presets.names("task")
    for name, strategies in rows.items():  # its own, then each table in the file's order
        raw = tomllib.loads((presets.preset_dir("task") / f"{name}.toml").read_text())
        tables = [k for k, v in raw.get("strategy_settings", {}).items() if isinstance(v, dict)]
        assert strategies == [raw.get("strategy", "open_es"), *tables], name
    folder = tmp_path / "tasks"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "per-strategy.toml", folder / "mine.toml")
    monkeypatch.setattr(presets, "preset_dir", lambda kind: folder)
    ((name, strategies, text),) = presets.task_rows()
    assert (name, strategies) == ("mine", ["open_es", "lowrank_es", "PGPE"])
    out = io.StringIO()
    show_catalogue(Console(file=out, width=200), presets.task_rows(), [])
    row = next(line for line in out.getvalue().splitlines() if line.strip().startswith("mine"))
    assert "open_es, lowrank_es, PGPE" in row and text in row


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ConfigError) as info:
        presets.locate("task", "pendulm")
    message = str(info.value)
    assert "did you mean 'pendulum'" in message
    for name in REQUIRED_TASKS:
        assert name in message


def write(tmp_path, text: str):
    path = tmp_path / "task.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('env = "Pendulum-v1"\nepisode_lenght = 10\n', ["episode_lenght", "'episode_length'"]),
        ('env = "Pendulum-v1"\n[policy]\nhiden = [8]\n', ["policy", "'hidden'"]),
        ('env = "Pendulum-v1"\nrollouts = "two"\n', ["rollouts", "expected an integer"]),
        ('env = "Pendulum-v1"\nrollouts = 0\n', ["rollouts", "must be positive"]),
        ('env = "Pendulum-v1"\nsolved_return = "high"\n', ["solved_return", "expected a number"]),
        ('env = "Pendulum-v1"\n[evaluation]\nevery = -1\n', ["evaluation.every", "positive"]),
        ('env = "Pendulum-v1"\n[policy]\nkind = "lstn"\n', ["policy.kind", "'lstm'"]),
        ("rollouts = 2\n", ["missing required key 'env'"]),
        ('env = "Pendulum-v1"\nrollouts = \n', ["not valid TOML"]),
    ],
)
def test_broken_preset_is_one_line_naming_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(path)
    for part in expected:
        assert part in message


def test_set_overrides_any_field_and_is_validated():
    task = load("cartpole", ["policy.hidden=[8]", "evaluation.every=2", "solved_return=400"])
    assert task.policy.hidden == (8,)
    assert task.evaluation.every == 2
    assert task.solved_return == 400.0
    with pytest.raises(ConfigError, match="did you mean 'generations'"):
        load("cartpole", ["generation=3"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load("cartpole", ["generations"])


def test_policy_actions_sets_greedy_or_sampled_rollouts_and_is_validated():
    from esjax._src.engine.tasks import check_task, make_rollout

    assert make_rollout(load("catch")).deterministic
    sampled = load("catch", ["policy.actions=sample"])
    assert not make_rollout(sampled).deterministic
    assert make_rollout(sampled, deterministic=True).deterministic  # an explicit choice wins
    with pytest.raises(ConfigError, match="did you mean 'sample'"):
        load("catch", ["policy.actions=samples"])
    with pytest.raises(ConfigError, match="needs discrete actions"):
        check_task(load("pendulum", ["policy.actions=sample"]), "pendulum")
    raw = make_rollout(load("pendulum", ["policy.actions=raw"]))
    assert raw.deterministic and raw.policy.head.raw
    assert not make_rollout(load("pendulum")).policy.head.raw
    with pytest.raises(ConfigError, match="'raw' needs continuous actions"):
        check_task(load("catch", ["policy.actions=raw"]), "catch")


class _AcceleratorStub:
    platform = "gpu"


def test_chunk_size_pins_the_members_that_step_together():
    from esjax._src.engine.tasks import make_rollout

    params = {"w": jax.ShapeDtypeStruct((64, 3), jnp.float32)}  # 64 members of 3 weights
    pinned = make_rollout(load("pendulum", ["chunk_size=8"]))
    assert pinned.auto_chunk_size(64, params) == 8
    assert make_rollout(load("pendulum")).auto_chunk_size(64, params) == 64  # cache-sized
    # A CPU's pin; an accelerator steps every member together, as the rollout's own rule does.
    accelerator = make_rollout(load("pendulum", ["chunk_size=8"]), devices=[_AcceleratorStub()])
    assert accelerator.auto_chunk_size(64, params) == 64
    with pytest.raises(ConfigError, match="chunk_size: must be positive"):
        load("pendulum", ["chunk_size=0"])


def test_an_env_switch_is_set_with_true_or_false_and_reaches_the_env():
    import jax

    from esjax._src.engine.tasks import make_rollout

    assert load("metamaze", ["env_params.normalize_time=true"]).env_params["normalize_time"]
    rollout = make_rollout(load("metamaze", ["env_params.normalize_time=true"]))
    assert rollout.env_params.normalize_time is True
    # gymnax selects on the switch: the step count (here 3) is seen scaled into [-1, 1].
    obs, state = rollout.env.reset(jax.random.key(0), rollout.env_params)
    for i in range(3):
        obs, state, *_ = rollout.env.step(jax.random.key(i), state, 0, rollout.env_params)
    assert float(state.time) == 3.0
    assert -1.0 < float(obs[-1]) < 0.0


def test_an_mlp_without_hidden_layers_is_a_linear_policy_and_an_lstm_needs_a_cell():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from esjax._src.engine.tasks import make_rollout

    rollout = make_rollout(load("catch", ["policy.hidden=[]"]))
    params = rollout.policy.init(jax.random.key(0))
    (layer,) = params["params"].values()
    x = jax.random.normal(jax.random.key(1), (rollout.policy.input_size,))
    action, _ = rollout.policy.apply(params, x, (), jax.random.key(2))
    assert int(action) == int(np.argmax(x @ layer["kernel"] + layer["bias"]))
    assert rollout.policy.num_params(params) == (x.size + 1) * jnp.size(layer["bias"])
    with pytest.raises(ConfigError, match="kind 'lstm' takes one size"):
        load("memory-chain", ["policy.hidden=[]"])


# The env suite of benchmarks/suite.py: one preset per env, each named for it.
SUITE_TASKS = (
    "pendulum", "cartpole", "acrobot", "mountaincar", "mountaincar-continuous", "catch",
    "umbrella-chain", "discounting-chain", "memory-chain", "deep-sea", "four-rooms",
    "bernoulli-bandit", "gaussian-bandit", "point-robot", "metamaze", "breakout-minatar",
    "asterix-minatar", "freeway-minatar", "space-invaders-minatar", "seaquest-minatar",
)  # fmt: skip


def test_suite_presets_are_shipped():
    assert set(SUITE_TASKS) <= set(presets.names("task"))


# Every shipped preset's parts must fit together: its policy, env, sampler and strategy as
# shipped, shrunk to 4 members, 1 rollout of at most 12 steps, 2 evaluation and test episodes.
TINY = ("episode_length=12", "evaluation.every=1", "evaluation.episodes=2", "test_episodes=2")
# The presets that really train (one generation, compiled and run): together one of each policy
# kind (mlp, lstm, cnn with an ego view), of each strategy family the gymnax presets use
# (open_es, SimpleGA), sampled actions, normalised observations, meta inputs, an env sampler,
# validated leaders and a solved_return's final test. Every other preset is traced only.
RUN = ("asterix-minatar", "breakout-minatar", "memory-chain", "pendulum-sign")


def _tiny_config(name):
    from esjax._src.run.training import resolve_config

    return resolve_config(name, popsize=4, rollouts=1, generations=1, overrides=TINY)


@pytest.mark.parametrize("name", [name for name in GYMNAX_TASKS if name not in RUN])
def test_every_task_preset_traces_a_generation_and_an_evaluation(name):
    """The whole program of a generation and of an evaluation, traced from shapes alone: a
    preset whose parts do not fit together fails to trace, without compiling anything."""
    from esjax._src.engine.generation import generation_metric_shapes
    from esjax._src.run.training import engine_for

    _, engine = engine_for(_tiny_config(name))
    state = jax.eval_shape(engine.init, jnp.zeros((1,), jnp.int32))
    after, metrics = jax.eval_shape(engine.run_block, state, jnp.int32(1))
    assert jax.tree.structure(after) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), after) == jax.tree.map(
        lambda x: (x.shape, x.dtype), state
    )
    shapes = generation_metric_shapes(engine.popsize)
    assert metrics.keys() == shapes.keys()
    for key, shape in shapes.items():  # (block, seeds, ...)
        assert metrics[key].shape == (engine.block, 1, *shape.shape), key
    evaluation = jax.eval_shape(engine.evaluate, after)
    assert evaluation["eval_return"].shape == (1,)


def test_the_presets_that_run_cover_every_policy_kind_and_strategy():
    kinds = {load(name).policy.kind for name in GYMNAX_TASKS}
    strategies = {_tiny_config(name).strategy.algorithm for name in GYMNAX_TASKS}
    assert set(RUN) <= set(GYMNAX_TASKS)
    assert {load(name).policy.kind for name in RUN} == kinds
    assert {_tiny_config(name).strategy.algorithm for name in RUN} == strategies


@pytest.mark.parametrize("name", RUN)
def test_a_preset_of_each_kind_compiles_and_runs_a_generation(name, tmp_path):
    import numpy as np

    from esjax._src.run.runs import load_metrics
    from esjax._src.run.training import evolve

    summary = evolve(
        name, popsize=4, rollouts=1, generations=1, out=tmp_path / name, overrides=TINY
    )
    assert summary.generations == 1
    rows = load_metrics(tmp_path / name)
    assert [row["generation"] for row in rows if "generation" in row][-1] == 1
    assert summary.final_eval_return is not None and np.isfinite(summary.final_eval_return)
