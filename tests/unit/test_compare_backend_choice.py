"""The compare backend while a server of this run is up (GPU topology and memory simulated)."""

from __future__ import annotations

import pytest
import torch

from kldtui import this_host
from kldtui.servers import llama_cpp, vllm
from kldtui.servers.registry import process_signs
from kldtui.stages import compare as cmp
from kldtui.stages.compare import backends as cb
from kldtui.stages.compare.backends import Backend
from tests.fixtures_proc import fake_proc

GIB = 1024**3


@pytest.fixture
def gpus(monkeypatch):
    """Simulate N GPUs with the given free memory each (torch.cuda monkeypatched)."""
    def make(free_gib: list[float]):
        monkeypatch.setattr(cb, "cuda_present", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(free_gib))
        queried: list[int] = []

        def mem_get_info(index=None):
            queried.append(index)
            return int(free_gib[index] * GIB), 141 * GIB

        monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
        return queried
    return make


def test_no_gpu_no_server_means_the_cpu_kernel_with_every_core(monkeypatch):
    monkeypatch.setattr(cb, "cuda_present", lambda: False)
    choice = cb.choose_backend("auto", None, None, server_signs=None)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.cuda_device is None
    assert choice.threads is None and "no GPU seen" in choice.reason


def test_gpu_without_a_running_server_compares_on_cuda(gpus):
    gpus([80.0])
    choice = cb.choose_backend("auto", None, None, cpu_count=8, server_signs=())
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 0)


def test_unsaid_servers_keep_auto_off_every_gpu(gpus):
    """A caller that says it does not know how model servers show in /proc (the compare stage names
    no server kind) gets the CPU kernel, never a GPU a server it cannot see may hold, and the reason
    says so."""
    queried = gpus([80.0, 80.0])
    choice = cb.choose_backend("auto", None, None, cpu_count=8, server_signs=None)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.cuda_device is None
    assert choice.threads is None and queried == [] and choice.reason == cb.NOT_TOLD
    assert "model servers was not said" in choice.reason


def test_without_a_server_a_gpu_without_room_is_not_taken(gpus):
    """A server kldtui does not know of (another user's) fills cuda:0: compare checks the memory."""
    queried = gpus([1.0, 30.0])
    choice = cb.choose_backend("auto", None, None, vocab=163840, cpu_count=8, server_signs=())
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 1) and queried == [0, 1]
    gpus([1.0])
    choice = cb.choose_backend("auto", None, None, vocab=163840, cpu_count=8, server_signs=())
    assert choice.backend in (Backend.C, Backend.NUMPY) and "GiB a compare needs" in choice.reason


def test_a_vllm_server_on_this_host_keeps_its_gpus_from_a_plain_compare(gpus, monkeypatch):
    """`kldtui compare --backend auto` with a vLLM server (TP=2 on GPUs 0,1) running on this host,
    found in /proc with its flags and environment: the compare goes to cuda:2, not cuda:0."""
    import subprocess
    import sys
    import time

    gpus([80.0] * 4)
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "PATH": "/usr/bin:/bin"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m",
                              "vllm.entrypoints.openai.api_server", "--tensor-parallel-size", "2"], env=env)
    try:
        def child_only(signs, proc=None):  # other sessions' servers on this host: not this test's
            return [p for p in this_host.gpu_servers(signs) if p.pid == child.pid]

        deadline = time.monotonic() + 30
        while not child_only(process_signs()):
            assert time.monotonic() < deadline, "the server process was not seen in /proc"
            time.sleep(0.05)
        (seen,) = child_only(process_signs())
        assert "--tensor-parallel-size" in seen.argv and seen.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
        monkeypatch.setattr(cb, "gpu_servers", child_only)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        choice = cb.choose_backend("auto", None, None, cpu_count=8, server_signs=process_signs())
        assert (choice.backend, choice.cuda_device) == ("torch-cuda", 2), choice
        assert f"a vLLM server (pid {child.pid})" in choice.reason
    finally:
        child.kill()
        child.wait()


