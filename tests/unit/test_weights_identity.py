"""The fingerprint of a candidate's weights files, which joins its identity (kldtui.servers.base)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from kldtui.formats.weights_identity import FINGERPRINT_HEX, SAMPLE, weights_content
from kldtui.servers.base import WEIGHTS_CONTENT, identity_changes, server_identity
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


def test_a_change_at_either_end_or_in_size_is_seen_and_one_in_the_middle_is_not(tmp_path: Path) -> None:
    base = bytearray(3 * SAMPLE)
    path = tmp_path / "m.gguf"
    path.write_bytes(bytes(base))
    first = weights_content(path)
    for where in (0, SAMPLE - 1, 2 * SAMPLE, 3 * SAMPLE - 1):
        changed = bytearray(base)
        changed[where] = 1
        path.write_bytes(bytes(changed))
        assert weights_content(path) != first, where
    middle = bytearray(base)
    middle[SAMPLE + 5] = 1  # documented: only the ends are read
    path.write_bytes(bytes(middle))
    assert weights_content(path) == first
    path.write_bytes(bytes(base) + b"\0")
    assert weights_content(path) != first


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
    assert WEIGHTS_CONTENT not in server_identity(EmbeddedConfig())  # no local weights: settings alone
    changed = dict(identity, **{WEIGHTS_CONTENT: "0" * FINGERPRINT_HEX})
    said = identity_changes(changed, identity)
    assert said == (f"the weights' files changed (content '{'0' * FINGERPRINT_HEX}', now "
                    f"'{identity[WEIGHTS_CONTENT]}')")
    # a record of an earlier version holds no fingerprint: not a change
    earlier = {k: v for k, v in identity.items() if k != WEIGHTS_CONTENT}
    assert identity_changes(earlier, identity) is None
