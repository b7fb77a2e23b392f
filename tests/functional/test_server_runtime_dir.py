"""A launched server's runtime folder (vLLM's ZMQ sockets: VLLM_RPC_BASE_PATH): private to it,
removed when it stops, left alone when the user set the variable; folders of killed kldtui
processes are swept at the next start, never another user's or a link."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kldtui.servers.base import CaptureTarget
from kldtui.servers.registry import server_kind
from kldtui.stages.serve import RUNTIME_DIR_PREFIX, RuntimeDir, ServerProcess

# the child reports the folder it was given and makes a socket file in it, as vLLM does
CHILD = """
import os, socket, sys, time
d = os.environ.get("VLLM_RPC_BASE_PATH", "")
print("FOLDER=" + d, flush=True)
s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(d, "0123e4567-e89b-12d3-a456-426614174000"))
time.sleep(60)
"""


def _run(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[ServerProcess, Path]:
    server = ServerProcess([sys.executable, "-c", CHILD], capture_dir=tmp_path / "cap", served_model_name="m",
                           env=env, runtime_dir_env="VLLM_RPC_BASE_PATH", stop_timeouts=(2.0, 2.0, 2.0))
    server.start()
    for _ in range(200):
        lines = [x for x in server.last_lines(20) if x.startswith("FOLDER=")]
        if lines:
            return server, Path(lines[0].strip().split("=", 1)[1])
        server.alive()
        time.sleep(0.05)
    server.stop()
    raise AssertionError(f"the child never said its folder: {server.last_lines()}")


def test_a_vllm_plan_asks_for_a_private_socket_folder(tmp_path: Path) -> None:
    kind = server_kind("vllm")
    config = kind.configure({"model": "org/tiny"}, base_dir=tmp_path, label="[candidate]")
    assert kind.plan(config, CaptureTarget()).runtime_dir_env == "VLLM_RPC_BASE_PATH"
    embedded = server_kind("embedded")
    config = embedded.configure({}, base_dir=tmp_path, label="[candidate]")
    assert embedded.plan(config, CaptureTarget()).runtime_dir_env is None  # kldtui's own: no sockets


def test_each_launched_server_gets_a_private_folder_removed_at_stop(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    server, folder = _run(tmp_path)
    try:
        assert folder.name.startswith(f"{RUNTIME_DIR_PREFIX}{os.getpid()}-")
        st = folder.lstat()
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        for _ in range(100):
            if any(folder.iterdir()):
                break
            time.sleep(0.05)
        assert any(stat.S_ISSOCK(p.lstat().st_mode) for p in folder.iterdir())
        assert len(str(folder)) + 37 < 108  # room for vLLM's socket names
    finally:
        server.stop()
    assert not folder.exists()


def test_a_folder_the_user_set_is_used_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "mine"
    own.mkdir()
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(own))
    server, folder = _run(tmp_path)
    server.stop()
    assert folder == own and own.is_dir()


def test_folders_of_killed_kldtui_processes_are_swept_and_nothing_else(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    runtime = RuntimeDir()
    runtime.base = tmp_path
    stale = tmp_path / f"{RUNTIME_DIR_PREFIX}{dead_pid}-abc"
    (stale / "sub").mkdir(parents=True)
    live = tmp_path / f"{RUNTIME_DIR_PREFIX}{os.getpid()}-live"
    live.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / f"{RUNTIME_DIR_PREFIX}{dead_pid}-link"
    link.symlink_to(target)
    other = tmp_path / f"{RUNTIME_DIR_PREFIX}notapid-x"
    other.mkdir()
    made = runtime.create()
    assert not stale.exists()
    assert live.is_dir() and other.is_dir() and link.is_symlink() and (target / "keep").exists()
    runtime.remove()
    assert not made.exists()
