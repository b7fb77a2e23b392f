"""``kldtui prepare --layout hidden`` end to end: a stratified, clustered context suite prepared from
local files, its reference captured as hidden states by the embedded server, finalized into the
published layout, verified, and a candidate compared against it with the suite's stratified
source-cluster statistics; the one-line refusals of impossible plans."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.embedded.model import TinyModel
from kldtui.formats import fidelity as fid
from kldtui.formats.report import load_report
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import f32_to_bf16
from kldtui.workflow.profile import profile_from_dict
from tests.fixtures_capture_run import serve_capture_finalize
from tests.fixtures_prepare import article_rows, build_tokenizer, code_rows, write_hidden_plan, write_jsonl

pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(300)

VOCAB, SEED, LENGTH = 512, 5, 64
STRATA = """
[[stratum]]
name = "prose"
contexts = 10
qualification = 4
sentinels = 2

[[stratum]]
name = "code"
contexts = 6
qualification = 2
sentinels = 1
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prepare-hidden-inputs")
    return {"tokenizer": build_tokenizer(root / "tokenizer"),
            "articles": write_jsonl(root / "articles.jsonl", article_rows(30, sites=8)),
            "code": write_jsonl(root / "code.jsonl", code_rows(40)), "root": root}


def _prepare(inputs: dict[str, Path], out: Path, plan: Path, *extra: str) -> int:
    return main(["prepare", "--layout", "hidden", "--tokenizer", str(inputs["tokenizer"]), "--output-dir",
                 str(out), "--sources", str(plan), "--context-length", str(LENGTH), *extra])


def _embedded(**own: Any) -> dict[str, Any]:
    return {"kind": "embedded", "served_model_name": "m", "model_seed": SEED, "vocab_size": VOCAB, "port": 0,
            "startup_timeout": 60.0, "request_timeout": 60.0, **own}


def _capture(suite: Path, workdir: Path, output: Path, kind: str, candidate: dict[str, Any],
             capture: dict[str, Any]) -> None:
    profile = profile_from_dict({"reference": {"local_dir": str(suite), "logits_dir": fid.HIDDEN_DIR},
                                 "candidate": candidate, "capture": capture,
                                 "run": {"workdir": str(workdir), "run_name": kind}}, base_dir=workdir)
    serve_capture_finalize(profile, output, kind)


