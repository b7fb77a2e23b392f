"""One writer per folder (issue 11 item 4) and bad output/work paths refused up front with one line
(issue 11, "clear errors"): the second run exits 2 naming the folder and the holder's pid and command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.folder_lock import LOCK_NAME, hold, lock_path_for_file
from kldtui.formats.logits_writer import LogitsFileWriter
from kldtui.formats.suite import load_suite
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE
HOLDER = ("import sys, time\n"
          "from kldtui.folder_lock import hold\n"
          "kind, path = sys.argv[1], sys.argv[2]\n"
          "with (hold([path]) if kind == 'folder' else hold(files=[path])):\n"
          "    print('held', flush=True)\n"
          "    time.sleep(120)\n")


@pytest.fixture
def holder() -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def start(kind: str, path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, kind, str(path)], stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ))
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_second_holder_is_refused_naming_folder_pid_and_command(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "work"
    proc = holder("folder", folder)
    with pytest.raises(BadInput) as info, hold([folder]):
        pass
    message = str(info.value)
    assert str(folder) in message and f"pid {proc.pid}" in message and "in use" in message
    assert str(folder) in message.split("pid")[1]  # the holder's command (its argument) is named
    proc.send_signal(signal.SIGKILL)  # a killed holder's lock is free again
    proc.wait(timeout=30)
    with hold([folder]):
        assert (folder / LOCK_NAME).exists()
    assert not (folder / LOCK_NAME).exists()  # removed on release


def test_the_holder_is_named_with_its_host_on_one_printable_line(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    """On a shared disk the holder may be another machine's process: its pid alone sent users looking
    for it here. Whoever holds a lock in a shared folder writes what the refusal prints: on one line,
    control characters escaped."""
    import json
    import socket

    folder = tmp_path / "work"
    holder("folder", folder)
    lock = folder / LOCK_NAME
    assert json.loads(lock.read_text())["host"] == socket.gethostname()
    with pytest.raises(BadInput) as info, hold([folder]):
        pass
    assert " on host " not in str(info.value)  # this machine's: no host to name
    lock.write_text(json.dumps({"pid": 4242, "host": "gpu-07", "command": "kldtui run\x1b[2J\nfake line",
                                "started_utc": "2026-12-01T00:00:00Z"}))
    with pytest.raises(BadInput) as info, hold([folder]):
        pass
    message = str(info.value)
    assert "in use by another kldtui run (pid 4242 on host gpu-07: kldtui run\\x1b[2J\\x0afake line (since " \
        "2026-12-01T00:00:00Z))" in message, message
    assert "\n" not in message and "\x1b" not in message


def test_same_process_may_nest(tmp_path: Path) -> None:
    with hold([tmp_path]), hold([tmp_path]):
        pass
    with hold([tmp_path]):
        pass


def test_same_process_may_nest_under_another_spelling_of_the_folder(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`kldtui demo --workdir ../d` refused itself ("in use by another kldtui run (pid <its own>)"): the
    folder was held as ../d and asked for again by its plain name, two keys for one lock file."""
    (tmp_path / "d").mkdir()
    (tmp_path / "k").mkdir()
    monkeypatch.chdir(tmp_path / "k")
    with hold([Path("../d")]), hold([tmp_path / "d"]), hold([tmp_path / "k" / ".." / "d"]):
        pass
    with hold([tmp_path / "d"]):  # released: it can be taken again
        pass


