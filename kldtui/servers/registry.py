"""The server kinds, keyed by the name a profile gives them (``[candidate] kind = "..."``).

Adding a kind: one module beside the others (a config dataclass and a :class:`ServerKind`
singleton named ``KIND``) and one line here (docs/DEVELOPING.md, "A new server kind").
"""

from __future__ import annotations

from kldtui.errors import BadInput
from kldtui.servers import attach, embedded, llama_cpp, vllm
from kldtui.servers.base import ServerConfig, ServerKind, profile_keys
from kldtui.this_host import ServerSign

KINDS: dict[str, ServerKind] = {
    vllm.KIND.name: vllm.KIND,
    embedded.KIND.name: embedded.KIND,
    attach.KIND.name: attach.KIND,
    llama_cpp.KIND.name: llama_cpp.KIND,
}
DEFAULT_KIND = vllm.KIND.name  # a [candidate] table without kind (and without a key implying one)


def server_kind(name: str) -> ServerKind:
    """The kind registered as ``name`` (names are checked when a profile is loaded)."""
    try:
        return KINDS[name]
    except KeyError:
        raise BadInput(f"server kind {name!r} is not one of {', '.join(KINDS)}") from None


def kind_of(config: ServerConfig) -> ServerKind:
    """The kind of a server's config."""
    return server_kind(config.kind)


def all_keys() -> dict[str, str]:
    """Every key some kind takes in a server table, with its TOML type (one type per key)."""
    out: dict[str, str] = {}
    for kind in KINDS.values():
        for key, toml_type in profile_keys(kind.config_type).items():
            if out.setdefault(key, toml_type) != toml_type:
                raise TypeError(f"server key {key!r} has two types: {out[key]} and {toml_type}")
    return out


def kinds_taking(key: str) -> list[str]:
    """The kinds whose table takes ``key``."""
    return [name for name, kind in KINDS.items() if key in profile_keys(kind.config_type)]


def process_signs() -> tuple[ServerSign, ...]:
    """How the registered kinds' servers show in /proc (:attr:`ServerKind.process_sign`): what the
    front ends and the pipeline give the compare stage, which names no kind, to find the model
    servers on this host whose GPUs it must leave alone."""
    return tuple(kind.process_sign for kind in KINDS.values() if kind.process_sign is not None)
