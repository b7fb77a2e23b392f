"""Which processes on this host are model servers (kldtui.this_host.gpu_servers), by the signs the
server kinds declare (kldtui.servers.vllm.SIGN, kldtui.servers.llama_cpp.SIGN), over a fake /proc."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from kldtui import this_host
from kldtui.servers import llama_cpp, vllm
from kldtui.servers.registry import process_signs
from kldtui.this_host import gpu_servers
from tests.fixtures_proc import fake_proc

SIGNS = (vllm.SIGN, llama_cpp.SIGN)


@pytest.mark.parametrize("argv,words,main", [
    (["vllm", "serve", "m", "--tensor-parallel-size", "2"], "a vLLM server", True),
    (["/venv/bin/python3", "/venv/bin/vllm", "serve", "m"], "a vLLM server", True),  # a console script
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "a vLLM server", True),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], "a vLLM server", True),  # kldtui's launcher
    (["VLLM::Worker_TP0"], "a vLLM server", False),  # a worker titled by vLLM: a helper
    (["VLLM::EngineCore"], "a vLLM server", False),
    (["llama-server", "-m", "q4.gguf", "-ngl", "99"], "a llama.cpp server", True),
    (["/opt/llama.cpp/build/bin/llama-server", "--model", "q4.gguf"], "a llama.cpp server", True),
    (["python3", "-m", "llama_cpp.server", "--model", "q4.gguf"], "a llama.cpp server", True),
    (["python", "-m", "kldtui.embedded.llama_cpp", "--model", "q4.gguf"], "a llama.cpp server", True),
])
def test_each_kind_knows_its_own_processes(tmp_path: Path, argv: list[str], words: str, main: bool) -> None:
    (seen,) = gpu_servers(SIGNS, fake_proc(tmp_path, {4242: argv}))
    assert (seen.pid, seen.argv, seen.sign.words, seen.main) == (4242, tuple(argv), words, main)


@pytest.mark.parametrize("argv", [
    ["python", "train.py", "--model", "vllm"],
    ["python", "-m", "kldtui.embedded", "--port", "0"],  # kldtui's CPU model holds no GPU
    ["python", "-m", "llama_cpp.server_tools"],  # another module beside the server's
    ["python", "-m", "vllm_bench"],
    ["grep", "llama-server", "log.txt"],
    ["less", "vllm", "serve"],  # a file named vllm, not the program
    ["bash"],
])
def test_other_processes_are_not_servers(tmp_path: Path, argv: list[str]) -> None:
    assert gpu_servers(SIGNS, fake_proc(tmp_path, {77: argv})) == []


def test_the_environment_is_read_where_it_can_be(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {10: ["llama-server"], 11: ["vllm", "serve", "m"]},
                     {10: {"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin"}})
    by_pid = {p.pid: p for p in gpu_servers(SIGNS, proc)}
    assert by_pid[10].env == {"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin"}
    assert by_pid[11].env == {}  # another user's process: its environ is not readable


def test_unreadable_entries_are_passed_over(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {5: ["llama-server"]})
    (proc / "6").mkdir()  # gone between the listing and the read: no cmdline
    (proc / "7" / "cmdline").mkdir(parents=True)  # not a file
    (proc / "8").write_text("")  # not a folder
    assert [p.pid for p in gpu_servers(SIGNS, proc)] == [5]


def test_no_proc_no_signs_and_this_process_find_nothing(tmp_path: Path) -> None:
    assert gpu_servers(SIGNS, tmp_path / "no-proc") == []
    assert gpu_servers((), fake_proc(tmp_path, {5: ["llama-server"]})) == []
    mine = fake_proc(tmp_path / "own", {os.getpid(): ["vllm", "serve", "m"]})
    assert gpu_servers(SIGNS, mine) == []  # kldtui itself is never a server it must keep off


def test_only_the_signs_given_are_looked_for(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: ["llama-server"], 2: ["vllm", "serve", "m"]})
    assert [p.pid for p in gpu_servers((vllm.SIGN,), proc)] == [2]
    assert [p.pid for p in gpu_servers((llama_cpp.SIGN,), proc)] == [1]


def test_the_registry_gives_the_signs_of_the_kinds_that_hold_gpus() -> None:
    assert set(process_signs()) == {vllm.SIGN, llama_cpp.SIGN}


@pytest.mark.parametrize("argv,devices", [
    (["vllm", "serve", "m", "--tensor-parallel-size", "16"], 16),
    (["vllm", "serve", "m", "-tp=4", "-pp", "2"], 8),
    (["vllm", "serve", "m", "-tp", "2", "--data-parallel-size-local", "2"], 4),
    (["vllm", "serve", "m", "-tp", "x"], 1),  # not a number: counts as 1
    (["vllm", "serve", "m"], 1),
])
def test_a_vllm_server_uses_tp_x_pp_x_dp_gpus(argv: list[str], devices: int) -> None:
    assert vllm.SIGN.devices(argv) == devices


def test_a_llama_cpp_server_uses_every_gpu_it_sees() -> None:
    assert llama_cpp.SIGN.devices(["llama-server", "-ngl", "99"]) is None


def test_this_host_names_no_kind() -> None:
    """The kinds' signs come from the layers above (the import contracts keep this module below
    the server kinds): no string in its code names a kind's program or module."""
    tree = ast.parse(Path(this_host.__file__).read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr)}
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and id(node) not in docs]
    assert strings and not [s for s in strings if "vllm" in s.lower() or "llama" in s.lower()]
