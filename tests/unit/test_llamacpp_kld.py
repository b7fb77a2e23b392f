"""llama.cpp's KL-divergence base file (kldtui/formats/llamacpp_kld.py): layout, the uint16
encoding against a scalar transcription of llama.cpp's arithmetic, the stated precision, the
floor, and damaged files."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.formats import llamacpp_kld as kld


def scalar_encode(row: np.ndarray) -> tuple[float, float, list[int]]:
    """llama.cpp's log_softmax(n_vocab, logits, log_prob, tok) written out one entry at a time,
    float32 where the C code uses float (numpy float32 scalars), double for the sum."""
    f = np.float32
    mx = f(row[0])
    mn = f(row[0])
    for v in row[1:]:
        mx = max(mx, f(v))
        mn = min(mn, f(v))
    mn = max(mn, f(mx - f(16)))
    s = 0.0
    for v in row:
        s += float(np.exp(f(f(v) - mx), dtype=np.float32))
    lse = f(math.log(s))
    min_log_prob = f(f(mn - mx) - lse)
    scale = f(f(mx - mn) / f(65535))
    q = []
    inv = f(f(1) / scale)
    for v in row:
        if f(v) > mn:
            q.append(int(np.rint(f(inv * f(f(v) - mn)))))
        else:
            q.append(0)
    return float(scale), float(min_log_prob), q


def test_encode_matches_llama_cpp_arithmetic() -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, 33)) * np.array([[0.5], [3], [8], [20], [0.01]])).astype(np.float32)
    enc = kld.encode_rows(logits)
    assert enc.shape == (5, kld.row_width(33)) == (5, 2 * 17 + 4)
    scale, minlp = kld.row_header(enc)
    for r in range(5):
        s, m, q = scalar_encode(logits[r])
        assert scale[r] == np.float32(s) and minlp[r] == np.float32(m)
        assert enc[r, 4:37].tolist() == q
        assert enc[r, 37] == 0  # the odd vocabulary's padding slot


def test_decode_within_the_stated_precision() -> None:
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((40, 1000)) * 4).astype(np.float32)
    enc = kld.encode_rows(logits)
    dec = kld.decode_rows(enc, 1000)
    x = logits.astype(np.float64)
    logp = x - x.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    scale, _ = kld.row_header(enc)
    kept = np.isfinite(dec)
    err = np.abs(dec - logp)
    # half a step, plus float32 rounding of values up to ~20 in magnitude
    bound = scale[:, None] / 2 + 4e-6
    assert (err[kept] <= np.broadcast_to(bound, err.shape)[kept]).all()
    assert scale.max() <= kld.MAX_STEP * (1 + 1e-6)
    # masked (floor) entries are exactly the ones more than 16 nats below the row's top
    below = x < x.max(axis=1, keepdims=True) - 16
    assert (~kept == below).all()
    assert below.any()


def test_narrow_rows_keep_their_minimum() -> None:
    logits = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)  # range 3 < 16: nothing floored
    dec = kld.decode_rows(kld.encode_rows(logits), 4)
    assert np.isfinite(dec).all()
    want = logits[0] - np.log(np.exp(logits[0]).sum())
    assert np.allclose(dec[0], want, atol=3 / 65535)


def test_flat_row_is_uniform() -> None:
    dec = kld.decode_rows(kld.encode_rows(np.zeros((1, 8), np.float32)), 8)
    assert np.allclose(dec, -math.log(8))


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError):
        kld.encode_rows(np.array([[0.0, np.nan]], dtype=np.float32))


def test_file_round_trip_and_layout(tmp_path) -> None:
    rng = np.random.default_rng(9)
    n_ctx, vocab, n_chunk = 10, 7, 3
    tokens = rng.integers(0, vocab, size=(n_chunk, n_ctx), dtype=np.int32)
    rows = [rng.standard_normal((kld.rows_per_chunk(n_ctx), vocab)).astype(np.float32)
            for _ in range(n_chunk)]
    path = tmp_path / "base.kld"
    with kld.KldBaseWriter(path, tokens, vocab) as w:
        for r in rows:
            w.add_chunk(r)
    raw = path.read_bytes()
    assert raw[:8] == b"_logits_"
    assert struct.unpack("<Iii", raw[8:20]) == (n_ctx, vocab, n_chunk)
    assert len(raw) == kld.file_size(n_ctx, vocab, n_chunk) == 20 + 4 * 30 + 2 * 12 * 4 * 3
    base = kld.read_base(path)
    assert (base.first, base.rows) == (5, 4)
    assert (base.tokens() == tokens).all()
    for c, enc in base.iter_chunks():
        assert (enc == kld.encode_rows(rows[c])).all()


def test_damaged_files_are_one_line(tmp_path) -> None:
    bad = tmp_path / "x.kld"
    bad.write_bytes(b"not a base file at all......")
    with pytest.raises(BadInput, match="no '_logits_' magic"):
        kld.read_base(bad)
    short = tmp_path / "short.kld"
    short.write_bytes(struct.pack("<8sIii", b"_logits_", 10, 7, 3) + b"\0" * 40)
    with pytest.raises(BadInput, match="truncated or damaged"):
        kld.read_base(short)
    with pytest.raises(BadInput, match="not found"):
        kld.read_base(tmp_path / "missing.kld")


def test_writer_leaves_nothing_when_incomplete(tmp_path) -> None:
    path = tmp_path / "base.kld"
    w = kld.KldBaseWriter(path, np.zeros((2, 6), np.int32), 5)
    w.add_chunk(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError):
        w.close()
    assert not path.exists() and not list(tmp_path.iterdir())
