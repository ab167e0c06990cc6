"""What a run's code imports from the user's folders, sealed with it and run from checked bytes.

A run records each file its code names (:mod:`esjax._src.run.codefiles`); that file imports
more of the user's code: a package of helpers beside it, a module on the user's own path. Such
a module runs as much as the recorded file does, so it is sealed the same way. While a run's
code is loaded, a finder on ``sys.meta_path`` (:class:`_SealedFinder`) takes every import made
by a sealed module (the importing frame's module: the recorded one, or a helper it imported)
and every import of a package above a recorded module. Modules of the Python installation
(the standard library, site-packages) and of esjax are left to Python; any other module found
is sealed:

- **recorded** when the code is the user's own say-so (a run being made, ``--trust-code``, a
  run sealed before imports were recorded): its file is read once, its SHA-256 kept, and the
  run's ``code.json`` lists it with the file that imported it;
- **checked** when the run recorded it: its file was read and compared with the record
  before anything ran (a change is one line naming the file), and those bytes are what runs,
  from whatever directory esjax is started in; a module such a run did not record is refused
  in one line rather than run.

Either way a sealed module is executed from the bytes that were read: compiled here, never
from a ``__pycache__`` (Python trusts a ``.pyc`` whose header carries the source's size and
time, which anyone who can write the folder can plant). A compiled module without its source
is refused; an extension module is checked by its digest and loaded by Python's own loader.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import site
import sys
import sysconfig
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esjax._src.envs import usercode
from esjax._src.run.files import MIB, read_bytes
from esjax._src.specs.config import ConfigError

# The most a source file may hold before it is refused unread.
SOURCE_LIMIT = 16 * MIB


class CodeChanged(ConfigError):
    """A recorded code file no longer holds what the run was sealed with, or the code imports
    a module the run did not record."""


@dataclass(frozen=True)
class ImportRecord:
    """A module a run's code imported from the user's folders: its file and its digest."""

    module: str
    file: str  # absolute
    sha256: str

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "sha256": self.sha256}


@dataclass
class _Root:
    """A recorded code source and how this process treats what it imports."""

    name: str  # the code name, for messages ('umod:make')
    where: str | None  # the run or sweep that recorded its imports; None: record them now


# Code sources whose imports are sealed, by source; the sealed modules loaded here (what ran),
# the recorded ones checked and waiting to run, and which sealed modules each module imported.
_ROOTS: dict[str, _Root] = {}
_LOADED: dict[str, ImportRecord] = {}
_EXPECTED: dict[str, tuple[ImportRecord, bytes]] = {}
_EXPECTED_BY: dict[str, set[str]] = {}
_IMPORTED_BY: dict[str, set[str]] = {}
_SOURCE_OF: dict[str, str] = {}  # a sealed module -> the source whose code imported it first


# ---------------------------------------------------------------------------- the run's side
def record_imports(source: str, name: str) -> None:
    """Seal what ``source``'s code imports by recording it (the user's say-so); a source this
    process already seals keeps the way it is sealed."""
    _install()
    _ROOTS.setdefault(source, _Root(name, None))


def check_imports(
    source: str, name: str, where: str | None, checked: Mapping[str, tuple[ImportRecord, bytes]]
) -> None:
    """Seal what ``source``'s code imports by the records ``where`` holds, ``checked``: each
    module's record with the bytes read and compared with it, which are what runs; any other
    module is refused (``where`` None: recorded, the user having taken the code as it is)."""
    _install()
    for module, (record, data) in checked.items():
        ran = _LOADED.get(module) or _EXPECTED.get(module, (None,))[0]
        if ran is not None and (ran.file, ran.sha256) != (record.file, record.sha256):
            raise ConfigError(
                f"{record.file}: this process already runs other content of it (loaded "
                "earlier); start a new process to run it as it is now"
            )
        existing = sys.modules.get(module)
        if ran is None and existing is not None and not usercode.from_file(existing, record.file):
            raise ConfigError(
                f"module {module} is already imported in this process from "
                f"{usercode.file_of(existing)}, not from {record.file}, which {where} recorded"
            )
        _EXPECTED[module] = (record, data)
    _EXPECTED_BY.setdefault(source, set()).update(checked)
    _ROOTS[source] = _Root(name, where)  # the latest check decides


def recorded(source: str) -> tuple[ImportRecord, ...]:
    """The modules ``source``'s code imported, as they run (and those its run recorded that
    have not been imported here yet), by name: what its record lists."""
    found = {m: _EXPECTED[m][0] for m in _EXPECTED_BY.get(source, ()) if m in _EXPECTED}
    for module in _reached_from(usercode.sealed_modules(source)):
        found[module] = _LOADED[module]
    return tuple(found[m] for m in sorted(found))


def digest(source: str) -> str | None:
    """One digest of what :func:`recorded` lists (None when nothing), for keeping programs."""
    records = recorded(source)
    if not records:
        return None
    text = "\n".join(f"{r.module} {r.file} {r.sha256}" for r in records)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reached_from(starts: Iterable[str]) -> list[str]:
    """The sealed modules loaded here that ``starts`` import, directly or through each other:
    by the imports the finder saw, and by what each module's namespace holds (a module shared
    with code loaded earlier is imported from ``sys.modules``, which no finder sees)."""
    seen: set[str] = set()
    frontier = list(starts)
    while frontier:
        name = frontier.pop()
        if name in seen:
            continue
        seen.add(name)
        frontier += _IMPORTED_BY.get(name, ())
        frontier += _held_by(sys.modules.get(name))
    return sorted(m for m in seen if m in _LOADED)


def _held_by(module: types.ModuleType | None) -> list[str]:
    """The sealed modules ``module``'s namespace holds, or holds objects of."""
    if module is None:
        return []
    held = []
    for value in list(vars(module).values()):
        name = value.__name__ if isinstance(value, types.ModuleType) else None
        name = name or getattr(value, "__module__", None)
        if isinstance(name, str) and name in _LOADED:
            held.append(name)
    return held


