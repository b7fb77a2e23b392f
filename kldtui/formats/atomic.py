"""Atomic file publication: write under a temporary name in the same folder, then rename.

A reader never sees a half-written file under its final name. ``publish_new`` refuses to
replace an existing file (a hard link fails if the name exists), which the chunk writer and
finalize rely on.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _tmp_path(final: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *, replace: bool = True,
                fsync: bool = True) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success publish it as ``path``.

    With ``replace=False`` publication fails with :class:`FileExistsError` if ``path`` exists.
    On any exception the temporary file is removed and ``path`` is untouched.
    """
    final = Path(path)
    tmp = _tmp_path(final)
    try:
        with open(tmp, mode) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, final)
        else:
            publish_new(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def publish_new(tmp: Path, final: Path) -> None:
    """Give ``tmp`` the name ``final`` only if ``final`` does not exist; remove ``tmp``."""
    os.link(tmp, final)  # raises FileExistsError, never overwrites
    tmp.unlink()


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, sort_keys: bool = True) -> None:
    """Write ``data`` as 2-space indented JSON with a trailing newline, atomically."""
    text = json.dumps(data, indent=2, sort_keys=sort_keys, allow_nan=False) + "\n"
    with atomic_open(path, "w") as handle:
        handle.write(text)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)
