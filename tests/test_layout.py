"""esjax's layers are its folders, and nothing imports upwards.

A module's layer is the sub-package of ``esjax/_src/`` it sits in (``esjax/_src/run/files.py`` is
in ``run``), ranked in
the order data flows: specs → envs → policies → strategies → rollout → engine → run → analysis
→ cli. ``docs/api/`` has a page per folder rendering every module, and the module list
(docs/api/index.md) is made from the modules' own docstrings, both checked here, so the map is
kept in one place: the tree itself.

esjax's own imports are read from the source with ``ast``, those inside functions included
(an import in a function is still a dependency, only a later one), so a cycle cannot hide
behind a deferred import.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

PUBLIC = Path(__file__).resolve().parents[1] / "esjax"
PACKAGE = PUBLIC / "_src"  # the implementation; PUBLIC's own modules re-export from it
REPO = PUBLIC.parent

# The folders in the order data flows through them; a module's rank is its folder's.
LAYERS = ["specs", "envs", "policies", "strategies", "rollout", "engine", "run", "analysis", "cli"]
# The package's own two modules: its public names and ``python -m esjax``, above everything.
TOP = {"__init__": "cli", "__main__": "cli"}
# From this folder up, modules may read and write files and start threads; below, none does.
HOST = "run"
# Imports of esjax modules inside functions (each names its reason on its line): the command
# line's two steps that keep --help free of JAX, and the evosax-importing modules that would
# start JAX's backend before use_cpu_cores. The ceiling only goes down.
LAZY_CEILING = 5


def modules() -> dict[str, Path]:
    """``{"run.files": path, "run": its __init__, ...}``: every module, by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            found[parts[0]] = path  # a folder's own docstring and re-exports
        else:
            found[".".join(parts)] = path
    return found


def layer(module: str) -> str:
    """The folder a module sits in (the package's own modules: ``TOP``)."""
    return TOP.get(module, module.split(".")[0])


def rank(module: str) -> int:
    return LAYERS.index(layer(module))


def _imported(node: ast.AST, known: dict[str, Path]) -> list[str]:
    """The esjax modules an import statement names, by dotted name."""
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("esjax._src"):
        base = node.module.removeprefix("esjax._src").lstrip(".")
        named = [f"{base}.{a.name}".lstrip(".") for a in node.names]
        found = [name for name in named if name in known]  # ``from esjax._src.run import files``
        return found or [base or "__init__"]
    if isinstance(node, ast.Import):
        prefix = "esjax._src."
        return [a.name.removeprefix(prefix) for a in node.names if a.name.startswith(prefix)]
    return []


def imports() -> dict[str, list[tuple[str, bool]]]:
    """``{module: [(imported esjax module, inside a function?), ...]}``."""
    known = modules()
    found: dict[str, list[tuple[str, bool]]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text())
        top = _top_level(tree)
        edges = found.setdefault(module, [])
        for node in ast.walk(tree):
            names = _imported(node, known)
            edges.extend((name, id(node) not in top) for name in names if name != module)
    return found


def test_every_module_sits_in_a_layers_folder():
    """No module outside the folders (the package's own two apart), and no folder unranked."""
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(LAYERS)
    loose = [m for m in modules() if "." not in m and m not in TOP and m not in LAYERS]
    assert not loose, loose


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} ({layer(module)}) imports {name} ({layer(name)})"
        for module, edges in imports().items()
        for name, _ in edges
        if rank(name) > rank(module)
    ]
    assert not upward, upward


def public_imports() -> list[str]:
    """Every import of esjax's public modules (``esjax``, ``esjax.policies``, ...) from inside
    ``esjax._src``: the public tier sits above every layer and re-exports from them."""
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [
                f"{module} imports {n}"
                for n in names
                if (n == "esjax" or n.startswith("esjax.")) and not n.startswith("esjax._src")
            ]
    return found


def test_the_implementation_never_imports_the_public_tier():
    assert not public_imports()


def test_no_import_cycles_even_through_imports_inside_functions():
    graph = {module: {name for name, _ in edges} for module, edges in imports().items()}
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, cycles


def test_imports_inside_functions_do_not_grow():
    lazy = sum(inside for edges in imports().values() for _, inside in edges)
    assert lazy <= LAZY_CEILING


def test_every_import_inside_a_function_says_why():
    """An esjax import inside a function carries a comment on its line giving the reason."""
    silent = []
    for path in modules().values():
        source = path.read_text()
        tree = ast.parse(source)
        top = _top_level(tree)
        lines = source.splitlines()
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            inside = id(node) not in top and any(n.startswith("esjax") for n in names)
            if inside and "#" not in lines[node.end_lineno - 1]:
                silent.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not silent, silent


# What counts as I/O: threads and processes, and reading or writing files.
IO_MODULES = {"threading", "concurrent", "multiprocessing", "subprocess", "tempfile", "shutil"}
IO_CALLS = {
    "open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "makedirs",
    "unlink", "rmdir", "touch", "iterdir", "rglob", "listdir", "scandir", "fsync",
}  # fmt: skip
# Names that are also ``str``, ``list`` or ``dataclasses`` calls: I/O only on ``os`` or a path.
IO_CALLS_ON_FILES = {"remove", "rename", "replace", "glob"}
# What the layers below the host read: the declarative inputs a spec is made from, a task's
# TOML file (config) and the packaged presets folder (presets).
IO_ALLOWED = {("specs.config", "open"), ("specs.presets", "iterdir")}