# ---------------------------------------------------------------------------- the finder
class _SealedFinder:
    """The ``sys.meta_path`` finder of the module's docstring; first on the path, so that no
    other finder hands Python a cached ``.pyc`` for sealed code."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not _ROOTS:
            return None
        importer = _importer()
        source = usercode.sealed_source(fullname) or _source_of(importer)
        if source is None or source not in _ROOTS:
            return None
        spec = _sealed_spec(fullname, path, target, _ROOTS[source])
        if spec is not None:
            _SOURCE_OF.setdefault(fullname, source)
            _IMPORTED_BY.setdefault(importer or "", set()).add(fullname)
        return spec


def _install() -> None:
    if not any(finder is _SealedFinder for finder in sys.meta_path):
        sys.meta_path.insert(0, _SealedFinder)  # type: ignore[arg-type]


def _source_of(module: str | None) -> str | None:
    if module is None:
        return None
    return usercode.sealed_source(module) or _SOURCE_OF.get(module)


_IMPORT_MACHINERY = (str(Path(importlib.__file__).parent) + "/", "<frozen importlib", __file__)


def _importer() -> str | None:
    """The module whose code made the import being found: the first frame outside the import
    machinery (and this module)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else None


def _sealed_spec(
    fullname: str, path: Any, target: Any, root: _Root
) -> importlib.machinery.ModuleSpec | None:
    """The spec of sealed module ``fullname`` (None: Python's own search decides)."""
    expected = _EXPECTED.get(fullname)
    if expected is not None:
        return _checked_spec(*expected)
    found = _python_spec(fullname, path, target)
    if found is None or not _users(found):
        return None
    file = Path(str(found.origin)).resolve()
    if root.where is not None:
        raise CodeChanged(
            f"{file}: {root.name!r} imports it (as {fullname}), but {root.where} did not record "
            "it when it was sealed; read it, then pass --trust-code to run it"
        )
    if not file.name.endswith(tuple(importlib.machinery.SOURCE_SUFFIXES)):
        if file.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            _LOADED[fullname] = ImportRecord(fullname, str(file), sha256_of(_read(file)))
            return found
        raise ConfigError(
            f"{file}: {root.name!r} imports a compiled module without its source; esjax runs "
            "only Python source it has read (.py)"
        )
    data = _read(file)
    record = ImportRecord(fullname, str(file), sha256_of(data))
    return _checked_spec(record, data)


def _checked_spec(record: ImportRecord, data: bytes) -> importlib.machinery.ModuleSpec:
    file = Path(record.file)
    _LOADED[record.module] = record
    if file.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        spec = importlib.util.spec_from_file_location(record.module, file)
    else:
        package = [str(file.parent)] if file.name == "__init__.py" else None
        spec = importlib.util.spec_from_file_location(
            record.module, file, loader=_CheckedSource(record, data),
            submodule_search_locations=package,
        )  # fmt: skip
    assert spec is not None  # a file location always gives one
    spec.cached = None  # no __pycache__ path: the bytes were read here
    return spec


def _python_spec(fullname: str, path: Any, target: Any) -> importlib.machinery.ModuleSpec | None:
    """What the other finders on ``sys.meta_path`` give for ``fullname``."""
    for finder in sys.meta_path:
        if finder is _SealedFinder or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _users(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether a module comes from a file of the user's (not the installation's, not esjax's);
    a namespace package holds no code of its own."""
    if not spec.origin or not spec.has_location:
        return False
    file = Path(spec.origin).resolve()
    return not any(file.is_relative_to(folder) for folder in _installed_folders())


@functools.cache
def _installed_folders() -> list[Path]:
    paths = sysconfig.get_paths()
    folders = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += [*site.getsitepackages(), site.getusersitepackages()]
    folders.append(str(Path(usercode.__file__).resolve().parents[2]))  # the esjax package
    return [Path(folder).resolve() for folder in folders if folder]


def _read(file: Path) -> bytes:
    try:
        return read_bytes(file, SOURCE_LIMIT)
    except OSError as error:
        raise ConfigError(f"{file}: cannot read it ({error.strerror or error})") from None


class _CheckedSource(importlib.abc.Loader):
    """Executes a sealed module from the bytes that were read and checked: compiled here."""

    def __init__(self, record: ImportRecord, data: bytes):
        self.record = record
        self.data = data

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # Python's default module

    def exec_module(self, module: types.ModuleType) -> None:
        code = compile(self.data, self.record.file, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_source(self, fullname: str) -> str:
        """The checked source, for tracebacks and ``inspect``."""
        return self.data.decode("utf-8", errors="replace")
