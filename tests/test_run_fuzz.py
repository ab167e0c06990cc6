"""Issue 57's fuzz test: a real run directory with one file mutated at a time, opened by every
command that reads a run.

Mutations: a JSON field (or a metrics row's field) set to another type, a huge or negative
number, NaN, a deep nesting, or deleted; a file deleted, truncated, or replaced by a link to a
file or folder outside the run, to ``/dev/zero`` or to nothing, or by a hard link to a file
outside the run (which ``O_NOFOLLOW`` cannot see: holding esjax's bytes, or another file's).
For each, every command must exit
0 or 2 without a traceback, touch nothing outside the run, and leave the run's own files as
they were unless the command writes them. Examples are derandomized and bounded, so the test
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
from test_run_as_data import SMALL, cli

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


def mutate(run: Path, outside: Path, data) -> str:
    """Apply one drawn mutation to ``run``; a description for the failure message."""
    kind = data.draw(st.sampled_from(["json", "metrics", "binary", "link", "hardlink", "delete"]))
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
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure's time stays bounded
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_every_command_on_a_mutated_run_exits_0_or_2_and_touches_nothing_else(pristine, data):
    trust._GRANTED.clear()
    with tempfile.TemporaryDirectory(prefix="esjax-fuzz-") as root:
        root = Path(root)
        outside, here = root / "outside", root / "cwd"
        (outside / "folder").mkdir(parents=True)
        (outside / "file.txt").write_text("not esjax's")
        (outside / "folder" / "inner.txt").write_text("not esjax's either")
        here.mkdir()
        run = root / "run"
        shutil.copytree(pristine, run, symlinks=True)
        what = mutate(run, outside, data)
        untouched = fingerprint(outside)
        previous = Path.cwd()
        os.chdir(here)  # nothing may land in the working directory either
        try:
            for command, (extra, writes) in COMMANDS.items():
                before = fingerprint(run)
                args = (["evolve", "--resume", "--out", run] if command == "resume"
                        else [command, run])  # fmt: skip
                with contextlib.suppress(KeyboardInterrupt):
                    code, output = cli(*args, *extra)
                assert code in (0, 2), f"{what}: esjax {command} exited {code}:\n{output}"
                assert "Traceback" not in output, f"{what}: esjax {command}:\n{output}"
                assert fingerprint(outside) == untouched, f"{what}: esjax {command} wrote outside"
                assert not any(here.iterdir()), f"{what}: esjax {command} wrote in the cwd"
                if writes is not None:
                    after = fingerprint(run)
                    changed = {k for k in before.keys() | after.keys()
                               if before.get(k) != after.get(k)}  # fmt: skip
                    unexpected = {k for k in changed if Path(k).name not in writes}
                    unexpected -= {k for k in unexpected if k.endswith(".tmp")}
                    assert not unexpected, f"{what}: esjax {command} changed {unexpected}"
        finally:
            os.chdir(previous)
