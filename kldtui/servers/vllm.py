"""``kind = "vllm"``: kldtui launches vLLM with the capture hook and stops it when the run ends.

Keys (besides the common ``served_model_name``, ``request_timeout``, ``api_key_env``)::

    model = "/path/to/candidate"   # required; substituted for {model}; a path or a Hub model id
    python = "python"              # the interpreter that runs vLLM (default: this one)
    launcher = ["-m", "vllm.entrypoints.cli.main", "serve", "{model}"]
    vllm_args = ["--trust-remote-code", "--host", "{host}", "--port", "{port}", ...]
    env = { VLLM_TRITON_MLA_STATIC_KV_SPLITS = "8" }
    host = "127.0.0.1"             # substituted for {host}
    port = 8000                    # substituted for {port}; 0 picks a free port
    startup_timeout = 3600.0

The command is ``[python, *launcher, "--served-model-name", NAME, *vllm_args]`` after
substituting ``{model}``, ``{host}``, ``{port}``, ``{served_model_name}``;
``--served-model-name`` is only added when vllm_args does not name it, and ``--host``/``--port``
are appended when vllm_args does not name them. The flags the capture itself needs are added by
the launcher (kldtui.stages.serve.ensure_capture_flags), which says so.

``[reference] capture = "vllm"`` serves ``model`` (required there) with the candidate's settings,
``vllm_args`` and ``served_model_name`` if given (default: the candidate's name + ``-reference``).

A vLLM server running on this host, kldtui's or not, is known in /proc by :data:`SIGN`: ``vllm
serve`` or a ``vllm.entrypoints`` module on its command line (its GPUs: the first TP x PP x local
DP it sees), or the title vLLM gives its other processes (``VLLM::EngineCore``, ``VLLM::Worker_TP0``:
they say nothing of their GPUs, so all count as its).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.servers.base import (
    Check,
    HubModel,
    LaunchConfig,
    LaunchedKind,
    ServerConfig,
    fill,
    flag_value,
    has_flag,
    inherit,
    local_model,
)
from kldtui.this_host import ServerSign, runs_command, runs_module

DEFAULT_VLLM_LAUNCHER = ("-m", "vllm.entrypoints.cli.main", "serve", "{model}")

# the flags whose values multiply to the GPUs a server uses (the first a command line gives of each)
_PARALLEL_FLAGS = (("--tensor-parallel-size", "-tp"), ("--pipeline-parallel-size", "-pp"),
                   ("--data-parallel-size-local", "--data-parallel-size", "-dp"))


def _flag_int(argv: Sequence[str], names: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            try:
                return int(value)
            except ValueError:
                return None
    return None


def parallel_size(argv: Sequence[str]) -> int:
    """The GPUs a vLLM server started with ``argv`` uses: TP x PP x local DP (a flag not given,
    or not a number, counts as 1)."""
    size = 1
    for names in _PARALLEL_FLAGS:
        n = _flag_int(argv, names)
        if n is not None:
            size *= max(1, n)
    return size


def is_vllm_server(argv: Sequence[str]) -> bool:
    """``vllm serve`` (the console script, or run by its interpreter) or a ``vllm.entrypoints``
    module (``python -m vllm.entrypoints.openai.api_server``, kldtui's launcher's ``cli.main``)."""
    return runs_command(argv, "vllm", "serve") or runs_module(argv, "vllm.entrypoints")


def is_vllm_helper(argv: Sequence[str]) -> bool:
    """A process titled by vLLM (``VLLM::EngineCore``, ``VLLM::Worker_TP0``, a renamed API server)."""
    return bool(argv) and argv[0].startswith("VLLM::")


SIGN = ServerSign("a vLLM server", is_vllm_server, parallel_size, is_vllm_helper)


@dataclass(frozen=True)
class VllmConfig(LaunchConfig):
    kind: str = "vllm"
    model: str | None = None
    launcher: tuple[str, ...] = DEFAULT_VLLM_LAUNCHER


class VllmKind(LaunchedKind):
    name = "vllm"
    summary = "kldtui launches vLLM with the capture hook (a local checkpoint or a Hub model id)"
    config_type = VllmConfig
    reference_keys = ("model", "served_model_name", "vllm_args")
    # vLLM's ZMQ sockets default to the temp folder and outlive a killed server (hundreds piled up
    # in /tmp here), and every launch leaves a vllm_dist_* file there (torch's FileStore rendezvous):
    # each launched server gets its own folder, for both, removed when it stops
    runtime_dir_env = "VLLM_RPC_BASE_PATH"
    # a cached prompt prefix is never computed again, so the hook would not see its logits: the
    # launcher turns the cache off (--no-enable-prefix-caching)
    keeps_prefix_cache = True
    process_sign = SIGN

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        if "model" not in values:
            raise BadInput(f"{label} model is missing: the candidate checkpoint to serve")
        values = {**values, "model": local_model(base_dir, values["model"])}
        return super().configure(values, base_dir=base_dir, label=label)

    def reference_config(self, candidate: ServerConfig, values: dict[str, Any], *, base_dir: Path,
                         label: str) -> ServerConfig:
        if "model" not in values:
            raise BadInput(f"{label} capture = 'vllm' needs model = the reference checkpoint")
        own = self.own(self.configure(values, base_dir=base_dir, label=label))
        given = {key: getattr(own, key) for key in values if key in self.reference_keys}
        given.setdefault("served_model_name", candidate.served_model_name + "-reference")
        config: ServerConfig = inherit(VllmConfig, candidate, label=label, **given)
        return config

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        c: VllmConfig = self.own(config)
        h = c.host if host is None else host
        p = c.port if port is None else port
        values = {"model": c.model or "", "host": h, "port": str(p), "served_model_name": c.served_model_name}
        if not c.model and any("{model}" in a for a in (*c.launcher, *c.vllm_args)):
            raise BadInput(f"{c.label} model is not set; give the candidate checkpoint's path")
        args = [fill(a, values) for a in c.vllm_args]
        argv = [c.python, *(fill(a, values) for a in c.launcher)]
        if not has_flag(args, "--served-model-name"):
            argv += ["--served-model-name", c.served_model_name]
        argv += args
        if not has_flag(args, "--host"):
            argv += ["--host", h]
        if not has_flag(args, "--port"):
            argv += ["--port", str(p)]
        return argv

    def problems(self, config: ServerConfig) -> list[str]:
        c: VllmConfig = self.own(config)
        problems: list[str] = []
        local = c.model is not None and c.model.startswith(("/", "./", "../", "~"))
        if local and c.model is not None and not Path(c.model).expanduser().exists():
            problems.append(f"{c.label} model = {c.model!r}: no such folder; give the path of a "
                            "local checkpoint or a Hugging Face model id")
        return problems + super().problems(c)

    def model(self, config: ServerConfig) -> str | None:
        model: str | None = self.own(config).model
        return model

    def describe(self, config: ServerConfig) -> str:
        return f"vLLM serving {self.own(config).model}"

    def hub_model(self, config: ServerConfig) -> HubModel | None:
        c: VllmConfig = self.own(config)
        model = c.model
        if model is None or model.startswith(("/", ".", "~")) or Path(model).expanduser().exists():
            return None  # a local checkpoint (configure made a path absolute)
        # where vLLM downloads it: --download-dir, else the Hugging Face cache its environment names
        download_dir = flag_value(c.vllm_args, "--download-dir")
        cache = (Path(download_dir).expanduser() if download_dir
                 else settings.hf_hub_cache(settings.child_environment(c.env)))
        return HubModel(model, flag_value(c.vllm_args, "--revision"), cache)

    def doctor_checks(self, python: str | None, *, import_engine: bool) -> list[Check]:
        from kldtui.servers.vllm_probe import vllm_checks

        return vllm_checks(python, import_vllm=import_engine)


KIND = VllmKind()
