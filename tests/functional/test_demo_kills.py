"""A demo killed at any moment resumes to the same report as an uninterrupted run (issue 11 item 5),
including a kill inside the reference's finalize, which leaves a reference manifest listing only
the finished windows: that is resume state, not a finished reference."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures_demo import demo_cmd, env_with, stable

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # the whole demo, killed and rerun


def _report(workdir: Path) -> dict:
    """The demo campaign's reports: both candidates' and the leader's repeat."""
    names = ("comparison-fine.json", "comparison-coarse.json", "repeat/comparison-fine.json")
    return {name: stable(json.loads((workdir / name).read_text())) for name in names}


def test_partial_reference_manifest_resumes(uninterrupted: Path, tmp_path: Path) -> None:
    """The state a kill inside reference finalize leaves: every reference window captured and
    recorded (chunks kept until their window is finalized), windows 0-2 finalized and listed,
    window 3 half-written, 4-11 not started. The demo profile with keep_chunks, so that the state
    can be made from a finished run."""
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    workdir = tmp_path / "demo"
    build_demo_suite(workdir / "suite")
    profile = workdir / "kldtui.toml"
    profile.write_text(PROFILE_TEXT.replace("[run]\n", "[run]\nkeep_chunks = true\n", 1))
    cmd = [sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env_with())
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    ref = workdir / "suite" / "ref"
    manifest = json.loads((ref / "manifest.json").read_text())
    manifest["windows"] = manifest["windows"][:3]
    manifest["window_count"] = 3
    (ref / "manifest.json").write_text(json.dumps(manifest, indent=2))
    for i in range(3, 12):
        (ref / f"logits_{i:03d}.safetensors").unlink()
    (ref / ".logits_003.safetensors.partial").write_bytes(b"\0" * 1000)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env_with())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _report(workdir) == _report(uninterrupted)
    assert not list(ref.glob(".*partial"))
    assert json.loads((ref / "manifest.json").read_text())["window_count"] == 12


def _run_until(workdir: Path, trigger: str, sig: signal.Signals) -> int:
    """Run the demo (slowed down) and send ``sig`` at the first event matching ``trigger``."""
    proc = subprocess.Popen(demo_cmd(workdir, "--jsonl"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_with(KLDTUI_EMBEDDED_FAULT="chunk-delay:0.05"))
    assert proc.stdout is not None
    seen = {"captured": 0}
    sent = False
    for line in proc.stdout:
        event = json.loads(line)
        kind, stage = event.get("event"), event.get("stage")
        if kind == "WindowState" and stage == "capture" and event.get("state") == "captured":
            seen["captured"] += 1
        hit = (trigger == "first-event"
               or (trigger == "reference-finalize" and kind == "Progress" and stage == "reference"
                   and event.get("task") == "finalized")  # the reference capture's finalize
               or (trigger == "reference-capture" and kind == "Progress" and stage == "reference"
                   and str(event.get("task", "")).startswith("window "))
               or (trigger == "capture-2" and seen["captured"] >= 2)
               or (trigger == "compared" and kind == "WindowState" and stage == "compare"
                   and event.get("state") == "compared"))
        if hit and not sent:
            proc.send_signal(sig)
            sent = True
            if sig == signal.SIGKILL:
                break
    rest, _ = proc.communicate(timeout=120)
    if sig != signal.SIGKILL:  # an interrupted run says so, and no part of it reports an error
        events = [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
        errors = [e for e in events if e.get("level") == "error" or e.get("event") == "StageFailed"]
        assert not errors, (trigger, sig.name, errors)
        stopped = [e["line"] for e in events if "server stopped (" in str(e.get("line", ""))]
        assert not any("(error)" in line for line in stopped), stopped
        if proc.returncode == 130:  # stopped by the signal, not by a finished capture
            assert not any("(capture finished)" in line for line in stopped), stopped
    return proc.returncode


def test_demo_survives_kills_at_many_points(uninterrupted: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    codes = []
    for trigger, sig in (("first-event", signal.SIGKILL),
                         ("reference-capture", signal.SIGTERM),
                         ("reference-finalize", signal.SIGTERM),
                         ("reference-finalize", signal.SIGINT),
                         ("reference-finalize", signal.SIGKILL),
                         ("capture-2", signal.SIGINT),
                         ("compared", signal.SIGKILL),
                         ("compared", signal.SIGTERM)):
        code = _run_until(workdir, trigger, sig)
        codes.append((trigger, sig.name, code))
        # interrupted (130), killed, or finished before the trigger came (0); never failed
        assert code in (0, 130, -signal.SIGKILL), codes
    proc = subprocess.run(demo_cmd(workdir), capture_output=True, text=True, timeout=240, env=env_with())
    assert proc.returncode == 0, (codes, proc.stdout[-3000:] + proc.stderr[-3000:])
    assert _report(workdir) == _report(uninterrupted)
    assert any(code != 0 for _, _, code in codes)
