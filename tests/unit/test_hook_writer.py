"""The hook's background chunk writer: bounded, never drops rows, failures leave the marker."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from kldtui.formats.chunks import ERROR_MARKER
from kldtui.hook import vllm_plugin as vp
from kldtui.hook import writer as wmod


@pytest.fixture
def capture(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path / "cap"))
    monkeypatch.setattr(vp, "_writer_rank_cache", None)
    return tmp_path / "cap"


def test_full_queue_blocks_the_producer_and_every_row_lands(tmp_path):
    w = wmod.ChunkWriter(max_pending=1)
    gate = threading.Event()
    ran: list[int] = []

    def slow(i):
        def job():
            gate.wait(10)
            ran.append(i)
        return job

    w.submit(slow(0), print)  # taken by the thread, blocked on the gate
    deadline = time.monotonic() + 5
    while w._queue.qsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    w.submit(slow(1), print)  # fills the queue of one
    third = threading.Thread(target=w.submit, args=(slow(2), print))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # back-pressure: the producer waits instead of dropping
    gate.set()
    third.join(10)
    w.flush()
    assert ran == [0, 1, 2]


def test_chunks_are_written_in_the_background_with_a_pending_file_meanwhile(tmp_path):
    w = wmod.ChunkWriter(max_pending=2)
    gate = threading.Event()
    w.submit(lambda: gate.wait(10), print)  # hold the thread
    logits = torch.randn(5, 9)
    w.submit_chunk(str(tmp_path), "kldtui-r-0-1", 10, w.stage(logits, 7), 7, print)
    folder = tmp_path / "kldtui-r-0-1"
    assert [p.name for p in folder.iterdir()] == [wmod.pending_name(10, 15)]  # client waits for it
    gate.set()
    w.flush()
    assert [p.name for p in folder.iterdir()] == ["logits.rows-000010-000015.safetensors"]
    np.testing.assert_array_equal(load_file(folder / "logits.rows-000010-000015.safetensors")["logits"],
                                  logits[:, :7].numpy())


def test_a_failed_background_write_leaves_the_marker_and_no_pending_file(capture):
    (capture / "kldtui-x-0-1").mkdir(parents=True)
    (capture / "kldtui-x-0-1" / "logits.rows-000000-000004.safetensors").write_bytes(b"old")
    assert vp.save_chunk("kldtui-x-0-1", 0, torch.zeros(4, 6), 6) is True  # queued
    vp.flush()
    names = sorted(p.name for p in (capture / "kldtui-x-0-1").iterdir())
    assert names == [ERROR_MARKER, "logits.rows-000000-000004.safetensors"]
    assert "already exists" in (capture / "kldtui-x-0-1" / ERROR_MARKER).read_text()


def test_another_clients_request_is_not_captured_unless_every_request_is_asked_for(capture, monkeypatch):
    """Issue 21: a prompt-logprobs request of another client (no kldtui X-Request-Id in its id) used
    to be written in full and never removed; now the hook leaves it alone: no chunk, no marker."""
    staged = []
    real_stage = wmod.ChunkWriter.stage
    monkeypatch.setattr(wmod.ChunkWriter, "stage", lambda self, *a: staged.append(a) or real_stage(self, *a))
    monkeypatch.delenv("KLDTUI_CAPTURE_REQUESTS", raising=False)
    assert vp.save_chunk("cmpl-3f9a1c-0-1b2c3d4e", 0, torch.zeros(4, 6), 6) is True
    vp.fail_request("cmpl-3f9a1c-0-1b2c3d4e", "not ours", str(capture))
    vp.flush()
    assert staged == [] and (not capture.exists() or list(capture.iterdir()) == [])
    assert vp.save_chunk("cmpl-kldtui-run-w000-0123abcd-0-1b2c3d4e", 0, torch.zeros(4, 6), 6) is True
    monkeypatch.setenv("KLDTUI_CAPTURE_REQUESTS", "all")  # the original patch's behaviour, asked for
    assert vp.save_chunk("cmpl-3f9a1c-0-1b2c3d4e", 0, torch.zeros(4, 6), 6) is True
    vp.flush()
    assert sorted(p.name for p in capture.iterdir() if not p.name.startswith(".")) == [
        "cmpl-3f9a1c-0-1b2c3d4e", "cmpl-kldtui-run-w000-0123abcd-0-1b2c3d4e"]


def test_writer_rank_is_checked_before_any_copy(capture, monkeypatch):
    monkeypatch.setattr(vp, "_writer_rank_cache", False)
    staged = []
    monkeypatch.setattr(wmod.ChunkWriter, "stage", lambda self, *a: staged.append(a))
    assert vp.save_chunk("kldtui-x-0-1", 0, torch.zeros(4, 6), 6) is True
    vp.flush()
    assert staged == [] and not capture.exists()


class _FakeCuda:
    """A device tensor stand-in: what stage() reads of a CUDA tensor."""

    def __init__(self, t, index=0):
        self.t, self.shape, self.dtype = t, t.shape, t.dtype
        self.device = SimpleNamespace(type="cuda", index=index)

    def detach(self):
        return self

    def __getitem__(self, key):
        return type(self)(self.t[key], self.device.index)


def test_cuda_rows_go_through_a_reused_pinned_buffer_and_an_event(tmp_path, monkeypatch):
    events, taken = [], []
    engine = threading.current_thread()

    class Event:
        def __init__(self):
            self.waited_on = None
            events.append(self)

        def synchronize(self):
            self.waited_on = threading.current_thread()

    monkeypatch.setattr(wmod, "_record_event", Event)
    monkeypatch.setattr(wmod, "_copy_async", lambda dst, src: dst.copy_(src.t))
    monkeypatch.setattr(wmod, "_set_device", lambda index: None)  # no GPU here
    w = wmod.ChunkWriter(max_pending=2)
    real_take = w._pool.take

    def take(rows, cols, dtype):
        buf = real_take(rows, cols, dtype)
        taken.append(buf)
        return buf

    # pinned memory needs CUDA; the pool logic is what is tested here
    monkeypatch.setattr(w._pool, "_alloc", lambda rows, cols, dtype: torch.zeros(rows, cols, dtype=dtype))

    monkeypatch.setattr(w._pool, "take", take)
    data = torch.randn(6, 12).to(torch.bfloat16)
    for start in (0, 6):
        w.submit_chunk(str(tmp_path), "kldtui-g-0-1", start, w.stage(_FakeCuda(data), 10), 10, print)
        w.flush()
    assert len(events) == 2 and all(e.waited_on not in (None, engine) for e in events)
    assert taken[0] is taken[1]  # the second chunk reused the first chunk's buffer
    for start in (0, 6):
        got = load_file(tmp_path / "kldtui-g-0-1" / f"logits.rows-{start:06d}-{start + 6:06d}.safetensors")
        np.testing.assert_array_equal(got["logits"], data[:, :10].float().numpy())


def test_without_pinned_memory_the_copy_is_blocking_and_allowed(tmp_path, monkeypatch):
    allowed = []

    class Allow:
        def __enter__(self):
            allowed.append(True)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(wmod, "gpu_sync_allowed", Allow)
    w = wmod.ChunkWriter(max_pending=1)
    monkeypatch.setattr(w._pool, "take", lambda *a: (_ for _ in ()).throw(RuntimeError("no pinning")))

    class Cuda(_FakeCuda):
        def to(self, device):
            assert allowed  # inside vLLM's gpu_sync_allowed()
            return self.t

    staged = w.stage(Cuda(torch.ones(2, 3)), 3)
    assert staged.event is None and allowed == [True]


def test_inline_mode_writes_on_the_calling_thread(tmp_path):
    w = wmod.ChunkWriter(inline=True)
    w.submit_chunk(str(tmp_path), "r", 0, w.stage(torch.ones(2, 3), 3), 3, print)
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["logits.rows-000000-000002.safetensors"]
    assert w._thread is None


def test_the_writer_thread_sets_the_rows_device_before_it_waits_on_a_blocking_event(tmp_path, monkeypatch):
    """Issue 21: on a rank whose GPU is not 0, the writer thread's first CUDA call (the event's
    synchronize) must find the rank's device current, and the event must put the thread to sleep
    (blocking sync) rather than spin a core."""
    calls: list[tuple[str, object, threading.Thread]] = []
    made: list[dict] = []

    class Event:
        def __init__(self, **kwargs):
            made.append(kwargs)

        def record(self):
            calls.append(("record", None, threading.current_thread()))

        def synchronize(self):
            calls.append(("synchronize", None, threading.current_thread()))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(wmod, "_set_device",
                        lambda i: calls.append(("set_device", i, threading.current_thread())))
    monkeypatch.setattr(wmod, "_copy_async", lambda dst, src: dst.copy_(src.t))
    w = wmod.ChunkWriter(max_pending=2)
    monkeypatch.setattr(w._pool, "_alloc", lambda rows, cols, dtype: torch.zeros(rows, cols, dtype=dtype))
    rows = _FakeCuda(torch.randn(4, 8), index=3)
    w.submit_chunk(str(tmp_path), "kldtui-d-0-1", 0, w.stage(rows, 8), 8, print)
    w.flush()
    assert made == [{"blocking": True}]
    on_writer = [(what, arg) for what, arg, thread in calls if thread is not threading.current_thread()]
    assert on_writer == [("set_device", 3), ("synchronize", None)]
    assert (tmp_path / "kldtui-d-0-1" / "logits.rows-000000-000004.safetensors").exists()
