"""The compare stage: a candidate's finalized logits against the reference suite.

Everything is validated before the first row is compared (:func:`prepare`): suite hash, token
hashes, both manifests against the suite, vocabularies, every file's key, dtype, shape and size
(and SHA-256 with ``verify_sha256``).  Then each window is streamed in row blocks through a fused
kernel (:mod:`kldtui.metrics.kernels`) on a pool of threads, one row block per thread in memory,
and reduced to a :class:`WindowResult`; :func:`build_report` turns window results into the report
(docs/REPORT.md).  :class:`Comparer` drives it for a workspace (per-window cache, report);
:func:`run_compare` is the stage (``kldtui compare``, the pipeline's compare step), and the
pipeline calls :meth:`Comparer.window` as each window is finalized.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as _dt
import hashlib
import importlib.util
import json
import math
import mmap
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from kldtui import __version__
from kldtui.errors import BadInput
from kldtui.events import (
    Cancel,
    EventSink,
    Progress,
    ResultReady,
    StageFinished,
    StageStarted,
    Throttle,
    WindowState,
    failure_reported,
    null_sink,
)
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.identity import check_logits_file
from kldtui.formats.report_model import (
    REPORT_FORMAT,
    WINDOW_FIGURES,
    Bootstrap,
    ComparisonReport,
    ConfidenceBucket,
    DeltaP,
    InfiniteKL,
    Interval,
    NextToken,
    PositionBucket,
    Provenance,
    Stats,
    TopK,
    Verified,
    WindowEntry,
    WindowTable,
)
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.scores import ScoresManifest, dtype_text, load_scores_manifest, read_records
from kldtui.formats.suite import (
    LogitsManifest,
    Suite,
    WindowSpec,
    check_manifest_matches_suite,
    load_logits_manifest,
    load_suite,
    logits_manifest_path,
    sha256_file,
)
from kldtui.metrics import ckernel
from kldtui.metrics import stats as st
from kldtui.metrics.kernels import FIELDS, INT_FIELDS, NumpyRowKernel, RowStats, TorchBlockKernel
from kldtui.metrics.score import RECORD_DTYPE, from_records
from kldtui.workspace import Workspace

DIRECTION = "KL(reference || candidate)"
TOPK = (1, 5, 10)
TOPK_DEFINITION = ("fraction of positions where the reference's top-1 token is among the "
                   "candidate's k highest logits (ties in its favour)")
INFINITE_KL_DEFINITION = ("positions where the candidate gives probability 0 (a logit at -inf, or more than "
                          "708 below its row's maximum) to a token the reference gives a positive "
                          "probability: KL(reference || candidate) is infinite there and left out "
                          "of the KL statistics, which cover the other positions; JS stays finite")
BACKENDS = ("auto", "c", "numpy", "torch", "torch-cpu", "torch-cuda")


@dataclass
class CompareOptions:
    start_window: int = 0
    stop_window: int | None = None
    bootstrap_samples: int = 10000
    bootstrap_seed: int = 1
    row_block: int | None = None  # rows per block; None: chosen by the backend
    reverse: bool = False
    backend: str = "auto"  # see BACKENDS
    threads: int | None = None  # worker threads (numpy backend); None: every core
    cuda_device: int | None = None  # torch-cuda: the GPU index (None: the current device)
    verify_sha256: bool = False
    mode: str = "logits"  # "score": the candidate folder holds the server's scores (issue 16)


# ----------------------------------------------------------------------------- inputs


@dataclass
class CompareInputs:
    """Everything :func:`prepare` validated; what the engine needs to compare windows."""

    suite: Suite
    windows: list[WindowSpec]
    reference: LogitsManifest
    candidate: LogitsManifest
    vocab_size: int
    next_tokens: dict[int, np.ndarray]
    verified: Verified
    reference_manifest_sha256: str


def _file_checks(manifest: LogitsManifest, suite: Suite, w: WindowSpec, side: str) -> Path:
    """The file is the window the suite expects (header metadata window_index and token hash,
    shape, dtype, size), checked before a row is read; see :mod:`kldtui.formats.identity`."""
    entry = manifest.entry(w.index)
    if entry.dtype != "F32":
        raise BadInput(f"{manifest.path}: {w.label} dtype {entry.dtype!r} is not F32; "
                       "only float32 logits are supported")
    identity = check_logits_file(manifest, w.index, suite=suite, side=side)
    identity.raise_first("" if any("again" in p for p in identity.problems[:1])
                         else "; download or finalize this window again")
    return identity.path


def prepare(suite_manifest: str | os.PathLike[str] | Suite, reference_dir: str | os.PathLike[str],
            candidate_dir: str | os.PathLike[str], options: CompareOptions,
            emit: EventSink = null_sink, cancel: Cancel | None = None,
            windows: Sequence[WindowSpec] | None = None) -> CompareInputs:
    """Validate every input of a comparison; BadInput (one line) on the first problem."""
    suite = suite_manifest if isinstance(suite_manifest, Suite) else load_suite(suite_manifest)
    suite.check_suite_hash()
    selected = list(windows) if windows is not None else suite.select(options.start_window,
                                                                       options.stop_window)
    ref = load_logits_manifest(reference_dir)
    cand = load_logits_manifest(candidate_dir)
    check_manifest_matches_suite(ref, suite, selected)
    check_manifest_matches_suite(cand, suite, selected)
    if cand.vocab_size != ref.vocab_size:
        raise BadInput(f"{cand.path}: vocabulary {cand.vocab_size} differs from the reference's "
                       f"{ref.vocab_size} ({ref.path}); compare logits of the same tokenizer")
    vocab = ref.vocab_size
    next_tokens: dict[int, np.ndarray] = {}
    for w in selected:
        ids = np.asarray(suite.load_tokens(w, check_hash=True), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise BadInput(f"{suite.token_path(w)}: {w.label} has token id {int(ids.max())} outside "
                           f"the vocabulary of {vocab}; the suite and the logits do not belong together")
        next_tokens[w.index] = ids[1:]
    paths: list[tuple[Path, str, WindowSpec, LogitsManifest]] = []
    for w in selected:
        paths.append((_file_checks(ref, suite, w, "reference"), ref.entry(w.index).sha256, w, ref))
        paths.append((_file_checks(cand, suite, w, "candidate"), cand.entry(w.index).sha256, w, cand))
    sha_state = "skipped"
    if options.verify_sha256:
        sha_state = _verify_sha256(paths, emit, cancel)
    verified = Verified(token_hashes=True, suite_hash=True, logits_sha256=sha_state)
    ref_sha = hashlib.sha256(ref.path.read_bytes()).hexdigest()
    return CompareInputs(suite, selected, ref, cand, vocab, next_tokens, verified, ref_sha)


def _verify_sha256(paths: list[tuple[Path, str, WindowSpec, LogitsManifest]], emit: EventSink,
                   cancel: Cancel | None) -> str:
    """Check every file's SHA-256 against its manifest, through ``kldtui verify``'s cache of
    verified files (a file unchanged since it was verified is not hashed again).  Returns
    "checked" when something was hashed, "cached" when every hash came from the cache."""
    from kldtui.stages.verify import VerifiedCache, hash_files

    caches: dict[Path, VerifiedCache] = {}
    known: dict[Path, str] = {}
    for path, _, _, manifest in paths:
        cache = caches.setdefault(manifest.root.resolve(), VerifiedCache(manifest.root))
        sha = cache.lookup(path)
        if sha is not None:
            known[path] = sha
    need = list(dict.fromkeys(p for p, _, _, _ in paths if p not in known))

    def record(path: Path, sha: str) -> None:
        for root, cache in caches.items():
            if path.resolve().is_relative_to(root):
                cache.record(path, sha)

    known.update(hash_files(need, emit=emit, cancel=cancel, stage="compare", task="verify sha256",
                            on_hashed=record))
    for cache in caches.values():
        cache.save()
    for path, expected, w, _ in paths:
        if known[path] != expected:
            raise BadInput(f"{path}: {w.label}: SHA-256 {known[path][:12]}... differs from the manifest's "
                           f"{expected[:12]}...; the file is damaged, fetch or finalize it again")
    return "checked" if need else "cached"


# ----------------------------------------------------------------------------- window results

_PER_ROW = ("kl", "js", "kl_reverse", "logp_ref_next", "logp_cand_next", "ref_top_prob",
            "argmax_ref", "argmax_cand", "rank_ref_top")


def _encode(arr: np.ndarray) -> dict[str, str]:
    dtype = "<i8" if arr.dtype.kind in "iu" else "<f8"
    return {"dtype": dtype, "data": base64.b64encode(np.ascontiguousarray(arr, dtype=dtype).tobytes())
            .decode("ascii")}


def _decode(doc: dict[str, str]) -> np.ndarray:
    dtype = np.dtype(doc["dtype"])
    if dtype not in (np.dtype("<i8"), np.dtype("<f8")):
        raise ValueError(f"unsupported dtype {doc['dtype']}")
    return np.frombuffer(base64.b64decode(doc["data"]), dtype=dtype).copy()


@dataclass(frozen=True)
class WindowFigures:
    """One window's figures (its ``per_window_arrays`` column values, docs/REPORT.md)."""

    window_index: int
    domain: str
    positions: int
    kl_mean: float
    kl_median: float
    kl_p99: float
    kl_max: float
    js_mean: float
    top1_agreement: float
    p_reference_mean: float
    p_candidate_mean: float
    delta_p_mean: float
    delta_p_rms: float
    nll_reference_mean: float
    nll_candidate_mean: float
    infinite_kl_rows: int
    top5_agreement: float
    top10_agreement: float
    kl_reverse_mean: float | None = None  # only when the rows have the reverse KL


