"""Capture client against the real embedded server (a subprocess on 127.0.0.1), faults included."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui import settings
from kldtui.embedded.model import TinyModel
from kldtui.errors import Interrupted, StageFailed
from kldtui.events import Cancel, Event, Notice, Progress, WindowState
from kldtui.formats.chunks import check_chunk_dir
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import Suite
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.capture import CaptureServer, load_records
from kldtui.stages.capture import run_capture as capture_stage
from kldtui.stages.serve import ServerProcess
from kldtui.workspace import Workspace

NAME = "tiny"


def make_suite(root: Path, windows: int, tokens: int, vocab: int, seed: int = 0) -> Suite:
    rng = np.random.default_rng(seed)
    domains = ["prose", "code", "instruction"]
    return write_suite(root, [(domains[i % 3], rng.integers(0, vocab, tokens).tolist())
                              for i in range(windows)])


@contextmanager
def embedded(tmp_path: Path, label: str, *, vocab: int = 64, batched: int = 128,
             fault: str | None = None, extra: list[str] | None = None,
             wrapper: str | None = None, api_key: str | None = None) -> Iterator[ServerProcess]:
    """A running embedded server with a fresh capture folder, stopped afterwards."""
    args = ["-m", "kldtui.embedded"] if wrapper is None else ["-c", wrapper]
    argv = [sys.executable, *args, "--port", "0", "--served-model-name", NAME, "--vocab-size",
            str(vocab), "--max-num-batched-tokens", str(batched), "--max-num-seqs", "1",
            *(extra or [])]
    env = {settings.EMBEDDED_FAULT.name: fault} if fault else {}
    server = ServerProcess(argv, capture_dir=tmp_path / f"server-{label}", served_model_name=NAME,
                           env=env, stop_timeouts=(5.0, 3.0, 2.0), api_key=api_key)
    with server:
        server.wait_ready(timeout=60)
        yield server


def run_capture(suite: Suite, server: ServerProcess, work: Path, **kwargs: Any) -> list:
    windows = kwargs.pop("windows", None) or list(suite.windows)
    target = CaptureServer(server.base_url, NAME, server.capture_dir, api_key=kwargs.pop("api_key", None),
                           request_timeout=kwargs.pop("request_timeout", 600.0), alive=server.alive)
    workspace = Workspace.for_capture(suite.root, work, "run1")
    return capture_stage(workspace, suite=suite, windows=windows, server=target, **kwargs)


def read_rows(folder: Path) -> np.ndarray:
    parts = []
    for name in sorted(os.listdir(folder)):
        with RowReader(folder / name) as r:
            parts.append(r.read(0, r.rows))
    return np.concatenate(parts)


def test_capture_moves_checks_records_and_resumes(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=2, tokens=300, vocab=64)
    work = tmp_path / "capture"
    events: list[Event] = []
    seen: list[int] = []
    with embedded(tmp_path, "a") as server:
        records = run_capture(suite, server, work, emit=events.append, expected_vocab=64,
                              on_window_captured=lambda w, r: seen.append(w.index))
        assert [r.window_index for r in records] == [0, 1]
        assert seen == [0, 1]
        assert os.listdir(server.capture_dir) == []  # both request folders were moved
        doc = json.loads((work / "capture-run1.json").read_text())
        assert [d["window_index"] for d in doc] == [0, 1]
        for d, w in zip(doc, suite.windows, strict=True):
            assert {"window_index", "domain", "prompt_tokens", "request_id", "elapsed_seconds", "usage",
                    "finish_reason", "chunk_dir", "chunks"} <= set(d)
            assert d["prompt_tokens"] == 300 and d["usage"]["prompt_tokens"] == 300
            assert d["request_id"].startswith("cmpl-kldtui-run1-w00")
            assert d["request_folder"].startswith(d["request_id"] + "-0-")
            assert Path(d["chunk_dir"]) == (work / "run1" / w.chunk_dir_name).resolve()
            # 128-token prefill chunks: rows [0,128) [128,256) [256,299)
            assert d["chunks"] == ["logits.rows-000000-000128.safetensors",
                                   "logits.rows-000128-000256.safetensors",
                                   "logits.rows-000256-000299.safetensors"]
            # the captured logits are the model's own prompt logits
            ids = suite.load_tokens(w)
            model = TinyModel(64, seed=0)
            want = model.logits(model.hidden(ids)[:-1])
            np.testing.assert_allclose(read_rows(Path(d["chunk_dir"])), want, rtol=1e-5, atol=1e-5)
        states = [(e.window_index, e.state) for e in events if isinstance(e, WindowState)]
        assert states == [(0, "capturing"), (0, "captured"), (1, "capturing"), (1, "captured")]
        tokens = [e for e in events if isinstance(e, Progress) and e.task == "tokens"]
        assert tokens[-1].done == 600 and tokens[-1].total == 600 and tokens[-1].rate

        before = (work / "capture-run1.json").read_bytes()
        events.clear()
        again = run_capture(suite, server, work, emit=events.append)
        assert [r.request_id for r in again] == [r.request_id for r in records]
        assert (work / "capture-run1.json").read_bytes() == before  # nothing recaptured
        assert os.listdir(server.capture_dir) == []  # and no request was sent
        skipped = [e for e in events if isinstance(e, WindowState)]
        assert [(e.state, e.figures.get("skipped")) for e in skipped] == [("captured", True)] * 2

        # a recorded window whose chunks are broken, with no finalized file standing for them, is
        # captured again, said out loud (before, the run stopped and asked to edit the records by hand)
        victim = work / "run1" / suite.windows[1].chunk_dir_name / records[1].chunks[-1]
        victim.unlink()
        events.clear()
        third = run_capture(suite, server, work, emit=events.append)
        warned = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
        assert len(warned) == 1, warned
        assert "window 001 (code) is recorded as captured, but its chunks do not check out" in warned[0]
        assert "rows 0..256" in warned[0]
        assert warned[0].endswith("its record is dropped and the window is captured again")
        assert third[0].request_id == records[0].request_id  # window 0 kept
        assert third[1].request_id != records[1].request_id  # window 1 captured again
        assert sorted(os.listdir(work / "run1" / suite.windows[1].chunk_dir_name)) == sorted(third[1].chunks)
        assert [r["request_id"] for r in json.loads((work / "capture-run1.json").read_text())] == \
            [r.request_id for r in third]
        np.testing.assert_allclose(read_rows(Path(third[1].chunk_dir)),
                                   TinyModel(64, seed=0).logits(TinyModel(64, seed=0).hidden(
                                       suite.load_tokens(suite.windows[1]))[:-1]), rtol=1e-5, atol=1e-5)


def test_capture_2048_token_window_in_256_row_chunks(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=1, tokens=2048, vocab=4096)
    events: list[Event] = []
    with embedded(tmp_path, "a", vocab=4096, batched=256) as server:
        (record,) = run_capture(suite, server, tmp_path / "capture", emit=events.append)
    starts = list(range(0, 2048, 256))
    assert record.chunks == [f"logits.rows-{s:06d}-{min(s + 256, 2047):06d}.safetensors" for s in starts]
    checked = check_chunk_dir(record.chunk_dir, suite.windows[0], expected_vocab=4096, check_values=True)
    assert checked.rows == 2047 and checked.vocab_size == 4096


def test_server_killed_mid_window_fails_clearly_and_rerun_resumes(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=2, tokens=600, vocab=64)
    work = tmp_path / "capture"
    # window 0 captures 599 rows; window 1 dies after its second 256-row chunk (1111 >= 900)
    with embedded(tmp_path, "a", batched=256, fault="die-after-rows:900") as server:
        events: list[Event] = []
        with pytest.raises(StageFailed, match=r"window 001 .*server stopped.*exit code 3.*"
                                              r"EngineCore died unexpectedly"):
            run_capture(suite, server, work, emit=events.append)
        assert [(e.window_index, e.state) for e in events if isinstance(e, WindowState)][-1] == \
            (1, "failed")
    assert sorted(load_records(work / "capture-run1.json", unit="window")) == [0]
    assert os.listdir(work / "run1") == [suite.windows[0].chunk_dir_name]
    assert os.listdir(tmp_path / "server-a") == []  # the half-captured request folder is gone
    first = load_records(work / "capture-run1.json", unit="window")[0]

    with embedded(tmp_path, "b", batched=256) as server:
        records = run_capture(suite, server, work)
        assert [r.window_index for r in records] == [0, 1]
        assert records[0].request_id == first.request_id  # window 0 was not recaptured
        assert os.listdir(server.capture_dir) == []


def test_http_errors_show_the_body(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=1, tokens=40, vocab=64)
    with embedded(tmp_path, "a", fault="http-500") as server:
        with pytest.raises(StageFailed, match=r"HTTP 500 .*EngineCore encountered an issue"):
            run_capture(suite, server, tmp_path / "c1")
    with embedded(tmp_path, "b") as server:
        with pytest.raises(StageFailed, match=r"HTTP 404 .*The model `other` does not exist"):
            capture_stage(Workspace.for_capture(suite.root, tmp_path / "c2", "r"), suite=suite,
                          windows=suite.windows,
                          server=CaptureServer(server.base_url, "other", server.capture_dir))
    big = make_suite(tmp_path / "suite-big", windows=1, tokens=40, vocab=1000)
    with embedded(tmp_path, "c") as server:
        with pytest.raises(StageFailed, match=r"HTTP 400 .*Token id \d+ is out of vocabulary"):
            run_capture(big, server, tmp_path / "c3")
    for work in ("c1", "c3"):
        assert load_records(tmp_path / work / "capture-run1.json", unit="window") == {}
        assert not (tmp_path / work / "run1").exists() or not os.listdir(tmp_path / work / "run1")


def test_api_key_is_sent(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=1, tokens=40, vocab=64)
    with embedded(tmp_path, "a", extra=["--api-key", "s3cret"], api_key="s3cret") as server:
        with pytest.raises(StageFailed, match=r"HTTP 401 .*Unauthorized"):
            run_capture(suite, server, tmp_path / "c")
        (record,) = run_capture(suite, server, tmp_path / "c", api_key="s3cret")
        assert record.prompt_tokens == 40


def test_request_timeout_fails_clearly(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=1, tokens=40, vocab=64)
    with embedded(tmp_path, "a", fault="sleep:2") as server:
        with pytest.raises(StageFailed, match=r"window 000 .*no answer .* within 0\.5 s \(request timeout\)"):
            run_capture(suite, server, tmp_path / "c", request_timeout=0.5)
    assert load_records(tmp_path / "c" / "capture-run1.json", unit="window") == {}


FSIZE_WRAPPER = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
sys.argv = ["kldtui.embedded"] + sys.argv[1:]
runpy.run_module("kldtui.embedded", run_name="__main__")
"""


