"""A user's code named by a task (``module:factory``, ``file.py:factory``) made into a factory.

A task may name its env, or its policy kind, as code: a module (``"pkg.envs:make"``) or a file
(``"path/to/env.py:make"``). This module turns such a name into the object it names, in one of
two ways:

- **Provided bytes.** Inside a run or a sweep the host (:mod:`esjax._src.run.codefiles`) has
  resolved the name to one file, read that file once, checked it against what the run recorded,
  and handed the bytes here with :func:`provide`. The module is then executed from exactly those
  bytes, so what was checked is what runs, and a module name is never looked up on the import
  path: only the packages above a dotted module are imported as Python would, and each must be
  the package that holds the recorded file (checked before it is imported). The module names
  such code runs as are kept (:func:`sealed_source`), so that the host can seal what it imports
  in turn (:mod:`esjax._src.run.imports`).
- **By name**, for an env made outside a run (``make_env("pkg.envs:make")``): a module is
  imported as Python would, then from the working directory (``python -m esjax`` has the working
  directory on the path and the ``esjax`` script does not, so a module beside the user is found
  by both); a file is loaded from where its path points.

Each module is loaded once per process (a second copy of its classes would differ for jit
caches and ``isinstance``), so one process runs one version of a module of a given name. Every
failure, an exception raised while the user's module is imported included, is one
:class:`~esjax._src.specs.config.ConfigError` line naming the code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esjax._src.envs import suites
from esjax._src.specs.config import ConfigError, suggest


@dataclass(frozen=True)
class ProvidedCode:
    """A code name's source resolved to one file, and that file's bytes as they were read."""

    source: str  # what comes before the colon of the code name: a module or a file path
    file: Path  # absolute
    module: str | None  # the module's dotted name; None for a file named by its path
    data: bytes = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def key(self) -> str:
        """What the module is known by in this process: its name, or its file's path."""
        return self.module if self.module is not None else str(self.file)


@dataclass(frozen=True)
class _Loaded:
    module: types.ModuleType
    code: ProvidedCode | None  # None: imported by name, its bytes not seen here


# Sources whose bytes the host has provided, by source; modules loaded, by ProvidedCode.key
# (a file loaded by name: by its resolved path); the module names provided code runs as (and
# the packages above them), by the source they belong to, so that the host can seal what they
# import (:mod:`esjax._src.run.imports`).
_PROVIDED: dict[str, ProvidedCode] = {}
_LOADED: dict[str, _Loaded] = {}
_SEALED: dict[str, str] = {}


def is_file_source(source: str) -> bool:
    """Whether a code name's source is a file path rather than a module name."""
    return source.endswith(".py") or "/" in source or "\\" in source


def provide(code: ProvidedCode) -> None:
    """Make every later load of ``code.source`` execute ``code.data`` (see the module's
    docstring). One line when this process already runs other content under that module."""
    loaded = _LOADED.get(code.key)
    if loaded is not None and loaded.code is not None and loaded.code.sha256 != code.sha256:
        raise ConfigError(
            f"{code.file}: this process already runs other content of it (loaded earlier); "
            "start a new process to run it as it is now"
        )
    existing = sys.modules.get(code.module) if code.module is not None else None
    if existing is not None and loaded is None and not from_file(existing, code.file):
        raise ConfigError(
            f"module {code.module} is already imported in this process from "
            f"{file_of(existing)}, not from {code.file}, which the run names"
        )
    _PROVIDED[code.source] = code


def provided(source: str) -> ProvidedCode | None:
    """The bytes a source runs from in this process: provided, or those it was loaded from."""
    code = _PROVIDED.get(source)
    if code is None:
        return None
    loaded = _LOADED.get(code.key)
    return loaded.code if loaded is not None and loaded.code is not None else code


def sealed_source(module: str) -> str | None:
    """The source whose provided code runs as ``module`` (or imports it as a package above
    itself), or None."""
    return _SEALED.get(module)


def sealed_modules(source: str) -> list[str]:
    """The module names ``source``'s provided code runs as, with the packages above it."""
    return [module for module, owner in _SEALED.items() if owner == source]


def loaded_by_name(module: str) -> types.ModuleType | None:
    """The module ``module`` when it is imported already (by the user, or by name here)."""
    return sys.modules.get(module)


