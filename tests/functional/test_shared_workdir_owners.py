"""Profiles sharing one work folder, beyond what the campaign profiles keep apart by name
(kldtui.workflow.owners): a single-candidate profile's run (comparison.json, candidate/, compare/,
capture/RUN) and a campaign's leaderboard are one profile's. Real runs on the embedded model.

Before: a second single-candidate profile with the same server and another suite captured its
reference (into the shared reference-run/), started its candidate server and was refused only by
finalize ("made from another suite"); one of the same suite and fewer windows wrote its 2-window report
over the first one's 4-window comparison.json without a word. Two campaigns whose profiles are both
kldtui.toml (in two folders) wrote one leaderboard.json."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kldtui.workspace import PROFILES_FILE_NAME
from tests.fixtures_campaign import (
    VOCAB,
    build_suite,
    campaign_profile,
    downloading_profile,
    run_cmd,
    single_profile,
    write_profile,
)
from tests.fixtures_demo import env_with

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

WINDOWS = 4  # each suite's: enough for a report, and quick


def _run(profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env_with())


def _refused_line(profile: Path, *, silent: bool = False) -> str:
    """What a run of ``profile`` that is refused (exit 2) says on stderr; ``silent``: it printed
    nothing on stdout either (refused before its first progress line)."""
    refused = _run(profile)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert not silent or refused.stdout == "", refused.stdout[-3000:]
    return refused.stderr


def _files(work: Path) -> dict[str, int]:
    """Every file of the work folder and its modification time."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in sorted(work.rglob("*")) if p.is_file()}


def _figures(report: Path) -> tuple[object, ...]:
    doc = json.loads(report.read_text())
    return doc["windows"], [w["kl_reference_to_candidate"]["mean"] for w in doc["per_window"]]


def _ranked(board: Path) -> list[str]:
    return [r["name"] for r in json.loads(board.read_text())["rows"]]


def test_a_second_single_candidate_profile_is_refused_before_any_work_and_the_first_resumes(
        tmp_path: Path) -> None:
    build_suite(tmp_path / "suite-a", windows=WINDOWS)
    build_suite(tmp_path / "suite-b", first_seed=300, windows=WINDOWS)
    work = tmp_path / "work"
    first = single_profile(tmp_path / "a.toml", tmp_path / "suite-a", work)
    done = _run(first)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = work / "comparison.json"
    alone = _figures(report)
    assert alone[0] == WINDOWS
    owners = work / PROFILES_FILE_NAME
    assert json.loads(owners.read_text()) == {"format": "kldtui-profiles-v1",
                                              "owners": {"comparison.json": "../a.toml"},
                                              "suites": {"reference-run": "../suite-a"}}

    # the same server against another suite, and against fewer windows of the same suite
    others = [single_profile(tmp_path / "b.toml", tmp_path / "suite-b", work),
              single_profile(tmp_path / "c.toml", tmp_path / "suite-a", work, stop_window=2)]
    before = _files(work)
    for other in others:
        assert _refused_line(other, silent=True) == (
            f"kldtui: error: {other}: the work folder {work} holds the run of profile {first} "
            "(comparison.json, candidate/, compare/, capture/), which this profile's would mix with or "
            f"write over ({owners}); give this profile its own [run] workdir\n")
    # refused before any work: no server started (server.log), no reference captured, nothing written
    assert _files(work) == before
    assert not (tmp_path / "suite-b" / "ref").exists()

    # the first resumes to the report it gives alone, capturing nothing again
    again = _run(first)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "capture: done - 0 captured" in again.stdout
    assert _figures(report) == alone

    # what the refusal says to do: its own work folder
    own = single_profile(tmp_path / "b.toml", tmp_path / "suite-b", tmp_path / "work-b")
    assert _run(own).returncode == 0
    assert _figures(tmp_path / "work-b" / "comparison.json")[0] == WINDOWS

    # a renamed profile takes its run with it: the folder's owner is gone, this one is it now
    first.rename(tmp_path / "a2.toml")
    renamed = _run(tmp_path / "a2.toml")
    assert renamed.returncode == 0, renamed.stdout[-3000:] + renamed.stderr[-3000:]
    assert (f"WARNING: {owners}: comparison.json was profile {first}'s, whose file is gone; it is "
            f"{tmp_path / 'a2.toml'}'s now") in renamed.stdout
    assert "capture: done - 0 captured" in renamed.stdout
    assert json.loads(owners.read_text())["owners"] == {"comparison.json": "../a2.toml"}


