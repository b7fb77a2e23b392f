"""Writing logits folders: one streamed ``logits_NNN.safetensors`` per window plus
``manifest.json`` (docs/FORMATS.md, "ref/manifest.json" and "ref/logits_NNN.safetensors").

Finalize, the example generator and test fixtures all write through here, so every logits
folder kldtui makes has the published layout. Files are hashed while written and published
atomically; an existing file is only replaced with ``force=True``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as _dt
import hashlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import DISK_FULL_ERRNOS, BadInput, StageFailed
from kldtui.formats.atomic import disk_full, publish_new, write_json_atomic
from kldtui.formats.safetensors_io import encode_header
from kldtui.formats.suite import (
    LOGITS_FORMAT,
    LOGITS_MANIFEST,
    TENSOR_KEY,
    LogitsEntry,
    Suite,
    WindowSpec,
    logits_file_name,
)
from kldtui.redact import redact_json

SYNC_EVERY_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class WrittenLogits:
    """What the manifest needs to know about one finished window file."""

    window_index: int
    domain: str
    file: str
    rows: int
    vocab_size: int
    size_bytes: int
    sha256: str
    token_ids_json_sha256: str

    @classmethod
    def from_entry(cls, entry: LogitsEntry) -> WrittenLogits:
        """A window a manifest already lists (resuming a finalize)."""
        return cls(entry.window_index, entry.domain, entry.file, entry.shape[0], entry.shape[1],
                   entry.size_bytes, entry.sha256, entry.token_ids_json_sha256)

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "window_index": self.window_index,
            "domain": self.domain,
            "file": self.file,
            "key": TENSOR_KEY,
            "shape": [self.rows, self.vocab_size],
            "dtype": "F32",
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "token_ids_json_sha256": self.token_ids_json_sha256,
        }


class LogitsFileWriter:
    """Streams rows of one window into ``folder/logits_NNN.safetensors``.

    Rows must arrive in order and add up to ``rows``; :meth:`commit` publishes the file (only
    then does it exist under its final name) and returns a :class:`WrittenLogits`.

    With ``hash_thread=True`` a block is hashed in a helper thread while it is written (and
    while the caller reads the next one), which nearly doubles throughput on two or more cores;
    the caller must then leave a block unchanged until the next ``write_rows``/``commit``/
    ``abort`` call returns (alternate two buffers).
    """

    def __init__(self, folder: str | os.PathLike[str], window: WindowSpec, vocab_size: int,
                 context_length: int, *, force: bool = False, hash_thread: bool = False) -> None:
        self.folder = Path(folder)
        self.window = window
        self.rows = window.scored_positions
        self.vocab_size = vocab_size
        self.final = self.folder / logits_file_name(window.index)
        self.force = force
        if self.final.exists() and not force:
            raise BadInput(f"{self.final}: already finalized; pass --force to write it again")
        metadata = {
            "format": LOGITS_FORMAT,
            "window_index": str(window.index),
            "domain": window.domain,
            "context_length": str(context_length),
            "vocab_size": str(vocab_size),
            "dtype": "float32",
            "token_ids_json_sha256": window.token_ids_json_sha256,
        }
        header = encode_header({TENSOR_KEY: ("F32", (self.rows, vocab_size))}, metadata)
        self.expected_size = len(header) + self.rows * vocab_size * 4
        # unique per process and writer: two writers never share a temporary file (and a partial
        # file left by a killed run is removed by the next writer of that window, see below)
        self.tmp = self.folder / f".{self.final.name}.{os.getpid()}-{secrets.token_hex(4)}.partial"
        self._hash = hashlib.sha256()
        self._written_rows = 0
        self._size = 0
        self._unsynced = 0
        self._hasher = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kldtui-hash")
                        if hash_thread else None)
        self._pending: concurrent.futures.Future[None] | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        self._remove_stale_partials()
        # "x": O_EXCL, so a link planted at this name is never written through
        self._file = open(self.tmp, "xb")  # noqa: SIM115 - closed in commit/abort
        self._write(header)

    def _remove_stale_partials(self) -> None:
        """Partial files of this window left by killed runs: only those whose writer's pid is gone
        (the folder lock, kldtui.folder_lock, keeps live writers apart; this keeps one from
        deleting a live writer's file even without it)."""
        for old in self.folder.glob(f".{self.final.name}.*partial"):
            pid_text = old.name[len(self.final.name) + 2:].split("-", 1)[0]
            if pid_text.isdigit() and pid_alive(int(pid_text)):
                continue
            with contextlib.suppress(OSError):
                old.unlink()

    def _finish_hash(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _write(self, data: bytes | memoryview) -> None:
        self._finish_hash()
        if self._hasher is not None and len(data) >= 1 << 20:
            self._pending = self._hasher.submit(self._hash.update, data)  # releases the GIL
        else:
            self._hash.update(data)
        try:
            self._file.write(data)
        except OSError as exc:
            self.abort()
            if exc.errno in DISK_FULL_ERRNOS:
                raise disk_full(self.final, exc, self.expected_size) from None
            raise StageFailed(f"{self.final}: writing failed ({exc.strerror or exc}); "
                              "free disk space and run again, nothing was published") from None
        self._size += len(data)
        self._unsynced += len(data)
        if self._hasher is not None and self._unsynced >= SYNC_EVERY_BYTES:
            # Flush to disk while the helper thread hashes, so the final fsync has little left:
            # this overlaps the disk write with hashing instead of adding it at the end.
            self._file.flush()
            os.fdatasync(self._file.fileno())
            self._unsynced = 0

    def write_rows(self, block: np.ndarray) -> None:
        if block.ndim != 2 or block.shape[1] != self.vocab_size:
            raise BadInput(f"{self.final}: rows of shape {list(block.shape)} do not fit "
                           f"[*, {self.vocab_size}]")
        if self._written_rows + block.shape[0] > self.rows:
            raise BadInput(f"{self.final}: more than {self.rows} rows for {self.window.label}")
        data = np.ascontiguousarray(block, dtype="<f4")
        self._write(data.data.cast("B"))
        self._written_rows += block.shape[0]

    @property
    def written_rows(self) -> int:
        return self._written_rows

    def commit(self) -> WrittenLogits:
        if self._written_rows != self.rows:
            self.abort()
            raise StageFailed(f"{self.final}: {self._written_rows} rows written, "
                              f"{self.window.label} needs {self.rows}")
        self._finish_hash()
        self._stop_hasher()
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            if self.force and self.final.exists():
                os.replace(self.tmp, self.final)
            else:
                publish_new(self.tmp, self.final)
        except OSError as exc:
            self.abort()
            if exc.errno in DISK_FULL_ERRNOS:
                raise disk_full(self.final, exc, self.expected_size) from None
            raise StageFailed(f"{self.final}: could not publish ({exc.strerror or exc})") from None
        return WrittenLogits(self.window.index, self.window.domain, self.final.name, self.rows,
                             self.vocab_size, self._size, self._hash.hexdigest(),
                             self.window.token_ids_json_sha256)

    def _stop_hasher(self) -> None:
        if self._hasher is not None:
            self._hasher.shutdown(wait=True)
            self._hasher = None

    def abort(self) -> None:
        self._pending = None
        self._stop_hasher()  # waits for a block being hashed: the caller may reuse it after this
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_logits_array(folder: str | os.PathLike[str], window: WindowSpec, logits: np.ndarray,
                       context_length: int, *, force: bool = False) -> WrittenLogits:
    """Write a whole (small) window at once; for generators and tests."""
    writer = LogitsFileWriter(folder, window, int(logits.shape[1]), context_length, force=force)
    writer.write_rows(logits)
    return writer.commit()


def write_logits_manifest(folder: str | os.PathLike[str], suite: Suite,
                          written: Sequence[WrittenLogits], *, kind: str,
                          runtime: Any = None, window_range: tuple[int, int] | None = None) -> Path:
    """Write ``manifest.json`` for a logits folder (same schema as the published ``ref/``)."""
    items = sorted(written, key=lambda w: w.window_index)
    if not items:
        raise BadInput(f"{folder}: no finalized windows to list in {LOGITS_MANIFEST}")
    vocab = items[0].vocab_size
    if window_range is None:
        window_range = (items[0].window_index, items[-1].window_index + 1)
    doc = {
        "format_version": 1,
        "created_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kind": kind,
        "tensor_key": TENSOR_KEY,
        "dtype": "float32",
        "vocab_size": vocab,
        "context_length": suite.context_length,
        "window_count": len(items),
        "window_range": list(window_range),
        "total_scored_positions": sum(w.rows for w in items),
        "total_size_bytes": sum(w.size_bytes for w in items),
        "suite_token_hash_sha256": suite.suite_token_hash_sha256,
        "runtime": redact_json(runtime),  # whoever gave it (a profile, --runtime-json): no secret kept
        "windows": [w.manifest_entry() for w in items],
    }
    path = Path(folder) / LOGITS_MANIFEST
    write_json_atomic(path, doc)
    return path
