"""Score mode against stored logits refuses rows that cannot be scored as compare does: a NaN, +Inf
or a row without a finite logit in the reference file's rows (named) or in the candidate's logits
fails the request with compare's line (kldtui.formats.finite), while a masked token (-inf) is
scored. Before, such rows were scored and written; finalize then blamed a damaged reference on the
server ("the server computed garbage there")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from kldtui import settings
from kldtui.formats.chunks import request_tag
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.suite import load_suite
from kldtui.formats.suite_writer import write_suite
from kldtui.metrics.score import score_rows
from kldtui.scoring import ScoreSession

VOCAB, TOKENS = 64, 41
RULE = "(NaN, +Inf or no finite logit in a row); capture and finalize this window again"


class _Out:
    def __init__(self) -> None:
        self.written: list[int] = []
        self.failed: list[str] = []


def _suite(root: Path, damage: tuple[int, int, float] | None = None) -> tuple[Path, np.ndarray]:
    """A one-window suite and its F32 reference logits (``damage``: row, column, value written into
    the reference file)."""
    rng = np.random.default_rng(5)
    write_suite(root, [("prose", [int(t) for t in rng.integers(0, VOCAB, TOKENS)])])
    suite = load_suite(root)
    ref = (rng.standard_normal((TOKENS - 1, VOCAB)) * 2).astype(np.float32)
    stored = ref.copy()
    if damage is not None:
        stored[damage[0], damage[1]] = damage[2]
    written = write_logits_array(root / "ref", suite.window(0), stored, suite.context_length)
    write_logits_manifest(root / "ref", suite, [written], kind="reference")
    return root, ref


def _score(root: Path, candidate: np.ndarray, kernel: str, monkeypatch: pytest.MonkeyPatch) -> _Out:
    """The window's rows scored in two chunks of a session (blocks of 8 rows) as a server would."""
    monkeypatch.setenv(settings.SCORE_KERNEL.name, kernel)
    out = _Out()
    session = ScoreSession(root, None, score_rows, lambda rid, start, rec, meta: out.written.append(start),
                           lambda rid, msg: out.failed.append(msg), block_rows=8)
    tag = request_tag("r", 0, "0123abcd")
    rows: Any = torch.from_numpy(candidate) if kernel == "torch" else candidate
    try:
        for start, stop in ((0, 20), (20, TOKENS - 1)):
            if not session.chunk(tag, start, rows[start:stop], VOCAB):
                break
    finally:
        session.close()
    return out


@pytest.mark.parametrize("kernel", ["c", "torch"])  # torch: score_block, what a GPU server runs
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_reference_file_holding_nan_or_inf_fails_the_request_naming_it(
        tmp_path: Path, kernel: str, value: float, monkeypatch: pytest.MonkeyPatch) -> None:
    root, ref = _suite(tmp_path / "suite", damage=(27, 5, value))
    out = _score(root, ref + 0.1, kernel, monkeypatch)
    path = root / "ref" / "logits_000.safetensors"
    assert out.written == [0] and len(out.failed) == 1  # the first chunk scored, the second refused
    assert (f"not scored: {path}: window 000 (prose): NaN or Inf in the reference logits at rows 27 {RULE}"
            in out.failed[0])


@pytest.mark.parametrize("kernel", ["c", "torch"])
def test_a_reference_row_without_a_finite_logit_fails_the_request(
        tmp_path: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root, ref = _suite(tmp_path / "suite")
    damaged = ref.copy()
    damaged[3] = -np.inf
    suite = load_suite(root)
    written = write_logits_array(root / "ref", suite.window(0), damaged, suite.context_length, force=True)
    write_logits_manifest(root / "ref", suite, [written], kind="reference")
    out = _score(root, ref, kernel, monkeypatch)
    assert out.written == []
    assert f"NaN or Inf in the reference logits at rows 3 {RULE}" in out.failed[0]


@pytest.mark.parametrize("kernel", ["c", "torch"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_candidate_logits_holding_nan_or_inf_fail_the_request(
        tmp_path: Path, kernel: str, value: float, monkeypatch: pytest.MonkeyPatch) -> None:
    root, ref = _suite(tmp_path / "suite")
    cand = ref + 0.1
    cand[33, 2] = value
    cand[35, 9] = value
    out = _score(root, cand, kernel, monkeypatch)
    assert out.written == [0] and len(out.failed) == 1
    assert f"not scored: window 000 (prose): NaN or Inf in the candidate logits at rows 33, 35 {RULE}" \
        in out.failed[0]


@pytest.mark.parametrize("kernel", ["c", "torch"])
def test_a_token_the_candidate_masks_is_scored(tmp_path: Path, kernel: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root, ref = _suite(tmp_path / "suite")
    cand = ref + 0.1
    cand[4, int(np.argmax(ref[4]))] = -np.inf  # probability 0: an infinite KL, not a damaged row
    out = _score(root, cand, kernel, monkeypatch)
    assert out.failed == [] and out.written == [0, 20]
