"""Issue 57's fuzz test: a real run directory with one file mutated at a time, opened by every
command that reads a run.

Mutations: a JSON field (or a metrics row's field) set to another type, a huge or negative
number, NaN, a deep nesting, or deleted; a file deleted, truncated, or replaced by a link to a
file or folder outside the run, to ``/dev/zero`` or to nothing, or by a hard link to a file
outside the run (which ``O_NOFOLLOW`` cannot see: holding esjax's bytes, or another file's).
Issue 76's three, on a run whose env module imports a package of helpers and a module beside
it: code appended to a helper, a planted ``__pycache__`` entry that Python would run instead
of an unchanged source, and control characters (an ANSI colour, an OSC title) in a string or a
key of a run file. For each, every command must exit
0 or 2 without a traceback, touch nothing outside the run (a helper's or a planted .pyc's code
writes a file outside when it runs), print no control character, and leave the run's own files
as they were unless the command writes them. Examples are derandomized and bounded, so the test
takes the same (small) time on every machine; there is no timed assert.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_run_as_data import SMALL, cli, fresh_process, plant_pyc

from esjax._src.run import runs, trust
from esjax._src.run.training import evolve

JSON_FILES = (runs.CONFIG, runs.SUMMARY, runs.TARGET)
BINARY_FILES = ("final_policy.msgpack", "best_policy.msgpack", runs.CHECKPOINT, runs.LOCK)
DEEP = "DEEP"  # a stand-in for 3,000 nested lists, written as text (json.dumps would recurse)
VALUES = (None, "x", -1, -5, 0, 2**31, 10**12, 1.5, float("nan"), [], {}, True, DEEP)
LINKS = ("outside file", "outside folder", "/dev/zero", "nowhere")
# What each command may write in the run; every other file must stay as it was.
COMMANDS = {
    "eval": ((), ()),
    "plot": ((), (runs.FITNESS_FIGURE,)),
    "export": (("--csv",), ("metrics.csv",)),
    "report": ((), ("report.json", "report.md", "report.png")),
    "resume": (("--generations", "3"), None),  # a resume writes the run: only outside is checked
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "run"
    evolve("cartpole", generations=2, popsize=16, overrides=[*SMALL, "solved_return=100"], out=out)
    (out / "target.json").write_text(json.dumps({"generations": 2}))
    return out


FUZZ_ENV = """
import gymnax
import fuzzside
from fuzzpkg import core


def make(**kwargs):
    return gymnax.make(core.ENV)
"""
FUZZ_MODULES = ("fuzz_env", "fuzzside", "fuzzpkg", "fuzzpkg.core")
HELPERS = ("fuzzside.py", "fuzzpkg/__init__.py", "fuzzpkg/core.py")


@pytest.fixture(scope="module")
def pristine_code(tmp_path_factory):
    """``(run, project)``: a run of the user's module ``fuzz_env``, which imports a package of
    helpers (``fuzzpkg``) and a module (``fuzzside``) beside it."""
    project = tmp_path_factory.mktemp("fuzz-project")
    (project / "fuzz_env.py").write_text(FUZZ_ENV)
    (project / "fuzzside.py").write_text("X = 1\n")
    (project / "fuzzpkg").mkdir()
    (project / "fuzzpkg" / "__init__.py").write_text('"""Helpers."""\n')
    (project / "fuzzpkg" / "core.py").write_text('ENV = "CartPole-v1"\n')
    task = project / "fuzz.toml"
    task.write_text('env = "fuzz_env:make"\nepisode_length = 16\ntest_episodes = 4\n')
    out = tmp_path_factory.mktemp("fuzz-code") / "run"
    with contextlib.chdir(project):
        evolve("fuzz.toml", generations=2, popsize=8, overrides=[*SMALL, "solved_return=100"],
               out=out)  # fmt: skip
    fresh_process(*FUZZ_MODULES, folders=(project,))
    return out, project


def leaf_paths(value, prefix=()):
    """Every path to a value inside a JSON document (the document itself included)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += leaf_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += leaf_paths(item, (*prefix, i))
    return found


