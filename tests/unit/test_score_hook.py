"""Score mode in the vLLM hook (issue 16), driven as vLLM's V1 and V2 runners call it: each chunk is
scored against the reference on the logits' device and only records reach the disk; they equal
what the compare stage computes from the same logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from kldtui import settings
from kldtui.formats.chunks import ERROR_MARKER, check_chunk_dir, request_tag
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.scores import SCORE_CHUNKS, read_records
from kldtui.formats.suite import load_suite
from kldtui.formats.suite_writer import write_suite
from kldtui.hook import vllm_plugin as vp
from kldtui.metrics.kernels import NumpyRowKernel
from kldtui.metrics.score import RECORD_DTYPE, from_records
from tests.fixtures_score import row_differences
from tests.fixtures_vllm_plugin import (
    TinyModel,
    V1Request,
    V1Runner,
    V2Request,
    v1_original,
    v2_batch,
    v2_original,
)

HIDDEN, VOCAB, TOKENS = 16, 50, 2048


@pytest.fixture
def scored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, np.ndarray, list[int]]:
    """A one-window suite with random reference logits, and the hook in score mode against it."""
    rng = np.random.default_rng(3)
    ids = [int(t) for t in rng.integers(0, VOCAB, TOKENS)]
    suite_dir = tmp_path / "suite"
    write_suite(suite_dir, [("prose", ids)])
    suite = load_suite(suite_dir)
    ref = (rng.standard_normal((TOKENS - 1, VOCAB)) * 3).astype(np.float32)
    written = write_logits_array(suite_dir / "ref", suite.window(0), ref, suite.context_length)
    write_logits_manifest(suite_dir / "ref", suite, [written], kind="reference")
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path / "cap"))
    monkeypatch.setenv(settings.CAPTURE_MODE.name, "score")
    monkeypatch.setenv(settings.SCORE_SUITE.name, str(suite_dir))
    monkeypatch.setenv(settings.SCORE_REFERENCE.name, str(suite_dir / "ref"))
    monkeypatch.setenv("KLDTUI_SCORE_ROWS", "100")  # several device blocks per chunk
    monkeypatch.setattr(vp, "_writer_rank_cache", None)
    monkeypatch.setattr(vp, "_sinks", {})
    return tmp_path / "cap", ref, ids


def _joined(folder: Path, suite_dir: Path) -> np.ndarray:
    window = load_suite(suite_dir).window(0)
    checked = check_chunk_dir(folder, window, kind=SCORE_CHUNKS)
    assert not list(folder.glob("logits*"))  # no logits on disk
    return np.concatenate([read_records(c.path, RECORD_DTYPE)[0] for c in checked.chunks])


def _check(records: np.ndarray, ref: np.ndarray, cand: np.ndarray, ids: list[int]) -> None:
    """The records equal what the compare stage's NumPy kernel gives for the same float32 logits,
    within score mode's contract (tests/fixtures_score.py)."""
    want = NumpyRowKernel(VOCAB).block(ref, cand, np.asarray(ids[1:]), reverse=True)
    assert row_differences(from_records(records), want) == []


@pytest.mark.parametrize("kernel", ["c", "torch"])  # torch: score_block, the path a GPU server runs
def test_v2_scores_a_prompt_across_steps(scored: tuple[Path, np.ndarray, list[int]], kernel: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.SCORE_KERNEL.name, kernel)
    capture, ref, ids = scored
    rid = f"cmpl-{request_tag('run', 0, 'deadbeef')}-0-aa"
    weight = torch.randn(HIDDEN, VOCAB, generator=torch.Generator().manual_seed(7))
    wrapped = vp.wrap_v2(v2_original)
    done, seen = 0, []
    for step in (1100, 700, 248):
        worker, batch, states, lens = v2_batch([V2Request(rid, TOKENS, done, step)], [0], seed=done)
        out = wrapped(worker, lambda s: s @ weight, states, batch, None, None, lens)
        assert rid in out  # vLLM's own result is still computed
        vp.flush()
        seen.append((states[:step] @ weight).numpy())
        done += step
    cand = np.concatenate(seen)[: TOKENS - 1]
    records = _joined(capture / rid, capture.parent / "suite")
    assert len(records) == TOKENS - 1
    _check(records, ref, cand, ids)


@pytest.mark.parametrize("kernel", ["c", "torch"])
def test_v1_scores_chunks_and_drops_padded_columns(scored: tuple[Path, np.ndarray, list[int]], kernel: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.SCORE_KERNEL.name, kernel)
    capture, ref, ids = scored
    rid = f"cmpl-{request_tag('run', 0, 'cafebabe')}-0-bb"
    runner = V1Runner(TinyModel(HIDDEN, VOCAB, pad=3), VOCAB)
    runner.requests[rid] = V1Request(ids, 0)
    runner.num_prompt_logprobs[rid] = 1
    wrapped = vp.wrap_v1(v1_original)
    seen = []
    for seed, n in enumerate([256] * 7 + [256]):
        sched = runner.schedule([(rid, n)])
        states = torch.randn(n + 5, HIDDEN, generator=torch.Generator().manual_seed(seed))
        wrapped(runner, states, sched)
        vp.flush()
        k = min(n, TOKENS - runner.requests[rid].num_computed_tokens - 1)
        seen.append((states[:k] @ runner.model.weight)[:, :VOCAB].numpy())
        runner.requests[rid].num_computed_tokens += n
    records = _joined(capture / rid, capture.parent / "suite")
    _check(records, ref, np.concatenate(seen), ids)


