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
from kldtui.formats.suite import WindowSpec
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
    from kldtui.formats.suite import load_suite

    context = load_suite(suite).windows[1]  # a chunk folder an interrupted capture left, with no record
    (profile.workspace().chunk_dir(context.chunk_dir_name) / "partial").mkdir(parents=True)
    events = serve_capture_finalize(profile)
    states = [e for e in events if isinstance(e, WindowState)]
    assert states and all(e.unit == "context" and e.name == f"context {e.window_index:04d}"
                          for e in states), states  # every emitter names it from its spec
    left = [e.text for e in events if isinstance(e, Notice) and "left by an interrupted capture" in e.text]
    assert len(left) == 1 and left[0].endswith("left by an interrupted capture of context 0001 (prose); "
                                               "removed, the context is captured again"), left
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
    assert any("finalize: context 0002 238/238 KiB (100%)" in line for line in lines), lines
    assert any(line.endswith("finalize: contexts 3/3 (100%)") for line in lines), lines
    assert any(f"finalize: done - 3 contexts -> {tmp_path / 'work'}" in line for line in lines), lines
    # (the chunk folder's name is a file name: window-NNN-DOMAIN-chunks whatever the suite)
    named = [line.split(" - ")[0].replace(context.chunk_dir_name, "") for line in lines]
    assert not [line for line in named if "window" in line], lines
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


def _context(index: int) -> WindowSpec:
    return WindowSpec(index, "prose", index, LENGTH, "", "", context=True)


def test_a_contexts_bars_go_when_it_is_done() -> None:
    out = io.StringIO()
    with BatchReporter(out, live=True) as rep:
        rep(Progress("compare", "context 0002", 40, 119, "rows"))
        rep(Progress("compare", "context 0003", 40, 119, "rows"))
        rep(WindowState.of("compare", _context(2), "compared"))
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


def _context_suite_run(suite_dir: Path, tmp_path: Path, *, contexts: int, vocab: int = 64,
                       length: int = 24) -> Any:
    """A hidden-state suite of ``contexts`` prose contexts of ``length`` tokens at ``suite_dir`` and a
    single-candidate profile (the embedded model, ``vocab`` tokens) of it, working in ``tmp_path/work``."""
    model = TinyModel(vocab, seed=SEED)
    fid.write_context_suite(suite_dir, [
        fid.NewContext(model.sample(length, seed=i), "prose", partition="analysis",
                       fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
        for i in range(contexts)])
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": SEED,
                                 "vocab_size": vocab, "port": 0}
    return profile_from_dict({"reference": {"local_dir": str(suite_dir)}, "candidate": candidate,
                              "run": {"workdir": str(tmp_path / "work"), "run_name": "c"}},
                             base_dir=tmp_path)


def test_a_context_suites_run_says_contexts_where_nothing_was_captured(tmp_path: Path) -> None:
    """Finalize and compare with nothing captured said "0 windows in ..." and "no finalized windows to
    compare" of a hidden-state suite's contexts, and a range outside it "window range ... (windows
    0-2 ...); fix the start/stop window"; a logits suite's still say windows (Suite.select)."""
    from kldtui.errors import BadInput
    from kldtui.events import StageFinished
    from kldtui.formats.suite import load_suite
    from kldtui.workflow.pipeline import Pipeline
    from tests.hub_server import make_dataset

    suite = tmp_path / "suite"
    profile = _context_suite_run(suite, tmp_path, contexts=3)
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
    assert str(refused.value).endswith("; fix the start/stop window (a context's index)"), str(refused.value)
    logits = make_dataset(tmp_path / "logits")
    with pytest.raises(BadInput) as refused:
        load_suite(logits).select(1, 99)
    assert str(refused.value).startswith("window range [1, 99) is outside the suite (windows 0-"), \
        str(refused.value)


