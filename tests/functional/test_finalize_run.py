"""Finalize: chunks (written by the one chunk writer) merged into logits files + manifest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kldtui.capture_modes.logits as logits_mode
from kldtui.errors import BadInput, Interrupted, StageFailed
from kldtui.events import Cancel, Event, WindowState
from kldtui.formats.chunks import write_chunk, write_error_marker
from kldtui.formats.safetensors_io import RowReader, read_header
from kldtui.formats.suite import Suite, check_manifest_matches_suite, load_logits_manifest, sha256_file
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.finalize import finalize_window, run_finalize
from kldtui.workspace import Workspace

VOCAB = 64


def finalize_run(suite: Suite, windows: list, run: Path, out: Path, **kwargs: Any) -> Path:
    """The finalize stage on ``run`` (a capture run folder) into ``out``, as kldtui finalize calls it."""
    workspace = Workspace.for_capture(suite.root, run.parent, run.name, out)
    return run_finalize(workspace, suite=suite, windows=windows, **kwargs)


def make_run(tmp_path: Path, windows: int = 2, tokens: int = 300, vocab: int = VOCAB,
             edges: tuple[int, ...] = (0, 100, 256)) -> tuple[Suite, Path, dict[int, np.ndarray]]:
    """A suite and a capture run folder whose chunks have irregular edges."""
    rng = np.random.default_rng(3)
    suite = write_suite(tmp_path / "suite", [("prose" if i % 2 == 0 else "code",
                                              rng.integers(0, vocab, tokens).tolist())
                                             for i in range(windows)])
    run = tmp_path / "capture" / "run1"
    data = {}
    for w in suite.windows:
        logits = rng.standard_normal((tokens - 1, vocab)).astype(np.float32) * 3
        data[w.index] = logits
        bounds = [*edges, tokens - 1]
        request = f"cmpl-w{w.index}-0-abcdef01"
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            write_chunk(tmp_path / "server", request, start, logits[start:end], vocab)
        run.mkdir(parents=True, exist_ok=True)
        (tmp_path / "server" / request).rename(run / w.chunk_dir_name)
    return suite, run, data


def test_finalize_run_writes_files_and_manifest(tmp_path: Path) -> None:
    suite, run, data = make_run(tmp_path)
    out = tmp_path / "final"
    runtime = {"vllm_version": "0.32.0", "model": "/models/x", "args": ["--max-num-seqs", "1"]}
    events: list[Event] = []
    path = finalize_run(suite, suite.windows, run, out, runtime=runtime, emit=events.append)
    manifest = load_logits_manifest(path)
    check_manifest_matches_suite(manifest, suite, suite.windows)
    assert manifest.runtime == runtime and manifest.vocab_size == VOCAB
    assert manifest.window_range == (0, 2) and manifest.raw["kind"] == "candidate"
    for w in suite.windows:
        entry = manifest.entry(w.index)
        file = out / entry.file
        assert entry.sha256 == sha256_file(file) and entry.size_bytes == file.stat().st_size
        header = read_header(file)
        assert header.metadata["window_index"] == str(w.index)
        assert header.metadata["token_ids_json_sha256"] == w.token_ids_json_sha256
        with RowReader(file) as r:
            np.testing.assert_array_equal(r.read(0, r.rows), data[w.index])
    assert sorted(n for n in os.listdir(out) if not n.startswith(".")) == [
        "logits_000.safetensors", "logits_001.safetensors", "manifest.json"]
    from kldtui.formats.verified_cache import VerifiedCache  # hash once: finalize's hashes recorded

    assert VerifiedCache().lookup(out / "logits_000.safetensors") is not None
    states = [(e.window_index, e.state) for e in events if isinstance(e, WindowState)]
    assert states == [(0, "finalizing"), (0, "finalized"), (1, "finalizing"), (1, "finalized")]

    # rerun: finished files are kept as they are (resumable), with or without the old manifest
    inode = (out / "logits_000.safetensors").stat().st_ino
    for drop_manifest in (False, True):
        if drop_manifest:
            (out / "manifest.json").unlink()
        events.clear()
        again = load_logits_manifest(finalize_run(suite, suite.windows, run, out, runtime=runtime,
                                                  emit=events.append))
        assert (out / "logits_000.safetensors").stat().st_ino == inode
        assert {i: e.sha256 for i, e in again.entries.items()} == \
            {i: e.sha256 for i, e in manifest.entries.items()}
        assert all(e.figures.get("skipped") for e in events if isinstance(e, WindowState))
    # the chunks may be deleted once finalized: a rerun still keeps the files
    shutil.rmtree(run)
    again = load_logits_manifest(finalize_run(suite, suite.windows, run, out, runtime=runtime))
    assert again.entry(1).sha256 == manifest.entry(1).sha256


def test_windows_finalized_in_two_steps_share_one_manifest(tmp_path: Path) -> None:
    suite, run, _ = make_run(tmp_path, windows=3)
    out = tmp_path / "final"
    finalize_run(suite, suite.windows[:1], run, out, runtime=None)
    manifest = load_logits_manifest(finalize_run(suite, suite.windows[1:], run, out, runtime=None))
    assert sorted(manifest.entries) == [0, 1, 2] and manifest.window_range == (0, 3)


def test_existing_file_is_never_overwritten_without_force(tmp_path: Path) -> None:
    suite, run, data = make_run(tmp_path)
    out = tmp_path / "final"
    w0, w1 = suite.windows
    finalize_window(suite, w0, run / w0.chunk_dir_name, out, expected_vocab=VOCAB)
    # window 1's name now holds window 0's data: it does not match window 1
    os.link(out / "logits_000.safetensors", out / "logits_001.safetensors")
    with pytest.raises(BadInput, match=r"logits_001.safetensors: already finalized but does not match "
                                       r"window 001 .*pass --force"):
        finalize_window(suite, w1, run / w1.chunk_dir_name, out, expected_vocab=VOCAB)
    written = finalize_window(suite, w1, run / w1.chunk_dir_name, out, expected_vocab=VOCAB, force=True)
    assert written.sha256 == sha256_file(out / "logits_001.safetensors")
    with RowReader(out / "logits_001.safetensors") as r:
        np.testing.assert_array_equal(r.read(0, r.rows), data[1])
    with RowReader(out / "logits_000.safetensors") as r:  # the linked file was replaced, not written into
        np.testing.assert_array_equal(r.read(0, r.rows), data[0])


@pytest.mark.parametrize("fault", ["gap", "overlap", "nan", "marker", "vocab", "renamed"])
def test_bad_chunks_leave_no_file(tmp_path: Path, fault: str) -> None:
    suite, run, data = make_run(tmp_path, windows=1)
    w = suite.windows[0]
    folder = run / w.chunk_dir_name
    if fault == "gap":
        (folder / "logits.rows-000100-000256.safetensors").unlink()
        match = r"rows 100\.\.256 are missing"
    elif fault == "nan":
        (folder / "logits.rows-000256-000299.safetensors").unlink()
        bad = data[0][256:].copy()
        bad[7, 3] = np.nan
        write_chunk(tmp_path / "server", "cmpl-w0-0-abcdef01", 256, bad, VOCAB)
        os.rename(tmp_path / "server" / "cmpl-w0-0-abcdef01" / "logits.rows-000256-000299.safetensors",
                  folder / "logits.rows-000256-000299.safetensors")
        match = (r"logits\.rows-000256-000299\.safetensors: window 000 \(prose\): NaN or Inf in the captured "
                 r"logits at rows 263 \(NaN, \+Inf or no finite logit in a row\); capture and finalize this "
                 r"window again$")
    elif fault == "overlap":
        write_chunk(folder.parent, folder.name, 50, data[0][50:150], VOCAB)
        match = r"chunks overlap at row 50"
    elif fault == "renamed":
        os.rename(folder / "logits.rows-000256-000299.safetensors",
                  folder / "logits.rows-000257-000300.safetensors")
        match = r"metadata row_start=256 disagrees with 257"
    elif fault == "marker":
        write_error_marker(run, w.chunk_dir_name, "could not write rows 0-256: No space left on device")
        match = r"capture hook reported an error: could not write rows 0-256: No space left"
    else:
        match = r"vocabulary 64, expected 65 \(--expected-vocab\)"
    out = tmp_path / "final"
    with pytest.raises(BadInput, match=match):
        finalize_window(suite, w, folder, out, expected_vocab=65 if fault == "vocab" else None)
    assert not out.exists() or os.listdir(out) == []


def test_cancel_leaves_no_file(tmp_path: Path) -> None:
    suite, run, _ = make_run(tmp_path, windows=1)
    cancel = Cancel()

    def emit(event: Event) -> None:
        if isinstance(event, WindowState) and event.state == "finalizing":
            cancel.set()

    out = tmp_path / "final"
    with pytest.raises(Interrupted):
        finalize_run(suite, suite.windows, run, out, runtime=None, emit=emit, cancel=cancel)
    assert os.listdir(out) == []


def test_peak_memory_is_about_one_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, run, _ = make_run(tmp_path, windows=1, tokens=2048, vocab=2048, edges=(0, 256, 512, 1024))
    monkeypatch.setattr(logits_mode, "BLOCK_BYTES", 1 << 20)
    window_bytes = 2047 * 2048 * 4  # 16 MiB
    tracemalloc.start()
    try:
        finalize_window(suite, suite.windows[0], run / suite.windows[0].chunk_dir_name, tmp_path / "f",
                        expected_vocab=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * (1 << 20) < window_bytes


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from kldtui.errors import KldError
from kldtui.stages.finalize import finalize_window
from kldtui.formats.suite import load_suite
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))
suite = load_suite(sys.argv[1])
w = suite.windows[0]
try:
    finalize_window(suite, w, Path(sys.argv[2]) / w.chunk_dir_name, Path(sys.argv[3]), expected_vocab=None)
except KldError as exc:
    print(type(exc).__name__, exc)
    sys.exit(exc.exit_code)
"""