def test_two_campaigns_whose_profiles_share_a_file_name_are_refused_before_any_work(tmp_path: Path) -> None:
    work = tmp_path / "work"
    shared = write_profile(work, {"close": 0.04}).read_text()
    (work / "kldtui.toml").unlink()
    text = shared.replace('local_dir = "suite"', f'local_dir = "{work / "suite"}"').replace(
        'workdir = "."', f'workdir = "{work}"')
    mine, theirs = tmp_path / "x" / "kldtui.toml", tmp_path / "y" / "kldtui.toml"
    for path, text_of in ((mine, text), (theirs, text.replace('name = "close"', 'name = "close-y"'))):
        path.parent.mkdir()
        path.write_text(text_of)
    done = _run(mine)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    board = work / "leaderboard.json"
    assert _ranked(board) == ["close"]

    before = _files(work)
    assert _refused_line(theirs) == (
        f"kldtui: error: {theirs}: the work folder {work} holds the leaderboard and noise models of profile "
        f"{mine} (leaderboard.json, named after the profile's file name, which is this one's too) "
        f"({work / PROFILES_FILE_NAME}); give this profile its own [run] workdir or another file name\n")
    assert _files(work) == before  # no server started, nothing captured or ranked

    # the same campaign from another file name keeps a leaderboard of its own beside the first
    other = tmp_path / "y" / "other.toml"
    theirs.rename(other)
    assert _run(other).returncode == 0
    assert _ranked(work / "leaderboard-other.json") == ["close-y"]
    assert _ranked(board) == ["close"]


def test_a_profile_whose_suite_changed_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    """The same profile, its [reference] local_dir changed to another suite: finalize refused the
    candidate folder made from the first suite only after the reference was captured and the
    candidate's server had started; the preflight says it first. A profile that captures its reference
    ([reference] capture) is told first that reference-run/ is the first suite's (profiles.json)."""
    build_suite(tmp_path / "suite-a", windows=WINDOWS)
    build_suite(tmp_path / "suite-b", first_seed=300, windows=WINDOWS)
    work = tmp_path / "work"
    profile = single_profile(tmp_path / "a.toml", tmp_path / "suite-a", work)
    assert _run(profile).returncode == 0
    single_profile(profile, tmp_path / "suite-b", work)
    before = _files(work)
    assert _refused_line(profile) == (
        f"kldtui: error: {profile}: the work folder {work} holds reference-run/, the reference capture of "
        f"suite {tmp_path / 'suite-a'} ({work / PROFILES_FILE_NAME}), which this profile's suite "
        f"{tmp_path / 'suite-b'} would write over; give this profile its own [run] workdir\n")
    assert _files(work) == before  # no server started (server.log), nothing captured
    assert not (tmp_path / "suite-b" / "ref").exists()

    # suite-b's reference captured elsewhere, the profile no longer capturing: the finalized folder says it
    elsewhere = single_profile(tmp_path / "b.toml", tmp_path / "suite-b", tmp_path / "work-b")
    assert _run(elsewhere).returncode == 0
    profile.write_text(profile.read_text().replace('capture = "embedded"\n', ""))
    assert _refused_line(profile) == (f"kldtui: error: {work / 'candidate' / 'manifest.json'}: made from "
                                      "another suite; finalize into another folder (or another [run] "
                                      "workdir)\n")
    assert _files(work) == before


