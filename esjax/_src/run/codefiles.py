"""The code a run or sweep names, pinned to files: what was recorded is what runs.

A task names code as ``module:factory`` or ``file.py:factory`` (an env, or a policy kind).
When esjax creates a run or a sweep it records, for each such code's source, the file it
resolved to (a module found through the working directory included), a SHA-256 of that file,
one of every ``.py`` file beside it (an env's helpers: what
:func:`esjax._src.run.cache.code_digest` keys kept programs by), and each module the code
imported from the user's folders while it was loaded and built, with its file and digest
(:mod:`esjax._src.run.imports`: a package of helpers beside it, anything on the user's own
path). A run keeps its records in ``code.json``, a sweep in its spec; the trust seal covers
them (:mod:`esjax._src.run.trust`), so a copied directory cannot forge them. Records made
before imports were recorded have none, and read back as they did.

Opening a sealed run uses the records alone. Each recorded file, imported modules included, is
read once, checked against its digests, and executed from those same bytes
(:func:`esjax._src.envs.usercode.provide`, :mod:`esjax._src.run.imports`), never from a
``__pycache__``; a module name is never looked up from the working directory, so the run
works, and runs the same code, from any directory. A file that no longer matches is refused in
one line naming it; ``--trust-code`` takes its new content, and a resume then records it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esjax._src.envs import usercode
from esjax._src.envs.suites import names_code
from esjax._src.envs.usercode import ProvidedCode
from esjax._src.run import imports
from esjax._src.run.files import KIB, MIB, atomic_write, read_bytes, read_json
from esjax._src.run.imports import SOURCE_LIMIT, CodeChanged, ImportRecord
from esjax._src.specs import policy_kinds
from esjax._src.specs.config import ConfigError, TaskConfig

CODE = "code.json"
_FORMAT = "esjax-code"
# The most a record may hold before it is refused unread; the most code sources a run names,
# and modules one source's code imports from the user's folders.
RECORDS_LIMIT = 4 * MIB
_MAX_RECORDS = 64
MAX_IMPORTS = 4096
_HEX = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"file", "module", "sha256", "folder_sha256"}


@dataclass(frozen=True)
class CodeRecord:
    """One code source as recorded: its file, its module name, two digests, and the modules
    its code imported from the user's folders.

    A module with no file behind it (``__main__`` in a notebook or ``python -c``) is recorded
    by its name alone, without a file or digests: it runs only where such a module is already
    loaded (the process that made the run), never imported by its name."""

    file: str | None  # absolute; None for a module that exists only in memory
    module: str | None  # the dotted module name; None for a file named by its path
    sha256: str | None  # of the file's bytes
    folder_sha256: str | None  # of every .py file beside it, as code_digest reads them
    # By module name; None: recorded before esjax recorded imports (nothing is checked).
    imports: tuple[ImportRecord, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "file": self.file,
            "module": self.module,
            "sha256": self.sha256,
            "folder_sha256": self.folder_sha256,
        }
        if self.imports is not None:  # absent from a record made before: its seal still holds
            fields["imports"] = {record.module: record.to_json() for record in self.imports}
        return fields  # fmt: skip

    @classmethod
    def from_json(cls, value: object, where: str) -> CodeRecord:
        """A record read as data: every field of its kind, or one line naming it."""
        if not isinstance(value, dict) or set(value) - {"imports"} != _FIELDS:
            raise ConfigError(f"{where}: not a code record")
        found = _imports_from_json(value["imports"], where) if "imports" in value else None
        file, module = value["file"], value["module"]
        digests = (value["sha256"], value["folder_sha256"])
        if module is not None and (
            not isinstance(module, str) or not all(p.isidentifier() for p in module.split("."))
        ):
            raise ConfigError(f"{where}: module is not a module name")
        if file is None:
            if module is None or digests != (None, None) or found is not None:
                raise ConfigError(f"{where}: a record without a file names a module alone")
            return cls(None, module, None, None)
        _check_file(file, where)
        if not all(isinstance(d, str) and _HEX.fullmatch(d) for d in digests):
            raise ConfigError(f"{where}: sha256 and folder_sha256 are not SHA-256 digests")
        return cls(file, module, *digests, imports=found)


def _check_file(file: object, where: str) -> None:
    if not isinstance(file, str) or not os.path.isabs(file) or "\0" in file:
        raise ConfigError(f"{where}: file is not an absolute path")


def _imports_from_json(value: object, where: str) -> tuple[ImportRecord, ...]:
    """A record's imports read as data: module names, each with an absolute file and digest."""
    where = f"{where}: imports"
    if not isinstance(value, dict) or len(value) > MAX_IMPORTS:
        raise ConfigError(f"{where}: not a table of imported modules")
    found = []
    for module, entry in value.items():
        if not isinstance(module, str) or not all(p.isidentifier() for p in module.split(".")):
            raise ConfigError(f"{where}: {module!r:.60} is not a module name")
        if not isinstance(entry, dict) or set(entry) != {"file", "sha256"}:
            raise ConfigError(f"{where}: {module}: not a file and its digest")
        _check_file(entry["file"], f"{where}: {module}")
        if not isinstance(entry["sha256"], str) or not _HEX.fullmatch(entry["sha256"]):
            raise ConfigError(f"{where}: {module}: sha256 is not a SHA-256 digest")
        found.append(ImportRecord(module, entry["file"], entry["sha256"]))
    return tuple(sorted(found, key=lambda record: record.module))