def test_full_disk_while_writing_a_chunk_fails_the_window(tmp_path: Path) -> None:
    # 128 rows x 64 columns x 4 bytes = 32 KiB per chunk: over the server's 20 kB file-size
    # limit, so the chunk write fails (EFBIG) the way a full disk does (ENOSPC).
    suite = make_suite(tmp_path / "suite", windows=1, tokens=300, vocab=64)
    with embedded(tmp_path, "a", wrapper=FSIZE_WRAPPER) as server:
        with pytest.raises(StageFailed, match=r"window 000 .*capture hook reported an error.*"
                                              r"File too large"):
            run_capture(suite, server, tmp_path / "c")
        assert os.listdir(server.capture_dir) == []
    assert load_records(tmp_path / "c" / "capture-run1.json", unit="window") == {}
    assert not (tmp_path / "c" / "run1" / suite.windows[0].chunk_dir_name).exists()


def test_cancel_during_capture_keeps_records_consistent(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=2, tokens=600, vocab=64)
    work = tmp_path / "capture"
    cancel = Cancel()
    events: list[Event] = []

    def emit(event: Event) -> None:
        events.append(event)
        if isinstance(event, Progress) and event.task == "window 001" and event.done > 0:
            cancel.set("Ctrl-C")

    with embedded(tmp_path, "a", fault="chunk-delay:0.3") as server:
        with pytest.raises(Interrupted, match="Ctrl-C while capturing window 001"):
            run_capture(suite, server, work, emit=emit, cancel=cancel)
        server.stop(reason="interrupted")
    assert sorted(load_records(work / "capture-run1.json", unit="window")) == [0]
    assert os.listdir(work / "run1") == [suite.windows[0].chunk_dir_name]
    assert [(e.window_index, e.state) for e in events if isinstance(e, WindowState)][-1] == (1, "pending")
    with embedded(tmp_path, "b") as server:
        records = run_capture(suite, server, work)
    assert [r.window_index for r in records] == [0, 1]


