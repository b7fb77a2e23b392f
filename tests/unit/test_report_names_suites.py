"""Which reports rank together (kldtui.formats.report_names.suite_groups): the one rule of kldtui
view/leaderboard/plot DIR, of the viewer's and the dashboard's o and of the dashboard's ranking. A
leaderboard ranks one suite's reports; a report that records no suite (the original comparator's, for
one) is not of another suite: it ranks beside the one suite the others record, and beside several it
is named apart, so that every report of a refused folder is named."""

from __future__ import annotations

from pathlib import Path

from kldtui.formats.report_names import (
    beside_board_line,
    mixed_suites_line,
    other_suites_note,
    suite_groups,
    suite_groups_words,
    unrecorded_suite,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_reports_group_by_the_suite_they_record_and_the_unrecorded_join_none() -> None:
    paths = [Path(f"/w/comparison-{n}.json") for n in "pqrs"]
    suites = [B, None, A, B]
    assert suite_groups(paths, suites) == [(B, [paths[0], paths[3]]), (A, [paths[2]])]
    assert unrecorded_suite(paths, suites) == [paths[1]]
    assert suite_groups_words(suite_groups(paths, suites), unrecorded_suite(paths, suites)) == (
        "suite bbbbbbbbbbbb: comparison-p.json, comparison-s.json; suite aaaaaaaaaaaa: comparison-r.json; "
        "suite not recorded: comparison-q.json")


def test_a_folder_of_one_suite_and_unrecorded_reports_is_not_refused(tmp_path: Path) -> None:
    paths = [tmp_path / "comparison-a.json", tmp_path / "comparison-old.json"]
    assert mixed_suites_line([tmp_path], paths, [A, None], "view") is None
    assert mixed_suites_line([tmp_path], paths, [None, None], "view") is None


def test_a_folder_of_two_suites_names_its_unrecorded_reports_too(tmp_path: Path) -> None:
    paths = [tmp_path / f"comparison-{n}.json" for n in ("a", "old", "c")]
    assert mixed_suites_line([tmp_path], paths, [A, None, B], "view") == (
        f"{tmp_path} holds reports of 2 suites, which no leaderboard ranks together (suite aaaaaaaaaaaa: "
        "comparison-a.json; suite bbbbbbbbbbbb: comparison-c.json; suite not recorded: comparison-old.json); "
        f"rank one suite's: kldtui view {tmp_path}/comparison-a.json")


def test_o_beside_a_board_is_refused_only_for_a_suite_the_board_does_not_hold() -> None:
    board = [Path("/w/comparison-a.json"), Path("/w/comparison-b.json")]
    opened = [Path("/x/comparison-c.json"), Path("/x/comparison-d.json")]
    assert beside_board_line("/x", opened, [B, B], board, [A, A], "view") == (
        "/x and the leaderboard hold reports of 2 suites, which no leaderboard ranks together (suite "
        "bbbbbbbbbbbb: /x/comparison-c.json, /x/comparison-d.json; suite aaaaaaaaaaaa: /w/comparison-a.json, "
        "/w/comparison-b.json); rank one suite's: kldtui view /x/comparison-c.json /x/comparison-d.json")
    assert beside_board_line("/x", opened, [A, A], board, [A, A], "view") is None  # its suite
    assert beside_board_line("/x", opened, [None, A], board, [A, None], "view") is None
    assert beside_board_line("/x", opened, [None, None], board, [A, A], "view") is None
    assert beside_board_line("/x", opened, [B, B], board, [None, None], "view") is None  # unknown
    assert beside_board_line("/x", opened, [B, B], [], [], "view") is None  # nothing on the board
    # a board of two suites already (kldtui view of two files) ranks untied; one of those suites joins
    assert beside_board_line("/x", opened, [B, B], board, [A, B], "view") is None
    assert beside_board_line("/x", opened, [C, B], board, [A, B], "view") is not None


def test_the_note_of_reports_of_other_suites_left_out_says_how_many_and_how_to_rank_them() -> None:
    assert other_suites_note([], "view") is None
    one = [(B, [Path("/w/comparison-c.json"), Path("/w/comparison-d.json")])]
    assert other_suites_note(one, "view") == (
        "left out: 2 reports of another suite than this run's (suite bbbbbbbbbbbb: comparison-c.json, "
        "comparison-d.json); rank them: kldtui view /w/comparison-c.json /w/comparison-d.json",
        "2 reports of another suite left out: ? names them and how to rank them")
    two = [*one, (C, [Path("/w/comparison it.json")])]
    full, brief = other_suites_note(two, "view") or ("", "")
    assert full == (
        "left out: 3 reports of 2 other suites than this run's (suite bbbbbbbbbbbb: comparison-c.json, "
        "comparison-d.json; suite cccccccccccc: comparison it.json); rank one suite's: kldtui view "
        "/w/comparison-c.json /w/comparison-d.json")
    assert brief == "3 reports of 2 other suites left out: ? names them and how to rank them"
    assert len(brief) <= 78  # one line of an 80-column dashboard
