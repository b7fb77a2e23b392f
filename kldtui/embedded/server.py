"""An OpenAI-compatible HTTP server (stdlib ``http.server``) around :class:`TinyModel`.

It answers like vLLM wherever the capture client can see it: ``GET /health``, ``GET /version``,
``GET /v1/models`` and ``POST /v1/completions`` with ``prompt_logprobs``, the same response
shape, the same error bodies (``{"error": {"message", "type", "param", "code"}}``) and the same
request naming (``cmpl-<X-Request-Id or random hex>``, engine id ``<that>-0-<8 hex>``). Prompts
are token ids only (like vLLM with ``--skip-tokenizer-init``). Requests run one at a time
(``--max-num-seqs 1``), prefilled in chunks of ``--max-num-batched-tokens`` positions; when a
request asks for ``prompt_logprobs`` and a capture folder is set, each chunk's prompt logits go
to the capture mode's sink (:mod:`kldtui.capture_modes`), exactly like the vLLM hook, but written
at once on the request's thread.

Test-only fault injection: ``KLDTUI_EMBEDDED_FAULT`` holds comma-separated items:
``die-after-rows:N`` (the process exits abruptly once N prompt rows were captured),
``http-500`` (completions answer HTTP 500), ``sleep:S`` (wait S seconds before answering a
completion), ``chunk-delay:S`` (wait S seconds after each prefill chunk), ``nan-at-row:R`` (prompt
row R of every request gets a NaN logit), ``mask-at-row:R`` (prompt row R of every request gets
-inf for its lower half of logits, the next token's kept: a logits processor's mask, which capture,
finalize and compare accept). Never set it in use.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kldtui import __version__, capture_modes, settings
from kldtui.capture_modes import CaptureMode, ChunkRows, ServerSink
from kldtui.embedded.model import TinyModel
from kldtui.formats.chunks import abandoned_by_client, write_error_marker

MAX_LOGPROBS = 20


def log(level: str, message: str) -> None:
    """One vLLM-style log line on stderr (the launcher streams these as events)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [kldtui.embedded] {message}", file=sys.stderr, flush=True)


@dataclass
class Faults:
    die_after_rows: int | None = None
    http_500: bool = False
    sleep_s: float = 0.0
    chunk_delay_s: float = 0.0
    nan_at_row: int | None = None
    mask_at_row: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> Faults:
        faults = cls()
        for item in (text or "").split(","):
            name, _, value = item.strip().partition(":")
            if not name:
                continue
            if name == "die-after-rows":
                faults.die_after_rows = int(value)
            elif name == "http-500":
                faults.http_500 = True
            elif name == "sleep":
                faults.sleep_s = float(value)
            elif name == "chunk-delay":
                faults.chunk_delay_s = float(value)
            elif name == "nan-at-row":
                faults.nan_at_row = int(value)
            elif name == "mask-at-row":
                faults.mask_at_row = int(value)
            else:
                raise ValueError(f"unknown {settings.EMBEDDED_FAULT.name} item {item!r}")
        return faults


@dataclass
class ServerConfig:
    served_model_name: str = "kldtui-embedded"
    model: str = "kldtui-embedded"
    model_seed: int = 0
    vocab_size: int = 4096
    perturb: float = 0.0
    # standard deviation of the run-to-run noise added to each logit; in a mode that saves hidden
    # states, noise on those states that moves each logit as much (Prefill.with_state_noise)
    runtime_noise: float = 0.0
    runtime_seed: int = 0
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 1
    max_model_len: int = 4096
    capture_dir: Path | None = None
    api_key: str | None = None
    faults: Faults = field(default_factory=Faults)
    mode: CaptureMode = capture_modes.DEFAULT  # what each chunk becomes (kldtui.capture_modes)
    # the mode's settings, as a vLLM server reads them from its environment (e.g. score mode's
    # KLDTUI_SCORE_SUITE); python -m kldtui.embedded puts its flags there
    settings: Mapping[str, str] = field(default_factory=dict)


def runtime_noise(scale: float, seed: int, prompt: list[int], start: int,
                  shape: tuple[int, ...]) -> np.ndarray:
    """Run-to-run noise of a chunk: drawn from the run's seed, the prompt and the chunk's first row,
    so a resumed capture gets the same noise and a repeat run (another seed) different noise."""
    key = zlib.crc32(np.asarray(prompt, dtype=np.int64).tobytes())
    rng = np.random.default_rng([seed, key, start])
    noise: np.ndarray = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
    return noise


