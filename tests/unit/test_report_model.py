"""The typed report model: kldtui's reports round-trip byte for byte, the original comparator's
load into the same model, and a damaged report is refused naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.report_model import ComparisonReport, as_report
from tests import fixtures_decide, fixtures_tui
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE
TOP_LEVEL = {"candidate_dir", "direction", "domains", "js", "js_window_cluster_bootstrap", "kl_by_position",
             "kl_by_reference_confidence", "kl_reference_to_candidate", "kl_window_cluster_bootstrap",
             "next_token", "per_window", "per_window_arrays", "positions", "provenance", "reference_dir",
             "reference_identity_sha256", "reference_manifest_sha256", "report_format",
             "suite_token_hash_sha256", "top1_agreement",
             "infinite_kl", "figures", "kl_mean_interval",
             "topk_agreement", "vocab_size", "window_range", "windows"}


def _dump(doc: dict[str, Any]) -> str:
    """The report writer's layout (kldtui.formats.atomic.write_json_atomic)."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _example_report(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "example.json"
    code = main(["compare", "--suite-manifest", str(EXAMPLE / "suite-manifest.json"),
                 "--reference-dir", str(EXAMPLE / "ref"), "--candidate-dir", str(EXAMPLE / "candidate"),
                 "--output", str(out), "--bootstrap-samples", "500", *extra])
    assert code == 0
    return out


@pytest.mark.parametrize("extra", [(), ("--reverse",)])
def test_example_report_round_trips_byte_for_byte(tmp_path: Path, extra: tuple[str, ...]) -> None:
    raw = _example_report(tmp_path, *extra).read_text(encoding="utf-8")
    report = ComparisonReport.from_json(json.loads(raw), "example.json")
    assert _dump(report.to_json()) == raw
    assert not report.original and report.extra == {}
    assert set(json.loads(raw)) == TOP_LEVEL | ({"kl_candidate_to_reference",
                                                 "kl_reverse_window_cluster_bootstrap"} if extra else set())
    # typed access to what the readers use
    assert report.windows == 4 and report.positions == 4 * 64 and report.window_range == (0, 4)
    assert report.provenance is not None and report.provenance.verified.suite_hash is True
    assert report.topk_agreement is not None and report.topk_agreement.at(1) is not None
    table = report.window_table()
    assert table is report.per_window_arrays and table.window_index == [0, 1, 2, 3]
    assert table.kl_mean == [e.kl_reference_to_candidate.mean for e in report.per_window]
    assert (table.kl_reverse_mean is not None) == bool(extra)


def test_original_comparator_report_loads_into_the_same_model() -> None:
    doc = fixtures_decide.make_report([0.002, 0.004, 0.003], ["prose", "code", "code"], fmt="original",
                                      reverse=[0.0021, 0.0041, 0.0031])
    report = ComparisonReport.from_json(json.loads(json.dumps(doc)), "orig.json")
    assert report.original and report.report_format is None
    for name in ("per_window_arrays", "provenance", "next_token", "topk_agreement", "vocab_size",
                 "suite_token_hash_sha256", "reference_manifest_sha256", "kl_by_position", "noise_floor"):
        assert getattr(report, name) is None, name
    table = report.window_table()
    assert table.window_index == [0, 1, 2] and table.domain == ["prose", "code", "code"]
    assert table.kl_mean == [0.002, 0.004, 0.003] and table.kl_reverse_mean == [0.0021, 0.0041, 0.0031]
    assert report.to_json() == doc  # nothing added, nothing lost


def test_infinite_kl_counts_and_unknown_columns_are_kept() -> None:
    doc = fixtures_decide.make_report([0.1, 0.2, 0.3])
    doc["per_window_arrays"]["infinite_kl_rows"] = [0, 2, 0]
    doc["per_window_arrays"]["some_future_column"] = ["x", "y", "z"]
    doc["per_window"][1]["infinite_kl_rows"] = 2
    report = as_report(doc, "r.json")
    assert report.window_table().infinite_kl_rows == [0, 2, 0] and report.per_window[1].infinite_kl_rows == 2
    assert report.to_json() == doc
    original = fixtures_decide.make_report([0.1, 0.2], fmt="original")
    original["per_window"][0]["infinite_kl_rows"] = 5
    original["per_window"][1]["infinite_kl_rows"] = 0
    assert as_report(original).window_table().infinite_kl_rows == [5, 0]


def test_reports_written_by_earlier_kldtui_tools_load() -> None:
    """The viewer's and decide tools' fixture reports carry only some of kldtui's fields."""
    for doc in (fixtures_tui.make_report("a", 0.01, seed=1), fixtures_decide.make_report([0.1, 0.2])):
        report = as_report(doc, "old.json")
        assert report.report_format == "kldtui-comparison-v1"
        assert report.to_json() == json.loads(json.dumps(doc))


def _broken(path: list[str | int], value: Any) -> dict[str, Any]:
    doc = fixtures_tui.make_report("a", 0.01, seed=1)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize("path, value, field", [
    (["windows"], "eight", "windows"),
    (["kl_window_cluster_bootstrap", "ci95_low"], None, "kl_window_cluster_bootstrap.ci95_low"),
    (["domains", "code", "estimate"], "x", "domains.code.estimate"),
    (["per_window", 2, "kl_reference_to_candidate", "mean"], float("nan"),
     "per_window[2].kl_reference_to_candidate.mean"),
    (["per_window", 1, "window_index"], KeyError, "per_window[1].window_index"),
    (["per_window_arrays", "kl_mean"], [0.1], "per_window_arrays.kl_mean"),
    (["next_token", "delta_p"], [1, 2], "next_token.delta_p"),
    (["report_format"], "kldtui-comparison-v9", "report_format"),
    (["direction"], KeyError, "direction"),
])
def test_damaged_report_names_file_and_field(tmp_path: Path, path: list[str | int], value: Any,
                                            field: str) -> None:
    with pytest.raises(BadInput) as info:
        ComparisonReport.from_json(_broken(path, value), str(tmp_path / "bad.json"))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'bad.json'}: {field}: ") and "\n" not in message


@pytest.mark.parametrize("doc", [[1, 2], "text", None])
def test_not_an_object_is_refused(doc: Any) -> None:
    with pytest.raises(BadInput, match="^bad.json: not a comparison report"):
        ComparisonReport.from_json(doc, "bad.json")


@pytest.mark.parametrize("content, needle", [
    ("{not json", "comparison report is not valid JSON"),
    (json.dumps({"direction": "x"}), "per_window: missing field; not a comparison report"),
    (json.dumps(_broken(["per_window", 0, "domain"], 3)), "per_window[0].domain: expected text"),
])
def test_view_refuses_a_malformed_report_in_one_line(tmp_path: Path, capsys: Any, content: str,
                                                     needle: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    assert main(["view", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and needle in err


def test_domains_load_in_window_order_whatever_the_file_order() -> None:
    """Reports are written with sorted keys; a reopened report lists domains as the live one did."""
    import json

    from kldtui.formats.report_model import ComparisonReport
    from tests.fixtures_tui import make_report

    doc = make_report("c", 0.01, seed=1, domains=["prose", "prose", "code", "instruction"])
    doc["domains"] = dict(sorted(doc["domains"].items()))  # as on disk
    report = ComparisonReport.from_json(json.loads(json.dumps(doc, sort_keys=True)))
    assert list(report.domains) == ["prose", "code", "instruction"]
