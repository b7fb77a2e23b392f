"""The capture hook as a vLLM plugin (entry point ``kldtui_capture`` in ``vllm.general_plugins``).

vLLM calls :func:`register` once in every process (API server, engine core, workers) before it
builds the model runner. With ``VLLM_KLD_CAPTURE_DIR`` unset it does nothing at all. With it set
it wraps, in a pip-installed and unmodified vLLM 0.32 / 0.33:

* V1 runner: ``GPUModelRunner._get_prompt_logprobs_dict(self, hidden_states,
  num_scheduled_tokens)`` (``CPUModelRunner`` inherits it). While that method runs, the model's
  ``compute_logits`` is wrapped too: each call there computes the prompt logits of one request's
  prefill chunk (``hidden_states[offset : offset + num_logits]`` with ``offset`` the request's
  ``query_start_loc``), and those logits, before any log-softmax, are the chunk.
* V2 runner: ``PromptLogprobsWorker.compute_prompt_logprobs(self, logits_fn, hidden_states,
  input_batch, all_token_ids, num_computed_tokens, prompt_lens)``. vLLM calls ``logits_fn``
  over consecutive slices of up to 1,024 rows of the whole batch; the wrapper keeps, per request
  that vLLM scores, the rows ``[query_start, query_end)`` (less the last row of a prompt whose
  prefill ends in this step) and writes them as one chunk starting at prompt row
  ``num_computed_prefill_tokens``.

Every chunk goes to the server's capture mode (``KLDTUI_CAPTURE_MODE``, :mod:`kldtui.capture_modes`:
its :class:`~kldtui.capture_modes.ServerSink`): in logits mode through
:func:`kldtui.formats.chunks.write_chunk` on a bounded background thread (:mod:`kldtui.hook.writer`),
so the engine's thread only starts the device-to-host copy; in score mode it is scored against the
reference and its records are written; in hidden mode the rows' final normalized hidden states are
saved: the tensor handed to the model's ``compute_logits`` (V1: ``prompt_hidden_states``; V2: the
slice passed to ``logits_fn``), which is the final norm's output (vLLM's models apply the norm at
the end of ``forward`` and ``compute_logits`` multiplies by the head; a model whose logits
processor scales or soft-caps the logits, or whose ``compute_logits`` does more than the product,
is caught by finalize's replay check). Every tensor-parallel rank holds the whole hidden state,
so the writer rank below writes it as it writes logits.
Only kldtui's own requests are captured (their ids carry its ``X-Request-Id``, ``kldtui-...``),
unless ``KLDTUI_CAPTURE_REQUESTS=all`` (:func:`is_captured`).
Only vLLM's output rank writes: the first tensor-parallel rank and the first prefill-context-
parallel rank of the last pipeline stage (on every data-parallel rank), the rank vLLM's executors
take the model's output from. A failure to save is logged and leaves
:func:`kldtui.formats.chunks.write_error_marker` in the request folder; it never reaches vLLM.

At :func:`register` the process logs its host name and capture folder; the writer rank also
leaves ``.kldtui-writers/<host>-<pid>.json`` in the folder, so a capture client on another node
can tell whether the writer's folder is the one it sees (docs/FORMATS.md, multi-node capture).
If a method to wrap is missing or its signature changed, :func:`register` raises
:class:`CaptureHookError` naming the vLLM version: the server does not start capturing nothing.

The source patch (``patches/vllm-kld-capture.patch``) calls :func:`save_chunk` from inside
vLLM instead; when a patched vLLM is found the plugin leaves that runner alone.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from kldtui import capture_modes, settings
from kldtui.capture_modes import ChunkRows, ServerSink
from kldtui.formats.chunks import (
    abandoned_by_client,
    is_kldtui_request,
    is_skipped_request,
    write_error_marker,
    writer_host,
    writer_record_path,
    writers_dir,
)
from kldtui.hook.writer import Staged, get_writer, gpu_sync_allowed

# vLLM configures the "vllm" logger; a child of it shows up in the server's log.
log = logging.getLogger("vllm.kldtui_capture")

V1_MODULE = "vllm.v1.worker.gpu_model_runner"
V1_CLASS = "GPUModelRunner"
V1_METHOD = "_get_prompt_logprobs_dict"
V1_PARAMS = ("self", "hidden_states", "num_scheduled_tokens")
V2_MODULE = "vllm.v1.worker.gpu.sample.prompt_logprob"
V2_CLASS = "PromptLogprobsWorker"
V2_METHOD = "compute_prompt_logprobs"
V2_PARAMS = ("self", "logits_fn", "hidden_states", "input_batch", "all_token_ids",
             "num_computed_tokens", "prompt_lens")
# Subclasses of GPUModelRunner that must not override the wrapped method.
V1_SUBCLASS_MODULES = ("vllm.v1.worker.cpu_model_runner",)
PATCH_MARKER = "KLDTUI_CAPTURE_PATCHED"  # set to True at module level by the source patch
WRAPPED_ATTR = "__kldtui_capture__"


class CaptureHookError(RuntimeError):
    """The hook cannot be installed into this vLLM (a wrapped method is missing or changed)."""


_state_lock = threading.Lock()
_registered: dict[str, str] = {}  # target -> "plugin" | "patch"
_writer_rank_cache: bool | None = None


def capture_dir() -> str | None:
    """The capture folder, or None when capture is off (the variable unset or empty)."""
    value = settings.CAPTURE_DIR.get()
    return str(value) if value is not None else None


def vllm_version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - only for messages
        return "not importable"


# ----------------------------------------------------------------------------- writer rank
def _compute_writer_rank() -> bool | None:
    """True on vLLM's output rank; None while vLLM's groups are not set up.

    The output rank (``MultiprocExecutor._get_output_rank``) is the first TP rank and the first
    prefill-context-parallel rank of the last PP stage; each PCP rank has its own TP rank 0, so
    checking TP alone would write every chunk once per PCP rank.
    """
    try:
        from vllm.distributed import parallel_state as ps
    except Exception:  # noqa: BLE001 - no vLLM distributed module: a single process
        return True
    try:
        initialized = ps.model_parallel_is_initialized()
    except Exception:  # noqa: BLE001 - groups not set up (yet) in this process: not known yet
        initialized = False
    if not initialized:
        return None
    tp = ps.get_tp_group()
    pp = ps.get_pp_group()
    pcp_rank = 0
    get_pcp = getattr(ps, "get_pcp_group", None)  # vLLM without prefill context parallelism
    if get_pcp is not None:
        try:
            pcp_rank = int(get_pcp().rank_in_group)
        except (AssertionError, AttributeError):
            pcp_rank = 0  # the group is not set up: no PCP
    return bool(tp.rank_in_group == 0 and pcp_rank == 0 and pp.is_last_rank)


def is_writer_rank() -> bool:
    """Whether this process writes chunks (cached once vLLM's parallel groups exist)."""
    global _writer_rank_cache
    if _writer_rank_cache is not None:
        return _writer_rank_cache
    found = _compute_writer_rank()
    if found is None:
        return True  # no parallel groups: this is the only rank
    _writer_rank_cache = found
    return found


# ----------------------------------------------------------------------------- saving
_announced: set[str] = set()


def is_captured(request_id: str) -> bool:
    """Whether this request's rows are saved: never a warm-up or dummy batch; kldtui's own
    requests only (:func:`kldtui.formats.chunks.is_kldtui_request`) unless
    ``KLDTUI_CAPTURE_REQUESTS=all`` asks for every one, as the original patch captures. Another
    client's prompt-logprobs request is then none of the hook's business: no chunk, no marker."""
    if is_skipped_request(request_id):
        return False
    return settings.CAPTURE_REQUESTS.get() == "all" or is_kldtui_request(request_id)


def announce_writer(folder: str) -> None:
    """Once per process and folder: log and record that this host writes chunks into ``folder``.

    The record (``.kldtui-writers/<host>-<pid>.json``) is how a capture client on another node
    learns whether the writer shares its folder; never raises.
    """
    if folder in _announced:
        return
    _announced.add(folder)
    host, where = writer_host(), os.path.abspath(folder)
    log.info("kldtui capture writer: host %s (pid %d) writes chunks to %s", host, os.getpid(), where)
    try:
        writers_dir(folder).mkdir(parents=True, exist_ok=True)
        doc = {"host": host, "pid": os.getpid(), "folder": where, "since": time.time(),
               "vllm": vllm_version()}
        from kldtui.formats.atomic import write_json_atomic

        write_json_atomic(writer_record_path(folder, host, os.getpid()), doc)
    except Exception as exc:  # noqa: BLE001 - a read-only folder shows up as failed chunks anyway
        log.warning("kldtui capture: could not record the writer in %s: %s", folder, exc)


def save_chunk(request_id: str, row_start: int, logits: Any, vocab_size: int,
               directory: str | None = None, prompt: Any = None, hidden: Any = None) -> bool:
    """Hand one chunk to the server's capture mode (:func:`server_sink`); never raises.

    Checks the writer rank before anything is copied off the device. Returns True when handed
    over (or deliberately skipped: warm-up/dummy request, another rank, capture off), False when
    it failed at once; a failure, now or in the background writer, is logged and leaves an error
    marker in the request folder for the capture client. ``prompt`` (the request's prompt token
    ids) and ``hidden`` (the rows' final hidden states, compute_logits' input) when the runner
    has them: score mode checks the prompt is the window's.
    """
    folder = directory or capture_dir()
    if folder is None or not is_captured(request_id) or not is_writer_rank():
        return True
    announce_writer(folder)
    return server_sink(folder).save(request_id, int(row_start), ChunkRows(logits, int(vocab_size), hidden),
                                    prompt)


class _HookIO:
    """The hook's :class:`kldtui.capture_modes.ServerIO` for one capture folder: work goes to this
    process's background writer (:func:`kldtui.hook.writer.get_writer`)."""

    def __init__(self, folder: str) -> None:
        self._folder = folder

    @property
    def folder(self) -> str:
        return self._folder

    @property
    def inline(self) -> bool:
        return get_writer().inline

    def on_writer_thread(self) -> bool:
        return get_writer().on_writer_thread()

    def stage(self, tensor: Any, cols: int) -> Staged:
        return get_writer().stage(tensor, cols)

    def submit_rows(self, request_id: str, row_start: int, parts: Sequence[Any],
                    write: Callable[[Any], None]) -> bool:
        get_writer().submit_rows(self._folder, request_id, row_start, list(parts), write,
                                 _on_error(request_id, row_start, self._folder))
        return True

    def submit_job(self, request_id: str, row_start: int, rows: int, job: Callable[[], None]) -> bool:
        get_writer().submit_job(self._folder, request_id, row_start, rows, job,
                                _on_error(request_id, row_start, self._folder))
        return True

    def fail(self, request_id: str, message: str) -> None:
        fail_request(request_id, message, self._folder)

    def log(self, message: str) -> None:
        log.info("%s", message)

    def device_sync_allowed(self) -> AbstractContextManager[Any]:
        return gpu_sync_allowed()  # type: ignore[no-any-return]


_sinks: dict[tuple[str, str], ServerSink] = {}


def server_sink(folder: str) -> ServerSink:
    """What this process does with each chunk written into ``folder``: the sink of the mode its
    environment names (``KLDTUI_CAPTURE_MODE``; score mode reads ``KLDTUI_SCORE_*`` there too),
    made at first use."""
    mode = capture_modes.server_mode()
    with _state_lock:
        sink = _sinks.get((folder, mode.name))
        if sink is None:
            sink = mode.server_sink(_HookIO(folder), None)  # None: read this process's settings
            _sinks[(folder, mode.name)] = sink
        return sink


def _on_error(request_id: str, row_start: int, folder: str) -> Any:
    def failed(exc: BaseException) -> None:
        if abandoned_by_client(folder, request_id, exc):
            log.info("kldtui capture: rows from %d of request %r not written: the client gave up "
                     "on the request and removed its folder", row_start, request_id)
            return
        fail_request(request_id, f"kldtui capture: saving rows from {row_start} of request "
                     f"{request_id!r} failed: {type(exc).__name__}: {exc}", folder)
    return failed


def fail_request(request_id: str, message: str, directory: str | None = None) -> None:
    """Log a capture failure and leave the error marker in the request folder; never raises."""
    if not is_captured(request_id):
        return
    folder = directory or capture_dir()
    log.error(message)
    if folder is None:
        return
    try:
        write_error_marker(folder, request_id, message)
    except Exception as exc:  # noqa: BLE001 - best effort: the failure itself is logged above
        log.error("kldtui capture: could not leave the error marker for %r either: %s",
                  request_id, exc)


def _row_offset(part: Any, whole: Any) -> int | None:
    """Row index of ``part`` inside ``whole`` when ``part`` is a row slice (view) of it."""
    try:
        if part.device != whole.device or part.dim() < 1 or whole.dim() < 1:
            return None
        stride = int(whole.stride(0)) * int(whole.element_size())
        if stride <= 0:
            return None
        delta = int(part.data_ptr()) - int(whole.data_ptr())
        if delta < 0 or delta % stride:
            return None
        return delta // stride
    except Exception:  # noqa: BLE001 - not a tensor view we can place
        return None


# ----------------------------------------------------------------------------- V1 wrapper
def _v1_vocab_size(runner: Any, logits: Any) -> int:
    try:
        return int(runner.model_config.get_vocab_size())
    except Exception:  # noqa: BLE001 - a runner without that config: the logits' own width
        return int(logits.shape[-1])


def _v1_plan(runner: Any, num_scheduled_tokens: dict[str, int]) -> dict[int, tuple[str, int]]:
    """Batch row offset -> (request id, first prompt row) for the requests vLLM will score."""
    plan: dict[int, tuple[str, int]] = {}
    for req_id in list(runner.num_prompt_logprobs):
        if num_scheduled_tokens.get(req_id) is None:
            continue
        request = runner.requests.get(req_id)
        if request is None or getattr(request, "prompt_token_ids", None) is None:
            continue
        row_start = int(request.num_computed_tokens)
        num_logits = min(int(num_scheduled_tokens[req_id]),
                         len(request.prompt_token_ids) - row_start - 1)
        if num_logits <= 0:
            continue  # the last prompt row was scored in an earlier step: nothing to compute
        req_idx = runner.input_batch.req_id_to_index[req_id]
        offset = int(runner.query_start_loc.np[req_idx])
        plan[offset] = (req_id, row_start)
    return plan


def wrap_v1(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``GPUModelRunner._get_prompt_logprobs_dict``."""

    @functools.wraps(original)
    def _get_prompt_logprobs_dict(self: Any, hidden_states: Any, num_scheduled_tokens: Any,
                                  *args: Any, **kwargs: Any) -> Any:
        folder = capture_dir()
        if folder is None or not getattr(self, "num_prompt_logprobs", None) or not is_writer_rank():
            return original(self, hidden_states, num_scheduled_tokens, *args, **kwargs)
        try:
            plan = _v1_plan(self, num_scheduled_tokens)
        except Exception as exc:  # noqa: BLE001 - never take the engine down: these requests fail
            for req_id in list(getattr(self, "num_prompt_logprobs", {}) or {}):
                fail_request(req_id, f"kldtui capture: cannot map the batch's requests "
                             f"({type(exc).__name__}: {exc})", folder)
            return original(self, hidden_states, num_scheduled_tokens, *args, **kwargs)
        model = self.model
        had_own = "compute_logits" in getattr(model, "__dict__", {})
        inner = model.compute_logits

        def compute_logits(prompt_hidden_states: Any, *a: Any, **kw: Any) -> Any:
            logits = inner(prompt_hidden_states, *a, **kw)
            offset = _row_offset(prompt_hidden_states, hidden_states)
            target = plan.pop(offset, None) if offset is not None else None
            if target is None:
                log.error("kldtui capture: compute_logits called on rows that match no "
                          "prompt-logprobs request (offset %s); not captured", offset)
                return logits
            req_id, row_start = target
            # padded vocab columns never leave the device (save_chunk stages [..., :vocab])
            request = self.requests.get(req_id)  # score mode checks the prompt is the window's
            save_chunk(req_id, row_start, logits, _v1_vocab_size(self, logits), folder,
                       getattr(request, "prompt_token_ids", None), prompt_hidden_states)
            return logits

        setattr(model, "compute_logits", compute_logits)  # noqa: B010 - an instance override
        try:
            result = original(self, hidden_states, num_scheduled_tokens, *args, **kwargs)
        finally:
            if had_own:
                setattr(model, "compute_logits", inner)  # noqa: B010
            else:
                delattr(model, "compute_logits")  # noqa: B010
        for req_id, row_start in plan.values():
            fail_request(req_id, f"kldtui capture: vLLM computed no prompt logits for rows from "
                         f"{row_start} of {req_id!r} where they were expected", folder)
        return result

    setattr(_get_prompt_logprobs_dict, WRAPPED_ATTR, True)
    return _get_prompt_logprobs_dict


# ----------------------------------------------------------------------------- V2 wrapper
def _v2_plan(worker: Any, input_batch: Any, prompt_lens: Any) -> list[tuple[str, int, int, int]]:
    """(request id, batch row start, batch row end, first prompt row) for each scored request.

    Mirrors ``PromptLogprobsWorker.compute_prompt_logprobs``: requests that asked for prompt
    logprobs, whose prompt is still being prefilled, and that were not resumed after
    preemption; the last row of a prompt that finishes in this step is not a prompt row.
    """
    import numpy as np

    idx_mapping = np.asarray(input_batch.idx_mapping_np)
    needs = np.asarray(worker.uses_prompt_logprobs)[idx_mapping].copy()
    if not needs.any():
        return []
    lens = np.asarray(prompt_lens)[idx_mapping]
    computed = np.asarray(input_batch.num_computed_prefill_tokens_np)
    needs &= (computed < lens) & ~(lens < np.asarray(input_batch.prefill_len_np))
    scheduled = np.asarray(input_batch.num_scheduled_tokens)
    chunked = (computed + scheduled) < lens
    qsl = np.asarray(input_batch.query_start_loc_np)
    plan = []
    for i, req_id in enumerate(input_batch.req_ids):
        if not needs[i]:
            continue
        start, end = int(qsl[i]), int(qsl[i + 1])
        if not chunked[i]:
            end -= 1
        if start < end:
            plan.append((str(req_id), start, end, int(computed[i])))
    return plan


class V2BatchCapture:
    """Captures one V2 batch: wrap the ``logits_fn`` vLLM passes, then :meth:`save` the chunks.

    Each slice of a scored request's rows goes to the mode's sink as vLLM computes it
    (:meth:`~kldtui.capture_modes.ServerSink.take`: logits mode starts the copy, score mode scores
    it); :meth:`save` hands each request's chunk over once all its rows were seen
    (:meth:`~kldtui.capture_modes.ServerSink.put`). Used by the plugin's wrapper and by the source
    patch (which builds it inside ``compute_prompt_logprobs`` before ``prompt_lens`` is re-indexed
    there).
    """

    def __init__(self, worker: Any, hidden_states: Any, input_batch: Any, prompt_lens: Any,
                 directory: str | None = None) -> None:
        self.folder = directory or capture_dir()
        self.hidden_states = hidden_states
        self.vocab_size: int | None = None
        self._rows_seen = 0  # for slices that are not views of hidden_states
        self.plan: list[tuple[str, int, int, int]] = []
        # per request: (first batch row, rows, the sink's piece or None when it failed)
        self.pieces: dict[str, list[tuple[int, int, Any]]] = {}
        self.sink: ServerSink | None = None
        if self.folder is None or not is_writer_rank():
            return
        try:
            self.plan = [p for p in _v2_plan(worker, input_batch, prompt_lens) if is_captured(p[0])]
        except Exception as exc:  # noqa: BLE001 - never take the engine down: these requests fail
            for req_id in getattr(input_batch, "req_ids", []):
                fail_request(str(req_id), f"kldtui capture: cannot map the batch's requests "
                             f"({type(exc).__name__}: {exc})", self.folder)
        self.pieces = {req_id: [] for req_id, *_ in self.plan}
        if self.plan:
            announce_writer(self.folder)
            self.sink = server_sink(self.folder)

    @property
    def active(self) -> bool:
        return bool(self.plan)

    def wrap(self, logits_fn: Callable[..., Any]) -> Callable[..., Any]:
        if not self.plan:
            return logits_fn

        def capturing_logits_fn(part: Any, *a: Any, **kw: Any) -> Any:
            logits = logits_fn(part, *a, **kw)
            try:
                self._take(part, logits)
            except Exception as exc:  # noqa: BLE001 - never take the engine down: these requests fail
                for req_id, *_ in self.plan:
                    fail_request(req_id, f"kldtui capture: taking rows failed: "
                                 f"{type(exc).__name__}: {exc}", self.folder)
                self.plan = []
            return logits

        return capturing_logits_fn

    def _take(self, part: Any, logits: Any) -> None:
        base = _row_offset(part, self.hidden_states)
        if base is None:
            base = self._rows_seen
        rows = int(logits.shape[0])
        self._rows_seen = base + rows
        if self.vocab_size is None:
            self.vocab_size = int(logits.shape[-1])
        assert self.sink is not None  # made with the plan
        for req_id, start, end, row0 in self.plan:
            lo, hi = max(start, base), min(end, base + rows)
            if lo < hi:  # taken now: vLLM drops the logits afterwards
                rows_ = ChunkRows(logits[lo - base:hi - base], self.vocab_size, part[lo - base:hi - base])
                self.pieces[req_id].append((lo, hi - lo, self.sink.take(req_id, row0 + (lo - start), rows_)))

    def save(self) -> None:
        """Hand each scored request's chunk of the batch to the sink; never raises."""
        if not self.plan or self.folder is None or self.sink is None:
            return
        for req_id, start, end, row_start in self.plan:
            parts = sorted(self.pieces[req_id], key=lambda p: p[0])
            got = sum(p[1] for p in parts)
            if got != end - start or not parts or parts[0][0] != start:
                fail_request(req_id, f"kldtui capture: saw {got} of the {end - start} rows "
                             f"from {row_start} of {req_id!r}; not saved", self.folder)
                continue
            if any(p[2] is None for p in parts):
                continue  # the sink reported it
            self.sink.put(req_id, row_start, [p[2] for p in parts], int(self.vocab_size or 0))
        self.plan = []


def wrap_v2(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``PromptLogprobsWorker.compute_prompt_logprobs``."""

    @functools.wraps(original)
    def compute_prompt_logprobs(self: Any, logits_fn: Callable[..., Any], hidden_states: Any,
                                input_batch: Any, *args: Any, **kwargs: Any) -> Any:
        if capture_dir() is None:
            return original(self, logits_fn, hidden_states, input_batch, *args, **kwargs)
        prompt_lens = args[2] if len(args) >= 3 else kwargs.get("prompt_lens")
        capture = V2BatchCapture(self, hidden_states, input_batch, prompt_lens)
        result = original(self, capture.wrap(logits_fn), hidden_states, input_batch,
                          *args, **kwargs)
        capture.save()
        return result

    setattr(compute_prompt_logprobs, WRAPPED_ATTR, True)
    return compute_prompt_logprobs


# ----------------------------------------------------------------------------- install
def _check_params(func: Any, expected: tuple[str, ...], where: str) -> None:
    params = tuple(inspect.signature(func).parameters)
    if params[: len(expected)] != expected:
        raise CaptureHookError(
            f"kldtui capture hook: {where} has parameters {params}, expected {expected}; "
            f"vLLM {vllm_version()} is not supported by this kldtui (capture would be wrong)")


def _install_v1() -> str:
    import importlib

    try:
        module = importlib.import_module(V1_MODULE)
    except Exception as exc:  # re-raised as the hook's own error, naming the vLLM version
        raise CaptureHookError(f"kldtui capture hook: cannot import {V1_MODULE} "
                               f"({type(exc).__name__}: {exc}); vLLM {vllm_version()}") from exc
    if getattr(module, PATCH_MARKER, False):
        return "patch"
    cls = getattr(module, V1_CLASS, None)
    func = getattr(cls, V1_METHOD, None) if cls is not None else None
    if func is None:
        raise CaptureHookError(f"kldtui capture hook: {V1_MODULE}.{V1_CLASS}.{V1_METHOD} is "
                               f"missing in vLLM {vllm_version()}; cannot capture prompt logits")
    assert cls is not None  # func was found on it
    if getattr(func, WRAPPED_ATTR, False):
        return "plugin"
    _check_params(func, V1_PARAMS, f"{V1_CLASS}.{V1_METHOD}")
    setattr(cls, V1_METHOD, wrap_v1(func))
    for name in V1_SUBCLASS_MODULES:
        try:
            sub = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - platform without that runner
            continue
        for obj in vars(sub).values():
            if (isinstance(obj, type) and issubclass(obj, cls) and obj is not cls
                    and V1_METHOD in vars(obj)):
                raise CaptureHookError(
                    f"kldtui capture hook: {name}.{obj.__name__} overrides {V1_METHOD} in "
                    f"vLLM {vllm_version()}; the hook would capture nothing there")
    return "plugin"


def _install_v2() -> str | None:
    import importlib
    import importlib.util

    try:
        spec = importlib.util.find_spec(V2_MODULE)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None  # this vLLM has no V2 runner
    try:
        module = importlib.import_module(V2_MODULE)
    except Exception as exc:  # noqa: BLE001 - logged: the V2 runner cannot run here either
        # (its own imports fail); say so, do not stop.
        log.warning("kldtui capture: V2 runner module %s does not import (%s: %s); "
                    "only the V1 runner is hooked", V2_MODULE, type(exc).__name__, exc)
        return None
    if getattr(module, PATCH_MARKER, False):
        return "patch"
    cls = getattr(module, V2_CLASS, None)
    func = getattr(cls, V2_METHOD, None) if cls is not None else None
    if func is None:
        raise CaptureHookError(f"kldtui capture hook: {V2_MODULE}.{V2_CLASS}.{V2_METHOD} is "
                               f"missing in vLLM {vllm_version()}; the V2 runner would capture "
                               "nothing")
    if getattr(func, WRAPPED_ATTR, False):
        return "plugin"
    _check_params(func, V2_PARAMS, f"{V2_CLASS}.{V2_METHOD}")
    setattr(cls, V2_METHOD, wrap_v2(func))
    return "plugin"


def install() -> dict[str, str]:
    """Install the hook now; returns ``{"v1": "plugin"|"patch", "v2": ...}``. Idempotent."""
    with _state_lock:
        if not _registered:
            found = {"v1": _install_v1()}
            v2 = _install_v2()
            if v2 is not None:
                found["v2"] = v2
            _registered.update(found)
        return dict(_registered)


def installed() -> dict[str, str]:
    """What :func:`install` hooked in this process (empty before, or when capture is off)."""
    return dict(_registered)


def register() -> None:
    """vLLM's plugin entry point. Inactive unless ``VLLM_KLD_CAPTURE_DIR`` is set."""
    folder = capture_dir()
    if folder is None:
        return
    # a bad value stops the server now, naming the variable, instead of failing every window
    settings.check_environment(None, settings.READ_BY_SERVER)
    capture_modes.server_mode()  # an unknown capture mode too
    found = install()
    log.info("kldtui capture hook active (vLLM %s): %s; host %s (pid %d), chunks go to %s",
             vllm_version(), ", ".join(f"{k} runner via {v}" for k, v in sorted(found.items())),
             writer_host(), os.getpid(), os.path.abspath(folder))


def flush() -> None:
    """Wait until every chunk queued in this process is written (or failed)."""
    get_writer().flush()
