"""Reading a logits file's rows for the engine: zero-copy ``mmap`` blocks where the file holds
the whole tensor, else ``pread`` into a buffer (:class:`~kldtui.formats.safetensors_io.RowReader`)."""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from kldtui import settings
from kldtui.formats.safetensors_io import RowReader


class RowMap:
    """Zero-copy row blocks of a logits file for the CPU kernels: ``mmap`` instead of ``pread``.

    Saves one copy of every byte (the kernels read the page cache directly); each block's pages
    are unmapped again after use (``MADV_DONTNEED``; they stay in the page cache), so the
    process's resident memory stays at about one block per thread.  Used only when the file holds
    the whole tensor (checked first: a short file would fault on access), else ``ok`` is False
    and the caller reads with ``pread``, which names a truncated file in a BadInput."""

    def __init__(self, reader: RowReader, use_mmap: bool) -> None:
        self.ok = False
        self._mm: mmap.mmap | None = None
        self.begin = reader.info.begin
        self.row_bytes = reader.cols * reader.np_dtype.itemsize
        self.cols = reader.cols
        self.dtype = reader.np_dtype
        if not use_mmap or settings.NO_MMAP.get():
            return
        try:  # the reader's own descriptor: the file whose header was checked, never a second open
            if os.fstat(reader.fileno()).st_size < self.begin + reader.rows * self.row_bytes:
                return
            self._mm = mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return
        self.ok = True

    def rows(self, start: int, stop: int) -> np.ndarray:
        assert self._mm is not None
        return np.frombuffer(self._mm, dtype=self.dtype, count=(stop - start) * self.cols,
                             offset=self.begin + start * self.row_bytes).reshape(stop - start, self.cols)

    def release(self, start: int, stop: int) -> None:
        if self._mm is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        lo = (self.begin + start * self.row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        hi = self.begin + stop * self.row_bytes
        with contextlib.suppress(OSError, ValueError):
            self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def __enter__(self) -> RowMap:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mm is not None:
            with contextlib.suppress(BufferError):  # a block still referenced: closed when collected
                self._mm.close()
            self._mm = None


__all__ = ["RowMap"]
