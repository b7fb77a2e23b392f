"""llama.cpp's KL-divergence base file: what ``llama-perplexity --kl-divergence-base FILE``
writes (with ``-f TEXT``) and reads back (with ``--kl-divergence``), read and written here
(docs/FORMATS.md, "llama.cpp's KL-divergence base file").

Layout, little-endian, no padding::

    b"_logits_"                          8 bytes
    n_ctx      u32                       tokens per chunk
    n_vocab    i32
    n_chunk    i32
    tokens     i32 [n_chunk * n_ctx]     every chunk's tokens, as tokenized (not BOS-substituted)
    then per chunk, rows for positions n_ctx/2 .. n_ctx-2 (n_ctx - 1 - n_ctx/2 rows), each row
        scale         f32   (the first two u16 slots)
        min_log_prob  f32   (the next two)
        q             u16 [n_vocab], then one u16 of padding when n_vocab is odd

Row ``j`` of a chunk holds position ``p = n_ctx/2 + j``: the distribution of token ``p + 1``.
A row's log-probabilities are ``scale * q + min_log_prob``. The writer takes the row's largest
logit ``max`` and ``lo = max(smallest logit, max - 16)``; ``scale = (max - lo) / 65535``,
``min_log_prob = lo - max - log(sum(exp(logit - max)))``, and ``q = round((logit - lo) / scale)``
for a logit above ``lo``, else 0. So every entry within 16 nats of the row's top is kept to
``scale / 2`` (at most 16 / 65535 / 2 = 1.22e-4 nats); entries further down all read as the
floor. llama.cpp's own KLD skips entries at or below -16 (its floor); :func:`decode_rows` makes
floor entries of a row whose range hit the 16-nat limit ``-inf`` (probability 0), so kldtui's
figures treat them the same way.

When a model adds BOS, ``llama-perplexity`` evaluates each chunk with its first token replaced by
BOS, but stores the tokens as tokenized: the file does not say which model (or BOS) it was made
with; the importer asks.

Arithmetic follows llama.cpp's in float32 (the exponentials summed in float64), so a file written
here from the same logits is the file ``llama-perplexity`` writes, up to the last bit of
``expf`` and ``log``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from kldtui.errors import BadInput
from kldtui.formats import finite
from kldtui.formats.atomic import atomic_open
from kldtui.formats.safe_io import open_regular, read_failure

MAGIC = b"_logits_"
HEADER = struct.Struct("<8sIii")
# What to do about a file that is no base file, and about a damaged one
BASE_REMEDY = "give the file llama-perplexity --kl-divergence-base wrote"
BASE_AGAIN = "write it again with llama-perplexity --kl-divergence-base"
LOGIT_RANGE = 16.0          # nats kept below each row's top logit
LEVELS = 65535              # uint16 steps over that range
MAX_STEP = LOGIT_RANGE / LEVELS  # the largest scale a row can have (1 / 4096 nats)
# A row whose kept range is within this of LOGIT_RANGE had its floor raised: entries at the
# floor (q == 0) are below it by an unknown amount.
_CLAMPED = LOGIT_RANGE * (1 - 1e-5)


def row_width(n_vocab: int) -> int:
    """uint16 slots per row: the two float32 values, then the vocabulary rounded up to even."""
    return 2 * ((n_vocab + 1) // 2) + 4


def first_scored(n_ctx: int) -> int:
    """The first position ``llama-perplexity`` scores in a chunk (it scores the second half)."""
    return n_ctx // 2


def rows_per_chunk(n_ctx: int) -> int:
    return n_ctx - 1 - first_scored(n_ctx)


def file_size(n_ctx: int, n_vocab: int, n_chunk: int) -> int:
    return HEADER.size + 4 * n_ctx * n_chunk + 2 * row_width(n_vocab) * rows_per_chunk(n_ctx) * n_chunk


def encode_rows(logits: np.ndarray) -> np.ndarray:
    """``[rows, n_vocab]`` float32 logits -> ``[rows, row_width]`` uint16, as llama.cpp encodes
    them (one row at a time, float32 arithmetic). A row compare would refuse
    (:data:`kldtui.formats.finite.LOGITS_RULE`: NaN, +inf, or no finite logit) is a ValueError
    (llama.cpp would write garbage); -inf entries (masked tokens) go to the floor."""
    x = np.asarray(logits, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError("encode_rows takes [rows, vocab]")
    bad = finite.unscorable_logit_rows(x)
    if bad.size:
        raise ValueError(f"rows {finite.shown_rows(bad)} cannot be scored ({finite.LOGITS_RULE})")
    rows, n_vocab = x.shape
    out = np.zeros((rows, row_width(n_vocab)), dtype=np.uint16)
    head = out[:, :4].view(np.float32)  # [rows, 2]: scale, min_log_prob
    for r in range(rows):
        row = x[r]
        top = np.float32(row.max())
        lo = np.float32(max(np.float32(row.min()), np.float32(top - np.float32(LOGIT_RANGE))))
        sum_exp = float(np.exp(row - top, dtype=np.float32).sum(dtype=np.float64))
        log_sum_exp = np.float32(np.log(sum_exp))
        scale = np.float32((top - lo) / np.float32(LEVELS))
        head[r, 0] = scale
        head[r, 1] = np.float32(np.float32(lo - top) - log_sum_exp)
        if scale:
            inv = np.float32(np.float32(1) / scale)
            with np.errstate(invalid="ignore"):
                q = np.rint(inv * (row - lo))  # float32, round half to even like llama.cpp's nearest_int
            out[r, 4:4 + n_vocab] = np.where(row > lo, q, 0).astype(np.uint16)
    return out


def row_header(encoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each encoded row's ``(scale, min_log_prob)`` as float32 arrays."""
    head = np.ascontiguousarray(encoded[:, :4]).view(np.float32)
    return head[:, 0], head[:, 1]


