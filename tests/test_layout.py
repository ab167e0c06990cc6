"""esjax's layers: specs (no JAX) → pure JAX → host → interface, and nothing imports upwards.

esjax's own imports are read from the source with ``ast``, those inside functions included
(an import in a function is still a dependency, only a later one), so a cycle cannot hide
behind a deferred import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from esjax.suites import package_modules  # imports no JAX and no suite

PACKAGE = Path(__file__).resolve().parents[1] / "esjax"

# Every module's layer; a new module must be placed here.
LAYERS = {
    "specs": ["config", "policy_kinds", "presets", "popsize_rule", "version", "stats", "digits"],
    "pure JAX": [
        "suites", "suite_base", *package_modules(), "envs", "episode", "policies", "mirror",
        "rollout", "sharding",
        "distributed", "algorithms",
        "strategies", "cma", "population", "lazy_openes", "draw", "fitness", "engine", "baselines",
        "tasks",
        "preflight",
    ],
    "host": [
        "files", "memory", "cache", "programs", "runs", "trust", "lifecycle", "loop", "training",
        "saved", "sweeps", "meta", "plotting",
        "render", "trackers", "evaluation", "reporting",
    ],
    "interface": [
        "progress", "terminal", "tables", "commands", "launch", "options", "cli", "__main__",
        "__init__",
    ],
}  # fmt: skip
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}
# Imports of esjax modules inside functions (each names its reason on its line): the command
# line's two steps that keep --help free of JAX, and the evosax-importing modules that would
# start JAX's backend before use_cpu_cores. The ceiling only goes down.
LAZY_CEILING = 5


def imports() -> dict[str, list[tuple[str, bool]]]:
    """``{module: [(imported esjax module, inside a function?), ...]}``."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        top = _top_level(tree)
        edges = found.setdefault(path.stem, [])
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("esjax"):
                if node.module == "esjax":  # ``from esjax import runs``: the submodules named
                    names = [a.name for a in node.names if (PACKAGE / f"{a.name}.py").is_file()]
                    names = names or ["__init__"]
                else:
                    names = [node.module.split(".")[1]]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("esjax.")]
            else:
                continue
            edges.extend((name, id(node) not in top) for name in names if name != path.stem)
    return found


def test_every_module_has_a_layer():
    assert sorted(RANK) == sorted(imports())


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} ({_layer(module)}) imports {name} ({_layer(name)})"
        for module, edges in imports().items()
        for name, _ in edges
        if RANK[name] > RANK[module]
    ]
    assert not upward, upward


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
    for path in sorted(PACKAGE.glob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        top = _top_level(tree)
        lines = source.splitlines()
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            inside = id(node) not in top and any(n.startswith("esjax") for n in names)
            if inside and "#" not in lines[node.end_lineno - 1]:
                silent.append(f"{path.name}:{node.lineno}")
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
IO_ALLOWED = {("config", "open"), ("presets", "iterdir")}


def io_below_the_host() -> list[str]:
    """Every thread, process or file call in a module below the host layer, by ``ast``."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        if RANK.get(path.stem, 0) >= RANK["runs"]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.stem} imports {n}" for n in names if n.split(".")[0] in IO_MODULES]
            call = _io_call(node) if isinstance(node, ast.Call) else ""
            if call and (path.stem, call) not in IO_ALLOWED:
                found.append(f"{path.stem}:{node.lineno} calls {call}")
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
        "import esjax, esjax.training, esjax.sweeps, esjax.lifecycle, esjax.loop\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge._backends, 'a JAX backend started on import'\n"
        "assert 'evosax' not in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", "import sys\n" + code], check=True, cwd=PACKAGE.parent, timeout=300
    )


def test_the_checks_can_fail():
    """A cycle and an upward edge in a made-up graph are found; file calls are seen."""
    assert _io_call(ast.parse("Path(p).read_text()").body[0].value) == "read_text"
    assert _io_call(ast.parse("folder.iterdir()").body[0].value) == "iterdir"
    assert _io_call(ast.parse("os.replace(a, b)").body[0].value) == "replace"
    assert _io_call(ast.parse("name.replace('a', 'b')").body[0].value) == ""
    assert [sorted(c) for c in _strongly_connected({"a": {"b"}, "b": {"a"}}) if len(c) > 1] == [
        ["a", "b"]
    ]
    with pytest.raises(AssertionError):
        assert RANK["cli"] <= RANK["config"]


def _top_level(tree: ast.Module) -> set[int]:
    """Statements run at import: the module's own, and those under ``if TYPE_CHECKING:`` (an
    import for type hints only, which is still an edge of the graph but never a deferred one)."""
    top = {id(node) for node in tree.body}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            top |= {id(inner) for inner in node.body}
    return top


def _layer(module: str) -> str:
    return list(LAYERS)[RANK[module]]


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


def test_the_api_reference_lists_every_module():
    """docs/api/ has one page per layer; a module missing from it has no reference at all."""
    pages = (PACKAGE.parent / "docs" / "api").glob("*.md")
    listed = {line.split()[1] for page in pages for line in page.read_text().splitlines()
              if line.startswith("::: esjax.")}  # fmt: skip
    expected = {f"esjax.{m}" for m in RANK if m not in ("__init__", "__main__")}
    assert listed == expected, sorted(listed ^ expected)
