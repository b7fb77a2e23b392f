"""A request the capture client gave up on (it removed the request's folder) is not a server error."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from kldtui.formats.chunks import ERROR_MARKER, abandoned_by_client
from kldtui.hook import vllm_plugin


def test_abandoned_only_when_the_folder_is_gone(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    assert abandoned_by_client(tmp_path, "gone", FileNotFoundError("x"))
    assert not abandoned_by_client(tmp_path, "kept", FileNotFoundError("x"))
    assert not abandoned_by_client(tmp_path, "gone", PermissionError("x"))


def test_hook_logs_no_error_and_leaves_no_marker_for_an_abandoned_request(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        vllm_plugin._on_error("kldtui-win-000", 256, str(tmp_path))(FileNotFoundError("no such file"))
    assert not list(tmp_path.iterdir())  # the folder is not made again, no marker
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("gave up on the request" in r.getMessage() for r in caplog.records)


def test_hook_still_fails_a_request_whose_folder_is_there(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "kldtui-win-000").mkdir()
    vllm_plugin._on_error("kldtui-win-000", 256, str(tmp_path))(FileNotFoundError("disk vanished"))
    assert (tmp_path / "kldtui-win-000" / ERROR_MARKER).is_file()
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_embedded_server_skips_rows_of_an_abandoned_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.embedded import server
    from kldtui.formats import chunks

    def removed_meanwhile(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("the client removed the folder")

    monkeypatch.setattr(chunks, "write_chunk", removed_meanwhile)
    engine = server.Engine(server.ServerConfig(capture_dir=tmp_path, vocab_size=64))
    engine._capture("win-001", 0, 4, np.zeros((4, 64), dtype=np.float32))
    err = capsys.readouterr().err
    assert "ERROR" not in err and "gave up on the request" in err
    assert not list(tmp_path.iterdir())
