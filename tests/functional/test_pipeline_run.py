"""The pipeline on the embedded server: live per-window results, resume, early abort, signals."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kldtui.errors import StageFailed
from kldtui.events import BackendChosen, EarlyAbort, Event, Notice, ResultReady, WindowState
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Profile, profile_from_dict
from kldtui.workflow.state import RunState, load_state
from tests.proc_utils import pid_dead

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo suite with its reference captured once for the module."""
    root = tmp_path_factory.mktemp("demo")
    Pipeline(prepare_demo(root)).reference()
    assert (root / "suite" / "ref" / "manifest.json").is_file()
    return root / "suite"


def make_profile(suite_dir: Path, workdir: Path, *, perturb: float = 0.1, fault: str | None = None,
                 **compare: Any) -> Profile:
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": 7,
                                 "vocab_size": 2048, "perturb": perturb, "port": 0,
                                 "startup_timeout": 60.0, "request_timeout": 60.0}
    if fault:
        candidate["env"] = {"KLDTUI_EMBEDDED_FAULT": fault}
    return profile_from_dict({"reference": {"local_dir": str(suite_dir)}, "candidate": candidate,
                              # the demo suite's first six windows (it has twelve)
                              "run": {"workdir": str(workdir), "run_name": "cand", "stop_window": 6},
                              "compare": {"bootstrap_samples": 500, **compare}}, base_dir=workdir)


@pytest.fixture(scope="module")
def live_run(suite_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunState, list[Event]]:
    """One run_all with slowed chunks (so capture outlasts compare), the state it returned, and
    its events."""
    events: list[Event] = []
    workdir = tmp_path_factory.mktemp("live") / "work"
    state = Pipeline(make_profile(suite_dir, workdir, fault="chunk-delay:0.1"), events.append).run_all()
    return state, events


def test_windows_are_compared_live_and_a_rerun_reuses_everything(
        suite_dir: Path, live_run: tuple[RunState, list[Event]]) -> None:
    state, events = live_run
    path = state.report_path
    assert path is not None and path.name == "comparison.json"
    workdir = path.parent
    # the state the run returned is what the work folder holds (the front ends show it as is)
    on_disk = load_state(make_profile(suite_dir, workdir).workspace())
    # a logits folder's manifest.json is not also a damaged hidden-state manifest (both modes name their
    # manifest so): a reopened dashboard's log said so as a problem of every finished run
    assert not on_disk.problems and on_disk.finalized == 6, on_disk.problems
    assert state.report is not None and state.report.window_range == (0, 6)
    assert (state.windows, state.suite_windows, state.headline, state.window_range) == (
        on_disk.windows, on_disk.suite_windows, on_disk.headline, on_disk.window_range)
    assert state.compared == 6 and [i for i, w in state.windows.items() if w.kl is not None] == list(range(6))
    report = json.loads(path.read_text())
    assert report["windows"] == 6

    states = [(i, e) for i, e in enumerate(events) if isinstance(e, WindowState)]
    compared = {e.window_index: e.figures["kl"] for _, e in states if e.state == "compared"}
    assert sorted(compared) == list(range(6))
    per_window = {w["window_index"]: w["kl_reference_to_candidate"]["mean"] for w in report["per_window"]}
    assert compared == pytest.approx(per_window)
    # live: window 0 was compared before the last window was captured
    first_compared = min(i for i, e in states if e.state == "compared")
    last_captured = max(i for i, e in states if e.state == "captured" and e.stage == "capture")
    assert first_compared < last_captured
    assert any(isinstance(e, ResultReady) and e.path == str(path) for e in events)
    assert sorted(p.name for p in (workdir / "compare").iterdir()) == [
        f"window-{i:03d}.json" for i in range(6)]
    # one disk write per window: chunks are gone once their window was finalized and verified
    assert not list((workdir / "capture").rglob("window-*-chunks"))
    assert not list((workdir / "capture").rglob("logits.rows-*"))
    notes = [e.text for e in events if isinstance(e, Notice) and e.text.startswith("disk: ")]
    assert len(notes) == 1 and "6 finalized windows" in notes[0]  # said before capturing
    # which backend compared and why: said when the choice was made (again only when it changed), and
    # kept in the report, each reason once in window order
    chosen = [e for e in events if isinstance(e, BackendChosen)]
    assert chosen and chosen[0].stage == "compare"
    assert chosen[0].line.startswith(f"compare backend: {report['provenance']['backend']}")
    assert "the candidate server is running on this host" in chosen[0].reason
    assert len({e.line for e in chosen}) == len(chosen)  # never the same choice twice in a row
    assert report["provenance"]["backend_reason"].startswith(chosen[0].reason)

    again: list[Event] = []
    Pipeline(make_profile(suite_dir, workdir), again.append).run_all()
    assert not any(isinstance(e, WindowState) and e.state in ("comparing", "finalizing") for e in again)
    assert json.loads(path.read_text())["per_window"] == report["per_window"]


