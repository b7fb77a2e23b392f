"""Names that become parts of paths: one rule, checked where the name is loaded.

A suite's ``domain`` becomes part of a folder name (``window-NNN-DOMAIN-chunks``), a run name a
folder under the capture folder, a request id the hook's request folder, a manifest's ``file``
and a suite's ``token_file`` paths inside the logits or suite folder. Each comes from a file or a
flag that may have been written by someone else (a suite published on the Hub), so each is
checked against one rule before it is used: characters ``A-Z a-z 0-9 _ . -`` only (so no path
separator), not ``.`` and no ``..`` anywhere, at most :data:`NAME_MAX` characters.
"""

from __future__ import annotations

import hashlib
import re

from kldtui.errors import BadField

NAME_MAX = 128
ALLOWED = "letters, digits, '_', '.' and '-'"
_ALLOWED_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_.\-]")


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a safe name, or None when it is one."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if len(value) > NAME_MAX:
        return f"is {len(value)} characters long (at most {NAME_MAX})"
    if not _ALLOWED_RE.match(value):
        bad = sorted({ch for ch in value if not _ALLOWED_RE.match(ch)})
        return f"holds {''.join(bad)!r}; only {ALLOWED} are allowed"
    if value == "." or ".." in value:
        return "holds '..' or is '.'; a name may not point at another folder"
    return None


def check_name(value: object, what: str, where: str) -> str:
    """``value`` if it is a safe name, else BadInput ``"<where>: <what> <value> ...; fix ..."``."""
    problem = name_problem(value)
    if problem is not None:
        raise BadField(f"{where}: {what} {str(value)[:NAME_MAX + 20]!r} {problem}; it becomes part "
                       "of a file or folder name, so it must be a plain name")
    assert isinstance(value, str)
    return value


def check_relative_path(value: object, what: str, where: str, *, max_parts: int = 4) -> str:
    """A relative path of safe names joined by ``/`` (e.g. a suite's ``tokens/window_000.json``)."""
    if not isinstance(value, str) or not value:
        raise BadField(f"{where}: {what} {value!r} must be a relative path such as "
                       "tokens/window_000.json")
    parts = value.split("/")
    if value.startswith("/") or len(parts) > max_parts:
        raise BadField(f"{where}: {what} {value[:200]!r} must be a relative path of at most "
                       f"{max_parts} parts inside its folder")
    for part in parts:
        problem = name_problem(part)
        if problem is not None:
            raise BadField(f"{where}: {what} {value[:200]!r}: part {part[:NAME_MAX]!r} {problem}; "
                           "the path must stay inside its folder")
    return value


def safe_name(value: str) -> str:
    """Turn any text into a safe name (request ids): unsafe characters and ``..`` become ``_``,
    an over-long name is shortened and keeps a hash of the whole so names stay distinct."""
    out = _UNSAFE_RE.sub("_", value)
    out = re.sub(r"\.{2,}", lambda m: "_" * len(m.group()), out)
    if out in ("", "."):
        out = "_" * max(1, len(out))
    if len(out) > NAME_MAX:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out = out[:NAME_MAX - 17] + "-" + digest
    return out
