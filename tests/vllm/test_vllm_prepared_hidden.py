"""A stratified, clustered suite from ``kldtui prepare --layout hidden`` through the real vLLM CPU
server (issue 22 item 5): the tiny example's tokenizer and corpus (split into two sources, one
stratum each, 40 rows a document), its float32 reference captured as hidden states with the replay
check on the sentinels, ``kldtui verify`` on the finished suite, and the bf16 candidate's logits
compared against it with the suite's stratified source-cluster statistics."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.fixtures_vllm_chain import dump_toml, leftover_servers, write_profile

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server
LENGTH = 256
PLAN = """
[plan]
contexts_per_source = 2

[[stratum]]
name = "first-half"
contexts = 4
qualification = 2
sentinels = 1

[[stratum]]
name = "second-half"
contexts = 4
qualification = 2
sentinels = 1

[[source]]
key = "a"
dataset = "corpus-a.jsonl"
split = "train"
stratum = "first-half"
text_field = "text"
rows_per_source = 40

[[source]]
key = "b"
dataset = "corpus-b.jsonl"
split = "train"
stratum = "second-half"
text_field = "text"
rows_per_source = 40
"""


def _kldtui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kldtui", *args], capture_output=True, text=True,
                          check=False)


def _stages(profile_path: Path, output: Path | None, kind: str) -> None:
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import load_profile

    profile = load_profile(profile_path)
    pipeline = Pipeline(profile, lambda event: None, output_dir=output, output_kind=kind)
    try:
        pipeline.serve()
        pipeline.capture()
        pipeline.finalize()
    except Exception as exc:  # noqa: BLE001 - any failure fails the test, with the server's log
        log = profile.run.workdir / "server.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(none)"
        pytest.fail(f"{profile_path.name}: {type(exc).__name__}: {exc}\nserver log:\n{tail}")
    finally:
        pipeline.stop_server(reason="done")


def _profile(root: Path, name: str, model: Path, dtype: str, suite: Path, capture: dict[str, object]) -> Path:
    path = write_profile(root / f"{name}.toml", model=model, dtype=dtype, suite_dir=suite,
                         workdir=root / f"work-{name}", run_name=name)
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    doc["reference"]["logits_dir"] = "reference-hidden"
    doc["capture"] = capture
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path


def test_vllm_captures_a_prepared_stratified_suite(tmp_path: Path, vllm_version: str) -> None:
    from kldtui.formats import fidelity as fid
    from kldtui.formats.report import load_report
    from tests.tiny_llama import build_example

    built = build_example(tmp_path / "example")
    rows = built["corpus"].read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "corpus-a.jsonl").write_text("".join(rows[:400]), encoding="utf-8")
    (tmp_path / "corpus-b.jsonl").write_text("".join(rows[400:]), encoding="utf-8")
    plan = tmp_path / "PLAN.toml"
    plan.write_text(PLAN, encoding="utf-8")
    suite = tmp_path / "suite"
    out = _kldtui("prepare", "--layout", "hidden", "--sources", str(plan), "--tokenizer", str(built["model"]),
                  "--output-dir", str(suite), "--context-length", str(LENGTH))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 contexts of 256 tokens" in out.stdout and "qualification 4, sentinels 2" in out.stdout
    doc = json.loads((suite / "suite-manifest.json").read_text())
    sentinels = [c["index"] for c in doc["contexts"] if c["sentinel"]]
    out = _kldtui("export-head", "--checkpoint", str(built["model"]), "--output",
                  str(suite / fid.LM_HEAD_DIR))
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        reference = _profile(tmp_path, "ref", built["model"], "float32", suite,
                             {"mode": "hidden", "replay_check": 2})
        _stages(reference, suite / fid.HIDDEN_DIR, "reference")
        check = json.loads((suite / fid.VALIDATION_DIR / "hidden-replay-qualification.json").read_text())
        assert sorted(check["context_indices"]) == sorted(sentinels)  # the sentinels are the sample
        out = _kldtui("verify", str(suite))
        assert out.returncode == 0, out.stdout + out.stderr
        _stages(_profile(tmp_path, "cand", built["candidate"], "bfloat16", suite, {"mode": "logits"}), None,
                "candidate")
    finally:
        left = leftover_servers(tmp_path)
        assert left == [], f"servers left running: {left}"
    report = tmp_path / "report.json"
    out = _kldtui("compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / fid.HIDDEN_DIR),
                  "--candidate-dir", str(tmp_path / "work-cand" / "candidate"), "--output", str(report),
                  "--bootstrap-samples", "1000")
    assert out.returncode == 0, out.stdout + out.stderr
    stats = load_report(report).suite_statistics
    assert stats is not None and stats.contexts == 8
    stratified = stats.kl_stratified_source_cluster_bootstrap
    assert stratified.stratum_sizes == {"first-half": 4, "second-half": 4}
    print(f"vLLM CPU, prepared hidden suite (8 x {LENGTH}): replay check mean KL "
          f"{check['kl_live_to_replay']['mean']:.3g}; bf16 candidate stratified micro mean KL "
          f"{stratified.micro.estimate:.6g} [{stratified.micro.ci95_low:.6g}, "
          f"{stratified.micro.ci95_high:.6g}], "
          f"clusters {stratified.stratum_cluster_counts}")
    assert 0 < stratified.micro.estimate < 1
