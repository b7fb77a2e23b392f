"""A launched server's runtime folder (vLLM's ZMQ sockets: VLLM_RPC_BASE_PATH; its temp folder:
TMPDIR): private to it, removed when it stops, left alone when the user set the variable; the
compile caches stay in kldtui's temp folder; folders of killed kldtui processes are swept at the
next start, never another user's or a link."""

from __future__ import annotations

import getpass
import json
import os
import stat
import subprocess
import sys
import tempfile
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


# the child says what it was given and leaves a file in its temp folder, as vLLM's vllm_dist_* rendezvous
TEMP_CHILD = """
import json, os, sys, tempfile, time
names = ("VLLM_RPC_BASE_PATH", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "CUTE_DSL_CACHE_DIR")
with open(os.path.join(tempfile.gettempdir(), "vllm_dist_0123456789abcdef"), "w") as f:
    f.write("rendezvous")
print("SAID=" + json.dumps({**{n: os.environ.get(n) for n in names}, "temp": tempfile.gettempdir()}),
      flush=True)
time.sleep(60)
"""
CACHES = ("TORCHINDUCTOR_CACHE_DIR", "CUTE_DSL_CACHE_DIR")


def _said(tmp_path: Path, env: dict[str, str] | None = None,
          runtime_dir_env: str | None = "VLLM_RPC_BASE_PATH") -> tuple[ServerProcess, dict[str, str]]:
    server = ServerProcess([sys.executable, "-c", TEMP_CHILD], capture_dir=tmp_path / "cap",
                           served_model_name="m", env=env, runtime_dir_env=runtime_dir_env,
                           stop_timeouts=(2.0, 2.0, 2.0))
    server.start()
    for _ in range(200):
        lines = [x for x in server.last_lines(20) if x.startswith("SAID=")]
        if lines:
            return server, json.loads(lines[0].split("=", 1)[1])
        if server.alive() is not None:
            break
        time.sleep(0.05)
    server.stop()
    raise AssertionError(f"the child never said its environment: {server.last_lines()}")


@pytest.fixture
def temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temp folder, in tmp_path (a long path: the runtime folder goes to /tmp)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    for name in ("VLLM_RPC_BASE_PATH", *CACHES):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_the_runtime_folder_is_the_servers_temp_folder_and_goes_with_what_it_left(
        tmp_path: Path, temp_folder: Path) -> None:
    server, said = _said(tmp_path)
    folder = Path(said["TMPDIR"])
    try:
        assert said["VLLM_RPC_BASE_PATH"] == said["TMPDIR"] == said["temp"]
        assert folder.name.startswith(f"{RUNTIME_DIR_PREFIX}{os.getpid()}-")
        assert (folder / "vllm_dist_0123456789abcdef").is_file()
        # the compile caches where they are without the runtime folder: this process's temp folder
        assert said["TORCHINDUCTOR_CACHE_DIR"] == str(temp_folder / f"torchinductor_{getpass.getuser()}")
        user = os.environ.get("USER") or getpass.getuser()
        assert said["CUTE_DSL_CACHE_DIR"] == str(temp_folder / user / "cutlass_python_cache")
    finally:
        server.stop()
    assert not folder.exists()
    assert list(temp_folder.iterdir()) == []  # nothing of the server's in this process's temp folder


def test_a_temp_folder_and_caches_the_user_set_are_kept(tmp_path: Path, temp_folder: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "own-tmp"
    own.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    server, said = _said(tmp_path, env={"TMPDIR": str(own)})  # the profile's env
    server.stop()
    assert said["TMPDIR"] == said["temp"] == str(own)
    assert (own / "vllm_dist_0123456789abcdef").is_file()  # the user's folder: the user's files
    assert said["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert said["CUTE_DSL_CACHE_DIR"] is None  # the child's own default, in the user's temp folder
    sockets = Path(said["VLLM_RPC_BASE_PATH"])  # the sockets still get a private folder
    assert sockets.name.startswith(RUNTIME_DIR_PREFIX) and not sockets.exists()

    server, said = _said(tmp_path)  # a cache set in this shell is kept too
    server.stop()
    assert said["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert said["TMPDIR"] == said["VLLM_RPC_BASE_PATH"] and not Path(said["TMPDIR"]).exists()


def test_a_kind_without_a_runtime_folder_keeps_the_temp_folder(tmp_path: Path, temp_folder: Path) -> None:
    server, said = _said(tmp_path, runtime_dir_env=None)
    server.stop()
    assert said["TMPDIR"] == said["temp"] == str(temp_folder)
    assert said["TORCHINDUCTOR_CACHE_DIR"] is None and said["VLLM_RPC_BASE_PATH"] is None


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
