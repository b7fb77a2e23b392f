"""The fingerprint of a candidate's weights files, which joins its identity (kldtui.servers.base)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from kldtui.formats.weights_identity import (
    FINGERPRINT_HEX,
    INTERIOR_SAMPLES,
    SAMPLE,
    interior_offsets,
    weights_content,
    weights_interior,
)
from kldtui.servers.base import WEIGHTS_CONTENT, WEIGHTS_INTERIOR, identity_changes, server_identity
from kldtui.servers.embedded import EmbeddedConfig


def _file(path: Path, size: int, fill: int = 0) -> Path:
    path.write_bytes(bytes([fill]) * size)
    return path


def test_the_same_content_reads_alike_wherever_and_whenever_it_was_written(tmp_path: Path) -> None:
    a = _file(tmp_path / "q4.gguf", 3 * SAMPLE)
    first = weights_content(a)
    assert first is not None and len(first) == FINGERPRINT_HEX
    os.utime(a, ns=(5, 5))  # touched
    assert weights_content(a) == first
    (tmp_path / "copy").mkdir()
    copy = Path(shutil.copy(a, tmp_path / "copy" / "q4.gguf"))  # copied (another inode and time)
    assert weights_content(copy) == first
    assert weights_content(tmp_path / "copy") == first  # the folder of one GGUF model


def test_a_change_at_either_end_or_in_size_changes_the_ends_fingerprint(tmp_path: Path) -> None:
    base = bytearray(3 * SAMPLE)
    path = tmp_path / "m.gguf"
    path.write_bytes(bytes(base))
    first = weights_content(path)
    for where in (0, SAMPLE - 1, 2 * SAMPLE, 3 * SAMPLE - 1):
        changed = bytearray(base)
        changed[where] = 1
        path.write_bytes(bytes(changed))
        assert weights_content(path) != first, where
    path.write_bytes(bytes(base) + b"\0")
    assert weights_content(path) != first


def test_a_change_in_the_middle_is_seen_by_the_interior_blocks_unless_it_falls_between_them(
        tmp_path: Path) -> None:
    # a file far larger than the blocks read: 200 blocks of SAMPLE bytes, of which 32 are read
    size = 200 * SAMPLE
    offsets = interior_offsets(size)
    assert len(offsets) == INTERIOR_SAMPLES
    assert offsets[0] > SAMPLE and offsets[-1] + SAMPLE <= size - SAMPLE  # between the ends, apart
    assert all(b - a >= SAMPLE for a, b in zip(offsets, offsets[1:], strict=False))
    path = tmp_path / "m.gguf"
    base = bytearray(size)
    path.write_bytes(bytes(base))
    ends, inner = weights_content(path), weights_interior(path)
    assert inner is not None and inner != ends
    for where in (offsets[0], offsets[len(offsets) // 2] + SAMPLE // 2, offsets[-1] + SAMPLE - 1):
        changed = bytearray(base)
        changed[where] = 7
        path.write_bytes(bytes(changed))
        assert weights_content(path) == ends, where  # the ends alone would not see it
        assert weights_interior(path) != inner, where
    between = bytearray(base)
    between[offsets[0] + SAMPLE] = 7  # documented: a change between the blocks goes unseen
    assert offsets[0] + SAMPLE < offsets[1]
    path.write_bytes(bytes(between))
    assert (weights_content(path), weights_interior(path)) == (ends, inner)


def test_small_files_have_no_interior_blocks(tmp_path: Path) -> None:
    assert interior_offsets(2 * SAMPLE) == [] and interior_offsets(SAMPLE // 2) == []
    assert len(interior_offsets(2 * SAMPLE + 1)) == 1  # one byte between the ends: read as one block
    path = _file(tmp_path / "tiny.gguf", 100)
    assert weights_interior(path) is not None


def test_a_checkpoint_folder_counts_its_shards_and_their_names(tmp_path: Path) -> None:
    for i in (1, 2):
        shard = tmp_path / f"m-0000{i}-of-00002.safetensors"
        save_file({f"l{i}.weight": np.full((8, 8), i, np.float16)}, str(shard))
    first = weights_content(tmp_path)
    save_file({"l2.weight": np.full((8, 8), 7, np.float16)}, str(tmp_path / "m-00002-of-00002.safetensors"))
    assert weights_content(tmp_path) != first
    (tmp_path / "m-00002-of-00002.safetensors").unlink()
    assert weights_content(tmp_path) not in (None, first)


def test_nothing_to_read_is_no_fingerprint_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    assert weights_content(None) is None
    assert weights_content(tmp_path / "missing.gguf") is None
    assert weights_content(tmp_path) is None  # a folder without weights
    os.mkfifo(tmp_path / "w.gguf")
    out: list[str | None] = []
    reader = threading.Thread(target=lambda: out.append(weights_content(tmp_path / "w.gguf")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and out == [None]


def test_the_identity_carries_it_and_a_change_reads_as_one(tmp_path: Path) -> None:
    weights = tmp_path / "q.safetensors"
    save_file({"w": np.zeros((4,), np.float16)}, str(weights))
    config = EmbeddedConfig(weights=weights)
    identity = server_identity(config)
    assert identity[WEIGHTS_CONTENT] == weights_content(weights)
    assert identity[WEIGHTS_INTERIOR] == weights_interior(weights)
    bare = server_identity(EmbeddedConfig())
    assert WEIGHTS_CONTENT not in bare and WEIGHTS_INTERIOR not in bare  # no local weights: settings alone
    zeros = "0" * FINGERPRINT_HEX
    changed = dict(identity, **{WEIGHTS_CONTENT: zeros})
    said = identity_changes(changed, identity)
    assert said == f"the weights' files changed (content '{zeros}', now '{identity[WEIGHTS_CONTENT]}')"
    both = dict(identity, **{WEIGHTS_CONTENT: zeros, WEIGHTS_INTERIOR: zeros})
    assert identity_changes(both, identity) == (
        f"the weights' files changed (content '{zeros}', now '{identity[WEIGHTS_CONTENT]}'; "
        f"interior '{zeros}', now '{identity[WEIGHTS_INTERIOR]}')")
    # a record of an earlier version holds no fingerprint, or the ends' only: compared on what it has
    earlier = {k: v for k, v in identity.items() if k not in (WEIGHTS_CONTENT, WEIGHTS_INTERIOR)}
    assert identity_changes(earlier, identity) is None
    ends_only = {k: v for k, v in identity.items() if k != WEIGHTS_INTERIOR}
    assert identity_changes(ends_only, identity) is None
    assert identity_changes(dict(ends_only, **{WEIGHTS_CONTENT: zeros}), identity) is not None


def test_a_requantization_of_one_size_with_alike_ends_is_another_candidate(tmp_path: Path) -> None:
    # the case the interior blocks are for: the same header and last tensor, other values in between
    def shard(middle: float) -> None:
        save_file({"a.weight": np.zeros((8, 4096), np.float16),
                   "b.weight": np.full((512, 512), middle, np.float16),
                   "z.weight": np.ones((8, 4096), np.float16)}, str(tmp_path / "q.safetensors"))
    shard(0.25)
    first = server_identity(EmbeddedConfig(weights=tmp_path / "q.safetensors"))
    shard(0.5)
    now = server_identity(EmbeddedConfig(weights=tmp_path / "q.safetensors"))
    assert now[WEIGHTS_CONTENT] == first[WEIGHTS_CONTENT]
    said = identity_changes(first, now)
    assert said is not None and said.startswith("the weights' files changed (interior '"), said
