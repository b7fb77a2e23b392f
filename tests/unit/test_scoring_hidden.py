"""kldtui.scoring.ScoreSession against a hidden-state reference (issue 22 item 3): each chunk's
reference rows are replayed from the stored BF16 states and the LM head where the candidate's rows
are (a torch tensor: torch on its device; host rows: NumPy's SGEMM), a block at a time, and score
the same records as against the replayed logits stored as an F32 reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from kldtui.errors import BadInput
from kldtui.formats import fidelity as fid
from kldtui.formats.chunks import request_tag
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import NumpyReplay, f32_to_bf16
from kldtui.metrics.score import from_records, score_rows
from kldtui.scoring import ScoreSession
from tests.fixtures_score import row_differences

VOCAB, WIDTH, LENGTH = 300, 16, 41


def _suite(root: Path) -> tuple[Path, np.ndarray, dict[int, np.ndarray]]:
    """A two-context suite with a hidden-state reference and its head; the head's bits and each
    context's replayed reference logits (BF16 output, the published rule)."""
    rng = np.random.default_rng(3)
    contexts = [fid.NewContext(rng.integers(0, VOCAB, LENGTH).tolist(), "prose",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(2)]
    suite = fid.write_context_suite(root, contexts)
    head = f32_to_bf16(rng.normal(size=(VOCAB, WIDTH)).astype(np.float32))
    fid.write_lm_head(root / fid.LM_HEAD_DIR, head, checkpoint_tensor_key="lm_head.weight")
    records, replayed = [], {}
    for w in suite.windows:
        states = f32_to_bf16(rng.normal(size=(LENGTH, WIDTH)).astype(np.float32))  # one row more: allowed
        written = fid.write_context_tensor(root / fid.HIDDEN_DIR, "hidden", w, states)
        records.append(fid.tensor_record(w, written))
        replayed[w.index] = NumpyReplay(head).logits(states[:LENGTH - 1])
    fid.write_tensor_manifest(root / fid.HIDDEN_DIR, "hidden", suite, records, width=WIDTH, run_name="ref")
    return root, head, replayed


class _Written:
    """What a session published: each window's records and metadata, and its failures."""

    def __init__(self) -> None:
        self.records: dict[int, list[np.ndarray]] = {}
        self.metadata: list[dict[str, str]] = []
        self.failed: list[str] = []

    def write(self, request_id: str, row_start: int, records: np.ndarray, metadata: dict[str, str]) -> None:
        self.records.setdefault(int(metadata["window_index"]), []).append(records)
        self.metadata.append(metadata)

    def fail(self, request_id: str, message: str) -> None:
        self.failed.append(message)


def _session(root: Path, torch_on_cpu: bool) -> tuple[ScoreSession, _Written]:
    out = _Written()
    # no reference folder given: a suite without ref/ scores against its reference-hidden/
    return ScoreSession(root, None, score_rows, out.write, out.fail, block_rows=8,
                        torch_on_cpu=torch_on_cpu), out


@pytest.mark.parametrize("as_torch", [False, True], ids=["numpy", "torch"])
def test_hidden_reference_rows_are_replayed_and_scored_like_stored_logits(tmp_path: Path,
                                                                          as_torch: bool) -> None:
    root, _, replayed = _suite(tmp_path / "suite")
    session, out = _session(root, torch_on_cpu=as_torch)
    rng = np.random.default_rng(5)
    s = load_suite(root)
    for w in s.windows:
        ids = s.load_tokens(w)
        cand = (replayed[w.index] + rng.normal(scale=0.3, size=replayed[w.index].shape)).astype(np.float32)
        padded = np.concatenate([cand, np.full((cand.shape[0], 4), -5.0, np.float32)], axis=1)  # padding
        rows: Any = torch.from_numpy(padded) if as_torch else padded
        tag = request_tag("r", w.index, "0123abcd")
        assert session.chunk(tag, 0, rows[:17], VOCAB, ids)
        assert session.chunk(tag, 17, rows[17:], VOCAB, ids)
        expected = from_records(score_rows(replayed[w.index], cand, np.asarray(ids[1:], dtype=np.int64)))
        assert row_differences(from_records(np.concatenate(out.records[w.index])), expected) == [], w.index
    session.close()
    assert out.failed == []
    head = fid.load_lm_head(root / fid.LM_HEAD_DIR)
    meta = out.metadata[0]
    assert meta["reference_kind"] == "hidden" and meta["lm_head_file_sha256"] == head.file_sha256
    assert meta["replay_output"] == "bf16"  # the published folder says nothing: a BF16 model's head
    assert meta["reference_sha256"] == fid.load_tensor_manifest(root / fid.HIDDEN_DIR).entry(0).sha256


def test_a_request_fails_with_the_reason_when_the_head_does_not_fit(tmp_path: Path) -> None:
    root, _, _ = _suite(tmp_path / "suite")
    session, out = _session(root, torch_on_cpu=False)
    w = load_suite(root).windows[0]
    assert not session.chunk(request_tag("r", 0, "0123abcd"), 0, np.zeros((5, VOCAB + 1), np.float32),
                             VOCAB + 1)
    assert len(out.failed) == 1
    assert f"the LM head has {VOCAB} rows, the server's vocabulary is {VOCAB + 1}" in out.failed[0]
    session.close()
    (root / fid.LM_HEAD_DIR / "weight.safetensors").unlink()
    (root / fid.LM_HEAD_DIR / "manifest.json").unlink()
    (root / fid.LM_HEAD_DIR).rmdir()
    session, out = _session(root, torch_on_cpu=False)
    rows = np.zeros((5, VOCAB), np.float32)
    assert not session.chunk(request_tag("r", w.index, "0123abcd"), 0, rows, VOCAB)
    assert "holds hidden states and no LM head was found" in out.failed[0]
    assert "KLDTUI_SCORE_LM_HEAD" in out.failed[0]
    session.close()


def test_a_hidden_manifest_with_an_unknown_replay_rounding_fails_the_request(tmp_path: Path) -> None:
    """kldtui's ``replay_output`` is validated on load: a value it does not know is a damaged
    manifest, never silently replayed as BF16."""
    import json

    root, _, _ = _suite(tmp_path / "suite")
    path = root / fid.HIDDEN_DIR / "manifest.json"
    doc = json.loads(path.read_text())
    doc["replay_output"] = "fp8"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"manifest\.json: replay_output 'fp8' is not bf16 or f32; the "
                       r"manifest is damaged, finalize the hidden states again"):
        fid.replay_output_of(fid.load_tensor_manifest(path))
    session, out = _session(root, torch_on_cpu=False)
    assert not session.chunk(request_tag("r", 0, "0123abcd"), 0, np.zeros((5, VOCAB), np.float32), VOCAB)
    assert "replay_output 'fp8' is not bf16 or f32" in out.failed[0]
    session.close()


