"""Reports: atomic writing, loading kldtui's and the original comparator's, the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.formats.report import load_report, summary_text, write_report
from kldtui.stages.compare import CompareOptions, compare
from tests.fixtures_compare import make_suite


def original_report() -> dict:
    """The original comparator's report: exactly its fields (docs/FORMATS.md)."""
    def stats(m: float) -> dict:
        return {"mean": m, "median": m / 2, "p95": 3 * m, "p99": 5 * m, "max": 20 * m}

    def boot(m: float) -> dict:
        return {"estimate": m, "standard_error": m / 10, "ci95_low": 0.8 * m, "ci95_high": 1.2 * m,
                "bootstrap_samples": 10000, "cluster_unit": "window"}

    return {
        "direction": "KL(reference || candidate)", "reference_dir": "/data/ref",
        "candidate_dir": "/data/cand-a", "positions": 4094, "windows": 2, "window_range": [0, 2],
        "kl_reference_to_candidate": stats(0.003), "js": stats(0.0008), "top1_agreement": 0.988,
        "kl_window_cluster_bootstrap": boot(0.003), "domains": {"prose": boot(0.003)},
        "per_window": [
            {"window_index": i, "domain": "prose", "positions": 2047,
             "kl_reference_to_candidate": stats(0.002 + 0.002 * i), "js": stats(0.0005),
             "top1_agreement": 0.99} for i in range(2)],
    }


def test_load_original_report(tmp_path: Path) -> None:
    p = tmp_path / "orig.json"
    p.write_text(json.dumps(original_report(), indent=2, sort_keys=True))
    r = load_report(p)
    assert r.original and r.report_format is None and r.per_window_arrays is None
    assert r.window_table().kl_mean == [0.002, 0.004]
    assert r.window_table().window_index == [0, 1]
    text = summary_text(r)
    assert text.splitlines()[0].startswith("KL(reference || candidate) = 0.003")
    assert "top-k agreement: top-1 98.8000 %" in text


@pytest.mark.parametrize("content", ["not json", "[1, 2]", json.dumps({"direction": "x"}),
                                     json.dumps({**original_report(), "kl_reference_to_candidate": {}})])
def test_garbage_is_bad_input(tmp_path: Path, content: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(BadInput) as info:
        load_report(p)
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_missing_report_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not found"):
        load_report(tmp_path / "nope.json")


def test_kldtui_report_round_trip_and_summary(tmp_path: Path) -> None:
    suite, ref, cand, _ = make_suite(tmp_path / "s", windows=2, context=30, vocab=100)
    report = compare(suite.path, ref, cand, CompareOptions(bootstrap_samples=200, reverse=True))
    out = tmp_path / "r.json"
    write_report(out, report)
    write_report(report, tmp_path / "r2.json")  # either argument order
    assert out.read_text() == (tmp_path / "r2.json").read_text()
    loaded = load_report(out)
    assert loaded == report
    text = summary_text(loaded)
    for needle in ("KL(reference || candidate) =", "top-5", "KL(candidate || reference)", "perplexity",
                   "by domain", f"{loaded.provenance.backend if loaded.provenance else '?'} backend"):
        assert needle in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r2.json", "s"]


def test_write_report_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old\n")
    with pytest.raises(ValueError):
        write_report(out, {"bad": float("nan")})
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_report_s_refusals_name_the_file_and_no_flag(tmp_path: Path) -> None:
    """The output-file rule has one owner (folder_lock.check_output_file); write_report's words are
    true for every writer: a work folder's report has no --output to give, so a folder in the
    report's place is to be moved away, and a missing folder created."""
    suite, ref, cand, _ = make_suite(tmp_path / "s", windows=2, context=30, vocab=100)
    report = compare(suite.path, ref, cand, CompareOptions(bootstrap_samples=50))
    taken = tmp_path / "comparison.json"
    taken.mkdir()
    with pytest.raises(BadInput) as info:
        write_report(taken, report)
    said = str(info.value)
    assert said == (f"{taken}: is a folder where kldtui writes its comparison report; move that folder away, "
                    "then run again"), said
    assert "--output" not in said and "\n" not in said
    taken.rmdir()  # what the words say to do, and the report is written
    assert write_report(taken, report) == taken and load_report(taken) == report
    missing = tmp_path / "no" / "comparison.json"
    with pytest.raises(BadInput) as info:
        write_report(missing, report)
    assert str(info.value) == f"{missing}: folder {missing.parent} does not exist; create it first"
    missing.parent.mkdir()
    assert write_report(missing, report) == missing


def test_a_work_folder_s_report_in_the_place_of_a_folder_is_said_without_a_flag(tmp_path: Path) -> None:
    """The compare stage as a pipeline or campaign runs it (the report under the work folder, no
    --output): the folder in its place is refused in the same words, and nothing is written."""
    from kldtui.stages.compare import run_compare
    from kldtui.workspace import Workspace

    suite, ref, cand, _ = make_suite(tmp_path / "s", windows=2, context=30, vocab=100)
    taken = tmp_path / "work" / "comparison.json"
    taken.mkdir(parents=True)
    ws = Workspace.for_compare(suite.path, ref, cand, report_path=taken)
    said = "is a folder where kldtui writes its comparison report; move that folder away"
    with pytest.raises(BadInput, match=said) as info:
        run_compare(ws, options=CompareOptions(bootstrap_samples=50))
    assert "--output" not in str(info.value) and not list(taken.iterdir())
