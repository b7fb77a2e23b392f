"""A verdict with no finite interval claims no tie. Window KL near the allowed bound (7e38,
kldtui.metrics.limits) and spread over dozens of orders of magnitude overflows the log-normal model's
interval end to infinity; the leaderboard then marked "tied" (not shown different from the best) a
candidate whose mean KL was 10^35 times the best's. No verdict can be given there, and every view
says why in the words the verdict uses for a missing interval (VerdictInterval.no_interval_reason)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.decide.leaderboard import build_leaderboard
from kldtui.decide.noise import NoiseFloor
from kldtui.decide.verdict import VerdictInterval, decide, sentence
from tests.fixtures_decide import make_report, suite_domains, write_report

N = 32
REASON = "the verdict's rule gives no finite upper end over these 32 windows"


def _kl() -> tuple[np.ndarray, np.ndarray]:
    """A: narrow windows near 0.01; B: window means from 1e-30 to 3.4e37 (the fixture's max, 20 times
    the mean, stays within 7e38), whose sign-flip test does not name B the worse at 5 %."""
    a = 0.01 * np.exp(np.random.default_rng(0).normal(0.0, 0.3, N))
    b = np.exp(np.random.default_rng(2).uniform(np.log(1e-30), np.log(3.4e37), N))
    return a, b


@pytest.fixture
def paths(tmp_path: Path) -> list[str]:
    a, b = _kl()
    return [str(write_report(tmp_path / f"{name}.json",
                             make_report(kl, suite_domains(N), candidate_dir=f"/runs/{name}")))
            for name, kl in (("A", a), ("B", b))]


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_candidate_with_no_finite_interval_is_not_marked_tied(paths: list[str]) -> None:
    a, b = _kl()
    board = build_leaderboard([json.loads(Path(p).read_text()) for p in paths], names=["A", "B"], noise=None)
    best, row = board.rows
    assert row.mean / best.mean > 1e30
    assert row.diff_vs_best is not None and row.diff_vs_best.ci95_high == float("inf")
    assert row.diff_vs_best.p_value is not None and row.diff_vs_best.p_value > 0.05  # it named no difference
    assert row.mark == "no verdict" and not row.tied_with_best, row
    assert row.outcome_vs_best == "no_finite_interval"
    assert row.verdict_vs_best.startswith(f"no verdict: {REASON}, whose KL spans "), row.verdict_vs_best
    assert "is an estimate only" in row.verdict_vs_best and "no difference shown" not in row.verdict_vs_best


def test_every_view_of_the_board_and_the_diff_say_no_verdict(
        paths: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "board.json"
    assert main(["leaderboard", *paths, "--no-noise-floor", "--plain", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("2  B "))
    assert line.endswith("no verdict") and "(estimate only)" in line, line
    assert "windows needed: B vs best" not in text, text  # more windows would not bound it
    legend = next(x for x in text.splitlines() if x.startswith("tie: "))
    assert "no verdict = " in legend and "with a finite interval" in legend, legend
    row = json.loads(out.read_text())["rows"][1]
    assert (row["tied_with_best"], row["outcome_vs_best"]) == (False, "no_finite_interval"), row
    assert row["verdict_vs_best"].startswith(f"no verdict: {REASON}"), row
    assert main(["leaderboard", *paths, "--no-noise-floor", "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert "| no verdict (no finite interval) |" in markdown, markdown
    assert main(["leaderboard", *paths, "--no-noise-floor", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (rows[1]["verdict"], rows[1]["windows_to_resolve"]) == ("no verdict (no finite interval)", "")
    diff = tmp_path / "diff.json"
    assert main(["diff", *paths, "--no-noise-floor", "--json", str(diff)]) == 0
    said = capsys.readouterr().out
    overall = json.loads(diff.read_text())["overall"]
    assert overall["outcome"] == "no_finite_interval" and overall["verdict"] == row["verdict_vs_best"]
    assert f"verdict: {row['verdict_vs_best']}" in said
    first = next(x for x in said.splitlines() if x.startswith("all "))
    assert first.endswith("no finite interval"), first


def _iv(high: float, p: float) -> VerdictInterval:
    return VerdictInterval(5.0, 1.0, high, p, 32, mean_a=1.0, ratio_low=2.0, ratio_high=high)


def test_a_tie_needs_a_finite_interval_and_a_named_difference_keeps_its_verdict() -> None:
    """The decision: without a finite interval, what would read as a tie (no difference shown, held by
    Holm, within the repeat variation) is no verdict; a named difference, whose near end is finite, and
    every decision on a finite interval are as before."""
    windows = range(32)
    assert decide(_iv(9.0, 0.5), None, windows).outcome == "indistinguishable"
    assert decide(_iv(float("inf"), 0.5), None, windows).outcome == "no_finite_interval"
    assert decide(_iv(float("inf"), 0.01), None, windows, significant=False).outcome == "no_finite_interval"
    assert decide(_iv(float("inf"), 0.01), None, windows).outcome == "a_closer"
    wide = NoiseFloor(kind="measured", source="test", kl_mean=0.0, threshold=0.0,
                      metric_per_window={w: 2.0 for w in windows})  # repeat variation 2 KL
    assert decide(_iv(9.0, 0.01), wide, windows).outcome == "within_noise"
    unbounded = decide(_iv(float("inf"), 0.01), wide, windows)
    assert unbounded.outcome == "no_finite_interval"
    said = sentence(unbounded, _iv(float("inf"), 0.01), 1.0, "A", "B")
    assert said.startswith(f"no verdict: {REASON}, whose KL spans "), said
    assert said.endswith("B - A = 5 KL is an estimate only"), said
