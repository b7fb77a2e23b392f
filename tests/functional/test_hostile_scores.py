"""Issue 27 items 5 and 6, score mode: a score file is checked for impossible values (KL < 0 or beyond
what float32 logits can give, JS above ln 2, argmax -1, a probability of 7, a log-probability of +3)
and for its provenance (the reference_sha256 in the file itself, not only the manifest's), even when
a forger fixed the manifest's size and SHA-256; compare refuses such a file (one line, exit 2) and
never leaves a report on disk that it would itself refuse to load."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.scores import read_records, write_score_file
from kldtui.formats.suite import load_suite
from kldtui.metrics.score import RECORD_DTYPE
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import profile_from_dict

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(suite folder, a finalized score-mode candidate folder) from the embedded server."""
    root = tmp_path_factory.mktemp("demo")
    Pipeline(prepare_demo(root)).reference()
    suite = root / "suite"
    work = root / "score"
    profile = profile_from_dict({
        "reference": {"local_dir": str(suite)},
        "candidate": {"kind": "embedded", "served_model_name": "cand", "model_seed": 7, "vocab_size": 2048,
                      "perturb": 0.1, "port": 0, "startup_timeout": 60.0, "request_timeout": 60.0},
        "run": {"workdir": str(work), "run_name": "cand", "stop_window": 2},
        "compare": {"bootstrap_samples": 100}, "capture": {"mode": "score"}}, base_dir=root)
    Pipeline(profile).run_all()
    return suite, work / "candidate"


Change = Callable[[np.ndarray, dict[str, str]], str]
NOT_KEPT = ("format", "window_index", "domain", "token_ids_json_sha256", "reference_sha256", "record_dtype")


def _forge(suite_dir: Path, candidate: Path, tmp_path: Path, change: Change, window: int = 1) -> Path:
    """A copy of the candidate whose window's score file is rewritten by ``change(records, meta)``
    (which returns the reference_sha256 to record), with the manifest's size and SHA-256 fixed."""
    copy = tmp_path / "candidate"
    shutil.copytree(candidate, copy)
    suite = load_suite(suite_dir)
    path = copy / f"scores_{window:03d}.safetensors"
    records, meta = read_records(path, RECORD_DTYPE)
    ref_sha = change(records, meta)
    keep = {k: v for k, v in meta.items() if k not in NOT_KEPT}
    written = write_score_file(copy, suite.window(window), records, keep, ref_sha)
    manifest = json.loads((copy / "scores-manifest.json").read_text())
    for entry in manifest["windows"]:
        if entry["window_index"] == window:
            entry["sha256"], entry["size_bytes"] = written.sha256, written.size_bytes
    (copy / "scores-manifest.json").write_text(json.dumps(manifest))
    return copy


def _set(field: str, value: float) -> Change:
    def change(records: np.ndarray, meta: dict[str, str]) -> str:
        records[field][3] = value
        return meta["reference_sha256"]
    return change


CASES = {"KL -1": _set("kl", -1.0), "KL 1e300": _set("kl", 1e300), "JS 5": _set("js", 5.0),
         "argmax -1": _set("argmax_ref", -1), "argmax beyond the vocabulary": _set("argmax_cand", 10**6),
         "probability 7": _set("ref_top_prob", 7.0), "log-probability +3": _set("logp_cand_next", 3.0),
         "rank -5": _set("rank_ref_top", -5), "reverse KL -2": _set("kl_reverse", -2.0),
         "entropy -1": _set("entropy_ref", -1.0),
         "entropy beyond log(vocabulary)": _set("entropy_cand", 50.0)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_impossible_score_records_are_refused_and_no_report_is_left(
        scored: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    suite, candidate = scored
    forged = _forge(suite, candidate, tmp_path, CASES[case])
    out = tmp_path / "report.json"
    code = main(["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
                 "--candidate-dir", str(forged), "--output", str(out), "--bootstrap-samples", "50",
                 "--reverse", "--stop-window", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    assert code == 2 and len(err) == 1, err
    assert "scores_001.safetensors" in err[0] and "row 3" in err[0] and "impossible" in err[0], err[0]
    assert not out.exists()


def test_the_file_s_own_reference_hash_is_checked(scored: tuple[Path, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest entry still names the reference, the file says it scored another one."""
    suite, candidate = scored
    forged = _forge(suite, candidate, tmp_path, lambda records, meta: "0" * 64)
    manifest = json.loads((forged / "scores-manifest.json").read_text())
    original = json.loads((candidate / "scores-manifest.json").read_text())
    for entry, before in zip(manifest["windows"], original["windows"], strict=True):
        entry["reference_sha256"] = before["reference_sha256"]
    (forged / "scores-manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "report.json"
    code = main(["compare", "--suite-manifest", str(suite), "--reference-dir", str(suite / "ref"),
                 "--candidate-dir", str(forged), "--output", str(out), "--bootstrap-samples", "50",
                 "--stop-window", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "scores_001.safetensors" in err and "reference" in err and "000000000000" in err, err
    assert not out.exists()


def test_write_report_refuses_what_load_report_would_refuse(tmp_path: Path) -> None:
    import dataclasses

    from kldtui.formats.report import load_report, write_report
    from kldtui.formats.report_model import ComparisonReport
    from tests import fixtures_decide

    report = ComparisonReport.from_json(fixtures_decide.make_report([0.01, 0.02]), "r")
    out = tmp_path / "r.json"
    write_report(out, report)
    assert load_report(out) == report
    bad = dataclasses.replace(report, kl_reference_to_candidate=dataclasses.replace(
        report.kl_reference_to_candidate, mean=math.inf))
    target = tmp_path / "bad.json"
    with pytest.raises(BadInput, match="nothing was written"):
        write_report(target, bad)
    assert not target.exists() and not list(tmp_path.glob(".bad.json*"))


def test_a_kl_that_float32_logits_give_is_not_called_impossible() -> None:
    """A score record's finite KL above 1e4 was refused as "impossible (from float32 logits, finite
    below 10000)", yet the kernels keep a finite logit's log-ratio however low: a candidate logit of
    -3e38 (a broken quantization) gives a KL of 7.5e37. The bound is what float32 logits can give."""
    from kldtui.formats.scores import impossible_record
    from kldtui.metrics.kernels import NumpyRowKernel

    reference = np.zeros((1, 4), dtype=np.float32)
    candidate = np.array([[0.0, -3e38, 0.0, 0.0]], dtype=np.float32)
    kl = float(NumpyRowKernel(4).block(reference, candidate, np.array([0])).kl[0])
    assert math.isfinite(kl) and kl > 1e37
    records = np.zeros(2, dtype=RECORD_DTYPE)
    records["kl"] = [kl, 0.5]
    assert impossible_record(records, 4) is None
    records["kl"][1] = 1e39  # more than twice the largest float32: no float32 logits give it
    found = impossible_record(records, 4)
    assert found is not None and found[0] == 1 and "kl 1e+39 is impossible" in found[1], found
