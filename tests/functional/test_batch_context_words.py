"""A hidden-state suite's units are contexts: `--batch` names them so ("context 0002 (prose)
captured"), as compare and every message do (``WindowSpec.name``/``label``). The capture and
finalize stages' events carried no label, so the batch reporter (and the dashboard's log) said
"window 002 (prose) captured" for context 0002, and a context's progress bars were never dropped
(their prefix was taken to be "window 002")."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.batch_reporter import BatchReporter, run_headless
from kldtui.embedded.model import TinyModel
from kldtui.events import Cancel, Notice, Progress, WindowState
from kldtui.formats import fidelity as fid
from kldtui.workflow.profile import profile_from_dict
from tests.fixtures_capture_run import serve_capture_finalize

pytestmark = pytest.mark.timeout(300)
VOCAB, SEED, LENGTH = 512, 7, 120


def test_batch_names_a_context_suites_units_contexts(tmp_path: Path) -> None:
    model = TinyModel(VOCAB, seed=SEED)
    contexts = [fid.NewContext(model.sample(LENGTH, seed=i), "prose", partition="analysis",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(3)]
    suite = tmp_path / "suite"
    fid.write_context_suite(suite, contexts)
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": SEED,
                                 "vocab_size": VOCAB, "port": 0, "startup_timeout": 60.0,
                                 "request_timeout": 60.0}
    profile = profile_from_dict({"reference": {"local_dir": str(suite)}, "candidate": candidate,
                                 "run": {"workdir": str(tmp_path / "work"), "run_name": "c"}},
                                base_dir=tmp_path)
    events = serve_capture_finalize(profile)
    out = io.StringIO()
    reporter = BatchReporter(out, interval=0.0)
    for event in events:
        reporter(event)
    lines = out.getvalue().splitlines()
    for i in range(3):
        assert any(line.endswith(f"capture: context {i:04d} (prose) captured") for line in lines), lines
        assert any(f"finalize: context {i:04d} (prose) finalized" in line for line in lines), lines
    assert any(line.endswith("capture: contexts 3/3 (100%)") or "capture: contexts 3/3 (100%)," in line
               for line in lines), lines
    assert any("finalize: context 0002 238.0/238.0 KiB (100%)" in line for line in lines), lines
    assert any(line.endswith("finalize: contexts 3/3 (100%)") for line in lines), lines
    assert any(f"finalize: done - 3 contexts -> {tmp_path / 'work'}" in line for line in lines), lines
    assert not [line for line in lines if "window" in line.split(" - ")[0]], lines
    again = [e for e in serve_capture_finalize(profile) if isinstance(e, Notice) and e.stage == "capture"]
    assert any(e.text.startswith("3 contexts already captured in ") for e in again), again  # "window(s)"


def test_a_stop_signal_says_what_is_kept_in_no_suites_units() -> None:
    """The notice said "finished windows are kept" for a hidden-state suite's contexts too (and for a
    download's files): it is said before, or without, any suite being read."""
    def job(emit: Any, cancel: Cancel) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not cancel.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)

    out = io.StringIO()
    assert run_headless(job, BatchReporter(out), err=io.StringIO()) == 130
    said = [line for line in out.getvalue().splitlines() if "SIGTERM received" in line]
    assert len(said) == 1 and said[0].endswith("SIGTERM received: stopping (the server is stopped, what is "
                                               "finished is kept; run again to resume)"), said


def test_a_contexts_bars_go_when_it_is_done() -> None:
    out = io.StringIO()
    with BatchReporter(out, live=True) as rep:
        rep(Progress("compare", "context 0002", 40, 119, "rows"))
        rep(Progress("compare", "context 0003", 40, 119, "rows"))
        rep(WindowState("compare", 2, "compared", "prose", label="context 0002 (prose)"))
        assert [t.description for t in rep._progress.tasks] == ["compare context 0003"]


def test_a_context_suites_reference_capture_counts_are_relabelled() -> None:
    """Under the reference stage the capture's and finalize's counts read as what they count, for a
    context suite's "contexts" as for "windows" (else one bar twice: "ref contexts")."""
    from kldtui.stages.reference_capture import as_reference_stage

    seen: list[Any] = []
    emit = as_reference_stage(seen.append, 6)
    emit(Progress("capture", "contexts", 2, 6, "contexts"))
    emit(Progress("finalize", "contexts", 1, 6, "contexts"))
    assert [(e.stage, e.task) for e in seen] == [("reference", "captured"), ("reference", "finalized")]


def test_a_context_suites_run_says_contexts_where_nothing_was_captured(tmp_path: Path) -> None:
    """Finalize and compare with nothing captured said "0 windows in ..." and "no finalized windows to
    compare" of a hidden-state suite's contexts, and a range outside it "window range ... (windows
    0-2 ...); fix the start/stop window"; a logits suite's still say windows (Suite.select)."""
    from kldtui.errors import BadInput
    from kldtui.events import StageFinished
    from kldtui.formats.suite import load_suite
    from kldtui.workflow.pipeline import Pipeline
    from tests.hub_server import make_dataset

    model = TinyModel(64, seed=SEED)
    contexts = [fid.NewContext(model.sample(24, seed=i), "prose", partition="analysis",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(3)]
    suite = tmp_path / "suite"
    fid.write_context_suite(suite, contexts)
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": SEED,
                                 "vocab_size": 64, "port": 0}
    profile = profile_from_dict({"reference": {"local_dir": str(suite)}, "candidate": candidate,
                                 "run": {"workdir": str(tmp_path / "work"), "run_name": "c"}},
                                base_dir=tmp_path)
    events: list[Any] = []
    pipeline = Pipeline(profile, events.append, Cancel())
    try:
        pipeline.finalize()
        with pytest.raises(BadInput) as refused:
            pipeline.compare()
    finally:
        pipeline.release_folders()
    done = [e.summary for e in events if isinstance(e, StageFinished) and e.stage == "finalize"]
    assert done == [f"0 contexts in {pipeline.workspace.candidate}"], done
    assert str(refused.value) == (f"{pipeline.workspace.candidate}: no finalized contexts to compare; run "
                                  "capture and finalize first")
    with pytest.raises(BadInput) as refused:
        load_suite(suite).select(1, 5)
    assert str(refused.value).startswith("context range [1, 5) is outside the suite (contexts 0-2, "), \
        str(refused.value)
    assert str(refused.value).endswith("; fix the start/stop context"), str(refused.value)
    logits = make_dataset(tmp_path / "logits")
    with pytest.raises(BadInput) as refused:
        load_suite(logits).select(1, 99)
    assert str(refused.value).startswith("window range [1, 99) is outside the suite (windows 0-"), \
        str(refused.value)