def replaced(document, path, value):
    """``document`` with the value at ``path`` replaced (or deleted, for ``value`` DELETE)."""
    if not path:
        return value
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if value == "DELETE":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return document


def dumped(document) -> str:
    text = json.dumps(document)
    return text.replace(json.dumps(DEEP), "[" * 3000 + "]" * 3000)


CODE_KINDS = ("helper", "pyc")  # mutations of a run's code: on the run of fuzz_env
KINDS = ("json", "metrics", "binary", "link", "hardlink", "delete", "control", *CODE_KINDS)
CONTROLS = "\x1b[31mred\x1b[0m\x1b]0;a new title\x07"


def mutate_code(project: Path, marker: Path, kind: str, data) -> str:
    """Code appended to a helper the run recorded, or a .pyc planted beside one, each writing
    ``marker`` when it runs."""
    name = data.draw(st.sampled_from(HELPERS))
    if kind == "pyc":
        plant_pyc(project / name, marker)
        return f"{name}: a .pyc planted in its __pycache__"
    with (project / name).open("a") as handle:
        handle.write(f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    return f"{name}: code appended"


def mutate_text(run: Path, data) -> str:
    """Control characters appended to a string, or to a key, of a run's JSON file."""
    name = data.draw(st.sampled_from([runs.CONFIG, runs.METRICS]))
    text = (run / name).read_text()
    lines = text.splitlines() if name == runs.METRICS else [text]  # as mutate() reads them
    line = data.draw(st.integers(0, len(lines) - 1))
    document = json.loads(lines[line])
    strings = [p for p in leaf_paths(document) if p and isinstance(_at(document, p), str)]
    keys = [p for p in leaf_paths(document) if p and isinstance(p[-1], str)]
    if name == runs.CONFIG and data.draw(st.booleans()):
        strings = keys = [("task_name",)]  # what a report's table shows
    path = data.draw(st.sampled_from(strings + keys))
    parent = _at(document, path[:-1])
    if path in strings and data.draw(st.booleans()):
        parent[path[-1]] += CONTROLS
        what = "value"
    else:
        parent[path[-1] + CONTROLS] = parent.pop(path[-1])
        what = "key"
    lines[line] = json.dumps(document)
    (run / name).write_text("\n".join(lines) + "\n")
    return f"{name} line {line}: control characters in the {what} at {list(path)}"


def _at(document, path):
    for part in path:
        document = document[part]
    return document


def mutate(run: Path, outside: Path, data, kind: str) -> str:
    """Apply one drawn mutation of ``kind`` to ``run``; a description for the failure message."""
    if kind == "control":
        return mutate_text(run, data)
    if kind in ("json", "metrics"):
        name = runs.METRICS if kind == "metrics" else data.draw(st.sampled_from(JSON_FILES))
        path = run / name
        # metrics.jsonl holds a document a line; the other files one document each.
        lines = path.read_text().splitlines() if kind == "metrics" else [path.read_text()]
        line = data.draw(st.integers(0, len(lines) - 1))
        document = json.loads(lines[line])
        where = data.draw(st.sampled_from(leaf_paths(document)))
        value = data.draw(st.sampled_from([*VALUES, *(("DELETE",) if where else ())]))
        lines[line] = dumped(replaced(document, where, value))
        path.write_text("\n".join(lines) + "\n")
        return f"{name} line {line}: {list(where)} = {value!r}"
    name = data.draw(st.sampled_from([*JSON_FILES, runs.METRICS, *BINARY_FILES]))
    path = run / name
    if kind == "binary":
        size = path.stat().st_size
        cut = data.draw(st.integers(0, max(0, size - 1)))
        flip = data.draw(st.booleans())
        content = bytearray(path.read_bytes()[:cut] if not flip else path.read_bytes())
        if flip and content:
            content[cut % len(content)] ^= 0xFF
        path.write_bytes(bytes(content))
        return f"{name}: {'byte flipped' if flip else 'cut'} at {cut}"
    if kind == "hardlink":  # the run's own bytes (or another file's) under a second name outside
        shared = outside / f"shared-{name}"
        own = data.draw(st.booleans()) and path.is_file()
        shared.write_bytes(path.read_bytes() if own else b"not esjax's")
        path.unlink(missing_ok=True)
        os.link(shared, path)
        return f"{name} hard-linked to {'a copy of it' if own else 'another file'} outside"
    path.unlink(missing_ok=True)
    if kind == "link":
        to = data.draw(st.sampled_from(LINKS))
        target = {"outside file": outside / "file.txt", "outside folder": outside / "folder",
                  "/dev/zero": Path("/dev/zero"), "nowhere": outside / "missing"}[to]  # fmt: skip
        path.symlink_to(target)
        return f"{name} -> {to}"
    return f"{name} deleted"


def fingerprint(folder: Path) -> dict[str, str]:
    """Each entry's kind and content digest, links and folders as such, without following."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = "link:" + os.readlink(path)
        elif path.is_dir():
            found[key] = "folder"
        else:
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@settings(
    max_examples=48,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure's time stays bounded
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_every_command_on_a_mutated_run_exits_0_or_2_and_touches_nothing_else(
    pristine, pristine_code, data
):
    trust._GRANTED.clear()
    kind = data.draw(st.sampled_from(KINDS))
    code_run = kind in CODE_KINDS or (kind == "control" and data.draw(st.booleans()))
    project = pristine_code[1]
    saved = {name: (project / name).read_text() for name in HELPERS}
    with tempfile.TemporaryDirectory(prefix="esjax-fuzz-") as root:
        root = Path(root)
        outside, here = root / "outside", root / "cwd"
        (outside / "folder").mkdir(parents=True)
        (outside / "file.txt").write_text("not esjax's")
        (outside / "folder" / "inner.txt").write_text("not esjax's either")
        here.mkdir()
        run = root / "run"
        shutil.copytree(pristine_code[0] if code_run else pristine, run, symlinks=True)
        previous = Path.cwd()
        try:
            if kind in CODE_KINDS:
                what = mutate_code(project, outside / "ran", kind, data)
            else:
                what = mutate(run, outside, data, kind)
            untouched = fingerprint(outside)
            os.chdir(here)  # nothing may land in the working directory either
            for command, (extra, writes) in COMMANDS.items():
                if code_run:  # its code is imported again, as by a new process
                    fresh_process(*FUZZ_MODULES, folders=(project,))
                before = fingerprint(run)
                args = (["evolve", "--resume", "--out", run] if command == "resume"
                        else [command, run])  # fmt: skip
                with contextlib.suppress(KeyboardInterrupt):
                    code, output = cli(*args, *extra)
                assert code in (0, 2), f"{what}: esjax {command} exited {code}:\n{output}"
                assert "Traceback" not in output, f"{what}: esjax {command}:\n{output}"
                assert "\x1b" not in output and "\x07" not in output, f"{what}: {output!r}"
                assert fingerprint(outside) == untouched, f"{what}: esjax {command} wrote outside"
                assert not any(here.iterdir()), f"{what}: esjax {command} wrote in the cwd"
                if kind == "helper" and command == "eval":
                    assert code == 2, f"{what}: esjax eval ran a changed helper:\n{output}"
                if writes is not None:
                    after = fingerprint(run)
                    changed = {k for k in before.keys() | after.keys()
                               if before.get(k) != after.get(k)}  # fmt: skip
                    unexpected = {k for k in changed if Path(k).name not in writes}
                    unexpected -= {k for k in unexpected if k.endswith(".tmp")}
                    assert not unexpected, f"{what}: esjax {command} changed {unexpected}"
        finally:
            os.chdir(previous)
            for name, text in saved.items():
                (project / name).write_text(text)
            for cache in project.rglob("__pycache__"):
                shutil.rmtree(cache)
            if code_run:
                fresh_process(*FUZZ_MODULES, folders=(project,))
