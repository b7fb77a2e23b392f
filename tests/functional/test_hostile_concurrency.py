"""Issue 27 items 9 and 5 (capture records): capture and finalize on one capture folder exclude each
other; rerunning a capture after finalize (which deleted the chunks) is a no-op; a run's folder lock
covers its report (compare --output W/comparison.json during a run in W is refused); finalize refuses
chunks captured from other tokens than the suite's (capture records carry the token hash)."""

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
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.serve import ServerProcess
from tests.paths import EXAMPLE_SUITE

pytestmark = pytest.mark.timeout(300)

HOLDER = ("import sys, time\n"
          "from kldtui.folder_lock import hold\n"
          "with hold([sys.argv[1]]):\n"
          "    print('held', flush=True)\n"
          "    time.sleep(120)\n")


@pytest.fixture
def holder() -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def start(path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[list[str], list[str], Path]]:
    """A suite of two windows captured by ``kldtui capture`` from the embedded server (still
    running): (capture argv, finalize argv, the server's capture folder)."""
    rng = np.random.default_rng(5)
    write_suite(tmp_path / "suite", [(d, rng.integers(0, 128, 120).tolist()) for d in ("prose", "code")])
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "m",
            "--vocab-size", "128", "--max-num-batched-tokens", "64", "--max-num-seqs", "1"]
    common = ["--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(tmp_path / "cap"),
              "--run-name", "c"]
    with ServerProcess(argv, capture_dir=tmp_path / "srv", served_model_name="m") as server:
        url = server.wait_ready(timeout=60)
        capture = ["capture", *common, "--base-url", url, "--served-model-name", "m",
                   "--server-capture-dir", str(tmp_path / "srv"), "--expected-vocab", "128"]
        assert main(capture) == 0
        yield capture, ["finalize", *common, "--output-dir", str(tmp_path / "final")], tmp_path / "srv"


Captured = tuple[list[str], list[str], Path]


def test_a_capture_rerun_after_finalize_is_a_no_op(captured: Captured, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    capture, finalize, server_dir = captured
    assert main(finalize) == 0
    assert not list((tmp_path / "cap" / "c").glob("window-*-chunks"))  # finalize deleted the chunks
    requests_before = sorted(os.listdir(server_dir))
    capsys.readouterr()
    assert main(capture) == 0
    out = capsys.readouterr()
    assert "2 windows already captured" in out.out and "0 captured, 2 skipped" in out.out, out.out + out.err
    assert sorted(os.listdir(server_dir)) == requests_before  # nothing was sent again
    records = json.loads((tmp_path / "cap" / "capture-c.json").read_text())
    assert [r["window_index"] for r in records] == [0, 1]


def test_finalize_refuses_chunks_captured_from_other_tokens(captured: Captured, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, finalize, _ = captured
    records = json.loads((tmp_path / "cap" / "capture-c.json").read_text())
    assert all(len(r["token_ids_json_sha256"]) == 64 for r in records)  # the capture recorded them
    # the suite changes under the capture (its window 1 now holds other tokens)
    rng = np.random.default_rng(6)
    manifest = json.loads((tmp_path / "suite" / "suite-manifest.json").read_text())
    write_suite(tmp_path / "suite2", [(w["domain"], rng.integers(0, 128, 120).tolist())
                                      for w in manifest["windows"]])
    for name in ("suite-manifest.json", "tokens"):
        target = tmp_path / "suite" / name
        if target.is_dir():
            for f in target.iterdir():
                f.unlink()
            target.rmdir()
        else:
            target.unlink()
        os.rename(tmp_path / "suite2" / name, target)
    capsys.readouterr()
    assert main(finalize) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    assert len(err) == 1 and "window 000" in err[0] and "token" in err[0] and "capture-c.json" in err[0], err
    assert not (tmp_path / "final" / "logits_000.safetensors").exists()


def test_finalize_waits_for_no_capture(captured: Captured, tmp_path: Path, holder,  # type: ignore[no-untyped-def]
                                       capsys: pytest.CaptureFixture[str]) -> None:
    capture, finalize, _ = captured
    proc = holder(tmp_path / "cap")  # a capture (or anything) writing into the capture folder
    capsys.readouterr()
    assert main(finalize) == 2
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and str(tmp_path / "cap") in err
    assert not (tmp_path / "final" / "manifest.json").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc = holder(tmp_path / "final")  # a finalize into the output folder: capture goes on
    assert main(capture) == 0


def test_compare_into_a_running_work_folder_is_refused(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    env = dict(os.environ)
    env.pop("KLDTUI_EMBEDDED_FAULT", None)
    run = subprocess.Popen([sys.executable, "-m", "kldtui", "demo", "--batch", "--jsonl", "--workdir",
                            str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert run.stdout is not None
    run.stdout.readline()  # the first event: the folders are locked by then
    compare = subprocess.run([sys.executable, "-m", "kldtui", "compare", "--suite-manifest",
                              str(EXAMPLE_SUITE), "--reference-dir", str(EXAMPLE_SUITE / "ref"),
                              "--candidate-dir", str(EXAMPLE_SUITE / "candidate"), "--output",
                              str(workdir / "comparison-fine.json"), "--bootstrap-samples", "50"],
                             capture_output=True, text=True, timeout=120)
    rest, errors = run.communicate(timeout=240)
    assert run.returncode == 0, rest[-2000:] + errors[-2000:]
    assert compare.returncode == 2, compare.stdout[-2000:] + compare.stderr[-2000:]
    # the demo is a campaign: its candidates' reports are held from its first event
    assert f"pid {run.pid}" in compare.stderr and "comparison-fine.json" in compare.stderr
    assert json.loads((workdir / "comparison-fine.json").read_text())["windows"] == 12  # the run's report