def test_keep_chunks_keeps_them(suite_dir: Path, tmp_path: Path) -> None:
    profile = make_profile(suite_dir, tmp_path / "work")
    profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, keep_chunks=True,
                                                                   stop_window=2))
    Pipeline(profile).run_all()
    kept = sorted(p.name for p in (tmp_path / "work" / "capture" / "cand").iterdir())
    assert len(kept) == 2 and all(k.endswith("-chunks") for k in kept)


def test_a_kill_during_chunk_removal_does_not_stop_the_rerun(suite_dir: Path, tmp_path: Path) -> None:
    """Finalize deletes a window's chunks once its file is verified. A kill in the middle of that left
    the folder with part of its chunks, and the rerun refused the window ("recorded as captured but its
    chunks do not check out", seen in the campaign's kill test under load). Now the folder is renamed
    aside before it is deleted (whole or gone at any kill), leftovers renamed aside are cleared, and
    a half folder an earlier version left beside a finalized window is removed: the rerun gives the
    same report."""
    profile = make_profile(suite_dir, tmp_path / "work")
    profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, stop_window=2))
    Pipeline(profile).run_all()
    run_dir = tmp_path / "work" / "capture" / "cand"
    first = json.loads((tmp_path / "work" / "comparison.json").read_text())
    markers = sorted(run_dir.glob("*.finalized.json"))
    assert len(markers) == 2 and not list(run_dir.glob("*-chunks"))
    half = run_dir / markers[0].name.removesuffix(".finalized.json")  # an earlier version's half removal
    half.mkdir()
    (half / "chunk-000064-000128.safetensors").write_bytes(b"the rest of the window's chunks")
    aside = run_dir / f".{half.name}.removing-0badc0de"  # this version's, killed after the rename
    aside.mkdir()
    (aside / "chunk-000000-000064.safetensors").write_bytes(b"x")
    outside = tmp_path / "not-ours"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    (run_dir / ".planted.removing-1").symlink_to(outside)  # a link under that name is not followed
    events: list[Event] = []
    Pipeline(profile, events.append).run_all()
    assert not half.exists() and not aside.exists()
    assert (outside / "keep.txt").read_text() == "kept"
    assert any(isinstance(e, Notice) and "whose removal was interrupted" in e.text for e in events)
    again = json.loads((tmp_path / "work" / "comparison.json").read_text())
    assert again["per_window"] == first["per_window"]