_FIGURE_NAMES = tuple(f.name for f in fields(WindowFigures))


@dataclass
class WindowResult:
    """The per-position figures of one compared window (serialisable, so a resumed run need not
    compare it again) and its per-window summary figures."""

    window_index: int
    domain: str
    vocab_size: int
    rows: RowStats = field(repr=False)
    elapsed_seconds: float = 0.0
    bytes_compared: int = 0
    backend: str = ""

    @property
    def positions(self) -> int:
        return len(self.rows)

    @property
    def reverse(self) -> bool:
        return self.rows.kl_reverse is not None

    @property
    def kl_mean(self) -> float:
        return float(np.mean(_finite(self.rows.kl)))

    @property
    def top1_agreement(self) -> float:
        return float(np.mean(self.rows.argmax_ref == self.rows.argmax_cand))

    def figures(self) -> WindowFigures:
        """This window's figures: its entry of ``per_window_arrays`` (docs/REPORT.md)."""
        r = self.rows
        kl = _finite(r.kl)  # KL statistics are over the positions with finite KL (docs/REPORT.md)
        p_ref = np.exp(r.logp_ref_next)
        p_cand = np.exp(r.logp_cand_next)
        dp = p_cand - p_ref
        return WindowFigures(
            window_index=self.window_index,
            domain=self.domain,
            positions=self.positions,
            kl_mean=float(np.mean(kl)),
            kl_median=float(np.median(kl)),
            kl_p99=float(np.quantile(kl, 0.99)),
            kl_max=float(np.max(kl)),
            js_mean=float(np.mean(r.js)),
            top1_agreement=self.top1_agreement,
            p_reference_mean=float(np.mean(p_ref)),
            p_candidate_mean=float(np.mean(p_cand)),
            delta_p_mean=float(np.mean(dp)),
            delta_p_rms=float(np.sqrt(np.mean(dp * dp))),
            nll_reference_mean=float(-np.mean(r.logp_ref_next)),
            nll_candidate_mean=float(-np.mean(r.logp_cand_next)),
            # rows where the candidate gives probability 0 to a token the reference does not
            infinite_kl_rows=int(r.infinite_kl_rows().size),
            top5_agreement=float(np.mean(r.rank_ref_top < 5)),
            top10_agreement=float(np.mean(r.rank_ref_top < 10)),
            kl_reverse_mean=(float(np.mean(_finite(r.kl_reverse))) if r.kl_reverse is not None else None),
        )

    def to_dict(self) -> dict[str, Any]:
        arrays = {f: _encode(getattr(self.rows, f)) for f in _PER_ROW if getattr(self.rows, f) is not None}
        return {"format": "kldtui-window-result-v1", "window_index": self.window_index,
                "domain": self.domain, "vocab_size": self.vocab_size,
                "elapsed_seconds": self.elapsed_seconds, "bytes_compared": self.bytes_compared,
                "backend": self.backend, "rows": arrays}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> WindowResult:
        """Inverse of :meth:`to_dict`; ValueError/KeyError/TypeError on a damaged document."""
        if doc.get("format") != "kldtui-window-result-v1":
            raise ValueError("not a kldtui window result")
        arrays = {f: _decode(v) for f, v in doc["rows"].items() if f in _PER_ROW}
        missing = [f for f in FIELDS if f != "kl_reverse" and f not in arrays]
        if missing:
            raise ValueError(f"window result lacks {missing}")
        n = arrays["kl"].size
        if any(a.size != n for a in arrays.values()):
            raise ValueError("window result arrays differ in length")
        for f in INT_FIELDS:
            arrays[f] = arrays[f].astype(np.int64)
        rows = RowStats(**{f: arrays[f] for f in FIELDS if f != "kl_reverse"},
                        kl_reverse=arrays.get("kl_reverse"))
        return cls(window_index=int(doc["window_index"]), domain=str(doc["domain"]),
                   vocab_size=int(doc["vocab_size"]), rows=rows,
                   elapsed_seconds=float(doc.get("elapsed_seconds", 0.0)),
                   bytes_compared=int(doc.get("bytes_compared", 0)), backend=str(doc.get("backend", "")))