Records = dict[str, CodeRecord]  # by source: what precedes the colon of a code name


def code_sources(tasks: Iterable[TaskConfig]) -> dict[str, str]:
    """``{source: code name}`` for the code ``tasks`` name (env and policy kind)."""
    found: dict[str, str] = {}
    for task in tasks:
        if isinstance(task.env, str) and names_code(task.env):
            found.setdefault(task.env.rpartition(":")[0], task.env)
        if policy_kinds.names_code(task.policy.kind):
            found.setdefault(task.policy.kind.rpartition(":")[0], task.policy.kind)
    return found


# ---------------------------------------------------------------------------- recording
def capture(tasks: Iterable[TaskConfig]) -> Records:
    """Resolve the code ``tasks`` name as it is named (the user's own say-so: a module as
    Python would find it, then in the working directory), read each file once and make those
    bytes what runs; their records. Code this process already runs is recorded as it runs."""
    return {source: _capture_one(source, name) for source, name in code_sources(tasks).items()}


def _capture_one(source: str, name: str) -> CodeRecord:
    """The record of ``source`` as it runs here: provided, with what it imports recorded as it
    is imported (the user's say-so); nothing of it runs here (the host seals a run again once
    its code was built: :func:`esjax._src.run.trust.complete_records`)."""
    code = usercode.provided(source) or _read_named(source, name)
    if code is None:
        return CodeRecord(None, source, None, None)
    usercode.provide(code)
    imports.record_imports(source, name)
    return record_of(code)


def _read_named(source: str, name: str) -> ProvidedCode | None:
    """The code ``source`` names, read once; None for a module already loaded that has no
    file (``__main__`` in a notebook), which runs as it is."""
    if usercode.is_file_source(source):
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{name!r}: no such file {source!r}")
        file, module = path.resolve(), None
    else:
        loaded = usercode.loaded_by_name(source)
        if loaded is not None and usercode.module_file(loaded) is None:
            return None
        file, module = usercode.find_module_file(source, name).resolve(), source
    if file.suffix != ".py":
        raise ConfigError(f"{name!r}: {file} is not a Python source file (.py) esjax can record")
    return ProvidedCode(source, file, module, _read_source(file, name))


def _read_source(file: Path, name: str) -> bytes:
    """``file``'s bytes, read once, bounded; one line naming ``name`` when they cannot be."""
    try:
        return read_bytes(file, SOURCE_LIMIT)
    except FileNotFoundError:
        raise ConfigError(f"{name!r}: {file}: no such file") from None
    except OSError as error:
        raise ConfigError(f"{name!r}: {file}: cannot read it ({error.strerror})") from None


def record_of(code: ProvidedCode) -> CodeRecord:
    """The record of code about to run: its file, module and the digests of its bytes and
    of the ``.py`` files beside it (the file itself counted as ``code.data``), and the modules
    it has imported from the user's folders so far."""
    folder = folder_digest(code.file, code.data)
    return CodeRecord(str(code.file), code.module, code.sha256, folder,
                      imports=imports.recorded(code.source))  # fmt: skip


def current_records(tasks: Iterable[TaskConfig]) -> Records:
    """The records of the code ``tasks`` name as it runs in this process now (provided code
    only; nothing is read or loaded): what a run's records should hold once its code was built."""
    found: Records = {}
    for source in code_sources(tasks):
        code = usercode.provided(source)
        if code is not None:
            found[source] = record_of(code)
    return found


def folder_digest(file: Path, data: bytes | None = None) -> str:
    """SHA-256 over every ``.py`` file in ``file``'s folder, by name, ``file`` itself as
    ``data`` when given (so it is the bytes that run, read once). A link, a FIFO or an
    unreadable file counts as what it is, never waited on or followed."""
    digest = hashlib.sha256()
    for path in sorted(file.parent.glob("*.py")):
        digest.update(path.name.encode())
        if data is not None and path.name == file.name:
            digest.update(data)
        else:
            digest.update(_sibling_bytes(path))
    return digest.hexdigest()


def _sibling_bytes(path: Path) -> bytes:
    try:
        mode = os.stat(path).st_mode  # a helper linked in from elsewhere is still a helper
        if not stat.S_ISREG(mode):
            return b"\0not a regular file"
        return read_bytes(path.resolve(), SOURCE_LIMIT)
    except (OSError, ConfigError) as error:
        return f"\0unreadable: {type(error).__name__}".encode()


