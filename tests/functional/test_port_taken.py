"""A port already taken by another server is detected before launching, and said plainly (issue 11
item 6), instead of kldtui talking to that server and failing later with "the capture hook is not
active"; an impossible host is a one-line error too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.stages.serve import ServerProcess


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_launcher_refuses_a_taken_port(tmp_path: Path, taken_port: int) -> None:
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(30)", "--port", str(taken_port)],
                           capture_dir=tmp_path / "cap", served_model_name="x", ensure_flags=False)
    with pytest.raises(BadInput, match=f"port {taken_port} .* already in use"):
        server.start()
    assert server.proc is None  # nothing was launched


@pytest.mark.timeout(120)
def test_pipeline_says_the_port_is_taken(tmp_path: Path, taken_port: int) -> None:
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    build_demo_suite(tmp_path / "suite")
    profile = tmp_path / "kldtui.toml"
    profile.write_text(PROFILE_TEXT.replace("port = 0 ", f"port = {taken_port} "))
    assert f"port = {taken_port}" in profile.read_text()
    env = dict(os.environ)
    env.pop("KLDTUI_EMBEDDED_FAULT", None)
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                          capture_output=True, text=True, timeout=100, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "already in use" in proc.stderr and str(taken_port) in proc.stderr
    assert "capture hook" not in proc.stdout + proc.stderr


def test_impossible_host_is_one_line(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", "pass", "--host", "999.1.1.1", "--port", "8123"],
                           capture_dir=tmp_path / "cap", served_model_name="x", ensure_flags=False)
    with pytest.raises(BadInput, match="999.1.1.1"):
        server.start()
    server = ServerProcess([sys.executable, "-c", "pass", "--host", "999.1.1.1", "--port", "0"],
                           capture_dir=tmp_path / "cap", served_model_name="x", ensure_flags=False)
    with pytest.raises(BadInput, match="999.1.1.1"):
        server.start()
