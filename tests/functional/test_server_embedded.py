"""The launcher starts the embedded server exactly like vLLM (same code path, other argv)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from kldtui.errors import StageFailed
from kldtui.events import Event, LogLine, Notice, ServerReady
from kldtui.servers.registry import kind_of
from kldtui.stages.serve import ServerProcess, _group_members
from kldtui.workflow.profile import profile_from_dict


def test_embedded_server_ready_and_stopped(tmp_path: Path) -> None:
    profile = profile_from_dict({"candidate": {"kind": "embedded", "served_model_name": "tiny",
                                               "vocab_size": 64, "port": 0}}, base_dir=tmp_path)
    events: list[Event] = []
    argv = kind_of(profile.candidate).argv(profile.candidate)
    server = ServerProcess(argv, capture_dir=tmp_path / "capture", served_model_name="tiny",
                           emit=events.append)
    with server:
        assert server.port != 0  # port 0 became a free port
        url = server.wait_ready(timeout=120)
        assert url == f"http://127.0.0.1:{server.port}"
        models = httpx.get(f"{url}/v1/models", trust_env=False).json()
        assert [m["id"] for m in models["data"]] == ["tiny"]
        assert server.alive() is None
        pgid = server.pid
    assert server.returncode is not None
    assert _group_members(pgid) == []
    assert server.alive() is not None
    ready = [e for e in events if isinstance(e, ServerReady)]
    assert ready and ready[0].served_model_name == "tiny" and ready[0].pid == pgid
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("--no-enable-prefix-caching" in n for n in notices)
    assert not any("--max-num-seqs" in n for n in notices)  # the profile already had it
    assert any(isinstance(e, LogLine) for e in events)


def test_wrong_served_name_fails_clearly(tmp_path: Path) -> None:
    profile = profile_from_dict({"candidate": {"kind": "embedded", "served_model_name": "tiny",
                                               "vocab_size": 64, "port": 0}}, base_dir=tmp_path)
    argv = kind_of(profile.candidate).argv(profile.candidate)
    server = ServerProcess(argv, capture_dir=tmp_path / "capture", served_model_name="other")
    with server, pytest.raises(StageFailed, match="serves tiny, not 'other'"):
        server.wait_ready(timeout=120)
