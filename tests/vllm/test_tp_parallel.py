"""Tensor parallelism 2 on the real vLLM CPU build, logits and score mode (issue 21).

One TP=2 server of the tiny float32 Llama in logits mode (``tests/fixtures_vllm_tp.py``) serves the
logits tests; kldtui attaches to it. The reference is the same model captured at TP=1, so every
difference in the report is vLLM's tensor-parallel arithmetic, bounded by the measured tolerance.
Then (the logits server stopped: two cores) one TP=2 server in score mode serves the score tests,
whose report must equal the logits mode's at TP=2.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_score import report_differences
from tests.fixtures_vllm_chain import kldtui_run_batch, leftover_servers
from tests.fixtures_vllm_server import SERVED_NAME, VllmServer
from tests.fixtures_vllm_tp import (
    TP_LOGIT_ATOL,
    TP_MAX_KL,
    TP_MEAN_KL,
    TpReference,
    attach_profile,
    process_title,
    start_run,
    start_tp2,
    worker_titles,
    writer_records,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # real vLLM servers at tensor parallelism 2


@dataclass
class Tp2:
    ref: TpReference
    capture: Path
    server: VllmServer
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)

    def restart(self) -> None:
        """The same server again: same port, same capture folder (as a user restarts it)."""
        self.server.stop()
        self.server = start_tp2(self.ref, "tp2-logits", self.capture, port=self.server.port)

    def report(self) -> dict[str, Any]:
        """The uninterrupted TP=2 run's report (made once)."""
        if "plain" not in self.reports:
            self.reports["plain"] = kldtui_run_batch(*attach_profile(self.ref, "tp2", self.server,
                                                                     self.capture))
        return self.reports["plain"]


@pytest.fixture(scope="module")
def tp2(tp_reference: TpReference) -> Iterator[Tp2]:
    capture = tp_reference.root / "chunks-tp2-logits"
    state = Tp2(tp_reference, capture, start_tp2(tp_reference, "tp2-logits", capture))
    try:
        yield state
    finally:
        state.server.stop()
        assert leftover_servers(tp_reference.root) == []


def test_tp2_one_writer_the_output_rank(tp2: Tp2) -> None:
    """Both ranks run the hook; only vLLM's output rank (TP rank 0) writes and records itself."""
    tp2.report()
    titles = worker_titles(tp2.capture)
    mine = sorted(pid for pid, t in titles.items() if t.startswith("VLLM::Worker_TP"))
    assert sorted(titles.values()) == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"], titles  # two TP workers
    records = writer_records(tp2.capture)
    assert len(records) == 1, records
    assert process_title(records[0]["pid"]) == "VLLM::Worker_TP0", records[0]
    log = tp2.server.log.read_text(errors="replace")
    announced = [line for line in log.splitlines() if "kldtui capture writer: host" in line]
    assert len(announced) == 1 and "Worker_TP0" in announced[0], announced
    hooked = " ".join(line for line in log.splitlines() if "kldtui capture hook active" in line)
    for pid in mine:  # the hook is installed on every rank; the other ranks just do not write
        assert f"(pid {pid})" in hooked, (pid, titles[pid], hooked)


def test_tp2_report_equals_tp1_within_the_measured_tolerance(tp2: Tp2) -> None:
    from safetensors.numpy import load_file

    report = tp2.report()
    assert report["windows"] == 2 and report["positions"] == 2 * 2047
    kl = report["kl_reference_to_candidate"]
    print(f"TP=2 vs TP=1 (float32): mean KL {kl['mean']:.3g}, max KL {kl['max']:.3g}, "
          f"top-1 {report['top1_agreement']}")
    assert 0 <= kl["mean"] <= TP_MEAN_KL and kl["max"] <= TP_MAX_KL
    assert report["top1_agreement"] == 1.0
    for entry in report["per_window"]:
        assert entry["positions"] == 2047 and entry["kl_mean"] <= TP_MEAN_KL
    # rows 0..N-2, once each: the finalized files hold exactly 2047 rows per window
    cand = tp2.ref.root / "work-tp2"
    worst = 0.0
    for ref_file in sorted(tp2.ref.ref_dir.glob("logits_*.safetensors")):
        a = load_file(ref_file)["logits"]
        found = list(cand.rglob(ref_file.name))
        assert len(found) == 1, found
        b = load_file(found[0])["logits"]
        assert a.shape == b.shape == (2047, 4096)
        worst = max(worst, float(abs(a - b).max()))
    print(f"TP=2 vs TP=1 (float32): largest logit difference {worst:.3g}")
    assert 0 < worst <= TP_LOGIT_ATOL or worst == 0