def test_a_finalized_window_deleted_as_corrupt_is_captured_again(suite_dir: Path, tmp_path: Path) -> None:
    """`kldtui verify` tells a user to delete a corrupt logits file. With the window's chunks already
    removed by finalize, the rerun stopped: "recorded as captured but its chunks do not check out ...;
    remove its entry from the records", a JSON file to edit by hand, and the finalize worker failed on
    the window first. Now the stale record is dropped with a warning, the window is captured again, and
    the report is the one the first run wrote."""
    profile = make_profile(suite_dir, tmp_path / "work")
    profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, stop_window=3))
    Pipeline(profile).run_all()
    work = tmp_path / "work"
    first = json.loads((work / "comparison.json").read_text())
    victim = Pipeline(profile).workspace.candidate / "logits_001.safetensors"
    assert victim.is_file()
    victim.unlink()
    (work / "comparison.json").unlink()
    events: list[Event] = []
    Pipeline(profile, events.append).run_all()
    warned = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert any("window 001" in w and "its record is dropped and the window is captured again" in w
               for w in warned), warned
    assert not [e for e in events if isinstance(e, WindowState) and e.state == "failed"]
    assert victim.is_file()
    again = json.loads((work / "comparison.json").read_text())
    assert again["per_window"] == first["per_window"]


def test_a_run_over_some_strata_needs_only_their_reference_windows(suite_dir: Path, tmp_path: Path) -> None:
    """``[run] strata`` on a logits suite: the reference stage checks (and would fetch) only those
    domains' windows, so a reference folder holding just them is enough."""
    import shutil

    from kldtui.formats.suite import load_suite

    local = tmp_path / "suite"
    shutil.copytree(suite_dir, local)
    code = [w.index for w in load_suite(local).windows if w.domain == "code"]
    assert code == [4, 5, 6, 7]
    for path in (local / "ref").glob("logits_*.safetensors"):
        if int(path.stem.split("_")[1]) not in code:
            path.unlink()
    profile = make_profile(local, tmp_path / "work")
    profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, stop_window=None,
                                                                    strata=("code",)))
    events: list[Event] = []
    pipeline = Pipeline(profile, events.append)
    pipeline.reference()
    assert [w.index for w in pipeline.windows()] == code
    said = " ".join(e.text for e in events if isinstance(e, Notice))
    assert "4 window(s) of 0..11 (4, 5, 6, 7)" in said, said


def test_early_abort_stops_a_broken_candidate(suite_dir: Path, tmp_path: Path) -> None:
    events: list[Event] = []
    profile = make_profile(suite_dir, tmp_path / "work", perturb=2.0, fault="chunk-delay:0.3",
                           abort_kl_above=1e-6)
    with pytest.raises(StageFailed, match="above abort_kl_above"):
        Pipeline(profile, events.append).run_all()
    records = json.loads((tmp_path / "work" / "capture" / "capture-cand.json").read_text())
    assert 1 <= len(records) < 6  # stopped after the first windows, not the whole suite
    report = json.loads((tmp_path / "work" / "comparison.json").read_text())
    assert 1 <= report["windows"] < 6
    aborts = [e for e in events if isinstance(e, EarlyAbort)]
    assert len(aborts) == 1 and aborts[0].report_path == str(tmp_path / "work" / "comparison.json")



def _write_profile(profile_dir: Path, suite_dir: Path, fault: str | None) -> Path:
    env = f'env = {{ KLDTUI_EMBEDDED_FAULT = "{fault}" }}\n' if fault else ""
    path = profile_dir / "kldtui.toml"
    path.write_text(f'[reference]\nlocal_dir = "{suite_dir}"\n[candidate]\nkind = "embedded"\n'
                    'served_model_name = "cand"\nmodel_seed = 7\nvocab_size = 2048\nperturb = 0.1\n'
                    f'port = 0\n{env}[run]\nworkdir = "work"\nrun_name = "cand"\n'
                    '[compare]\nbootstrap_samples = 500\n')
    return path