# ----------------------------------------------------------------------------- engine


def _cuda_present() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    if not (Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_backend(backend: str) -> str:
    """``c-kernel``, ``numpy-threads``, ``torch-cpu`` or ``torch-cuda`` for an option value.

    ``auto``: CUDA when torch sees a GPU, else the compiled C kernel (built at first use, see
    :mod:`kldtui.metrics.ckernel`), else NumPy when no C compiler could build it."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown compare backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "auto":
        if _cuda_present():
            return "torch-cuda"
        return "c-kernel" if ckernel.available() else "numpy-threads"
    if backend == "c":
        if not ckernel.available():
            raise BadInput(f"backend 'c' asked for but the C kernel could not be built "
                           f"({ckernel.why_not()}); use --backend numpy or --backend auto")
        return "c-kernel"
    if backend == "numpy":
        return "numpy-threads"
    if importlib.util.find_spec("torch") is None:
        raise BadInput(f"backend {backend!r} needs torch, which is not installed; "
                       "use --backend numpy or install kldtui[torch]")
    if backend == "torch":
        return "torch-cuda" if _cuda_present() else "torch-cpu"
    if backend == "torch-cuda" and not _cuda_present():
        raise BadInput("backend 'torch-cuda' asked for but torch sees no CUDA device; use --backend auto")
    return backend


class _RowMap:
    """Zero-copy row blocks of a logits file for the CPU kernels: ``mmap`` instead of ``pread``.

    Saves one copy of every byte (the kernels read the page cache directly); each block's pages
    are unmapped again after use (``MADV_DONTNEED``; they stay in the page cache), so the
    process's resident memory stays at about one block per thread.  Used only when the file holds
    the whole tensor (checked first: a short file would fault on access), else ``ok`` is False
    and the caller reads with ``pread``, which names a truncated file in a BadInput."""

    def __init__(self, reader: RowReader, backend: str) -> None:
        self.ok = False
        self._mm: mmap.mmap | None = None
        self.begin = reader.info.begin
        self.row_bytes = reader.cols * reader.np_dtype.itemsize
        self.cols = reader.cols
        self.dtype = reader.np_dtype
        if backend not in ("c-kernel", "numpy-threads") or os.environ.get("KLDTUI_NO_MMAP"):
            return
        try:
            with open(reader.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.begin + reader.rows * self.row_bytes:
                    return
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return
        self.ok = True

    def rows(self, start: int, stop: int) -> np.ndarray:
        assert self._mm is not None
        return np.frombuffer(self._mm, dtype=self.dtype, count=(stop - start) * self.cols,
                             offset=self.begin + start * self.row_bytes).reshape(stop - start, self.cols)

    def release(self, start: int, stop: int) -> None:
        if self._mm is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        lo = (self.begin + start * self.row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        hi = self.begin + stop * self.row_bytes
        with contextlib.suppress(OSError, ValueError):
            self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def __enter__(self) -> _RowMap:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mm is not None:
            with contextlib.suppress(BufferError):  # a block still referenced: closed when collected
                self._mm.close()
            self._mm = None


class Engine:
    """Compares windows with one backend; reuse it across windows (it keeps a thread pool)."""

    def __init__(self, vocab: int, options: CompareOptions) -> None:
        self.vocab = vocab
        self.options = options
        self.backend = resolve_backend(options.backend)
        if self.backend in ("numpy-threads", "c-kernel"):
            self.threads = max(1, options.threads or os.cpu_count() or 1)
            # c-kernel: larger blocks amortise the per-block Python work (rows come from mmap,
            # so a block costs no buffer unless a file must be read with pread)
            default_block = 64 if self.backend == "c-kernel" else 16
        elif self.backend == "torch-cuda":
            self.threads = max(1, options.threads or 2)  # one thread reads while the other computes
            default_block = 128
        else:
            self.threads = 1  # torch parallelises each operation itself
            default_block = 64
        self.row_block = max(1, options.row_block or default_block)
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kldtui-compare")

    def _torch_device(self) -> str:
        if self.backend != "torch-cuda":
            return "cpu"
        return "cuda" if self.options.cuda_device is None else f"cuda:{self.options.cuda_device}"

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.backend == "torch-cuda":
            # give the cached blocks back: a server started later checks the GPU's free memory
            import torch

            self._local = threading.local()
            torch.cuda.empty_cache()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kernel(self) -> Any:
        k = getattr(self._local, "kernel", None)
        if k is None:
            if self.backend == "c-kernel":
                k = ckernel.CRowKernel(self.vocab)
            elif self.backend == "numpy-threads":
                k = NumpyRowKernel(self.vocab)
            else:
                k = TorchBlockKernel(self.vocab, self._torch_device())
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
                _RowMap(xr, self.backend) as xm, _RowMap(yr, self.backend) as ym:
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
                            bytes_compared=2 * rows * self.vocab * 4, backend=self.backend)

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


SCORE_BACKEND = "server-scores"


def load_score_window(suite: Suite, window: WindowSpec, reference: LogitsManifest, scores: ScoresManifest,
                      options: CompareOptions) -> WindowResult:
    """Score mode: one window's figures from the server's score file, checked first: its SHA-256
    against its manifest, the window and tokens it scored, and that it scored against the
    reference file the reference manifest lists now (SHA-256)."""
    t0 = time.perf_counter()
    entry = scores.entries.get(window.index)
    if entry is None:
        raise BadInput(f"{scores.path}: {window.label} is not scored; capture and finalize it in score mode")
    path = scores.file_path(window.index)
    where = f"{path}: {window.label}"
    if entry.token_ids_json_sha256 != window.token_ids_json_sha256:
        raise BadInput(f"{where}: scored other tokens than the suite's (token hash); capture it again")
    ref_entry = reference.entry(window.index)
    if entry.reference_sha256 != ref_entry.sha256:
        raise BadInput(f"{where}: scored against a reference file with SHA-256 "
                       f"{entry.reference_sha256[:12]}..., "
                       f"{reference.path} lists {ref_entry.sha256[:12]}...; capture the window again "
                       "in score mode against this reference")
    try:
        digest = sha256_file(path)
    except OSError as exc:
        raise BadInput(f"{where}: cannot be read ({exc.strerror or exc}); finalize it again") from None
    if digest != entry.sha256:
        raise BadInput(f"{where}: SHA-256 {digest[:12]}... differs from the manifest's "
                       f"{entry.sha256[:12]}...; "
                       "the file is damaged, finalize it again")
    records, meta = read_records(path, RECORD_DTYPE)
    if (meta.get("window_index") != str(window.index) or len(records) != window.scored_positions
            or meta.get("token_ids_json_sha256") != window.token_ids_json_sha256):
        raise BadInput(f"{where}: the file holds window {meta.get('window_index')} with {len(records)} rows, "
                       f"expected {window.index} with {window.scored_positions}; finalize it again")
    rows = from_records(records, reverse=options.reverse)
    bad = rows.nonfinite_rows()
    if bad.size:
        raise BadInput(f"{where}: non-finite figures at row {int(bad[0])}; capture the window again")
    return WindowResult(window.index, window.domain, reference.vocab_size, rows,
                        elapsed_seconds=time.perf_counter() - t0, bytes_compared=entry.size_bytes,
                        backend=SCORE_BACKEND)


def prepare_scores(suite: Suite, reference_dir: str | os.PathLike[str], candidate_dir: str | os.PathLike[str],
                   windows: Sequence[WindowSpec]) -> tuple[LogitsManifest, ScoresManifest]:
    """Score mode's validation before any window: suite hash, the reference manifest against the
    suite, the scores manifest's suite and vocabulary."""
    suite.check_suite_hash()
    ref = load_logits_manifest(reference_dir)
    check_manifest_matches_suite(ref, suite, windows)
    scores = load_scores_manifest(candidate_dir)
    if scores.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        raise BadInput(f"{scores.path}: made from another suite than {suite.path}")
    if scores.vocab_size != ref.vocab_size:
        raise BadInput(f"{scores.path}: vocabulary {scores.vocab_size} differs from the reference's "
                       f"{ref.vocab_size} ({ref.path}); score against the same tokenizer's reference")
    if scores.record_dtype != dtype_text(RECORD_DTYPE):
        raise BadInput(f"{scores.path}: records of another layout than this kldtui reads; capture again")
    for w in windows:
        suite.load_tokens(w, check_hash=True)
    return ref, scores


def compare_window(suite: Suite | str | os.PathLike[str], window: WindowSpec | int,
                   reference_dir: str | os.PathLike[str], candidate_dir: str | os.PathLike[str],
                   options: CompareOptions | None = None, cancel: Cancel | None = None,
                   emit: EventSink = null_sink, engine: Engine | None = None) -> WindowResult:
    """Validate and compare ONE window (e.g. as soon as it is finalized)."""
    options = options or CompareOptions()
    s = suite if isinstance(suite, Suite) else load_suite(suite)
    w = s.window(window) if isinstance(window, int) else window
    inputs = prepare(s, reference_dir, candidate_dir, options, emit, cancel, windows=[w])
    if engine is not None:
        return engine.compare_window(inputs, w, emit, cancel)
    with Engine(inputs.vocab_size, options) as eng:
        return eng.compare_window(inputs, w, emit, cancel)


# ----------------------------------------------------------------------------- report


def _finite(a: np.ndarray) -> np.ndarray:
    """``a`` without its infinite entries (the same array when there are none, or when every
    entry is infinite: then the statistics are infinite, null in the JSON)."""
    ok = np.isfinite(a)
    return a if ok.all() or not ok.any() else a[ok]


def _concat(results: Sequence[WindowResult], name: str) -> np.ndarray:
    return np.concatenate([getattr(r.rows, name) for r in results])


def build_report(results: Sequence[WindowResult], *, suite: Suite | None = None,
                 reference_dir: str | os.PathLike[str] = "", candidate_dir: str | os.PathLike[str] = "",
                 options: CompareOptions | None = None, window_range: Sequence[int] | None = None,
                 reference_manifest_sha256: str | None = None, suite_token_hash_sha256: str | None = None,
                 verified: Verified | None = None, elapsed_seconds: float | None = None,
                 backend: str | None = None, threads: int | None = None,
                 command: str | None = None) -> ComparisonReport:
    """The report (docs/REPORT.md) from window results, in any order."""
    options = options or CompareOptions()
    if not results:
        raise BadInput(f"{candidate_dir}: no compared windows to report")
    res = sorted(results, key=lambda r: r.window_index)
    idx = [r.window_index for r in res]
    if len(set(idx)) != len(idx):
        raise ValueError("a window appears twice in the results")
    reverse = all(r.reverse for r in res)
    samples, seed = options.bootstrap_samples, options.bootstrap_seed
    # infinite KL rows (masked tokens) make spreads NaN and sums inf: null in the JSON, not a warning
    with np.errstate(over="ignore", invalid="ignore"):
        figs = [r.figures() for r in res]

    if suite is not None and suite_token_hash_sha256 is None:
        suite_token_hash_sha256 = suite.suite_token_hash_sha256
    if reference_manifest_sha256 is None and reference_dir:
        with contextlib.suppress(OSError):
            reference_manifest_sha256 = hashlib.sha256(
                logits_manifest_path(reference_dir).read_bytes()).hexdigest()
    if window_range is None:
        stop = options.stop_window if options.stop_window is not None else idx[-1] + 1
        window_range = [min(options.start_window, idx[0]), max(stop, idx[-1] + 1)]
    elapsed = float(elapsed_seconds if elapsed_seconds is not None
                    else sum(r.elapsed_seconds for r in res))
    nbytes = int(sum(r.bytes_compared for r in res))
    positions = sum(r.positions for r in res)
    backends = sorted({r.backend for r in res})
    provenance = Provenance(
        kldtui_version=__version__,
        backend=backend or "+".join(backends),
        elapsed_seconds=elapsed,
        bytes_compared=nbytes,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        verified=verified or Verified(token_hashes=True, suite_hash=True, logits_sha256="skipped"),
        threads=threads,
        throughput_gb_per_s=nbytes / elapsed / 1e9 if elapsed > 0 else None,
        positions_per_second=positions / elapsed if elapsed > 0 else None,
        command=command,
    )
    with_reverse = reverse and figs[0].kl_reverse_mean is not None
    columns: dict[str, Any] = {k: [getattr(f, k) for f in figs] for k in _FIGURE_NAMES
                               if k != "kl_reverse_mean" or with_reverse}
    with np.errstate(over="ignore", invalid="ignore"):
        return ComparisonReport(
            report_format=REPORT_FORMAT,
            direction=DIRECTION,
            positions=positions,
            windows=len(res),
            reference_dir=str(reference_dir),
            candidate_dir=str(candidate_dir),
            window_range=(int(window_range[0]), int(window_range[1])),
            suite_token_hash_sha256=suite_token_hash_sha256,
            reference_manifest_sha256=reference_manifest_sha256,
            vocab_size=int(res[0].vocab_size),
            per_window=[_window_entry(r, f, reverse) for r, f in zip(res, figs, strict=True)],
            per_window_arrays=WindowTable(**columns),
            domains={d: Bootstrap.of(st.window_cluster_bootstrap(
                [f.kl_mean for f in figs if f.domain == d], samples, seed))
                for d in dict.fromkeys(r.domain for r in res)},
            provenance=provenance,
            **_overall_figures(res, figs, reverse, samples, seed),
        )


def _or_none(value: float) -> float | None:
    """A figure that can overflow (the perplexity of a broken candidate): None when not finite."""
    return value if math.isfinite(value) else None


def _window_entry(r: WindowResult, figures: WindowFigures, reverse: bool) -> WindowEntry:
    """One ``per_window`` entry: the original's fields, then this window's figures."""
    return WindowEntry(
        window_index=r.window_index, domain=r.domain, positions=r.positions,
        kl_reference_to_candidate=Stats.of(st.stats_object(_finite(r.rows.kl))),
        js=Stats.of(st.stats_object(r.rows.js)),
        top1_agreement=figures.top1_agreement,
        kl_candidate_to_reference=(Stats.of(st.stats_object(_finite(r.rows.kl_reverse)))
                                   if r.rows.kl_reverse is not None and reverse else None),
        **{k: getattr(figures, k) for k in WINDOW_FIGURES})


def _overall_figures(res: Sequence[WindowResult], figs: list[WindowFigures], reverse: bool, samples: int,
                     seed: int) -> dict[str, Any]:
    """The report's figures over all positions (and over window means, for the bootstraps)."""
    kl = _concat(res, "kl")
    top1 = _concat(res, "argmax_ref") == _concat(res, "argmax_cand")
    rank = _concat(res, "rank_ref_top")
    lp_ref = _concat(res, "logp_ref_next")
    lp_cand = _concat(res, "logp_cand_next")
    dp = np.exp(lp_cand) - np.exp(lp_ref)
    nll_r = np.array([f.nll_reference_mean for f in figs])
    nll_c = np.array([f.nll_candidate_mean for f in figs])
    fin = np.isfinite(kl)  # infinite KL (masked tokens) is counted in "infinite_kl", not averaged
    if not fin.any():
        fin[:] = True
    out: dict[str, Any] = {
        "kl_reference_to_candidate": Stats.of(st.stats_object(kl[fin])),
        "js": Stats.of(st.stats_object(_concat(res, "js"))),
        "top1_agreement": float(np.mean(top1)),
        "kl_window_cluster_bootstrap": Bootstrap.of(st.window_cluster_bootstrap(
            np.array([f.kl_mean for f in figs]), samples, seed)),
        "js_window_cluster_bootstrap": Bootstrap.of(st.window_cluster_bootstrap(
            np.array([f.js_mean for f in figs]), samples, seed)),
        "topk_agreement": TopK(TOPK_DEFINITION, list(TOPK), {str(k): float(np.mean(rank < k)) for k in TOPK}),
        "next_token": NextToken(
            p_reference=Stats.of(st.stats_object(np.exp(lp_ref))),
            p_candidate=Stats.of(st.stats_object(np.exp(lp_cand))),
            delta_p=DeltaP(**st.stats_object(dp), rms=float(np.sqrt(np.mean(dp * dp)))),
            perplexity_reference=_or_none(float(np.exp(-np.mean(lp_ref)))),
            perplexity_candidate=_or_none(float(np.exp(-np.mean(lp_cand)))),
            perplexity_ratio=_or_none(float(np.exp(np.mean(lp_ref) - np.mean(lp_cand)))),
            perplexity_ratio_window_cluster_bootstrap=Interval.of(
                {k: _or_none(v) if isinstance(v, float) else v
                 for k, v in st.ratio_bootstrap(nll_c, np.exp, nll_r, samples, seed).items()}),
            # log space: finite wherever the perplexities overflow (+inf when a side gives the
            # actual next token probability 0: null in JSON)
            log_perplexity_reference=float(-np.mean(lp_ref)),
            log_perplexity_candidate=float(-np.mean(lp_cand)),
            log_perplexity_ratio=float(np.mean(lp_ref) - np.mean(lp_cand)),
        ),
        "infinite_kl": InfiniteKL(
            definition=INFINITE_KL_DEFINITION,
            rows=int(sum(f.infinite_kl_rows for f in figs)),
            windows=[int(f.window_index) for f in figs if f.infinite_kl_rows],
            reverse_rows=int(sum(int(np.isposinf(r.rows.kl_reverse).sum()) for r in res
                                 if r.rows.kl_reverse is not None)) if reverse else None),
        "kl_by_reference_confidence": [ConfidenceBucket(**b) for b in  # type: ignore[arg-type]
                                       st.confidence_buckets(_concat(res, "ref_top_prob")[fin], kl[fin],
                                                             top1[fin])],
        "kl_by_position": [PositionBucket(**b) for b in  # type: ignore[arg-type]
                           st.position_buckets([_finite(r.rows.kl) for r in res])],
    }
    if reverse:
        out["kl_candidate_to_reference"] = Stats.of(st.stats_object(_finite(_concat(res, "kl_reverse"))))
        out["kl_reverse_window_cluster_bootstrap"] = Bootstrap.of(st.window_cluster_bootstrap(
            [f.kl_reverse_mean for f in figs if f.kl_reverse_mean is not None], samples, seed))
    return out


def _g(value: Any) -> str:
    """A figure for a one-line summary; null (infinite or undefined) shown as 'inf'."""
    return f"{value:.6g}" if isinstance(value, (int, float)) else "inf"


COMPARE_RESULT_VERSION = 1  # of the per-window cache files (compare/window-NNN.json)


class Comparer:
    """Compares the windows of one workspace and builds their report.

    Window results are kept in the workspace's per-window cache (``compare/window-NNN.json``)
    when it has one, keyed by both files' SHA-256 and the options that change the numbers: a
    rerun reuses them. :meth:`window` compares one window as soon as it is finalized (the
    pipeline); :meth:`windows` validates every window before the first row (``kldtui compare``).
    """

    def __init__(self, workspace: Workspace, suite: Suite, options: CompareOptions, *,
                 emit: EventSink = null_sink, cancel: Cancel | None = None) -> None:
        self.workspace = workspace
        self.suite = suite
        self.options = options
        self.emit = emit
        self.cancel = cancel
        self.computed = 0  # windows compared (not taken from the cache) by this comparer
        self.engine_info: tuple[str, int | None] | None = None  # (backend, threads) of windows()
        self.verified: Verified | None = None
        self.reference_manifest_sha256: str | None = None

    # -- the per-window cache -------------------------------------------------------------------
    def _key(self, window: WindowSpec) -> dict[str, Any]:
        if self.options.mode == "score":
            raise ValueError("score mode keeps no compare cache")
        ref = load_logits_manifest(self.workspace.reference).entry(window.index)
        cand = load_logits_manifest(self.workspace.candidate).entry(window.index)
        return {"version": COMPARE_RESULT_VERSION, "reference_sha256": ref.sha256,
                "candidate_sha256": cand.sha256, "reverse": self.options.reverse}

    def cached(self, window: WindowSpec) -> WindowResult | None:
        path = self.workspace.compare_cache(window.index)
        if path is None or not path.exists() or self.options.mode == "score":
            return None
        with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
            doc = json.loads(path.read_text())
            if doc.get("key") == self._key(window):
                return WindowResult.from_dict(doc["result"])
        return None

    def _store(self, window: WindowSpec, result: WindowResult) -> None:
        path = self.workspace.compare_cache(window.index)
        if path is not None and self.options.mode != "score":
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {"key": self._key(window), "result": result.to_dict()})

    # -- comparing ------------------------------------------------------------------------------
    def window(self, window: WindowSpec, *, announce: bool = True,
               options: CompareOptions | None = None) -> WindowResult:
        """One window: from the cache, else validated and compared now (``options`` may differ
        per window: the pipeline picks the backend by what else runs)."""
        result = self.cached(window)
        if result is None and (options or self.options).mode == "score":
            ws = self.workspace
            ref, scores = prepare_scores(self.suite, ws.reference, ws.candidate, [window])
            result = load_score_window(self.suite, window, ref, scores, options or self.options)
            self.computed += 1
        if result is None:
            self.emit(WindowState("compare", window.index, "comparing", domain=window.domain))
            result = compare_window(self.suite, window, self.workspace.reference, self.workspace.candidate,
                                    options or self.options, self.cancel, emit=self.emit)
            self.computed += 1
            self._store(window, result)
        if announce:
            self._announce(window, result)
        return result

    def windows(self, windows: Sequence[WindowSpec] | None = None) -> list[WindowResult]:
        """Validate every window first (:func:`prepare`), then compare them with one engine."""
        ws = self.workspace
        if self.options.mode == "score":
            return self._score_windows(windows)
        inputs = prepare(self.suite, ws.reference, ws.candidate, self.options, self.emit, self.cancel,
                         windows=windows)
        self.verified = inputs.verified
        self.reference_manifest_sha256 = inputs.reference_manifest_sha256
        results: list[WindowResult] = []
        with Engine(inputs.vocab_size, self.options) as engine:
            for n, w in enumerate(inputs.windows):
                if self.cancel is not None:
                    self.cancel.check()
                r = self.cached(w)
                if r is None:
                    self.emit(WindowState("compare", w.index, "comparing", domain=w.domain))
                    r = engine.compare_window(inputs, w, self.emit, self.cancel)
                    self.computed += 1
                    self._store(w, r)
                results.append(r)
                self._announce(w, r)
                self.emit(Progress("compare", task="windows", done=n + 1, total=len(inputs.windows),
                                   unit="windows"))
            self.engine_info = (engine.backend, engine.threads)
        return results

    def _score_windows(self, windows: Sequence[WindowSpec] | None) -> list[WindowResult]:
        ws, options = self.workspace, self.options
        selected = list(windows) if windows is not None else self.suite.select(options.start_window,
                                                                                 options.stop_window)
        ref, scores = prepare_scores(self.suite, ws.reference, ws.candidate, selected)
        self.verified = Verified(token_hashes=True, suite_hash=True, logits_sha256="checked")
        self.reference_manifest_sha256 = hashlib.sha256(ref.path.read_bytes()).hexdigest()
        results = []
        for n, w in enumerate(selected):
            if self.cancel is not None:
                self.cancel.check()
            r = load_score_window(self.suite, w, ref, scores, options)
            self.computed += 1
            results.append(r)
            self._announce(w, r)
            self.emit(Progress("compare", task="windows", done=n + 1, total=len(selected), unit="windows"))
        self.engine_info = (SCORE_BACKEND, None)
        return results

    def _announce(self, window: WindowSpec, r: WindowResult) -> None:
        self.emit(WindowState("compare", window.index, "compared", domain=window.domain,
                              figures={"kl": r.kl_mean, "js": float(np.mean(r.rows.js)),
                                       "top1": r.top1_agreement, "rows": r.positions}))

    # -- the report -----------------------------------------------------------------------------
    def report(self, results: Sequence[WindowResult], *, command: str | None = None,
               elapsed_seconds: float | None = None) -> ComparisonReport:
        """The report of ``results``: the whole window range when every window of it is there,
        else the compared span. Backend and threads are named when this comparer computed every
        window itself with one engine (cached results may come from another)."""
        if not results:
            raise BadInput(f"{self.workspace.candidate}: no finalized windows to compare; run capture "
                           "and finalize first")
        options = self.options
        stop = options.stop_window if options.stop_window is not None else self.suite.window_count
        compared = sorted(r.window_index for r in results)
        complete = compared == list(range(options.start_window, stop))
        ref_sha = self.reference_manifest_sha256 or hashlib.sha256(
            self.workspace.reference_manifest.read_bytes()).hexdigest()
        own = self.engine_info is not None and self.computed == len(results)
        backend, threads = self.engine_info if own and self.engine_info else (None, None)
        return build_report(
            results, suite=self.suite, reference_dir=self.workspace.reference,
            candidate_dir=self.workspace.candidate, options=options,
            window_range=(options.start_window, stop) if complete else (compared[0], compared[-1] + 1),
            reference_manifest_sha256=ref_sha, verified=self.verified, elapsed_seconds=elapsed_seconds,
            backend=backend, threads=threads, command=command)

    def publish(self, report: ComparisonReport) -> None:
        """Write the report to the workspace's report path (when it has one) and say so."""
        from kldtui.formats.report import headline, summary_text, write_report

        path = self.workspace.report_path
        if path is not None:
            write_report(path, report)
            self.emit(ResultReady("compare", path=str(path), report=report))
        summary = summary_text(report).strip().splitlines()
        self.emit(StageFinished("compare", summary=summary[0] if summary else "",
                                figures=headline(report)))


