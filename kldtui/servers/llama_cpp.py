"""``kind = "llama-cpp"``: a GGUF file run by llama-cpp-python inside kldtui's embedded
OpenAI-compatible server (``python -m kldtui.embedded.llama_cpp``), which kldtui starts on a
loopback port and stops when the run ends. Capture, finalize and compare are the embedded
server's and the vLLM hook's: the same chunks (logits mode) or score records (score mode).

Keys (besides the common ``served_model_name``, ``request_timeout``, ``api_key_env`` and the
launched server's ``python`` (an interpreter with kldtui and llama-cpp-python), ``vllm_args``
(appended to the command), ``env``, ``host``, ``port``, ``startup_timeout``)::

    model = "./model-Q4_K_M.gguf"  # required: the GGUF file
    n_ctx = 4096                   # context length: above the suite's window length (0: the model's
                                   # trained context, which can be 128k: llama.cpp then allocates its
                                   # KV cache and n_ctx x vocab float32 logits for all of it)
    n_batch = 512                  # llama.cpp's batch
    n_threads = 0                  # CPU threads (0: llama-cpp-python's default)
    n_gpu_layers = 0               # layers offloaded to the GPU (-1: all; a GPU build of llama-cpp-python)
    kv_type = "f32"                # KV cache type: "f32" (default) or "f16" (llama.cpp's default)
    seed = 0
    max_num_batched_tokens = 256   # prompt rows per capture chunk
    llama_args = { flash_attn = "true" }   # any other llama_cpp.Llama keyword (values read as JSON;
                                   # a key Llama does not take is refused before launching: its
                                   # **kwargs would drop a misspelled one without a word)

The token ids of the suite are evaluated as stored (no BOS added, nothing re-tokenized). The
model's vocabulary (the GGUF's token list) must equal the reference's: ``kldtui run`` checks it
before launching (GGUF conversions sometimes pad or trim the vocabulary).

Memory: llama-cpp-python holds the weights (unless offloaded), the float32 logits of every
position of its context (``n_ctx x vocabulary x 4`` bytes: 2.5 GiB for 4,096 x 163,840) and the KV
cache; :func:`memory_need` reckons them from the GGUF's header and ``kldtui run`` refuses a
configuration that exceeds the host's memory before launching.

``[reference] capture = "llama-cpp"`` serves ``model`` (required there: e.g. the F16 GGUF) with
the candidate's settings, as ``NAME-reference``.

A llama.cpp server running on this host, kldtui's or not, is known in /proc by :data:`SIGN`:
llama.cpp's ``llama-server``, llama-cpp-python's ``python -m llama_cpp.server`` or kldtui's
``python -m kldtui.embedded.llama_cpp``. Every GPU it sees counts as its: llama.cpp spreads
offloaded layers over all of them, and its command line does not say whether its build uses any.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.formats.gguf import GgufInfo
from kldtui.servers.base import (
    NOT_IDENTITY,
    Check,
    LaunchConfig,
    LaunchedKind,
    ServerConfig,
    fill,
    inherit,
)
from kldtui.text import human_bytes
from kldtui.this_host import ServerSign, runs_command, runs_module

SERVER_MODULE = "kldtui.embedded.llama_cpp"
KV_TYPES = ("f32", "f16")
LLAMA_CPP_PYTHON_SERVER = "llama_cpp.server"  # llama-cpp-python's own OpenAI-compatible server
INSTALL = "pip install llama-cpp-python into it, or give the python scripts/setup_llama_cpp.sh prints"


@dataclass(frozen=True)
class LlamaCppConfig(LaunchConfig):
    kind: str = "llama-cpp"
    model: Path | None = None
    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int = field(default=0, metadata=NOT_IDENTITY)  # each row is one thread's: the same figures
    n_gpu_layers: int = 0
    kv_type: str = "f32"
    seed: int = 0
    max_num_batched_tokens: int = 256
    llama_args: dict[str, str] = field(default_factory=dict)


def is_llama_cpp_server(argv: Sequence[str]) -> bool:
    """``llama-server`` (llama.cpp's), ``python -m llama_cpp.server`` (llama-cpp-python's) or
    ``python -m kldtui.embedded.llama_cpp`` (kldtui's, this kind's)."""
    return (runs_command(argv, "llama-server") or runs_module(argv, LLAMA_CPP_PYTHON_SERVER)
            or runs_module(argv, SERVER_MODULE))


def _every_gpu_it_sees(argv: Sequence[str]) -> int | None:
    return None


SIGN = ServerSign("a llama.cpp server", is_llama_cpp_server, _every_gpu_it_sees)


class LlamaCppKind(LaunchedKind):
    name = "llama-cpp"
    summary = "a GGUF file through llama-cpp-python in kldtui's embedded server (CPU, or GPU offload)"
    config_type = LlamaCppConfig
    reference_keys = ("model", "served_model_name")
    process_sign = SIGN

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        if "model" not in values:
            raise BadInput(f"{label} model is missing: the candidate's .gguf file")
        config = super().configure(values, base_dir=base_dir, label=label)
        c: LlamaCppConfig = self.own(config)
        if c.kv_type not in KV_TYPES:
            raise BadInput(f"{label} kv_type {c.kv_type!r} is not one of {', '.join(KV_TYPES)}")
        for key, low in (("n_ctx", 0), ("n_batch", 1), ("n_threads", 0), ("max_num_batched_tokens", 1)):
            if getattr(c, key) < low:
                raise BadInput(f"{label} {key} {getattr(c, key)} must be >= {low}")
        bad = [k for k in c.llama_args if not k.isidentifier()]
        if bad:
            raise BadInput(f"{label} llama_args key {bad[0]!r} is not a llama_cpp.Llama keyword")
        return config

    def reference_config(self, candidate: ServerConfig, values: dict[str, Any], *, base_dir: Path,
                         label: str) -> ServerConfig:
        if "model" not in values:
            raise BadInput(f"{label} capture = 'llama-cpp' needs model = the reference .gguf file")
        own = self.own(self.configure(values, base_dir=base_dir, label=label))
        given = {key: getattr(own, key) for key in values if key in self.reference_keys}
        given.setdefault("served_model_name", candidate.served_model_name + "-reference")
        config: ServerConfig = inherit(LlamaCppConfig, candidate, label=label, **given)
        return config

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        c: LlamaCppConfig = self.own(config)
        h = c.host if host is None else host
        p = c.port if port is None else port
        if c.model is None:
            raise BadInput(f"{c.label} model is not set; give the candidate's .gguf file")
        values = {"model": str(c.model), "host": h, "port": str(p), "served_model_name": c.served_model_name}
        argv = [c.python, "-m", SERVER_MODULE, "--model", str(c.model), "--host", h, "--port", str(p),
                "--served-model-name", c.served_model_name, "--n-ctx", str(c.n_ctx),
                "--n-batch", str(c.n_batch), "--n-gpu-layers", str(c.n_gpu_layers),
                "--kv-type", c.kv_type, "--seed", str(c.seed),
                "--max-num-batched-tokens", str(c.max_num_batched_tokens), "--max-num-seqs", "1"]
        if c.n_threads:
            argv += ["--n-threads", str(c.n_threads), "--n-threads-batch", str(c.n_threads)]
        for key, value in sorted(c.llama_args.items()):
            argv += ["--llama-arg", f"{key}={value}"]
        return argv + [fill(a, values) for a in c.vllm_args]

    def model(self, config: ServerConfig) -> str | None:
        path = self.own(config).model
        return None if path is None else str(path)

    def model_vocab(self, config: ServerConfig) -> int | None:
        from kldtui.formats.gguf import read_gguf

        c: LlamaCppConfig = self.own(config)
        if c.model is None:
            return None
        return read_gguf(c.model).vocab_size

    def max_prompt_tokens(self, config: ServerConfig) -> int | None:
        from kldtui.formats.gguf import read_gguf

        c: LlamaCppConfig = self.own(config)
        n_ctx = c.n_ctx
        if not n_ctx:
            if c.model is None or not c.model.is_file():
                return None  # said by problems()
            try:
                n_ctx = read_gguf(c.model).context_length or 0
            except BadInput:
                return None
        return n_ctx - 1 if n_ctx else None  # the embedded server needs one position past the prompt

    def problems(self, config: ServerConfig) -> list[str]:
        from kldtui.formats.gguf import read_gguf

        c: LlamaCppConfig = self.own(config)
        problems: list[str] = []
        if c.model is not None and c.model.is_dir():
            problems.append(f"{c.label} model = {str(c.model)!r} is a folder; give the path of the .gguf file"
                            f"{_ggufs_in(c.model)}")
        elif c.model is None or not c.model.is_file():
            problems.append(f"{c.label} model = {str(c.model)!r}: no such file; give the path of the "
                            ".gguf file")
        else:
            try:
                info = read_gguf(c.model)
            except BadInput as exc:
                problems.append(f"{c.label} model: {exc}")
            else:
                need = memory_need(c, info)
                if need.total > need.host:
                    problems.append(f"{c.label} model: llama.cpp needs {need.describe()}, more than this "
                                    f"host's {human_bytes(need.host)} of memory; lower n_ctx (the suite's "
                                    "window length + 1 is enough) or offload layers to a GPU (n_gpu_layers)")
        missing = _missing_engine(c.python)
        if missing:
            problems.append(f"{c.label} python = {c.python!r}: {missing}")
        elif c.llama_args and (known := _engine_keywords(c.python)) is not None:
            unknown = unknown_llama_keywords(sorted(c.llama_args), known)
            if unknown:
                problems.append(f"{c.label} llama_args: {unknown}")
        return problems + super().problems(c)

    def describe(self, config: ServerConfig) -> str:
        c: LlamaCppConfig = self.own(config)
        return f"llama.cpp serving {c.model.name if c.model else '?'}"

    def vocabulary_fix(self, config: ServerConfig, vocab: int) -> str:
        return ("GGUF conversions sometimes pad or trim the vocabulary: use a model converted with the "
                "reference model's full vocabulary")

    def memory_line(self, config: ServerConfig) -> str | None:
        from kldtui.formats.gguf import read_gguf

        c: LlamaCppConfig = self.own(config)
        if c.model is None or not c.model.is_file():
            return None  # said by problems()
        try:
            need = memory_need(c, read_gguf(c.model))
        except BadInput:
            return None
        return (f"llama.cpp needs {need.describe()} and its compute buffers, of this host's "
                f"{human_bytes(need.host)}")

    def doctor_checks(self, python: str | None, *, import_engine: bool) -> list[Check]:
        import sys

        py = python or sys.executable
        missing = _missing_engine(py, import_engine=import_engine)
        if missing:
            return [Check("llama-cpp-python", False, missing, required=False)]
        return [Check("llama-cpp-python", True, _engine_version(py) or "installed", required=False)]


@dataclass(frozen=True)
class MemoryNeed:
    """What llama-cpp-python holds in this host's memory for a GGUF (bytes)."""

    weights: int   # the tensors left on the CPU (all of them without n_gpu_layers)
    logits: int    # logits_all: n_ctx x vocabulary float32, every prompt position's
    kv_cache: int  # n_ctx x layers x (keys + values), kv_type; 0 when the header does not say
    host: int      # this host's physical memory

    @property
    def total(self) -> int:
        return self.weights + self.logits + self.kv_cache

    def describe(self) -> str:
        return (f"about {human_bytes(self.total)} (weights {human_bytes(self.weights)}, logits of every "
                f"position {human_bytes(self.logits)}, KV cache {human_bytes(self.kv_cache)})")


