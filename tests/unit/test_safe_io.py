"""kldtui.formats.safe_io.read_bytes with a limit: the content whole, EFBIG beyond the limit, and
the memory asked for is what the file holds, not the limit."""

from __future__ import annotations

import errno
import tracemalloc
from pathlib import Path

import pytest

from kldtui.formats.safe_io import read_bytes, read_text


def test_a_small_file_under_a_large_limit_reads_whole_without_allocating_the_limit(tmp_path: Path) -> None:
    f = tmp_path / "small.json"
    f.write_bytes(b'{"a": 1}')
    tracemalloc.start()
    try:
        data = read_bytes(f, limit=512 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == b'{"a": 1}'
    assert peak < 1024 * 1024, f"asked for {peak} bytes to read 8"


@pytest.mark.parametrize("size", [0, 1, 65_535, 65_536, 65_537, 200_000])
def test_content_at_and_around_the_limit(tmp_path: Path, size: int) -> None:
    f = tmp_path / "x.bin"
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    f.write_bytes(payload)
    assert read_bytes(f, limit=size) == payload
    assert read_bytes(f, limit=size + 10) == payload
    if size:
        with pytest.raises(OSError) as info:
            read_bytes(f, limit=size - 1)
        assert info.value.errno == errno.EFBIG


def test_a_file_that_grows_while_read_is_still_held_to_the_limit(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The size seen at open is a hint only: a file that grows past it is read on, up to the limit."""
    import os

    f = tmp_path / "grows.txt"
    f.write_text("a" * 10)
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 3,
                               int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    monkeypatch.setattr("kldtui.formats.safe_io.os.fstat", stale_fstat)
    assert read_text(f, limit=100) == "a" * 10
    with pytest.raises(OSError):
        read_text(f, limit=5)


def test_a_file_over_the_limit_by_its_size_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    """A sparse file of a byte past the limit was read (the limit's worth of memory) before EFBIG."""
    f = tmp_path / "huge.json"
    with f.open("wb") as handle:
        handle.seek(256 * 1024 * 1024)
        handle.write(b" ")
    tracemalloc.start()
    try:
        with pytest.raises(OSError) as caught:
            read_bytes(f, limit=256 * 1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.errno == errno.EFBIG and caught.value.filename == str(f)
    assert peak < 1024 * 1024, peak
