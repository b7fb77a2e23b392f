"""The one chunk writer (kldtui.formats.chunks.write_chunk) against docs/FORMATS.md."""

from __future__ import annotations

import errno
import json
import os
import socket
import struct

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from kldtui.formats.chunks import (
    CHUNK_NAME,
    ERROR_MARKER,
    chunk_file_name,
    sanitize_request_id,
    write_chunk,
    write_error_marker,
)


def _header(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def test_chunk_layout_metadata_and_values(tmp_path):
    logits = np.arange(3 * 7, dtype=np.float32).reshape(3, 7) / 7.0
    path = write_chunk(tmp_path, "cmpl-win/a:b-0-1f", 256, logits, vocab_size=5)
    assert path == tmp_path / "cmpl-win_a_b-0-1f" / "logits.rows-000256-000259.safetensors"
    assert CHUNK_NAME.match(path.name)
    header = _header(path)
    assert header["__metadata__"] == {"request_id": "cmpl-win/a:b-0-1f", "row_start": "256",
                                      "row_end": "259", "vocab_size": "5",
                                      "writer_host": socket.gethostname(), "writer_dir": str(tmp_path)}
    assert header["logits"]["dtype"] == "F32" and header["logits"]["shape"] == [3, 5]
    np.testing.assert_array_equal(load_file(path)["logits"], logits[:, :5])  # padded columns dropped
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_bf16_is_copied_in_its_dtype_then_widened(tmp_path):
    src = torch.randn(4, 10, dtype=torch.float32).to(torch.bfloat16)
    path = write_chunk(tmp_path, "r", 0, src, vocab_size=8)
    got = load_file(path)["logits"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, src[:, :8].float().numpy())


def test_never_overwrites_and_keeps_the_first(tmp_path):
    first = np.ones((2, 4), dtype=np.float32)
    path = write_chunk(tmp_path, "req", 0, first, 4)
    with pytest.raises(FileExistsError):
        write_chunk(tmp_path, "req", 0, np.zeros((2, 4), dtype=np.float32), 4)
    np.testing.assert_array_equal(load_file(path)["logits"], first)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize("rid", ["_warmup_0", "_dummy_req_17"])
def test_warmup_and_dummy_requests_are_not_captured(tmp_path, rid):
    assert write_chunk(tmp_path, rid, 0, np.ones((2, 4), dtype=np.float32), 4) is None
    assert list(tmp_path.iterdir()) == []


def test_bad_shape_is_refused_without_a_file(tmp_path):
    with pytest.raises(ValueError):
        write_chunk(tmp_path, "req", 0, np.ones((2, 3), dtype=np.float32), 4)
    assert not (tmp_path / "req").exists()


def test_names_and_error_marker(tmp_path):
    assert sanitize_request_id("cmpl-a b/c-0-ff") == "cmpl-a_b_c-0-ff"
    assert chunk_file_name(1792, 2047) == "logits.rows-001792-002047.safetensors"
    write_error_marker(tmp_path, "x/y", "disk\nfull")
    write_error_marker(tmp_path, "x/y", "again")
    where = f" [writer {socket.gethostname()}:{tmp_path}]"  # which node wrote where
    lines = (tmp_path / "x_y" / ERROR_MARKER).read_text().splitlines()
    assert lines == ["disk full" + where, "again" + where]


@pytest.mark.parametrize("err", [errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS])
def test_file_system_without_hard_links_publishes_by_exclusive_rename(tmp_path, monkeypatch, err):
    """FUSE / object-store mounts refuse os.link: chunks still land, still never overwritten."""
    def no_link(src, dst, *a, **kw):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "link", no_link)
    first = np.ones((2, 4), dtype=np.float32)
    path = write_chunk(tmp_path, "req", 0, first, 4)
    np.testing.assert_array_equal(load_file(path)["logits"], first)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the temporary name is gone
    with pytest.raises(FileExistsError):
        write_chunk(tmp_path, "req", 0, np.zeros((2, 4), dtype=np.float32), 4)
    np.testing.assert_array_equal(load_file(path)["logits"], first)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_without_renameat2_the_checked_rename_still_refuses(tmp_path, monkeypatch):
    from kldtui.formats import atomic

    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "no")))
    monkeypatch.setattr(atomic, "_renameat2", None)
    path = write_chunk(tmp_path, "req", 0, np.ones((2, 4), dtype=np.float32), 4)
    with pytest.raises(FileExistsError):
        write_chunk(tmp_path, "req", 0, np.zeros((2, 4), dtype=np.float32), 4)
    assert [p.name for p in path.parent.iterdir()] == [path.name]