def memory_need(config: LlamaCppConfig, info: GgufInfo) -> MemoryNeed:
    """The memory a llama-cpp candidate takes on this host, from its GGUF's header and the
    config (llama.cpp's compute buffers come on top: tens to hundreds of MiB)."""
    n_ctx = config.n_ctx or info.context_length or 0
    per_token = info.kv_values_per_token() or 0
    offloaded = config.n_gpu_layers != 0  # weights and KV cache go (in part) to the GPU
    return MemoryNeed(weights=0 if offloaded else info.tensor_bytes,
                      logits=n_ctx * (info.vocab_size or 0) * 4,
                      kv_cache=0 if offloaded else n_ctx * per_token * (4 if config.kv_type == "f32" else 2),
                      host=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def unknown_llama_keywords(keys: list[str], known: list[str]) -> str | None:
    """Why ``keys`` (``--llama-arg`` keys) are not all ``llama_cpp.Llama`` keywords (None: they
    are). Its ``**kwargs`` takes any name and drops an unknown one without a word, so a misspelled
    ``flash_atn`` would run without flash attention and nobody would know."""
    import difflib

    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; give one of its keywords"
            return f"{key!r} is not a llama_cpp.Llama keyword{hint}"
    return None


def llama_keywords() -> list[str]:
    """The keywords ``llama_cpp.Llama`` takes by name (its ``**kwargs`` aside)."""
    import inspect

    import llama_cpp

    params = inspect.signature(llama_cpp.Llama.__init__).parameters.values()
    return sorted(p.name for p in params if p.name != "self"
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _ggufs_in(folder: Path) -> str:
    """The .gguf files a folder holds, for a message: " in it (a.gguf, b.gguf)", or nothing."""
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".gguf") and p.is_file())
    except OSError:
        return ""
    if not names:
        return " (this folder holds none)"
    shown = ", ".join(names[:4]) + (f", and {len(names) - 4} more" if len(names) > 4 else "")
    return f" in it ({shown})"


def _missing_engine(python: str, *, import_engine: bool = False) -> str | None:
    """Why ``python`` cannot run the server (None: it can). Without ``import_engine`` only the
    package is looked up, which costs a Python start, not llama.cpp's load."""
    probe = ("import llama_cpp" if import_engine else
             "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)")
    try:
        proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot be run ({exc}); set python to an interpreter with kldtui and llama-cpp-python"
    if proc.returncode != 0:
        return f"llama-cpp-python is not installed there; {INSTALL}"
    return None


def _engine_keywords(python: str) -> list[str] | None:
    """The keywords ``llama_cpp.Llama`` takes in ``python``'s llama-cpp-python (None: it cannot
    say; the server then says it when it starts). Imports llama.cpp: asked only for llama_args."""
    probe = ("import json; from kldtui.servers.llama_cpp import llama_keywords; "
             "print(json.dumps(llama_keywords()))")
    try:
        proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
        known = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return known if isinstance(known, list) and all(isinstance(k, str) for k in known) else None


def _engine_version(python: str) -> str | None:
    try:
        proc = subprocess.run([python, "-c", "import importlib.metadata as m; "
                               "print(m.version('llama_cpp_python'))"], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


KIND = LlamaCppKind()
