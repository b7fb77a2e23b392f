"""The compare engine: each window streamed in row blocks through a fused kernel
(:mod:`kldtui.metrics.kernels`) on a pool of threads, one row block per thread in memory, and
reduced to a :class:`~kldtui.stages.compare.results.WindowResult`.

Rows come from the two sides (:mod:`kldtui.stages.compare.sides`): logits files are read by the
kernel threads as they go; a hidden-state side is replayed a block of ``replay_rows`` at a time
first (the GEMM uses every thread the comparison has), and the kernel threads then take that
block's rows, so replayed and captured logits go through the same kernels."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Progress, Throttle, null_sink
from kldtui.formats import finite
from kldtui.formats.suite import WindowSpec
from kldtui.metrics.kernels import RowKernel, RowStats
from kldtui.metrics.replay import torch_threads
from kldtui.stages.compare.backends import Backend, BackendRequest
from kldtui.stages.compare.inputs import CompareInputs
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult
from kldtui.stages.compare.sides import Replays

# Rows replayed at once. On the CPU the GEMM packs each chunk of the head into its blocked layout
# once per call and streams the whole head from memory once per block, so the rows a call carries
# decide how far the replay gets towards the GEMM's peak (docs/REPLAY.md, "Block sizes"): 1,024
# rows (Kimi K3: a 671 MB FP32 block per replayed side) reach about nine tenths of the peak where
# 256 rows reached half of it; on CUDA 512 rows keep a block beside a server small.
REPLAY_ROWS = {Backend.TORCH_CUDA: 512}
DEFAULT_REPLAY_ROWS = 1024  # the CPU backends


class Engine:
    """Compares windows with one backend; reuse it across windows (it keeps a thread pool). The
    backend is ``options.backend`` when its caller chose it (a :class:`BackendChoice`), else chosen
    here from the request and said on ``emit`` (:class:`BackendChosen`)."""

    def __init__(self, vocab: int, options: CompareOptions, emit: EventSink = null_sink) -> None:
        self.vocab = vocab
        self.options = options
        choice = options.backend
        if isinstance(choice, BackendRequest):
            choice = choice.choose(vocab)
            emit(choice.event())
        self.choice = choice
        self.backend: Backend = choice.backend
        self.cuda_device = choice.cuda_device
        self.spec = self.backend.spec
        self.threads = self.spec.threads(choice.threads)
        self.row_block = max(1, options.row_block or self.spec.row_block)
        self.replay_rows = max(self.row_block, options.replay_rows or REPLAY_ROWS.get(self.backend,
                                                                                      DEFAULT_REPLAY_ROWS))
        # the replay's GEMM runs on the CPU with every thread of the comparison, or on the GPU
        self.replays = Replays(self._torch_device(), chunk=options.vocab_chunk,
                               threads=choice.threads or os.cpu_count())
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kldtui-compare")

    def _torch_device(self) -> str:
        if self.backend is not Backend.TORCH_CUDA:
            return "cpu"
        return "cuda" if self.cuda_device is None else f"cuda:{self.cuda_device}"

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.replays.close()
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

    def _scratch(self, name: str, dtype: np.dtype) -> np.ndarray:
        """This thread's reusable buffer ``[row_block, vocab]`` of ``dtype`` for one use (``name``:
        a side's raw rows, widened rows); allocated at first use: mmap needs none."""
        bufs: dict[str, np.ndarray] = getattr(self._local, "buffers", None) or {}
        self._local.buffers = bufs
        buf = bufs.get(name)
        if buf is None or buf.dtype != dtype:
            buf = np.empty((self.row_block, self.vocab), dtype=dtype)
            bufs[name] = buf
        return buf

    def compare_window(self, inputs: CompareInputs, window: WindowSpec,
                       emit: EventSink = null_sink, cancel: Cancel | None = None) -> WindowResult:
        t0 = time.perf_counter()
        rows = window.scored_positions
        reverse = self.options.reverse
        tokens = inputs.next_tokens[window.index]
        out = RowStats.empty(rows, reverse)
        throttle = Throttle(0.1)
        done = 0
        lock = threading.Lock()
        task = window.name
        mmap_ok = self.spec.mmap

        with contextlib.ExitStack() as stack:
            xs = inputs.reference.open(window, self.replays, self.replay_rows, mmap_ok)
            stack.callback(xs.close)
            ys = inputs.candidate.open(window, self.replays, self.replay_rows, mmap_ok)
            stack.callback(ys.close)

            def work(start: int) -> None:
                nonlocal done
                if cancel is not None:
                    cancel.check()
                stop = min(start + self.row_block, rows)
                kernel = self._kernel()

                def side_scratch(prefix: str) -> Any:
                    return lambda name, dtype: self._scratch(f"{prefix}-{name}", dtype)

                x = xs.rows(start, stop, side_scratch("x"))
                y = ys.rows(start, stop, side_scratch("y"))
                block = kernel.block(x, y, tokens[start:stop], reverse)
                del x, y
                xs.release(start, stop)
                ys.release(start, stop)
                out.put(start, block)
                with lock:
                    done += stop - start
                    if throttle.ready(final=done == rows):
                        elapsed = time.perf_counter() - t0
                        rate = done / elapsed if elapsed > 0 else None
                        emit(Progress("compare", task=task, done=done, total=rows, unit="rows",
                                      rate=rate, eta_s=(rows - done) / rate if rate else None))

            replayed = xs.replayed or ys.replayed
            stage = self.replay_rows if replayed else rows
            gemm_threads = self.replays.threads if replayed and self.replays.uses_torch else None
            for s0 in range(0, rows, stage):
                s1 = min(s0 + stage, rows)
                if cancel is not None:
                    cancel.check()
                with torch_threads(gemm_threads):
                    xs.stage(s0, s1)
                    ys.stage(s0, s1)
                self._run(work, range(s0, s1, self.row_block))
        bad = out.nonfinite_rows()
        if bad.size:
            raise self._nonfinite_error(inputs, window, bad)
        elapsed = time.perf_counter() - t0
        nbytes = inputs.reference.bytes_read(rows) + inputs.candidate.bytes_read(rows)
        return WindowResult(window.index, window.domain, self.vocab, out, elapsed_seconds=elapsed,
                            bytes_compared=nbytes, backend=str(self.backend), threads=self.threads,
                            backend_reason=self.choice.reason)

    def _run(self, work: Any, starts: range) -> None:
        """``work(start)`` for every block start on the pool; the first failure stops the rest."""
        futures: list[Future[None]] = [self._pool.submit(work, s) for s in starts]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f.done() and f.exception() is not None]
        if failed:
            for f in futures:
                f.cancel()
            wait(futures)
            raise failed[0].exception()  # type: ignore[misc]

    def _nonfinite_error(self, inputs: CompareInputs, window: WindowSpec, rows: np.ndarray) -> BadInput:
        for side in (inputs.reference, inputs.candidate):
            message = side.nonfinite(window, rows)
            if message is not None:
                return BadInput(message)
        return BadInput(finite.overflow_problem(inputs.candidate.manifest_path, window.label, rows))


__all__ = ["Engine"]
