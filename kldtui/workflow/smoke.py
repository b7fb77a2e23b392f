"""``kldtui doctor --smoke``: one window through the live server, its chunks checked against the
prompt logprobs the server itself returns.

This is the one-window test to run first on a GPU host (after ``kldtui doctor``): it proves that
the hook is active in the process that computes the output (the right rank, on this node's
folder or a shared one), that every row of the window landed once, and that the captured rows
are the logits vLLM scored: ``log_softmax(chunk row r)[token r+1]`` must equal the server's
``prompt_logprobs[r+1]`` for that token. A vLLM that computed prompt logprobs some other way
(say, from a vocabulary-parallel top-k) without changing the wrapped methods fails here.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kldtui import capture_modes
from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput, StageFailed
from kldtui.formats.chunks import request_tag, sanitize_request_id, writer_host
from kldtui.formats.suite import Suite, WindowSpec
from kldtui.text import plain_number, plural

# the server computes log-softmax in float32 on its device; this side in float64 from the same
# values: agreement is ~1e-5; anything over this means the rows are not the scored logits
LOGPROB_TOLERANCE = 1e-3


@dataclass
class SmokeResult:
    ok: bool
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0
    max_abs_diff: float | None = None


def smoke_token_ids(n: int, seed: int = 7) -> list[int]:
    """Token ids every real vocabulary has (100 .. 999), deterministic."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(100, 1000, n)]


def served_model(url: str, api_key: str | None = None) -> str:
    """The first model the server lists (``GET /v1/models``)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url.rstrip("/") + "/v1/models", headers=headers, timeout=30.0, trust_env=False)
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise StageFailed(f"{url}: cannot list the served models ({type(exc).__name__}: {exc}); is the "
                          "server running? pass --url and --served-model-name") from None


def run_smoke(url: str, served_model_name: str, capture_dir: str | Path, *, tokens: int = 2048,
              api_key: str | None = None, timeout: float = 600.0, keep: bool = False,
              mode: CaptureMode = capture_modes.DEFAULT, suite: Suite | None = None,
              window_index: int = 0) -> SmokeResult:
    """Send one window, find and check its chunks, compare them to the returned logprobs.

    ``mode``: what the server saves (its ``KLDTUI_CAPTURE_MODE``). A mode that scores against the
    reference (score mode) needs ``suite``: the request is then window ``window_index`` of it, named
    so the server knows which reference rows to read, and the saved records' next-token
    log-probabilities are what is compared."""
    import httpx

    from kldtui.stages.capture import (
        check_chunk_dir,
        listing_wait,
        no_folder_hint,
        settled_folders,
        writer_records,
    )

    capture = Path(capture_dir)
    if not capture.is_dir():
        raise BadInput(f"{capture}: capture folder not found; pass --capture-dir, the folder the "
                       "server's VLLM_KLD_CAPTURE_DIR points at as seen from here")
    if mode.smoke_needs_window:
        if suite is None:
            raise BadInput(f"doctor --smoke --mode {mode.name}: --suite is missing: the server scores "
                           "against the reference, so the smoke request must be one of the suite's "
                           "windows; pass --suite (the suite folder as seen from here)")
        try:
            window = suite.window(window_index)
        except (KeyError, IndexError, ValueError):
            raise BadInput(f"{suite.path}: no window {window_index}; pass --window with one of "
                           f"{suite.windows[0].index}..{suite.windows[-1].index}") from None
        ids = [int(t) for t in suite.load_tokens(window, check_hash=True)]
        request_id = request_tag("smoke", window.index, secrets.token_hex(4))
    else:
        ids = smoke_token_ids(tokens)
        request_id = f"kldtui-smoke-{secrets.token_hex(4)}"
        window = WindowSpec(index=0, domain="smoke", domain_index=0, num_tokens=len(ids), token_file="",
                            token_ids_json_sha256="")
    tag = sanitize_request_id(request_id)
    body = {"model": served_model_name, "prompt": ids, "max_tokens": 1, "temperature": 0, "seed": 1,
            "prompt_logprobs": 1}
    headers = {"X-Request-Id": request_id}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    result = SmokeResult(ok=False)
    started = time.monotonic()
    try:
        response = httpx.post(url.rstrip("/") + "/v1/completions", json=body, headers=headers,
                              timeout=timeout, trust_env=False)
    except httpx.HTTPError as exc:
        raise StageFailed(f"{url}: the smoke request failed: {type(exc).__name__}: {exc}") from None
    result.seconds = time.monotonic() - started
    if response.status_code != 200:
        raise StageFailed(f"{url}: HTTP {response.status_code} to the smoke request: {response.text[:500]}")
    prompt_logprobs = response.json()["choices"][0].get("prompt_logprobs")
    if not prompt_logprobs or len(prompt_logprobs) != len(ids):
        raise StageFailed(f"{url}: the server returned no prompt logprobs for {len(ids)} tokens")
    result.lines.append(f"request {request_id}: {len(ids)} tokens answered in {result.seconds:.2f} s")

    def folders() -> list[Path]:
        try:
            return [p for p in capture.iterdir() if tag in p.name]
        except OSError:
            return []

    found = settled_folders(folders, window, kind=mode.chunks, settle_seconds=listing_wait(capture))
    if len(found) != 1:
        result.lines.append(f"no single capture folder for {request_id} in {capture} "
                            f"({len(found)} found); {no_folder_hint(capture)}")
        return result
    folder = found[0]
    try:
        checked = check_chunk_dir(folder, window, check_values=True, kind=mode.chunks)
        diff = _compare_logprobs(mode, checked, ids, prompt_logprobs)
    except BadInput as exc:
        result.lines.append(str(exc))
        return result
    finally:
        if not keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    result.max_abs_diff = diff
    records = writer_records(capture)
    writers = ", ".join(f"{r.get('host')}:{r.get('folder')}" for r in records) or "not recorded"
    result.lines.append(f"{plural(len(checked.chunks), 'chunk')}, rows 0..{checked.rows - 1}, vocabulary "
                        f"{checked.vocab_size} ({mode.label}); writer {writers}; read here on "
                        f"{writer_host()}")
    result.ok = diff <= LOGPROB_TOLERANCE
    verdict = "match" if result.ok else "DO NOT match"
    result.lines.append(f"captured rows {verdict} the server's prompt logprobs: largest difference "
                        f"{plain_number(diff)} (tolerance {LOGPROB_TOLERANCE:g})")
    return result


def _compare_logprobs(mode: CaptureMode, checked: Any, ids: list[int], prompt_logprobs: list[Any]) -> float:
    """Largest |saved log-probability of ids[r+1] at row r - the server's logprob of it at r+1|
    (the mode says what its saved rows give: :meth:`CaptureMode.smoke_logprobs`)."""
    worst = 0.0
    for chunk in checked.chunks:
        nxt = np.asarray(ids[chunk.row_start + 1:chunk.row_end + 1], dtype=np.int64)
        mine = mode.smoke_logprobs(chunk.path, nxt)
        for i in range(len(nxt)):
            r = chunk.row_start + i
            entry = prompt_logprobs[r + 1] or {}
            got = entry.get(str(ids[r + 1]))
            if got is None:
                raise BadInput(f"{chunk.path}: row {r}: the server returned no logprob for token "
                               f"{ids[r + 1]}")
            value = got["logprob"] if isinstance(got, dict) else float(got)
            worst = max(worst, abs(float(mine[i]) - float(value)))
    return worst
