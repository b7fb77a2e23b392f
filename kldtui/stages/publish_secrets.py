"""What ``kldtui publish`` reads of a file for secrets before it goes up (docs/SAFETY.md, "Secrets"),
for both kinds of suite.

A tensor file (``.safetensors``) is not read as text. Every other file, whatever its size, is
searched for values of a secret's shape in parts of :data:`SCAN_CHUNK` bytes, never read whole
(:func:`kldtui.redact.chunks_look_secret`: a secret a part's end splits is still found). A JSON file
is read whole instead, up to :data:`JSON_SCAN_LIMIT`, because a field named like a secret (a
runtime's ``HF_AUTH``) shows only in the parsed document; a larger one is refused, as it cannot be
checked by name. What to do with what is found (rewrite, refuse) is each suite kind's.
"""

from __future__ import annotations

import contextlib
import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.formats.safe_io import read_bytes, read_chunks, read_failure
from kldtui.formats.suite import MANIFEST_LIMIT
from kldtui.redact import chunks_look_secret, looks_secret

SCAN_CHUNK = 4 * 1024 * 1024  # bytes of a file searched at a time
# bytes of a JSON file read whole for its fields: the largest JSON a suite holds is a manifest, which
# no reader takes above this either
JSON_SCAN_LIMIT = MANIFEST_LIMIT
REMEDY = ("publish reads every file it uploads for secrets first: make it readable, or move it out of "
          "the folder")


@dataclass(frozen=True)
class Scanned:
    """What a file to upload holds: a value of a secret's shape anywhere (``by_value``), and its
    document when it is a JSON file that parses (``document``, for the check by field name)."""

    by_value: bool
    document: Any | None = None


def is_tensor_file(path: Path) -> bool:
    """A tensor file: not read as text (its rows are numbers, checked as such by verify)."""
    return path.suffix == ".safetensors"


def scan_upload(path: Path, *, follow: bool = True) -> Scanned | None:
    """What ``path`` holds (see the module doc); None for a tensor file, which is not read.
    BadInput, one line naming the file, when it cannot be read or is a JSON file over
    :data:`JSON_SCAN_LIMIT`."""
    if is_tensor_file(path):
        return None
    try:
        if path.suffix != ".json":
            with contextlib.closing(read_chunks(path, SCAN_CHUNK, follow=follow)) as chunks:
                return Scanned(chunks_look_secret(chunks))
        text = read_bytes(path, limit=JSON_SCAN_LIMIT, follow=follow).decode("utf-8", "replace")
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise BadInput(f"{path}: a JSON file larger than {JSON_SCAN_LIMIT} bytes; publish reads a JSON "
                           "file whole to find fields named like a secret (a runtime's HF_TOKEN), and "
                           "no larger: move it out of the folder or split it, then publish again") from None
        raise read_failure(path, exc, "file to upload", REMEDY) from None
    try:
        document: Any | None = json.loads(text)
    except ValueError:
        document = None
    return Scanned(looks_secret(text), document)