# ---------------------------------------------------------------------------- checking
def verify(
    records: Mapping[str, CodeRecord], tasks: Iterable[TaskConfig], *, accept: bool, where: str
) -> Records:
    """Make the recorded files what runs, each read once and checked against its digests.

    A file that changed is :class:`CodeChanged` naming it, unless ``accept`` (the user's
    ``--trust-code``), which takes it as it is now; code the tasks name without a record is
    refused likewise. Returns the records of what will run (changed ones as they are now).
    """
    now: Records = {}
    for source, name in code_sources(tasks).items():
        record = records.get(source)
        if record is None:
            if not accept:
                raise CodeChanged(
                    f"{where}: {name!r} was not recorded when it was made (it resolves "
                    "elsewhere now); pass --trust-code to run it as it is here"
                )
            now[source] = _capture_one(source, name)
            continue
        if record.file is None:  # a module that exists only in the process that made the run
            if usercode.loaded_by_name(source) is None:
                raise ConfigError(
                    f"{where}: {name!r} was a module without a file, loaded where the run was "
                    "made (a notebook's __main__); it runs only in such a process"
                )
            now[source] = record
            continue
        now[source] = _verify_one(source, name, record, accept=accept, where=where)
    return now


def _verify_one(
    source: str, name: str, record: CodeRecord, *, accept: bool, where: str
) -> CodeRecord:
    """:func:`verify` of one recorded file and what its code imports; its record as it is now."""
    code = _recorded_code(source, record, name)
    digests = (code.sha256, folder_digest(code.file, code.data))
    if digests != (record.sha256, record.folder_sha256) and not accept:
        raise CodeChanged(_changed(where, name, record, digests[0]))
    checked = _checked_imports(record, name, accept=accept, where=where)
    usercode.provide(code)
    # Recorded before imports were, or taken as it is now by the user: what it imports is
    # recorded as it is imported; else checked against the records.
    recording = record.imports is None or accept
    imports.check_imports(source, name, None if recording else where, checked)
    now = None if record.imports is None else tuple(found for found, _ in checked.values())
    return CodeRecord(str(code.file), code.module, *digests, imports=now)


def _checked_imports(
    record: CodeRecord, name: str, *, accept: bool, where: str
) -> dict[str, tuple[ImportRecord, bytes]]:
    """Each module ``record``'s code imported, read once and compared with its digest: a
    change is one line naming the file, unless ``accept`` (a file gone is then left out)."""
    checked = {}
    for recorded in record.imports or ():
        file = Path(recorded.file)
        try:
            data = read_bytes(file, SOURCE_LIMIT)
        except FileNotFoundError:
            if accept:
                continue
            raise CodeChanged(
                f"{file} is gone since {where} was sealed (its code {name!r} imports it as "
                f"{recorded.module}); pass --trust-code to run the code without it"
            ) from None
        except OSError as error:
            raise ConfigError(f"{file}: cannot read it ({error.strerror or error})") from None
        now = ImportRecord(recorded.module, recorded.file, imports.sha256_of(data))
        if now.sha256 != recorded.sha256 and not accept:
            raise CodeChanged(
                f"{file} has changed since {where} was sealed (its code {name!r} imports it as "
                f"{recorded.module}); read it, then pass --trust-code to run it as it is now"
            )
        checked[recorded.module] = (now, data)
    return checked


def _recorded_code(source: str, record: CodeRecord, name: str) -> ProvidedCode:
    """The bytes that will run for ``record``: those this process runs already, else the
    recorded file's, read once."""
    running = usercode.provided(source)
    assert record.file is not None  # a record of a file
    file = Path(record.file)
    if running is not None and running.file == file and running.module == record.module:
        return running
    return ProvidedCode(source, file, record.module, _read_source(file, name))


def _changed(where: str, name: str, record: CodeRecord, sha256: str) -> str:
    if sha256 != record.sha256:
        what = f"{record.file} has changed"
    else:
        what = f"a .py file beside {record.file} has changed"
    return (
        f"{what} since {where} was sealed (its code {name!r}); read it, then pass --trust-code "
        "to run it as it is now"
    )


# ---------------------------------------------------------------------------- stored records
def records_json(records: Mapping[str, CodeRecord]) -> dict[str, Any]:
    return {source: record.to_json() for source, record in sorted(records.items())}


def records_from_json(value: object, where: str) -> Records:
    """Records read as data (a run's ``code.json``, a sweep spec's ``code``)."""
    if not isinstance(value, dict) or len(value) > _MAX_RECORDS:
        raise ConfigError(f"{where}: not a table of code records")
    records: Records = {}
    for source, record in value.items():
        if not isinstance(source, str) or not source or len(source) > 4 * KIB:
            raise ConfigError(f"{where}: {source!r:.40} is not a code source")
        records[source] = CodeRecord.from_json(record, f"{where}: {source}")
    return records


def read_records(run_dir: str | Path) -> Records | None:
    """A run's ``code.json``, or None for a run made before esjax recorded code."""
    path = Path(run_dir) / CODE
    if not os.path.lexists(path):
        return None
    document = read_json(path, RECORDS_LIMIT)
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise ConfigError(f"{path}: not an esjax code record")
    return records_from_json(document.get("code"), str(path))


def write_records(run_dir: str | Path, records: Mapping[str, CodeRecord]) -> None:
    document = {"format": _FORMAT, "version": 1, "code": records_json(records)}
    atomic_write(Path(run_dir) / CODE, (json.dumps(document, indent=2) + "\n").encode())
