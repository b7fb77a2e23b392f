"""Verdicts on extreme (but allowed) KL: a difference of 1e29 was printed as thirty digits ("by
50000000000000000000000000000 KL"), an interval's overflowed end as "to inf", and the log-normal model
printed numpy's overflow warnings to stderr. Figures beyond 999,999 read in exponent form
(kldtui.text.plain_number), an infinite end in words, and nothing is warned."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from tests.fixtures_decide import make_report, suite_domains, write_report

LONG_DIGITS = re.compile(r"\d{9,}")


def _pair(tmp_path: Path, kl_a: np.ndarray, kl_b: np.ndarray) -> list[str]:
    domains = suite_domains(len(kl_a))
    return [str(write_report(tmp_path / f"{name}.json",
                             make_report(kl, domains, candidate_dir=f"/runs/{name}")))
            for name, kl in (("A", kl_a), ("B", kl_b))]


def _base(n: int = 32) -> np.ndarray:
    return 0.01 * np.exp(np.random.default_rng(3).normal(0.0, 0.3, n))


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("case", ["1e29 apart", "4 windows at 3e37", "B over 67 orders of magnitude"])
def test_a_verdict_on_huge_kl_reads_in_exponent_form_and_warns_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    base = _base()
    if case == "1e29 apart":  # B 50 % worse, both at 1e29: a named difference of about 5e28 KL
        kl_a, kl_b = base * 1e31, base * 1.5e31
    elif case == "4 windows at 3e37":  # a few wild windows: the log-normal model's far end overflows float64
        kl_a, kl_b = base, base * 1.1
        kl_b[:4] = 3e37
    else:  # B's windows from 1e-30 to 3.4e37: named the worse, the far end overflowing
        kl_a = base
        kl_b = np.exp(np.random.default_rng(0).uniform(np.log(1e-30), np.log(3.4e37), len(base)))
    paths = _pair(tmp_path, kl_a, kl_b)
    assert main(["diff", *paths, "--no-noise-floor", "--json", str(tmp_path / "d.json")]) == 0
    captured = capsys.readouterr()
    assert "Warning" not in captured.err, captured.err
    verdict = next(x for x in captured.out.splitlines() if x.startswith("verdict: "))
    said = json.loads((tmp_path / "d.json").read_text())["overall"]["verdict"]
    assert verdict.removeprefix("verdict: ").startswith(said[:40]), (verdict, said)
    for line in captured.out.splitlines():
        assert not LONG_DIGITS.search(line.replace(str(tmp_path), "")), line
    assert not re.search(r"\binf\b", verdict), verdict
    if case == "1e29 apart":
        assert verdict.startswith("verdict: B is worse than A by 5"), verdict
        assert re.search(r"by 5\.\d+e\+28 KL \(50 % of A's mean KL\), 95 % interval \d\.\d+e\+28 to "
                         r"\d\.\d+e\+28 \(\d+ % to \d+ %\)", verdict), verdict
    elif case == "4 windows at 3e37":  # no difference named on an interval bounding nothing: no verdict
        assert verdict.startswith("verdict: no verdict: the verdict's rule gives no finite upper end over "
                                  "these 32 windows, whose KL spans"), verdict
        assert verdict.endswith("B - A = 3.75e+36 KL is an estimate only"), verdict
    else:  # a named difference keeps its verdict, its far end in words
        assert verdict.startswith("verdict: B is worse than A by 7.43e+35 KL"), verdict
        assert "95 % interval from 3.55e+30 with no finite upper end, over 32 windows" in verdict, verdict
    assert main(["leaderboard", *paths, "--no-noise-floor", "--plain"]) == 0
    board = capsys.readouterr()
    assert "Warning" not in board.err, board.err
    for line in board.out.splitlines():
        assert not LONG_DIGITS.search(line.replace(str(tmp_path), "")), line
