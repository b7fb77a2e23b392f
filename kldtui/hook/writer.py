"""The hook's chunk writer: rows leave the engine's thread at once, disk work happens beside it.

On the engine's thread a chunk costs only the device-to-host copy: CUDA rows go into a reused
pinned host buffer with a non-blocking copy and an event (no stream sync, so vLLM's
``VLLM_GPU_SYNC_CHECK`` has nothing to object to); CPU rows are handed over as they are (vLLM
does not modify them afterwards). One background thread per process then waits for the event,
widens to F32 and writes the chunk through :func:`kldtui.formats.chunks.write_chunk`.

The queue is bounded (``KLDTUI_CAPTURE_QUEUE`` chunks, default 2): when the disk is slower than
the engine, :meth:`ChunkWriter.submit` blocks (back-pressure) and no row is ever dropped. A
failed write leaves the error marker for the capture client, as a failed inline write did.
Each submitted chunk leaves a small ``.pending.rows-SSSSSS-EEEEEE`` file in its request folder
until it is published (or failed), so the capture client waits for chunks still on their way.

``KLDTUI_CAPTURE_WRITER=inline`` writes on the calling thread instead (for measurements and
debugging). Any producer (plugin, source patch; each capture mode's sink through the plugin's
:class:`kldtui.capture_modes.ServerIO`) goes through :func:`get_writer`; jobs are plain
callables, so every kind of output shares the thread.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui import settings
from kldtui.formats.chunks import sanitize_request_id, write_chunk

PENDING_PREFIX = ".pending.rows-"


def pending_name(row_start: int, row_end: int) -> str:
    return f"{PENDING_PREFIX}{row_start:06d}-{row_end:06d}"


@dataclass
class Staged:
    """Rows on their way to the host: ``tensor`` is safe to read once ``event`` completed."""

    tensor: Any
    event: Any = None  # torch.cuda.Event or None (CPU rows, or a blocking copy)
    buffer: Any = None  # the pinned buffer to give back after writing (None: not pooled)
    device: int | None = None  # the CUDA device the copy runs on (None: no event to wait for)

    def wait(self) -> Any:
        """The rows, once their copy is done. The waiting thread first makes the rows' device its
        current one (otherwise its first CUDA call opens a context on GPU 0 from every rank that
        is not on GPU 0), then blocks on the event (a blocking-sync event: the thread sleeps
        instead of spinning a core while the copy runs)."""
        if self.event is not None:
            if self.device is not None:
                _use_device(self.device)
            self.event.synchronize()
        return self.tensor


class PinnedPool:
    """Reused pinned host buffers, one shape per (vocab, dtype); grows to the rows asked for."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[Any] = []
        self._lock = threading.Lock()

    def take(self, rows: int, cols: int, dtype: Any) -> Any:
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.dtype == dtype and buf.shape[1] == cols and buf.shape[0] >= rows:
                    return self._free.pop(i)
        return self._alloc(rows, cols, dtype)

    @staticmethod
    def _alloc(rows: int, cols: int, dtype: Any) -> Any:
        import torch

        return torch.empty((rows, cols), dtype=dtype, pin_memory=True)

    def give(self, buf: Any) -> None:
        with self._lock:
            self._free.append(buf)
            self._free.sort(key=lambda b: -int(b.shape[0]))
            del self._free[self.keep:]  # keep the largest few


def gpu_sync_allowed() -> Any:
    """vLLM's own allowance for a deliberate device sync (``VLLM_GPU_SYNC_CHECK``), if it has one."""
    try:
        from vllm.utils.gpu_sync_debug import gpu_sync_allowed as vllms_allowance
    except Exception:  # noqa: BLE001 - older vLLM or none: nothing polices syncs
        return contextlib.nullcontext()
    return vllms_allowance()


