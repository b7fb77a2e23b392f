"""The embedded server answers like vLLM: shapes, request naming, chunks, errors."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from kldtui.embedded.model import TinyModel, log_softmax
from kldtui.formats.chunks import sanitize_request_id
from kldtui.formats.safetensors_io import RowReader, read_header
from kldtui.stages.serve import ServerProcess

VOCAB = 512


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("embedded")
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "tiny",
            "--model-seed", "7", "--vocab-size", str(VOCAB), "--perturb", "0.1",
            "--max-num-batched-tokens", "100", "--max-num-seqs", "1", "--max-model-len", "1000"]
    proc = ServerProcess(argv, capture_dir=tmp / "chunks", served_model_name="tiny")
    with proc:
        proc.wait_ready(timeout=60)
        yield proc


def post(server: ServerProcess, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/completions", json=body, headers=headers or {},
                      timeout=60, trust_env=False)


def test_health_version_models(server: ServerProcess) -> None:
    assert httpx.get(f"{server.base_url}/health", trust_env=False).status_code == 200
    assert "version" in httpx.get(f"{server.base_url}/version", trust_env=False).json()
    models = httpx.get(f"{server.base_url}/v1/models", trust_env=False).json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [("tiny", "model", 1000)]


def test_completion_with_prompt_logprobs_matches_chunks(server: ServerProcess) -> None:
    ids = np.random.default_rng(0).integers(0, VOCAB, 250).tolist()
    r = post(server, {"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0, "seed": 1,
                      "prompt_logprobs": 2}, {"X-Request-Id": "my/req 1"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["id"] == "cmpl-my/req 1" and doc["object"] == "text_completion" and doc["model"] == "tiny"
    assert doc["usage"] == {"prompt_tokens": 250, "completion_tokens": 1, "total_tokens": 251,
                            "prompt_tokens_details": None}
    (choice,) = doc["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    plp = choice["prompt_logprobs"]
    assert len(plp) == 250 and plp[0] is None
    # the one request folder, named like vLLM's engine request id, sanitized
    prefix = sanitize_request_id("cmpl-my/req 1-0-")
    folders = [n for n in os.listdir(server.capture_dir) if n.startswith(prefix)]
    assert len(folders) == 1 and len(folders[0]) == len("cmpl-my_req_1-0-") + 8
    folder = server.capture_dir / folders[0]
    # prefill chunks of 100 positions: rows [0,100) [100,200) [200,249)
    assert sorted(os.listdir(folder)) == ["logits.rows-000000-000100.safetensors",
                                          "logits.rows-000100-000200.safetensors",
                                          "logits.rows-000200-000249.safetensors"]
    meta = read_header(folder / "logits.rows-000100-000200.safetensors").metadata
    assert meta == {"request_id": f"{folders[0].replace('my_req_1', 'my/req 1')}", "row_start": "100",
                    "row_end": "200", "vocab_size": str(VOCAB), "writer_host": socket.gethostname(),
                    "writer_dir": os.path.abspath(server.capture_dir)}
    rows = []
    for name in sorted(os.listdir(folder)):
        with RowReader(folder / name) as rd:
            rows.append(rd.read(0, rd.rows))
    logits = np.concatenate(rows)
    model = TinyModel(VOCAB, seed=7, perturb=0.1)
    np.testing.assert_allclose(logits, model.logits(model.hidden(ids)[:-1]), rtol=1e-5, atol=1e-5)
    lp = log_softmax(logits)
    for pos in (1, 100, 249):
        entry = plp[pos]
        token = ids[pos]
        assert entry[str(token)]["logprob"] == pytest.approx(float(lp[pos - 1, token]), abs=1e-4)
        assert entry[str(token)]["rank"] == int((lp[pos - 1] > lp[pos - 1, token]).sum()) + 1
        top = np.argsort(-lp[pos - 1])[:2]
        assert [entry[str(int(t))]["rank"] for t in top] == [1, 2]
        assert set(entry) == {str(token), *(str(int(t)) for t in top)}
    # greedy next token after the prompt
    assert choice["token_ids"] == [int(np.argmax(model.logits(model.hidden(ids)[-1:])[0]))]


def test_no_capture_without_prompt_logprobs(server: ServerProcess) -> None:
    before = set(os.listdir(server.capture_dir))
    r = post(server, {"model": "tiny", "prompt": [1, 2, 3, 4], "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["prompt_logprobs"] is None and len(choice["token_ids"]) == 3
    assert set(os.listdir(server.capture_dir)) == before


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"model": "nope", "prompt": [1, 2]}, 404, "The model `nope` does not exist."),
    ({"model": "tiny", "prompt": [1, VOCAB]}, 400, f"Token id {VOCAB} is out of vocabulary"),
    ({"model": "tiny", "prompt": [1] * 990, "max_tokens": 16}, 400,
     "This model's maximum context length is 1000 tokens. However, you requested 1006 tokens"),
    ({"model": "tiny", "prompt": [1, 2], "prompt_logprobs": 21}, 400,
     "Requested prompt logprobs of 21, which is greater than max allowed: 20"),
    ({"model": "tiny", "prompt": "hello"}, 400, "no tokenizer"),
    ({"model": "tiny", "prompt": []}, 400, "The decoder prompt cannot be empty"),
])
def test_errors_look_like_vllm(server: ServerProcess, body: dict, status: int, message: str) -> None:
    r = post(server, body)
    assert r.status_code == status
    err = r.json()["error"]
    assert message in err["message"] and err["code"] == status
    assert err["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


def test_unknown_route_and_bad_json(server: ServerProcess) -> None:
    assert httpx.get(f"{server.base_url}/nope", trust_env=False).status_code == 404
    r = httpx.post(f"{server.base_url}/v1/completions", content=b"{not json", trust_env=False,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_capture_dir_from_environment(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "t",
            "--vocab-size", "64"]
    # ServerProcess sets VLLM_KLD_CAPTURE_DIR, exactly as for vLLM
    with ServerProcess(argv, capture_dir=tmp_path / "env-chunks", served_model_name="t") as proc:
        proc.wait_ready(timeout=60)
        r = post(proc, {"model": "t", "prompt": list(range(10)), "max_tokens": 1, "prompt_logprobs": 0})
        assert r.status_code == 200
        (folder,) = os.listdir(tmp_path / "env-chunks")
        assert os.listdir(tmp_path / "env-chunks" / folder) == ["logits.rows-000000-000009.safetensors"]
