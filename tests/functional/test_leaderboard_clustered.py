"""The leaderboard's tie column of a hidden-state suite's reports counts each source cluster once, as
``kldtui diff``'s clustered verdict does: before, it ran the rule over the contexts as if they were
independent, so that a source whose contexts are near duplicates counted twice and named a difference
the clustered verdict does not (docs/STATISTICS.md, "Clustered suites")."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.decide.leaderboard import build_leaderboard, leaderboard_from_files
from kldtui.decide.paired import paired_diff_files
from kldtui.decide.verdict import family_size_for, family_windows, verdict_interval
from kldtui.errors import BadInput
from kldtui.formats.report import load_report
from kldtui.text import TIED_OUTCOMES
from tests.fixtures_hidden import clustered_candidates, with_context_kl

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three candidates over a 32-context suite in 17 source clusters (:func:`clustered_candidates`):
    ``best``; ``close``, worse by 1 % on average; ``far``, half as far again; ``keys``: the measured
    report."""
    return clustered_candidates(tmp_path_factory.mktemp("clustered-board"))


def _three(boards: dict[str, Path]) -> list[Path]:
    return [boards["best"], boards["close"], boards["far"]]


def test_the_tie_column_counts_each_source_cluster_once(boards: dict[str, Path]) -> None:
    """Counted as 32 independent contexts, "close" is worse than the best (p < 5 %, and the leaderboard
    marked it "worse"); each of its 17 sources counted once, no difference is shown: kldtui diff's
    verdict says so, and so does the tie column now. Every row's mark, outcome and sentence are diff's."""
    best, close = (load_report(boards[n]) for n in ("best", "close"))
    kl = [np.array([e.kl_reference_to_candidate.mean for e in r.suite_statistics.per_context])  # type: ignore[union-attr]
          for r in (best, close)]
    assert verdict_interval(kl[0], kl[1]).p_value < 0.05  # contexts as independent: a difference
    board = leaderboard_from_files(_three(boards), use_noise_floor=False)
    assert [r.name for r in board.rows] == ["best", "close", "far"]
    assert [r.mark for r in board.rows] == ["best", "tied", "worse"]
    assert (board.unit, board.windows, board.tie_unit, board.tie_units) == (
        "context", 32, "source cluster", 17)
    for row in board.rows[1:]:
        diff = paired_diff_files(boards["best"], boards[row.name], use_noise_floor=False).clustered
        assert diff is not None
        said = ("tied" if diff.outcome in TIED_OUTCOMES else "worse" if diff.outcome == "a_closer"
                else "no verdict")
        assert row.mark == said and row.outcome_vs_best == diff.outcome, (row, diff.verdict)
        assert row.verdict_vs_best == diff.verdict
        assert row.diff_vs_best is not None and row.diff_vs_best.windows == diff.clusters == 17
        assert row.diff_vs_best.estimate == diff.interval.estimate
    assert "over 17 source clusters (mixed partition)" in board.rows[1].verdict_vs_best
    assert board.rows[1].verdict_vs_best.startswith("no difference shown between best and close")


def test_the_board_keeps_its_family_over_source_clusters(boards: dict[str, Path]) -> None:
    """All pairs of candidates are one family (Holm) as before, now over source clusters: with a fourth
    candidate the family holds six pairs, and the note says what the ties count and over how many."""
    far = json.loads(boards["far"].read_text())
    board = build_leaderboard([load_report(p) for p in _three(boards)] + [far],
                              names=["best", "close", "far", "far again"], noise=None)
    assert [(r.name, r.mark) for r in board.rows] == [("best", "best"), ("close", "tied"), ("far", "worse"),
                                                      ("far again", "worse")]
    ties = board.notes[0]
    assert ties.startswith("ties: sign-flip test over the 17 source clusters of the 32 contexts (mixed "
                           "partition; each cluster the mean of its contexts' KL"), ties
    assert "Holm-corrected over all 6 pairs of candidates" in ties, ties
    assert board.brief_notes[0] == ("ties: sign-flip test over 17 source clusters against the best, Holm "
                                    "over all 6 pairs (family-wise 5 %)")


