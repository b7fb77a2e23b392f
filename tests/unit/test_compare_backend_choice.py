"""The compare backend while a server of this run is up (GPU topology and memory simulated)."""

from __future__ import annotations

import pytest
import torch

from kldtui.stages import compare as cmp
from kldtui.stages.compare import backends as cb
from kldtui.stages.compare.backends import Backend

GIB = 1024**3
_real_servers_here = cb.servers_here


@pytest.fixture
def gpus(monkeypatch):
    """Simulate N GPUs with the given free memory each (torch.cuda monkeypatched)."""
    def make(free_gib: list[float]):
        monkeypatch.setattr(cb, "cuda_present", lambda: True)
        monkeypatch.setattr(cb, "servers_here", lambda: None)  # other sessions' vLLM servers: not here
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
    choice = cb.choose_backend("auto", None, None)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.cuda_device is None
    assert choice.threads is None and "no GPU seen" in choice.reason


def test_gpu_without_a_running_server_compares_on_cuda(gpus):
    gpus([80.0])
    choice = cb.choose_backend("auto", None, None, cpu_count=8)
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 0)


def test_without_a_server_a_gpu_without_room_is_not_taken(gpus):
    """A server kldtui does not know of (another user's) fills cuda:0: compare checks the memory."""
    queried = gpus([1.0, 30.0])
    choice = cb.choose_backend("auto", None, None, vocab=163840, cpu_count=8)
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 1) and queried == [0, 1]
    gpus([1.0])
    choice = cb.choose_backend("auto", None, None, vocab=163840, cpu_count=8)
    assert choice.backend in (Backend.C, Backend.NUMPY) and "GiB a compare needs" in choice.reason


def test_a_vllm_server_on_this_host_keeps_its_gpus_from_a_plain_compare(gpus, monkeypatch):
    """`kldtui compare --backend auto` with a vLLM server (TP=2 on GPUs 0,1) running on this host,
    found in /proc with its flags and environment: the compare goes to cuda:2, not cuda:0."""
    import subprocess
    import sys
    import time

    from kldtui import this_host

    gpus([80.0] * 4)
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "PATH": "/usr/bin:/bin"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m",
                              "vllm.entrypoints.openai.api_server", "--tensor-parallel-size", "2"], env=env)
    try:
        real = this_host.gpu_servers
        deadline = time.monotonic() + 30
        while not [p for p in real() if p.pid == child.pid]:
            assert time.monotonic() < deadline, "the server process was not seen in /proc"
            time.sleep(0.05)
        (seen,) = [p for p in real() if p.pid == child.pid]
        assert "--tensor-parallel-size" in seen.argv and seen.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
        monkeypatch.setattr(this_host, "gpu_servers", lambda: [p for p in real() if p.pid == child.pid])
        monkeypatch.setattr(cb, "servers_here", _real_servers_here)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        choice = cb.choose_backend("auto", None, None, cpu_count=8)
        assert (choice.backend, choice.cuda_device) == ("torch-cuda", 2), choice
        assert f"pid {child.pid}" in choice.reason
    finally:
        child.kill()
        child.wait()


def test_server_on_every_gpu_means_the_cpu_kernel_with_capped_threads(gpus):
    queried = gpus([1.4] * 16)  # 16-way TP at gpu-memory-utilization 0.982: ~1.4 GiB headroom
    choice = cb.choose_backend("auto", None, cb.Serving(frozenset(range(16))), vocab=163840, cpu_count=64)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.cuda_device is None
    assert choice.threads == 32  # half the cores: capture is not starved
    assert queried == []  # no GPU outside the server's set: none is even touched
    assert "running on this host" in choice.reason and "32 of 64 threads" in choice.reason


def test_unknown_server_gpus_count_as_all(gpus):
    gpus([80.0, 80.0])
    assert cb.choose_backend("auto", None, cb.Serving(None), cpu_count=4).cuda_device is None


def test_a_spare_gpu_with_room_is_used_and_a_full_one_is_not(gpus):
    queried = gpus([1.0, 1.0, 2.0, 40.0])
    choice = cb.choose_backend("auto", None, cb.Serving(frozenset({0, 1})), vocab=163840, cpu_count=8)
    assert (choice.backend, choice.cuda_device) == ("torch-cuda", 3)
    assert queried == [2, 3]  # the server's GPUs are never queried (no context created there)
    assert "cuda:3 is outside its GPUs" in choice.reason


def test_spare_gpus_without_enough_free_memory_fall_back_to_the_cpu(gpus):
    gpus([1.0, 3.0])
    need = cb.cuda_bytes_needed(163840) + cb.MARGIN_BYTES
    assert need > 3 * GIB
    choice = cb.choose_backend("auto", 3, cb.Serving(frozenset({0})), vocab=163840, cpu_count=8)
    assert choice.backend in (Backend.C, Backend.NUMPY) and choice.threads == 3  # [compare] threads wins
    assert "no GPU outside its set" in choice.reason


def test_an_explicit_backend_is_used_as_asked(gpus):
    gpus([1.0])
    choice = cb.choose_backend("torch-cuda", 2, cb.Serving(frozenset({0})))
    assert (choice.backend, choice.threads) == ("torch-cuda", 2) and "as configured" in choice.reason


@pytest.mark.parametrize("argv,server_env,own_env,expected", [
    (["serve", "m", "--tensor-parallel-size", "16"], {}, {}, frozenset(range(16))),
    (["serve", "m", "-tp=4", "-pp", "2"], {}, {}, frozenset(range(8))),
    (["serve", "m", "-tp", "2"], {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, {}, frozenset({4, 5})),
    (["serve", "m", "-tp", "2"], {"CUDA_VISIBLE_DEVICES": "6,7"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
     frozenset({2, 3})),  # this process numbers physical 6,7 as 2,3
    (["serve", "m"], {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, {}, None),  # UUIDs: unknown
    (["serve", "m", "-tp", "4"], {}, {"CUDA_VISIBLE_DEVICES": "0,1"}, frozenset({0, 1})),  # all we see
])
def test_server_gpus_from_its_command_and_environment(argv, server_env, own_env, expected):
    assert cb.server_gpus(argv, server_env, own_env) == expected


def test_a_cuda_compare_gives_its_cached_memory_back(monkeypatch):
    released = []
    monkeypatch.setattr(cb, "cuda_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(True))
    engine = cmp.Engine(16, cmp.CompareOptions(backend="torch-cuda", cuda_device=3))
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
