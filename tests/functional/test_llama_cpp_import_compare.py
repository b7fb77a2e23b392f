"""A reference imported from llama.cpp's KL-divergence base file is a kldtui reference: the
demo's suite and embedded reference, exported (``kldtui convert --to llama-cpp``) and imported
back (``--to suite``), give windows that score only the positions llama.cpp scores (the second
half of each); a candidate captured against it, in logits mode and in score mode, gets the
figures it gets on the original suite over those positions, within what the uint16 encoding moves
them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.formats import llamacpp_kld as kld
from kldtui.formats.report import load_report
from kldtui.formats.suite import load_suite
from kldtui.stages.convert import BosChoice, export_llama_cpp, import_llama_cpp
from kldtui.workflow.demo import DEMO_CONTEXT, prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Profile, profile_from_dict
from tests.fixtures_score import report_differences

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
FIRST = DEMO_CONTEXT // 2


def _profile(suite_dir: Path, workdir: Path, mode: str) -> Profile:
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "cand", "model_seed": 7,
                                 "vocab_size": 2048, "perturb": 0.1, "port": 0,
                                 "startup_timeout": 60.0, "request_timeout": 60.0}
    return profile_from_dict({"reference": {"local_dir": str(suite_dir)}, "candidate": candidate,
                              "run": {"workdir": str(workdir), "run_name": "cand"},
                              "compare": {"bootstrap_samples": 500}, "capture": {"mode": mode}},
                             base_dir=workdir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("imported")
    Pipeline(prepare_demo(root)).reference()
    original = root / "suite"
    base = root / "reference.kld"
    exported = export_llama_cpp(original, base)
    imported = import_llama_cpp(base, root / "imported", bos=BosChoice(None, "--no-bos"))
    reports = {}
    for name, suite_dir, mode in (("original", original, "logits"), ("imported", root / "imported", "logits"),
                                  ("imported-score", root / "imported", "score")):
        profile = _profile(suite_dir, root / f"run-{name}", mode)
        Pipeline(profile).run_all()
        reports[name] = load_report(root / f"run-{name}" / "comparison.json").to_json()
    return {"root": root, "exported": exported, "imported": imported, "reports": reports}


def test_the_imported_windows_score_the_second_half(runs: dict[str, Any]) -> None:
    suite = load_suite(runs["root"] / "imported")
    assert {w.scored_row_start for w in suite.windows} == {FIRST}
    rows = DEMO_CONTEXT - 1 - FIRST
    report = runs["reports"]["imported"]
    assert report["positions"] == rows * len(suite.windows)
    assert [w["positions"] for w in report["per_window"]] == [rows] * len(suite.windows)
    # the position buckets count positions of the window, not rows of the file
    assert [(b["start"], b["stop"]) for b in report["kl_by_position"]] == [(FIRST, DEMO_CONTEXT - 1)]
    # the finalized candidate keeps the scored rows only, like the reference
    cand = runs["root"] / "run-imported" / "candidate" / "manifest.json"
    shapes = {tuple(w["shape"]) for w in json.loads(cand.read_text())["windows"]}
    assert shapes == {(rows, 2048)}


def test_figures_match_the_original_over_the_same_positions(runs: dict[str, Any]) -> None:
    original, imported = runs["reports"]["original"], runs["reports"]["imported"]
    ours = {(b["start"], b["stop"]): b["kl_mean"] for b in original["kl_by_position"]}
    # the original report's buckets of 256 positions: [256, 511) is exactly the imported positions
    want = ours[(FIRST, DEMO_CONTEXT - 1)]
    got = imported["kl_reference_to_candidate"]["mean"]
    loss = runs["exported"].precision
    # the encoding moves each kept log-probability by at most half a step and drops the floor's
    # mass: KL moves by at most about (step / 2) x (1 + mean |log p/q|) plus that mass; the demo's
    # candidate has mean KL ~0.03, so a bound of 2e-4 absolute holds with a wide margin
    assert loss.max_step <= kld.MAX_STEP * (1 + 1e-6)
    assert abs(got - want) <= 2e-4, (got, want)
    print(f"\nimported reference: mean KL {got:.6f} vs {want:.6f} on the original's positions "
          f"{FIRST}..{DEMO_CONTEXT - 2} (|diff| {abs(got - want):.2e}); encoding: {loss.lines()}")


def test_score_mode_agrees_on_an_imported_reference(runs: dict[str, Any]) -> None:
    a, b = runs["reports"]["imported"], runs["reports"]["imported-score"]
    assert report_differences(a, b) == []
    score_dir = runs["root"] / "run-imported-score" / "candidate"
    assert (score_dir / "scores-manifest.json").is_file()
    assert not list(score_dir.glob("logits_*.safetensors"))
    assert np.isfinite(b["kl_reference_to_candidate"]["mean"])


def test_the_report_states_the_encoding_loss(runs: dict[str, Any]) -> None:
    """The imported reference's report says what the uint16 file lost (the manifest's record of
    the import, validated on the way); a float32 reference's report says nothing of it."""
    from kldtui.formats.report import summary_text

    assert "reference_encoding" not in runs["reports"]["original"]
    enc = runs["reports"]["imported"]["reference_encoding"]
    loss = runs["imported"].loss
    assert enc["format"] == "llama.cpp's KL-divergence base file (uint16)" and enc["floor_nats"] == 16.0
    assert enc["source_file"] == "reference.kld"
    assert 0 < enc["max_entry_error"] <= kld.MAX_STEP / 2 * (1 + 1e-6)
    assert enc["max_entry_error"] == loss.max_step / 2 and enc["floored_entries"] == loss.floored_entries
    assert enc["entries"] == loss.entries == len(load_suite(runs["root"] / "imported").windows) \
        * (DEMO_CONTEXT - 1 - FIRST) * 2048
    assert runs["reports"]["imported-score"]["reference_encoding"] == enc
    text = summary_text(load_report(runs["root"] / "run-imported" / "comparison.json"))
    share = enc["floored_entries"] / enc["entries"]
    line = next(x for x in text.splitlines() if "reference decoded from" in x)
    assert (f"reference decoded from llama.cpp's KL-divergence base file (uint16): each reference "
            f"log-probability is within {enc['max_entry_error']:.2g} nats of the original, and "
            f"{share:.0%} of its entries (those more than 16 nats below their row's top) count as "
            "probability 0") in line


@pytest.mark.parametrize("field, value, why", [
    ("max_entry_error", -1.0, "expected a number >= 0"),
    ("floored_entries", 10**12, "floored entries of only"),
    ("format", 3, "expected text"),
])
def test_a_damaged_encoding_record_is_one_line(runs: dict[str, Any], tmp_path: Path, field: str, value: Any,
                                               why: str) -> None:
    from kldtui.stages.compare.report import reference_encoding_of

    ref = tmp_path / "ref"
    ref.mkdir()
    doc = json.loads((runs["root"] / "imported" / "ref" / "manifest.json").read_text())
    doc["runtime"]["reference_encoding"][field] = value
    (ref / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput) as info:
        reference_encoding_of(ref)
    message = str(info.value)
    assert message.startswith(f"{ref / 'manifest.json'}: runtime.reference_encoding.{field}: ")
    assert why in message and "kldtui convert" in message and "\n" not in message
