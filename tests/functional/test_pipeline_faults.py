"""The server dies mid-window under the pipeline: the window fails with the server's last log
lines, the server's group is gone, and a rerun resumes without recapturing finished windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.errors import BadInput, StageFailed
from kldtui.events import Event, WindowState
from kldtui.events import StageFailed as StageFailedEvent
from kldtui.stages.serve import _group_members
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import profile_from_dict

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    Pipeline(prepare_demo(root)).reference()
    return root


def test_server_killed_mid_window_then_rerun_resumes(tmp_path: Path, demo_dir: Path) -> None:

    def profile(fault: str | None) -> object:
        cand = {"kind": "embedded", "served_model_name": "cand", "model_seed": 7, "vocab_size": 2048,
                "perturb": 0.1, "port": 0}
        if fault:
            cand["env"] = {"KLDTUI_EMBEDDED_FAULT": fault}
        return profile_from_dict({"reference": {"local_dir": str(demo_dir / "suite")},
                                  "candidate": cand, "run": {"workdir": str(tmp_path / "work")},
                                  "compare": {"bootstrap_samples": 200}}, base_dir=tmp_path)

    events: list[Event] = []
    # 511 rows per window, chunks of 256: the server dies inside window 2
    pipeline = Pipeline(profile("die-after-rows:1300"), events.append)
    with pytest.raises(StageFailed) as info:
        pipeline.run_all()
    message = str(info.value)
    assert "window 002" in message and "server" in message and "\n" not in message
    assert "last log lines" in message
    assert pipeline.server is None  # stopped (what was left of it)
    assert any(isinstance(e, StageFailedEvent) and e.stage == "capture" for e in events)
    records_path = tmp_path / "work" / "capture" / "capture-candidate.json"
    first = {r["window_index"]: r["request_id"] for r in json.loads(records_path.read_text())}
    assert sorted(first) == [0, 1]
    server_pids = [e.pid for e in events if type(e).__name__ == "ServerReady"]
    assert server_pids and all(_group_members(pid) == [] for pid in server_pids)

    report = json.loads(Pipeline(profile(None)).run_all().report_path.read_text())
    assert report["windows"] == 12  # the demo suite's
    final = {r["window_index"]: r["request_id"] for r in json.loads(records_path.read_text())}
    assert {i: final[i] for i in first} == first


def _broken_window(original):  # type: ignore[no-untyped-def]
    """Window 1's comparison fails (as a corrupt reference file would make it)."""

    def window(self, window, **kwargs):  # type: ignore[no-untyped-def]
        if window.index == 1:
            raise BadInput(f"{self.workspace.reference}: window 001: injected failure; fix the file")
        return original(self, window, **kwargs)

    return window


def test_a_compare_failure_stops_the_capture_and_is_reported_as_itself(
        tmp_path: Path, demo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kldtui.stages.compare import Comparer

    monkeypatch.setattr(Comparer, "window", _broken_window(Comparer.window))
    profile = profile_from_dict({
        "reference": {"local_dir": str(demo_dir / "suite")},
        "candidate": {"kind": "embedded", "served_model_name": "cand", "model_seed": 7,
                      "vocab_size": 2048, "perturb": 0.1, "port": 0,
                      "env": {"KLDTUI_EMBEDDED_FAULT": "chunk-delay:0.3"}},
        "run": {"workdir": str(tmp_path / "work")}}, base_dir=tmp_path)
    events: list[Event] = []
    pipeline = Pipeline(profile, events.append)
    with pytest.raises(BadInput, match="injected failure"):  # not Interrupted: exit code 2, not 130
        pipeline.run_all()
    assert pipeline.server is None
    records = json.loads((tmp_path / "work" / "capture" / "capture-candidate.json").read_text())
    assert len(records) < 6  # the capture stopped instead of running to the end
    failed = [e for e in events if isinstance(e, WindowState) and e.state == "failed"]
    assert [e.window_index for e in failed] == [1]
