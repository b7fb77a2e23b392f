"""The Workspace owns every path of a run: a profile's work folder and the single-stage flags."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kldtui.workflow.profile import profile_from_dict
from kldtui.workspace import Workspace


def test_profile_workspace_layout(tmp_path: Path) -> None:
    profile = profile_from_dict({"candidate": {"kind": "embedded"},
                                 "run": {"workdir": str(tmp_path / "w"), "run_name": "q4"}},
                                base_dir=tmp_path)
    ws = profile.workspace()
    w = tmp_path / "w"
    assert ws.suite_dir == w / "reference" and ws.reference == w / "reference" / "ref"
    assert ws.suite_manifest == w / "reference" / "suite-manifest.json"
    assert ws.run_dir == w / "capture" / "q4" and ws.records_path == w / "capture" / "capture-q4.json"
    assert ws.chunk_dir("window-003-code-chunks") == w / "capture" / "q4" / "window-003-code-chunks"
    assert ws.candidate_manifest == w / "candidate" / "manifest.json"
    assert ws.compare_cache(7) == w / "compare" / "window-007.json"
    assert ws.report == w / "comparison.json" and ws.server_log == w / "server.log"
    assert ws.lock_path is not None and ws.lock_path.parent == w


def test_fresh_server_capture_dir_skips_used_ones(tmp_path: Path) -> None:
    ws = Workspace(suite_dir=tmp_path / "s", capture_root=tmp_path / "capture")
    first = ws.fresh_server_capture_dir()
    assert first == tmp_path / "capture" / "server-001"
    first.mkdir()
    assert ws.fresh_server_capture_dir() == first  # empty: reused
    (first / "x").write_text("")
    assert ws.fresh_server_capture_dir() == tmp_path / "capture" / "server-002"


def test_demo_reference_capture_finalizes_into_the_suite(tmp_path: Path) -> None:
    profile = profile_from_dict({"reference": {"local_dir": str(tmp_path / "suite")},
                                 "candidate": {"kind": "embedded"}, "run": {"workdir": str(tmp_path)}},
                                base_dir=tmp_path)
    ref = profile.workspace().reference_capture()
    assert ref.candidate == tmp_path / "suite" / "ref"
    assert ref.run_dir == tmp_path / "reference-run" / "capture" / "reference"
    assert ref.server_log == tmp_path / "reference-run" / "server.log"


def test_flag_workspaces_hold_only_what_their_command_needs(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "suite-manifest.json").write_text("{}")
    ws = Workspace.for_compare(tmp_path / "suite" / "suite-manifest.json", tmp_path / "ref",
                               tmp_path / "cand", tmp_path / "out.json")
    assert ws.suite_dir == tmp_path / "suite" and ws.compare_cache(0) is None
    assert ws.server_log is None and ws.lock_path is None
    with pytest.raises(ValueError, match="capture_root"):
        _ = ws.run_dir
    cap = Workspace.for_capture(tmp_path / "suite", tmp_path / "caps", "r1")
    assert cap.records_path == tmp_path / "caps" / "capture-r1.json"
    with pytest.raises(ValueError, match="candidate_dir"):
        _ = cap.candidate


def test_earlier_reports_are_regular_files_only(tmp_path: Path) -> None:
    """A link or a FIFO named like a report in a shared work folder is not one of its reports."""
    (tmp_path / "comparison-a.json").write_text("{}")
    (tmp_path / "comparison.json").write_text("{}")
    (tmp_path / "comparison-link.json").symlink_to(tmp_path / "comparison-a.json")
    os.mkfifo(tmp_path / "comparison-fifo.json")
    ws = Workspace(suite_dir=tmp_path / "s", workdir=tmp_path)
    assert [p.name for p in ws.earlier_reports()] == ["comparison-a.json", "comparison.json"]
