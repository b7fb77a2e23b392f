"""Issue 27 item 6: a report is validated for impossible values on load, so that a damaged or forged
report is refused (one line, file and field, exit 2) instead of believed by diff, leaderboard, noise
and the viewer: a negative KL, a per-window KL of -1, top1_agreement 7, a probability above 1, a
log-perplexity below 0, a JS above ln 2, quantiles out of order, a bad domain name, duplicate
windows, a window count that is not the list's length."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.report_model import ComparisonReport
from tests import fixtures_decide
from tests.paths import EXAMPLE_SUITE

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Doc:
    out = tmp_path_factory.mktemp("example") / "example.json"
    assert main(["compare", "--suite-manifest", str(EXAMPLE_SUITE / "suite-manifest.json"),
                 "--reference-dir", str(EXAMPLE_SUITE / "ref"), "--candidate-dir",
                 str(EXAMPLE_SUITE / "candidate"), "--output", str(out), "--bootstrap-samples", "200",
                 "--reverse"]) == 0
    doc: Doc = json.loads(out.read_text())
    return doc


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        target: Any = doc
        keys = path.split(".")
        for k in keys[:-1]:
            target = target[int(k)] if isinstance(target, list) else target[k]
        last = keys[-1]
        target[int(last) if isinstance(target, list) else last] = value
    return change


DAMAGE: dict[str, tuple[Callable[[Doc], None], str]] = {
    "per-window KL -1": (_set("per_window.1.kl_reference_to_candidate.mean", -1.0), "per_window[1]"),
    "per-window array KL -1": (_set("per_window_arrays.kl_mean.2", -1.0), "per_window_arrays.kl_mean"),
    "top1_agreement 7": (_set("top1_agreement", 7), "top1_agreement"),
    "window top1 1.5": (_set("per_window.0.top1_agreement", 1.5), "per_window[0].top1_agreement"),
    "top-5 above 1": (_set("topk_agreement.5", 1.2), "topk_agreement"),
    "top-k decreasing": (_set("topk_agreement.5", 0.1), "topk_agreement"),
    "KL mean negative": (_set("kl_reference_to_candidate.mean", -0.5), "kl_reference_to_candidate"),
    "reverse KL negative": (_set("kl_candidate_to_reference.max", -3.0), "kl_candidate_to_reference"),
    "KL quantiles out of order": (_set("kl_reference_to_candidate.median", 1e9), "kl_reference_to_candidate"),
    "JS above ln 2": (_set("js.max", 5.0), "js"),
    "probability 7": (_set("next_token.p_reference.max", 7.0), "next_token.p_reference"),
    "delta p 3": (_set("next_token.delta_p.max", 3.0), "next_token.delta_p"),
    "log perplexity below 0": (_set("next_token.log_perplexity_reference", -3.0),
                               "next_token.log_perplexity_reference"),
    "perplexity below 1": (_set("next_token.perplexity_candidate", 0.5), "next_token.perplexity_candidate"),
    "bad domain": (_set("per_window.0.domain", "../x"), "per_window[0].domain"),
    "bad domain in arrays": (_set("per_window_arrays.domain.0", "a/b"), "per_window_arrays.domain"),
    "window_index text": (_set("per_window.0.window_index", "0"), "per_window[0].window_index"),
    "duplicate window": (_set("per_window.1.window_index", 0), "per_window"),
    "windows count": (_set("windows", 9), "windows"),
    "bootstrap reversed": (_set("kl_window_cluster_bootstrap.ci95_low", 99.0), "kl_window_cluster_bootstrap"),
    "bootstrap negative error": (_set("kl_window_cluster_bootstrap.standard_error", -1.0),
                                 "kl_window_cluster_bootstrap"),
    "bootstrap estimate negative": (_set("kl_window_cluster_bootstrap.estimate", -0.1),
                                    "kl_window_cluster_bootstrap"),
    "domain KL negative": (lambda d: d["domains"][next(iter(d["domains"]))].update(estimate=-2.0), "domains"),
    "confidence bucket above 1": (_set("kl_by_reference_confidence.0.high", 3.0),
                                  "kl_by_reference_confidence"),
    "position bucket KL negative": (_set("kl_by_position.0.kl_mean", -1.0), "kl_by_position"),
    "window outside window_range": (_set("window_range", [100, 104]), "window_range"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_impossible_values_are_refused_on_load(example: Doc, case: str) -> None:
    doc = copy.deepcopy(example)
    ComparisonReport.from_json(copy.deepcopy(doc), "example.json")  # the undamaged report loads
    change, field = DAMAGE[case]
    change(doc)
    with pytest.raises(BadInput) as info:
        ComparisonReport.from_json(doc, "example.json")
    message = str(info.value)
    assert message.startswith("example.json: ") and field in message and "\n" not in message, message


def test_synthetic_and_original_reports_still_load() -> None:
    for fmt in ("kldtui", "original"):
        ComparisonReport.from_json(fixtures_decide.make_report([0.0, 0.002, 0.3], fmt=fmt), "r.json")


@pytest.mark.parametrize("command", [["diff", "{r}", "{r}"], ["leaderboard", "{r}"], ["view", "{r}"]])
def test_commands_refuse_a_damaged_report_with_one_line(example: Doc, tmp_path: Path, command: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(example)
    doc["per_window"][0]["kl_reference_to_candidate"]["mean"] = -1.0
    report = tmp_path / "damaged.json"
    report.write_text(json.dumps(doc))
    code = main([arg.format(r=report) for arg in command])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and str(report) in err[0] and "per_window[0]" in err[0], err