def test_too_many_candidates_for_the_source_clusters_say_so_in_cluster_words(boards: dict[str, Path]) -> None:
    """Eight source clusters (a verdict's least) tell at most four candidates apart: five of them mark no
    row, and the note counts source clusters, not the contexts."""
    docs = []
    base = json.loads(boards["best"].read_text())
    keep = sorted({e["source_cluster"] for e in base["per_context"]})[:8]
    for k, name in enumerate(("best", "close", "far")):
        doc = json.loads(boards[name].read_text())
        for scale, suffix in ((1.0, ""), (1.2, "-b")) if k < 2 else ((1.0, ""),):
            d = _only_clusters(doc, keep)
            if scale != 1.0:
                kl = np.array([e["kl_reference_to_candidate"]["mean"] for e in
                               sorted(d["per_context"], key=lambda e: e["context_index"])]) * scale
                d = with_context_kl(d, kl, name + suffix)
            docs.append((name + suffix, d))
    board = build_leaderboard([d for _, d in docs], names=[n for n, _ in docs], noise=None)
    assert board.tie_units == 8 and board.windows > 8
    assert all(r.mark == "no verdict" and r.family_too_large for r in board.rows)
    said = next(n for n in board.notes if n.startswith("too few source clusters (8) to tell 5 candidates"))
    assert "the sign-flip test over 8 source clusters gives p >= 0.00781" in said, said
    assert (f"({family_windows(10)} source clusters would do, or rank at most {family_size_for(8)} "
            "candidates at a time)") in said, said


def _only_clusters(doc: dict[str, Any], keep: list[str]) -> dict[str, Any]:
    """``doc`` narrowed to the contexts of the source clusters ``keep`` (as a report of fewer contexts)."""
    out = copy.deepcopy(doc)
    kept = {e["context_index"] for e in out["per_context"] if e["source_cluster"] in keep}
    out["per_context"] = [e for e in out["per_context"] if e["context_index"] in kept]
    out["per_window"] = [w for w in out["per_window"] if w["window_index"] in kept]
    arrays = out["per_window_arrays"]
    mask = [i in kept for i in arrays["window_index"]]
    out["per_window_arrays"] = {k: [v for v, m in zip(vs, mask, strict=True) if m] if isinstance(vs, list)
                                else vs for k, vs in arrays.items()}
    out["windows"] = out["contexts"] = len(kept)
    out.pop("window_range", None)
    return out


def test_reports_that_do_not_pair_cluster_by_cluster_are_refused_as_diff_refuses_them(
        boards: dict[str, Path], tmp_path: Path) -> None:
    """A report whose context has another source cluster, or one of another partition: the leaderboard
    refuses it in kldtui diff's words (before, it paired the contexts and ranked them)."""
    doc = json.loads(boards["close"].read_text())
    moved = copy.deepcopy(doc)
    entry = next(e for e in moved["per_context"] if e["context_index"] == 5)
    entry["source_cluster"] = '["wikimedia/wikipedia","host-elsewhere"]'
    other = copy.deepcopy(doc)
    other["context_selection"]["partition"] = "analysis"
    refusals = (("moved", moved, "context 5 has another source cluster, stratum or partition"),
                ("other", other, "covers the mixed partition and .* the analysis one"))
    for name, changed, words in refusals:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(changed))
        with pytest.raises(BadInput, match=words) as diff:
            paired_diff_files(boards["best"], path)
        with pytest.raises(BadInput) as board:
            leaderboard_from_files([boards["best"], path, boards["far"]])
        assert str(board.value) == str(diff.value)


