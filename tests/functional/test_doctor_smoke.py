"""`kldtui doctor --smoke` against the real embedded server (a subprocess on 127.0.0.1)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from kldtui.cli.main import main
from kldtui.stages.serve import ServerProcess
from kldtui.workflow import smoke as sm


def _server(tmp_path: Path, extra: list[str] | None = None) -> ServerProcess:
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "tiny",
            "--vocab-size", "1024", "--max-num-batched-tokens", "128", *(extra or [])]
    return ServerProcess(argv, capture_dir=tmp_path / "cap", served_model_name="tiny",
                         stop_timeouts=(5.0, 3.0, 2.0))


def test_smoke_passes_and_cleans_up(tmp_path, capsys):
    with _server(tmp_path) as server:
        server.wait_ready(timeout=60)
        code = main(["doctor", "--smoke", "--url", server.base_url, "--capture-dir",
                     str(server.capture_dir), "--tokens", "300"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "3 chunks, rows 0..298" in out  # 300 tokens: 299 scored rows
        assert "match the server's prompt logprobs" in out
        assert not [p for p in server.capture_dir.iterdir() if not p.name.startswith(".")]


def test_smoke_fails_on_rows_that_are_not_the_scored_logits(tmp_path, monkeypatch):
    """A server whose chunks are not the logits it scored (e.g. another computation) is caught."""
    real = sm._compare_logprobs

    def tampered(mode, checked, ids, prompt_logprobs):
        with open(checked.chunks[0].path, "r+b") as f:  # shift one logit of the first row
            f.seek(-4 * 1024 * checked.chunks[0].rows, 2)
            row = np.frombuffer(f.read(4 * 1024), dtype="<f4").copy()
            row[ids[1]] += 0.5
            f.seek(-4 * 1024 * checked.chunks[0].rows, 2)
            f.write(row.tobytes())
        return real(mode, checked, ids, prompt_logprobs)

    monkeypatch.setattr(sm, "_compare_logprobs", tampered)
    with _server(tmp_path) as server:
        server.wait_ready(timeout=60)
        result = sm.run_smoke(server.base_url, "tiny", server.capture_dir, tokens=200)
    assert not result.ok and result.max_abs_diff is not None and result.max_abs_diff > 0.1
    assert "DO NOT match" in result.lines[-1]


def test_smoke_without_chunks_explains_where_to_look(tmp_path):
    with _server(tmp_path) as server:
        server.wait_ready(timeout=60)
        elsewhere = tmp_path / "not-the-server-folder"
        elsewhere.mkdir()
        result = sm.run_smoke(server.base_url, "tiny", elsewhere, tokens=50)
    assert not result.ok
    assert "no single capture folder" in result.lines[-1] and "another node" in result.lines[-1]
