"""Every code block of README and the guides that a user would run, run as written at a tiny size.

The pages: README.md and the guides, ``docs/*.md`` (not ``docs/api/``, the reference built from
docstrings, nor ``docs/benchmarks/``, whose commands are the measurements themselves). Each page
runs in a working directory of its own, with a copy of ``examples/``, its blocks in page order:

- a block with a title (````toml title="my_task.toml"````) is a file the page has the reader
  write: it is saved under that name, and nothing in it runs;
- each ``esjax`` command of a ``bash`` block runs in this process, shrunk by the README tour's
  rules (:data:`test_readme_tour.SHRINKERS`); other shell lines (``pip``, ``pytest``,
  ``mkdocs``) set up the reader's machine, which CI's own install does;
- ``python`` blocks run in one namespace per page, as a notebook's cells do, with each size
  of :data:`PYTHON_SIZES` lowered to its cap (``popsize=256`` runs as ``popsize=16``);
- blocks of other languages (``text``, ``json``) are output, shown, not run.

README's ``bash`` blocks are ``tests/test_readme_tour.py``'s, which also runs its Trainer
example alone and checks it writes no file. A command that cannot run here (it needs several
hosts) is named in :data:`NOT_RUN` with the reason; an entry that no page holds any more fails,
so the list cannot go stale.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from test_readme_tour import SHRINKERS, cli, missing_extra

REPO = Path(__file__).resolve().parents[1]
GUIDES = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *GUIDES]
# A fenced block: its language, its info string's attributes, its body.
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
TITLE = re.compile(r'title="([^"]+)"')
# Sizes a Python block gives, and the most the test runs of each.
PYTHON_SIZES = {
    "popsize": 16,
    "generations": 2,
    "episode_length": 16,
    "episodes": 4,
    "eval_episodes": 4,
    "num_rollouts": 2,
    "seeds": 2,
}
# Commands a page shows that cannot run in one test process, each with why and what tests it.
NOT_RUN = {
    "esjax evolve pendulum --popsize 8192 --out /shared/runs/p --coordinator host0:1234 "
    "--num-processes 4 --process-id 0": (
        "four hosts; tests/test_distributed.py joins two local processes the same way"
    ),
}


def blocks(page: Path) -> list[tuple[str, str | None, str, int]]:
    """``(language, title, body, line)`` of each fenced block of ``page``, in order."""
    text = page.read_text()
    found = []
    for match in BLOCK.finditer(text):
        title = TITLE.search(match.group(2))
        line = text.count("\n", 0, match.start()) + 1
        found.append((match.group(1), title.group(1) if title else None, match.group(3), line))
    return found


def esjax_commands(body: str) -> list[list[str]]:
    """The arguments of each ``esjax`` command in a bash block (continued lines joined,
    comments dropped, ``&&`` chains split)."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        segments: list[list[str]] = [[]]
        for word in shlex.split(line, comments=True):
            if word == "&&":
                segments.append([])
            else:
                segments[-1].append(word)
        commands += [s[1:] for s in segments if s[:1] == ["esjax"]]
    return commands


def shrunk_python(body: str) -> str:
    """A Python block with each size of :data:`PYTHON_SIZES` lowered to its cap."""

    def lower(match: re.Match) -> str:
        name, value = match.group(1), int(match.group(2))
        return f"{name}={min(value, PYTHON_SIZES[name])}"

    return re.sub(rf"\b({'|'.join(PYTHON_SIZES)})=(\d+)\b", lower, body)


def run_command(args: list[str], where: str) -> None:
    line = shlex.join(["esjax", *args])
    if line in NOT_RUN:
        return
    shrink = SHRINKERS.get(args[0])
    assert shrink is not None, f"{where}: `{line}`; add a rule for `esjax {args[0]}` to SHRINKERS"
    command = shrink(list(args))
    code, output = cli(command)
    if missing_extra(command) is not None:
        assert code == 2 and 'pip install "esjax[' in output, output
        return
    assert code == 0, f"{where}: {shlex.join(command)}\n{output[-3000:]}"


def run_page(page: Path, workdir: Path) -> None:
    shutil.copytree(REPO / "examples", workdir / "examples",
                    ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))  # fmt: skip
    namespace: dict = {"__name__": "__main__"}
    for language, title, body, line in blocks(page):
        where = f"{page.relative_to(REPO)}:{line}"
        if title is not None:
            (workdir / title).parent.mkdir(parents=True, exist_ok=True)
            (workdir / title).write_text(body)
        elif language == "bash" and page.name != "README.md":
            for args in esjax_commands(body):
                run_command(args, where)
        elif language == "python":
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(shrunk_python(body), where, "exec"), namespace)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_block_a_reader_runs_runs(page, tmp_path, monkeypatch):
    from esjax._src.strategies import algorithms  # here: evosax starts JAX's backend on import

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # a page's own files import as modules
    registered = dict(algorithms.REGISTRY)
    try:
        run_page(page, tmp_path)
    finally:  # a strategy a page registers is the page's alone
        algorithms.REGISTRY.clear()
        algorithms.REGISTRY.update(registered)
        algorithms.info.cache_clear()


def test_every_guide_is_run_and_in_the_site():
    """A guide that is not in mkdocs.yml's nav is never built; one without a block to run is
    prose the tests cannot check."""
    nav = (REPO / "mkdocs.yml").read_text()
    for page in GUIDES:
        assert f" {page.name}" in nav, f"mkdocs.yml: add {page.name} to the nav"
        runnable = [b for b in blocks(page) if b[0] in ("bash", "python") and b[1] is None]
        assert runnable, f"{page.relative_to(REPO)} shows nothing the tests run"


def test_every_not_run_command_is_still_shown():
    shown = {
        shlex.join(["esjax", *args])
        for page in PAGES
        for language, _, body, _ in blocks(page)
        if language == "bash"
        for args in esjax_commands(body)
    }
    stale = set(NOT_RUN) - shown
    assert not stale, f"NOT_RUN names commands no page shows: {sorted(stale)}"


def test_the_benchmark_pages_table_is_the_recorded_one():
    """docs/benchmarks/index.md's comparisons are benchmarks/results/summary.json's, as
    ``python benchmarks/summary_figure.py`` writes them (with the figure)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "summary_figure", REPO / "benchmarks" / "summary_figure.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    page = tool.PAGE.read_text()
    assert f"{tool.BEGIN}\n{tool.table(tool.comparisons())}\n{tool.END}" in page, (
        "docs/benchmarks/index.md: run python benchmarks/summary_figure.py"
    )
    assert (REPO / "docs" / "benchmarks" / "summary.png").is_file()


def test_the_sizes_are_lowered_and_nothing_else():
    code = "Trainer(env, net, popsize=256, generations=100)\nhidden=(64, 64)\nrollouts=8\n"
    assert shrunk_python(code) == (
        "Trainer(env, net, popsize=16, generations=2)\nhidden=(64, 64)\nrollouts=8\n"
    )
    assert blocks(REPO / "docs" / "task-files.md")[0][:2] == ("toml", "my_task.toml")
    assert sys.modules["test_readme_tour"].SHRINKERS is SHRINKERS
