"""Env names beyond gymnax: a user's factory (module or file), suites, and the env options.

The user env is examples/custom_env.py, the file a user would write; the rollout must play it
exactly as a plain Python loop over the class's own ``step`` does on the same keys.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from esjax._src.engine.tasks import check_task
from esjax._src.envs.core import check_env, make_env
from esjax._src.envs.suites import registered
from esjax._src.policies.networks import MLP
from esjax._src.rollout.episode import episode_keys, split_step_key, step_keys
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.run.training import resolve_config
from esjax._src.specs.config import ConfigError, RunConfig, parse_task, to_dict
from esjax._src.specs.presets import load_task

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = f"{REPO}/examples/custom_env.py:make_env"
TASK = REPO / "examples" / "custom_env.toml"


def esjax_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "esjax", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_a_user_env_plays_as_a_plain_loop_over_its_own_step():
    rollout = PopulationRollout(EXAMPLE, MLP(hidden=(8,)), 100, env_kwargs={"friction": 0.2})
    params = rollout.init_params(jax.random.key(1))
    key = jax.random.key(7)
    result = rollout.single(key, params, trajectory=True)

    env, env_params = make_env(EXAMPLE, {"friction": 0.2})
    assert env_params.friction == 0.2
    _, k_reset, k_steps = episode_keys(key)
    obs, state = env.reset(k_reset, env_params)
    total, length = 0.0, 0
    for t, step_key in enumerate(step_keys(k_steps, 100)):
        np.testing.assert_allclose(result.trajectory.obs[t], obs, atol=1e-5)
        _, k_env = split_step_key(step_key)
        action = result.trajectory.action[t]
        obs, state, reward, terminated, truncated, _ = env.step(k_env, state, action, env_params)
        np.testing.assert_allclose(result.trajectory.reward[t], reward, atol=1e-5)
        total, length = total + float(reward), length + 1
        if terminated or truncated:
            break
    assert int(result.lengths) == length
    np.testing.assert_allclose(float(result.returns), total, rtol=1e-5)


def test_a_file_is_loaded_once_so_its_classes_stay_the_same():
    first, _ = make_env(EXAMPLE)
    second, _ = make_env(EXAMPLE, {"friction": 0.5})
    assert type(first) is type(second)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nosuch_pkg.envs:make", "no module named 'nosuch_pkg'"),
        ("json:no_factory", "json has no attribute 'no_factory'"),
        ("json:__doc__", "__doc__ is a str, not a factory"),
        ("missing/file.py:make", "no such file 'missing/file.py'"),
        ("collections:OrderedDict", "it has no 'reset' method"),
        ("navx:Navix-Empty-5x5-v0", "did you mean 'navix'?"),
        ("CartPol-v1", "did you mean 'CartPole-v1'?"),
    ],
)
def test_a_bad_env_name_is_one_line(name, message):
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as error:
        make_env(name)
    assert message in str(error.value)


def test_an_object_missing_a_method_names_it(tmp_path):
    path = tmp_path / "half_env.py"
    path.write_text(
        "class Half:\n"
        "    default_params = None\n"
        "    def reset(self, key, params): ...\n"
        "    def action_space(self, params): ...\n"
        "    def observation_space(self, params): ...\n"
        "def make():\n    return Half(), {}\n"
    )
    with pytest.raises(ConfigError, match="made a Half object, not an env esjax can step: it has "
                       "no 'step' method"):  # fmt: skip
        make_env(f"{path}:make")
    with pytest.raises(ConfigError, match="cannot call it with env_kwargs"):
        make_env(f"{path}:make", {"size": 3})


# A working env (the example's PointMass), then one change each, and the line that names it.
_BROKEN_ENVS = {
    "step_without_params": (
        "    def step(self, key, state, action):\n"
        "        return super().step(key, state, action, None)\n",
        r"PointMassVariant\.step must take \(key, state, action, params\)",
    ),
    "reset_without_key": (
        "    def reset(self, params):\n        return super().reset(None, params)\n",
        r"PointMassVariant\.reset must take \(key, params\)",
    ),
    "a_space_without_fields": (
        "    def action_space(self, params):\n        return object()\n",
        r"PointMassVariant\.action_space gave a object: esjax needs n \(discrete\) or low, high",
    ),
    "an_observation_space_without_a_shape": (
        "    def observation_space(self, params):\n        return 3\n",
        r"PointMassVariant\.observation_space gave a int without a shape$",
    ),
}


@pytest.mark.parametrize("change", _BROKEN_ENVS, ids=list(_BROKEN_ENVS))
def test_an_env_that_does_not_fit_the_protocol_is_one_line_at_the_door(change, tmp_path):
    method, message = _BROKEN_ENVS[change]
    path = tmp_path / f"{change}.py"
    variant = "\n\nclass PointMassVariant(PointMass):\n" + method
    factory = "\n\ndef make():\n    return PointMassVariant(EnvParams()), EnvParams()\n"
    path.write_text((REPO / "examples" / "custom_env.py").read_text() + variant + factory)
    with pytest.raises(ConfigError, match=message) as error:
        make_env(f"{path}:make")
    assert "\n" not in str(error.value)


def test_the_protocol_is_what_the_door_checks():
    """ENV_METHODS comes from the Env protocol, and every env esjax ships fits it."""
    from esjax._src.envs.core import ENV_METHODS, Env
    from esjax._src.envs.suite_base import StateEnv

    assert ENV_METHODS == ("reset", "step", "action_space", "observation_space")
    assert all(callable(getattr(Env, method)) for method in ENV_METHODS)
    env, params = make_env(EXAMPLE)
    assert check_env((env, params), "example") == (env, params)
    assert all(callable(getattr(StateEnv, method)) for method in ENV_METHODS)


def test_env_kwargs_are_a_validated_table_that_round_trips():
    task = parse_task({"env": "a.py:make", "env_kwargs": {"n": 3, "x": 0.5, "on": True,
                                                           "kind": "hard"}}, "t.toml")  # fmt: skip
    assert task.env_kwargs == {"n": 3, "x": 0.5, "on": True, "kind": "hard"}
    assert isinstance(task.env_kwargs["n"], int)
    assert parse_task(to_dict(task), "again") == task
    assert parse_task({"env": "CartPole-v1"}, "old.toml").env_kwargs == {}
    with pytest.raises(ConfigError, match=r"t.toml: env_kwargs.n: expected"):
        parse_task({"env": "a.py:make", "env_kwargs": {"n": [1, 2]}}, "t.toml")


def test_the_example_task_resolves_and_round_trips():
    config = resolve_config(TASK)
    assert config.task.env_kwargs == {"friction": 0.2, "max_steps": 100}
    data = json.loads(json.dumps(config.to_json()))
    assert RunConfig.from_json(data, "config.json") == config


def test_the_example_trains_from_the_cli_beyond_the_zero_policy(tmp_path):
    done = esjax_cli("evolve", "examples/custom_env.toml", "--generations", "10",
                     "--out", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    trained = rows[-1]["eval_return"]

    rollout = PopulationRollout(EXAMPLE, MLP(hidden=(16,)), 100, env_kwargs={"friction": 0.2})
    zero = jax.tree.map(jnp.zeros_like, rollout.init_params(jax.random.key(0)))
    zero_return = float(rollout.batch(jax.random.key(3), zero, 256).returns.mean())
    assert zero_return < -50.0  # the mass never moves: every step costs the full distance
    assert trained > zero_return + 25.0, (trained, zero_return)


def test_a_bad_env_in_a_task_file_exits_2_with_one_line(tmp_path):
    task = tmp_path / "bad.toml"
    task.write_text('env = "json:no_factory"\nepisode_length = 10\n')
    done = esjax_cli("evolve", str(task), "--generations", "1", "--out", str(tmp_path / "r"))
    assert done.returncode == 2
    assert "json has no attribute 'no_factory'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# A suite hidden from the import system, as in an install without its extra.
def _hide(monkeypatch, package: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == package else real(name, *a))  # fmt: skip


@pytest.mark.parametrize("suite", registered().values(), ids=lambda s: s.name)
def test_a_suite_not_installed_names_its_extra(suite, monkeypatch):
    _hide(monkeypatch, suite.package)
    assert not suite.installed()
    with pytest.raises(ConfigError, match=rf'pip install "esjax\[{suite.extra}\]"$'):
        make_env(suite.example)


@pytest.mark.parametrize("suite", registered().values(), ids=lambda s: s.name)
def test_a_task_naming_a_suite_not_installed_exits_2(suite, tmp_path):
    task = tmp_path / "suite.toml"
    task.write_text(f'env = "{suite.example}"\nepisode_length = 10\n')
    hidden = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        f"importlib.util.find_spec = lambda name, *a: None if name == {suite.package!r} "
        "else real(name, *a)\n"
        "from esjax._src.cli.main import main\n"
        "main()\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", hidden, "evolve", str(task), "--generations", "1",
                           "--out", str(tmp_path / "r")], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f'pip install "esjax[{suite.extra}]"'), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_task_files_env_file_is_read_beside_it_from_any_directory(tmp_path, monkeypatch):
    """``custom_env.py:make_env`` in examples/custom_env.toml names the file beside the task;
    made absolute, the run's config names it wherever the run is resumed or rendered."""
    monkeypatch.chdir(tmp_path)
    task = load_task(TASK).task
    assert task.env == f"{(REPO / 'examples' / 'custom_env.py').resolve()}:make_env"
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text('env = "missing.py:make_env"\nepisode_length = 10\n')
    assert load_task(elsewhere)[1].env == "missing.py:make_env"  # left for make_env to name