def module_file(module: types.ModuleType) -> Path | None:
    """The source file a module was loaded from, or None (a built-in, a namespace package)."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    if not origin or origin in ("built-in", "frozen"):
        return None
    return Path(origin)


def find_module_file(source: str, name: str) -> Path:
    """The file module ``source`` would be imported from, without running it (its parent
    packages are imported, as Python would); searched in the working directory last when
    nothing else has it. One line when there is none."""
    check_module_name(source, name)
    found = loaded_by_name(source)
    path = module_file(found) if found is not None else _spec_origin(source, name)
    if path is None:
        raise ConfigError(f"{name!r}: module {source} has no source file esjax can read")
    return path


def _spec_origin(source: str, name: str) -> Path | None:
    try:
        if importlib.util.find_spec(source.split(".")[0]) is None:
            with _searching(Path.cwd()):
                spec = importlib.util.find_spec(source)
        else:
            spec = importlib.util.find_spec(source)
    except ModuleNotFoundError as error:
        raise _no_module(name, error.name or source, source) from None
    except Exception as error:  # a parent package raised while it was imported
        raise import_error(name, source, error) from None
    if spec is None:
        raise _no_module(name, source, source)
    return Path(spec.origin) if spec.origin and spec.has_location else None


class _searching:
    """The working directory on ``sys.path`` (last) for a search, then as it was."""

    def __init__(self, folder: Path):
        self.folder = str(folder)
        self.added = False

    def __enter__(self) -> None:
        if self.folder not in sys.path:
            sys.path.append(self.folder)
            self.added = True

    def __exit__(self, *exc: object) -> None:
        if self.added and self.folder in sys.path:
            sys.path.remove(self.folder)


def _no_module(name: str, missing: str, source: str) -> ConfigError:
    return ConfigError(f"{name!r}: no module named {missing!r}{_suite_hint(source)}")


def check_module_name(source: str, name: str) -> None:
    if not all(part.isidentifier() for part in source.split(".")):
        raise ConfigError(f"{name!r}: {source!r} is not a module name (package.module:factory)")


def _suite_hint(source: str) -> str:
    known = list(suites.registered())
    return suggest(source, known) or f"; adapted suites: {', '.join(known)}"


# ---------------------------------------------------------------------------- the factory
def load_factory(source: str, attribute: str, name: str) -> Any:
    """The object ``attribute`` names in module or file ``source`` (``name``: the whole code
    name, for messages): from provided bytes when there are some, else by name."""
    module = _module(source, name)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise ConfigError(
                f"{name!r}: {source} has no attribute {attribute!r}{suggest(part, public)}"
            )
        found = getattr(found, part)
    if not callable(found):
        raise ConfigError(f"{name!r}: {attribute} is a {type(found).__name__}, not a factory")
    return found


def _module(source: str, name: str) -> types.ModuleType:
    code = _PROVIDED.get(source)
    if code is not None:
        return _load_provided(code, name)
    if is_file_source(source):
        return _load_file_by_path(Path(source), name)
    check_module_name(source, name)
    try:
        return _import_module(source)
    except ModuleNotFoundError as error:
        raise ConfigError(
            f"{name!r}: no module named {error.name!r}{_suite_hint(source)}"
        ) from None
    except Exception as error:  # the user's module raised while it was imported
        raise import_error(name, source, error) from None


def _import_module(source: str) -> types.ModuleType:
    """``import source``, searching the working directory last when nothing else has it."""
    try:
        return importlib.import_module(source)
    except ModuleNotFoundError as error:
        top = source.split(".")[0]
        here = str(Path.cwd())
        if error.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        try:
            return importlib.import_module(source)
        except ModuleNotFoundError:
            sys.path.remove(here)  # not there either: leave the search path as it was
            raise


def _load_file_by_path(path: Path, name: str) -> types.ModuleType:
    """A Python file named by its path, loaded once per process (its bytes read by Python)."""
    if not path.is_file():
        raise ConfigError(f"{name!r}: no such file {str(path)!r}")
    resolved = path.resolve()
    loaded = _LOADED.get(str(resolved))
    if loaded is not None:
        return loaded.module
    spec = importlib.util.spec_from_file_location(_file_module_name(resolved), resolved)
    assert spec is not None and spec.loader is not None  # a path to a .py file always has one
    module = _run_module(spec, name, lambda m: spec.loader.exec_module(m))  # type: ignore[union-attr]
    _LOADED[str(resolved)] = _Loaded(module, None)
    return module


def _file_module_name(resolved: Path) -> str:
    """A name of its own in sys.modules: dataclasses and pickling look classes up there."""
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    return f"esjax_user_env_{resolved.stem}_{digest}"


def _load_provided(code: ProvidedCode, name: str) -> types.ModuleType:
    """The module of provided code, executed from its bytes once per process."""
    loaded = _LOADED.get(code.key)
    if loaded is not None:
        return loaded.module
    if code.module is not None and code.module in sys.modules:  # imported before esjax saw it
        existing = sys.modules[code.module]
        if not from_file(existing, code.file):
            raise ConfigError(
                f"{name!r}: module {code.module} is already imported from {file_of(existing)}, "
                f"not from {code.file}"
            )
        _LOADED[code.key] = _Loaded(existing, None)
        return existing
    if code.module is None:
        spec = importlib.util.spec_from_file_location(_file_module_name(code.file), code.file)
    else:
        _SEALED[code.module] = code.source
        _import_parents(code, name)
        package = code.file.name == "__init__.py"
        locations = [str(code.file.parent)] if package else None
        spec = importlib.util.spec_from_file_location(
            code.module, code.file, submodule_search_locations=locations
        )
    assert spec is not None
    _SEALED[spec.name] = code.source
    compiled = _compile(code, name)
    module = _run_module(spec, name, lambda m: exec(compiled, m.__dict__))
    if code.module is not None and "." in code.module:
        parent, _, child = code.module.rpartition(".")
        setattr(sys.modules[parent], child, module)
    _LOADED[code.key] = _Loaded(module, code)
    return module


def _compile(code: ProvidedCode, name: str) -> types.CodeType:
    try:
        return compile(code.data, str(code.file), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise ConfigError(
            f"{name!r}: {code.file} is not valid Python: {first_line(error)}"
        ) from None


def _run_module(spec: Any, name: str, execute: Any) -> types.ModuleType:
    """A module made from ``spec`` and run by ``execute(module)`` in ``sys.modules`` under its
    name; whatever it raises is one line naming the code, and leaves no module behind."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        execute(module)
    except ConfigError:  # the host's seal refused an import (a changed or unrecorded helper)
        sys.modules.pop(spec.name, None)
        raise
    except (Exception, SystemExit) as error:
        sys.modules.pop(spec.name, None)
        raise import_error(name, spec.origin, error) from None
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return module


