"""The module list, made from the modules' own docstrings: one section per layer of esjax/_src/,
each module with the first paragraph of its docstring.

It is what ``docs/api/index.md`` shows: ``mkdocs build`` runs this file as a hook
(``hooks:`` in mkdocs.yml) and puts the list where the page holds :data:`MARKER`. Nothing is
kept by hand, so a module added, moved or described anew is listed as its docstring says.
``tests/test_layout.py`` checks that every module has such a docstring. Reads the source with
``ast``: no import, so no JAX. ::

    python tools/module_list.py          # print the list as Markdown
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "esjax" / "_src"
# The layers in the order data flows (tests/test_layout.py holds the same order) and their pages.
LAYERS = ["specs", "envs", "policies", "strategies", "rollout", "engine", "run", "analysis", "cli"]
MARKER = "<!-- the module list: tools/module_list.py -->"


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    return " ".join(docstring(path).split("\n\n", 1)[0].split())


def folder_summary(folder: Path) -> tuple[str, str]:
    """``(title, what it holds)``: the first two paragraphs of a folder's ``__init__``."""
    paragraphs = [" ".join(p.split()) for p in docstring(folder / "__init__.py").split("\n\n")]
    return paragraphs[0].rstrip("."), paragraphs[1] if len(paragraphs) > 1 else ""


def modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def module_list(source: Path = SOURCE) -> str:
    """The list as Markdown: a heading per layer, a row per module."""
    lines = []
    for rank, layer in enumerate(LAYERS, 1):
        title, holds = folder_summary(source / layer)
        lines += [f"## {rank}. {title}: `esjax/_src/{layer}/`", "", holds, ""]
        lines += [f"[Its API page]({layer}.md).", "", "| module | what it is |", "|---|---|"]
        for path in modules(source / layer):
            text = summary(path).replace("|", "\\|")
            lines.append(f"| [`{path.stem}`]({layer}.md#esjax._src.{layer}.{path.stem}) | {text} |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, **_) -> str:
    """mkdocs' hook: the list in place of the page's marker."""
    return markdown.replace(MARKER, module_list()) if MARKER in markdown else markdown


if __name__ == "__main__":
    print(module_list())
