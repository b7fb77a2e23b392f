"""A three-candidate campaign (issue 23 item 1): embedded servers at different perturbations run
headless one after another in one work folder, resume after a kill in the middle of the second
candidate to the reports of an uninterrupted run, rank in the order and with the verdicts
``kldtui leaderboard`` gives on the three reports, and take a fourth candidate later without
capturing the others again."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.fixtures_campaign import (
    CAMPAIGN_WINDOWS,
    CANDIDATES,
    candidate_table,
    noise_model_of,
    run_cmd,
    write_profile,
)
from tests.fixtures_demo import env_with, stable
from tests.fixtures_hostile import then_plant_folder

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # whole campaigns, killed and rerun


def _warnings(events: list[dict[str, object]]) -> list[object]:
    """The warning notices of a run's events, in order."""
    return [e["text"] for e in events if e.get("event") == "Notice" and e.get("level") == "warning"]


def _measured_in_its_place(model: Path) -> str:
    """The campaign's warning for a link or FIFO at its noise model's name."""
    return (f"{model}: not a regular file this campaign wrote (a link or a FIFO); not read, the noise model "
            "is measured again and written in its place")


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _run(profile: Path) -> list[dict]:
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return _events(proc.stdout)


def _kill_in_second_candidate(profile: Path) -> None:
    proc = subprocess.Popen(run_cmd(profile, "--jsonl"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_with(KLDTUI_EMBEDDED_FAULT="chunk-delay:0.02"))
    assert proc.stdout is not None
    second, captured = False, 0
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("event") == "CandidateStarted":
            second = event["number"] == 2
        if second and event.get("event") == "WindowState" and event.get("stage") == "capture" \
                and event.get("state") == "captured":
            captured += 1
            if captured == 3:
                proc.send_signal(signal.SIGKILL)
                break
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "the campaign ended before the second candidate was half done"


def _leaderboard_cli(reports: list[Path], out: Path) -> dict:
    proc = subprocess.run([*run_cmd(Path("x"))[:3], "leaderboard", *map(str, reports), "--json", str(out),
                           "--plain"], capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_three_candidates_resume_after_a_kill_and_rank_as_the_leaderboard_command(tmp_path: Path) -> None:
    whole = write_profile(tmp_path / "whole")
    _run(whole)
    killed = write_profile(tmp_path / "killed")
    _kill_in_second_candidate(killed)
    work = killed.parent
    assert (work / "comparison-q8.json").is_file() and not (work / "comparison-q4.json").exists()
    events = _run(killed)
    started = [e["name"] for e in events if e.get("event") == "CandidateStarted"]
    assert started == ["q4", "q3"]  # q8 was finished: not served or captured again
    assert any("q8: compared earlier" in e.get("text", "") for e in events)
    skipped = [e for e in events if e.get("event") == "WindowState" and e.get("stage") == "capture"
               and e.get("state") == "captured" and e["figures"].get("skipped")]
    assert len(skipped) >= 3  # q4's windows captured before the kill were kept
    for name in CANDIDATES:
        resumed = json.loads((work / f"comparison-{name}.json").read_text())
        uninterrupted = json.loads((whole.parent / f"comparison-{name}.json").read_text())
        assert stable(resumed) == stable(uninterrupted), name

    board = json.loads((work / "leaderboard.json").read_text())
    reports = [work / f"comparison-{name}.json" for name in CANDIDATES]
    cli = _leaderboard_cli(reports, tmp_path / "cli.json")
    assert [r["name"] for r in board["rows"]] == ["q8", "q4", "q3"]  # closest first
    assert [r["name"] for r in cli["rows"]] == [r["name"] for r in board["rows"]]
    for ours, theirs in zip(board["rows"], cli["rows"], strict=True):
        for key in ("rank", "mean", "ci95_low", "ci95_high", "tied_with_best", "outcome_vs_best",
                    "verdict_vs_best"):
            assert ours[key] == theirs[key], (ours["name"], key)
    assert [r["outcome_vs_best"] for r in board["rows"]] == [None, "a_closer", "a_closer"]
    final = [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("final")]
    assert len(final) == 1 and [r["name"] for r in final[0]["rows"]] == ["q8", "q4", "q3"]
    assert final[0]["rows"][1]["verdict"] == board["rows"][1]["verdict_vs_best"]
    # said once: the shared reference is checked before the first candidate, not again for each,
    # and the standings after the last candidate are the final leaderboard's, not a board "so far" too
    assert len([e for e in events if e.get("event") == "StageFinished" and e["stage"] == "reference"]) == 1
    last = max(i for i, e in enumerate(events)
               if e.get("event") == "StageFinished" and e["stage"] == "compare")
    assert [e["final"] for e in events[last:] if e.get("event") == "LeaderboardUpdated"] == [True]

    # a fourth candidate, added to the finished campaign, runs alone
    with killed.open("a") as handle:
        handle.write("\n" + candidate_table("q6", 0.08))
    events = _run(killed)
    assert [e["name"] for e in events if e.get("event") == "CandidateStarted"] == ["q6"]
    board = json.loads((work / "leaderboard.json").read_text())
    assert [r["name"] for r in board["rows"]] == ["q8", "q6", "q4", "q3"]


def test_a_repeat_capture_of_the_leader_gives_the_measured_noise_model(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "c", {"close": 0.04, "far": 0.2}, repeat_leader=True, noise=0.05,
                            extra={"close": {"parameters": 1_000_000, "bits_per_weight": 4.5}})
    events = _run(profile)
    work = profile.parent
    started = [(e["name"], e["repeat"]) for e in events if e.get("event") == "CandidateStarted"]
    assert started == [("close", False), ("far", False), ("close.repeat", True)]
    model = noise_model_of(work)
    noise = json.loads(model.read_text())
    assert noise["format"] == "kldtui-noise-floor-v1" and noise["metric_repeat"]["per_window"]
    board = json.loads((work / "leaderboard.json").read_text())
    assert board["noise_floor"] is not None and "measured repeat variation" in board["noise_model"]
    assert [r["name"] for r in board["rows"]] == ["close", "far"]  # the repeat is not a candidate
    assert board["rows"][1]["outcome_vs_best"] == "a_closer"
    final = [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("final")][0]
    # the measured model is described once, by the final leaderboard sent next; the note says where
    # it is kept (it said the whole description too, twice in a row in the batch output)
    assert "measured repeat variation" in final["noise_model"], final
    assert [e["text"] for e in events if e.get("event") == "Notice" and "noise model" in e["text"]] == [
        f"noise model saved in {model}; the final leaderboard gives it"]
    repeat = final["rows"][2]
    assert repeat["name"] == "close.repeat" and repeat["rank"] is None
    assert final["rows"][0]["bits_per_weight"] == 4.5 and final["rows"][0]["size_bytes"] == 562_500
    assert final["rows"][1]["bits_per_weight"] is None  # given for close only
    assert repeat["mark"] == "tied" and "no difference shown" in repeat["verdict"]  # one model twice
    assert repeat["repeat_of"] == "close" and final["rows"][0]["repeat_of"] is None
    # the noise model is what `kldtui noise` gives on the two reports
    proc = subprocess.run([*run_cmd(Path("x"))[:3], "noise", str(work / "comparison-close.json"),
                           str(work / "repeat" / "comparison-close.json"),
                           "--output", str(tmp_path / "n.json")],
                          capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    theirs = json.loads((tmp_path / "n.json").read_text())
    assert theirs["metric_repeat"]["per_window"] == noise["metric_repeat"]["per_window"]
    # rerun: nothing is captured again, the stored noise model is used
    events = _run(profile)
    assert not [e for e in events if e.get("event") == "CandidateStarted"]
    # a damaged noise model (another tool wrote it) is said once, with what the campaign does about it,
    # and measured again from the two captures on disk
    model.write_text("[not json")
    events = _run(profile)
    warned = _warnings(events)
    assert warned == [f"{model}: noise model is not valid JSON (Expecting value: line 1 "
                      "column 2 (char 1)); measured again"], warned
    assert json.loads(model.read_text())["metric_repeat"] == noise["metric_repeat"]
    # a link at its name is not a file the campaign wrote: not read, even to a valid model of other
    # captures (before, the campaign took it as its own and printed its target in the next commands)
    elsewhere = tmp_path / "someone-elses-noise.json"
    planted = dict(noise, metric_repeat=dict(noise["metric_repeat"], per_window=[]), threshold=0.5)
    elsewhere.write_text(json.dumps(planted))
    before = elsewhere.read_bytes()
    model.unlink()
    model.symlink_to(elsewhere)
    events = _run(profile)
    warned = _warnings(events)
    assert warned == [_measured_in_its_place(model)], warned
    assert not model.is_symlink()  # replaced, never written through
    assert elsewhere.read_bytes() == before
    assert json.loads(model.read_text())["metric_repeat"] == noise["metric_repeat"]
    said = "\n".join(str(e.get("text", "")) for e in events)
    assert elsewhere.name not in said
    # a folder of earlier versions: its one noise-model.json, of this suite, is still the campaign's
    earlier = work / "noise-model.json"
    model.rename(earlier)
    events = _run(profile)
    final = [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("final")][0]
    assert final["noise_path"] == str(earlier) and not model.exists()  # read, not measured again
    # one of another suite is not: measured again into this suite's own file, the other left as it was
    theirs = json.dumps(dict(noise, suite_token_hash_sha256="0" * 64))
    earlier.write_text(theirs)
    events = _run(profile)
    final = [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("final")][0]
    assert final["noise_path"] == str(model) and earlier.read_text() == theirs
    assert json.loads(model.read_text())["metric_repeat"] == noise["metric_repeat"]



def test_a_folder_at_the_noise_model_s_name_stops_the_campaign_before_the_repeat_capture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The noise model's name is kldtui's (noise-model-HASH.json): a folder there is not "written in its
    place" but in the way. A run says so in one line, saying to move it away, exit 2, before the leader's
    repeat is captured (a dashboard opened on the folder warns in the same words; a link to a folder is
    one too); one made there while the repeat was captured is one line saying the same, exit 2, not "give
    a file name"; a FIFO there is replaced, as the warning says."""
    from kldtui.cli.main import main
    from kldtui.workflow.campaign import Campaign
    from kldtui.workflow.profile import load_profile

    profile = write_profile(tmp_path / "c", {"close": 0.04, "far": 0.2}, noise=0.05)
    _run(profile)  # both candidates compared, without the repeat
    with profile.open("a") as handle:
        handle.write("\n[campaign]\nrepeat_leader = true\n")
    work = profile.parent
    suite = json.loads((work / "comparison-close.json").read_text())["suite_token_hash_sha256"]
    model = load_profile(profile).workspace().noise_model_path(suite)
    in_the_way = (f"{model}: is a folder where kldtui writes its noise model; move that folder away, then "
                  "run again")
    model.mkdir()
    said: list[object] = []
    Campaign(load_profile(profile), emit=said.append).announce_disk_state()  # nothing is run
    assert [getattr(e, "text", "") for e in said if getattr(e, "level", "") == "warning"] == [in_the_way]
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"kldtui: error: {in_the_way}"], proc.stderr
    assert not [e for e in _events(proc.stdout) if e.get("event") == "CandidateStarted"]
    assert not (work / "repeat").exists() and not any(model.iterdir())  # the repeat not captured
    # a link to a folder is a folder there too (the model's writer refuses it alike)
    model.rmdir()
    elsewhere = tmp_path / "a-folder"
    elsewhere.mkdir()
    model.symlink_to(elsewhere)
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env_with())
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"kldtui: error: {in_the_way}"], \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (work / "repeat").exists() and not any(elsewhere.iterdir())
    model.unlink()
    # a folder made at the name while the repeat was captured: the writer's lock says to move it away
    import kldtui.decide.noise as noise

    monkeypatch.setattr(noise, "noise_from_capture_reports",
                        then_plant_folder(noise.noise_from_capture_reports, model))
    assert main(["run", "--batch", "--profile", str(profile), "--jsonl"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"kldtui: error: {model}: is a folder where kldtui writes its output; move that "
                            "folder away, then run again\n"), captured.err
    events = _events(captured.out)
    started = [(e["name"], e["repeat"]) for e in events if e.get("event") == "CandidateStarted"]
    assert started == [("close.repeat", True)] and not any(model.iterdir())
    monkeypatch.undo()
    # a FIFO at the name: not read, measured again from the captures on disk and written in its place
    model.rmdir()
    os.mkfifo(model)
    events = _run(profile)
    warned = _warnings(events)
    assert warned == [_measured_in_its_place(model)], warned
    assert not [e for e in events if e.get("event") == "CandidateStarted"]
    assert model.is_file() and json.loads(model.read_text())["format"] == "kldtui-noise-floor-v1"


def test_a_deterministic_engine_gives_no_noise_model_and_is_said_so(tmp_path: Path) -> None:
    """Without runtime noise the embedded model (as llama.cpp or vLLM on a CPU) gives the same logits
    to both captures of the leader. They are two captures from two servers, not one given twice: the
    campaign says there is nothing to measure, not "capture the candidate again" (which gives the same),
    and so do the verdicts its ranking names provisional, there and in `kldtui leaderboard DIR`."""
    profile = write_profile(tmp_path / "c", {"close": 0.04, "far": 0.3}, repeat_leader=True)
    events = _run(profile)
    work = profile.parent
    warned = _warnings(events)
    first, second = work / "comparison-close.json", work / "repeat" / "comparison-close.json"
    assert warned == [
        f"noise model: none: the server is deterministic (captures of one model, each from a server start of "
        f"its own, came out identical: {first} and {second}), so nothing moves between captures to measure; "
        f"differences rest on the windows alone (saved in {noise_model_of(work)})"], warned
    # the ranking is held against that: provisional, saying why, with no capture to make
    noise = json.loads(noise_model_of(work).read_text())
    assert noise["kind"] == "deterministic" and noise["threshold"] == 0, noise
    board = json.loads((work / "leaderboard.json").read_text())
    far = next(r for r in board["rows"] if r["name"] == "far")
    assert far["provisional"] and far["outcome_vs_best"] == "a_closer", far
    assert far["verdict_vs_best"].endswith(
        "; provisional: the server answered two captures of one model identically (deterministic), so there "
        "is no variation between captures to hold it against, and capturing again gives the same"), far
    assert board["noise_model"].startswith("none: the server is deterministic (captures of one model, each "
                                           "from a server start of its own, came out identical: "), board
    proc = subprocess.run([*run_cmd(Path("x"))[:3], "leaderboard", "--plain", str(work)], capture_output=True,
                          text=True, timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kldtui noise" not in proc.stdout and "capture far again" not in proc.stdout, proc.stdout
    assert ("provisional: the difference is shown over these windows; the server answered two captures of "
            "one model identically (deterministic), so there is no variation between captures to hold it "
            "against, and capturing again gives the same") in proc.stdout, proc.stdout
    # kldtui noise on the same two captures says what the campaign says (it refused them, and the
    # ranking without a noise model said "capture again ... kldtui noise", which gives the same)
    kldtui = [*run_cmd(Path("x"))[:3], "noise"]
    out = tmp_path / "noise.json"
    proc = subprocess.run([*kldtui, str(first), str(second), "-o", str(out)], capture_output=True, text=True,
                          timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        f"noise model: none: the server is deterministic (captures of one model, each from a server start of "
        f"its own, came out identical: {first} and {second}), so nothing moves between captures to measure; "
        "differences rest on the windows alone",
        "verdicts ranked with it stay provisional: the server answered two captures of one model identically "
        "(deterministic), so there is no variation between captures to hold it against, and capturing again "
        "gives the same",
        f"wrote {out}"], proc.stdout
    assert json.loads(out.read_text())["kind"] == "deterministic"
    # ... but a copy of a capture is one capture: it records the same server start
    repeat_doc = json.loads(second.read_text())
    copy = tmp_path / "copied-capture"
    shutil.copytree(repeat_doc["candidate_dir"], copy)
    copied = tmp_path / "comparison-copy.json"
    copied.write_text(json.dumps(dict(repeat_doc, candidate_dir=str(copy))))
    proc = subprocess.run([*kldtui, str(second), str(copied), "-o", str(tmp_path / "n2.json")],
                          capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"{second} and {copied} have identical per-window KL and cannot be shown to be two captures (both "
        "record the same server start, so one folder is a copy of the other): capture the candidate again "
        "with kldtui run, from a server start of its own, compare it, and give every capture's report once "
        "(a deterministic server then gives a noise model that says so)"), proc.stderr
    assert not (tmp_path / "n2.json").exists()


def test_every_candidate_is_checked_before_the_first_server_starts(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "c", {"q8": 0.04})
    with profile.open("a") as handle:
        handle.write('\n[[candidates]]\nname = "big"\nkind = "vllm"\nmodel = "./no-such-folder"\n')
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'big'" in proc.stderr and "no-such-folder" in proc.stderr
    assert not (tmp_path / "c" / "capture").exists()  # nothing was served or captured
    said = proc.stdout + proc.stderr
    assert said.count("no-such-folder") == 1, said  # one problem is said once: as the error
    with profile.open("a") as handle:
        handle.write('\n[[candidates]]\nname = "huge"\nkind = "vllm"\nmodel = "./no-such-either"\n')
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert said.count("no-such-folder") == 1 and said.count("no-such-either") == 1, said
    assert proc.stderr.strip().splitlines()[-1].endswith("(and 1 more problem(s), listed above)")
    assert said.index("no-such-either") < said.index("kldtui: error:")  # the other one, above the error


def test_a_failing_candidate_does_not_stop_the_others_and_is_retried_alone(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "c", {"q8": 0.04, "broken": 0.12, "q3": 0.2})
    name = 'name = "broken"\n'
    text = profile.read_text()
    fault = 'env = { KLDTUI_EMBEDDED_FAULT = "die-after-rows:300" }\n'  # its server dies mid-capture
    profile.write_text(text.replace(name, name + fault))
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 of 3 candidates failed (broken;" in proc.stderr and "run again to retry" in proc.stderr
    events = _events(proc.stdout)
    assert [e["name"] for e in events if e.get("event") == "CandidateStarted"] == ["q8", "broken", "q3"]
    final = [e for e in events if e.get("event") == "LeaderboardUpdated" and e.get("final")][0]
    assert [(r["name"], r["state"]) for r in final["rows"]] == [
        ("q8", "compared"), ("q3", "compared"), ("broken", "failed")]
    board = json.loads((tmp_path / "c" / "leaderboard.json").read_text())
    assert [r["name"] for r in board["rows"]] == ["q8", "q3"]
    # what the dashboard ends on when the campaign ended failed: the leader's run state
    from kldtui.workflow.campaign import Campaign
    from kldtui.workflow.profile import load_profile

    campaign = Campaign(load_profile(profile))
    campaign.announce_disk_state()  # ranks the reports on disk, as a reopened dashboard does
    leader = campaign.leader_state()
    assert leader is not None and leader.report_path == tmp_path / "c" / "comparison-q8.json"
    assert leader.compared == CAMPAIGN_WINDOWS
    profile.write_text(text)  # the fault fixed: only that candidate runs again
    events = _run(profile)
    assert [e["name"] for e in events if e.get("event") == "CandidateStarted"] == ["broken"]
    board = json.loads((tmp_path / "c" / "leaderboard.json").read_text())
    assert [r["name"] for r in board["rows"]] == ["q8", "broken", "q3"]


def test_a_candidate_changed_after_its_capture_is_refused_and_never_ranked_with_its_old_report(
        tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "c", {"q8": 0.04, "q4": 0.12})
    _run(profile)
    def q4_mean() -> float:
        return float(json.loads((tmp_path / "c" / "comparison-q4.json").read_text())
                     ["kl_reference_to_candidate"]["mean"])

    before = q4_mean()
    text = profile.read_text()
    # settings that do not change what a server answers keep every result: nothing runs again
    quiet = "port = 0\nstartup_timeout = 300.0\nrequest_timeout = 90.0\n"
    profile.write_text(text.replace("port = 0\n", quiet))
    assert [e for e in _run(profile) if e.get("event") == "CandidateStarted"] == []
    # q4 requantized with a coarser rounding under the same name: its old figures are not q4's any more
    profile.write_text(text.replace("perturb = 0.12", "perturb = 0.3"))
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    records = tmp_path / "c" / "capture" / "capture-q4.json"
    run_dir, finalized = tmp_path / "c" / "capture" / "q4", tmp_path / "c" / "candidates" / "q4"
    assert line == (f"kldtui: error: {records}: window 000 (prose) was captured from a server whose settings "
                    f"differ from this run's (perturb 0.12, now 0.3); remove {records}, {run_dir} and "
                    f"{finalized} to capture it again, or give the changed candidate another name to keep "
                    "both"), line
    # what it says to do works, and only q4 runs again
    import shutil

    records.unlink()
    shutil.rmtree(tmp_path / "c" / "capture" / "q4")
    shutil.rmtree(tmp_path / "c" / "candidates" / "q4")
    events = _run(profile)
    assert [e["name"] for e in events if e.get("event") == "CandidateStarted"] == ["q4"]
    assert q4_mean() > 2 * before  # the coarser rounding's own figures, not the earlier report's
    # a report left behind without its capture is never taken for the candidate either
    shutil.rmtree(tmp_path / "c" / "candidates" / "q8")
    (tmp_path / "c" / "capture" / "capture-q8.json").unlink()
    shutil.rmtree(tmp_path / "c" / "capture" / "q8")
    events = _run(profile)
    assert [e["name"] for e in events if e.get("event") == "CandidateStarted"] == ["q8"]


def test_a_candidate_quantized_again_into_the_same_file_is_refused(tmp_path: Path) -> None:
    """Users quantize again into the same file name. The settings did not change, so the campaign took
    the earlier report as the new weights' ("compared earlier; not captured again") and ranked it under
    the candidate's name. The weights' fingerprint is part of the candidate's identity now."""
    import numpy as np
    from safetensors.numpy import save_file

    folder = tmp_path / "c"
    folder.mkdir()
    weights = folder / "q4.safetensors"
    save_file({"w.weight": np.full((64, 64), 0.25, np.float16)}, str(weights))
    profile = write_profile(folder, {"q8": 0.04, "q4": 0.12}, extra={"q4": {"weights": "q4.safetensors"}})
    _run(profile)
    # copied or touched, the same weights are the same candidate: nothing runs again
    os.utime(weights, ns=(1, 1))
    assert [e for e in _run(profile) if e.get("event") == "CandidateStarted"] == []
    save_file({"w.weight": np.full((64, 64), 0.5, np.float16)}, str(weights))  # same size, new values
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    records = folder / "capture" / "capture-q4.json"
    assert line.startswith(f"kldtui: error: {records}: window 000 (prose) was captured from a server whose "
                           "settings differ from this run's (the weights' files changed (content '"), line
    assert line.endswith("or give the changed candidate another name to keep both"), line


def test_a_reference_capture_resumed_after_its_settings_changed_is_refused(tmp_path: Path) -> None:
    # [reference] capture = "embedded" inherits the candidate's model: a model_seed changed between a run
    # over windows 0-3 and one over 0-7 would join two models' windows in one reference
    from tests.fixtures_campaign import MODEL_SEED, build_suite

    folder = tmp_path / "r"
    build_suite(folder / "suite")
    table = candidate_table("cand", 0.1).replace("[[candidates]]\n", "").replace('name = "cand"\n', "")
    profile = folder / "kldtui.toml"

    def write(seed: int, stop: int, workdir: str) -> None:
        profile.write_text(f'[reference]\nlocal_dir = "suite"\ncapture = "embedded"\n\n[candidate]\n'
                           f'{table.replace(f"model_seed = {MODEL_SEED}", f"model_seed = {seed}")}\n'
                           f'[run]\nworkdir = "{workdir}"\nstop_window = {stop}\n\n'
                           "[compare]\nbootstrap_samples = 200\n")

    write(MODEL_SEED, 4, ".")
    first = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env_with())
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env_with())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # unchanged: resumes as before
    write(MODEL_SEED + 1, 4, ".")  # the candidate changed (the reference is complete: it stays as it is)
    proc = subprocess.run(run_cmd(profile), capture_output=True, text=True, timeout=300, env=env_with())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().endswith("or run the changed candidate in another work folder ([run] workdir) "
                                        "to keep both"), proc.stderr
    write(MODEL_SEED + 1, 8, "b")  # another work folder: the reference's capture would resume in it
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ServerReady" not in proc.stdout and "StageStarted" not in proc.stdout  # before any server
    line = proc.stderr.strip().splitlines()[-1]
    ref = folder / "suite" / "ref"
    assert line == (f"kldtui: error: {ref / 'manifest.json'} was captured from a server whose settings "
                    f"differ from this run's (model_seed {MODEL_SEED}, now {MODEL_SEED + 1}); remove {ref} "
                    "to capture it again, or set the reference's settings back"), line
    manifest = json.loads((folder / "suite" / "ref" / "manifest.json").read_text())
    assert manifest["window_count"] == 4  # nothing of the other model joined the reference
    assert manifest["runtime"]["identity"]["model_seed"] == MODEL_SEED


def test_a_failed_repeat_of_the_leader_ends_the_campaign_failed_with_the_ranking_written(
        tmp_path: Path) -> None:
    """The noise model the profile asks for ([campaign] repeat_leader) is part of the campaign's result:
    a repeat capture that fails ends the run with exit 1 saying so, after the ranking is written."""
    profile = write_profile(tmp_path / "c", {"q8": 0.04, "q4": 0.12})
    _run(profile)  # both compared, no repeat asked for yet
    text = profile.read_text()
    fault = 'env = { KLDTUI_EMBEDDED_FAULT = "http-500" }\n'  # env is not the server's identity: kept
    profile.write_text(text.replace('name = "q8"\n', 'name = "q8"\n' + fault)
                       + "[campaign]\nrepeat_leader = true\n")
    proc = subprocess.run(run_cmd(profile, "--jsonl"), capture_output=True, text=True, timeout=300,
                          env=env_with())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    work = tmp_path / "c"
    assert line.startswith("kldtui: error: the leader's repeat capture (q8.repeat) failed: no measured "
                           "noise model ("), line
    assert line.endswith(f"); the candidates are ranked in {work / 'leaderboard.json'} without it (named "
                         "differences stay provisional); run again to capture the repeat (finished "
                         "candidates are kept)"), line
    events = _events(proc.stdout)
    finished = [e for e in events if e.get("event") == "StageFinished" and e.get("stage") == "campaign"]
    assert finished[0]["summary"].endswith("; the leader's repeat capture (q8.repeat) failed: no measured "
                                           "noise model"), finished
    board = json.loads((work / "leaderboard.json").read_text())
    assert [r["name"] for r in board["rows"]] == ["q8", "q4"]
    assert not list(work.glob("noise-model*.json"))


def test_a_finished_campaign_reads_each_report_once_to_know_it_is_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the leader's repeat capture is finished was asked for the disk plan, for the noise model
    measured earlier and again before the repeat: its report was read three times at start. Each
    report is read once a run now (the leader's again for the state the run returns)."""
    from kldtui.workflow import campaign as campaign_module
    from kldtui.workflow.profile import load_profile

    profile = write_profile(tmp_path / "c", {"close": 0.04, "far": 0.2}, repeat_leader=True, noise=0.05)
    _run(profile)
    real, read = campaign_module.load_state, []

    def counted(workspace):  # type: ignore[no-untyped-def]
        read.append(workspace.report)
        return real(workspace)

    monkeypatch.setattr(campaign_module, "load_state", counted)
    campaign = campaign_module.Campaign(load_profile(profile))
    campaign.run_all()
    work = profile.parent
    assert campaign.noise is not None  # the model measured earlier, its repeat finished
    leader, repeat = work / "comparison-close.json", work / "repeat" / "comparison-close.json"
    assert sorted(read) == sorted([leader, work / "comparison-far.json", repeat, leader])
