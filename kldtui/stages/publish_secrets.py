"""What ``kldtui publish`` reads of a file for secrets before it goes up (docs/SAFETY.md, "Secrets"),
for both kinds of suite.

A tensor file (``.safetensors``) is read for its header only (the checked reader of
:mod:`kldtui.formats.safetensors_io`, bounded as everywhere): every string in it, tensor names and
the ``__metadata__`` map (which tools and people fill with paths, URLs, notes) included, is searched
for a value of a secret's shape, and a metadata key named like a secret (``HF_TOKEN``) counts too.
A tensor file is never rewritten (a suite's manifests list its size and hash), so a secret there
is refused here, in words each suite kind gives. Every other file, whatever its size, is searched for
values of a secret's shape in parts of :data:`SCAN_CHUNK` bytes, never read whole
(:func:`kldtui.redact.chunks_look_secret`: a secret a part's end splits is still found). A JSON file
is read whole instead, up to :data:`JSON_SCAN_LIMIT`, because a field named like a secret (a
runtime's ``HF_AUTH``) shows only in the parsed document; a larger one is refused, as it cannot be
checked by name. What to do with what is found there (rewrite, refuse) is each suite kind's.
"""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.formats.safe_io import open_regular, read_bytes, read_chunks, read_failure
from kldtui.formats.safetensors_io import read_header_document
from kldtui.formats.suite import MANIFEST_LIMIT
from kldtui.redact import REDACTED, chunks_look_secret, is_secret_env, looks_secret
from kldtui.text import human_bytes

SCAN_CHUNK = 4 * 1024 * 1024  # bytes of a file searched at a time
# bytes of a JSON file read whole for its fields: the largest JSON a suite holds is a manifest, which
# no reader takes above this either
JSON_SCAN_LIMIT = MANIFEST_LIMIT
REMEDY = ("publish reads every file it uploads for secrets first: make it readable, or move it out of "
          "the folder")
# metadata keys of the published tensor formats (docs/FORMATS.md) that hold a secret's word but name
# a hash or a tensor, not a secret; any other key named like a secret in a tensor file's header is one
FORMAT_METADATA_KEYS = frozenset({"token_ids_json_sha256", "checkpoint_tensor_key"})


@dataclass(frozen=True)
class Scanned:
    """What a file to upload holds: a value of a secret's shape anywhere (``by_value``), and its
    document when it is a JSON file that parses (``document``, for the check by field name)."""

    by_value: bool
    document: Any | None = None


def is_tensor_file(path: Path) -> bool:
    """A tensor file: only its header is read (its rows are numbers, checked as such by verify)."""
    return path.suffix == ".safetensors"


def scan_upload(path: Path, *, tensor_remedy: str, follow: bool = True) -> Scanned | None:
    """What ``path`` holds (see the module doc); None for a tensor file, whose header is checked
    here: BadInput, one line naming the file and ending in ``tensor_remedy`` (what to do), when it
    holds a secret. BadInput, one line naming the file, when it cannot be read, is a JSON file over
    :data:`JSON_SCAN_LIMIT` or a tensor file whose header does not parse."""
    if is_tensor_file(path):
        found = tensor_header_secret(path, follow=follow)
        if found is not None:
            raise BadInput(f"{path}: its safetensors header holds {found}; publish uploads a tensor file "
                           f"as it is and cannot redact it: {tensor_remedy}")
        return None
    try:
        if path.suffix != ".json":
            with contextlib.closing(read_chunks(path, SCAN_CHUNK, follow=follow)) as chunks:
                return Scanned(chunks_look_secret(chunks))
        text = read_bytes(path, limit=JSON_SCAN_LIMIT, follow=follow).decode("utf-8", "replace")
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise BadInput(f"{path}: a JSON file larger than {human_bytes(JSON_SCAN_LIMIT)}; publish reads a "
                           "JSON file whole to find fields named like a secret (a runtime's HF_TOKEN), and "
                           "no larger: move it out of the folder or split it, then publish again") from None
        raise read_failure(path, exc, "file to upload", REMEDY) from None
    try:
        document: Any | None = json.loads(text)
    except ValueError:
        document = None
    return Scanned(looks_secret(text), document)


def _plainly_not_secret(value: str) -> bool:
    """A metadata value under a secret-like name that cannot be a secret: empty, already redacted, or a
    number (another tool's ``token_count``: a tensor file cannot be redacted, so refusing it would
    block the publish for nothing)."""
    text = value.strip()
    if text in ("", REDACTED):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def tensor_header_secret(path: Path, *, follow: bool = True) -> str | None:
    """What of a secret the header of the tensor file ``path`` holds, in words that quote no value
    (a key named like a secret, a value of a secret's shape), or None. BadInput, one line naming
    the file, when it cannot be read or its header does not parse or is over its limit."""
    try:
        with open_regular(path, follow=follow) as handle:
            header, document = read_header_document(path, fd=handle.fileno())
    except OSError as exc:
        raise read_failure(path, exc, "file to upload", REMEDY) from None
    for key, value in header.metadata.items():
        if key not in FORMAT_METADATA_KEYS and is_secret_env(key) and not _plainly_not_secret(value):
            return f"a metadata field named like a secret ({key[:80]!r})"
    if any(looks_secret(text) for text in _strings(document)):
        return "a value shaped like a secret (a token, a password in a URL)"
    return None


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value, the keys of its objects included (without recursion: a header
    may nest as deep as the JSON parser allowed)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
