"""A real vLLM server for the real-vLLM tests (tests/vllm): started with the vLLM venv's python
(scripts/run_vllm_tests.sh), waited for, stopped with its whole process group.

Everything here fails (never skips) when vLLM is missing: the vllm step must prove the hook.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kldtui.stages.serve import temp_folder_entries

SERVED_NAME = "tiny"
CONTEXT = 2048


def require_vllm() -> str:
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001 - a broken vLLM install fails the test, said plainly
        pytest.fail(f"vLLM is not importable from {sys.executable} ({type(exc).__name__}: {exc}); "
                    "run scripts/run_vllm_tests.sh, which installs it")
    return str(vllm.__version__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    def __init__(self, model: Path, log: Path, capture_dir: Path | None, max_num_seqs: int, cwd: Path, *,
                 extra_args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None,
                 port: int | None = None):
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "VLLM_KLD_CAPTURE_DIR"}
        if capture_dir is not None:
            env["VLLM_KLD_CAPTURE_DIR"] = str(capture_dir)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # vLLM's ZMQ sockets and temp files (a vllm_dist_* file per start) in a folder of this
        # server's, removed at stop (in the temp folder they stayed behind: about 70 sockets per run
        # of the vLLM step), the compile caches where they were, as kldtui's own launcher does
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="kldtui-test-rpc-"))
        env["VLLM_RPC_BASE_PATH"] = str(self.runtime_dir)
        env.update(extra_env or {})
        if "TMPDIR" not in (extra_env or {}):
            env.update(temp_folder_entries(self.runtime_dir, env))
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", "float32", "--kv-cache-memory-bytes", "1073741824", "--skip-tokenizer-init",
                "--max-num-seqs", str(max_num_seqs), "--max-num-batched-tokens", "256",
                "--no-enable-prefix-caching", "--enforce-eager", "--max-model-len", str(2 * CONTEXT),
                *extra_args]
        self._log_handle = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log_handle, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd, start_new_session=True)

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def wait_ready(self, timeout: float = 420.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            time.sleep(1.0)
        pytest.fail(f"vLLM did not become healthy in {timeout:.0f} s:\n{self.log_tail()}")

    def complete(self, ids: list[int], request_id: str, prompt_logprobs: bool = True) -> dict:
        import httpx

        body = {"model": SERVED_NAME, "prompt": ids, "max_tokens": 1, "temperature": 0, "seed": 1}
        if prompt_logprobs:
            body["prompt_logprobs"] = 1
        resp = httpx.post(self.url + "/v1/completions", json=body, headers={"X-Request-Id": request_id},
                          timeout=600)
        assert resp.status_code == 200, resp.text[:500]
        return resp.json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        # the engine core and workers share the group: make sure none is left
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log_handle.close()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


# Tensor parallelism 2 on the CPU build (docs/VLLM_CPU.md): one core per rank (without the binding
# vLLM stops with "Not enough allowed NUMA nodes"), the mp executor, and every address on loopback.
TP2_ARGS = ("--tensor-parallel-size", "2", "--distributed-executor-backend", "mp")
TP2_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_HOST_IP": "127.0.0.1"}


@contextlib.contextmanager
def running_server(model: Path, log: Path, capture_dir: Path | None, max_num_seqs: int,
                   cwd: Path, *, extra_args: tuple[str, ...] = (),
                   extra_env: dict[str, str] | None = None) -> Iterator[VllmServer]:
    server = VllmServer(model, log, capture_dir, max_num_seqs, cwd, extra_args=extra_args,
                        extra_env=extra_env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
