"""The trust boundary: which code a run or sweep directory may make esjax import and call.

A task names its env, and its policy, as data or as code. A gymnax id (``"CartPole-v1"``) and
an adapted suite's ``"SUITE:NAME"`` are data: esjax looks them up in libraries the user
installed. A ``"module:factory"`` or ``"file.py:factory"`` is code, as an env or as a policy
kind: building it imports that module or runs that file. Naming code in a task file or on the
command line is the user's own say-so; naming it in a run or sweep directory is not, since
such a directory may come from anyone.

So when esjax creates a run or a sweep here it **seals** what the directory names to run: an
HMAC-SHA256 of it (the env and its ``env_kwargs``, and a policy named as code with its
``[policy]`` table; a sweep's whole spec), keyed by a secret
that lives in this user's data folder (``$ESJAX_TRUST_KEY``, else
``$XDG_DATA_HOME/esjax/trust.key``, else ``~/.local/share/esjax/trust.key``) and written
as ``trust.sig`` in the directory. A copied directory carries its seal, but a seal made with
another user's key, or over other code names, does not verify here, and nobody can make one
without this key. A directory whose seal does not verify and that names code is refused, in one
line naming that code, before anything is imported, unless the user passes ``--trust-code``
(``trust_code=True`` from Python). A directory that names only data needs no seal.

The seal also covers what the code *is*: the file each name resolved to and its digests
(:mod:`esjax._src.run.codefiles`), recorded at creation. A sealed directory's code runs from those
files alone, checked byte for byte, from whatever directory esjax is started in; a file edited
since is refused in one line, and ``--trust-code`` takes it as it is now and seals it again.
``trust.sig`` is read as data: 64 lowercase hex digits, anything else is no seal.

The key is named by an absolute path only (a relative one would be found from the working
directory), and a key file others may read or write, or that another user owns, is refused
in one line: whoever reads it can seal code as this user.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from esjax._src.envs.suites import names_code
from esjax._src.run import codefiles
from esjax._src.run.codefiles import Records
from esjax._src.run.files import atomic_write, open_regular, read_bytes
from esjax._src.specs import policy_kinds
from esjax._src.specs.config import ConfigError, TaskConfig, to_dict

KEY_ENV = "ESJAX_TRUST_KEY"
SEAL = "trust.sig"
_KEY_BYTES = 32
# Directories the user has trusted in this process (``trust_code=True``), with what is in them.
_GRANTED: set[Path] = set()


class UntrustedCode(ConfigError):
    """A run or sweep directory names code to import, and the user has not said to run it."""


def key_path() -> Path:
    """Where this user's trust key lives (see the module's docstring); one line when
    ``$ESJAX_TRUST_KEY`` is not an absolute path."""
    configured = os.environ.get(KEY_ENV)
    if configured:
        path = Path(configured).expanduser()
        if not path.is_absolute():
            raise ConfigError(
                f"{KEY_ENV}={configured}: not an absolute path; the trust key is named by an "
                "absolute path (a relative one would be found in the working directory)"
            )
        return path
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "esjax" / "trust.key"


def _key(create: bool) -> bytes | None:
    """This user's secret key; made (readable by the user alone) on first use when ``create``.
    None where there is none and none can be made (no writable home: nothing is sealed and
    nothing trusted); a key file others could read or forge is one line."""
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    if not create:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(_KEY_BYTES).encode())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # fails if another process made the key first: theirs wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return _read_key(path)
    except OSError:
        return None


def _read_key(path: Path) -> bytes | None:
    """The key in ``path``, refused in one line unless the file is this user's alone."""
    fd = open_regular(path)
    try:
        info = os.fstat(fd)
        owner = getattr(os, "getuid", lambda: info.st_uid)()
        if info.st_uid != owner:
            raise ConfigError(f"{path}: the trust key belongs to another user; esjax uses only "
                              "a key of your own")  # fmt: skip
        if info.st_mode & 0o077:
            raise ConfigError(
                f"{path}: the trust key can be read or written by others (mode "
                f"{oct(info.st_mode & 0o777)}), and whoever reads it can seal code as you; "
                f"make it private (chmod 600 {path})"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return _valid_key(data)


def _valid_key(data: bytes) -> bytes | None:
    return data.strip() if len(data.strip()) >= _KEY_BYTES else None


def _digest(key: bytes, kind: str, what: object) -> str:
    text = json.dumps({"kind": kind, "what": what}, sort_keys=True, default=str)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def seal(directory: str | Path, kind: str, what: object) -> None:
    """Record in ``directory`` that this user made it to run ``what`` (see above)."""
    key = _key(create=True)
    if key is not None:
        atomic_write(Path(directory) / SEAL, (_digest(key, kind, what) + "\n").encode())


def is_sealed(directory: str | Path, kind: str, what: object) -> bool:
    """Whether ``directory``'s seal is this user's, over exactly ``what``."""
    stored = _stored_seal(directory)
    if stored is None:
        return False
    key = _key(create=False)
    if key is None:
        return False
    return hmac.compare_digest(stored, _digest(key, kind, what).encode())


# What ``trust.sig`` holds: an HMAC-SHA256 in lowercase hex, and a newline.
_SEAL_FORM = re.compile(rb"[0-9a-f]{64}\n?")


def _stored_seal(directory: str | Path) -> bytes | None:
    """The seal in ``directory`` when it has exactly the form esjax writes, else None."""
    try:
        data = read_bytes(Path(directory) / SEAL, 128)
    except (OSError, ConfigError):
        return None
    return data[:64] if _SEAL_FORM.fullmatch(data) else None


def grant(directories: Iterable[str | Path]) -> None:
    """Trust the code that ``directories`` (and what lies in them) name, for this process."""
    for directory in directories:
        _GRANTED.add(Path(directory).resolve())


def granted(directory: str | Path) -> bool:
    """Whether the user trusted ``directory`` (or a folder above it) in this process."""
    return _granted(directory)


def _granted(directory: str | Path) -> bool:
    resolved = Path(directory).resolve()
    return any(g == resolved or g in resolved.parents for g in _GRANTED)


# ---------------------------------------------------------------------------- runs and sweeps
def run_code(task: TaskConfig, records: Records | None = None) -> dict[str, Any]:
    """What a run's seal covers: the env it names and the arguments its factory gets, a policy
    named as code with the arguments its factory gets (only then, so that runs sealed before
    policies could be code still verify), and the records of the code's files (once recorded:
    runs sealed before still verify)."""
    covered: dict[str, Any] = {"env": task.env, "env_kwargs": task.env_kwargs}
    if policy_kinds.names_code(task.policy.kind):
        covered["policy"] = to_dict(task.policy)
    if records:
        covered["code"] = codefiles.records_json(records)
    return covered


def code_names(tasks: Iterable[TaskConfig]) -> list[str]:
    """The code (``module:factory``, ``file.py:factory``) that ``tasks`` would import, each
    labelled with what it is (``env 'x.py:make'``, ``policy 'y.py:make'``)."""
    names = set()
    for task in tasks:
        if isinstance(task.env, str) and names_code(task.env):
            names.add(f"env {task.env!r}")
        if policy_kinds.names_code(task.policy.kind):
            names.add(f"policy {task.policy.kind!r}")
    return sorted(names)


def seal_run(run_dir: str | Path, task: TaskConfig) -> None:
    """Seal ``run_dir`` as this user's, recording the files of the code its task names as they
    will run (:func:`esjax._src.run.codefiles.capture`)."""
    records = codefiles.capture([task])
    if records:
        codefiles.write_records(run_dir, records)
    seal(run_dir, "run", run_code(task, records))


def check_run(
    run_dir: str | Path, task: TaskConfig, trust_code: bool = False, *, writer: bool = False
) -> None:
    """Refuse, before anything is imported, a run whose task names code the user has not
    trusted (not sealed here, not granted, no ``trust_code``), or whose recorded code files
    have changed; make the recorded files what runs.

    The run is sealed again when what runs is not what it recorded: by a ``writer`` (a
    resume: a run made before code was recorded gets its records), and by a user who trusted
    it (``--trust-code``: a changed file taken, a foreign run made theirs), where the directory
    can be written.
    """
    if trust_code:
        grant([run_dir])
    names = code_names([task])
    if not names:
        return
    trusted = _granted(run_dir)
    records = _run_records(run_dir, trusted)
    sealed = is_sealed(run_dir, "run", run_code(task, records))
    if not sealed and not trusted:
        raise _refusal(run_dir, "config.json", names)
    if sealed and records is not None:
        now = codefiles.verify(records, [task], accept=trusted, where=str(run_dir))
        changed = now != records
    else:  # sealed before code was recorded, or trusted: found by its name, as it was named
        codefiles.capture([task])
        changed = True
    if changed and (writer or trusted):
        try:
            seal_run(run_dir, task)
        except OSError:
            if writer:
                raise


def complete_records(run_dir: str | Path, task: TaskConfig, *, writer: bool) -> None:
    """After a run's code was built (its env, its policy): seal it again when it imported a
    module its records lack (one its factory imports, first seen here), where this user may
    (a ``writer``, or a run they trusted). A run whose code imported only what it recorded, or
    that this user has not trusted, is left as it is."""
    if not code_names([task]) or not (writer or _granted(run_dir)):
        return
    try:
        stored = codefiles.read_records(run_dir)
    except (OSError, ConfigError):
        return
    now = codefiles.current_records([task])
    if stored is None or now == {s: r for s, r in stored.items() if s in now}:
        return
    try:
        seal_run(run_dir, task)
    except OSError:
        if writer:
            raise


def _run_records(run_dir: str | Path, trusted: bool) -> Records | None:
    """The run's records; malformed ones are one line, unless the user trusts the run (its
    code is then found by name and recorded again)."""
    try:
        return codefiles.read_records(run_dir)
    except (OSError, ConfigError):
        if trusted:
            return None
        raise


def seal_sweep(sweep_dir: str | Path, spec: Mapping[str, Any]) -> None:
    seal(sweep_dir, "sweep", dict(spec))


def check_sweep(
    sweep_dir: str | Path, spec: Mapping[str, Any], tasks: Iterable[TaskConfig], trust_code: bool
) -> Records | None:
    """:func:`check_run` for a sweep: ``tasks`` are its configurations' tasks, parsed only.

    Returns the records of the code that will run (None when the tasks name none), for the
    sweep to store when they differ from its spec's.
    """
    if trust_code:
        grant([sweep_dir])
    tasks = list(tasks)
    names = code_names(tasks)
    if not names:
        return None
    trusted = _granted(sweep_dir)
    sealed = is_sealed(sweep_dir, "sweep", dict(spec))
    if not sealed and not trusted:
        raise _refusal(sweep_dir, "sweep.json", names)
    if sealed and spec.get("code") is not None:
        records = codefiles.records_from_json(spec["code"], f"{sweep_dir}: sweep.json: code")
        return codefiles.verify(records, tasks, accept=trusted, where=str(sweep_dir))
    return codefiles.capture(tasks)


def _refusal(directory: str | Path, file: str, names: list[str]) -> UntrustedCode:
    return UntrustedCode(
        f"{directory}: its {file} names code that esjax would import and run "
        f"({', '.join(names)}), "
        "and it was not created by you on this machine (or was edited since); read that code, "
        "then pass --trust-code (trust_code=True in Python) to run it"
    )
