"""The server signs read /proc (kldtui.this_host.gpu_servers) for every process on the host, any user's:
a command line or environment that is huge, not UTF-8, not readable or not a regular file never
blocks, never fills the memory and never stops the backend choice with a traceback; what cannot be
read whole says nothing of a server's GPUs, so every GPU counts as the server's (the safe side)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from kldtui.servers import llama_cpp, vllm
from kldtui.servers.registry import process_signs
from kldtui.stages.compare import backends as cb
from kldtui.this_host import PROC_TEXT_LIMIT, gpu_servers
from tests.fixtures_hostile import returns_at_once
from tests.fixtures_proc import fake_proc

SIGNS = (vllm.SIGN, llama_cpp.SIGN)


@pytest.fixture(autouse=True)
def _own_gpus_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees every GPU: the server's CUDA_VISIBLE_DEVICES are indices as they are."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _servers(proc: Path) -> cb.Serving | None:
    """What the backend chooser finds in the fake ``proc``."""
    return cb.servers_found(process_signs(), proc)


def test_a_huge_command_line_is_read_up_to_its_limit_and_says_nothing_of_gpus(tmp_path: Path) -> None:
    """A server whose command line is longer than the limit (a process may make its own as long as
    the kernel lets it) is still seen by its start; its GPUs (which a flag past the cut may name) are
    unknown: every GPU counts as its. The read stops at the limit, whatever the file's size."""
    argv = ["vllm", "serve", "m", "-tp", "1", "--x", "y" * (32 * PROC_TEXT_LIMIT)]
    proc = fake_proc(tmp_path, {41: argv}, {41: {"CUDA_VISIBLE_DEVICES": "0"}})
    tracemalloc.start()
    try:
        (seen,) = gpu_servers(SIGNS, proc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * PROC_TEXT_LIMIT  # a quarter of the file at most
    assert seen.argv[:3] == ("vllm", "serve", "m") and not seen.main
    assert _servers(proc) == cb.Serving(None, "a vLLM server (pid 41)")


def test_a_huge_environment_is_not_read(tmp_path: Path) -> None:
    """An environment past the limit is taken as one not readable: the server's GPUs are unknown."""
    proc = fake_proc(tmp_path, {42: ["llama-server", "-m", "q.gguf"]},
                     {42: {"CUDA_VISIBLE_DEVICES": "1", "PAD": "z" * (2 * PROC_TEXT_LIMIT)}})
    (seen,) = gpu_servers(SIGNS, proc)
    assert seen.main and seen.env == {}
    assert _servers(proc) == cb.Serving(None, "a llama.cpp server (pid 42)")


def test_a_command_line_and_environment_not_utf8_are_read(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {})
    (proc / "43").mkdir()
    (proc / "43" / "cmdline").write_bytes(b"llama-server\0-m\0\xff\xfe.gguf\0")
    (proc / "43" / "environ").write_bytes(b"CUDA_VISIBLE_DEVICES=1\0NAME=\xc3\x28\0")
    (seen,) = gpu_servers(SIGNS, proc)
    assert seen.argv == ("llama-server", "-m", "\ufffd\ufffd.gguf")
    assert seen.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert _servers(proc) == cb.Serving(frozenset({1}), "a llama.cpp server (pid 43)")


def test_fifos_and_folders_in_proc_never_block(tmp_path: Path) -> None:
    """/proc's files are regular files; a FIFO or a folder in their place (a /proc given to the
    function) is passed over at once, as an unreadable entry is."""
    proc = fake_proc(tmp_path, {44: ["vllm", "serve", "m"]})
    (proc / "45").mkdir()
    os.mkfifo(proc / "45" / "cmdline")
    os.mkfifo(proc / "44" / "environ")
    (proc / "46" / "environ").mkdir(parents=True)
    (proc / "46" / "cmdline").write_bytes(b"llama-server\0")
    (found,) = returns_at_once(lambda: gpu_servers(SIGNS, proc))
    assert isinstance(found, list)
    assert [(p.pid, p.env) for p in found] == [(44, {}), (46, {})]


def test_pid_folders_that_are_not_ascii_digits_are_not_processes(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {47: ["llama-server"]})
    (proc / "\u00b2").mkdir()  # str.isdigit() holds, int() refuses
    (proc / "\u00b2" / "cmdline").write_bytes(b"vllm\0serve\0m\0")
    assert [p.pid for p in gpu_servers(SIGNS, proc)] == [47]


def test_impossible_gpu_counts_and_indices_give_unknown_not_a_hang_or_a_traceback() -> None:
    """-tp 10**30 made a set of 10**30 indices (a hang, then no memory); an index of 5,000 digits
    (past Python's limit for int()) or a digit int() refuses ('²') raised ValueError."""
    huge = vllm.SIGN.devices(["vllm", "serve", "m", "-tp", "1" + "0" * 30])
    (used,) = returns_at_once(lambda: cb.server_gpus(huge, {}, {}))
    assert used is None
    (used,) = returns_at_once(lambda: cb.server_gpus(huge, {"CUDA_VISIBLE_DEVICES": "0,1"}, {}))
    assert used == frozenset({0, 1})  # every one it sees
    assert cb.server_gpus(None, {"CUDA_VISIBLE_DEVICES": "9" * 5000}, {}) is None
    assert cb.server_gpus(None, {"CUDA_VISIBLE_DEVICES": "\u00b2"}, {}) is None
    assert cb.server_gpus(2, {"CUDA_VISIBLE_DEVICES": "3,1,0"}, {}) == frozenset({1, 3})  # as before