def test_two_compares_to_one_output(tmp_path: Path, holder, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    proc = holder("file", out)
    code = main(["compare", "--suite-manifest", str(EXAMPLE), "--reference-dir", str(EXAMPLE / "ref"),
                 "--candidate-dir", str(EXAMPLE / "candidate"), "--output", str(out),
                 "--bootstrap-samples", "100"])
    err = capsys.readouterr().err
    assert code == 2 and f"pid {proc.pid}" in err and str(out) in err and not out.exists()
    assert lock_path_for_file(out).exists()


def test_two_finalizes_and_two_captures(tmp_path: Path, holder, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cap" / "run").mkdir(parents=True)
    out = tmp_path / "out"
    proc = holder("folder", out)
    code = main(["finalize", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"),
                 "--run-name", "run", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"pid {proc.pid}" in err and str(out) in err
    proc2 = holder("folder", tmp_path / "cap")
    server = tmp_path / "server"
    server.mkdir()
    code = main(["capture", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"),
                 "--run-name", "run", "--server-capture-dir", str(server), "--base-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and f"pid {proc2.pid}" in err


@pytest.mark.slow  # two whole demos
@pytest.mark.timeout(300)
def test_two_demos_on_one_new_folder(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    env = dict(os.environ)
    env.pop("KLDTUI_EMBEDDED_FAULT", None)
    cmd = [sys.executable, "-m", "kldtui", "demo", "--batch", "--jsonl", "--workdir", str(workdir)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert first.stdout is not None
    first.stdout.readline()  # the first event: the folder is locked by then
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    rest, errors = first.communicate(timeout=240)
    assert first.returncode == 0, rest[-2000:] + errors[-2000:]
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"pid {first.pid}" in second.stderr and str(workdir) in second.stderr
    assert json.loads((workdir / "comparison-fine.json").read_text())["windows"] == 12
    assert not list(workdir.rglob("*.partial")) and not list(workdir.rglob(LOCK_NAME))


def test_temporary_names_are_unique_per_process_and_stale_ones_go(tmp_path: Path) -> None:
    suite = load_suite(EXAMPLE)
    w = suite.windows[0]
    stale = tmp_path / f".logits_000.safetensors.{2**22 + 12345}-deadbeef.partial"
    old_style = tmp_path / ".logits_000.safetensors.partial"
    tmp_path.mkdir(exist_ok=True)
    stale.write_bytes(b"x")
    old_style.write_bytes(b"x")
    a = LogitsFileWriter(tmp_path, w, 8, suite.context_length)
    b = LogitsFileWriter(tmp_path, w, 8, suite.context_length, force=True)
    assert a.tmp != b.tmp and str(os.getpid()) in a.tmp.name
    assert a.tmp.exists() and b.tmp.exists()  # a live writer's file is never removed
    assert not stale.exists() and not old_style.exists()
    a.write_rows(np.zeros((w.scored_positions, 8), np.float32))
    a.commit()
    b.abort()


# -- bad output and work paths: one line, exit 2, before any work --------------------------------

def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> None:
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err + captured.out
    assert len(lines) == 1 and "internal error" not in lines[0], captured.err
    assert needle in lines[0], lines[0]


def test_bad_output_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    a_dir = tmp_path / "dir"
    a_dir.mkdir()
    report = tmp_path / "r.json"
    assert main(["compare", "--suite-manifest", str(EXAMPLE), "--reference-dir", str(EXAMPLE / "ref"),
                 "--candidate-dir", str(EXAMPLE / "candidate"), "--output", str(report),
                 "--bootstrap-samples", "100"]) == 0
    capsys.readouterr()
    _one_line_exit_2(["diff", str(report), str(report), "--json", str(a_dir)], capsys, str(a_dir))
    _one_line_exit_2(["leaderboard", str(report), "--json", str(a_dir)], capsys, str(a_dir))
    _one_line_exit_2(["leaderboard", str(report), "--json", str(tmp_path / "no" / "x.json")], capsys,
                     "does not exist")
    _one_line_exit_2(["noise", str(EXAMPLE / "ref"), str(EXAMPLE / "candidate"), "--suite-manifest",
                      str(EXAMPLE), "--output", str(a_dir)], capsys, str(a_dir))
    _one_line_exit_2(["noise", str(EXAMPLE / "ref"), str(EXAMPLE / "candidate"), "--suite-manifest",
                      str(EXAMPLE), "--output", str(tmp_path / "f.json"), "--report", str(a_dir)],
                     capsys, str(a_dir))
    (tmp_path / "cap" / "run").mkdir(parents=True)
    _one_line_exit_2(["finalize", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"),
                      "--run-name", "run", "--output-dir", str(a_file)], capsys, str(a_file))
    server = tmp_path / "server"
    server.mkdir()
    _one_line_exit_2(["capture", "--suite-dir", str(EXAMPLE), "--capture-dir", str(a_file), "--run-name",
                      "run", "--server-capture-dir", str(server)], capsys, str(a_file))
    _one_line_exit_2(["download", "some/repo", "--local-dir", str(a_file)], capsys, str(a_file))
    _one_line_exit_2(["demo", "--batch", "--workdir", str(a_file)], capsys, str(a_file))
    _one_line_exit_2(["demo", "--batch", "--workdir", str(a_file / "sub")], capsys, "is a file")


def test_an_unwritable_folder_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    """An output file in a folder the user cannot write, and a work folder the user cannot write:
    one line naming the folder and what to do; doing it (making the folder writable) clears it."""
    from kldtui.folder_lock import check_output_file, ensure_folder

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("a folder of mode 0o500 is writable here (running as root)")
        out = locked / "board.json"
        with pytest.raises(BadInput) as info:
            check_output_file(out)
        assert str(info.value) == (f"{out}: folder {locked} is not writable; make it writable or give a "
                                   "file in another folder")
        with pytest.raises(BadInput) as info:
            check_output_file(out, fixed_name=True)  # a work folder's report: no other name to give
        assert str(info.value) == f"{out}: folder {locked} is not writable; make it writable, then run again"
        with pytest.raises(BadInput) as info:
            ensure_folder(locked, "work folder")
        assert str(info.value) == f"{locked}: this work folder is not writable; choose a writable place"
        locked.chmod(0o700)  # what the words say to do
        assert check_output_file(out) == out and ensure_folder(locked) == locked
    finally:
        locked.chmod(0o700)


def test_profile_workdir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    build_demo_suite(tmp_path / "suite")
    (tmp_path / "work").write_text("x")
    profile = tmp_path / "kldtui.toml"
    profile.write_text(PROFILE_TEXT.replace('workdir = "."', 'workdir = "work"'))
    _one_line_exit_2(["run", "--batch", "--profile", str(profile)], capsys, "work")


def test_pipeline_and_capture_command_share_the_capture_folder_lock(tmp_path: Path) -> None:
    from kldtui.workflow.demo import prepare_demo
    from kldtui.workflow.pipeline import Pipeline

    profile = prepare_demo(tmp_path / "demo")
    pipeline = Pipeline(profile)
    pipeline.lock_folders()
    try:
        with hold([pipeline.workspace.captures]):  # same process: nested, allowed
            pass
        code = subprocess.run([sys.executable, "-c", HOLDER, "folder", str(pipeline.workspace.captures)],
                              capture_output=True, text=True, timeout=60)
        assert code.returncode != 0 and "in use by another kldtui run" in code.stderr
    finally:
        pipeline.release_folders()


def test_chunks_of_another_request_are_refused(tmp_path: Path) -> None:
    """A capture records the hook's request folder; chunks whose metadata names another request
    (two captures racing on one run before the lock) are refused, at capture and at resume."""
    from kldtui.formats.chunks import write_chunk
    from kldtui.stages.capture import check_chunk_dir

    suite = load_suite(EXAMPLE)
    w = suite.windows[0]
    write_chunk(tmp_path, "cmpl-kldtui-a-w000-1-0-aa", 0, np.zeros((w.scored_positions, 8), np.float32), 8)
    folder = tmp_path / "cmpl-kldtui-a-w000-1-0-aa"
    assert check_chunk_dir(folder, w, request_folder=folder.name).rows == w.scored_positions
    with pytest.raises(BadInput, match="belongs to request 'cmpl-kldtui-a-w000-1-0-aa'"):
        check_chunk_dir(folder, w, request_folder="cmpl-kldtui-b-w000-2-0-bb")


def test_a_folder_at_a_campaign_s_report_name_is_to_be_moved_away(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign's reports have kldtui's names (comparison-NAME.json in the work folder): a folder
    there is refused before any work in words that name no flag the run does not have, and say what
    to do."""
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    build_demo_suite(tmp_path / "suite")
    taken = tmp_path / "work" / "comparison-fine.json"
    taken.mkdir(parents=True)
    profile = tmp_path / "kldtui.toml"
    profile.write_text(PROFILE_TEXT.replace('workdir = "."', 'workdir = "work"'))
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kldtui: error: {taken}: is a folder where kldtui writes its output; move that folder "
                   "away, then run again"], err
    assert sorted(p.name for p in (tmp_path / "work").iterdir() if p.name != ".kldtui.lock") == [taken.name]


def test_a_folder_at_a_run_s_report_name_is_to_be_moved_away(tmp_path: Path) -> None:
    """A single candidate's run (the pipeline, as ``kldtui run`` and the dashboard take it) locks its
    report, comparison.json in the work folder, before any work: a folder there is refused in the
    same words."""
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import load_profile
    from tests.fixtures_campaign import single_profile

    taken = tmp_path / "work" / "comparison.json"
    taken.mkdir(parents=True)
    profile = load_profile(single_profile(tmp_path / "kldtui.toml", tmp_path / "suite", tmp_path / "work"))
    pipeline = Pipeline(profile)
    with pytest.raises(BadInput) as info:
        pipeline.lock_folders()
    assert str(info.value) == (f"{taken}: is a folder where kldtui writes its output; move that folder away, "
                               "then run again")
    pipeline.release_folders()
