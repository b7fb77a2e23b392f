"""The per-window compare cache (``compare/window-NNN.json`` in a workspace): a window's
per-position figures, keyed by both sides' files' SHA-256 (and, for a replayed side, its LM head
and the replay's rounding and chunk) and the options that change the numbers, so a resumed or
repeated run reuses them.  Only computed windows are cached: figures a
server computed (score mode) are files already."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import numpy as np

from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.report_model import BACKEND_REASON_MAX
from kldtui.formats.safe_io import read_text
from kldtui.formats.suite import WindowSpec
from kldtui.formats.untrusted_json import one_line_problem
from kldtui.formats.verified_cache import sign, signed_by_me
from kldtui.metrics.kernels import FIELDS, INT_FIELDS, RowStats
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult
from kldtui.stages.compare.sides import HiddenSide, load_side
from kldtui.workspace import Workspace

RESULT_FORMAT = "kldtui-window-result-v1"
COMPARE_RESULT_VERSION = 1  # of the per-window cache files (compare/window-NNN.json)
# bytes of a cache entry read: 11 per-position figures of 8 bytes in base64 take about 110 bytes a
# position (the demo's 511-position windows: 56 KB), so a 131,072-token window's is about 15 MB; a
# larger file is not used (the window is computed again)
COMPARE_CACHE_LIMIT = 256 * 1024 * 1024


def _encode(arr: np.ndarray) -> dict[str, str]:
    dtype = "<i8" if arr.dtype.kind in "iu" else "<f8"
    return {"dtype": dtype, "data": base64.b64encode(np.ascontiguousarray(arr, dtype=dtype).tobytes())
            .decode("ascii")}


def _decode(doc: dict[str, str]) -> np.ndarray:
    dtype = np.dtype(doc["dtype"])
    if dtype not in (np.dtype("<i8"), np.dtype("<f8")):
        raise ValueError(f"unsupported dtype {doc['dtype']}")
    return np.frombuffer(base64.b64decode(doc["data"]), dtype=dtype).copy()


def encode_result(result: WindowResult) -> dict[str, Any]:
    """``result`` as a JSON document (arrays base64-encoded, exact)."""
    rows = result.rows
    arrays = {f: _encode(getattr(rows, f)) for f in FIELDS if getattr(rows, f) is not None}
    return {"format": RESULT_FORMAT, "window_index": result.window_index,
            "domain": result.domain, "vocab_size": result.vocab_size,
            "elapsed_seconds": result.elapsed_seconds, "bytes_compared": result.bytes_compared,
            "backend": result.backend, "threads": result.threads, "backend_reason": result.backend_reason,
            "rows": arrays}


def decode_result(doc: dict[str, Any]) -> WindowResult:
    """Inverse of :func:`encode_result`; ValueError/KeyError/TypeError on a damaged document."""
    if doc.get("format") != RESULT_FORMAT:
        raise ValueError("not a kldtui window result")
    arrays = {f: _decode(v) for f, v in doc["rows"].items() if f in FIELDS}
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
    threads = doc.get("threads")  # absent from entries an older kldtui wrote: not known
    if threads is not None and (type(threads) is not int or threads < 1):
        raise ValueError(f"threads {threads!r} is not a positive integer")
    reason = doc.get("backend_reason", "")  # absent from entries an older kldtui wrote: not known
    problem = one_line_problem(reason, BACKEND_REASON_MAX)  # the report's rule: it goes there
    if problem is not None:
        raise ValueError(f"backend_reason {problem}")
    return WindowResult(window_index=int(doc["window_index"]), domain=str(doc["domain"]),
                        vocab_size=int(doc["vocab_size"]), rows=rows,
                        elapsed_seconds=float(doc.get("elapsed_seconds", 0.0)),
                        bytes_compared=int(doc.get("bytes_compared", 0)), backend=str(doc.get("backend", "")),
                        threads=threads, backend_reason=reason)


class WindowCache:
    """A workspace's per-window compare cache for one set of options, of windows computed from
    logits (none when the workspace has no cache folder)."""

    def __init__(self, workspace: Workspace, options: CompareOptions) -> None:
        self.workspace = workspace
        self.options = options

    def _key(self, window: WindowSpec) -> dict[str, Any]:
        # read again for every window: the pipeline extends the candidate's folder as it goes
        ws, options = self.workspace, self.options
        ref = load_side(ws.reference, "reference", lm_head=options.lm_head, suite_dir=ws.suite_dir,
                        replay_dtype=options.replay_dtype)
        cand = load_side(ws.candidate, "candidate", lm_head=options.candidate_lm_head, suite_dir=ws.suite_dir,
                         replay_dtype=options.replay_dtype)
        key: dict[str, Any] = {"version": COMPARE_RESULT_VERSION,
                               "reference_sha256": ref.identity(window.index)["sha256"],
                               "candidate_sha256": cand.identity(window.index)["sha256"],
                               "reverse": self.options.reverse}
        if isinstance(ref, HiddenSide) or isinstance(cand, HiddenSide):
            # a replayed side: its head and the replay's rounding (in its identity) and chunk change
            # the numbers too
            key.update(reference=ref.identity(window.index), candidate=cand.identity(window.index),
                       vocab_chunk=self.options.vocab_chunk)
        return key

    def get(self, window: WindowSpec) -> WindowResult | None:
        """The cached result of ``window`` when its key still matches and this user signed it
        (anyone who writes the work folder could copy the key into a forged entry), else None."""
        path = self.workspace.compare_cache(window.index)
        if path is None or not path.exists():
            return None
        with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
            doc = json.loads(read_text(path, limit=COMPARE_CACHE_LIMIT))
            body = {"key": doc["key"], "result": doc["result"]}
            if doc.get("key") == self._key(window) and signed_by_me(body, doc.get("signature")):
                return decode_result(doc["result"])
        return None

    def put(self, window: WindowSpec, result: WindowResult) -> None:
        path = self.workspace.compare_cache(window.index)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            body = {"key": self._key(window), "result": encode_result(result)}
            write_json_atomic(path, {**body, "signature": sign(body)})


__all__ = ["COMPARE_CACHE_LIMIT", "COMPARE_RESULT_VERSION", "WindowCache", "decode_result", "encode_result"]