def test_a_request_for_an_unknown_window_fails_with_the_marker(
        scored: tuple[Path, np.ndarray, list[int]]) -> None:
    capture, _, ids = scored
    rid = f"cmpl-{request_tag('run', 5, '01234567')}-0-cc"
    other = f"cmpl-{request_tag('run', 0, '89abcdef')}-0-dd"
    runner = V1Runner(TinyModel(HIDDEN, VOCAB), VOCAB)
    for r, prompt in ((rid, ids), (other, ids[::-1])):
        runner.requests[r] = V1Request(prompt, 0)
        runner.num_prompt_logprobs[r] = 1
    sched = runner.schedule([(rid, 256), (other, 256)])
    out = vp.wrap_v1(v1_original)(runner, torch.randn(520, HIDDEN), sched)
    vp.flush()
    assert set(out) == {rid, other}  # the engine's answer is untouched
    text = (capture / rid / ERROR_MARKER).read_text()
    assert "window 5" in text and "kldtui score" in text
    text = (capture / other / ERROR_MARKER).read_text()  # window 0, but not its tokens
    assert "its prompt is not that window's tokens" in text


def test_rows_on_an_accelerator_are_scored_beside_the_engine_thread(
        scored: tuple[Path, np.ndarray, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21: on a GPU the engine's thread (which every tensor-parallel rank waits on) only makes a
    device copy of the rows; the first chunk's reference rows are read, the rows scored (precise
    ones included) and the records written on the writer thread, which first makes the rows' device
    current and sleeps on a blocking event. The records count the rows on the precise path."""
    import threading
    from types import SimpleNamespace

    from kldtui.capture_modes import ChunkRows
    from kldtui.capture_modes import score as score_mode
    from kldtui.formats.safetensors_io import RowReader
    from kldtui.scoring import ScoreSession

    capture, ref, ids = scored
    engine = threading.current_thread()
    seen: list[tuple[str, object, threading.Thread]] = []

    class Event:
        def synchronize(self) -> None:
            seen.append(("synchronize", None, threading.current_thread()))

    class DeviceRows:  # what the sink reads of a CUDA tensor before copying it
        def __init__(self, t: torch.Tensor) -> None:
            self.t, self.shape, self.device = t, t.shape, SimpleNamespace(type="cuda", index=2)

    def device_copy(logits: DeviceRows, vocab: int) -> tuple[torch.Tensor, Event]:
        seen.append(("copy", None, threading.current_thread()))
        return logits.t[:, :vocab].clone(), Event()

    def note(what: str, arg: object = None) -> None:
        seen.append((what, arg, threading.current_thread()))

    monkeypatch.setattr(score_mode, "_device_copy", device_copy)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: note("set_device", i))
    real_pread, real_chunk = RowReader.pread, ScoreSession.chunk
    monkeypatch.setattr(RowReader, "pread", lambda s, a, b: note("read reference") or real_pread(s, a, b))
    monkeypatch.setattr(ScoreSession, "chunk", lambda s, *a, **k: note("score") or real_chunk(s, *a, **k))
    rid = f"cmpl-{request_tag('run', 0, 'cafebabe')}-0-bb"
    sink = vp.server_sink(str(capture))
    cand = ref + np.float32(1e-6) * (np.arange(VOCAB, dtype=np.float32) % 3)  # KL ~ 1e-13: precise rows
    cand[:1000] = ref[:1000] * 1.5  # these rows differ: the fast path
    for start in range(0, TOKENS - 1, 512):
        stop = min(start + 512, TOKENS - 1)
        padded = np.concatenate([cand[start:stop], np.zeros((stop - start, 3), np.float32)], 1)
        rows = torch.from_numpy(padded)
        assert sink.take(rid, start, ChunkRows(DeviceRows(rows), VOCAB), ids) is not None
    vp.flush()
    on_engine = [what for what, _, thread in seen if thread is engine]
    assert set(on_engine) == {"copy"}, on_engine  # no reference read, no scoring on the engine's thread
    elsewhere = [(what, arg) for what, arg, thread in seen if thread is not engine]
    assert elsewhere[:2] == [("set_device", 2), ("synchronize", None)]
    assert {"read reference", "score"} <= {what for what, _ in elsewhere}
    records = _joined(capture / rid, capture.parent / "suite")
    _check(records, ref, cand, ids)
    metas = [read_records(p, RECORD_DTYPE)[1] for p in sorted((capture / rid).glob("scores*"))]
    precise = sum(int(m["precise_rows"]) for m in metas)
    assert precise == int(np.count_nonzero(records["kl"] < 1e-8)) == TOKENS - 1 - 1000
