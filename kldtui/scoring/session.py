"""The scoring session: one per server process and capture folder, scoring each prefill chunk of
kldtui's capture requests against the reference (docs/SCORE_MODE.md).

For each chunk it reads the matching rows of the window's reference file, hands them with the
candidate's rows to ``score_rows`` (the arithmetic is the caller's:
:func:`kldtui.metrics.score.score_rows` in the vLLM hook and the embedded server) and publishes
the records through ``write``. Which window a request scores comes from the capture client's
request id (:func:`kldtui.formats.chunks.window_of_request`). The reference file is checked
(:func:`kldtui.formats.identity.check_logits_file`: size, shape, header ``window_index`` and token
hash against the reference manifest and the suite) before a row of it is used. A failure fails
that request only: ``fail`` leaves the error marker with the reason; the server goes on. A block
whose figures are not valid fails its request with the line compare would give
(:mod:`kldtui.formats.finite`): a NaN, +Inf or a row without a finite logit in the reference file's
rows (named) or in the candidate's logits.

A hidden-state reference (a folder whose ``manifest.json`` lists final hidden states: the
published ``reference-hidden/``, or kldtui's hidden mode) is replayed: each chunk's reference rows
are the context's stored BF16 states times the LM head (:mod:`kldtui.metrics.replay`), computed
where the candidate's logits are (:class:`HeadReplays`): on their GPU with torch, the head
streamed from pinned host memory a vocabulary chunk at a time or resident (``KLDTUI_SCORE_HEAD``),
or on the host with NumPy's SGEMM. The server then reads ~30 MB a context instead of 1.34 GB.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.formats import finite
from kldtui.formats.chunks import window_of_request
from kldtui.formats.fidelity import holds_hidden_states
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import Suite, WindowSpec, load_logits_manifest, load_suite, token_ids_hash

ScoreRows = Callable[[np.ndarray, Any, np.ndarray], np.ndarray]
"""``score_rows(reference_rows, candidate_rows, next_tokens) -> records``: reference rows are
float32 host rows, candidate rows the logits as the server has them (device tensor or array)."""

ScoreWrite = Callable[[str, int, np.ndarray, dict[str, str]], None]
"""``write(request_id, row_start, records, metadata)``: publish one score chunk."""


def precise_rows(records: np.ndarray) -> int:
    """How many rows of a chunk's records took the precise path (KL or JS below
    :data:`kldtui.metrics.kernels.PRECISE_BELOW`)."""
    from kldtui.metrics.kernels import PRECISE_BELOW

    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero((records["kl"] < PRECISE_BELOW) | (records["js"] < PRECISE_BELOW)))


REPLAY_ROWS = 256  # rows of a hidden reference replayed at once (their logits: 160 MiB at 163,840)


class ScoreFailed(Exception):
    """This request cannot be scored (the message says why); the server goes on."""


@dataclass
class _Request:
    window: WindowSpec
    tokens: np.ndarray  # next tokens of rows 0..N-2
    reader: RowReader  # the reference's rows: F32 logits, or BF16 hidden states (``hidden``)
    metadata: dict[str, str]
    prefetch: tuple[int, int, Future[np.ndarray]] | None = None
    rows_done: int = 0
    hidden: bool = False  # the reader gives hidden states, replayed with the session's head


class HeadReplays:
    """A hidden-state reference's LM head, replayed where the candidate's logits are: one replay
    per device, made at first use. Logits on a GPU (or any torch tensor when
    ``KLDTUI_SCORE_KERNEL=torch``): :class:`kldtui.metrics.replay.TorchReplay` on their device,
    the head streamed from pinned host memory (``streamed``: two vocabulary chunks of the head on
    the device) or copied there once (``resident``); host rows: NumPy's SGEMM
    (:class:`kldtui.metrics.replay.NumpyReplay`) into float32 host rows."""

    def __init__(self, head: Any, output: str, placement: str, use_torch_on_cpu: bool) -> None:
        from kldtui.formats import fidelity as fid

        self.head = head  # kldtui.formats.fidelity.LmHead
        self.output = output
        self.placement = placement
        self.use_torch_on_cpu = use_torch_on_cpu
        self._bits = fid.head_bits(head)
        # the head file's SHA-256 (the session hashes a head that has no manifest)
        self.file_sha256 = head.file_sha256 or ""
        self._replays: dict[str, Any] = {}
        self._host_head: Any = None
        self._lock = threading.Lock()

    @property
    def vocab(self) -> int:
        return int(self.head.vocab)

    def _replay(self, like: Any) -> Any:
        device: Any = getattr(like, "device", None) if hasattr(like, "detach") else None  # torch's
        on_torch = device is not None and (device.type != "cpu" or self.use_torch_on_cpu)
        key = str(device) if on_torch else "numpy"
        with self._lock:
            replay = self._replays.get(key)
            if replay is not None:
                return replay
            if not on_torch:
                from kldtui.metrics.replay import NumpyReplay

                replay = NumpyReplay(self._bits, output=self.output)
            else:
                from kldtui.metrics.replay import TorchReplay, torch_bf16

                if self._host_head is None:
                    host = torch_bf16(np.array(self._bits))  # a private copy: the map stays read-only
                    stream = self.placement == "streamed" and device.type != "cpu"
                    self._host_head = host.pin_memory() if stream and device.type == "cuda" else host
                stream = self.placement == "streamed" and device.type != "cpu"
                replay = TorchReplay(self._host_head, device, output=self.output, stream=stream)
            self._replays[key] = replay
            return replay

    def logits(self, hidden_rows: np.ndarray, like: Any) -> Any:
        """Reference logits of BF16 ``hidden_rows`` (``uint16``), float32, where ``like`` (the
        candidate's logits) is: a torch tensor on its device, or a host array."""
        replay = self._replay(like)
        if hasattr(replay, "torch"):
            from kldtui.metrics.replay import torch_bf16

            return replay.logits(torch_bf16(hidden_rows))
        return replay.logits(hidden_rows)

    def describe(self) -> str:
        return (f"LM head {self.head.path} [{self.head.vocab}, {self.head.hidden}] replayed with "
                f"{self.output} output; on a GPU {self.placement}")


class ScoreSession:
    """Scores prefill chunks against the reference, request by request (see the module doc).

    ``chunk`` is called for each chunk of prompt rows; the reference rows of the request's next
    chunk (same size as this one) are read beforehand on a helper thread, so the caller waits for
    the disk only on a request's first chunk. Memory: two row blocks of the reference on the
    host; on the device, whatever ``score_rows`` needs for ``block_rows`` rows.
    ``write(request_id, row_start, records, metadata)`` publishes a chunk (the hook hands it to its
    background writer); ``fail(request_id, message)`` leaves the error marker.
    """

    # Windows scored at once whose state is kept. Only live windows count: a request that failed
    # (another client's, one that names no window) is remembered apart (FAILED_KEPT ids), so it
    # never evicts a live window. Past MAX_OPEN live windows the least recently used one is
    # dropped, and its next chunk fails saying so.
    MAX_OPEN = 16
    FAILED_KEPT = 256

    def __init__(self, suite_dir: str | Path, reference_dir: str | Path | None, score_rows: ScoreRows,
                 write: ScoreWrite, fail: Callable[[str, str], None], *,
                 block_rows: int | None = None, lm_head: str | Path | None = None,
                 head_placement: str = "streamed", torch_on_cpu: bool = False) -> None:
        self.suite_dir = Path(suite_dir)
        self.reference_dir = Path(reference_dir) if reference_dir else _default_reference(self.suite_dir)
        self.lm_head = Path(lm_head) if lm_head else None  # a hidden reference's head (None: found)
        self.head_placement = head_placement
        self.torch_on_cpu = torch_on_cpu
        self._heads: HeadReplays | None = None
        self.score_rows = score_rows
        self.write = write
        self.fail = fail
        # rows at once on the device (default: KLDTUI_SCORE_ROWS's)
        self.block_rows = max(1, settings.SCORE_ROWS.default() if block_rows is None else block_rows)
        self._requests: OrderedDict[str, _Request] = OrderedDict()  # live windows, least recent first
        self._failed: OrderedDict[str, str] = OrderedDict()  # failed or dropped request -> why
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kldtui-score-prefetch")

    # -- per request ------------------------------------------------------------------------------
    def _open(self, request_id: str, vocab_size: int, prompt: Sequence[int] | None) -> _Request:
        index = window_of_request(request_id)
        if index is None:
            raise ScoreFailed(f"request {request_id!r} names no window (kldtui-RUN-wNNN-XXXXXXXX); "
                              "score mode scores only kldtui's capture requests")
        try:
            # read again for every request: a reference finalized while the server runs counts
            suite = load_suite(self.suite_dir)
            window = suite.window(index)
            if (prompt is not None
                    and token_ids_hash([int(t) for t in prompt]) != window.token_ids_json_sha256):
                raise ScoreFailed(f"request {request_id!r} names {window.label} but its prompt is not "
                                  "that window's tokens")
            if holds_hidden_states(self.reference_dir):
                return self._open_hidden(suite, window, vocab_size)
            manifest = load_logits_manifest(self.reference_dir)
            if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
                raise ScoreFailed(f"{manifest.path}: the reference was made from another suite than "
                                  f"{suite.path}")
            entry = manifest.entry(index)
            if entry.token_ids_json_sha256 != window.token_ids_json_sha256:
                raise ScoreFailed(f"{manifest.path}: {window.label}: the reference's token hash differs "
                                  "from the suite's")
            from kldtui.formats.identity import check_logits_file

            identity = check_logits_file(manifest, index, suite=suite, side="reference")
            if not identity.ok:
                raise ScoreFailed(identity.problems[0])
            if entry.dtype != "F32":
                raise ScoreFailed(f"{manifest.path}: {window.label}: reference dtype {entry.dtype}, "
                                  "score mode reads F32")
            if vocab_size != manifest.vocab_size:
                raise ScoreFailed(f"{manifest.path}: {window.label}: the server's vocabulary is "
                                  f"{vocab_size}, the reference's {manifest.vocab_size}")
            ids = suite.load_tokens(window, check_hash=True)
            reader = RowReader(identity.path)
        except BadInput as exc:
            raise ScoreFailed(str(exc)) from None
        except OSError as exc:
            raise ScoreFailed(f"{self.reference_dir}: window {index:03d}: the reference cannot be read "
                              f"({exc})") from None
        meta = {"window_index": str(index), "token_ids_json_sha256": window.token_ids_json_sha256,
                "reference_sha256": entry.sha256, "vocab_size": str(vocab_size),
                "context_length": str(suite.context_length)}
        return _Request(window, np.asarray(ids[1:], dtype=np.int64), reader, meta)

    def _open_hidden(self, suite: Suite, window: WindowSpec, vocab_size: int) -> _Request:
        """A request against a hidden-state reference: the context's file checked against its
        record and the suite (size, header, key, dtype, shape, metadata), the head's vocabulary
        against the server's."""
        from kldtui.formats import fidelity as fid

        manifest = fid.load_tensor_manifest(self.reference_dir)
        if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
            raise ScoreFailed(f"{manifest.path}: the reference was made from another suite than {suite.path}")
        problems, _ = fid.check_tensor_file(manifest, window.index, suite, side="reference")
        if problems:
            raise ScoreFailed(problems[0])
        heads = self.head_replays(manifest)
        if vocab_size != heads.vocab:
            raise ScoreFailed(f"{heads.head.path}: the LM head has {heads.vocab} rows, the server's "
                              f"vocabulary is {vocab_size}; replay with the head of the reference's model")
        if manifest.width != heads.head.hidden:
            raise ScoreFailed(f"{manifest.path}: hidden states {manifest.width} wide, the LM head "
                              f"{heads.head.path} is {heads.head.hidden} wide; they are not of one model")
        entry = manifest.entry(window.index)
        ids = suite.load_tokens(window, check_hash=True)
        reader = RowReader(manifest.file_path(window.index), entry.key, "BF16")
        meta = {"window_index": str(window.index), "token_ids_json_sha256": window.token_ids_json_sha256,
                "reference_sha256": entry.sha256, "vocab_size": str(vocab_size),
                "context_length": str(suite.context_length), "reference_kind": "hidden",
                "lm_head_file_sha256": heads.file_sha256, "replay_output": heads.output}
        return _Request(window, np.asarray(ids[1:], dtype=np.int64), reader, meta, hidden=True)

    def head_replays(self, manifest: Any) -> HeadReplays:
        """The hidden reference's head (``KLDTUI_SCORE_LM_HEAD``, else found in the reference, beside it
        or in the suite), loaded and checked once for the session."""
        from kldtui.formats import fidelity as fid

        with self._lock:
            if self._heads is not None:
                return self._heads
        where = self.lm_head or fid.reference_head_dir(self.reference_dir, self.suite_dir)
        if where is None:
            raise ScoreFailed(f"{manifest.path}: holds hidden states and no LM head was found in it, beside "
                              f"it or in {self.suite_dir}; export it (kldtui export-head) or set "
                              f"{settings.SCORE_LM_HEAD.name}")
        head = fid.load_lm_head(where)
        heads = HeadReplays(head, fid.replay_output_of(manifest), self.head_placement, self.torch_on_cpu)
        if head.file_sha256 is None:  # a head without its manifest: hash the file once
            from kldtui.formats.suite import sha256_file

            heads.file_sha256 = sha256_file(head.path)
        else:
            heads.file_sha256 = head.file_sha256
        with self._lock:
            if self._heads is None:
                self._heads = heads
            return self._heads

    def _state(self, request_id: str, vocab_size: int, prompt: Sequence[int] | None) -> _Request:
        with self._lock:
            req = self._requests.get(request_id)
            if req is not None:
                self._requests.move_to_end(request_id)
                return req
        req = self._open(request_id, vocab_size, prompt)
        dropped: list[tuple[str, _Request]] = []
        with self._lock:
            self._requests[request_id] = req
            while len(self._requests) > self.MAX_OPEN:
                old_id, old = self._requests.popitem(last=False)
                self._remember(old_id, f"its state was dropped: more than {self.MAX_OPEN} windows "
                                       "were being scored at once by this server")
                dropped.append((old_id, old))
        for _old_id, old in dropped:
            self._close(old)
        return req

    def _remember(self, request_id: str, why: str) -> None:
        """A request that failed or was dropped (call with the lock held): later chunks fail quietly."""
        self._failed[request_id] = why
        self._failed.move_to_end(request_id)
        while len(self._failed) > self.FAILED_KEPT:
            self._failed.popitem(last=False)

    def _close(self, req: _Request) -> None:
        if req.prefetch is not None:
            with contextlib.suppress(Exception):
                req.prefetch[2].result()
            req.prefetch = None
        req.reader.close()

    def _finish(self, request_id: str) -> None:
        with self._lock:
            req = self._requests.pop(request_id, None)
        if req is not None:
            self._close(req)

    def _reference_rows(self, req: _Request, start: int, stop: int) -> np.ndarray:
        pre = req.prefetch
        req.prefetch = None
        rows: np.ndarray | None = None
        if pre is not None:
            got = pre[2].result()  # a read error surfaces here
            if (pre[0], pre[1]) == (start, stop):
                rows = got
        if rows is None:
            rows = req.reader.pread(start, stop)
        nxt = min(stop + (stop - start), req.window.scored_positions)  # reference rows (scored)
        if nxt > stop:
            req.prefetch = (stop, nxt, self._pool.submit(req.reader.pread, stop, nxt))
        return rows

    def chunk(self, request_id: str, row_start: int, logits: Any, vocab_size: int,
              prompt: Sequence[int] | None = None) -> bool:
        """Score prompt rows ``row_start ..`` (``logits[:, :vocab_size]``) of a request and publish
        their records; never raises. False when the request failed (now or earlier)."""
        with self._lock:
            why = self._failed.get(request_id)
        if why is not None:
            if why.startswith("its state was dropped"):
                with self._lock:
                    self._failed[request_id] = "dropped (reported)"
                self.fail(request_id, f"kldtui score: rows from {row_start} of request {request_id!r} "
                                      f"not scored: {why}")
            return False
        try:
            req = self._state(request_id, vocab_size, prompt)
            rows = int(logits.shape[0])
            stop = row_start + rows
            if row_start != req.rows_done or stop > req.window.captured_rows:
                raise ScoreFailed(f"rows {row_start}..{stop} of {req.window.label} arrived after rows "
                                  f"0..{req.rows_done} (prefix caching must be off); not scored")
            # positions before the window's first scored one are computed, not scored; records
            # are written by scored row (position - scored_row_start)
            first = req.window.scored_row_start
            skip = min(rows, max(0, first - row_start))
            if skip < rows:
                lo_pos = row_start + skip
                x = self._reference_rows(req, lo_pos - first, stop - first)
                if req.hidden:
                    bad = finite.nonfinite_state_rows(x)
                    if bad.size:  # replayed, they would give NaN logits blamed on the replay
                        raise ScoreFailed(finite.states_problem(req.reader.path, req.window.label,
                                                                "reference", lo_pos - first + bad))
                parts = []
                # a hidden reference is replayed REPLAY_ROWS rows at a time (a streamed head crosses
                # to the device once per span, not once per scored block), then scored block by block
                span = max(self.block_rows, REPLAY_ROWS) if req.hidden else self.block_rows
                for lo in range(skip, rows, span):
                    hi = min(lo + span, rows)
                    ref = x[lo - skip:hi - skip]
                    if req.hidden:  # replayed where the candidate's rows are
                        assert self._heads is not None
                        ref = self._heads.logits(ref, logits[lo:hi, :vocab_size])
                    for c in range(lo, hi, self.block_rows):
                        d = min(c + self.block_rows, hi)
                        ref_rows, cand_rows = ref[c - lo:d - lo], logits[c:d, :vocab_size]
                        scored = self.score_rows(ref_rows, cand_rows, req.tokens[row_start + c:row_start + d])
                        if unscorable(scored):  # as compare refuses them, naming the side
                            raise ScoreFailed(self._unscorable(req, ref_rows, cand_rows, scored,
                                                               row_start + c - first))
                        parts.append(scored)
                records = np.concatenate(parts) if len(parts) > 1 else parts[0]
                # rows whose divergences are too small for the fast forms (near-deterministic
                # text): the precise path computed them; counted per chunk, summed in the record
                self.write(request_id, lo_pos - first, records,
                           {**req.metadata, "precise_rows": str(precise_rows(records))})
            req.rows_done = stop
            if stop == req.window.captured_rows:
                self._finish(request_id)
            return True
        except Exception as exc:  # noqa: BLE001 - one request fails, never the server
            message = str(exc) if isinstance(exc, ScoreFailed) else f"{type(exc).__name__}: {exc}"
            self.fail(request_id, f"kldtui score: rows from {row_start} of request {request_id!r} "
                                  f"not scored: {message}")
            with self._lock:
                req_ = self._requests.pop(request_id, None)
                self._remember(request_id, message)
            if req_ is not None:
                self._close(req_)
            return False

    def _unscorable(self, req: _Request, ref: Any, cand: Any, records: np.ndarray, first_row: int) -> str:
        """Why a block (scored rows ``first_row..``) gave figures that are not valid, in compare's
        words (:mod:`kldtui.formats.finite`): the reference's rows (the file's, or replayed from
        finite states), else the candidate's, else the sums overflowed. Scored and written, they
        were refused by finalize as the server's fault even when the reference file was damaged."""
        from kldtui.metrics.score import from_records

        label = req.window.label
        hit = finite.unscorable_logit_rows(ref)
        if hit.size:
            if req.hidden:
                assert self._heads is not None
                return finite.replay_problem(self._heads.head.path, req.reader.path, label, first_row + hit)
            return finite.logits_problem(req.reader.path, label, "reference", first_row + hit)
        hit = finite.unscorable_logit_rows(cand)
        if hit.size:
            return finite.logits_problem(None, label, "candidate", first_row + hit)
        return finite.overflow_problem(None, label, first_row + from_records(records).nonfinite_rows())

    def close(self) -> None:
        with self._lock:
            items = list(self._requests.values())
            self._requests.clear()
        for req in items:
            self._close(req)
        self._pool.shutdown(wait=True)


def unscorable(records: np.ndarray) -> bool:
    """Whether a block's records hold figures that are not valid (a NaN, +Inf or a row without a
    finite logit on either side leads here: :meth:`kldtui.metrics.kernels.RowStats.nonfinite_rows`)."""
    from kldtui.metrics.score import from_records

    return bool(from_records(records).nonfinite_rows().size)


def _default_reference(suite_dir: Path) -> Path:
    """``SUITE/ref`` (logits), else a hidden-state suite's ``SUITE/reference-hidden``."""
    from kldtui.formats.fidelity import HIDDEN_DIR

    logits = suite_dir / "ref"
    return suite_dir / HIDDEN_DIR if not logits.exists() and (suite_dir / HIDDEN_DIR).is_dir() else logits
