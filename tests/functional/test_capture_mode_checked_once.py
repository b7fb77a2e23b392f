"""A run's capture records of another capture mode are refused once, by the check every capture path
makes before it resumes (kldtui.stages.capture.changed_server: ``kldtui run``'s preflight, ``kldtui
capture`` before it reaches the server, the dashboard's capture stage (Pipeline.capture) before it
starts the server, and run_capture itself, which every path calls, before it resumes any window).
The capture stage checked the mode of each window's record again while resuming; that second check
is gone, and each path below still refuses such a record, before it captures or changes anything."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from kldtui import capture_modes
from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.workflow.campaign import control_for
from kldtui.workflow.profile import load_profile
from tests.fixtures_campaign import build_suite, run_cmd, single_profile
from tests.fixtures_demo import env_with

pytestmark = pytest.mark.timeout(300)


def _recorded_in_score_mode(tmp_path: Path) -> tuple[Path, Path, str]:
    """A logits-mode profile whose run's records say its window 1 was captured in score mode: the
    profile, the records and the line a capture of it is refused with."""
    build_suite(tmp_path / "suite", windows=2)
    work = tmp_path / "work"
    profile = single_profile(tmp_path / "a.toml", tmp_path / "suite", work)
    records = work / "capture" / "capture-candidate.json"
    records.parent.mkdir(parents=True)
    records.write_text(json.dumps([{"window_index": 1, "domain": "code", "mode": "score"}]))
    line = (f"{records}: window 001 (code) was captured in {capture_modes.SCORE.label}, this run captures in "
            f"{capture_modes.DEFAULT.label}; use another run name ([run] run_name, --run-name) to keep both, "
            "or remove its record to capture it again")
    return profile, records, line


def test_kldtui_run_refuses_another_modes_record_before_any_server_starts(tmp_path: Path) -> None:
    profile, records, line = _recorded_in_score_mode(tmp_path)
    before = records.stat().st_mtime_ns
    refused = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=240, env=env_with())
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert refused.stderr == f"kldtui: error: {line}\n"
    assert records.stat().st_mtime_ns == before
    assert not (records.parent.parent / "server.log").exists()  # no server started


def test_kldtui_capture_refuses_another_modes_record_before_it_reaches_the_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, records, line = _recorded_in_score_mode(tmp_path)
    before = records.stat().st_mtime_ns
    (tmp_path / "srv").mkdir()
    with socket.socket() as server:  # where the attached server listens: any connection is seen
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        capsys.readouterr()
        code = main(["capture", "--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(records.parent),
                     "--run-name", "candidate", "--base-url", f"http://127.0.0.1:{server.getsockname()[1]}",
                     "--server-capture-dir", str(tmp_path / "srv")])
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing connected
    assert code == 2
    assert capsys.readouterr().err == f"kldtui: error: {line}\n"
    assert records.stat().st_mtime_ns == before


def test_the_dashboards_capture_stage_refuses_another_modes_record_before_any_server_starts(
        tmp_path: Path) -> None:
    """The dashboard's capture stage (3) run on its own (``run_stage("capture")``, Pipeline.capture)
    starts the candidate server itself: the record is refused before it does (changed_server, as
    ``kldtui run``'s preflight), not after the server is up, and the stage is said to have failed."""
    from kldtui.events import StageFailed, StageStarted

    profile, records, line = _recorded_in_score_mode(tmp_path)
    before = records.stat().st_mtime_ns
    seen: list[object] = []
    control = control_for(load_profile(profile), seen.append)
    try:
        with pytest.raises(BadInput) as refused:
            control.run_stage("capture")
        assert not control.server_running and control.server_url is None
    finally:
        control.stop_server()
    assert str(refused.value) == line
    assert records.stat().st_mtime_ns == before
    assert not (records.parent.parent / "server.log").exists()  # no server started
    assert not any(records.parent.glob("candidate/window-*"))  # nothing captured
    stages = [(type(e).__name__, getattr(e, "stage", None)) for e in seen
              if isinstance(e, StageStarted | StageFailed)]
    assert stages == [("StageStarted", "capture"), ("StageFailed", "capture")], stages
    assert [e.message for e in seen if isinstance(e, StageFailed)] == [line]