# draws run-to-run noise of a chunk: (standard deviation, shape) -> the noise (runtime_noise)
NoiseDraw = Callable[[float, tuple[int, ...]], np.ndarray]


class _InlineIO:
    """The embedded server's :class:`kldtui.capture_modes.ServerIO`: everything is written at once
    on the request's thread (the tiny model's logits are host arrays nobody reuses)."""

    def __init__(self, folder: Path) -> None:
        self._folder = str(folder)

    @property
    def folder(self) -> str:
        return self._folder

    @property
    def inline(self) -> bool:
        return True

    def on_writer_thread(self) -> bool:
        return True  # work runs where it is submitted

    def stage(self, tensor: Any, cols: int) -> Any:
        return tensor

    def submit_rows(self, request_id: str, row_start: int, parts: Sequence[Any],
                    write: Callable[[Any], None]) -> bool:
        rows = parts[0] if len(parts) == 1 else np.concatenate(list(parts))
        return self._run(request_id, row_start, int(rows.shape[0]), lambda: write(rows))

    def submit_job(self, request_id: str, row_start: int, rows: int, job: Callable[[], None]) -> bool:
        return self._run(request_id, row_start, rows, job)

    def _run(self, request_id: str, row_start: int, rows: int, job: Callable[[], None]) -> bool:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the hook never takes the engine down
            end = row_start + rows
            if abandoned_by_client(self._folder, request_id, exc):
                log("INFO", f"kld capture: rows {row_start}-{end} of {request_id} not written: the "
                            "client gave up on the request and removed its folder")
                return False
            self.fail(request_id, f"kld capture: could not write rows {row_start}-{end} of "
                                  f"{request_id}: {exc}")
            return False
        return True

    def fail(self, request_id: str, message: str) -> None:
        log("ERROR", message)
        try:
            write_error_marker(self._folder, request_id, message)
        except OSError as exc:
            log("ERROR", f"kld capture: could not write the error marker either: {exc}")

    def log(self, message: str) -> None:
        log("INFO", message)

    def device_sync_allowed(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


class Prefill(Protocol):
    """One prompt run through a model: its logits by rows, and what generation needs."""

    def logits(self, start: int, end: int) -> np.ndarray:
        """float32 logits ``[end - start, vocab]`` of prompt positions ``start..end``."""
        ...

    def hidden(self, start: int, end: int) -> np.ndarray | None:
        """The final hidden states of those positions, when the model gives them (None)."""
        ...

    def with_state_noise(self, start: int, end: int, logit_noise: float,
                         draw: NoiseDraw) -> tuple[np.ndarray, np.ndarray] | None:
        """Those rows' logits and final hidden states after run-to-run noise on the states, drawn by
        ``draw(standard deviation, shape)`` and sized to move each logit by about ``logit_noise``;
        None when the model gives no hidden states."""
        ...

    def next_logits(self, generated: list[int]) -> np.ndarray:
        """The next token's logits ``[vocab]`` after the prompt and ``generated`` tokens."""
        ...


class PromptModel(Protocol):
    """What the server runs: the tiny deterministic model (:class:`TinyPromptModel`) or a GGUF
    file through llama.cpp (:mod:`kldtui.embedded.llama_cpp`)."""

    @property
    def vocab_size(self) -> int:
        """The logits' width (token ids must be below it)."""
        ...

    def prefill(self, prompt: list[int]) -> Prefill:
        """Run the prompt's token ids as they are (no BOS added, nothing re-tokenized)."""
        ...


class TinyPromptModel:
    """:class:`TinyModel` as a :class:`PromptModel`."""

    def __init__(self, model: TinyModel) -> None:
        self.model = model

    @property
    def vocab_size(self) -> int:
        return int(self.model.vocab_size)

    def prefill(self, prompt: list[int]) -> Prefill:
        return _TinyPrefill(self.model, prompt)


class _TinyPrefill:
    def __init__(self, model: TinyModel, prompt: list[int]) -> None:
        self.model = model
        self.prompt = list(prompt)
        self.states = model.hidden(prompt)

    def logits(self, start: int, end: int) -> np.ndarray:
        return self.model.logits(self.states[start:end])

    def hidden(self, start: int, end: int) -> np.ndarray | None:
        rows: np.ndarray = self.states[start:end]
        return rows

    def with_state_noise(self, start: int, end: int, logit_noise: float,
                         draw: NoiseDraw) -> tuple[np.ndarray, np.ndarray] | None:
        states = self.states[start:end]
        scale = self.model.state_noise_scale(logit_noise)
        noise = draw(scale, (states.shape[0], states.shape[1] - 1))  # the bias unit is not a state
        noisy = self.model.noisy_states(states, noise)
        return self.model.logits(noisy), noisy

    def next_logits(self, generated: list[int]) -> np.ndarray:
        states = self.model.hidden(self.prompt + generated) if generated else self.states
        row: np.ndarray = self.model.logits(states[-1:])[0]
        return row


class ApiError(Exception):
    """An error answered to the client the way vLLM's OpenAI server does."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param,
                          "code": self.status}}


def _int_field(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{key} must be an integer, got {value!r}", param=key)
    return value


class Engine:
    """Runs completions on the tiny model, one request at a time."""

    def __init__(self, config: ServerConfig, model: PromptModel | None = None) -> None:
        self.config = config
        self.model: PromptModel = model or TinyPromptModel(
            TinyModel(config.vocab_size, seed=config.model_seed, perturb=config.perturb))
        self.vocab_size = self.model.vocab_size
        self.lock = threading.Lock()
        self.captured_rows = 0
        self.created = int(time.time())
        self.sink: ServerSink | None = None
        if config.capture_dir is not None:
            self.sink = config.mode.server_sink(_InlineIO(config.capture_dir), config.settings)

    def models(self) -> dict[str, Any]:
        cfg = self.config
        return {"object": "list", "data": [{
            "id": cfg.served_model_name, "object": "model", "created": self.created,
            "owned_by": "vllm", "root": cfg.model, "parent": None,
            "max_model_len": cfg.max_model_len,
        }]}

    def _validate(self, body: Any) -> tuple[list[int], int, int | None, float, int | None]:
        cfg = self.config
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != cfg.served_model_name:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
            prompt = prompt[0]
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                       and isinstance(prompt[0], str)):
            raise ApiError(400, "this server has no tokenizer (like vLLM with "
                                "--skip-tokenizer-init): send the prompt as a list of token ids",
                           param="prompt")
        if not isinstance(prompt, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise ApiError(400, "prompt must be a list of token ids", param="prompt")
        if not prompt:
            raise ApiError(400, "The decoder prompt cannot be empty", param="prompt")
        bad = [t for t in prompt if t < 0 or t >= self.vocab_size]
        if bad:
            raise ApiError(400, f"Token id {max(bad, key=abs)} is out of vocabulary", param="prompt")
        max_tokens = _int_field(body, "max_tokens", 16)
        assert max_tokens is not None
        if max_tokens < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
        if len(prompt) + max_tokens > cfg.max_model_len:
            raise ApiError(400, f"This model's maximum context length is {cfg.max_model_len} tokens. "
                                f"However, you requested {len(prompt) + max_tokens} tokens "
                                f"({len(prompt)} in the messages, {max_tokens} in the completion). "
                                "Please reduce the length of the messages or completion.",
                           param="max_tokens")
        prompt_logprobs = _int_field(body, "prompt_logprobs", None)
        if prompt_logprobs is not None and not 0 <= prompt_logprobs <= MAX_LOGPROBS:
            raise ApiError(400, f"Requested prompt logprobs of {prompt_logprobs}, which is greater "
                                f"than max allowed: {MAX_LOGPROBS}" if prompt_logprobs > 0 else
                                f"prompt_logprobs must be non-negative, got {prompt_logprobs}.",
                           param="prompt_logprobs")
        temperature = body.get("temperature", 1.0)
        if temperature is None:
            temperature = 1.0
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
            raise ApiError(400, f"temperature must be a non-negative number, got {temperature!r}",
                           param="temperature")
        seed = _int_field(body, "seed", None)
        return prompt, max_tokens, prompt_logprobs, float(temperature), seed

    def complete(self, body: Any, request_base: str) -> dict[str, Any]:
        cfg = self.config
        prompt, max_tokens, prompt_logprobs, temperature, seed = self._validate(body)
        response_id = f"cmpl-{request_base}"
        engine_id = f"{response_id}-0-{secrets.token_hex(4)}"
        faults = cfg.faults
        with self.lock:
            if faults.sleep_s:
                time.sleep(faults.sleep_s)
            if faults.http_500:
                raise ApiError(500, "EngineCore encountered an issue (simulated fault "
                                    f"{settings.EMBEDDED_FAULT.name}=http-500). See stack trace (above) "
                                    "for the root cause.",
                               "InternalServerError")
            started = time.monotonic()
            n = len(prompt)
            run = self.model.prefill(prompt)
            entries: list[dict[str, Any] | None] = [None]
            capture = cfg.capture_dir is not None and prompt_logprobs is not None
            step = cfg.max_num_batched_tokens
            for start in range(0, n, step):
                row_end = min(start + step, n - 1)
                if row_end <= start:
                    break
                logits, hidden = self._rows(run, prompt, start, row_end)
                if faults.nan_at_row is not None and start <= faults.nan_at_row < row_end:
                    logits[faults.nan_at_row - start, 0] = np.nan
                if faults.mask_at_row is not None and start <= faults.mask_at_row < row_end:
                    row = logits[faults.mask_at_row - start]
                    keep = prompt[faults.mask_at_row + 1]
                    masked = row < np.median(row)
                    masked[keep] = False
                    row[masked] = -np.inf
                if capture:
                    self._capture(engine_id, start, row_end, logits, prompt, hidden)
                if prompt_logprobs is not None:
                    entries.extend(_prompt_logprob_entries(logits, prompt[start + 1:row_end + 1],
                                                           prompt_logprobs))
                if faults.chunk_delay_s:
                    time.sleep(faults.chunk_delay_s)
            generated = self._generate(run, max_tokens, temperature, seed)
            log("INFO", f"Finished request {engine_id}: {n} prompt tokens, {len(generated)} "
                        f"generated, {time.monotonic() - started:.3f} s")
        return {
            "id": response_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": cfg.served_model_name,
            "choices": [{
                "index": 0,
                "text": "",
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": generated,
                "prompt_logprobs": entries if prompt_logprobs is not None else None,
                "prompt_token_ids": None,
            }],
            "usage": {"prompt_tokens": n, "completion_tokens": len(generated),
                      "total_tokens": n + len(generated), "prompt_tokens_details": None},
        }

    def _rows(self, run: Prefill, prompt: list[int], start: int,
              end: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Prompt rows ``start..end``'s logits and final hidden states, with the run's noise: on the
        hidden states when the capture mode saves them (a real runtime's vary from run to run too;
        the logits are then the noisy states' own, so the replay check still matches), else on the
        logits."""
        cfg = self.config
        if cfg.runtime_noise <= 0:
            return run.logits(start, end), run.hidden(start, end)

        def draw(scale: float, shape: tuple[int, ...]) -> np.ndarray:
            return runtime_noise(scale, cfg.runtime_seed, prompt, start, shape)

        if cfg.mode.saves_hidden_states:
            noisy = run.with_state_noise(start, end, cfg.runtime_noise, draw)
            if noisy is not None:
                return noisy
        logits = run.logits(start, end)
        logits += draw(cfg.runtime_noise, logits.shape)
        return logits, run.hidden(start, end)

    def _capture(self, engine_id: str, start: int, end: int, logits: np.ndarray,
                 prompt: list[int] | None = None, hidden: np.ndarray | None = None) -> None:
        assert self.sink is not None
        if self.sink.save(engine_id, start, ChunkRows(logits, self.vocab_size, hidden), prompt):
            self._count_rows(end - start)

    def _count_rows(self, rows: int) -> None:
        cfg = self.config
        self.captured_rows += rows
        limit = cfg.faults.die_after_rows
        if limit is not None and self.captured_rows >= limit:
            log("ERROR", f"EngineCore died unexpectedly after {self.captured_rows} captured rows "
                         f"(simulated fault {settings.EMBEDDED_FAULT.name}=die-after-rows:{limit})")
            os._exit(3)

    def _generate(self, run: Prefill, max_tokens: int, temperature: float, seed: int | None) -> list[int]:
        rng = np.random.default_rng(seed)
        out: list[int] = []
        for _ in range(max_tokens):
            logits = run.next_logits(out).astype(np.float64)
            if temperature == 0:
                token = int(np.argmax(logits))
            else:
                p = np.exp((logits - logits.max()) / temperature)
                token = int(rng.choice(len(p), p=p / p.sum()))
            out.append(token)
        return out


def _prompt_logprob_entries(logits: np.ndarray, next_tokens: list[int],
                            k: int) -> list[dict[str, Any]]:
    """vLLM's per-position dict: the actual token first, then the top ``k`` (ranks 1-based).

    Log-probabilities are ``logit - logsumexp(row)`` in float32, as vLLM's log-softmax gives,
    computed only where needed (the full log-softmax matrix is never built)."""
    peak = logits.max(axis=1)
    shifted = logits - peak[:, None]
    np.exp(shifted, out=shifted)
    lse = peak + np.log(shifted.sum(axis=1))
    rows = np.arange(logits.shape[0])
    actual = np.asarray(next_tokens, dtype=np.int64)
    actual_logit = logits[rows, actual]
    ranks = (logits > actual_logit[:, None]).sum(axis=1) + 1
    if k == 1:
        top = logits.argmax(axis=1)[:, None]
    elif k > 1:
        kk = min(k, logits.shape[1])
        top = np.argpartition(-logits, kk - 1, axis=1)[:, :kk]
    entries = []
    for r in range(logits.shape[0]):
        entry = {str(int(actual[r])): {"logprob": float(actual_logit[r] - lse[r]), "rank": int(ranks[r]),
                                       "decoded_token": None}}
        if k > 0:
            order = top[r][np.argsort(-logits[r, top[r]], kind="stable")]
            for rank, token in enumerate(order, start=1):
                entry.setdefault(str(int(token)), {"logprob": float(logits[r, token] - lse[r]),
                                                   "rank": rank, "decoded_token": None})
        entries.append(entry)
    return entries


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine: Engine  # set on the subclass made by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _access_log(self, status: int) -> None:
        phrase = self.responses.get(status, ("",))[0]
        print(f"INFO:     {self.client_address[0]}:{self.client_address[1]} - "
              f"\"{self.command} {self.path} HTTP/1.1\" {status} {phrase}", file=sys.stderr, flush=True)

    def _send(self, status: int, body: Any | None) -> None:
        data = b"" if body is None else json.dumps(body).encode("utf-8")
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access_log(status)

    def _authorized(self) -> bool:
        key = self.engine.config.api_key
        if key is None or self.path in ("/health", "/version"):
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if not self._authorized():
            return
        if self.path == "/health":
            self._send(200, None)
        elif self.path == "/version":
            self._send(200, {"version": f"kldtui-embedded-{__version__}"})
        elif self.path == "/v1/models":
            self._send(200, self.engine.models())
        elif self.path == "/v1/completions":
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            return
        if self.path != "/v1/completions":
            if self.path in ("/health", "/version", "/v1/models"):
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})
            return
        base = self.headers.get("X-Request-Id") or uuid.uuid4().hex
        try:
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise ApiError(400, f"request body is not valid JSON: {exc}") from None
            answer = self.engine.complete(body, base)
        except ApiError as exc:
            if exc.status >= 500:
                log("ERROR", exc.message)
            self._send(exc.status, exc.body())
            return
        self._send(200, answer)


def make_server(host: str, port: int, config: ServerConfig,
                model: PromptModel | None = None) -> ThreadingHTTPServer:
    engine = Engine(config, model)
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve(host: str, port: int, config: ServerConfig, model: PromptModel | None = None,
          what: str | None = None) -> None:
    """Build the model (the tiny one unless ``model`` is given; ``what`` describes it in the log),
    listen and serve until SIGINT/SIGTERM."""
    what = what or (f"model seed {config.model_seed}, vocab {config.vocab_size}, perturb "
                    f"{config.perturb}")
    log("INFO", f"kldtui embedded server {__version__}: {what}, max_num_batched_tokens "
                f"{config.max_num_batched_tokens}, capture dir {config.capture_dir or 'off'}, "
                f"{config.mode.label}")
    server = make_server(host, port, config, model)

    def _stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    bound = server.server_address[1]
    print(f"INFO:     Started server process [{os.getpid()}]", file=sys.stderr, flush=True)
    print("INFO:     Application startup complete.", file=sys.stderr, flush=True)
    print(f"INFO:     Uvicorn running on http://{host}:{bound} (Press CTRL+C to quit)",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        print("INFO:     Shutting down", file=sys.stderr, flush=True)
    finally:
        server.server_close()
