"""The built wheel carries the presets and its ``esjax list`` shows them.

The wheel is built from a copy of the source tree (so no build artefacts land in the checkout),
installed with ``pip install --no-deps --target`` next to the current environment's
dependencies, and run from a directory where the checkout cannot shadow it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", "runs", ".venv", ".*_cache", "*.whl"
)


def pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(REPO, src, ignore=SKIP)
    built = pip("wheel", str(src), "--no-deps", "-w", str(work / "dist"), cwd=work)
    if built.returncode != 0:  # offline: build with the environment's own setuptools
        retry = pip(
            "wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(work / "dist"),
            cwd=work,
        )  # fmt: skip
        assert retry.returncode == 0, built.stderr[-2000:] + retry.stderr[-2000:]
    (path,) = (work / "dist").glob("esjax-*.whl")
    return path


def test_wheel_contains_every_preset_and_the_console_script(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "esjax = esjax._src.cli.main:main" in archive.read(entry_points).decode()
    for folder in ("tasks", "strategies"):
        shipped = sorted((REPO / folder).glob("*.toml"))
        assert shipped or folder == "strategies"
        for preset in shipped:
            assert any(n.endswith(f"/{folder}/{preset.name}") for n in names), preset.name
    assert "esjax/_src/cli/main.py" in names


def test_installed_wheel_lists_the_presets(wheel, tmp_path):
    target = tmp_path / "site"
    installed = pip("install", "--no-deps", "--target", str(target), str(wheel), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = dict(os.environ, PYTHONPATH=str(target), COLUMNS="200", JAX_PLATFORMS="cpu")
    where = subprocess.run(
        [sys.executable, "-c", "import esjax; print(esjax.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "esjax._src.cli.main", "list"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    for folder in ("tasks", "strategies"):
        for preset in (REPO / folder).glob("*.toml"):
            assert preset.stem in listed.stdout, preset.stem
