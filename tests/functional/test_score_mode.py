"""Score mode (issue 16) on the embedded server: the server scores each chunk against the reference
and saves per-row records only; finalize joins them per window; compare builds the same report.

Equality contract (docs/SCORE_MODE.md): per-row KL, reverse KL and JS within 1e-6 relative where
KL >= 1e-8 (below that, both sides take the precise CPU path: within 1e-6 absolute of 1e-8), top-k
ranks, argmaxes exact, next-token log-probabilities within 1e-6 absolute and the reference's top
probability within 1e-6 relative; every report field present on both sides.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui import capture_modes
from kldtui.errors import BadInput, StageFailed
from kldtui.formats.chunks import request_tag, window_of_request
from kldtui.formats.scores import read_records, write_score_chunk
from kldtui.metrics.kernels import RowStats
from kldtui.metrics.score import RECORD_DTYPE, to_records
from kldtui.scoring import ScoreSession
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Profile, profile_from_dict
from tests.fixtures_score import report_differences, row_differences

pytestmark = pytest.mark.timeout(300)


def _profile(suite_dir: Path, workdir: Path, mode: str, run_name: str = "cand") -> Profile:
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": 7,
                                 "vocab_size": 2048, "perturb": 0.1, "port": 0,
                                 "startup_timeout": 60.0, "request_timeout": 60.0}
    return profile_from_dict({"reference": {"local_dir": str(suite_dir)}, "candidate": candidate,
                              "run": {"workdir": str(workdir), "run_name": run_name},
                              "compare": {"bootstrap_samples": 500, "reverse": True},
                              "capture": {"mode": mode}}, base_dir=workdir)


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    Pipeline(prepare_demo(root)).reference()
    return root / "suite"


@pytest.fixture(scope="module")
def both_modes(suite_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Profile, Profile]:
    root = tmp_path_factory.mktemp("modes")
    logits = _profile(suite_dir, root / "logits", "logits")
    score = _profile(suite_dir, root / "score", "score")
    Pipeline(logits).run_all()
    Pipeline(score).run_all()
    return logits, score


def test_score_mode_gives_the_logits_mode_report_without_candidate_logits(
        both_modes: tuple[Profile, Profile]) -> None:
    from kldtui.formats.report import load_report
    from kldtui.stages.compare import CompareOptions, Comparer

    logits, score = both_modes
    a = load_report(Path(logits.run.workdir) / "comparison.json")
    b = load_report(Path(score.run.workdir) / "comparison.json")
    assert report_differences(a.to_json(), b.to_json()) == []
    assert b.provenance.backend == "server-scores"
    # per row, window by window
    ws_a, ws_b = logits.workspace(), score.workspace()
    suite = Pipeline(logits).load_suite()
    rows_a = Comparer(ws_a, suite, CompareOptions(reverse=True)).windows()
    rows_b = Comparer(ws_b, suite, CompareOptions(reverse=True, mode=capture_modes.SCORE)).windows()
    assert [r.window_index for r in rows_a] == [r.window_index for r in rows_b]
    for ra, rb in zip(rows_a, rows_b, strict=True):
        assert row_differences(ra.rows, rb.rows) == [], ra.window_index
    # nothing of the candidate's logits on disk: only score files and score chunks
    work = Path(score.run.workdir)
    assert not list(work.rglob("logits*.safetensors"))
    assert sorted(p.name for p in (work / "candidate").glob("*.safetensors")) == [
        f"scores_{i:03d}.safetensors" for i in range(len(rows_b))]
    assert (work / "candidate" / "scores-manifest.json").is_file()
    assert not (work / "candidate" / "manifest.json").exists()


def test_compare_of_a_score_folder_is_found_by_kldtui_compare(both_modes: tuple[Profile, Profile]) -> None:
    """``kldtui compare`` (no mode given) on a score folder reads the scores."""
    from kldtui.stages.compare import compare

    _, score = both_modes
    work = Path(score.run.workdir)
    suite = Path(score.reference.local_dir or "")
    report = compare(suite, suite / "ref", work / "candidate")
    assert report.provenance.backend == "server-scores"
    assert report.positions == sum(w.scored_positions for w in Pipeline(score).windows())


def test_a_rerun_in_score_mode_skips_everything(both_modes: tuple[Profile, Profile]) -> None:
    from kldtui.events import Event, WindowState

    _, score = both_modes
    events: list[Event] = []
    Pipeline(score, events.append).run_all()
    captured = [e for e in events if isinstance(e, WindowState) and e.state == "captured"]
    assert captured and all(e.figures.get("skipped") for e in captured)


def test_a_tampered_score_file_is_refused(both_modes: tuple[Profile, Profile], tmp_path: Path) -> None:
    from kldtui.stages.compare import compare

    _, score = both_modes
    suite = Path(score.reference.local_dir or "")
    copy = tmp_path / "candidate"
    shutil.copytree(Path(score.run.workdir) / "candidate", copy)
    data = bytearray((copy / "scores_001.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (copy / "scores_001.safetensors").write_bytes(bytes(data))
    with pytest.raises(BadInput, match=r"scores_001\.safetensors: window 001.*SHA-256"):
        compare(suite, suite / "ref", copy)


def test_a_mismatched_reference_fails_the_request_not_the_server(suite_dir: Path, tmp_path: Path) -> None:
    """The reference file of window 0 replaced by window 1's (manifest entry fixed to match): the
    server refuses it by its header (window_index), the window fails with the hook's marker and the
    reason, and the server keeps serving."""
    from kldtui.formats.suite import load_logits_manifest

    suite = tmp_path / "suite"
    shutil.copytree(suite_dir, suite)
    ref = suite / "ref"
    shutil.copyfile(ref / "logits_001.safetensors", ref / "logits_000.safetensors")
    manifest = json.loads((ref / "manifest.json").read_text())
    one = manifest["windows"][1]
    manifest["windows"][0].update(size_bytes=one["size_bytes"], sha256=one["sha256"])
    (ref / "manifest.json").write_text(json.dumps(manifest))
    load_logits_manifest(ref)  # still a well-formed manifest
    pipeline = Pipeline(_profile(suite, tmp_path / "work", "score"))
    try:
        with pytest.raises(StageFailed, match=r"capture hook reported an error.*window_index"):
            pipeline.capture()
        assert pipeline.server is not None and pipeline.server.alive() is None  # still serving
    finally:
        pipeline.stop_server()
    assert not (tmp_path / "work" / "capture" / "capture-cand.json").exists()


def test_a_missing_reference_is_named(suite_dir: Path, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(suite_dir, suite)
    (suite / "ref" / "logits_000.safetensors").unlink()
    pipeline = Pipeline(_profile(suite, tmp_path / "work", "score"))
    try:
        with pytest.raises(StageFailed,
                           match=r"logits_000\.safetensors: window 000 \(reference\): file is missing"):
            pipeline.capture()
    finally:
        pipeline.stop_server()


def test_logits_and_score_records_do_not_mix(both_modes: tuple[Profile, Profile]) -> None:
    """A run captured in logits mode, resumed in score mode under the same run name, says so."""
    import dataclasses

    logits, _ = both_modes
    switched = dataclasses.replace(logits, capture=dataclasses.replace(logits.capture,
                                                                       mode=capture_modes.SCORE))
    pipeline = Pipeline(switched)
    try:
        with pytest.raises(BadInput, match="captured in logits mode, this run captures in score mode"):
            pipeline.capture()
    finally:
        pipeline.stop_server()


# -- the pieces --------------------------------------------------------------------------------------
def test_the_window_is_read_from_the_request_id() -> None:
    tag = request_tag("my-run-w999-abc", 7, "0a1b2c3d")
    assert window_of_request(f"cmpl-{tag}-0-deadbeef") == 7
    assert window_of_request(tag) == 7
    assert window_of_request("cmpl-other-request-0-12345678") is None
    assert window_of_request("_warmup_0") is None


def test_score_chunks_round_trip_and_are_never_overwritten(tmp_path: Path) -> None:
    rows = RowStats.empty(5, reverse=True)
    rows.kl[:] = np.arange(5) * 0.5
    rows.argmax_ref[:] = 3
    rec = to_records(rows)
    path = write_score_chunk(tmp_path, "req-w000", 10, rec, {"window_index": "0"})
    assert path is not None and path.name == "scores.rows-000010-000015.safetensors"
    back, meta = read_records(path, RECORD_DTYPE)
    assert back.tobytes() == rec.tobytes() and meta["row_start"] == "10" and meta["row_end"] == "15"
    with pytest.raises(FileExistsError):
        write_score_chunk(tmp_path, "req-w000", 10, rec, {"window_index": "0"})


def test_profile_capture_mode_is_checked(tmp_path: Path) -> None:
    with pytest.raises(BadInput,
                       match=r"\[capture\] mode 'scores' is not one of logits, score, hidden; did you"):
        profile_from_dict({"candidate": {"kind": "embedded"}, "capture": {"mode": "scores"}},
                          base_dir=tmp_path)
    default = profile_from_dict({"candidate": {"kind": "embedded"}}, base_dir=tmp_path)
    assert default.capture.mode is capture_modes.LOGITS


def test_a_session_without_a_named_window_fails_only_that_request(suite_dir: Path) -> None:
    failed: dict[str, str] = {}
    written: list[tuple[str, int]] = []
    session = ScoreSession(suite_dir, None, lambda x, y, t: np.zeros(len(x), RECORD_DTYPE),
                           lambda rid, start, rec, meta: written.append((rid, start)),
                           lambda rid, msg: failed.__setitem__(rid, msg), block_rows=8)
    try:
        logits = np.zeros((4, 2048), dtype=np.float32)
        assert not session.chunk("cmpl-plain-0-abc", 0, logits, 2048)
        assert "names no window" in failed["cmpl-plain-0-abc"]
        assert not session.chunk("cmpl-plain-0-abc", 4, logits, 2048)  # later chunks: quietly skipped
        rid = f"cmpl-{request_tag('r', 0, 'deadbeef')}-0-1"
        assert not session.chunk(rid, 0, logits, 4096)
        assert "vocabulary is 4096, the reference's 2048" in failed[rid]
        rid = f"cmpl-{request_tag('r', 1, 'deadbeef')}-0-1"
        assert session.chunk(rid, 0, logits, 2048) and session.chunk(rid, 4, logits[:3], 2048)
        assert written == [(rid, 0), (rid, 4)]
        assert not session.chunk(rid, 3, logits, 2048)  # rows out of order
        assert "arrived after rows 0..7" in failed[rid]
    finally:
        session.close()


def test_other_clients_requests_never_evict_a_live_window(suite_dir: Path) -> None:
    """Issue 21: a fifth request (another client's, naming no window) used to evict a live window's
    state, which then failed with a misleading "prefix caching must be off"."""
    failed: dict[str, str] = {}
    written: list[tuple[str, int]] = []
    session = ScoreSession(suite_dir, None, lambda x, y, t: np.zeros(len(x), RECORD_DTYPE),
                           lambda rid, start, rec, meta: written.append((rid, start)),
                           lambda rid, msg: failed.__setitem__(rid, msg), block_rows=8)
    try:
        logits = np.zeros((4, 2048), dtype=np.float32)
        live = f"cmpl-{request_tag('r', 0, 'deadbeef')}-0-1"
        assert session.chunk(live, 0, logits, 2048)
        for i in range(3 * ScoreSession.MAX_OPEN):  # other clients' requests: fail, remembered apart
            assert not session.chunk(f"cmpl-other{i}-0-abc", 0, logits, 2048)
        others = [f"cmpl-{request_tag('r', 1, f'{i:08x}')}-0-1" for i in range(ScoreSession.MAX_OPEN - 1)]
        for rid in others:  # more live windows, up to the limit
            assert session.chunk(rid, 0, logits, 2048)
        assert session.chunk(live, 4, logits, 2048), failed.get(live)
        assert written[-1] == (live, 4) and live not in failed
        # past the limit the least recently used live window is dropped, and says so
        assert session.chunk(f"cmpl-{request_tag('r', 1, 'ffffffff')}-0-1", 0, logits, 2048)
        assert not session.chunk(others[0], 4, logits, 2048)
        assert "more than 16 windows were being scored at once" in failed[others[0]]
        assert "prefix caching" not in failed[others[0]]
    finally:
        session.close()


def test_doctor_smoke_checks_a_score_mode_server(suite_dir: Path, tmp_path: Path, capsys) -> None:
    """Issue 21: `kldtui doctor --smoke --mode score --suite S` sends one of the suite's windows, named
    so the server scores it against its reference, and checks the records it saved (every row once,
    their next-token log-probabilities equal to the prompt logprobs the server returned). Before, the
    smoke request named no window, so a score-mode server always failed it."""
    import sys

    from kldtui.cli.main import main
    from kldtui.stages.serve import ServerProcess

    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "cand",
            "--vocab-size", "2048", "--model-seed", "7", "--max-num-batched-tokens", "128",
            "--capture-mode", "score", "--score-suite", str(suite_dir)]
    with ServerProcess(argv, capture_dir=tmp_path / "cap", served_model_name="cand",
                       stop_timeouts=(5.0, 3.0, 2.0)) as server:
        server.wait_ready(timeout=60)
        smoke = ["doctor", "--smoke", "--url", server.base_url, "--capture-dir", str(server.capture_dir)]
        code = main([*smoke, "--mode", "score", "--suite", str(suite_dir), "--window", "1"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "4 chunks, rows 0..510, vocabulary 2048 (score mode)" in out
        assert "match the server's prompt logprobs" in out
        assert not [p for p in server.capture_dir.iterdir() if not p.name.startswith(".")]
        assert main([*smoke, "--mode", "score"]) == 2  # no --suite: one line says what to pass
        assert "--suite is missing" in capsys.readouterr().err
        assert main(smoke) == 1  # a logits-mode smoke against a score server fails


@pytest.mark.slow  # the whole demo in both modes
def test_kldtui_demo_score_gives_the_demo_report_and_no_candidate_logits(tmp_path: Path) -> None:
    """From fresh folders: ``kldtui demo --batch`` and ``kldtui demo --batch --score``."""
    import subprocess
    import sys

    from kldtui.formats.report import load_report

    for name, extra in (("plain", []), ("score", ["--score"])):
        proc = subprocess.run([sys.executable, "-m", "kldtui", "demo", "--batch", "--plain",
                               "--workdir", str(tmp_path / name), *extra],
                              capture_output=True, text=True, timeout=240, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    a = load_report(tmp_path / "plain" / "comparison-fine.json").to_json()
    b = load_report(tmp_path / "score" / "comparison-fine-score.json").to_json()
    # two demo folders: each captured its own (identical) reference, with its own manifest
    assert report_differences(a, b, ("reference_dir", "reference_manifest_sha256")) == []
    work = tmp_path / "score"
    # the reference's logits (suite/ref and its capture) are there; the candidate's are not
    candidate = work / "candidates" / "fine-score"
    assert not list(candidate.glob("logits*")) and not list((work / "capture").rglob("logits*"))
    assert len(list(candidate.glob("scores_*.safetensors"))) == 12


def test_a_score_run_reopens_with_its_windows_and_needs_no_logits_disk(
        both_modes: tuple[Profile, Profile], monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's state of a score run counts its score files as finalized, and the
    preflight does not ask for the disk the logits would need."""
    from kldtui.workflow import preflight
    from kldtui.workflow.state import load_state

    _, score = both_modes
    state = load_state(score.workspace())
    assert state.finalized == 12 and not state.problems  # the demo suite's windows
    import shutil as sh

    monkeypatch.setattr(sh, "disk_usage", lambda path: sh._ntuple_diskusage(1, 1, 1))  # type: ignore[attr-defined]
    assert preflight._disk_problem(score, score.workspace()) is None
    logits = dataclasses.replace(score, capture=dataclasses.replace(score.capture, mode=capture_modes.LOGITS))
    assert "disk: the run needs" in (preflight._disk_problem(logits, logits.workspace()) or "")
