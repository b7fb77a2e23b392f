"""The per-window compare cache (``WORKDIR/compare/window-NNN.json``) cannot vouch for itself: its
key is the two files' SHA-256 from their manifests, which anyone who writes the work folder can
copy into a forged entry. Entries are signed with a key only this user can read (kept beside the
verified-hash records); an entry without a valid signature is computed again (docs/SAFETY.md)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures_demo import env_with

pytestmark = pytest.mark.timeout(300)


def _rerun(workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile",
                           str(workdir / "kldtui.toml")], capture_output=True, text=True, timeout=240,
                          env=env_with(), cwd=workdir)


def test_a_forged_compare_cache_entry_is_computed_again(uninterrupted: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    shutil.copytree(uninterrupted, workdir, symlinks=True)
    profile = workdir / "kldtui.toml"
    profile.write_text(profile.read_text().replace(str(uninterrupted), str(workdir)))
    report = workdir / "comparison-fine.json"  # the demo campaign's first candidate
    before = json.loads(report.read_text())
    entry_path = workdir / "compare" / "fine" / "window-001.json"
    entry = json.loads(entry_path.read_text())
    kl = entry["result"]["rows"]["kl"]
    forged = np.frombuffer(base64.b64decode(kl["data"]), dtype=kl["dtype"]).copy() * 0 + 1e-9
    kl["data"] = base64.b64encode(forged.astype(kl["dtype"]).tobytes()).decode("ascii")
    entry.pop("signature", None)
    entry_path.write_text(json.dumps(entry))
    report.unlink()
    proc = _rerun(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = json.loads(report.read_text())
    assert after["per_window_arrays"]["kl_mean"] == before["per_window_arrays"]["kl_mean"]
    assert after["per_window_arrays"]["kl_mean"][1] > 1e-6