def io_below_the_host() -> list[str]:
    """Every thread, process or file call in a module below the host layer, by ``ast``."""
    found = []
    for module, path in modules().items():
        if rank(module) >= LAYERS.index(HOST):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{module} imports {n}" for n in names if n.split(".")[0] in IO_MODULES]
            call = _io_call(node) if isinstance(node, ast.Call) else ""
            if call and (module, call) not in IO_ALLOWED:
                found.append(f"{module}:{node.lineno} calls {call}")
    return found


def _io_call(call: ast.Call) -> str:
    """The file or thread operation ``call`` makes, or ``""``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
    if name in IO_CALLS:
        return name
    on_file = (
        receiver == "os"
        or "file" in receiver
        or ("path" in receiver.lower() and receiver != "sys.path")
    )
    return name if name in IO_CALLS_ON_FILES and on_file else ""


def test_no_files_or_threads_below_the_host_layer():
    """Specs and the pure JAX layer compute; reading and writing files, threads and processes
    belong to the host (runs, caches, kept programs, the memory probe) and above."""
    assert not io_below_the_host()


def test_importing_esjax_leaves_the_jax_backend_to_esjax_distributed():
    """``import esjax`` and its host modules start no JAX backend (evosax would, on import), so
    ``use_cpu_cores`` and ``jax.distributed.initialize`` still work after it."""
    code = (
        "import esjax, esjax._src.run.training, esjax._src.analysis.sweeps\n"
        "import esjax._src.run.lifecycle\n"
        "import esjax._src.run.loop\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge._backends, 'a JAX backend started on import'\n"
        "assert 'evosax' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", "import sys\n" + code], check=True, cwd=PACKAGE.parent, timeout=300
    )


def test_the_checks_can_fail():
    """A cycle and an upward edge in a made-up graph are found; file calls and imports from a
    folder are read."""
    assert _io_call(ast.parse("Path(p).read_text()").body[0].value) == "read_text"
    assert _io_call(ast.parse("folder.iterdir()").body[0].value) == "iterdir"
    assert _io_call(ast.parse("os.replace(a, b)").body[0].value) == "replace"
    assert _io_call(ast.parse("name.replace('a', 'b')").body[0].value) == ""
    assert [sorted(c) for c in _strongly_connected({"a": {"b"}, "b": {"a"}}) if len(c) > 1] == [
        ["a", "b"]
    ]
    with pytest.raises(AssertionError):
        assert rank("cli.main") <= rank("specs.config")
    known = modules()
    folder = ast.parse("from esjax._src.run import files, trust").body[0]
    assert _imported(folder, known) == ["run.files", "run.trust"]
    names = ast.parse("from esjax._src.run.files import open_regular").body[0]
    assert _imported(names, known) == ["run.files"]


def test_the_api_reference_has_a_page_per_folder_listing_its_modules():
    """docs/api/FOLDER.md renders the folder's docstring and every module in it: a module
    missing from it has no reference at all."""
    for folder in LAYERS:
        page = REPO / "docs" / "api" / f"{folder}.md"
        listed = re.findall(r"^::: (esjax\S+)$", page.read_text(), re.MULTILINE)
        expected = [f"esjax._src.{m}" for m in modules() if layer(m) == folder and m not in TOP]
        missing = sorted(set(expected) - set(listed))
        assert not missing, (
            f"docs/api/{folder}.md: add '::: {missing[0]}' (CONTRIBUTING.md's Document step)"
        )
        assert sorted(listed) == sorted(expected), (
            f"docs/api/{folder}.md lists what is not there: {sorted(set(listed) - set(expected))}"
        )


def module_list_tool():
    """``tools/module_list.py``, which makes the module list of docs/api/index.md from the
    modules' docstrings when the site is built."""
    spec = importlib.util.spec_from_file_location("module_list", REPO / "tools" / "module_list.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


# The longest first paragraph a module's docstring may open with: one line of the module list.
SUMMARY_LIMIT = 200


def test_every_module_says_what_it_is_in_the_first_paragraph_of_its_docstring():
    """The module list is each module's first docstring paragraph, so a module without one
    would be listed blank, and one that opens with a whole page would swamp the list."""
    tool = module_list_tool()
    for path in modules().values():
        summary = tool.summary(path)
        where = path.relative_to(REPO)
        assert summary, (
            f"{where}: open the module with a docstring whose first paragraph says what it is "
            "(the recipe's Write step: it is the module's line in docs/api/index.md)"
        )
        assert len(summary) <= SUMMARY_LIMIT, (
            f"{where}: the docstring's first paragraph is {len(summary)} characters; keep it "
            f"to one sentence of at most {SUMMARY_LIMIT} (it is the module's line in the list)"
        )


def test_the_module_list_has_each_folder_and_each_of_its_modules_once():
    tool = module_list_tool()
    assert tool.LAYERS == LAYERS
    listed = re.findall(r"^\| \[`(\w+)`\]\((\w+)\.md", tool.module_list(), re.MULTILINE)
    expected = [(m.split(".")[1], layer(m)) for m in modules() if "." in m]
    assert sorted(listed) == sorted(expected)
    page = (REPO / "docs" / "api" / "index.md").read_text()
    assert tool.MARKER in page, "docs/api/index.md lost the marker the module list replaces"
    assert "tools/module_list.py" in (REPO / "mkdocs.yml").read_text()


def _top_level(tree: ast.Module) -> set[int]:
    """Statements run at import: the module's own, and those under ``if TYPE_CHECKING:`` (an
    import for type hints only, which is still an edge of the graph but never a deferred one)."""
    top = {id(node) for node in tree.body}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            top |= {id(inner) for inner in node.body}
    return top


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively over the import graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components
