"""The command line's terminal: its two consoles, one-line errors and exit codes.

A config problem is one red line on stderr and exit code 2 (no traceback); a warning of
esjax's is one yellow line; Ctrl-C is exit code 130; a usage error (an unknown option, a value
of the wrong kind) is one line naming the command, not typer's boxed panel; a multi-process run
that lost a process exits with code 3 at once. Nothing here imports JAX.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from esjax._src.specs.config import ConfigError
from esjax._src.specs.foreign import visible

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_LOST = 3

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def print_error(message: str) -> None:
    """One red line on stderr, never wrapped; text it quotes from a run, sweep or task file
    shown as the characters it holds (:func:`esjax._src.specs.foreign.visible`)."""
    err.print(Text(f"error: {visible(message)}", style="bold red"), soft_wrap=True)


# The esjax package: a warning raised from a file inside it is esjax's own.
_PACKAGE = Path(__file__).resolve().parents[2]


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """Every warning as one yellow line on stderr (``warning: ...``), as a config error is one
    red line. Python's own form would add the file, the line number and the source line that
    raised it, which say nothing to a user; another library's warning is named by its
    category and the library (``warning: RuntimeWarning in matplotlib: overflow ...``)."""
    text = str(message).strip().splitlines()
    shown = text[0] if text else category.__name__
    if not Path(filename).resolve().is_relative_to(_PACKAGE):
        shown = f"{category.__name__} in {_library_of(filename)}: {shown}"
    err.print(Text(f"warning: {visible(shown)}", style="yellow"), soft_wrap=True)


def _library_of(filename: str) -> str:
    """The top-level package a file of an installed library belongs to (``matplotlib`` for
    ``.../site-packages/matplotlib/ticker.py``), else the file's own name."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return Path(parts[parts.index(marker) + 1]).stem
    return Path(filename).stem


def print_stopped(message: str) -> None:
    """A run or sweep stopped by a signal: one yellow line on stderr saying how to resume."""
    err.print(Text(visible(message), style="yellow"), soft_wrap=True)


def exit_stopped(message: str, code: int, compiling: bool) -> NoReturn:
    """Say how to resume a stopped run or sweep and exit with ``code`` at once.

    Its checkpoint is written by now. A program still ``compiling`` in the background (the
    evaluation, compiled beside the first generations) is no longer needed, but Python would
    wait for its thread before exiting: tens of seconds for a Brax env, past many schedulers'
    grace period after SIGTERM. So the process then leaves through ``os._exit``, once its
    output is flushed; its run directory, lock and trackers were closed before this.
    """
    print_stopped(message)
    if compiling:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
                stream.flush()
        os._exit(code)
    raise typer.Exit(code)


def handles_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Config errors become one line and exit code 2; Ctrl-C becomes exit code 130.

    A file the command cannot read or write where the user pointed it (``--out`` into a
    folder that cannot be made, a path that is a directory) is one line and exit code 2 too:
    the operating system's reason, with the path.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ConfigError as error:
            print_error(str(error))
            raise typer.Exit(EXIT_CONFIG) from None
        except OSError as error:
            if not error.filename:  # not about a path the user gave: a bug to show in full
                raise
            print_error(f"{error.filename}: {error.strerror or error}")
            raise typer.Exit(EXIT_CONFIG) from None
        except KeyboardInterrupt:
            err.print(Text("interrupted", style="yellow"))
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def exit_lost(message: str) -> None:
    """A process of a multi-process run was lost: say so and exit with code 3 at once.

    JAX's shutdown barrier is skipped: it would wait for the lost process until its timeout.
    """
    print_error(message)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_LOST)


# What matplotlib's Agg canvas writes without a backend of its own (``esjax plot --out``).
FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".eps", ".ps", ".pgf",
                   ".tif", ".tiff", ".webp", ".raw", ".rgba")  # fmt: skip


def check_suffix(out: Path | None, allowed: Sequence[str]) -> None:
    """``--out`` names a file of a kind the command writes, before any work is done."""
    if out is None:
        return
    if out.is_dir():
        raise ConfigError(f"--out {out}: a directory; name the file to write")
    if out.suffix.lower() not in allowed:
        raise ConfigError(f"--out {out}: expected a {', '.join(allowed)} file")


def check_run_dir(path: Path) -> Path:
    """``path``, checked to be a run directory (one with a config.json) before anything loads."""
    if not path.is_dir():
        raise ConfigError(f"{path}: no such run directory")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: not a run directory (no config.json)")
    return path


def run_app(app: typer.Typer, prog_name: str) -> None:
    """Run ``app`` as a console script and exit with its code; a usage error is one line, and
    so is each warning of esjax's (:func:`show_warning`)."""
    warnings.showwarning = show_warning
    try:
        code = app(prog_name=prog_name, standalone_mode=False)
    except typer.TyperException as error:  # a usage error: one line, not typer's boxed panel
        if not error.format_message().strip():  # bare `esjax`: the help is already printed
            sys.exit(getattr(error, "exit_code", 2))
        ctx = getattr(error, "ctx", None)
        where = ctx.command_path if ctx is not None else prog_name
        message = " ".join(error.format_message().split())
        print_error(f"{where}: {message} (see `{where} --help`)")
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort:
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
