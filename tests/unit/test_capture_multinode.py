"""The capture client on a multi-node server: which node wrote where, chunks still on their way."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from kldtui.formats.chunks import LOGITS_CHUNKS, write_chunk
from kldtui.hook import vllm_plugin as vp
from kldtui.hook.writer import pending_name
from kldtui.stages import capture as cap


def test_no_folder_without_writer_records_names_the_multi_node_cause(tmp_path: Path) -> None:
    hint = cap.no_folder_hint(tmp_path)
    assert "no writer rank has recorded itself" in hint and "another node" in hint
    assert "shared by all nodes" in hint


def test_no_folder_with_writer_records_lists_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(vp, "_announced", set())
    vp.announce_writer(str(tmp_path))  # what the writer rank leaves at its first chunk
    (record,) = cap.writer_records(tmp_path)
    assert record["folder"] == str(tmp_path.resolve())
    hint = cap.no_folder_hint(tmp_path)
    assert f"{record['host']}:{tmp_path.resolve()} (pid {record['pid']})" in hint


def test_pending_chunks_are_waited_for_after_the_answer(tmp_path: Path) -> None:
    window = SimpleNamespace(scored_positions=8, captured_rows=8)
    folder = tmp_path / "kldtui-x-0-1"
    folder.mkdir()
    write_chunk(tmp_path, "kldtui-x-0-1", 0, np.zeros((4, 3), np.float32), 3)
    (folder / pending_name(4, 8)).touch()

    def land_late() -> None:
        time.sleep(cap.SETTLE_SECONDS + 0.5)  # later than the plain settle time
        write_chunk(tmp_path, "kldtui-x-0-1", 4, np.zeros((4, 3), np.float32), 3)
        (folder / pending_name(4, 8)).unlink()

    t = threading.Thread(target=land_late)
    t.start()
    folders = cap.settled_folders(lambda: [folder], window)  # type: ignore[arg-type]
    t.join()
    assert folders == [folder] and LOGITS_CHUNKS.rows_landed(folder) == 8


def test_pending_chunks_are_not_waited_for_once_the_server_died(tmp_path: Path) -> None:
    window = SimpleNamespace(scored_positions=8, captured_rows=8)
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / pending_name(0, 8)).touch()
    started = time.monotonic()
    cap.settled_folders(lambda: [folder], window, lambda: "exited with 1")  # type: ignore[arg-type]
    assert time.monotonic() - started < cap.PENDING_SECONDS


def test_chunks_from_another_node_are_reported(tmp_path: Path, monkeypatch) -> None:
    write_chunk(tmp_path, "r", 0, np.zeros((2, 3), np.float32), 3)
    window = SimpleNamespace(num_tokens=3, label="window 000", scored_positions=2, captured_rows=2)
    checked = cap.check_chunk_dir(tmp_path / "r", window)  # type: ignore[arg-type]
    host, folder = cap._written_by(checked)  # type: ignore[misc]
    assert folder == str(tmp_path) and host == cap.writer_host()
