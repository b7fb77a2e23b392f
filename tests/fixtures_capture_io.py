"""A capture mode's ``ServerIO`` for tests: everything runs at once on the calling thread (as the
embedded server's does), failures are remembered and leave the error marker."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


class InlineIO:
    """A ServerIO that runs everything at once (as the embedded server's does)."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)
        self.inline = True
        self.failed: list[str] = []

    def on_writer_thread(self) -> bool:
        return True

    def stage(self, tensor: object, cols: int) -> object:
        return tensor

    def submit_rows(self, request_id: str, row_start: int, parts: list[np.ndarray], write) -> bool:  # type: ignore[no-untyped-def]
        write(np.concatenate(parts))
        return True

    def submit_job(self, request_id: str, row_start: int, rows: int, job) -> bool:  # type: ignore[no-untyped-def]
        job()
        return True

    def fail(self, request_id: str, message: str) -> None:
        self.failed.append(message)
        from kldtui.formats.chunks import write_error_marker

        write_error_marker(self.folder, request_id, message)

    def log(self, message: str) -> None:
        print(message, file=sys.stderr)

    def device_sync_allowed(self):  # type: ignore[no-untyped-def]
        import contextlib

        return contextlib.nullcontext()