def test_a_module_in_the_working_directory_is_found_without_python_m(tmp_path, monkeypatch):
    """The ``esjax`` script, unlike ``python -m esjax``, has no working directory on sys.path:
    ``module:factory`` for a module beside the user is searched for there too."""
    (tmp_path / "beside_me_envs.py").write_text((REPO / "examples" / "custom_env.py").read_text())
    monkeypatch.chdir(tmp_path)
    here = {"", str(tmp_path), os.getcwd()}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])
    monkeypatch.delitem(sys.modules, "beside_me_envs", raising=False)
    env, params = make_env("beside_me_envs:make_env", {"friction": 0.3})
    assert type(env).__name__ == "PointMass" and float(params.friction) == 0.3
    searched = list(sys.path)
    with pytest.raises(ConfigError, match="no module named 'nowhere_envs'"):
        make_env("nowhere_envs:make")
    assert sys.path == searched  # a failed search leaves no trace


@pytest.mark.parametrize(
    "env", ["CartPole-v1", pytest.param("navix:Navix-Empty-5x5-v0", id="navix")]
)
def test_an_env_kwargs_key_the_env_does_not_take_is_one_line(env):
    if env.startswith("navix") and not registered()["navix"].installed():
        pytest.skip('navix is not installed (pip install "esjax[navix]")')
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as error:
        make_env(env, {"no_such_option": 5})
    assert "env_kwargs {'no_such_option': 5}" in str(error.value)
    assert "no_such_option" in str(error.value).split(":", 2)[-1]


def test_an_env_without_a_time_limit_needs_episode_length(tmp_path):
    """Params without ``max_steps_in_episode`` leave no episode length to default to."""
    path = tmp_path / "no_limit_env.py"
    source = (REPO / "examples" / "custom_env.py").read_text()
    # The example's params, less the field the default episode length is read from.
    path.write_text(source + "\n\n@struct.dataclass\nclass Unbounded:\n"
                    "    dt: float = 0.1\n    friction: float = 0.1\n    tolerance: float = 0.05\n"
                    "\ndef make_unbounded():\n"
                    "    return PointMass(Unbounded()), Unbounded()\n")  # fmt: skip
    task = parse_task({"env": f"{path}:make_unbounded"}, "t.toml")
    with pytest.raises(ConfigError, match=r"t.toml: episode_length: .* set episode_length"):
        check_task(task, "t.toml")
    check_task(parse_task({"env": f"{path}:make_unbounded", "episode_length": 20}, "t"), "t")
