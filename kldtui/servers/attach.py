"""``kind = "attach"``: a server started elsewhere (another shell, another node); kldtui checks it
is ready and serves the name, captures through it, and never starts or stops it.

Keys (besides the common ``served_model_name``, ``request_timeout``, ``api_key_env``)::

    url = "http://node0:8000"                        # required (a [candidate] with url is attach)
    server_capture_dir = "/shared/capture-chunks"    # required: the folder the server's
                                                     # VLLM_KLD_CAPTURE_DIR points at, seen from here

``[reference] capture = "attach"`` takes ``url`` and ``server_capture_dir`` (both required) and
``served_model_name`` (default: the candidate's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kldtui.errors import BadInput
from kldtui.servers.base import (
    NOT_IDENTITY,
    CaptureTarget,
    Check,
    HubModel,
    ServerConfig,
    ServerPlan,
    api_key,
    build_config,
    inherit,
)
from kldtui.this_host import is_this_host


@dataclass(frozen=True)
class AttachConfig(ServerConfig):
    kind: str = "attach"
    # a server started elsewhere is whatever its URL serves now: kldtui cannot tell it changed, so these
    # are not its identity (a restarted server on another port keeps its capture resumable)
    url: str = field(default="", metadata=NOT_IDENTITY)
    server_capture_dir: Path | None = field(default=None, metadata=NOT_IDENTITY)


class AttachKind:
    name = "attach"
    summary = "a server started elsewhere: kldtui checks it, captures through it, never stops it"
    config_type = AttachConfig
    launches = False
    builtin = False
    implied_by = ("url",)
    reference_keys = ("url", "server_capture_dir", "served_model_name")
    forbidden: dict[str, str] = {}
    # where it runs its URL says (is_local); running here, its processes show by the sign of what it
    # runs (vLLM's, llama.cpp's)
    process_sign = None

    def own(self, config: ServerConfig) -> AttachConfig:
        if not isinstance(config, AttachConfig):
            raise TypeError(f"{type(config).__name__} is not an attached server's config")
        return config

    def repeat_config(self, config: ServerConfig) -> ServerConfig:
        """The running server captured again."""
        return config

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        if "url" not in values:
            raise BadInput(f"{label} kind = 'attach' needs url = 'http://HOST:PORT'")
        if "server_capture_dir" not in values:
            raise BadInput(f"{label} attach mode needs server_capture_dir: the folder the running "
                           "server's VLLM_KLD_CAPTURE_DIR points at, as seen from here")
        config: ServerConfig = build_config(AttachConfig, values, base_dir=base_dir, label=label)
        return config

    def reference_config(self, candidate: ServerConfig, values: dict[str, Any], *, base_dir: Path,
                         label: str) -> ServerConfig:
        if "url" not in values or "server_capture_dir" not in values:
            raise BadInput(f"{label} capture = 'attach' needs url and server_capture_dir (the running "
                           "reference server's VLLM_KLD_CAPTURE_DIR as seen from here)")
        own = self.own(self.configure(values, base_dir=base_dir, label=label))
        given = {key: getattr(own, key) for key in values if key in self.reference_keys}
        config: ServerConfig = inherit(AttachConfig, candidate, label=label, **given)
        return config

    def plan(self, config: ServerConfig, capture: CaptureTarget, *,
             capture_dir: Path | None = None) -> ServerPlan:
        c = self.own(config)
        return ServerPlan(self.name, c.served_model_name, url=c.url, capture_dir=c.server_capture_dir,
                          api_key=api_key(c))

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        raise BadInput(f"{config.label} kind = 'attach' starts no server; use url = ... to reach it")

    def environment(self, config: ServerConfig, capture: CaptureTarget) -> dict[str, str]:
        return {}  # the server's environment was set where it was started

    def problems(self, config: ServerConfig) -> list[str]:
        return []  # checked when attaching: kldtui.servers.readiness.check_attached

    def is_local(self, config: ServerConfig) -> bool:
        """The URL points at this host: loopback, this host's names or any of its addresses
        (:func:`kldtui.this_host.is_this_host`)."""
        return is_this_host(urlsplit(self.own(config).url).hostname or "")

    def describe(self, config: ServerConfig) -> str:
        return f"attached server at {self.own(config).url}"

    def model_vocab(self, config: ServerConfig) -> int | None:
        return None  # the server is elsewhere: its chunks say it

    def max_prompt_tokens(self, config: ServerConfig) -> int | None:
        return None  # the server is elsewhere: it refuses a prompt it cannot take

    def memory_line(self, config: ServerConfig) -> str | None:
        return None  # the server is elsewhere: its memory is not this host's

    def vocabulary_fix(self, config: ServerConfig, vocab: int) -> str:
        return "attach to a server of the reference's model"

    def hub_model(self, config: ServerConfig) -> HubModel | None:
        return None  # the server is elsewhere: kldtui does not know its model

    def doctor_checks(self, python: str | None, *, import_engine: bool) -> list[Check]:
        return []  # the server is elsewhere: `kldtui doctor --smoke --url URL` checks it

    def head_command(self, config: ServerConfig, folder: Path) -> list[str] | None:
        return None  # the server is elsewhere: kldtui does not know its model


KIND = AttachKind()