def test_a_context_suites_finalize_and_capture_refusals_say_contexts(tmp_path: Path) -> None:
    """Finalize's "no windows to finalize", "no finalized windows", what a failure left published
    ("window(s) 0, 2"), compare's "no finalized windows to compare" and a hidden-state chunk's
    "capture the window again" were said of a hidden-state suite's contexts."""
    from kldtui.capture_modes.hidden import HIDDEN_CHUNKS, SEMANTIC_POINT
    from kldtui.errors import BadInput
    from kldtui.formats.suite import load_suite
    from kldtui.stages.compare import CompareOptions
    from kldtui.stages.compare.driver import Comparer
    from kldtui.stages.finalize import Finalizer, _published, run_finalize
    from kldtui.workspace import Workspace

    model = TinyModel(64, seed=SEED)
    contexts = [fid.NewContext(model.sample(24, seed=i), "prose", partition="analysis",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(3)]
    fid.write_context_suite(tmp_path / "suite", contexts)
    suite = load_suite(tmp_path / "suite")
    ws = Workspace.for_capture(suite.root, tmp_path / "capture", "c", tmp_path / "candidate")
    said = []
    with pytest.raises(BadInput) as refused:
        run_finalize(ws, suite=suite, windows=[])
    said.append(str(refused.value))
    assert said[-1] == f"{ws.run_dir}: no contexts to finalize", said[-1]
    with pytest.raises(BadInput) as refused:
        Finalizer(ws, suite).finish()
    said.append(str(refused.value))
    assert said[-1] == f"{ws.candidate}: no finalized contexts", said[-1]
    said.append(_published({0: None, 2: None}, ws.candidate, "context"))
    assert said[-1].startswith("published before the failure: context(s) 0, 2 in "), said[-1]
    said.append(_published({}, ws.candidate, "context"))
    assert said[-1] == f"no context was published in {ws.candidate}", said[-1]
    with pytest.raises(BadInput) as refused:
        Comparer(ws, suite, CompareOptions()).report([])
    said.append(str(refused.value))
    assert said[-1] == f"{ws.candidate}: no finalized contexts to compare; run capture and finalize first"
    context = suite.windows[0]
    for meta, cols in (({"vocab_size": "64", "semantic_point": "elsewhere"}, 8),
                       ({"vocab_size": "64", "semantic_point": SEMANTIC_POINT}, 16)):
        with pytest.raises(BadInput) as refused:
            HIDDEN_CHUNKS.chunk_vocab(tmp_path / "chunk", meta, context, cols, 8 if cols == 16 else None)
        said.append(str(refused.value))
        assert said[-1].endswith("capture the context again"), said[-1]
    assert not [line for line in said if "window" in line], said


def test_a_context_suites_refusals_of_another_capture_name_its_contexts(tmp_path: Path) -> None:
    """The capture stage's refusals of recorded units it would not resume (captured from a server with
    other settings, or in another mode) named them "window 1" for a hidden-state suite's contexts too:
    they are read back from the capture records, with no WindowSpec at hand. They name them as every
    other message does (``context 0001 (prose)``), before any server starts (the preflight) too."""
    import json

    from kldtui import capture_modes
    from kldtui.formats.suite import load_suite
    from kldtui.servers.base import server_identity
    from kldtui.stages.capture import changed_server
    from kldtui.workflow.preflight import _changed_server_problem

    suite_dir = tmp_path / "suite"
    profile = _context_suite_run(suite_dir, tmp_path, contexts=3, vocab=VOCAB, length=LENGTH)
    ws = profile.workspace()
    windows = load_suite(suite_dir).windows
    identity = server_identity(profile.candidate)
    other = dict(identity, model_seed=SEED + 1)
    records = ws.records_path

    def record(index: int, **extra: Any) -> None:
        records.parent.mkdir(parents=True, exist_ok=True)
        records.write_text(json.dumps([{"window_index": index, "domain": "prose", **extra}]))

    record(1, server=other)
    changed = changed_server(ws, identity, profile.capture.mode, windows=windows)
    assert changed is not None and changed.startswith(
        f"{records}: context 0001 (prose) was captured from a server whose settings differ from this "
        f"run's (model_seed {SEED + 1}, now {SEED})"), changed
    # the preflight's own check, which reads the suite itself (a whole preflight stops first here: this
    # suite has no reference logits)
    assert _changed_server_problem(profile, ws) == changed
    # a record of a context the suite no longer lists: named by the same rule
    record(7, server=other)
    changed = changed_server(ws, identity, profile.capture.mode, windows=windows)
    assert changed is not None and changed.startswith(f"{records}: context 0007 (prose) was "), changed
    # captured in another mode than this run's: its record names its context too
    score = capture_modes.parse("score", "mode")
    record(2, mode=score.record_value)
    changed = changed_server(ws, identity, profile.capture.mode, windows=windows)
    assert changed is not None and changed.startswith(
        f"{records}: context 0002 (prose) was captured in {score.label}, this run captures in "
        f"{profile.capture.mode.label}; "), changed
    assert "window" not in changed.replace(str(records), ""), changed


@pytest.mark.parametrize("broken", ["{not json", '{"window_index": 0}'], ids=["not-json", "not-a-list"])
def test_a_context_suites_broken_capture_records_say_deleting_recaptures_every_context(
        tmp_path: Path, broken: str) -> None:
    """A capture records file that is not JSON, or not a list, was refused with "deleting it
    recaptures every window" of a hidden-state suite's contexts too: the dashboard's reopened state,
    the run's finalize and the finalize stage itself say "every context"."""
    from kldtui.errors import BadInput
    from kldtui.formats.suite import load_suite
    from kldtui.stages.finalize import run_finalize
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.state import load_state

    suite_dir = tmp_path / "suite"
    profile = _context_suite_run(suite_dir, tmp_path, contexts=2)
    ws = profile.workspace()
    ws.records_path.parent.mkdir(parents=True, exist_ok=True)
    ws.records_path.write_text(broken)
    said = list(load_state(ws).problems)
    pipeline = Pipeline(profile, lambda event: None, Cancel())
    try:
        with pytest.raises(BadInput) as refused:
            pipeline.finalize()
        said.append(str(refused.value))
    finally:
        pipeline.release_folders()
    ws.run_dir.mkdir(parents=True, exist_ok=True)
    suite = load_suite(suite_dir)
    with pytest.raises(BadInput) as refused:
        run_finalize(ws, suite=suite, windows=suite.windows)
    said.append(str(refused.value))
    assert len(said) == 3, said
    for line in said:
        assert line.startswith(f"{ws.records_path}: capture records ") and "\n" not in line, line
        assert line.endswith("restore or delete the file (deleting it recaptures every context)"), line
    # a logits suite's units are windows: its records' line says so
    from kldtui.stages.capture import load_records
    from tests.hub_server import make_dataset

    logits = load_suite(make_dataset(tmp_path / "logits"))
    with pytest.raises(BadInput, match=r"recaptures every window\)$"):
        load_records(ws.records_path, unit=logits.windows[0].unit)
