"""`kldtui demo --batch`: end to end in a subprocess, and resumed after `kill -9`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_campaign import noise_model_of
from tests.fixtures_demo import demo_cmd, env_with, stable
from tests.proc_utils import pid_dead

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # the whole demo, killed and rerun

REPORTS = ("comparison-fine.json", "comparison-coarse.json", "repeat/comparison-fine.json")


def test_demo_batch_writes_the_campaign(uninterrupted: Path) -> None:
    """Two candidates and the leader's repeat, each a report of 12 windows; a leaderboard with a
    verdict, and the measured noise model (issue 23 item 5)."""
    kls = {}
    for name in REPORTS:
        report = json.loads((uninterrupted / name).read_text())
        assert report["windows"] == 12 and report["window_range"] == [0, 12]
        assert len(report["per_window"]) == 12
        boot = report["kl_window_cluster_bootstrap"]
        kl = kls[name] = boot["estimate"]
        assert 1e-4 < kl < 1.0  # the perturbed model really differs, but not wildly
        assert boot["ci95_low"] <= kl <= boot["ci95_high"]
        assert set(report["domains"]) == {"prose", "code", "instruction"}
    assert kls["comparison-fine.json"] < kls["comparison-coarse.json"]
    ref_manifest = json.loads((uninterrupted / "suite" / "ref" / "manifest.json").read_text())
    assert ref_manifest["kind"] == "reference" and ref_manifest["window_count"] == 12
    cand_manifest = json.loads((uninterrupted / "candidates" / "fine" / "manifest.json").read_text())
    assert cand_manifest["runtime"]["argv"][1:3] == ["-m", "kldtui.embedded"]
    assert (uninterrupted / "kldtui.toml").is_file()
    board = json.loads((uninterrupted / "leaderboard.json").read_text())
    assert [r["name"] for r in board["rows"]] == ["fine", "coarse"]
    assert board["rows"][1]["outcome_vs_best"] == "a_closer"  # a verdict: coarse is farther
    assert "measured repeat variation" in board["noise_model"]
    noise = json.loads(noise_model_of(uninterrupted).read_text())
    assert len(noise["metric_repeat"]["per_window"]) == 12


def test_demo_leaderboard_is_what_the_leaderboard_command_writes(uninterrupted: Path, tmp_path: Path) -> None:
    """README: the campaign's leaderboard.json is the same as `kldtui leaderboard comparison-*.json
    --noise noise-model-HASH.json --json` (every key, `windows_needed` included)."""
    out = tmp_path / "cli.json"
    reports = [str(uninterrupted / name) for name in ("comparison-fine.json", "comparison-coarse.json")]
    proc = subprocess.run([sys.executable, "-m", "kldtui", "leaderboard", *reports, "--noise",
                           str(noise_model_of(uninterrupted)), "--json", str(out), "--plain"],
                          capture_output=True, text=True, timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((uninterrupted / "leaderboard.json").read_text()) == json.loads(out.read_text())


def _records(path: Path) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    return {r["window_index"]: r for r in json.loads(path.read_text())}



def test_demo_resumes_after_kill_9_without_recapturing(uninterrupted: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    # slow chunks down so the kill lands mid-capture, after two candidate windows
    proc = subprocess.Popen(demo_cmd(workdir, "--jsonl"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_with(KLDTUI_EMBEDDED_FAULT="chunk-delay:0.15"))
    captured: list[int] = []
    server_pids: list[int] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == "ServerReady" and event.get("pid"):
            server_pids.append(event["pid"])
        if event["event"] == "WindowState" and event["stage"] == "capture" and event["state"] == "captured":
            captured.append(event["window_index"])
            if len(captured) == 2:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert captured == [0, 1]
    # the servers die with kldtui (PR_SET_PDEATHSIG): no orphan
    deadline = time.monotonic() + 20
    while not all(pid_dead(pid) for pid in server_pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_pids and all(pid_dead(pid) for pid in server_pids)

    records_path = workdir / "capture" / "capture-fine.json"  # the campaign's first candidate
    before = _records(records_path)
    assert {0, 1} <= set(before) and len(before) < 12
    ref_before = _records(workdir / "reference-run" / "capture" / "capture-reference.json")
    assert len(ref_before) == 12

    rerun = subprocess.run(demo_cmd(workdir), capture_output=True, text=True, timeout=240, env=env_with())
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    after = _records(records_path)
    assert set(after) == set(range(12))
    for index, record in before.items():  # finished windows were not captured again
        assert after[index]["request_id"] == record["request_id"]
    # every window finalized and verified: no chunk is left (the reference capture's neither)
    assert not list((workdir / "capture").rglob("*.safetensors"))
    assert not list((workdir / "reference-run" / "capture").rglob("*.safetensors"))
    ref_after = _records(workdir / "reference-run" / "capture" / "capture-reference.json")
    ids = {i: r["request_id"] for i, r in ref_before.items()}
    assert {i: r["request_id"] for i, r in ref_after.items()} == ids
    assert "already captured" in rerun.stdout

    for name in REPORTS:
        resumed = json.loads((workdir / name).read_text())
        full = json.loads((uninterrupted / name).read_text())
        assert stable(resumed) == stable(full), name


def test_the_campaign_folder_brings_its_noise_model(uninterrupted: Path, tmp_path: Path) -> None:
    """`kldtui leaderboard DIR` ranks as the campaign did: with the folder's noise model (it used
    none, so its ties and its provisional marks were not the campaign's), and says so on stderr."""
    out = tmp_path / "folder.json"

    def leaderboard(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kldtui", "leaderboard", str(uninterrupted), *extra,
                               "--plain"], capture_output=True, text=True, timeout=120, env=env_with())

    proc = leaderboard("--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((uninterrupted / "leaderboard.json").read_text()) == json.loads(out.read_text())
    said = [line for line in proc.stderr.splitlines() if "noise model" in line]
    assert said == [f"kldtui: noise model: {noise_model_of(uninterrupted)}, the campaign's (give "
                    "--noise FILE or --no-noise-floor for another)"]
    assert "measured repeat variation" in proc.stdout
    bare = leaderboard("--no-noise-floor")
    assert bare.returncode == 0 and "noise model" not in bare.stderr
    assert "noise model: none" in bare.stdout
