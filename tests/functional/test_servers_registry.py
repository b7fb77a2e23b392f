"""Server kinds (kldtui.servers): each kind owns its keys, checks, command line, environment and
locality; the profile, preflight and the serve stage ask the registry. A new kind is one module
plus one registry line (docs/DEVELOPING.md): the last test adds one and runs it."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kldtui import capture_modes, settings
from kldtui.errors import BadInput
from kldtui.events import Cancel
from kldtui.servers import registry
from kldtui.servers.base import (
    LaunchConfig,
    LaunchedKind,
    ServerConfig,
    ServerKind,
    profile_keys,
)
from kldtui.servers.registry import KINDS, kind_of
from kldtui.stages.serve import run_serve
from kldtui.workflow.preflight import preflight
from kldtui.workflow.profile import profile_from_dict, server_plan


def _profile(tmp_path: Path, candidate: dict[str, object], **sections: dict[str, object]):  # type: ignore[no-untyped-def]
    return profile_from_dict({"candidate": candidate, "run": {"workdir": str(tmp_path / "w")}, **sections},
                             base_dir=tmp_path, path=tmp_path / "p.toml")


def test_every_kind_is_a_server_kind_with_typed_keys() -> None:
    assert list(KINDS) == ["vllm", "embedded", "attach", "llama-cpp"]
    for name, kind in KINDS.items():
        assert isinstance(kind, ServerKind) and kind.name == name
        keys = profile_keys(kind.config_type)
        assert "label" not in keys and keys["kind"] == "str" and keys["served_model_name"] == "str"
        assert set(kind.reference_keys) <= set(keys)
    assert registry.all_keys()["vllm_args"] == "list[str]" and registry.all_keys()["env"] == "table[str]"
    assert registry.all_keys()["server_capture_dir"] == "str" and registry.all_keys()["perturb"] == "float"


def test_a_key_of_another_kind_is_refused_naming_the_kinds_that_take_it(tmp_path: Path) -> None:
    cases = {("embedded", "launcher"): "launcher is only for kind = 'vllm'; remove it or set kind = 'vllm'",
             ("vllm", "perturb"): "perturb is only for kind = 'embedded'",
             ("attach", "port"): "port is only for kind = 'vllm' or 'embedded'",
             ("embedded", "model"): "serves its built-in model; remove model, or set kind = 'vllm'",
             ("vllm", "url"): "url is only for kind = 'attach'"}
    values = {"launcher": ["x"], "perturb": 0.1, "port": 1, "model": "m", "url": "http://h:1"}
    for (kind, key), needle in cases.items():
        table = {"kind": kind, "model": "m", "url": "http://h:1", "server_capture_dir": "c"}
        table = {k: v for k, v in table.items() if k == "kind" or k in profile_keys(KINDS[kind].config_type)}
        with pytest.raises(BadInput) as info:
            _profile(tmp_path, {**table, key: values[key]})
        assert needle in str(info.value) and str(tmp_path / "p.toml") + ": [candidate]" in str(info.value)


def test_configs_are_typed_and_resolved(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    vllm = _profile(tmp_path, {"kind": "vllm", "model": "m", "python": "venv/bin/python",
                               "vllm_args": ["--x"], "env": {"A": 1}, "startup_timeout": 5}).candidate
    assert vllm.model == str(tmp_path / "m")  # a folder beside the profile
    assert vllm.python == str(tmp_path / "venv" / "bin" / "python")
    assert vllm.vllm_args == ("--x",) and vllm.env == {"A": "1"} and vllm.startup_timeout == 5.0
    hub = _profile(tmp_path, {"kind": "vllm", "model": "org/name"}).candidate
    assert hub.model == "org/name" and hub.python == sys.executable  # a Hub id is left alone
    attach = _profile(tmp_path, {"url": "http://10.0.0.1:8000", "server_capture_dir": "c"}).candidate
    assert attach.kind == "attach" and attach.server_capture_dir == tmp_path / "c"
    with pytest.raises(BadInput, match=r"\[candidate\] port 70000 is not 0..65535"):
        _profile(tmp_path, {"kind": "embedded", "port": 70000})


def test_attached_server_is_local_only_on_this_host(tmp_path: Path) -> None:
    for url, local in [("http://127.0.0.1:8000", True), ("http://localhost:1", True),
                       ("http://[::1]:8000", True), ("http://10.1.2.3:8000", False)]:
        c = _profile(tmp_path, {"url": url, "server_capture_dir": "c"}).candidate
        assert kind_of(c).is_local(c) is local, url
    emb = _profile(tmp_path, {"kind": "embedded"}).candidate
    assert kind_of(emb).is_local(emb) and kind_of(emb).launches


def test_score_mode_environment_comes_with_the_plan(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    logits = _profile(tmp_path, {"kind": "embedded", "env": {"X": "1"}}, reference={"local_dir": str(suite)})
    assert dict(server_plan(logits).env) == {"X": "1"}
    score = dataclasses.replace(logits, capture=dataclasses.replace(logits.capture, mode=capture_modes.SCORE))
    env = dict(server_plan(score).env)
    assert env == {"X": "1", settings.CAPTURE_MODE.name: "score", settings.SCORE_SUITE.name: str(suite),
                   settings.SCORE_REFERENCE.name: str(suite / "ref")}
    attach = _profile(tmp_path, {"url": "http://h:1", "server_capture_dir": "c"})
    plan = server_plan(attach)
    assert plan.url == "http://h:1" and plan.capture_dir == tmp_path / "c" and not plan.argv


def test_reference_servers_inherit_the_candidates_settings(tmp_path: Path) -> None:
    emb = _profile(tmp_path, {"kind": "embedded", "served_model_name": "demo", "perturb": 0.1,
                              "vocab_size": 64}, reference={"capture": "embedded"})
    server = emb.reference.server
    assert server is not None and server.kind == "embedded"
    assert (server.perturb, server.vocab_size, server.served_model_name) == (0.0, 64, "demo-reference")
    att = _profile(tmp_path, {"kind": "embedded", "served_model_name": "demo"},
                   reference={"capture": "attach", "url": "http://h:2", "server_capture_dir": "rc"})
    server = att.reference.server
    assert server is not None and server.served_model_name == "demo"  # the running server's name
    assert server.url == "http://h:2" and server.server_capture_dir == tmp_path / "rc"
    assert not kind_of(server).builtin and kind_of(emb.candidate).builtin  # repeat capture by default


def test_preflight_asks_the_kind(tmp_path: Path) -> None:
    p = _profile(tmp_path, {"kind": "vllm", "model": "./missing-model"},
                 reference={"local_dir": str(tmp_path)})
    problems = preflight(p, p.workspace())
    assert any("[candidate] model = " in x and "no such folder" in x for x in problems)
    a = _profile(tmp_path, {"url": "http://h:1", "server_capture_dir": "c"})
    assert kind_of(a.candidate).problems(a.candidate) == []


# -- a fourth kind: one module (here: this class) and one registry line -------------------------

@dataclass(frozen=True)
class EchoConfig(LaunchConfig):
    kind: str = "echo"
    vocab_size: int = 64


class EchoKind(LaunchedKind):
    """The embedded server under another name, with its own key."""

    name = "echo"
    summary = "test kind"
    config_type = EchoConfig

    def reference_config(self, candidate: ServerConfig, values: dict[str, object], *, base_dir: Path,
                         label: str) -> ServerConfig:
        raise NotImplementedError

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        c: EchoConfig = self.own(config)
        port = c.port if port is None else port
        return [c.python, "-m", "kldtui.embedded", "--host", host or c.host, "--port", str(port),
                "--served-model-name", c.served_model_name, "--vocab-size", str(c.vocab_size)]

    def describe(self, config: ServerConfig) -> str:
        return "echo"


def test_a_new_kind_is_one_module_and_one_registry_line(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "echo", EchoKind())
    profile = _profile(tmp_path, {"kind": "echo", "served_model_name": "e", "port": 0, "vocab_size": 32})
    assert isinstance(profile.candidate, EchoConfig) and profile.candidate.vocab_size == 32
    with pytest.raises(BadInput, match="vocab_size is only for kind = 'embedded' or 'echo'"):
        _profile(tmp_path, {"kind": "vllm", "model": "m", "vocab_size": 1})
    session = run_serve(profile.workspace(), lambda e: None, Cancel(), server_plan(profile))
    try:
        assert session.url is not None and session.runtime["kind"] == "echo"
    finally:
        session.stop()