def test_a_profile_of_another_suite_is_refused_the_reference_capture_of_the_first(tmp_path: Path) -> None:
    """Two campaigns of other suites, both capturing their reference ([reference] capture), share
    reference-run/: the second suite's capture dropped the first's records (capture-reference.json)
    and replaced them, so an unfinished reference of the first would be captured again. It is one
    suite's: another suite is refused before any work; a profile of the same suite shares it."""
    build_suite(tmp_path / "suite-a", windows=WINDOWS)
    build_suite(tmp_path / "suite-b", first_seed=300, windows=WINDOWS)
    work = tmp_path / "work"
    first = campaign_profile(tmp_path / "a.toml", tmp_path / "suite-a", work, {"qa": 0.04})
    done = _run(first)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    owners = work / PROFILES_FILE_NAME
    assert json.loads(owners.read_text())["suites"] == {"reference-run": "../suite-a",
                                                        "comparison-qa.json": "../suite-a"}

    other = campaign_profile(tmp_path / "b.toml", tmp_path / "suite-b", work, {"qb": 0.04})
    before = _files(work)
    assert _refused_line(other) == (
        f"kldtui: error: {other}: the work folder {work} holds reference-run/, the reference capture of "
        f"suite {tmp_path / 'suite-a'} ({owners}), which this profile's suite {tmp_path / 'suite-b'} would "
        "write over; give this profile its own [run] workdir\n")
    assert _files(work) == before  # no server started, nothing captured
    assert not (tmp_path / "suite-b" / "ref").exists()

    # a campaign of the same suite shares the reference capture: nothing captured again
    same = campaign_profile(tmp_path / "c.toml", tmp_path / "suite-a", work, {"qc": 0.12})
    shared = _run(same)
    assert shared.returncode == 0, shared.stdout[-3000:] + shared.stderr[-3000:]
    assert "capturing the reference" not in shared.stdout
    assert _ranked(work / "leaderboard-c.json") == ["qc"]

    # what the refusal says to do: its own work folder
    own = campaign_profile(other, tmp_path / "suite-b", tmp_path / "work-b", {"qb": 0.04})
    assert _run(own).returncode == 0
    assert _ranked(tmp_path / "work-b" / "leaderboard-b.json") == ["qb"]


def test_a_campaign_candidate_of_another_suite_under_the_same_name_is_refused_before_any_work(
        tmp_path: Path) -> None:
    """Two campaigns of other suites naming a candidate alike (same server, same mode) share its
    capture/NAME, candidates/NAME and comparison-NAME.json: the candidate's run is one suite's."""
    build_suite(tmp_path / "suite-a", windows=WINDOWS)
    build_suite(tmp_path / "suite-b", first_seed=300, windows=WINDOWS)
    work = tmp_path / "work"
    first = campaign_profile(tmp_path / "a.toml", tmp_path / "suite-a", work, {"q": 0.04})
    assert _run(first).returncode == 0
    alone = _figures(work / "comparison-q.json")
    # suite-b's reference, captured in a work folder of its own: the second campaign only reads it
    assert _run(campaign_profile(tmp_path / "ref-b.toml", tmp_path / "suite-b", tmp_path / "work-b",
                                 {"q": 0.04})).returncode == 0

    other = campaign_profile(tmp_path / "b.toml", tmp_path / "suite-b", work, {"q": 0.04}, capture=False)
    before = _files(work)
    assert _refused_line(other) == (
        f"kldtui: error: {other}: the work folder {work} holds campaign candidate q's run "
        f"(comparison-q.json, candidates/q/, compare/q/, capture/q/) of suite {tmp_path / 'suite-a'} "
        f"({work / PROFILES_FILE_NAME}), which this profile's suite {tmp_path / 'suite-b'} would write over; "
        "give the candidate another name or this profile its own [run] workdir\n")
    assert _files(work) == before  # no server started, nothing captured

    # what the refusal says to do: another name keeps a run of its own beside the first one's
    renamed = campaign_profile(other, tmp_path / "suite-b", work, {"q-b": 0.04}, capture=False)
    assert _run(renamed).returncode == 0
    assert _ranked(work / "leaderboard-b.json") == ["q-b"]
    assert _figures(work / "comparison-q.json") == alone