def test_reference_states_holding_nan_fail_the_request_naming_the_file(tmp_path: Path) -> None:
    """They were scored: NaN figures, which finalize blamed on the server ("the server computed
    garbage there: check the model"), while compare names the reference's hidden file."""
    import json

    root, _, replayed = _suite(tmp_path / "suite")
    s = load_suite(root)
    w = s.windows[1]
    path = root / fid.HIDDEN_DIR / fid.hidden_file_name(w.index)
    from kldtui.formats.safetensors_io import read_header

    info = read_header(path).tensors["hidden_states"]
    data = bytearray(path.read_bytes())
    at = info.begin + (23 * WIDTH + 4) * 2  # row 23, column 4: a BF16 NaN
    data[at:at + 2] = (0x7FC0).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    manifest = root / fid.HIDDEN_DIR / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["contexts"][1]["sha256"] = fid.sha256_bytes(bytes(data))  # the damage vouched for
    manifest.write_text(json.dumps(doc))
    session, out = _session(root, torch_on_cpu=False)
    ids = s.load_tokens(w)
    tag = request_tag("r", w.index, "0123abcd")
    assert session.chunk(tag, 0, replayed[w.index][:17].copy(), VOCAB, ids)  # rows before it: scored
    assert not session.chunk(tag, 17, replayed[w.index][17:].copy(), VOCAB, ids)
    assert len(out.failed) == 1
    said = f"{path}: context 0001 (prose): NaN or Inf in the reference hidden states at rows 23"
    assert said in out.failed[0]
    session.close()