def _import_parents(code: ProvidedCode, name: str) -> None:
    """Import the packages above a dotted module, each checked, before it runs, to be the
    package folder that holds the recorded file; the folder they sit in goes on ``sys.path``
    (last) when Python finds them nowhere, and so does a top-level module's own folder, so
    that it imports its helpers as it did when it was recorded."""
    assert code.module is not None
    parts = code.module.split(".")
    depth = len(parts) - 1 + (code.file.name == "__init__.py")
    root = code.file.parents[depth]
    if str(root) not in sys.path:
        sys.path.append(str(root))
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        expected = root.joinpath(*parts[:i])
        existing = sys.modules.get(package)
        if existing is not None:
            found = [Path(p) for p in getattr(existing, "__path__", [])]
        else:
            spec = importlib.util.find_spec(package)
            found = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
        if not any(_same_path(path, expected) for path in found):
            shown = ", ".join(map(str, found)) or "nowhere"
            raise ConfigError(
                f"{name!r}: package {package} is found at {shown}, not at {expected}, where "
                "the run's code is"
            )
        if existing is None:
            _SEALED[package] = code.source
            try:
                importlib.import_module(package)
            except ConfigError:  # the host's seal refused it: its own line
                raise
            except Exception as error:
                raise import_error(name, package, error) from None


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def from_file(module: types.ModuleType, file: str | Path) -> bool:
    """Whether ``module`` was loaded from ``file``."""
    found = module_file(module)
    return found is not None and _same_path(found, Path(file))


def file_of(module: types.ModuleType) -> str:
    found = module_file(module)
    return str(found) if found is not None else "no file"


def import_error(name: str, what: object, error: BaseException) -> ConfigError:
    """The one line for user code ``name`` whose import of ``what`` raised ``error``."""
    return ConfigError(f"{name!r}: importing {what} raised {first_line(error)}{extra_hint(error)}")


# Packages a user's code may import that an extra of esjax's installs.
EXTRAS = {"equinox": "equinox"}


def extra_hint(error: BaseException) -> str:
    """``"; pip install 'esjax[EXTRA]'"`` when ``error`` is a package an extra installs (a
    network written in equinox, a suite's package) missing, else ``""``."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    top = (missing or "").split(".")[0]
    extras = {**EXTRAS, **{suite.package: suite.extra for suite in suites.registered().values()}}
    return f"; pip install 'esjax[{extras[top]}]'" if top in extras else ""


def first_line(error: BaseException) -> str:
    """``"TypeError: the message's first line"``: an exception as one line of an error."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