# SIGTERM and SIGHUP are handled by the same code (tests/unit/test_batch_reporter.py covers all three
# in-process, tests/functional/test_server_cli.py all three on a real server)
@pytest.mark.slow  # a run, a signal and a rerun
@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_run_batch_signal_stops_the_server_and_a_rerun_resumes(suite_dir: Path, tmp_path: Path,
                                                               sig: signal.Signals) -> None:
    path = _write_profile(tmp_path, suite_dir, "chunk-delay:0.2")
    proc = subprocess.Popen([sys.executable, "-m", "kldtui", "run", "--batch", "--jsonl", "--profile",
                             str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = None
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == "ServerReady":
            pid = event["pid"]
        if event["event"] == "WindowState" and event["stage"] == "capture" and event["state"] == "captured":
            proc.send_signal(sig)
            break
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err
    # the stream ends with its outcome; the server's stop says why (issue 15 items 13 and 4)
    final = json.loads(rest.splitlines()[-1])
    assert final["event"] == "RunFinished" and final["outcome"] == "interrupted" and final["exit_code"] == 130
    assert "capture finished" not in rest
    assert pid is not None and pid_dead(pid)
    records = json.loads((tmp_path / "work" / "capture" / "capture-cand.json").read_text())
    assert 1 <= len(records) < 6
    manifest = tmp_path / "work" / "candidate" / "manifest.json"
    finalized = {int(f["window_index"]): f["file"] for f in json.loads(manifest.read_text())["windows"]} \
        if manifest.exists() else {}
    for record in records:  # every recorded window is complete on disk: its chunks, or its final file
        chunk_dir = tmp_path / "work" / "capture" / "cand" / Path(record["chunk_dir"]).name
        if record["window_index"] in finalized:  # its chunks went once its file was verified
            assert (tmp_path / "work" / "candidate" / finalized[record["window_index"]]).is_file()
            assert not chunk_dir.exists()
        else:
            assert sorted(p.name for p in chunk_dir.iterdir()) == sorted(record["chunks"])
    assert not list((tmp_path / "work" / "candidate").glob(".*partial"))

    path = _write_profile(tmp_path, suite_dir, None)
    rerun = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(path)],
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert "already captured" in rerun.stdout
    # the end says where the report is and what to do next (issue 15 item 2)
    report = tmp_path / "work" / "comparison.json"
    assert f"report: {report}" in rerun.stdout and f"kldtui view {report}" in rerun.stdout
    assert "kldtui diff" in rerun.stdout
    final = json.loads((tmp_path / "work" / "capture" / "capture-cand.json").read_text())
    assert [r["request_id"] for r in final[:len(records)]] == [r["request_id"] for r in records]


def test_run_batch_says_why_the_server_stopped_and_its_log_keeps_it(suite_dir: Path, tmp_path: Path) -> None:
    """A server that died mid-capture, seen over SSH: kldtui run --batch (no --server-log) dropped
    kldtui's own "server stopped (error); exit code 3" with the server's output, and no file kept it."""
    path = _write_profile(tmp_path, suite_dir, "die-after-rows:1")
    done = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--plain", "--profile",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    log = tmp_path / "work" / "server.log"
    stops = [line for line in done.stdout.splitlines() if "server: server stopped (" in line]
    # the reason is the capture's failure, not "capture finished"; the batch lines name the log once
    # (the note on the server's ERROR line here, else the stop line itself)
    assert len(stops) == 1 and "server: server stopped (error); exit code 3" in stops[0], done.stdout[-2000:]
    assert sum(str(log) in line for line in done.stdout.splitlines()) == 1, done.stdout[-2000:]
    assert "kldtui: server stopped (error); exit code 3" in log.read_text().splitlines()


def test_batch_run_ends_with_the_state_the_pipeline_returned(suite_dir: Path, tmp_path: Path) -> None:
    """kldtui run --batch prints the summary and the next steps from the run state run_all returns:
    two windows of the suite's twelve suggest the whole suite."""
    path = _write_profile(tmp_path, suite_dir, None)
    path.write_text(path.read_text().replace("[run]\n", "[run]\nstop_window = 2\n", 1))
    done = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--plain", "--profile",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = tmp_path / "work" / "comparison.json"
    tail = done.stdout.splitlines()[-4:]
    # the next command as this kldtui was started (here `PYTHON -m kldtui`: text.kldtui_command)
    assert tail[0] == f"report: {report}" and tail[1].startswith("next: ")
    assert tail[1].endswith(f"-m kldtui view {report}")
    assert tail[-1].strip() == f"all 12 windows: [run] start_window = 0, stop_window = 12 in {path}"


def test_no_profile_gives_a_hint_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "kldtui"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TERM": "dumb"})
    assert proc.returncode == 2
    assert "kldtui demo" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_bad_profile_is_exit_2_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "kldtui.toml").write_text('[candidate]\nkind = "embedded"\nprot = 1\n')
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "did you mean 'port'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_stage_by_stage_gives_the_same_report_as_run_all(suite_dir: Path, tmp_path: Path,
                                                        live_run: tuple[RunState, list[Event]]) -> None:
    full = live_run[0].report_path
    assert full is not None
    events: list[Event] = []
    p = Pipeline(make_profile(suite_dir, tmp_path / "steps"), events.append)
    assert p.window_list() == [(i, d) for i, d in enumerate(["prose"] * 4 + ["code"] * 2)]
    p.reference()
    url = p.serve()
    assert p.server_running and url.startswith("http://127.0.0.1:")
    assert len(p.capture()) == 6
    assert p.server_running  # stays up for more stages until stopped
    p.finalize()
    path = p.compare()
    p.stop_server()
    # the compare stage said its backend once: the pipeline chose it, the engine does not say it again
    said = [e.line for e in events if isinstance(e, BackendChosen)]
    assert len(said) == 1 and "the candidate server is running on this host" in said[0], said
    assert not p.server_running
    a, b = json.loads(full.read_text()), json.loads(path.read_text())
    for key in ("per_window", "kl_window_cluster_bootstrap", "domains", "window_range", "positions"):
        assert a[key] == b[key], key


