"""Every writer of a profile's work folder goes through the one owners check-and-claim
(kldtui.workflow.owners.claim): ``kldtui serve --profile``, the dashboard's stages (its server stage, a
campaign's reference stage) as ``kldtui run`` does. Before, ``kldtui serve`` and the dashboard's server
stage started another profile's server in a work folder whose run was the first profile's, writing its
capture folder and ``server.log`` there, and recorded nothing in ``profiles.json``; a campaign's
reference stage checked the record but did not record itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.workflow.campaign import control_for
from kldtui.workflow.profile import load_profile
from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import build_suite, campaign_profile, single_profile
from tests.fixtures_demo import env_with

pytestmark = pytest.mark.timeout(300)


def _files(work: Path) -> dict[str, int]:
    """Every file of the work folder and its modification time."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in sorted(work.rglob("*")) if p.is_file()}


def _two_profiles(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Profiles a and b of one suite in one work folder, whose run ``profiles.json`` says is a's."""
    build_suite(tmp_path / "suite", windows=2)
    work = tmp_path / "work"
    work.mkdir()
    first = single_profile(tmp_path / "a.toml", tmp_path / "suite", work)
    second = single_profile(tmp_path / "b.toml", tmp_path / "suite", work)
    (work / PROFILES_FILE_NAME).write_text(json.dumps({"format": "kldtui-profiles-v1",
                                                       "owners": {"comparison.json": "../a.toml"}}))
    return first, second, work


def _refusal(mine: Path, theirs: Path, work: Path) -> str:
    return (f"{mine}: the work folder {work} holds the run of profile {theirs} (comparison.json, candidate/, "
            "compare/, capture/), which this profile's would mix with or write over "
            f"({work / PROFILES_FILE_NAME}); give this profile its own [run] workdir")


def test_kldtui_serve_of_another_profile_is_refused_before_its_server_starts(tmp_path: Path) -> None:
    first, second, work = _two_profiles(tmp_path)
    before = _files(work)
    refused = subprocess.run([sys.executable, "-m", "kldtui", "serve", "--profile", str(second)],
                             capture_output=True, text=True, timeout=120, env=env_with())
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert refused.stderr == f"kldtui: error: {_refusal(second, first, work)}\n"
    # no server started: no server.log, no capture folder; the record unchanged
    assert _files(work) == before
    assert not (work / "capture").exists()


def test_the_dashboards_server_stage_of_another_profile_is_refused_before_its_server_starts(
        tmp_path: Path) -> None:
    """The dashboard's server stage (2) runs ``run_stage("server")`` of the profile's pipeline."""
    first, second, work = _two_profiles(tmp_path)
    before = _files(work)
    control = control_for(load_profile(second))
    with pytest.raises(BadInput) as refused:
        control.run_stage("server")
    assert str(refused.value) == _refusal(second, first, work)
    assert not control.server_running
    assert _files(work) == before
    assert not (work / "capture").exists()


def test_a_campaigns_reference_stage_records_its_owner_as_its_run_does(tmp_path: Path) -> None:
    """The dashboard's reference stage (1) of a campaign: it checked profiles.json but recorded nothing,
    so another campaign of another suite could capture its reference over this one's next."""
    build_suite(tmp_path / "suite-a", windows=2)
    build_suite(tmp_path / "suite-b", first_seed=300, windows=2)
    work = tmp_path / "work"
    mine = campaign_profile(tmp_path / "a.toml", tmp_path / "suite-a", work, {"qa": 0.04})
    control_for(load_profile(mine)).run_stage("reference")
    owners = work / PROFILES_FILE_NAME
    assert json.loads(owners.read_text()) == {
        "format": "kldtui-profiles-v1", "owners": {"leaderboard-a.json": "../a.toml"},
        "suites": {"reference-run": "../suite-a", "comparison-qa.json": "../suite-a"}}

    # so the reference stage of a campaign of another suite is refused before any server starts
    other = campaign_profile(tmp_path / "b.toml", tmp_path / "suite-b", work, {"qb": 0.04})
    before = _files(work)
    with pytest.raises(BadInput) as refused:
        control_for(load_profile(other)).run_stage("reference")
    assert str(refused.value) == (
        f"{other}: the work folder {work} holds reference-run/, the reference capture of suite "
        f"{tmp_path / 'suite-a'} ({owners}), which this profile's suite {tmp_path / 'suite-b'} would write "
        "over; give this profile its own [run] workdir")
    assert _files(work) == before
    assert not (tmp_path / "suite-b" / "ref").exists()
