"""`kldtui serve --profile`: a real child server, followed until a signal stops it cleanly."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kldtui.workflow.demo import prepare_demo
from kldtui.workspace import PROFILES_FILE_NAME
from tests.proc_utils import pid_dead

pytestmark = pytest.mark.timeout(120)



@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_serve_runs_until_a_signal_and_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    profile = prepare_demo(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "kldtui", "serve", "--profile", str(profile.path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = pid = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if m := re.search(r"ready at (http://\S+), serving demo \(pid (\d+)\)", line):
            url, pid = m.group(1).rstrip(","), int(m.group(2))
        if "Ctrl-C stops it" in line:
            break
    assert url and pid, "".join(lines)
    assert [m["id"] for m in httpx.get(f"{url}/v1/models", trust_env=False).json()["data"]] == ["demo"]
    assert (tmp_path / "capture" / "server-001").is_dir()
    # the profile claimed its work folder before its server started, as `kldtui run` does
    owners = json.loads((tmp_path / PROFILES_FILE_NAME).read_text())["owners"]
    assert owners == {"leaderboard.json": "kldtui.toml"}
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    deadline = time.monotonic() + 10
    while not pid_dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_dead(pid)
    assert "server stopped" in out + err


def test_serve_refuses_attach_profiles(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[candidate]\nkind = "attach"\nurl = "http://127.0.0.1:9"\nserver_capture_dir = "c"\n')
    proc = subprocess.run([sys.executable, "-m", "kldtui", "serve", "--profile", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "kind = 'attach'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_serve_checks_the_model_path_before_launching(tmp_path: Path) -> None:
    profile = prepare_demo(tmp_path)
    assert profile.path is not None
    bad = tmp_path / "bad.toml"
    text = profile.path.read_text()
    text = "\n".join(line for line in text.splitlines()  # the embedded model's own keys
                     if not line.startswith(("model_seed", "vocab_size", "perturb", "runtime_noise")))
    bad.write_text(text.replace('kind = "embedded"', 'kind = "vllm"\nmodel = "/nonexistent/m"', 1))
    proc = subprocess.run([sys.executable, "-m", "kldtui", "serve", "--profile", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0]
    assert "/nonexistent/m" in lines[0] and "no such folder" in lines[0]
    assert not (tmp_path / "capture").exists()  # nothing was launched, no capture folder made
