"""The recipes CONTRIBUTING.md links (docs/contributing/), followed literally.

Every path CONTRIBUTING.md and the recipe pages name exists (one with ``NAME`` in it stands for
a file of that pattern that exists, such as ``esjax/_src/envs/suite_NAME.py`` for
``suite_navix.py``), and CONTRIBUTING.md links each recipe page. In a copy of the repository,
the suite recipe adds the toy suite (tests/data/toy_suite.py) and the strategy recipe the toy
strategy (tests/data/toy_strategy.py) inside ``esjax/_src/``, each with exactly the steps its
page lists, read off the page (a numbered step in bold: **Write**, **Register**, ...), no more
and no fewer; then the layout, registry, preset and docs checks pass in the copy and ``mypy``
passes on the package with both toys in it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "CONTRIBUTING.md"
RECIPES = REPO / "docs" / "contributing"
SUITE_RECIPE, KIND_RECIPE, STRATEGY_RECIPE = (
    RECIPES / f"{name}.md" for name in ("env-suite", "policy-kind", "strategy")
)
DATA = REPO / "tests" / "data"
# What a copy leaves out: builds, caches and the environment, none of which a recipe touches.
SKIP = {".git", ".venv", "__pycache__", "build", "dist", "site", "runs", ".pytest_cache",
        ".ruff_cache", ".mypy_cache"}  # fmt: skip


def steps(page: Path) -> list[tuple[str, str]]:
    """``(verb, file)`` of each numbered bold step of a recipe page: the file is its first path."""
    found = re.findall(r"^\d+\. \*\*(\w+)\*\*.*?`([^`]+)`", page.read_text(), re.MULTILINE)
    return [(verb, path) for verb, path in found]


def test_contributing_links_each_recipe_page():
    text = PAGE.read_text()
    for recipe in (SUITE_RECIPE, KIND_RECIPE, STRATEGY_RECIPE):
        assert f"]({recipe.relative_to(REPO)})" in text, f"CONTRIBUTING.md: link {recipe.name}"


def test_every_path_the_pages_name_exists():
    text = "".join(p.read_text() for p in (PAGE, SUITE_RECIPE, KIND_RECIPE, STRATEGY_RECIPE))
    named = set(re.findall(r"`((?:esjax|tests|docs|tasks|benchmarks)/[\w./-]+|[\w-]+\.toml)`",
                           text))  # fmt: skip
    assert len(named) > 15
    missing = []
    for path in sorted(named):
        pattern = re.sub(r"NAME|ENV|FOLDER|MODULE|FILE", "*", path)
        if not list(REPO.glob(pattern)):
            missing.append(path)
    assert not missing, f"CONTRIBUTING.md and its recipes name paths that do not exist: {missing}"


def test_a_wrong_path_would_be_found():
    assert not list(REPO.glob("esjax/suite_*.py"))  # the page's old paths, before the folders
    assert not list(REPO.glob("docs/api/jax.md"))


# ---------------------------------------------------------------------------- the recipes
def insert_after(path: Path, anchor: str, text: str) -> None:
    """``text`` right after the first line holding ``anchor``."""
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if anchor in line)
    path.write_text("".join([*lines[: at + 1], text, *lines[at + 1 :]]))


def api_line(folder: str, module: str) -> Callable[[Path], None]:
    def add(copy: Path) -> None:
        page = copy / "docs" / "api" / f"{folder}.md"
        page.write_text(page.read_text().rstrip("\n") + f"\n\n::: esjax._src.{folder}.{module}\n")

    return add


def declare_toy_extra(copy: Path) -> None:
    pyproject = copy / "pyproject.toml"
    insert_after(pyproject, "[project.optional-dependencies]", 'toy = ["jax"]\n')
    text = pyproject.read_text()
    pyproject.write_text(text.replace("envs = [\n", 'envs = [\n    "jax",\n', 1))


def ship_toy_preset(copy: Path) -> None:
    (copy / "tasks" / "toy-walk.toml").write_text(
        'description = "The toy suite\'s walker"\nenv = "toy:Walk"\npopsize = 8\n'
        'generations = 2\nstrategy = "open_es"\n\n[policy]\nhidden = [8]\n'
    )


SUITE_STEPS: dict[tuple[str, str], Callable[[Path], None]] = {
    ("Write", "esjax/_src/envs/suite_NAME.py"): lambda copy: shutil.copy(
        DATA / "toy_suite.py", copy / "esjax" / "_src" / "envs" / "suite_toy.py"
    ),
    ("Register", "esjax/_src/envs/suites.py"): lambda copy: insert_after(
        copy / "esjax" / "_src" / "envs" / "suites.py",
        "SUITE_MODULES: tuple",
        '    "esjax._src.envs.suite_toy",\n',
    ),
    ("Document", "docs/api/envs.md"): api_line("envs", "suite_toy"),
    ("Declare", "pyproject.toml"): declare_toy_extra,
    ("Ship", "tasks/NAME-ENV.toml"): ship_toy_preset,
}


def register_toy_strategy(copy: Path) -> None:
    algorithms = copy / "esjax" / "_src" / "strategies" / "algorithms.py"
    insert_after(
        algorithms,
        "from esjax._src.strategies.lowrank_es import",
        "from esjax._src.strategies.keyed import KeyedES\n",
    )
    text = algorithms.read_text()
    algorithms.write_text(
        text.replace('"LowRank_ES": LowRank_ES}', '"LowRank_ES": LowRank_ES, "KeyedES": KeyedES}')
    )


STRATEGY_STEPS: dict[tuple[str, str], Callable[[Path], None]] = {
    ("Write", "esjax/_src/strategies/NAME.py"): lambda copy: shutil.copy(
        DATA / "toy_strategy.py", copy / "esjax" / "_src" / "strategies" / "keyed.py"
    ),
    ("Register", "esjax/_src/strategies/algorithms.py"): register_toy_strategy,
    ("Document", "docs/api/strategies.md"): api_line("strategies", "keyed"),
}


def test_the_recipes_list_exactly_the_steps_followed_here():
    assert steps(SUITE_RECIPE) == list(SUITE_STEPS)
    assert steps(STRATEGY_RECIPE) == list(STRATEGY_STEPS)


def run(copy: Path, *command: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(copy), JAX_PLATFORMS="cpu")
    return subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def followed(tmp_path_factory) -> Path:
    """A copy of the repository with both recipes followed, step by step, as the page lists."""
    copy = tmp_path_factory.mktemp("recipes") / "esjax-copy"
    shutil.copytree(REPO, copy, ignore=skipped)
    for recipe, done_by in ((SUITE_RECIPE, SUITE_STEPS), (STRATEGY_RECIPE, STRATEGY_STEPS)):
        for step in steps(recipe):
            done_by[step](copy)
    return copy


def skipped(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if name in SKIP or name.endswith(".egg-info")]


def test_followed_literally_the_checks_pass(followed):
    checks = [
        "tests/test_layout.py",
        "tests/test_suite_registry.py::test_pyproject_has_each_suites_extra_and_envs_lists_exactly_them",
        "tests/test_suite_registry.py::test_every_suite_module_is_registered_and_in_the_api_reference",
        "tests/test_suite_registry.py::test_every_registered_adapter_takes_what_esjax_passes_it",
        "tests/test_suite_presets.py::test_every_registered_suite_ships_a_preset",
        "tests/test_presets.py::test_required_presets_are_shipped",
    ]
    done = run(
        followed, sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *checks
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    listed = run(followed, sys.executable, "-m", "esjax", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert " esjax " in rows["KeyedES"] and "toy:Walk" in listed.stdout


def test_followed_literally_mypy_passes(followed):
    done = run(followed, sys.executable, "-m", "mypy", "--cache-dir", str(followed / ".mypy_cache"))
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.parametrize(
    ("left_out", "check", "named"),
    [
        (("Document", "docs/api/envs.md"), "tests/test_layout.py", "Document step"),
        (
            ("Register", "esjax/_src/envs/suites.py"),
            "tests/test_suite_registry.py",
            "Register step",
        ),
        (("Declare", "pyproject.toml"), "tests/test_suite_registry.py", "Declare step"),
    ],
)
def test_a_step_left_out_is_named_by_the_check_that_fails(tmp_path, left_out, check, named):
    copy = tmp_path / "esjax-copy"
    shutil.copytree(REPO, copy, ignore=skipped)
    for step in steps(SUITE_RECIPE):
        if step != left_out:
            SUITE_STEPS[step](copy)
    done = run(copy, sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               "-k", "not command_line", check)  # fmt: skip
    assert done.returncode != 0 and f"CONTRIBUTING.md's {named}" in done.stdout, done.stdout[-3000:]
