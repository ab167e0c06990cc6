"""Foreign text as text: a string read from a run, sweep or task file, made safe to show.

Such a string holds whatever its author typed: an ANSI colour, an OSC sequence that retitles
the terminal or sets its clipboard, a bell, a carriage return that writes over the line
before it, a bidirectional override that shows text in another order than it reads. Printed
as it is, it acts on the terminal of whoever reads the table, note or error it is in.
:func:`visible` replaces each such character with an escape a reader sees (``\\x1b``,
``\\u202e``), and every table, note and error that shows such text passes through it.

A spreadsheet reads a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula (one can
fetch a URL or run a command); :func:`spreadsheet_text` makes such a cell plain text.
"""

from __future__ import annotations

# C0 controls (ESC, BEL, CR, LF, TAB included: a shown string stays on its line), DEL, C1
# controls (U+009B is a one-character CSI), and the characters that reorder or break text
# (the bidirectional marks, embeddings, overrides and isolates; the line and paragraph
# separators).
_SHOWN_AS_ESCAPES = [
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
]
_ESCAPES = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _SHOWN_AS_ESCAPES
}
# What a spreadsheet takes for the start of a formula (OWASP's list: tab and CR included).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def visible(text: object) -> str:
    """``text`` with every control, bidirectional and line-breaking character shown as an
    escape (``"\\x1b[31m"`` for an ANSI colour), so that it prints as the characters it holds."""
    return str(text).translate(_ESCAPES)


def spreadsheet_text(text: str) -> str:
    """A CSV cell that a spreadsheet shows as the text it is: one that would begin a formula
    gets a leading apostrophe, as spreadsheets themselves write text that looks like one."""
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text
