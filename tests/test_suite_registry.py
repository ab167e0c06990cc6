"""The suite registry is the one list of suites, and what names suites elsewhere follows it.

Adding a suite is its module, one line in ``esjax._src.envs.suites.SUITE_MODULES`` and its tests;
the checks here fail where something else (``pyproject.toml``'s extras, the API reference) has not
caught up. The toy suite (tests/data/toy_suite.py) walks through the recipe from outside esjax:
registered by replacing the registry's tuple, the same line a contributor adds, then trained
and evaluated from the command line.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from esjax._src.envs import suites
from esjax._src.envs.core import SuiteAdapter, check_env, make_env
from esjax._src.envs.suites import (
    RegistryError,
    Suite,
    names_code,
    package_modules,
    registered,
    suite_rows,
)
from esjax._src.specs.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def test_pyproject_has_each_suites_extra_and_envs_lists_exactly_them():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for suite in registered().values():
        assert extras.get(suite.extra) == [suite.requirement], (
            f"pyproject.toml: add {suite.extra} = [{suite.requirement!r}] to the extras "
            "(CONTRIBUTING.md's Declare step)"
        )
    wanted = sorted(suite.requirement for suite in registered().values())
    assert sorted(extras["envs"]) == wanted, (
        f"pyproject.toml: the envs extra lists exactly {wanted} (CONTRIBUTING.md's Declare step)"
    )


def test_every_suite_module_is_registered_and_in_the_api_reference():
    """An esjax/_src/envs/suite_*.py not in the registry would never be reachable; one missing from
    docs/api/envs.md would have no reference page."""
    folder = REPO / "esjax" / "_src" / "envs"
    files = {f"envs.{path.stem}" for path in folder.glob("suite_*.py")} - {"envs.suite_base"}
    unregistered = sorted(files - set(package_modules()))
    assert not unregistered, (
        f"esjax/_src/envs/suites.py: add 'esjax._src.{unregistered[0]}' to SUITE_MODULES "
        "(CONTRIBUTING.md's Register step)"
    )
    assert files == set(package_modules())
    lines = (REPO / "docs" / "api" / "envs.md").read_text().splitlines()
    listed = {line.split()[1].removeprefix("esjax._src.") for line in lines
              if line.startswith("::: esjax._src.envs.suite_")}  # fmt: skip
    assert listed - {"envs.suite_base"} == set(package_modules())


def test_the_registry_imports_neither_jax_nor_a_suite_until_asked():
    """``esjax._src.envs.suites`` alone loads no JAX; resolving it loads the adapters (JAX) but none
    of
    the suites' own packages, which only ``make`` imports."""
    code = (
        "import sys\n"
        "import esjax._src.envs.suites as s\n"
        "assert 'jax' not in sys.modules, 'esjax._src.envs.suites imported JAX'\n"
        "packages = [suite.package for suite in s.registered().values()]\n"
        "loaded = [p for p in packages if p in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=300)


def test_every_registered_adapter_takes_what_esjax_passes_it():
    """``make(name, kwargs)`` as :class:`esjax._src.envs.core.SuiteAdapter` says, checked without
    the
    suites installed: the adapters import their suites inside ``make`` only."""
    wanted = list(inspect.signature(SuiteAdapter.make).parameters)[1:]
    for name, suite in registered().items():
        module = suites.adapter(name)
        assert module.SUITE is suite and suite.example.startswith(f"{name}:")
        inspect.signature(module.make).bind(*wanted)


def test_a_suite_declares_a_name_a_task_can_use():
    with pytest.raises(ValueError, match="identifier"):
        Suite("my:suite", "x", "x", "my:suite:A", "")
    with pytest.raises(ValueError, match="is not toy:NAME"):
        Suite("toy", "jax", "jax", "other:Walk", "")


def test_a_registered_module_that_is_not_an_adapter_is_one_line(monkeypatch):
    shipped = suites.SUITE_MODULES
    monkeypatch.setattr(suites, "SUITE_MODULES", (*shipped, "json"))
    with pytest.raises(RegistryError, match=r"^json is registered as a suite but lacks SUITE"):
        registered()
    monkeypatch.setattr(suites, "SUITE_MODULES", (*shipped, "esjax._src.envs.suite_navix"))
    twice = r"^esjax\._src\.envs\.suite_navix is registered twice$"
    with pytest.raises(RegistryError, match=twice):
        registered()


@pytest.fixture
def toy(monkeypatch):
    """The toy suite registered from outside esjax: its folder on the path and its module
    appended to the registry, as the one line a new suite adds."""
    monkeypatch.syspath_prepend(str(DATA))
    monkeypatch.setattr(suites, "SUITE_MODULES", (*suites.SUITE_MODULES, "toy_suite"))
    return registered()["toy"]


def test_a_registered_suite_is_an_env_name_listed_and_checked(toy):
    assert toy.example == "toy:Walk" and toy.installed()
    assert ("toy", "toy", "toy:Walk", True, toy.description) in suite_rows()
    assert not names_code("toy:Walk")  # a suite's env is data, not code to trust
    env, params = make_env("toy:Walk", {"target": 2.0})
    assert float(params.target) == 2.0
    assert check_env((env, params), "toy:Walk") == (env, params)
    with pytest.raises(ConfigError, match="toy has no env 'Run'; its envs: Walk"):
        make_env("toy:Run")
    with pytest.raises(ConfigError, match="toy:Walk: env_kwargs speed not known"):
        make_env("toy:Walk", {"speed": 1})


def test_an_adapter_whose_make_takes_other_arguments_is_one_line(toy, monkeypatch):
    monkeypatch.setattr(suites.adapter("toy"), "make", lambda name: None)
    with pytest.raises(ConfigError, match=r"toy_suite\.make must take \(name, kwargs\)"):
        make_env("toy:Walk")


def test_a_suite_named_like_its_package_never_hides_the_packages_factory(tmp_path, monkeypatch):
    """``SUITE:NAME`` is the suite's env (the rule README states); where the suite has no env
    NAME and its package, named like it, has a factory NAME, the line says how to name that
    factory instead of reading it silently as an env the suite lacks."""
    (tmp_path / "walkers.py").write_text(
        "import gymnax\ndef make():\n    return gymnax.make('CartPole-v1')\n"
    )
    (tmp_path / "walkers_suite.py").write_text(
        "import importlib\n"
        "from esjax._src.envs.suites import Suite\n"
        "from esjax._src.specs.config import ConfigError\n"
        "SUITE = Suite('walkers', 'walkers', 'walkers', 'walkers:Walk', 'a suite of walkers')\n"
        "def make(name, kwargs):\n"
        "    importlib.import_module('walkers')  # as an adapter imports its suite\n"
        "    raise ConfigError(f'walkers has no env {name!r}; its envs: Walk')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(suites, "SUITE_MODULES", (*suites.SUITE_MODULES, "walkers_suite"))
    monkeypatch.delitem(sys.modules, "walkers", raising=False)
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as error:
        make_env("walkers:make")
    assert "'walkers' before the colon is the walkers suite" in str(error.value)
    assert "'walkers.MODULE:make'" in str(error.value)
    with pytest.raises(ConfigError, match=r"walkers has no env 'Run'; its envs: Walk$"):
        make_env("walkers:Run")  # no factory of that name: the suite's own line, unchanged
    sys.modules.pop("walkers", None)


def _cli(*args: object) -> str:
    """``esjax ARGS`` in this process (so the registry replaced here holds); its stdout."""
    from esjax._src.cli.main import app

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = app([str(a) for a in args], prog_name="esjax", standalone_mode=False)
    assert not code, out.getvalue()
    return out.getvalue()


def test_a_toy_suite_trains_and_evaluates_from_the_command_line(toy, tmp_path):
    task = tmp_path / "toy-walk.toml"
    task.write_text('description = "The toy walker"\nenv = "toy:Walk"\nepisode_length = 20\n'
                    "test_episodes = 4\n[env_kwargs]\ntarget = 2.0\n")  # fmt: skip
    run = tmp_path / "run"
    _cli("evolve", task, "--generations", "2", "--popsize", "8", "--out", run,
         "--set", "evaluation.every=1", "--set", "evaluation.episodes=4")  # fmt: skip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert rows[-1]["generation"] == 2 and np.isfinite(rows[-1]["eval_return"])
    assert json.loads((run / "config.json").read_text())["task"]["env"] == "toy:Walk"

    record = json.loads(_cli("eval", run, "--json"))
    # Each step costs the distance left: from at most 2.5 away, walking away 0.5 a step for
    # 20 steps costs at most 20 * 2.5 + 0.5 * (1 + ... + 20) = 155.
    assert record["episodes"] == 4 and -155.0 <= record["mean"] <= 0.0