def run_compare(workspace: Workspace, emit: EventSink = null_sink, cancel: Cancel | None = None, *,
                options: CompareOptions | None = None, suite: Suite | str | os.PathLike[str] | None = None,
                windows: Sequence[WindowSpec] | None = None, command: str | None = None) -> ComparisonReport:
    """The compare stage: validate everything, compare ``windows`` (default: the options' range;
    cached results are reused), write ``workspace.report`` (when set); return the report.
    ``suite`` is the loaded suite or its manifest's path (default: the workspace's suite folder)."""
    options = options or CompareOptions()
    if (options.mode == "logits" and not workspace.candidate_manifest.exists()
            and workspace.scores_manifest.exists()):
        options = dataclasses.replace(options, mode="score")  # a score-mode folder
    t0 = time.perf_counter()
    emit(StageStarted("compare", detail=f"{workspace.reference} vs {workspace.candidate}"))
    with failure_reported(emit, "compare"):
        s = suite if isinstance(suite, Suite) else load_suite(workspace.suite_dir if suite is None else suite)
        comparer = Comparer(workspace, s, options, emit=emit, cancel=cancel)
        results = comparer.windows(windows)
        report = comparer.report(results, command=command, elapsed_seconds=time.perf_counter() - t0)
        comparer.publish(report)
    return report


def compare(suite_manifest: str | os.PathLike[str] | Suite, reference_dir: str | os.PathLike[str],
            candidate_dir: str | os.PathLike[str], options: CompareOptions | None = None,
            emit: EventSink = null_sink, cancel: Cancel | None = None,
            command: str | None = None) -> ComparisonReport:
    """Validate everything, compare every selected window, and return the report (nothing written)."""
    where = suite_manifest.root if isinstance(suite_manifest, Suite) else Path(suite_manifest)
    workspace = Workspace.for_compare(where, reference_dir, candidate_dir)
    return run_compare(workspace, emit, cancel, options=options, suite=suite_manifest, command=command)


__all__ = ["CompareOptions", "CompareInputs", "Comparer", "Engine", "WindowResult", "build_report",
           "compare", "compare_window", "prepare", "resolve_backend", "run_compare"]

