"""Peak disk said before a run, and hash once (finalize's hash in the verified-file cache)."""

from __future__ import annotations

import numpy as np

from kldtui.formats.chunks import write_chunk
from kldtui.formats.suite_writer import write_suite
from kldtui.formats.verified_cache import VerifiedCache
from kldtui.stages.finalize import finalize_window
from kldtui.workflow.diskplan import GIB, disk_need, kimi_need, window_bytes


def test_peak_is_the_finalized_files_plus_two_windows_of_chunks():
    need = disk_need([2048, 2048, 1024, 2048], 163840)
    assert need.chunks == 2 * window_bytes(2048, 163840)
    assert need.finalized > 3 * window_bytes(2048, 163840) + window_bytes(1024, 163840)
    kept = disk_need([2048, 2048, 1024, 2048], 163840, keep_chunks=True)
    assert kept.chunks == 3 * window_bytes(2048, 163840) + window_bytes(1024, 163840)


def test_kimi_figures():
    need = kimi_need()
    assert 39.9 < need.finalized / GIB < 40.1 and 2.4 < need.chunks / GIB < 2.6
    assert "32 finalized windows" in need.describe()
    assert kimi_need(keep_chunks=True).total > 79 * GIB


def test_an_exported_lm_head_is_in_the_total_and_said_in_the_line():
    """Hidden mode's candidate head (Kimi K3's: 163,840 x 7,168 BF16 values, 2.2 GiB) is written
    beside the finalized files: the peak counts it and the line says what it is."""
    import dataclasses

    need = dataclasses.replace(kimi_need(), head=2 * 163840 * 7168)
    assert need.total == kimi_need().total + 2 * 163840 * 7168 and need.kept == need.finalized + need.head
    assert need.describe().endswith(" + capture chunks 2.50 GiB + the candidate's LM head 2.19 GiB (exported "
                                    "from its checkpoint)"), need.describe()
    assert "LM head" not in kimi_need().describe()


def test_finalize_records_its_hash_so_nothing_hashes_the_file_again(tmp_path):
    rng = np.random.default_rng(0)
    suite = write_suite(tmp_path / "suite", [("prose", rng.integers(0, 50, 40).tolist())])
    window = suite.windows[0]
    chunks = tmp_path / "chunks"
    write_chunk(chunks, "r", 0, rng.normal(size=(39, 50)).astype(np.float32), 50)
    out = tmp_path / "ref"
    written = finalize_window(suite, window, chunks / "r", out, expected_vocab=50)
    assert VerifiedCache(out).lookup(out / written.file) == written.sha256
