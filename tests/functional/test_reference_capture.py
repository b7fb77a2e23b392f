"""A profile's reference capture: into the suite's ref/, with capture records, a repeat of the
first window (repeat-noise-window000.json) and a runtime identity without secrets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.serve import ServerProcess
from kldtui.workflow.pipeline import Pipeline, _redact
from kldtui.workflow.profile import profile_from_dict


def test_attached_reference_is_captured_finalized_and_repeated(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    suite_dir = tmp_path / "suite"
    write_suite(suite_dir, [(d, rng.integers(0, 300, 40).tolist()) for d in ("prose", "prose", "code")])
    chunks = tmp_path / "ref-chunks"
    ref_argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "ref",
                "--vocab-size", "300", "--max-num-batched-tokens", "16"]
    with ServerProcess(ref_argv, capture_dir=chunks, served_model_name="ref") as ref_server:
        url = ref_server.wait_ready(timeout=60)
        doc = {"reference": {"local_dir": str(suite_dir), "capture": "attach", "url": url,
                             "served_model_name": "ref", "server_capture_dir": str(chunks)},
               "candidate": {"kind": "embedded", "served_model_name": "cand", "vocab_size": 300,
                             "perturb": 0.2, "max_num_batched_tokens": 16},
               "run": {"workdir": str(tmp_path / "work"), "run_name": "cand"},
               "compare": {"bootstrap_samples": 200}}
        report = json.loads(Pipeline(profile_from_dict(doc, base_dir=tmp_path)).run_all().read_text())
    assert report["windows"] == 3 and report["kl_reference_to_candidate"]["mean"] > 0
    manifest = json.loads((suite_dir / "ref" / "manifest.json").read_text())
    assert manifest["kind"] == "reference" and manifest["vocab_size"] == 300
    assert manifest["runtime"]["launcher"] == "attached" and manifest["runtime"]["url"] == url
    records = json.loads((suite_dir / "capture-reference.json").read_text())
    assert [r["window_index"] for r in records] == [0, 1, 2]
    noise = json.loads((suite_dir / "repeat-noise-window000.json").read_text())
    # the embedded model is deterministic: the repeat equals the first capture
    assert noise["windows"] == 1 and noise["window_range"] == [0, 1]
    assert noise["kl_reference_to_candidate"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert noise["top1_agreement"] == 1.0
    capsys.readouterr()
    assert main(["verify", str(suite_dir)]) == 0
    assert main(["publish", str(suite_dir), "--repo-id", "me/ref", "--dry-run"]) == 0
    card = capsys.readouterr().out
    assert "capture-reference.json" in card and "- top-1 agreement = 100.0000%" in card


def test_runtime_identity_is_redacted() -> None:
    runtime = {"argv": ["vllm", "serve", "m", "--api-key", "s3cret", "--hf-token=hf_abc", "--port", "1"],
               "env": {"HF_TOKEN": "hf_abc", "OPENAI_API_KEY": "k", "VLLM_KLD_CAPTURE_DIR": "/c"},
               "model": "m"}
    clean = _redact(runtime)
    assert clean["argv"] == ["vllm", "serve", "m", "--api-key", "<redacted>", "--hf-token=<redacted>",
                             "--port", "1"]
    assert clean["env"] == {"HF_TOKEN": "<redacted>", "OPENAI_API_KEY": "<redacted>",
                            "VLLM_KLD_CAPTURE_DIR": "/c"}
    assert "s3cret" not in json.dumps(clean) and "hf_abc" not in json.dumps(clean)
    assert runtime["env"]["HF_TOKEN"] == "hf_abc"  # the original is not changed