def test_a_profile_downloading_another_suite_into_the_shared_reference_folder_is_refused_before_any_download(
        tmp_path: Path) -> None:
    """Profiles that download their suite ([reference] repo_id, no local_dir) all name WORKDIR/reference:
    a second profile of another repository fetched its suite over the first one's (and the first one
    fetched its own back on its next run). With the real huggingface_hub client against a loopback Hub:
    refused before any request, server or write; with a local_dir of its own it runs beside the first."""
    from tests.hub_server import HubServer, make_dataset

    with HubServer() as hub:
        for repo, seed in (("kldtui-test/suite-x", 0), ("kldtui-test/suite-y", 1)):
            served = make_dataset(tmp_path / "hub" / repo, windows=WINDOWS, vocab=VOCAB, seed=seed)
            hub.add_dataset(repo, served)
        env = env_with(HF_ENDPOINT=hub.endpoint)
        env.pop("HF_TOKEN", None)
        env.pop("HF_HUB_OFFLINE", None)

        def run(profile: Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env)

        work = tmp_path / "work"
        first = downloading_profile(tmp_path / "a.toml", "kldtui-test/suite-x", work, {"qa": 0.04})
        done = run(first)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        owners = work / PROFILES_FILE_NAME
        assert json.loads(owners.read_text())["downloads"] == {"reference": "../a.toml"}
        record = json.loads((work / "reference" / ".kldtui-reference.json").read_text())
        assert record["repo_id"] == "kldtui-test/suite-x"

        other = downloading_profile(tmp_path / "b.toml", "kldtui-test/suite-y", work, {"qb": 0.04})
        before, asked = _files(work), len(hub.log)
        refused = run(other)
        assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
        assert refused.stderr == (
            f"kldtui: error: {other}: {work / 'reference'} in the work folder {work} holds the suite profile "
            f"{first} downloaded from kldtui-test/suite-x (commit {record['commit'][:12]}) ({owners}), which "
            "this profile's [reference] repo_id kldtui-test/suite-y would download over; set [reference] "
            "local_dir to a folder of its own for this suite (or give this profile its own [run] workdir)\n")
        assert len(hub.log) == asked  # nothing asked of the Hub
        assert _files(work) == before  # no server started (server.log), nothing fetched or written

        # a profile of the same suite shares the folder: nothing downloaded again
        same = downloading_profile(tmp_path / "c.toml", "kldtui-test/suite-x", work, {"qc": 0.12})
        shared = run(same)
        assert shared.returncode == 0, shared.stdout[-3000:] + shared.stderr[-3000:]
        assert not [r for r in hub.log[asked:] if r.path.endswith(".safetensors")]

        # what the refusal says to do: a local_dir of its own
        own = downloading_profile(other, "kldtui-test/suite-y", work, {"qb": 0.04},
                                  local_dir=tmp_path / "suite-y")
        assert run(own).returncode == 0
        assert json.loads((tmp_path / "suite-y" / ".kldtui-reference.json").read_text())["repo_id"] == (
            "kldtui-test/suite-y")
        assert json.loads((work / "reference" / ".kldtui-reference.json").read_text()) == record
        assert _ranked(work / "leaderboard-b.json") == ["qb"]


def test_a_campaign_candidate_over_other_windows_of_the_same_suite_is_refused_before_any_work(
        tmp_path: Path) -> None:
    """Two campaigns of one suite naming a candidate alike over other windows shared comparison-NAME.json:
    the second wrote its 2-window report over the first one's 4-window one (and the first its own back on
    its next run). Refused before any server starts, naming both profiles and both windows; a campaign of
    the same windows shares the report, capturing nothing again."""
    build_suite(tmp_path / "suite", windows=WINDOWS)
    work = tmp_path / "work"
    first = campaign_profile(tmp_path / "a.toml", tmp_path / "suite", work, {"q": 0.04})
    assert _run(first).returncode == 0
    report = work / "comparison-q.json"
    alone = _figures(report)
    owners = work / PROFILES_FILE_NAME
    assert json.loads(owners.read_text())["runs"] == {"comparison-q.json": {"profile": "../a.toml",
                                                                            "windows": f"0-{WINDOWS - 1}"}}

    fewer = campaign_profile(tmp_path / "b.toml", tmp_path / "suite", work, {"q": 0.04}, stop_window=2)
    before = _files(work)
    assert _refused_line(fewer) == (
        f"kldtui: error: {fewer}: the work folder {work} holds campaign candidate q's report "
        f"(comparison-q.json) over the windows 0-{WINDOWS - 1} of profile {first} ({owners}), which this "
        "profile's run over windows 0-1 would write over; give the candidate another name, the two profiles "
        "the same [run] windows, or this profile its own [run] workdir\n")
    assert _files(work) == before  # no server started, nothing captured or written
    assert _figures(report) == alone

    # the same windows: the report is shared, nothing captured or compared again
    same = campaign_profile(tmp_path / "c.toml", tmp_path / "suite", work, {"q": 0.04}, stop_window=WINDOWS)
    shared = _run(same)
    assert shared.returncode == 0, shared.stdout[-3000:] + shared.stderr[-3000:]
    assert "q: compared earlier" in shared.stdout
    assert _figures(report) == alone and _ranked(work / "leaderboard-c.json") == ["q"]
