"""Clear errors instead of internal ones (issue 11): one line, exit 2, naming the file; and JSON
outputs readable like the logits files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.events import Event, LogLine
from kldtui.stages.serve import ServerProcess
from kldtui.stages.verify import verify_path
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".kldtui-*"))
    return root


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str, code: int = 2) -> str:
    got = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert got == code, captured.err + captured.out[-2000:]
    assert len(lines) == 1 and "internal error" not in lines[0], captured.err
    assert needle in lines[0], lines[0]
    return lines[0]


def test_logits_file_that_is_a_symlink_to_itself(suite: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    target = suite / "candidate" / "logits_001.safetensors"
    target.unlink()
    target.symlink_to(target)
    one_line(["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
              "--candidate-dir", str(suite / "candidate"), "--output", str(tmp_path / "r.json")],
             capsys, "logits_001.safetensors")
    result = verify_path(suite / "candidate", suite=suite)
    assert any("logits_001.safetensors" in f and "cannot be read" in f for f in result.failures)


def test_runtime_json_with_nan_is_refused_before_any_file(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cap" / "run").mkdir(parents=True)
    runtime = tmp_path / "runtime.json"
    runtime.write_text('{"x": NaN}')
    out = tmp_path / "out"
    one_line(["finalize", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"), "--run-name",
              "run", "--output-dir", str(out), "--runtime-json", str(runtime)], capsys, "NaN")
    assert not out.exists()


@pytest.mark.parametrize("repo", ["a/b/c", "bad repo", "a" * 200 + "/b", "x/..y"])
def test_invalid_repo_id(tmp_path: Path, repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line(["download", repo, "--local-dir", str(tmp_path / "d")], capsys, "repository id")


@pytest.mark.parametrize(("flag", "value"), [("--stop-window", "99"), ("--start-window", "-3")])
def test_verify_window_range_is_one_error(suite: Path, flag: str, value: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    one_line(["verify", str(suite), flag, value], capsys, "window")


def test_dataset_root_with_logits_but_no_manifest_is_not_ok(suite: Path) -> None:
    shutil.copytree(suite / "ref", suite / "ref2")
    (suite / "ref" / "manifest.json").unlink()
    result = verify_path(suite)
    assert not result.ok and any("no manifest.json" in f for f in result.failures)


@pytest.mark.parametrize("content", ["[1, 2]", '{"format_version": 1}', "not json", "[" * 50000])
def test_view_of_a_malformed_report(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    one_line(["view", str(path)], capsys, str(path))


def test_profile_window_range_outside_the_suite(tmp_path: Path) -> None:
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    build_demo_suite(tmp_path / "suite")
    profile = tmp_path / "kldtui.toml"
    profile.write_text(PROFILE_TEXT.replace("[run]\n", "[run]\nstop_window = 99\n")
                       .replace('capture = "embedded"', ""))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "outside the suite (windows 0-11" in proc.stderr and "repository id" not in proc.stderr


@pytest.mark.timeout(120)
def test_sigterm_before_the_batch_handlers_exits_130(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "kldtui", "demo", "--batch", "--workdir", str(workdir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not workdir.exists() and time.monotonic() < deadline:  # main() runs: the demo is being made
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    # the head says whether the batch handler saw the signal ("SIGTERM received"), the tail how it ended
    assert proc.returncode == 130, (proc.returncode, out[:1500], out[-800:], err[-1000:])
    assert "Traceback" not in err


@pytest.mark.timeout(120)
def test_sigterm_whose_exception_was_swallowed_still_stops_the_batch_run(tmp_path: Path) -> None:
    # An extension module's import can swallow what a signal handler raised inside it (numpy.random's
    # Cython modules did: the whole demo ran and exited 0); the signal is recorded as well, so the
    # batch run stops before its first window and the process exits 130.
    workdir = tmp_path / "demo"
    script = ("import os, signal, sys, time\n"
              "from kldtui import stop_signals\n"
              "from kldtui.cli.main import run\n"
              "stop_signals.stop_like_ctrl_c()\n"
              "try:\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(5)\n"
              "except BaseException:\n"
              "    pass  # what the extension module did\n"
              f"sys.argv = ['kldtui', 'demo', '--batch', '--workdir', {str(workdir)!r}]\n"
              "run()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 130, (proc.returncode, proc.stdout[-1500:], proc.stderr[-1000:])
    assert "SIGTERM received: stopping" in proc.stdout
    assert "interrupted by SIGTERM" in proc.stderr and "Traceback" not in proc.stderr
    assert not (workdir / "leaderboard.json").exists()
    assert "server started" not in proc.stdout and "capture done" not in proc.stdout, proc.stdout[-1500:]


def test_stopped_servers_traceback_stays_in_its_log(tmp_path: Path) -> None:
    script = ("import time\n"
              "try:\n"
              "    print('serving', flush=True)\n"
              "    time.sleep(60)\n"
              "except KeyboardInterrupt:\n"
              "    print('Traceback (most recent call last): the server was stopped', flush=True)\n"
              "    raise\n")
    events: list[Event] = []
    server = ServerProcess([sys.executable, "-c", script], capture_dir=tmp_path / "cap",
                           served_model_name="x",
                           emit=events.append, log_path=tmp_path / "server.log", ensure_flags=False)
    server.start()
    deadline = time.monotonic() + 30
    while not any(isinstance(e, LogLine) and e.line == "serving" for e in events):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    server.stop()
    lines = [e.line for e in events if isinstance(e, LogLine)]
    assert not any("Traceback" in line for line in lines), lines
    assert "Traceback" in (tmp_path / "server.log").read_text()


def _umask() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    return 0o022


def test_json_outputs_are_readable_like_the_logits_files(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
                 "--candidate-dir", str(suite / "candidate"), "--output", str(out),
                 "--bootstrap-samples", "100"]) == 0
    expected = 0o666 & ~_umask()
    assert out.stat().st_mode & 0o777 == expected
    json.loads(out.read_text())
    from kldtui.formats.atomic import write_json_atomic

    write_json_atomic(tmp_path / "m.json", {"a": 1})
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == expected


def test_diff_refuses_an_absurd_kl_mean(suite: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    assert main(["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
                 "--candidate-dir", str(suite / "candidate"), "--output", str(good),
                 "--bootstrap-samples", "100"]) == 0
    capsys.readouterr()
    doc = json.loads(good.read_text())
    doc["per_window"][0]["kl_mean"] = 1e308
    doc["per_window_arrays"]["kl_mean"][0] = 1e308
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    line = one_line(["diff", str(good), str(huge)], capsys, "per_window[0].kl_mean: 1e+308 is impossible")
    assert str(huge) in line and "at most 7e+38" in line


def test_an_embedded_candidate_of_another_vocabulary_is_refused_before_launching(tmp_path: Path) -> None:
    """The built-in model is as wide as its vocab_size: a campaign candidate that differs from the
    reference is said before any server starts (it was found at its first captured chunk, after the
    candidates before it had run), naming the key to set."""
    from kldtui.workflow.preflight import preflight
    from kldtui.workflow.profile import profile_from_dict
    from tests.fixtures_compare import make_suite

    make_suite(tmp_path / "suite", windows=2, context=20, vocab=500)
    profile = profile_from_dict(
        {"candidates": [{"name": "fine", "kind": "embedded", "vocab_size": 500, "port": 0},
                        {"name": "narrow", "kind": "embedded", "vocab_size": 256, "port": 0}],
         "reference": {"local_dir": str(tmp_path / "suite")}, "run": {"workdir": str(tmp_path / "w")}},
        base_dir=tmp_path, path=tmp_path / "p.toml")
    fine, narrow = (profile.member(c) for c in profile.candidates)
    assert preflight(fine, profile.member_workspace("fine")) == []
    assert preflight(narrow, profile.member_workspace("narrow")) == [
        f"{profile.where}: [[candidates]] 'narrow' the embedded server: its vocabulary has 256 tokens, the "
        f"reference's 500 ({tmp_path / 'suite' / 'ref' / 'manifest.json'}); the logits cannot be compared; "
        "set vocab_size = 500"]