def test_tp2_doctor_smoke(tp2: Tp2) -> None:
    from kldtui.cli.main import main

    code = main(["doctor", "--smoke", "--url", tp2.server.url, "--served-model-name", SERVED_NAME,
                 "--capture-dir", str(tp2.capture), "--tokens", "600"])
    assert code == 0
    assert [p.name for p in tp2.capture.iterdir() if not p.name.startswith(".kldtui-writers")] == []
    assert len(writer_records(tp2.capture)) == 1


def test_tp2_server_killed_during_the_capture_resumes_to_the_same_report(tp2: Tp2) -> None:
    """The whole TP=2 server killed while the run captures, then restarted: the rerun gives the report
    an uninterrupted run gives.

    The kill lands as soon as the run's first window has a request folder on the server, most often
    with that window's chunks half written. Waiting for the second (last) window instead raced it: a
    window of this tiny model takes well under a second, and where it finished before the kill landed
    (a loaded machine, seen twice in CI) the run exited 0. Now the second window always meets the dead
    server, so the run fails however fast the first one finishes."""
    from kldtui.formats.chunks import request_tag

    plain = tp2.report()
    profile, workdir = attach_profile(tp2.ref, "tp2-resume", tp2.server, tp2.capture)
    first = request_tag("tp2-resume", 0, "")  # this run's window 0: kldtui-tp2-resume-w000-

    def first_window_started() -> bool:
        return any(first in d.name for d in tp2.capture.iterdir()
                   if d.is_dir() and not d.name.startswith("."))

    assert not first_window_started()
    run = start_run(profile)
    try:
        deadline = time.monotonic() + 600
        while not first_window_started():
            assert time.monotonic() < deadline, "waited 600 s for the first window's request"
            assert run.poll() is None, "the run ended before its first window started"
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):  # the whole server, as a crash takes it
            os.killpg(tp2.server.proc.pid, signal.SIGKILL)
        assert run.wait(timeout=300) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert not (workdir / "comparison.json").exists()
    tp2.restart()
    resumed = kldtui_run_batch(profile, workdir)
    assert report_differences(plain, resumed, skip=("run_name",)) == []


# --- score mode at TP=2 --------------------------------------------------------------------------

@dataclass
class Tp2Score:
    capture: Path
    server: VllmServer


@pytest.fixture(scope="module")
def tp2_score(tp2: Tp2) -> Iterator[Tp2Score]:
    tp2.report()  # the logits mode report, made before its server stops
    tp2.server.stop()
    ref = tp2.ref
    capture = ref.root / "chunks-tp2-score"
    env = {"KLDTUI_CAPTURE_MODE": "score", "KLDTUI_SCORE_SUITE": str(ref.suite),
           "KLDTUI_SCORE_REFERENCE": str(ref.ref_dir)}
    server = start_tp2(ref, "tp2-score", capture, env=env)
    try:
        yield Tp2Score(capture, server)
    finally:
        server.stop()


def test_tp2_score_mode_equals_logits_mode(tp2: Tp2, tp2_score: Tp2Score) -> None:
    profile, workdir = attach_profile(tp2.ref, "tp2-score", tp2_score.server, tp2_score.capture, "score")
    report = kldtui_run_batch(profile, workdir)
    assert report["provenance"]["backend"] == "server-scores"
    assert report_differences(tp2.report(), report, skip=("run_name",)) == []
    print(f"TP=2 score mode: mean KL {report['kl_reference_to_candidate']['mean']:.3g} "
          f"(logits mode {tp2.report()['kl_reference_to_candidate']['mean']:.3g})")
    assert not list(workdir.rglob("logits*.safetensors")), "score mode wrote candidate logits"
    records = writer_records(tp2_score.capture)
    assert len(records) == 1 and process_title(records[0]["pid"]) == "VLLM::Worker_TP0", records
    log = tp2_score.server.log.read_text(errors="replace")
    assert "kldtui score mode: scoring against" in log


def test_tp2_doctor_smoke_in_score_mode(tp2: Tp2, tp2_score: Tp2Score) -> None:
    from kldtui.cli.main import main

    code = main(["doctor", "--smoke", "--mode", "score", "--suite", str(tp2.ref.suite), "--window", "1",
                 "--url", tp2_score.server.url, "--served-model-name", SERVED_NAME,
                 "--capture-dir", str(tp2_score.capture)])
    assert code == 0
    assert [p.name for p in tp2_score.capture.iterdir() if not p.name.startswith(".kldtui-writers")] == []
