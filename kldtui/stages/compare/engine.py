"""The compare engine: each window streamed in row blocks through a fused kernel
(:mod:`kldtui.metrics.kernels`) on a pool of threads, one row block per thread in memory, and
reduced to a :class:`~kldtui.stages.compare.results.WindowResult`."""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Progress, Throttle, null_sink
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import WindowSpec
from kldtui.metrics.kernels import RowKernel, RowStats
from kldtui.stages.compare.backends import Backend, choose_backend
from kldtui.stages.compare.inputs import CompareInputs
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult
from kldtui.stages.compare.rows import RowMap


class Engine:
    """Compares windows with one backend; reuse it across windows (it keeps a thread pool)."""

    def __init__(self, vocab: int, options: CompareOptions) -> None:
        self.vocab = vocab
        self.options = options
        choice = choose_backend(options.backend, options.threads, cuda_device=options.cuda_device,
                                vocab=vocab)
        self.backend: Backend = choice.backend
        self.cuda_device = choice.cuda_device
        self.spec = self.backend.spec
        self.threads = self.spec.threads(choice.threads)
        self.row_block = max(1, options.row_block or self.spec.row_block)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kldtui-compare")

    def _torch_device(self) -> str:
        if self.backend is not Backend.TORCH_CUDA:
            return "cpu"
        return "cuda" if self.cuda_device is None else f"cuda:{self.cuda_device}"

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.backend is Backend.TORCH_CUDA:
            # give the cached blocks back: a server started later checks the GPU's free memory
            import torch

            self._local = threading.local()
            torch.cuda.empty_cache()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kernel(self) -> RowKernel:
        """This thread's kernel (kernels own scratch buffers: one per thread)."""
        k: RowKernel | None = getattr(self._local, "kernel", None)
        if k is None:
            k = self.spec.kernel(self.vocab, self._torch_device())
            self._local.kernel = k
        return k

    def _buffer(self, name: str) -> np.ndarray:
        """This thread's read buffer for one side (allocated at first use: mmap needs none)."""
        buf = getattr(self._local, name, None)
        if buf is None:
            buf = np.empty((self.row_block, self.vocab), dtype=np.float32)
            setattr(self._local, name, buf)
        return buf

    def compare_window(self, inputs: CompareInputs, window: WindowSpec,
                       emit: EventSink = null_sink, cancel: Cancel | None = None) -> WindowResult:
        t0 = time.perf_counter()
        rows = window.scored_positions
        reverse = self.options.reverse
        ref_path = inputs.reference.file_path(window.index)
        cand_path = inputs.candidate.file_path(window.index)
        tokens = inputs.next_tokens[window.index]
        out = RowStats.empty(rows, reverse)
        throttle = Throttle(0.1)
        done = 0
        lock = threading.Lock()
        task = f"window {window.index:03d}"

        with RowReader(ref_path) as xr, RowReader(cand_path) as yr, \
                RowMap(xr, self.spec.mmap) as xm, RowMap(yr, self.spec.mmap) as ym:
            def work(start: int) -> None:
                nonlocal done
                if cancel is not None:
                    cancel.check()
                stop = min(start + self.row_block, rows)
                kernel = self._kernel()
                x = xm.rows(start, stop) if xm.ok else xr.pread(start, stop, self._buffer("x"))
                y = ym.rows(start, stop) if ym.ok else yr.pread(start, stop, self._buffer("y"))
                block = kernel.block(x, y, tokens[start:stop], reverse)
                del x, y
                xm.release(start, stop)
                ym.release(start, stop)
                out.put(start, block)
                with lock:
                    done += stop - start
                    if throttle.ready(final=done == rows):
                        elapsed = time.perf_counter() - t0
                        rate = done / elapsed if elapsed > 0 else None
                        emit(Progress("compare", task=task, done=done, total=rows, unit="rows",
                                      rate=rate, eta_s=(rows - done) / rate if rate else None))

            futures: list[Future[None]] = [self._pool.submit(work, s) for s in range(0, rows, self.row_block)]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                for f in futures:
                    f.cancel()
                wait(futures)
                raise failed[0].exception()  # type: ignore[misc]
        bad = out.nonfinite_rows()
        if bad.size:
            raise self._nonfinite_error(ref_path, cand_path, window, bad)
        elapsed = time.perf_counter() - t0
        return WindowResult(window.index, window.domain, self.vocab, out, elapsed_seconds=elapsed,
                            bytes_compared=2 * rows * self.vocab * 4, backend=str(self.backend))

    def _nonfinite_error(self, ref_path: Path, cand_path: Path, window: WindowSpec,
                         rows: np.ndarray) -> BadInput:
        for path, side in ((ref_path, "reference"), (cand_path, "candidate")):
            with RowReader(path) as reader:
                hit: list[int] = []
                for r in rows[:64]:
                    block = reader.pread(int(r), int(r) + 1)
                    # NaN or +Inf, or no finite logit at all (-inf alone is a mask: probability 0)
                    if not np.isfinite(np.max(block)):
                        hit.append(int(r))
                if hit:
                    shown = ", ".join(str(r) for r in hit[:5]) + (" ..." if len(hit) > 5 else "")
                    return BadInput(f"{path}: {window.label}: NaN or Inf in the {side} logits at rows "
                                    f"{shown} (NaN, +Inf or no finite logit in a row); capture and "
                                    "finalize this window again")
        return BadInput(f"{cand_path}: {window.label}: non-finite results at rows "
                        f"{', '.join(str(int(r)) for r in rows[:5])}; the logits overflow float64 sums")


__all__ = ["Engine"]
