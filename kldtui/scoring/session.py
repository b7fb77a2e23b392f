"""The scoring session: one per server process and capture folder, scoring each prefill chunk of
kldtui's capture requests against the reference (docs/SCORE_MODE.md).

For each chunk it reads the matching rows of the window's reference file, hands them with the
candidate's rows to ``score_rows`` (the arithmetic is the caller's:
:func:`kldtui.metrics.score.score_rows` in the vLLM hook and the embedded server) and publishes
the records through ``write``. Which window a request scores comes from the capture client's
request id (:func:`kldtui.formats.chunks.window_of_request`). The reference file is checked
(:func:`kldtui.formats.identity.check_logits_file`: size, shape, header ``window_index`` and token
hash against the reference manifest and the suite) before a row of it is used. A failure fails
that request only: ``fail`` leaves the error marker with the reason; the server goes on.
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
from kldtui.formats.chunks import window_of_request
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import WindowSpec, load_logits_manifest, load_suite, token_ids_hash

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


class ScoreFailed(Exception):
    """This request cannot be scored (the message says why); the server goes on."""


@dataclass
class _Request:
    window: WindowSpec
    tokens: np.ndarray  # next tokens of rows 0..N-2
    reader: RowReader
    metadata: dict[str, str]
    prefetch: tuple[int, int, Future[np.ndarray]] | None = None
    rows_done: int = 0


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
                 block_rows: int | None = None) -> None:
        self.suite_dir = Path(suite_dir)
        self.reference_dir = Path(reference_dir) if reference_dir else self.suite_dir / "ref"
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
            suite, manifest = load_suite(self.suite_dir), load_logits_manifest(self.reference_dir)
            window = suite.window(index)
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
            if (prompt is not None
                    and token_ids_hash([int(t) for t in prompt]) != window.token_ids_json_sha256):
                raise ScoreFailed(f"request {request_id!r} names {window.label} but its prompt is not "
                                  "that window's tokens")
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
        nxt = min(stop + (stop - start), req.window.scored_positions)
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
            if row_start != req.rows_done or stop > req.window.scored_positions:
                raise ScoreFailed(f"rows {row_start}..{stop} of {req.window.label} arrived after rows "
                                  f"0..{req.rows_done} (prefix caching must be off); not scored")
            x = self._reference_rows(req, row_start, stop)
            parts = []
            for lo in range(0, rows, self.block_rows):
                hi = min(lo + self.block_rows, rows)
                parts.append(self.score_rows(x[lo:hi], logits[lo:hi, :vocab_size],
                                             req.tokens[row_start + lo:row_start + hi]))
            records = np.concatenate(parts) if len(parts) > 1 else parts[0]
            # rows whose divergences are too small for the fast forms (near-deterministic text):
            # the precise path computed them; counted per chunk, summed in the window's record
            self.write(request_id, row_start, records,
                       {**req.metadata, "precise_rows": str(precise_rows(records))})
            req.rows_done = stop
            if stop == req.window.scored_positions:
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

    def close(self) -> None:
        with self._lock:
            items = list(self._requests.values())
            self._requests.clear()
        for req in items:
            self._close(req)
        self._pool.shutdown(wait=True)