def test_records_that_cannot_be_written_leave_no_partial_window(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import kldtui.stages.capture as capture_mod

    def no_space(path: object, data: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    suite = make_suite(tmp_path / "suite", windows=1, tokens=40, vocab=64)
    monkeypatch.setattr(capture_mod, "write_json_atomic", no_space)
    with embedded(tmp_path, "a") as server:
        with pytest.raises(StageFailed, match=r"could not record window 000 .*No space left on device"):
            run_capture(suite, server, tmp_path / "c")
    assert os.listdir(tmp_path / "c" / "run1") == []


def test_masked_tokens_are_captured_finalized_and_compared_as_compare_reads_them(tmp_path: Path) -> None:
    """-inf logits (a logits processor's mask) used to fail the capture as "the server computed
    garbage" while compare reads them as probability 0. One rule (kldtui.formats.finite): the
    window is captured and finalized with its -inf entries kept, and compare gives the finalized
    folder the figures it gives the same logits written directly."""
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.stages.compare import CompareOptions, compare
    from kldtui.stages.finalize import run_finalize

    suite = make_suite(tmp_path / "suite", windows=1, tokens=300, vocab=64)
    (w,) = suite.windows
    work = tmp_path / "c"
    with embedded(tmp_path, "a", fault="mask-at-row:200") as server:
        (record,) = run_capture(suite, server, work)
    rows = read_rows(Path(record.chunk_dir))
    masked = np.flatnonzero(np.isneginf(rows).any(axis=1))
    assert masked.tolist() == [200] and np.isfinite(rows[200]).sum() >= 32, masked
    final = run_finalize(Workspace.for_capture(suite.root, work, "run1", tmp_path / "final"), suite=suite,
                         windows=suite.windows)
    with RowReader(final.parent / "logits_000.safetensors") as reader:
        np.testing.assert_array_equal(reader.read(0, reader.rows), rows)  # the -inf entries kept
    model = TinyModel(64, seed=0)  # the unmasked model as the reference: row 200's KL is infinite
    reference = model.logits(model.hidden(suite.load_tokens(w))[:-1]).astype(np.float32)
    for name, logits, kind in (("ref", reference, "reference"), ("direct", rows, "candidate")):
        written = write_logits_array(tmp_path / name, w, logits, suite.context_length)
        write_logits_manifest(tmp_path / name, suite, [written], kind=kind)
    opts = CompareOptions(bootstrap_samples=100)
    got = {name: compare(suite.path, tmp_path / "ref", folder, opts).to_json()
           for name, folder in (("finalized", final.parent), ("direct", tmp_path / "direct"))}
    assert got["finalized"]["infinite_kl"]["rows"] == 1
    for key in ("kl_reference_to_candidate", "js", "next_token", "infinite_kl", "topk_agreement",
                "per_window"):
        assert got["finalized"][key] == got["direct"][key], key


def test_non_finite_logits_fail_the_window(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", windows=1, tokens=300, vocab=64)
    with embedded(tmp_path, "a", fault="nan-at-row:200") as server:
        with pytest.raises(StageFailed, match=r"window 000 .*NaN or Inf in the captured logits at rows 200 "
                                              r"\(NaN, \+Inf or no finite logit in a row\); capture and "
                                              r"finalize this window again"):
            run_capture(suite, server, tmp_path / "c")
        assert os.listdir(server.capture_dir) == []
    assert load_records(tmp_path / "c" / "capture-run1.json", unit="window") == {}