class ChunkWriter:
    """A bounded background writer (one per process: use :func:`get_writer`)."""

    def __init__(self, max_pending: int | None = None, *, inline: bool = False) -> None:
        self.max_pending = max(1, settings.CAPTURE_QUEUE.default() if max_pending is None else max_pending)
        self.inline = inline
        self._queue: queue.Queue[tuple[Callable[[], None], Callable[[BaseException], None]] | None] = (
            queue.Queue(maxsize=self.max_pending))
        self._pool = PinnedPool(keep=self.max_pending + 2)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    # -- staging (engine thread) -----------------------------------------------------------------
    def stage(self, logits: Any, vocab_size: int) -> Staged:
        """Start moving ``logits[..., :vocab_size]`` to the host without waiting for it."""
        part = logits.detach()[..., :vocab_size] if hasattr(logits, "detach") else logits
        device = getattr(part, "device", None)
        if device is None or getattr(device, "type", "cpu") != "cuda":
            return Staged(part)
        try:
            base = self._pool.take(int(part.shape[0]), int(part.shape[-1]), part.dtype)
        except Exception:  # noqa: BLE001 - no pinned memory here: a plain copy, allowed explicitly
            with gpu_sync_allowed():
                return Staged(part.to("cpu"))
        view = base[: int(part.shape[0])]
        _copy_async(view, part)
        return Staged(view, _record_event(), base, _device_index(device))

    # -- queueing --------------------------------------------------------------------------------
    def submit(self, job: Callable[[], None], on_error: Callable[[BaseException], None]) -> None:
        """Run ``job`` on the writer thread; blocks while the queue is full (never drops)."""
        if self.inline:
            _run(job, on_error)
            return
        self._ensure_thread()
        self._queue.put((job, on_error))

    def submit_rows(self, folder: str, request_id: str, row_start: int, staged: Staged | Sequence[Staged],
                    write: Callable[[Any], None], on_error: Callable[[BaseException], None]) -> None:
        """Queue ``write(rows)``: ``staged`` rows (or consecutive parts of them, joined) from
        prompt row ``row_start``, once their copies are done; ``on_error`` leaves the error marker."""
        parts = [staged] if isinstance(staged, Staged) else list(staged)
        rows = sum(int(p.tensor.shape[0]) for p in parts)
        marker = self._pending(folder, request_id, row_start, rows)

        def job() -> None:
            try:
                tensors = [p.wait() for p in parts]
                if len(tensors) == 1:
                    data = tensors[0]
                else:
                    import torch

                    data = torch.cat(tensors)
                write(data)
            except Exception as exc:  # noqa: BLE001 - the error marker goes before the pending file
                on_error(exc)
            finally:
                for p in parts:
                    if p.buffer is not None:
                        self._pool.give(p.buffer)
                if marker is not None:
                    with contextlib.suppress(OSError):
                        marker.unlink()

        self.submit(job, on_error)

    def submit_chunk(self, folder: str, request_id: str, row_start: int, staged: Staged | Sequence[Staged],
                     vocab_size: int, on_error: Callable[[BaseException], None]) -> None:
        """Queue one logits chunk for :func:`write_chunk` (:meth:`submit_rows`)."""

        def write(rows: Any) -> None:
            write_chunk(folder, request_id, row_start, rows, vocab_size)

        self.submit_rows(folder, request_id, row_start, staged, write, on_error)

    def on_writer_thread(self) -> bool:
        """Whether the caller is this writer's thread (a job may then write at once: submitting
        from there could wait on the queue the thread itself empties)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit_job(self, folder: str, request_id: str, row_start: int, rows: int,
                   job: Callable[[], None], on_error: Callable[[BaseException], None]) -> None:
        """Run ``job`` (e.g. scoring a chunk and writing its records) on the writer thread, with
        the pending file of rows ``row_start .. + rows`` made now, so the capture client waits."""
        marker = self._pending(folder, request_id, row_start, rows)

        def run() -> None:
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - the error marker goes before the pending file
                on_error(exc)
            finally:
                if marker is not None:
                    with contextlib.suppress(OSError):
                        marker.unlink()

        self.submit(run, on_error)

    def _pending(self, folder: str, request_id: str, row_start: int, rows: int) -> Path | None:
        """The pending file of a queued chunk (None inline, or when it cannot be made)."""
        if self.inline:
            return None
        marker = Path(folder) / sanitize_request_id(request_id) / pending_name(row_start, row_start + rows)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            # O_EXCL: never created through a link planted at its name (nor an existing file reused)
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o644))
        except OSError:
            return None  # the write itself reports the problem
        return marker

    def flush(self) -> None:
        """Wait until every queued job ran."""
        if self._thread is not None:
            self._queue.join()

    # -- the thread ------------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="kldtui-chunk-writer",
                                                daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                _run(*item)
            finally:
                self._queue.task_done()


def _run(job: Callable[[], None], on_error: Callable[[BaseException], None]) -> None:
    try:
        job()
    except Exception as exc:  # noqa: BLE001 - reported through on_error, never to vLLM
        with contextlib.suppress(Exception):
            on_error(exc)


def _copy_async(dst: Any, src: Any) -> None:
    """Device to pinned host memory without waiting (ordered on the current stream)."""
    dst.copy_(src, non_blocking=True)


def _record_event() -> Any:
    """An event after the copy on the current stream; ``blocking=True`` (cudaEventBlockingSync):
    the writer thread sleeps in ``synchronize`` instead of spinning."""
    import torch

    event = torch.cuda.Event(blocking=True)
    event.record()
    return event


def _device_index(device: Any) -> int:
    """The index of a CUDA device (``cuda`` without one: the engine thread's current device)."""
    index = getattr(device, "index", None)
    if index is None:
        import torch

        index = torch.cuda.current_device()
    return int(index)


_thread_device = threading.local()


def _set_device(index: int) -> None:
    import torch

    torch.cuda.set_device(index)


def _use_device(index: int) -> None:
    """Make ``index`` this thread's current CUDA device (once per change)."""
    if getattr(_thread_device, "index", None) != index:
        _set_device(index)
        _thread_device.index = index


_writer: ChunkWriter | None = None
_writer_lock = threading.Lock()


def get_writer() -> ChunkWriter:
    """This process's writer (settings from ``KLDTUI_CAPTURE_QUEUE`` / ``KLDTUI_CAPTURE_WRITER``)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = ChunkWriter(settings.CAPTURE_QUEUE.get(),
                                  inline=settings.CAPTURE_WRITER.get() == "inline")
            atexit.register(_writer.flush)
        return _writer