def floored(encoded: np.ndarray, n_vocab: int) -> np.ndarray:
    """``[rows, n_vocab]`` bool: entries at the floor of a row whose range hit 16 nats (their
    log-probabilities are below ``min_log_prob`` by an unknown amount)."""
    scale, _ = row_header(encoded)
    clamped = scale * np.float32(LEVELS) >= np.float32(_CLAMPED)
    out: np.ndarray = (encoded[:, 4:4 + n_vocab] == 0) & clamped[:, None]
    return out


def decode_rows(encoded: np.ndarray, n_vocab: int, *, mask_floor: bool = True) -> np.ndarray:
    """``[rows, row_width]`` uint16 -> ``[rows, n_vocab]`` float32 log-probabilities
    (``scale * q + min_log_prob``, in float32 as llama.cpp computes them). With ``mask_floor``
    the floor entries of clamped rows are ``-inf``."""
    scale, min_log_prob = row_header(encoded)
    q = encoded[:, 4:4 + n_vocab].astype(np.float32)
    out: np.ndarray = q * scale[:, None] + min_log_prob[:, None]
    if mask_floor:
        out[floored(encoded, n_vocab)] = -np.inf
    return out


@dataclass(frozen=True)
class KldBase:
    """An opened base file's header; :meth:`tokens` and :meth:`chunk_rows` read the rest."""

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    size: int

    @property
    def first(self) -> int:
        return first_scored(self.n_ctx)

    @property
    def rows(self) -> int:
        return rows_per_chunk(self.n_ctx)

    @property
    def width(self) -> int:
        return row_width(self.n_vocab)

    def _rows_offset(self, chunk: int) -> int:
        return HEADER.size + 4 * self.n_ctx * self.n_chunk + 2 * self.width * self.rows * chunk

    def tokens(self) -> np.ndarray:
        """``[n_chunk, n_ctx]`` int32: every chunk's stored tokens."""
        with open_regular(self.path) as fh:
            fh.seek(HEADER.size)
            raw = fh.read(4 * self.n_ctx * self.n_chunk)
        if len(raw) != 4 * self.n_ctx * self.n_chunk:
            raise BadInput(f"{self.path}: the token table ends early; the file is truncated; {BASE_AGAIN}")
        return np.frombuffer(raw, dtype="<i4").reshape(self.n_chunk, self.n_ctx).astype(np.int32)

    def chunk_rows(self, chunk: int, fh: BinaryIO | None = None) -> np.ndarray:
        """Chunk ``chunk``'s encoded rows, ``[rows, width]`` uint16."""
        if not 0 <= chunk < self.n_chunk:
            raise IndexError(chunk)
        n = 2 * self.width * self.rows
        if fh is None:
            with open_regular(self.path) as own:
                own.seek(self._rows_offset(chunk))
                raw = own.read(n)
        else:
            fh.seek(self._rows_offset(chunk))
            raw = fh.read(n)
        if len(raw) != n:
            raise BadInput(f"{self.path}: chunk {chunk}'s rows end early; the file is truncated: "
                           f"{BASE_AGAIN}")
        return np.frombuffer(raw, dtype="<u2").reshape(self.rows, self.width).copy()

    def iter_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        with open_regular(self.path) as fh:
            for c in range(self.n_chunk):
                yield c, self.chunk_rows(c, fh)