def test_full_disk_while_finalizing_leaves_nothing_that_looks_complete(tmp_path: Path) -> None:
    # 299 rows x 64 x 4 bytes = 76 kB: the 40 kB file-size limit makes a write fail mid-file
    # (EFBIG, as a full disk gives ENOSPC).
    suite, run, _ = make_run(tmp_path, windows=1)
    out = tmp_path / "final"
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, str(suite.root), str(run), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "DiskFull" in proc.stdout and "logits_000.safetensors: could not be written" in proc.stdout
    assert "it needs 75.1 KiB" in proc.stdout and "File too large" in proc.stdout
    assert os.listdir(out) == []


def test_disk_full_at_publication_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import kldtui.formats.logits_writer as writer_mod

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    suite, run, _ = make_run(tmp_path, windows=1)
    monkeypatch.setattr(writer_mod.os, "fsync", no_space)
    out = tmp_path / "final"
    with pytest.raises(StageFailed, match=r"logits_000.safetensors: could not be written .*No space left"):
        finalize_run(suite, suite.windows, run, out, runtime=None)
    assert os.listdir(out) == []


def test_full_disk_says_which_windows_were_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11: on a full disk finalize names the file it could not write, the space it needed,
    and the windows already published; nothing partial has a final name; a rerun finishes."""
    import errno

    import kldtui.formats.logits_writer as writer_mod

    suite, run, _ = make_run(tmp_path, windows=3)
    out = tmp_path / "final"
    real_open = open

    class Full:
        def __init__(self, handle):  # type: ignore[no-untyped-def]
            self.handle = handle

        def write(self, data):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.handle, name)

    def fake_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        handle = real_open(path, *args, **kwargs)
        return Full(handle) if ".logits_002." in str(path) else handle

    monkeypatch.setattr(writer_mod, "open", fake_open, raising=False)
    with pytest.raises(StageFailed) as info:
        finalize_run(suite, suite.windows, run, out, runtime=None)
    message = str(info.value)
    assert "logits_002.safetensors: could not be written (it needs" in message and "No space left" in message
    assert "published before the failure: window(s) 0, 1" in message
    assert sorted(n for n in os.listdir(out) if not n.startswith(".kldtui-")) == [
        "logits_000.safetensors", "logits_001.safetensors", "manifest.json"]
    # the manifest is kept current window by window: it lists exactly what was published
    assert sorted(load_logits_manifest(out).entries) == [0, 1]
    monkeypatch.undo()
    finalize_run(suite, suite.windows, run, out, runtime=None)
    assert load_logits_manifest(out).window_count == 3


def test_full_disk_for_a_json_output_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import kldtui.formats.atomic as atomic_mod
    from kldtui.errors import DiskFull

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic_mod.os, "fsync", no_space)
    target = tmp_path / "report.json"
    with pytest.raises(DiskFull, match=r"report.json: could not be written \(it needs 1[0-9] B\)"):
        atomic_mod.write_json_atomic(target, {"a": 1})
    assert os.listdir(tmp_path) == []