def test_kldtui_leaderboard_says_what_its_ties_count(boards: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The text: the tie marks (close tied, far worse), the footer's test over source clusters, the
    legend in their words, the count that would resolve close's difference in source clusters. The
    JSON: what the windows count and what the ties count, and rows whose intervals say source cluster."""
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", *map(str, _three(boards)), "--no-noise-floor", "--plain",
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert next(x for x in lines if x.startswith("2  close")).endswith("tied"), out
    assert next(x for x in lines if x.startswith("3  far")).endswith("worse"), out
    assert "32 contexts; mean KL intervals: each report's headline interval" in out, out
    assert out.count("sign-flip test") == 1, out  # the ties note's, said once
    assert "note: ties: sign-flip test over the 17 source clusters of the 32 contexts (" in out, out
    assert "no verdict = too few source clusters, or no calibrated verdict with a finite interval on these " \
           "source clusters" in out, out
    need = next(x for x in lines if x.startswith("source clusters needed: close vs best: about "))
    assert "more than the 17 compared) would resolve this difference" in need, need
    assert "window" not in out, out
    doc = json.loads(out_json.read_text())
    assert (doc["windows"], doc["unit"], doc["cluster_unit"], doc["tie_units"], doc["partition"]) == (
        32, "context", "source_cluster", 17, "mixed")
    assert doc["tie_test"].startswith("sign-flip test over source clusters (each the mean of its contexts' "
                                      "KL)"), doc["tie_test"]
    close, far = doc["rows"][1], doc["rows"][2]
    assert (close["tied_with_best"], far["tied_with_best"]) == (True, False)
    assert (close["outcome_vs_best"], far["outcome_vs_best"]) == ("indistinguishable", "a_closer")
    for row in (close, far):
        assert row["windows"] == 32 and row["diff_vs_best"]["windows"] == 17
        assert row["diff_vs_best"]["unit"] == "source cluster"
        assert row["diff_vs_best"]["method"].startswith("sign-flip test over source clusters")
        assert row["ratio_vs_best"]["cluster_unit"] == "source_cluster"
        said = row["verdict_vs_best"]
        assert "over 17 source clusters (mixed partition)" in said, said
    assert list(doc["windows_needed"]) == ["close"], doc["windows_needed"]
    assert doc["windows_needed"]["close"]["measured_windows"] == 17


def test_a_logits_suites_board_still_counts_its_windows(tmp_path: Path) -> None:
    """Reports without per-context identities (a logits suite's windows): the ties count the windows, the
    JSON says so, as before."""
    from tests.fixtures_tui import make_report
    from tests.fixtures_tui import write_report as write_doc

    paths = [write_doc(tmp_path / f"{n}.json", make_report(n, lvl, seed=s))
             for n, lvl, s in [("a", 0.02, 1), ("b", 0.01, 2), ("c", 0.03, 3)]]
    board = leaderboard_from_files(paths, use_noise_floor=False)
    assert (board.tie_unit, board.tie_units, board.partition) == ("window", board.windows, None)
    assert not board.clustered and all(r.tie_units is None for r in board.rows)
    doc = board.to_dict()
    assert (doc["cluster_unit"], doc["unit"], doc["tie_units"], doc["partition"]) == (
        "window", "window", board.windows, None)
    assert doc["tie_test"].startswith("sign-flip test against the best")
    assert board.notes[0].startswith("ties: sign-flip test over windows against the best")


def test_a_campaigns_repeat_capture_is_held_against_its_leader_over_source_clusters(
        boards: dict[str, Path], tmp_path: Path) -> None:
    """The campaign's row of the leader's repeat capture (its verdict against the first capture, not
    ranked) took kldtui diff's per-context verdict, counting the contexts as independent, beside ranked
    rows whose ties count source clusters: over 7 sources of 13 contexts it said "worse" where the
    ranked rows say no verdict. It takes diff's verdict over source clusters."""
    from types import SimpleNamespace

    from kldtui.workflow.campaign import Campaign

    keep = sorted({e["source_cluster"] for e in json.loads(boards["best"].read_text())["per_context"]})[-7:]
    paths = []
    for name in ("best", "far"):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(_only_clusters(json.loads(boards[name].read_text()), keep)))
    board = leaderboard_from_files(paths, use_noise_floor=False)
    assert board.tie_units == 7 and board.windows > 8 and board.rows[1].mark == "no verdict"
    repeat = SimpleNamespace(name="far", report=paths[1])
    standing = Campaign._repeat_standing(SimpleNamespace(noise=None), repeat, board)  # type: ignore[arg-type]
    diff = paired_diff_files(*paths, use_noise_floor=False)
    assert diff.overall.outcome == "a_closer" and diff.clustered is not None  # the contexts name one
    assert (standing.outcome, standing.verdict) == (diff.clustered.outcome, diff.clustered.verdict)
    assert standing.outcome == "too_few_windows" and standing.mark == "", standing
    assert standing.verdict.startswith("too few source clusters (7, mixed partition) for a verdict"), \
        standing.verdict