@pytest.mark.slow  # two embedded servers, a hidden capture with its replay check, a compare
def test_a_prepared_hidden_suite_is_captured_verified_and_compared(
        inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_hidden_plan(tmp_path / "PLAN.toml", inputs, strata=STRATA)
    suite_dir = tmp_path / "suite"
    assert _prepare(inputs, suite_dir, plan) == 0
    said = capsys.readouterr()
    assert "disk: at most" in said.err and "memory:" in said.err  # said before the sources load
    assert said.err.index("disk: at most") < said.err.index("loading")
    assert "16 contexts of 64 tokens: prose 10, code 6; analysis 10, qualification 6, sentinels 3" in said.out

    # the plan's counts, exactly, in the published fields; no cluster in both partitions
    doc = json.loads((suite_dir / "suite-manifest.json").read_text())
    assert doc["allocation_counts"] == {"prose": 10, "code": 6}
    assert doc["partition_counts"] == {"analysis": 10, "qualification": 6} and doc["sentinel_count"] == 3
    assert doc["plan"]["seed"] == 1 and doc["selection_salt"] and doc["offset_salt"]
    assert doc["approximate_deduplication"]["rejection_threshold"] == 0.85
    assert doc["approximate_deduplication"]["method"].startswith("MinHash")
    contexts = doc["contexts"]
    # local datasets by name: the producer's paths stay out of the suite and its cluster keys
    assert {c["dataset"] for c in contexts} == {"articles.jsonl", "code.jsonl"}
    assert str(inputs["root"]) not in (suite_dir / "suite-manifest.json").read_text()
    assert [c["allocation_stratum"] for c in contexts] == ["prose"] * 10 + ["code"] * 6
    partitions: dict[str, set[str]] = {}
    for c in contexts:
        partitions.setdefault(json.dumps([c["dataset"], c["source_cluster_id"]]), set()).add(c["partition"])
    assert all(len(p) == 1 for p in partitions.values())
    by_doc: dict[str, int] = {}
    for c in contexts:
        by_doc[c["source_id"]] = by_doc.get(c["source_id"], 0) + 1
        assert not c["sentinel"] or c["partition"] == "analysis"
    assert max(by_doc.values()) == 2  # long documents give several contexts (contexts_per_source = 2)
    # every context is the document's tokens at its recorded span (the rule, from the files)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(inputs["tokenizer"]))
    rows = [json.loads(line) for line in inputs["articles"].read_text().splitlines()]
    for c in contexts[:10]:
        text = "\n\n".join(r["text"].strip() for r in rows if r["title"] == c["source_id"])
        assert hashlib.sha256(text.encode()).hexdigest() == c["source_content_sha256"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        stored = json.loads((suite_dir / c["token_file"]).read_text())
        assert stored == ids[c["source_token_start"]:c["source_token_end"]]
        assert text[c["source_char_start"]:].startswith(tok.decode(stored))  # where the context starts
        assert c["source_cluster_id"] == next(r["site"] for r in rows if r["title"] == c["source_id"])
    partitions_doc = json.loads((suite_dir / fid.PARTITIONS).read_text())
    assert partitions_doc["partition_salt"] and partitions_doc["sentinel_salt"]
    registry = json.loads((suite_dir / fid.SOURCE_REGISTRY).read_text())["sources"]
    assert [s["key"] for s in registry] == ["articles", "tasks"]
    assert registry[0]["dataset_fingerprint"] == fid.dataset_fingerprint(
        registry[0]["dataset"], registry[0]["revision"], None, "train")
    assert [s["context_index"] for s in json.loads((suite_dir / fid.SOURCES).read_text())] == list(range(16))

    # verify checks a prepared suite's suite and token files, and says nothing else is there yet
    assert main(["verify", str(suite_dir)]) == 0
    said = capsys.readouterr()
    assert "suite and token files OK; no hidden states checked" in said.out and "a prepared suite" in said.out
    assert "16 token files and the suite hash checked" in said.out
    token_file = suite_dir / "tokens" / "context-0003.json"
    kept = token_file.read_bytes()
    token_file.write_text("[1,2,3]\n")
    assert main(["verify", str(suite_dir)]) == 1
    said = capsys.readouterr()
    assert "context-0003.json: context 0003 (prose) has 3 tokens" in said.out + said.err
    token_file.write_bytes(kept)

    # the same plan and seed give the same suite; another seed draws another
    assert _prepare(inputs, tmp_path / "again", plan) == 0
    manifest = (suite_dir / "suite-manifest.json").read_bytes()
    assert (tmp_path / "again" / "suite-manifest.json").read_bytes() == manifest
    assert _prepare(inputs, tmp_path / "seed-2", plan, "--seed", "2") == 0
    other = json.loads((tmp_path / "seed-2" / "suite-manifest.json").read_text())
    assert other["allocation_counts"] == doc["allocation_counts"] and other["plan"]["seed"] == 2
    assert other["suite_token_hash_sha256"] != doc["suite_token_hash_sha256"]
    capsys.readouterr()

    # the reference: hidden states through the embedded server, finalized into reference-hidden/
    model = TinyModel(VOCAB, seed=SEED)
    fid.write_lm_head(suite_dir / fid.LM_HEAD_DIR, f32_to_bf16(model.head),
                      checkpoint_tensor_key="lm_head.weight")
    _capture(suite_dir, tmp_path / "ref-work", suite_dir / fid.HIDDEN_DIR, "reference", _embedded(),
             {"mode": "hidden", "replay_check": 2})
    check = json.loads((suite_dir / fid.VALIDATION_DIR / "hidden-replay-qualification.json").read_text())
    sentinels = [c["index"] for c in contexts if c["sentinel"]]
    assert check["status"] == "qualified" and set(check["context_indices"]) <= set(sentinels)
    assert len(check["context_indices"]) == 2
    top = fid.load_top_manifest(suite_dir)
    assert top.context_count == 16
    listed = fid.read_checksums(suite_dir)
    assert {fid.PARTITIONS, fid.SOURCES, fid.SOURCE_REGISTRY, "suite-manifest.json"} <= set(listed)
    assert main(["verify", str(suite_dir)]) == 0
    capsys.readouterr()

    # a candidate (the same model, rounded) against the replayed reference: the suite's statistics
    cand = tmp_path / "cand-work" / "candidate"
    _capture(suite_dir, tmp_path / "cand-work", cand, "candidate", _embedded(perturb=0.05),
             {"mode": "logits"})
    report_path = tmp_path / "report.json"
    compare = ["compare", "--suite-manifest", str(suite_dir), "--reference-dir",
               str(suite_dir / fid.HIDDEN_DIR), "--candidate-dir", str(cand), "--bootstrap-samples", "200"]
    assert main([*compare, "--output", str(report_path)]) == 0
    stats = load_report(report_path).suite_statistics
    assert stats is not None and stats.contexts == 16
    stratified = stats.kl_stratified_source_cluster_bootstrap
    assert stratified.stratum_sizes == {"code": 6, "prose": 10}
    clusters = {s: len({json.dumps([c["dataset"], c["source_cluster_id"]]) for c in contexts
                        if c["allocation_stratum"] == s}) for s in ("prose", "code")}
    assert stratified.stratum_cluster_counts == clusters
    assert stats.kl_source_cluster_bootstrap.cluster_count == sum(clusters.values())
    assert stratified.micro.estimate > 0 and set(stats.allocation_strata) == {"prose", "code"}
    assert {c.partition for c in stats.per_context} == {"analysis", "qualification"}
    assert stats.context_selection.qualification == 6 and stats.context_selection.sentinels == 3

    # the qualification partition alone: a verdict's partition is named
    q_path = tmp_path / "q.json"
    assert main([*compare, "--output", str(q_path), "--context-filter", "qualification"]) == 0
    q = load_report(q_path).suite_statistics
    assert q is not None and q.contexts == 6 and q.context_selection.partition == "qualification"

    # and it is publishable: the card says what the plan made
    assert main(["publish", str(suite_dir), "--repo-id", "org/prepared-hidden", "--dry-run"]) == 0
    capsys.readouterr()
    assert load_suite(suite_dir).window_count == 16


def test_impossible_plans_are_refused_in_one_line(inputs: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (STRATA.replace("contexts = 10", "contexts = 500"), "stratum 'prose': 500 contexts asked"),
        (STRATA.replace("qualification = 4", "qualification = 11"), "qualification 11 is more than"),
        (STRATA.replace("sentinels = 2", "sentinels = 9"), "9 sentinels but only 6 analysis contexts"),
        (STRATA.replace('name = "code"', 'name = "tables"'), "stratum 'code' is not a [[stratum]]"),
    ]
    for n, (strata, needle) in enumerate(cases):
        plan = write_hidden_plan(tmp_path / f"plan-{n}.toml", inputs, strata=strata)
        out = tmp_path / f"out-{n}"
        assert _prepare(inputs, out, plan) == 2, needle
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"kldtui: error: {plan}") and needle in err[-1], err[-1]
        assert not out.exists() and not list(tmp_path.glob(f".out-{n}.*"))
    plan = write_hidden_plan(tmp_path / "ok.toml", inputs, strata=STRATA)
    assert main(["prepare", "--layout", "hidden", "--tokenizer", str(inputs["tokenizer"]), "--output-dir",
                 str(tmp_path / "x")]) == 2
    assert "--layout hidden needs --sources PLAN.toml" in capsys.readouterr().err
    logits_sources = tmp_path / "logits.toml"
    logits_sources.write_text('[[source]]\ndomain="p"\ndataset="d.jsonl"\nsplit="t"\nwindows=2\ntext_field="x"\n')
    assert _prepare(inputs, tmp_path / "y", logits_sources) == 2
    assert "no [[stratum]] tables" in capsys.readouterr().err
    assert plan.exists()
    assert main(["prepare", "--tokenizer", str(inputs["tokenizer"]), "--output-dir", str(tmp_path / "z"),
                 "--sources", str(logits_sources), "--seed", "3"]) == 2
    assert "--seed draws a --layout hidden suite" in capsys.readouterr().err