def test_missing_suite_and_busy_port_are_found_before_any_server_starts(tmp_path: Path) -> None:
    """Issue 15 item 3: every input is checked first, with how to get what is missing."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = tmp_path / "kldtui.toml"
        path.write_text(f'[reference]\nlocal_dir = "{tmp_path / "no-suite"}"\n[candidate]\n'
                        f'kind = "embedded"\nserved_model_name = "cand"\nport = {port}\n'
                        '[run]\nworkdir = "work"\n')
        done = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--jsonl", "--profile",
                               str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert not any(e["event"] in ("StageStarted", "ServerReady") for e in events)  # nothing launched
    # the first problem is the run's error (RunFinished, stderr), the others notices before it: each once
    problems = [e["text"] for e in events if e["event"] == "Notice" and e["level"] == "error"]
    assert events[-1]["event"] == "RunFinished" and events[-1]["outcome"] == "bad_input"
    problems.append(events[-1]["message"])
    assert any("suite manifest not found" in p and "kldtui download" in p and "kldtui prepare" in p
               for p in problems)
    assert any(f"port {port}" in p and "in use" in p for p in problems)
    assert sum("suite manifest not found" in p for p in problems) == 1, problems
    assert done.stderr.count("\n") == 1 and "suite manifest not found" in done.stderr


def test_a_users_stop_is_not_logged_as_an_error(suite_dir: Path, tmp_path: Path) -> None:
    """Issue 15 item 4: pressing s used to log 'server stopped (error); exit code 0'."""
    from kldtui.errors import Interrupted
    from kldtui.events import Cancel, LogLine, StageStarted

    events: list[Event] = []
    cancel = Cancel()

    def emit(event: Event) -> None:
        events.append(event)
        if isinstance(event, StageStarted) and event.stage == "reference":
            cancel.set("stopped by the user")  # while the server starts and the reference is checked

    with pytest.raises(Interrupted):
        Pipeline(make_profile(suite_dir, tmp_path / "work"), emit, cancel).run_all()
    stops = [e.line for e in events if isinstance(e, LogLine) and e.line.startswith("server stopped")]
    assert stops and all("(error)" not in s for s in stops), stops
