"""The producer's chain through real vLLM on CPU: prepare a suite with the tiny model's own
tokenizer, capture the float32 reference from the profile's [reference] (plus the repeat of
window 0), capture the bf16 candidate, compare, and publish --dry-run; the card's figures
match the folder. The profile is the shipped ``examples/tiny-vllm-cpu.toml`` with this test's
paths, python and KV-cache size."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.fixtures_vllm_chain import EXAMPLE_PROFILE, _tail, dump_toml, leftover_servers

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server
CONTEXT = 256


@pytest.mark.timeout(1500)
def test_prepare_reference_candidate_compare_publish(tmp_path: Path, vllm_version: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.cli.main import main
    from tests.fixtures_publish import check_card_figures
    from tests.tiny_llama import build_example

    built = build_example(tmp_path)
    suite = tmp_path / "tiny-reference"
    assert main(["prepare", "--tokenizer", str(built["model"]), "--output-dir", str(suite),
                 "--sources", str(built["sources"]), "--context-length", str(CONTEXT)]) == 0

    doc = tomllib.loads(EXAMPLE_PROFILE.read_text(encoding="utf-8"))
    assert doc["reference"]["capture"] == "vllm", f"{EXAMPLE_PROFILE}: no longer captures its reference"
    doc["reference"]["local_dir"] = str(suite)
    doc["reference"]["model"] = str(built["model"])
    doc["candidate"]["model"] = str(built["candidate"])
    doc["candidate"]["python"] = sys.executable
    doc["candidate"]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    workdir = tmp_path / "work"
    doc["run"]["workdir"] = str(workdir)
    doc["compare"]["bootstrap_samples"] = 1000
    profile = tmp_path / "profile.toml"
    profile.write_text(dump_toml(doc), encoding="utf-8")

    log = tmp_path / "run.out"
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                              stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=1200, check=False)
    assert proc.returncode == 0, f"kldtui run exited {proc.returncode}:\n{_tail(log)}\n" \
                                 f"server log:\n{_tail(workdir / 'server.log')}"
    assert not leftover_servers(tmp_path)

    ref = json.loads((suite / "ref" / "manifest.json").read_text())
    assert ref["kind"] == "reference" and ref["vocab_size"] == 4096 and ref["window_count"] == 3
    assert str(built["model"]) in json.dumps(ref["runtime"])
    records = json.loads((suite / "capture-reference.json").read_text())
    assert [r["window_index"] for r in records] == [0, 1, 2]
    noise = json.loads((suite / "repeat-noise-window000.json").read_text())
    assert noise["windows"] == 1 and noise["kl_reference_to_candidate"]["mean"] < 1e-3
    report = json.loads((workdir / "comparison.json").read_text())
    assert report["windows"] == 3 and report["positions"] == 3 * (CONTEXT - 1)
    # the bf16-rounded weights move the distribution, well above the repeat noise
    assert report["kl_reference_to_candidate"]["mean"] > 10 * noise["kl_reference_to_candidate"]["mean"]

    capsys.readouterr()
    assert main(["publish", str(suite), "--repo-id", "me/tiny-llama-kld", "--dry-run"]) == 0
    card = capsys.readouterr().out
    check_card_figures(card, suite)
    assert "capture-reference.json" in card and "repeat-noise-window000.json" in card
