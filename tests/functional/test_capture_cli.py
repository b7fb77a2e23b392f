"""``kldtui capture`` and ``kldtui finalize`` with the original scripts' flags (attach mode)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.suite import check_manifest_matches_suite, load_logits_manifest
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.serve import ServerProcess


def test_capture_then_finalize_from_the_command_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(9)
    suite = write_suite(tmp_path / "suite", [(d, rng.integers(0, 128, 200).tolist())
                                             for d in ("prose", "prose", "code")])
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "Kimi-K3",
            "--vocab-size", "128", "--max-num-batched-tokens", "64", "--max-num-seqs", "1"]
    common = ["--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(tmp_path / "cap"),
              "--run-name", "cand"]
    with ServerProcess(argv, capture_dir=tmp_path / "srv", served_model_name="Kimi-K3") as server:
        url = server.wait_ready(timeout=60)
        capture = ["capture", *common, "--base-url", url, "--server-capture-dir", str(tmp_path / "srv"),
                   "--expected-vocab", "128"]
        assert main([*capture, "--stop-window", "2"]) == 0
        out = capsys.readouterr().out
        assert "window 000 (prose) captured" in out and "window 001 (prose) captured" in out
        assert main(capture) == 0  # resumes: 0 and 1 skipped, 2 captured
        out = capsys.readouterr().out
        assert "2 windows already captured" in out and "1 captured, 2 skipped" in out
    records = json.loads((tmp_path / "cap" / "capture-cand.json").read_text())
    assert [r["window_index"] for r in records] == [0, 1, 2]

    runtime = tmp_path / "runtime.json"
    runtime.write_text(json.dumps({"vllm_version": "embedded", "model": "tiny", "args": ["--x"]}))
    kept = ["finalize", *common, "--output-dir", str(tmp_path / "kept"), "--keep-chunks"]
    assert main(kept) == 0
    assert len(list((tmp_path / "cap" / "cand").glob("window-*-chunks"))) == 3
    finalize = ["finalize", *common, "--output-dir", str(tmp_path / "final"), "--runtime-json", str(runtime)]
    assert main(finalize) == 0
    manifest = load_logits_manifest(tmp_path / "final")
    check_manifest_matches_suite(manifest, suite, suite.windows)
    assert manifest.runtime == {"vllm_version": "embedded", "model": "tiny", "args": ["--x"]}
    # one copy on disk: each window's chunks went once its file was verified and listed
    assert not list((tmp_path / "cap" / "cand").glob("window-*-chunks"))
    assert main(finalize) == 0  # finalized files are kept (their chunks are gone)
    assert load_logits_manifest(tmp_path / "final").window_count == 3
    capsys.readouterr()


def test_capture_without_server_folder_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_KLD_CAPTURE_DIR", raising=False)
    write_suite(tmp_path / "suite", [("prose", [1, 2, 3])])
    code = main(["capture", "--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(tmp_path / "c"),
                 "--run-name", "r"])
    err = capsys.readouterr().err
    assert code == 2 and "--server-capture-dir is not set" in err and len(err.strip().splitlines()) == 1
    code = main(["finalize", "--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(tmp_path / "c"),
                 "--run-name", "r", "--output-dir", str(tmp_path / "f")])
    err = capsys.readouterr().err
    assert code == 2 and "no such capture run" in err


def test_score_mode_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kldtui capture --mode score`` against a server started in score mode, ``kldtui finalize
    --mode score``, then ``kldtui compare`` finds the score folder and gives logits mode's report."""
    rng = np.random.default_rng(11)
    write_suite(tmp_path / "suite", [(d, rng.integers(0, 128, 200).tolist()) for d in ("prose", "code")])
    base = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "Kimi-K3",
            "--vocab-size", "128", "--max-num-batched-tokens", "64", "--max-num-seqs", "1"]
    suite_flags = ["--suite-dir", str(tmp_path / "suite"), "--capture-dir", str(tmp_path / "cap")]
    runs = (("ref", [], "logits", tmp_path / "suite" / "ref"), ("cand", ["--perturb", "0.2"], "logits",
            tmp_path / "cand"), ("score", ["--perturb", "0.2", "--capture-mode", "score", "--score-suite",
                                         str(tmp_path / "suite")], "score", tmp_path / "scores"))
    for name, extra, mode, out in runs:
        with ServerProcess([*base, *extra], capture_dir=tmp_path / f"srv-{name}",
                           served_model_name="Kimi-K3") as server:
            url = server.wait_ready(timeout=60)
            assert main(["capture", *suite_flags, "--run-name", name, "--base-url", url, "--mode", mode,
                         "--server-capture-dir", str(tmp_path / f"srv-{name}")]) == 0
        assert main(["finalize", *suite_flags, "--run-name", name, "--output-dir", str(out), "--mode", mode,
                     "--kind", "reference" if name == "ref" else "candidate"]) == 0
    reports = []
    for cand in ("cand", "scores"):
        assert main(["compare", "--suite-manifest", str(tmp_path / "suite"), "--reference-dir",
                     str(tmp_path / "suite" / "ref"), "--candidate-dir", str(tmp_path / cand),
                     "--output", str(tmp_path / f"{cand}.json")]) == 0
        reports.append(json.loads((tmp_path / f"{cand}.json").read_text()))
    assert not list((tmp_path / "scores").glob("logits*"))
    assert not list((tmp_path / "cap" / "score").rglob("logits*"))
    assert reports[1]["provenance"]["backend"] == "server-scores"
    from tests.fixtures_score import report_differences

    assert report_differences(reports[0], reports[1]) == []
    capsys.readouterr()


def test_a_capture_mode_change_is_refused_before_the_attached_server_is_reached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kldtui capture` attaches to a server kldtui did not launch, whose settings it does not know:
    the check of the run's records returned before it looked at their capture mode, so a window
    recorded in another mode was refused only after the server was reached (and only for a window of
    this capture's range). The mode is checked first: one line naming the records file, exit 2, and
    the server's port never connected to."""
    import socket

    rng = np.random.default_rng(3)
    write_suite(tmp_path / "suite", [(d, rng.integers(0, 64, 20).tolist()) for d in ("prose", "code")])
    (tmp_path / "srv").mkdir()
    records = tmp_path / "cap" / "capture-cand.json"
    records.parent.mkdir()
    records.write_text(json.dumps([{"window_index": 1, "domain": "code", "mode": "score"}]))
    with socket.socket() as server:  # where the attached server listens: any connection is seen
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        capsys.readouterr()
        code = main(["capture", "--suite-dir", str(tmp_path / "suite"), "--capture-dir",
                     str(tmp_path / "cap"), "--run-name", "cand", "--base-url",
                     f"http://127.0.0.1:{server.getsockname()[1]}", "--server-capture-dir",
                     str(tmp_path / "srv"), "--stop-window", "1"])
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing connected: the refusal came before the server was reached
    assert code == 2
    assert capsys.readouterr().err == (
        f"kldtui: error: {records}: window 001 (code) was captured in score mode, this run captures in "
        "logits mode; use another run name ([run] run_name, --run-name) to keep both, or remove its record "
        "to capture it again\n")
