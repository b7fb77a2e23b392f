"""JSON from folders other people write into, parsed so that none of its text can drive a terminal.

Reports, manifests and noise models from a shared disk or the Hub carry names (a candidate's
folder, a domain, a capture's path) that kldtui prints: to a terminal in the headless commands, and
into commands it suggests. JSON may spell any character as an escape (``"\\u001b]0;...\\u0007"``:
an escape sequence that retitles the window, moves the cursor or writes the clipboard), so
:func:`loads` refuses a string (value or key) holding a control character: C0 but tab, newline and
carriage return, DEL and C1; the error names the file and the field. (Rich, under the dashboard,
strips only some control characters, not ESC or C1; the plain output strips none.) Reports, suite
and logits manifests (and every manifest read through :func:`kldtui.formats.suite.read_versioned`)
and noise models are read through it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.formats.safe_io import read_failure, read_text

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # C0 but tab, LF, CR; DEL; C1


def control_character(text: str) -> str | None:
    """The first control character in ``text`` as ``U+001B``, or None."""
    found = CONTROL.search(text)
    return f"U+{ord(found.group()):04X}" if found else None


_ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # CONTROL, and tab, LF and CR as well


def _escaped(pattern: re.Pattern[str], text: str) -> str:
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def printable_name(text: str) -> str:
    """A name on one line: every control character as ``\\xNN``, line breaks and tabs too (a folder
    named ``q4\\nMean KLD: 0.0`` would print a second, made-up line under any name it is put in)."""
    return _escaped(_ANY_CONTROL, text)


def one_line_problem(value: object, limit: int) -> str | None:
    """Why ``value``, free text a file keeps and a view may show (a report's
    ``provenance.backend_reason``), is not one line of at most ``limit`` characters; None when it is.
    The rule of :func:`printable_name`, refusing where that escapes: no control character at all
    (a line break or a tab neither), and a bound on the length."""
    if not isinstance(value, str):
        return f"expected text, found {type(value).__name__}"
    if len(value) > limit:
        return f"is {len(value):,} characters long (at most {limit:,})"
    found = _ANY_CONTROL.search(value)
    if found is not None:
        return f"holds a control character (U+{ord(found.group()):04X}); it is one line of text"
    return None


def printable(text: str) -> str:
    """``text`` with each control character written as ``\\xNN``: for names that come from the file
    system (a report file's name in a shared folder), which no loader checks."""
    return _escaped(CONTROL, text)


def _one_line(text: str) -> str:
    """Line breaks as spaces, other control characters as ``\\xNN``."""
    return printable(" ".join(text.splitlines()) if "\n" in text or "\r" in text else text)


# Markdown's characters that make a link, an image, emphasis, code or a table cell, and a "<" that
# could open an HTML tag or comment (a "<" before a space or a digit is text and stays as it is)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]|]|<(?=[A-Za-z/!?]))")


def markdown_literal(text: str) -> str:
    """``text`` as one line of literal Markdown: a name "[q4](site) <img src=x>" shows as written, not
    as a link and an image, and a ``|`` starts no table cell; control characters as ``\\xNN``."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _one_line(text))


def markdown_code(text: str) -> str:
    """``text`` as a Markdown code span on one line, whatever backticks it holds (its fence is longer
    than any run of them); control characters as ``\\xNN``."""
    one_line = _one_line(text)
    longest = max((len(run) for run in re.findall("`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def _check(value: Any, where: str, what: str, key: str) -> None:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, str):
            bad = control_character(item)
            if bad is not None:
                raise BadInput(f"{where}: {what} holds a control character ({bad}) in {key!r}, which a "
                               "terminal would take as part of an escape sequence; kldtui does not read such "
                               "a file: fix or replace it")
        elif isinstance(item, list):
            _check(item, where, what, key)


def loads(text: str, *, where: str, what: str = "the file") -> Any:
    """``json.loads(text)``, and :class:`BadInput` naming ``where`` and the field for a string holding a
    control character. Invalid JSON raises what ``json.loads`` raises (callers word it)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        for key, value in items:
            _check(key, where, what, key)
            _check(value, where, what, key)
        return dict(items)

    doc = json.loads(text, object_pairs_hook=pairs)
    _check(doc, where, what, "(top level)")
    return doc


def read_json(path: str | os.PathLike[str], *, what: str, remedy: str, limit: int) -> Any:
    """The JSON document in the file at ``path``, read through :mod:`kldtui.formats.safe_io` (never
    blocks on a FIFO) and parsed by :func:`loads`. BadInput, one line naming the file, the problem
    and ``remedy`` (what to do), for a file that is missing, not a regular file, unreadable, larger
    than ``limit`` bytes (the kind's own bound, docs/SAFETY.md: nothing from a shared folder is read
    whole unbounded), not UTF-8 or not JSON. ``what`` names the kind of file without an article
    (``"noise model"``)."""
    p = Path(path)
    try:
        text = read_text(p, limit=limit)
    except UnicodeDecodeError:
        raise BadInput(f"{p}: {what} is not UTF-8 text, so not JSON; {remedy}") from None
    except OSError as exc:
        raise read_failure(p, exc, what, remedy) from None
    try:
        return loads(text, where=str(p), what=f"the {what}")
    except ValueError as exc:
        raise BadInput(f"{p}: {what} is not valid JSON ({exc}); {remedy}") from None
    except RecursionError:
        raise BadInput(f"{p}: {what} is JSON nested too deeply; {remedy}") from None
