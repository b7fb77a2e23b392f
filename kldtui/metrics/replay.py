"""Replay: a context's logits recomputed from its stored final hidden states and the LM head,
``logits = h · Wᵀ`` (docs/REPLAY.md).  The one home of this arithmetic: the compare stage
(a hidden-state reference or candidate, CPU or CUDA) and score mode on a server (the reference's
rows replayed on the device beside the candidate's logits) both call it.

Inputs are BF16: ``h`` ``[rows, hidden]`` (after the model's final norm, before the head) and
``W`` ``[vocab, hidden]`` (the head exactly as the checkpoint stores it, every row, reserved ids
included).  The arithmetic, the published comparator's:

1. the vocabulary is taken in chunks of ``chunk`` rows of ``W`` (memory: one chunk of the head
   and its ``[rows, chunk]`` product at a time);
2. each chunk's product is a BF16 x BF16 GEMM accumulated in FP32 (every BF16 x BF16 product is
   exact in FP32, so only the order of the FP32 additions differs between libraries);
3. the FP32 sums are rounded to BF16 (round to nearest, ties to even: ``output="bf16"``, the
   default, which is what the model's own head returns in a BF16 server, so a replayed reference
   is the distribution the live model served) or kept in FP32 (``output="f32"``, for a model
   whose head runs in FP32), then widened to FP32 exactly;
4. the widened rows go to the compare kernels (:mod:`kldtui.metrics.kernels`), which take the
   full-vocabulary log-sum-exp in two passes (each row's maximum, then float64 sums of
   ``exp(logit - max)``), exactly as for captured logits.

Backends: :class:`TorchReplay` (CUDA, or the CPU through oneDNN, which uses AMX/AVX-512 BF16
where the CPU has them) and :class:`NumpyReplay` (any CPU: the BF16 operands widened exactly to
FP32 chunk by chunk and multiplied by NumPy's BLAS SGEMM; the rounding of step 3 in NumPy).
:func:`replay_float64` is the float64 replay the error measurements compare against.

BF16 values live in NumPy as their raw 16-bit patterns (``uint16``: NumPy has no bfloat16):
:func:`bf16_to_f32` widens them, :func:`f32_to_bf16` rounds to them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kldtui.metrics.replay_spec import DEFAULT_CHUNK, DEFAULT_OUTPUT, OUTPUTS, check_output

BF16_BYTES = 2
NATIVE, WIDENED = "native", "widened to FP32"  # how a replay's GEMM takes its BF16 operands


def torch_gemm_path(device: str, output: str) -> str:
    """How :class:`TorchReplay` multiplies on ``device`` for ``output``: a BF16 GEMM (CUDA, or a CPU
    whose oneDNN takes BF16: AVX-512 BW/VL/DQ or AVX2 with AVX-NE-CONVERT on x86, BF16 on Arm), else
    each chunk widened to FP32 (also for ``f32`` output, whose sums stay FP32)."""
    import torch

    if output == "f32":
        return WIDENED
    if torch.device(device).type != "cpu" or torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return NATIVE
    return WIDENED


def bf16_to_f32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """BF16 bit patterns (``uint16``) widened to float32: exact (the pattern is the float32's upper
    half)."""
    src = np.asarray(bits)
    if out is None:
        out = np.empty(src.shape, dtype=np.float32)
    wide = out.view(np.uint32)
    np.left_shift(src, 16, out=wide, dtype=np.uint32)
    return out


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to BF16 (nearest, ties to even), as bit patterns (``uint16``); NaN
    stays NaN, infinities stay infinite, values beyond the BF16 range round to infinity."""
    v = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (v >> 16) & 1
    rounded = ((v + np.uint32(0x7FFF) + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    if nan.any():
        rounded[nan] = ((v[nan] >> 16) | 0x0040).astype(np.uint16)  # quiet NaN, sign kept
    return rounded


def round_bf16_inplace(x: np.ndarray, scratch: np.ndarray | None = None,
                       nan_mask: np.ndarray | None = None) -> np.ndarray:
    """float32 ``x`` rounded to BF16 precision in place (the value, kept as float32).

    ``scratch`` (``uint32``) and ``nan_mask`` (``bool``), of ``x``'s shape, hold the rounding's
    intermediates when given (a replay reuses them chunk after chunk); without them they are
    allocated, as large as ``x``."""
    v = x.view(np.uint32)
    nan = np.isnan(x, out=nan_mask)
    lsb = np.right_shift(v, np.uint32(16), out=scratch)
    np.bitwise_and(lsb, np.uint32(1), out=lsb)
    v += np.uint32(0x7FFF)
    v += lsb
    v &= np.uint32(0xFFFF0000)
    if nan.any():
        x[nan] = np.nan
    return x


def chunks(vocab: int, chunk: int) -> Iterator[tuple[int, int]]:
    """The vocabulary chunks ``[start, stop)`` of a replay."""
    if chunk < 1:
        raise ValueError(f"vocabulary chunk {chunk} must be at least 1")
    for start in range(0, vocab, chunk):
        yield start, min(start + chunk, vocab)


@dataclass(frozen=True)
class ReplayShape:
    """What one replay needs in memory, for the messages said before a run."""

    rows: int  # hidden rows per block
    vocab: int
    hidden: int
    chunk: int

    @property
    def logits_bytes(self) -> int:
        """The replayed block, float32 ``[rows, vocab]``."""
        return self.rows * self.vocab * 4

    @property
    def chunk_bytes(self) -> int:
        """One vocabulary chunk of the head (BF16) and its product (FP32)."""
        return self.chunk * self.hidden * BF16_BYTES + self.rows * self.chunk * 4

    @property
    def head_bytes(self) -> int:
        return self.vocab * self.hidden * BF16_BYTES

    def flops(self) -> int:
        return 2 * self.rows * self.vocab * self.hidden


class NumpyReplay:
    """CPU replay with NumPy's BLAS: each chunk of the BF16 head widened exactly to FP32 into a
    reused buffer and multiplied by SGEMM (FP32 accumulation), the product rounded to BF16 unless
    ``output="f32"``.  ``head`` is ``uint16`` ``[vocab, hidden]`` (a memory map of the head file
    is fine: only one chunk is widened at a time).  One instance per thread.

    Like :class:`TorchReplay`'s per-thread buffers, every intermediate is a buffer kept between
    chunks and calls (grown only for more rows): the widened hidden rows and head chunk, the
    chunk's product and its BF16 rounding's scratch, each used as a contiguous block."""

    name = "numpy-sgemm"

    def __init__(self, head: np.ndarray, *, chunk: int = DEFAULT_CHUNK, output: str = DEFAULT_OUTPUT) -> None:
        if head.ndim != 2 or head.dtype != np.uint16:
            raise ValueError("the head must be BF16 bit patterns [vocab, hidden]")
        self.head = head
        self.vocab, self.hidden = (int(d) for d in head.shape)
        self.chunk = min(chunk, self.vocab)
        self.output = check_output(output)
        self._w = np.empty((self.chunk, self.hidden), dtype=np.float32)
        self._rows = 0  # rows the buffers below hold
        self._h = np.empty(0, dtype=np.float32)  # flat: [rows, hidden]
        self._p = np.empty(0, dtype=np.float32)  # flat: a chunk's product [rows, chunk]
        self._scratch = np.empty(0, dtype=np.uint32)  # the rounding's intermediates, as large
        self._nan = np.empty(0, dtype=np.bool_)

    def new_block(self, rows: int) -> np.ndarray:
        """An FP32 block ``[rows, vocab]`` for :meth:`logits`' ``out``."""
        return np.empty((rows, self.vocab), dtype=np.float32)

    def _grow(self, rows: int) -> None:
        if rows <= self._rows:
            return
        self._h = np.empty(rows * self.hidden, dtype=np.float32)
        self._p = np.empty(rows * self.chunk, dtype=np.float32)
        if self.output == "bf16":
            self._scratch = np.empty(rows * self.chunk, dtype=np.uint32)
            self._nan = np.empty(rows * self.chunk, dtype=np.bool_)
        self._rows = rows

    def logits(self, hidden: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Replayed logits, float32 ``[rows, vocab]`` (into ``out`` when given)."""
        rows = int(hidden.shape[0])
        if hidden.ndim != 2 or hidden.shape[1] != self.hidden:
            raise ValueError(f"hidden rows of shape {list(hidden.shape)} do not fit the head's width "
                             f"{self.hidden}")
        if out is None:
            out = np.empty((rows, self.vocab), dtype=np.float32)
        self._grow(rows)
        h = bf16_to_f32(hidden, self._h[:rows * self.hidden].reshape(rows, self.hidden))
        for start, stop in chunks(self.vocab, self.chunk):
            width = stop - start
            w = bf16_to_f32(self.head[start:stop], self._w[:width])
            product = self._p[:rows * width].reshape(rows, width)  # contiguous: SGEMM writes it directly
            np.matmul(h, w.T, out=product)
            if self.output == "bf16":  # chunk by chunk, while it is in the cache
                round_bf16_inplace(product, self._scratch[:rows * width].reshape(rows, width),
                                   self._nan[:rows * width].reshape(rows, width))
            out[:, start:stop] = product
        return out


class TorchReplay:
    """Replay with torch on ``device``: per vocabulary chunk ``F.linear(h, W_chunk)`` in BF16
    (FP32 accumulation, BF16 output: the published comparator's arithmetic), widened into an FP32
    ``[rows, vocab]`` tensor; with ``output="f32"`` the chunk is multiplied in FP32 instead (exact
    operands, FP32 sums kept).

    ``head`` is a torch BF16 tensor ``[vocab, hidden]``.  On the device it is used in place; on
    the host (``stream=True``; pinned memory for an asynchronous copy) each chunk is copied to the
    device when used, so the device holds two chunks of the head, not the whole of it: the way
    score mode fits beside a server at a high ``--gpu-memory-utilization`` (:meth:`device_bytes`).

    On CUDA, TF32 and reduced-precision BF16 reductions are switched off for the process (they
    would change the sums); :attr:`settings` records what was set.  On a CPU without native BF16
    matrix instructions (oneDNN's BF16 support: AVX-512 BF16, AMX, Arm BF16), where torch's BF16
    GEMM is far slower than its FP32 one, each chunk is widened exactly to FP32, multiplied in FP32
    and the product rounded to BF16: the same arithmetic (exact products, FP32 sums, BF16 output)."""

    name = "torch"

    def __init__(self, head: Any, device: str | Any = "cpu", *, chunk: int = DEFAULT_CHUNK,
                 output: str = DEFAULT_OUTPUT, stream: bool = False) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if head.dim() != 2 or head.dtype != torch.bfloat16:
            raise ValueError("the head must be a BF16 tensor [vocab, hidden]")
        self.vocab, self.hidden = (int(d) for d in head.shape)
        self.chunk = min(chunk, self.vocab)
        self.output = check_output(output)
        self.stream = stream and head.device != self.device
        self.head = head if self.stream or head.device == self.device else head.to(self.device)
        self.native_bf16 = torch_gemm_path(str(self.device), "bf16") == NATIVE
        self.settings: dict[str, Any] = {"device": str(self.device), "vocab_chunk": self.chunk,
                                         "output": self.output, "head_streamed": self.stream,
                                         "bf16_gemm": torch_gemm_path(str(self.device), self.output)}
        self._local = threading.local()
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
            self.settings.update(tf32=False, bf16_reduced_precision_reduction=False)

    def device_bytes(self, rows: int) -> int:
        """Device memory one :meth:`logits` call needs beyond its input rows: the FP32 output, a
        chunk's product buffer (BF16 from a BF16 GEMM; FP32, its BF16 rounding and the chunk of the
        head widened to FP32 on the widened path) and the head (whole, or two chunks when streamed)."""
        shape = ReplayShape(rows, self.vocab, self.hidden, self.chunk)
        head = 2 * self.chunk * self.hidden * BF16_BYTES if self.stream else shape.head_bytes
        if self.output == "f32" or not self.native_bf16:
            rounded = rows * self.chunk * BF16_BYTES if self.output == "bf16" else 0
            product = rows * self.chunk * 4 + rounded + self.chunk * self.hidden * 4
        else:
            product = rows * self.chunk * BF16_BYTES
        return shape.logits_bytes + product + head

    def new_block(self, rows: int) -> Any:
        """An FP32 tensor ``[rows, vocab]`` on the device, for :meth:`logits`' ``out``."""
        return self.torch.empty((rows, self.vocab), dtype=self.torch.float32, device=self.device)

    def _buffer(self, name: str, numel: int, dtype: Any) -> Any:
        """This thread's reusable flat buffer ``name`` of at least ``numel`` elements on the device:
        a chunk's product and the widened chunk of the head are not allocated again per chunk."""
        bufs: dict[str, Any] = self._local.__dict__.setdefault("buffers", {})
        buf = bufs.get(name)
        if buf is None or buf.numel() < numel or buf.dtype != dtype:
            buf = self.torch.empty(numel, dtype=dtype, device=self.device)
            bufs[name] = buf
        return buf

    def logits(self, hidden: Any, out: Any = None) -> Any:
        """Replayed logits, an FP32 tensor ``[rows, vocab]`` on the device (into ``out`` when
        given); ``hidden`` is a BF16 tensor ``[rows, hidden]`` (moved to the device if needed).

        Per vocabulary chunk: one GEMM into a reused product buffer, then one copy widening it into
        ``out``'s columns (on the BF16 path the product is BF16, so the copy is exact).  The GEMM's
        cost per call is the head chunk's packing into the library's blocked layout plus
        ``2 · rows · chunk · hidden`` FLOP: call it with many rows (docs/REPLAY.md, "Block sizes")."""
        torch = self.torch
        h = hidden.to(self.device, non_blocking=True)
        if h.dim() != 2 or h.shape[1] != self.hidden:
            raise ValueError(f"hidden rows of shape {list(h.shape)} do not fit the head's width "
                             f"{self.hidden}")
        rows = int(h.shape[0])
        if out is None:
            out = torch.empty((rows, self.vocab), dtype=torch.float32, device=self.device)
        widen = self.output == "f32" or not self.native_bf16
        with torch.inference_mode():
            hf = h.float() if widen else h
            gemm_dtype = torch.float32 if widen else torch.bfloat16
            flat = self._buffer("product", rows * self.chunk, gemm_dtype)
            rounded = (self._buffer("rounded", rows * self.chunk, torch.bfloat16)
                       if widen and self.output == "bf16" else None)
            wide = self._buffer("head", self.chunk * self.hidden, torch.float32) if widen else None
            for start, stop in chunks(self.vocab, self.chunk):
                n = stop - start
                w = self.head[start:stop]
                if self.stream:
                    w = w.to(self.device, non_blocking=True)
                if wide is not None:
                    w = wide[:n * self.hidden].view(n, self.hidden).copy_(w)  # exact
                product = flat[:rows * n].view(rows, n)
                torch.mm(hf, w.t(), out=product)
                if rounded is not None:
                    # round to nearest even, as the BF16 GEMM's output
                    product = rounded[:rows * n].view(rows, n).copy_(product)
                out[:, start:stop].copy_(product)
        return out


def rows_to_bf16(tensor: Any) -> Any:
    """Hidden rows in BF16 where they are: a torch tensor rounded on its device (round to nearest
    even; a new tensor, so the engine may reuse its memory), an array as BF16 bit patterns."""
    if hasattr(tensor, "detach"):  # torch, without importing it here
        import torch

        t = tensor.detach()
        if t.dtype == torch.bfloat16:
            # vLLM reuses its buffers: a CPU tensor is copied now (a device one is copied to the host
            # by the staging, ordered before the engine writes the buffer again)
            return t.clone() if t.device.type == "cpu" else t
        return t.to(torch.bfloat16)
    arr = np.asarray(tensor)
    return arr.copy() if arr.dtype == np.uint16 else f32_to_bf16(arr)


def bf16_host_bits(rows: Any) -> np.ndarray:
    """Host BF16 rows (a torch tensor or ``uint16`` array) as ``uint16`` bit patterns."""
    if hasattr(rows, "detach"):
        import torch

        bits: np.ndarray = rows.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
        return bits
    return np.ascontiguousarray(rows, dtype=np.uint16)


def replay_float64(hidden: np.ndarray, head: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """The float64 replay (BF16 operands widened exactly, float64 sums): what the error of
    :class:`NumpyReplay` and :class:`TorchReplay` is measured against (tests, docs/REPLAY.md)."""
    h = bf16_to_f32(hidden).astype(np.float64)
    out = np.empty((h.shape[0], head.shape[0]), dtype=np.float64)
    for start, stop in chunks(int(head.shape[0]), chunk):
        out[:, start:stop] = h @ bf16_to_f32(head[start:stop]).astype(np.float64).T
    return out


def torch_bf16(bits: np.ndarray) -> Any:
    """A torch BF16 tensor sharing the memory of BF16 bit patterns (``uint16``; no copy)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` for a block (the replay's GEMM), then restored."""
    if not threads:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["DEFAULT_CHUNK", "DEFAULT_OUTPUT", "NATIVE", "OUTPUTS", "WIDENED", "NumpyReplay", "ReplayShape",
           "TorchReplay",
           "bf16_host_bits", "bf16_to_f32", "check_output", "chunks", "f32_to_bf16", "replay_float64",
           "round_bf16_inplace", "rows_to_bf16", "torch_bf16", "torch_gemm_path", "torch_threads"]
