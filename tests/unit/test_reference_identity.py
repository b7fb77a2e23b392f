"""A reference's identity is its content (issue 23 item 5): two reports against bit-identical
references pair, whatever time, port or command line the reference manifests record; different
files, windows or suites do not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kldtui.decide.paired import paired_diff
from kldtui.decide.reports import check_same_suite
from kldtui.errors import BadInput
from kldtui.formats.reference_identity import reference_identity, reference_identity_of
from kldtui.formats.suite import load_logits_manifest
from kldtui.stages.compare import CompareOptions, compare
from tests.fixtures_compare import make_suite, perturb

OPTS = CompareOptions(bootstrap_samples=200)


def _suite(tmp_path: Path) -> tuple[Path, Path, Path]:
    import numpy as np

    rng = np.random.default_rng(3)
    suite, ref, cand, _ = make_suite(tmp_path / "s", windows=8, context=17, vocab=200, seed=2,
                                     candidate=lambda r, x: perturb(rng, x, 0.05, 0.1))
    return suite.path, ref, cand


def _recaptured(ref: Path, where: Path) -> Path:
    """The same reference files with a manifest of another capture: its time and the server's port
    and command line differ."""
    shutil.copytree(ref, where)
    doc = json.loads((where / "manifest.json").read_text())
    doc["created_utc"] = "2031-01-01T00:00:00Z"
    doc["runtime"] = {"argv": ["python", "-m", "kldtui.embedded", "--port", "41234"], "kind": "embedded"}
    (where / "manifest.json").write_text(json.dumps(doc, indent=1))
    return where


def test_identity_ignores_time_port_and_command(tmp_path: Path) -> None:
    _, ref, _ = _suite(tmp_path)
    again = _recaptured(ref, tmp_path / "ref-again")
    assert (ref / "manifest.json").read_bytes() != (again / "manifest.json").read_bytes()
    assert reference_identity_of(ref, range(8)) == reference_identity_of(again, range(8))
    assert reference_identity_of(ref, range(8)) is not None
    # over other windows it is another identity (a report's identity covers what it compared)
    assert reference_identity_of(ref, range(4)) != reference_identity_of(ref, range(8))


def test_identity_follows_the_files(tmp_path: Path) -> None:
    _, ref, _ = _suite(tmp_path)
    manifest = load_logits_manifest(ref)
    before = reference_identity(manifest, range(8))
    doc = json.loads((ref / "manifest.json").read_text())
    doc["windows"][3]["sha256"] = "0" * 64  # another file for window 3
    (ref / "manifest.json").write_text(json.dumps(doc))
    assert reference_identity(load_logits_manifest(ref), range(8)) != before
    assert reference_identity(manifest, [99]) is None  # a window the manifest does not list
    assert reference_identity_of(tmp_path / "nowhere", range(8)) is None


def test_reports_against_bit_identical_references_pair(tmp_path: Path) -> None:
    """What made `kldtui diff` refuse two demo runs: the manifests' bytes differ, the files do not."""
    suite, ref, cand = _suite(tmp_path)
    again = _recaptured(ref, tmp_path / "ref-again")
    other = tmp_path / "other-candidate"
    shutil.copytree(cand, other)
    a = compare(suite, ref, cand, OPTS)
    b = compare(suite, again, other, OPTS)
    assert a.reference_manifest_sha256 != b.reference_manifest_sha256
    assert a.reference_identity_sha256 == b.reference_identity_sha256
    checked = check_same_suite(a, b, "a.json", "b.json")
    assert "reference_identity_sha256" in checked and "reference_manifest_sha256" not in checked
    assert paired_diff(a, b).overall.interval.estimate == pytest.approx(0.0, abs=1e-15)
    json_round_trip = type(a).from_json(json.loads(json.dumps(a.to_json())), "a.json")
    assert json_round_trip.reference_identity_sha256 == a.reference_identity_sha256


def test_different_reference_files_are_refused(tmp_path: Path) -> None:
    suite, ref, cand = _suite(tmp_path)
    a = compare(suite, ref, cand, OPTS)
    b = compare(suite, cand, ref, OPTS)  # the candidate's files as the reference
    with pytest.raises(BadInput, match="come from different references .reference_identity_sha256"):
        check_same_suite(a, b, "a.json", "b.json")


def test_older_reports_pair_by_the_manifest_bytes(tmp_path: Path) -> None:
    """A report without an identity (older kldtui) is paired as before, by the manifest's bytes."""
    suite, ref, cand = _suite(tmp_path)
    again = _recaptured(ref, tmp_path / "ref-again")
    a = compare(suite, ref, cand, OPTS).to_json()
    b = compare(suite, again, cand, OPTS).to_json()
    a.pop("reference_identity_sha256")
    with pytest.raises(BadInput, match="reference_manifest_sha256"):
        check_same_suite(a, b, "a.json", "b.json")