def test_server_on_every_gpu_means_the_cpu_kernel_with_capped_threads(gpus):
    queried = gpus([1.4] * 16)  # 16-way TP at gpu-memory-utilization 0.982: ~1.4 GiB headroom
    choice = cb.choose_backend("auto", None, cb.Serving(frozenset(range(16))), vocab=163840, cpu_count=64,
                              server_signs=None)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.cuda_device is None
    assert choice.threads == 32  # half the cores: capture is not starved
    assert queried == []  # no GPU outside the server's set: none is even touched
    assert "running on this host" in choice.reason and "32 of 64 threads" in choice.reason


def test_unknown_server_gpus_count_as_all(gpus):
    gpus([80.0, 80.0])
    choice = cb.choose_backend("auto", None, cb.Serving(None), cpu_count=4, server_signs=None)
    assert choice.cuda_device is None


def test_a_spare_gpu_with_room_is_used_and_a_full_one_is_not(gpus):
    queried = gpus([1.0, 1.0, 2.0, 40.0])
    choice = cb.choose_backend("auto", None, cb.Serving(frozenset({0, 1})), vocab=163840, cpu_count=8,
                              server_signs=None)
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 3)
    assert queried == [2, 3]  # the server's GPUs are never queried (no context created there)
    assert "cuda:3 is outside its GPUs" in choice.reason


def test_spare_gpus_without_enough_free_memory_fall_back_to_the_cpu(gpus):
    gpus([1.0, 3.0])
    need = cb.cuda_bytes_needed(163840) + cb.MARGIN_BYTES
    assert need > 3 * GIB
    choice = cb.choose_backend("auto", 3, cb.Serving(frozenset({0})), vocab=163840, cpu_count=8,
                              server_signs=None)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.threads == 3  # [compare] threads wins
    assert "no GPU outside its set" in choice.reason


def test_an_explicit_backend_is_used_as_asked(gpus):
    gpus([1.0])
    choice = cb.choose_backend("torch-cuda", 2, cb.Serving(frozenset({0})), server_signs=None)
    assert (choice.backend, choice.threads) == ("torch-cuda", 2) and "as configured" in choice.reason