def read_base(path: str | os.PathLike[str]) -> KldBase:
    """Open a base file and check its header and size (BadInput, one line naming it)."""
    p = Path(path)
    try:
        with open_regular(p) as fh:
            head = fh.read(HEADER.size)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise read_failure(p, exc, "llama.cpp KL-divergence base file", BASE_REMEDY) from None
    if len(head) < HEADER.size or head[:8] != MAGIC:
        raise BadInput(f"{p}: not a llama.cpp KL-divergence base file (no '_logits_' magic); {BASE_REMEDY}")
    _, n_ctx, n_vocab, n_chunk = HEADER.unpack(head)
    if n_ctx < 4 or n_vocab < 2 or n_chunk < 1:
        raise BadInput(f"{p}: header n_ctx={n_ctx}, n_vocab={n_vocab}, n_chunk={n_chunk} is not a "
                       f"usable base file (n_ctx >= 4, n_vocab >= 2, n_chunk >= 1); {BASE_AGAIN}")
    want = file_size(n_ctx, n_vocab, n_chunk)
    if size != want:
        raise BadInput(f"{p}: {size} bytes, but n_ctx={n_ctx}, n_vocab={n_vocab}, n_chunk={n_chunk} "
                       f"make {want}; the file is truncated or damaged; {BASE_AGAIN}")
    return KldBase(p, n_ctx, n_vocab, n_chunk, size)


class KldBaseWriter:
    """Writes a base file atomically: the header and every chunk's tokens first, then each
    chunk's rows in order (:meth:`add_chunk`); :meth:`close` publishes it once every chunk is in."""

    def __init__(self, path: str | os.PathLike[str], tokens: np.ndarray, n_vocab: int) -> None:
        t = np.asarray(tokens)
        if t.ndim != 2 or t.shape[1] < 4:
            raise ValueError("tokens must be [n_chunk, n_ctx] with n_ctx >= 4")
        self.path = Path(path)
        self.n_chunk, self.n_ctx = int(t.shape[0]), int(t.shape[1])
        self.n_vocab = n_vocab
        self.written = 0
        self._cm = atomic_open(self.path, "wb")
        self._fh = self._cm.__enter__()
        self._fh.write(HEADER.pack(MAGIC, self.n_ctx, n_vocab, self.n_chunk))
        self._fh.write(t.astype("<i4").tobytes())

    def add_chunk(self, logits: np.ndarray) -> None:
        """The chunk's logits for positions ``n_ctx/2 .. n_ctx-2`` (``[rows, n_vocab]``)."""
        if logits.shape != (rows_per_chunk(self.n_ctx), self.n_vocab):
            raise ValueError(f"chunk rows {logits.shape}, expected "
                             f"{(rows_per_chunk(self.n_ctx), self.n_vocab)}")
        self.add_encoded(encode_rows(logits))

    def add_encoded(self, encoded: np.ndarray) -> None:
        """The chunk's rows already encoded (:func:`encode_rows`), ``[rows, row_width]``."""
        if encoded.shape != (rows_per_chunk(self.n_ctx), row_width(self.n_vocab)):
            raise ValueError(f"encoded rows {encoded.shape}, expected "
                             f"{(rows_per_chunk(self.n_ctx), row_width(self.n_vocab))}")
        self._fh.write(np.ascontiguousarray(encoded, dtype="<u2").tobytes())
        self.written += 1

    def close(self) -> None:
        if self.written != self.n_chunk:
            self.abort()
            raise ValueError(f"{self.written} of {self.n_chunk} chunks written")
        self._cm.__exit__(None, None, None)

    def abort(self) -> None:
        err = RuntimeError("aborted")
        try:
            self._cm.__exit__(RuntimeError, err, None)
        except RuntimeError:
            pass

    def __enter__(self) -> KldBaseWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