@pytest.mark.parametrize("argv,server_env,own_env,expected", [
    (["vllm", "serve", "m", "--tensor-parallel-size", "16"], {}, {}, frozenset(range(16))),
    (["vllm", "serve", "m", "-tp=4", "-pp", "2"], {}, {}, frozenset(range(8))),
    (["vllm", "serve", "m", "-tp", "2"], {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, {}, frozenset({4, 5})),
    (["vllm", "serve", "m", "-tp", "2"], {"CUDA_VISIBLE_DEVICES": "6,7"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
     frozenset({2, 3})),  # this process numbers physical 6,7 as 2,3
    (["vllm", "serve", "m"], {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, {}, None),  # UUIDs: unknown
    # TP 4 where this process sees two: all we see
    (["vllm", "serve", "m", "-tp", "4"], {}, {"CUDA_VISIBLE_DEVICES": "0,1"}, frozenset({0, 1})),
    (["llama-server"], {}, {}, None),  # every GPU it sees: every GPU
    (["llama-server"], {"CUDA_VISIBLE_DEVICES": "2,3"}, {}, frozenset({2, 3})),
    (["llama-server"], {"CUDA_VISIBLE_DEVICES": "6"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, frozenset({2})),
])
def test_server_gpus_from_its_command_and_environment(argv, server_env, own_env, expected):
    sign = vllm.SIGN if vllm.SIGN.is_server(argv) else llama_cpp.SIGN
    assert cb.server_gpus(sign.devices(argv), server_env, own_env) == expected


def test_a_kind_without_a_sign_holds_no_gpu():
    """A server of this run whose kind declares no sign (the embedded CPU model) leaves every GPU free."""
    assert cb.gpus_of(None, ["python", "-m", "kldtui.embedded"], {}) == frozenset()
    assert cb.gpus_of(vllm.SIGN, ["vllm", "serve", "m", "-tp", "2"], {}) == frozenset({0, 1})


def _found_in(monkeypatch, tmp_path, processes, environ):
    """/proc as ``processes`` (pid: argv) and ``environ`` (pid: environment) show it."""
    proc = fake_proc(tmp_path, processes, environ)
    monkeypatch.setattr(cb, "gpu_servers", lambda signs, _proc=None: this_host.gpu_servers(signs, proc))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_the_choice_names_the_kind_of_server_found(gpus, monkeypatch, tmp_path):
    """A llama.cpp server kldtui did not start holds GPU 0: the compare goes to cuda:1, and its
    reason names a llama.cpp server, not a vLLM one."""
    gpus([80.0, 80.0])
    _found_in(monkeypatch, tmp_path, {123: ["llama-server", "-m", "q4.gguf", "-ngl", "99"]},
              {123: {"CUDA_VISIBLE_DEVICES": "0"}})
    choice = cb.choose_backend("auto", None, None, cpu_count=8, server_signs=process_signs())
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 1), choice
    assert choice.reason.startswith("a llama.cpp server (pid 123) is running; cuda:1 is outside its GPUs")


def test_a_server_on_every_gpu_it_sees_keeps_auto_on_the_cpu(gpus, monkeypatch, tmp_path):
    queried = gpus([80.0, 80.0])
    _found_in(monkeypatch, tmp_path, {77: ["python3", "-m", "llama_cpp.server", "--model", "q4.gguf"]},
              {77: {"PATH": "/bin"}})
    choice = cb.choose_backend("auto", None, None, cpu_count=8, server_signs=process_signs())
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.threads == 4 and queried == []
    assert choice.reason.startswith("a llama.cpp server (pid 77) is running on this host and it may use "
                                    "every GPU")


@pytest.mark.parametrize("processes,environ,gpus_used,named", [
    ({5: ["vllm", "serve", "m", "-tp", "2"], 9: ["llama-server"]},
     {5: {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 9: {"CUDA_VISIBLE_DEVICES": "3"}},
     frozenset({0, 1, 3}), "a vLLM server (pid 5)"),  # two servers: their GPUs together
    ({5: ["VLLM::Worker_TP0"], 6: ["VLLM::EngineCore"]}, {5: {"A": "1"}},
     None, "a vLLM server (pid 5)"),  # only its workers: every GPU
    ({5: ["vllm", "serve", "m"], 9: ["llama-server"]}, {5: {"A": "1"}},
     None, "a llama.cpp server (pid 9)"),  # its environment is not readable: every GPU, and it is named
])
def test_servers_found_together(monkeypatch, tmp_path, processes, environ, gpus_used, named):
    _found_in(monkeypatch, tmp_path, processes, environ)
    assert cb.servers_found(process_signs()) == cb.Serving(gpus_used, named)
    _found_in(monkeypatch, tmp_path / "none", {1: ["bash"]}, {})
    assert cb.servers_found(process_signs()) is None


def test_the_servers_signs_are_always_said(tmp_path):
    """Neither the chooser, nor a request, nor the noise floor's measurement of two captures has a
    default for how model servers show in /proc: a new caller that forgets them is stopped at once,
    not given the CPU kernel without a word."""
    from kldtui.decide.noise import measure_floor

    with pytest.raises(TypeError, match="server_signs"):
        cb.choose_backend("auto")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="server_signs"):
        cb.BackendRequest("auto")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="server_signs"):  # before anything is read
        measure_floor(tmp_path / "suite", tmp_path / "a", tmp_path / "b")  # type: ignore[call-arg]
    assert cmp.CompareOptions().backend == cb.BackendRequest("auto", server_signs=None)


def test_a_choice_beside_this_runs_server_keeps_its_gpus_and_is_said_on_change(gpus, monkeypatch, tmp_path):
    """The one sequence the pipeline and the reference's repeat capture share
    (kldtui.stages.compare_beside): the launched server's GPUs by its kind's sign, the registered
    kinds' signs for the servers on this host, and the BackendChosen event, said again only when
    its line changes."""
    from types import SimpleNamespace

    from kldtui.events import BackendChosen
    from kldtui.servers.base import ServerPlan
    from kldtui.stages.compare_beside import choose_beside, serving_of
    from kldtui.stages.serve import ServerSession

    gpus([80.0] * 4)
    _found_in(monkeypatch, tmp_path, {1: ["bash"]}, {})
    plan = ServerPlan("vllm", "m", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    running = SimpleNamespace(argv=["vllm", "serve", "m", "-tp", "3"], alive=lambda: None)
    session = ServerSession(plan, tmp_path, running)  # type: ignore[arg-type]
    serving = serving_of(session, "the candidate server")
    assert serving == cb.Serving(frozenset({0, 1, 2}), "the candidate server")
    said: list = []
    choice = choose_beside("auto", None, serving, vocab=None, emit=said.append)
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 3)
    assert choice.reason.startswith("the candidate server is running; cuda:3 is outside its GPUs")
    assert [(type(e), e.line) for e in said] == [(BackendChosen, choice.event().line)]
    again = choose_beside("auto", None, serving, vocab=None, emit=said.append, said=said[0].line)
    assert again == choice and len(said) == 1  # the same line: not said twice
    exited = SimpleNamespace(argv=running.argv, alive=lambda: "exit code 1")
    assert serving_of(ServerSession(plan, tmp_path, exited), "x") is None  # type: ignore[arg-type]
    assert serving_of(ServerSession(plan, tmp_path, None), "x") is None  # attached: none launched
    assert serving_of(None, "x") is None
    # no server of this run: a llama.cpp server found in /proc by the registered kinds' signs keeps GPU 0
    _found_in(monkeypatch, tmp_path / "found", {123: ["llama-server", "-m", "q4.gguf"]},
              {123: {"CUDA_VISIBLE_DEVICES": "0"}})
    found = choose_beside("auto", None, None, vocab=None, emit=said.append)
    assert found.cuda_device == 1 and found.reason.startswith("a llama.cpp server (pid 123) is running")
    assert len(said) == 2 and said[-1].line == found.event().line


def test_a_cuda_compare_gives_its_cached_memory_back(monkeypatch):
    released = []
    monkeypatch.setattr(cb, "cuda_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(True))
    asked = cb.BackendRequest("torch-cuda", cuda_device=3, server_signs=None)
    engine = cmp.Engine(16, cmp.CompareOptions(backend=asked))
    assert engine._torch_device() == "cuda:3"
    engine.close()
    assert released == [True]


def test_profile_keys(tmp_path):
    from kldtui.errors import BadInput
    from kldtui.workflow.profile import profile_from_dict

    base = {"candidate": {"kind": "embedded"}}
    p = profile_from_dict({**base, "compare": {"backend": "numpy", "threads": 2}}, base_dir=tmp_path)
    assert (p.compare.backend, p.compare.threads) == ("numpy", 2)
    with pytest.raises(BadInput, match=r"\[compare\] backend 'cuda' is not one of"):
        profile_from_dict({**base, "compare": {"backend": "cuda"}}, base_dir=tmp_path)
    with pytest.raises(BadInput, match="threads must be at least 1"):
        profile_from_dict({**base, "compare": {"threads": 0}}, base_dir=tmp_path)


def test_a_server_that_sees_no_gpu_holds_none():
    """CUDA_VISIBLE_DEVICES set empty hides every GPU from the server, with or without a device count."""
    assert cb.server_gpus(None, {"CUDA_VISIBLE_DEVICES": ""}, {}, device_count=2) == frozenset()
    assert cb.server_gpus(None, {"CUDA_VISIBLE_DEVICES": ""}, {}) == frozenset()
