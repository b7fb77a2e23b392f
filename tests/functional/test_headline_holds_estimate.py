"""One report's headline mean-KL interval holds the estimate shown beside it (docs/STATISTICS.md, "one
report's mean KL"). Cox's interval is centred on the log-normal model's mean, exp(mean log + s^2 / 2):
window KLs spread from 1e-30 to 1e33 were shown as "6.7e33 [1.5e+196, inf]", an interval far above its
own estimate. Where the model's interval falls beside the windows' own mean it is stretched to hold it,
in the one function every view reads (the stored copy, the viewer, ``kldtui view``, the leaderboard and
its exports); ordinary reports keep their interval."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.decide.leaderboard import leaderboard_from_files
from kldtui.formats.report_model import as_report
from kldtui.formats.report_names import kl_headline_interval
from kldtui.metrics.inference import headline, mean_interval
from kldtui.metrics.limits import KL_ROW_MAX
from kldtui.stages.compare.report import headline_interval
from kldtui.tui.resultdata import result_from_report
from tests.fixtures_decide import make_report, suite_domains, write_report

N = 32
WIDE = np.exp(np.random.default_rng(0).uniform(np.log(1e-30), np.log(1e33), N))
ORDINARY = np.random.default_rng(30).gamma(4.0, 0.0025, N)
# an end beyond float64 in words (kldtui.text.interval_ends): "from 1.5e+29 with no finite upper end"
SUMMARY = re.compile(r"^KL\(reference \|\| candidate\) = (\S+)  95% interval "
                     r"(?:\[(\S+), (\S+)\]|from (\S+) with no finite upper end)")


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_every_view_of_windows_spread_over_63_orders_of_magnitude_holds_its_estimate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mean = float(WIDE.mean())
    stored = headline_interval(list(WIDE), "kl_mean")  # the copy the compare stage writes
    assert stored.estimate == pytest.approx(mean, rel=1e-12)
    assert stored.ci95_low is not None and stored.ci95_low <= mean
    assert stored.ci95_high is None or mean <= stored.ci95_high  # None: beyond float64
    assert stored.method == "cox-lognormal-stretched"
    assert stored.to_json()["method"] == "cox-lognormal-stretched"

    report = make_report(WIDE, suite_domains(N), candidate_dir="/r/wide")
    path = write_report(tmp_path / "wide.json", report)
    other = write_report(tmp_path / "other.json",
                         make_report(ORDINARY, suite_domains(N), candidate_dir="/r/other"))
    head = kl_headline_interval(as_report(report))
    assert head.ci95_low is not None and head.ci95_high is not None
    assert head.ci95_low <= mean <= head.ci95_high
    assert head.method == "cox-lognormal-stretched"

    band = result_from_report(report, path).kl  # the viewer
    assert band is not None and band.low is not None and band.low <= band.estimate
    assert band.high is None or band.estimate <= band.high

    assert main(["view", str(path)]) == 0  # not a terminal: the summary
    out = capsys.readouterr()
    line = out.out.splitlines()[0]
    found = SUMMARY.match(line)
    assert found is not None, line
    est, low, high = (float(found[1]), float(found[2] or found[4]),
                      float(found[3]) if found[3] is not None else float("inf"))
    assert low <= est <= high, line
    assert "Warning" not in out.err, out.err

    board = leaderboard_from_files([path, other])
    row = next(r for r in board.rows if r.name == "wide")
    assert row.ci_low <= row.mean <= row.ci_high

    assert main(["leaderboard", str(path), str(other), "--format", "csv"]) == 0
    out = capsys.readouterr()
    assert "Warning" not in out.err, out.err
    rows = {r["candidate"]: r for r in csv.DictReader(io.StringIO(out.out))}
    cells = rows["wide"]
    assert float(cells["kl_ci95_low"]) <= float(cells["kl_mean"]), cells


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("values", [
    WIDE,
    np.array([1e-30] * 10 + [KL_ROW_MAX] * 10),  # both of Cox's ends beyond float64
    np.array([1e-300, 1e-30, 1.0, 1e20, KL_ROW_MAX, KL_ROW_MAX]),
    np.array([1e-300, 3e-300, 1e-299]),  # the fewest windows, at the smallest KL
    np.exp(np.random.default_rng(5).uniform(np.log(1e-300), np.log(KL_ROW_MAX), (200, 64))),
], ids=["1e-30..1e33", "1e-30 and 7e38", "six far apart", "three tiny", "200 suites up to 7e38"])
def test_the_interval_holds_the_mean_and_warns_nothing(values: np.ndarray) -> None:
    low, high = mean_interval(values)[:2]
    mean = values.mean(axis=-1)
    assert np.all(low <= mean) and np.all(mean <= high)
    if values.ndim == 1:
        h = headline(values)
        assert h.low is not None and h.high is not None and h.low <= h.estimate <= h.high


@pytest.mark.parametrize("values, want", [
    (ORDINARY, (0.010553232245938998, 0.00882865097444572, 0.01308135472773636, "hall-t")),
    (0.01 * np.exp(np.random.default_rng(31).normal(0.0, 1.5, N)),
     (0.019047534130477987, 0.011013598421407872, 0.03921735206169543, "cox-lognormal")),
    (np.random.default_rng(32).gamma(4.0, 0.0025, 6),
     (0.009728834704091631, 0.0042937849138125865, 0.025361281844382886, "cox-lognormal")),
], ids=["hall-t", "cox-lognormal", "six windows"])
def test_ordinary_reports_keep_their_interval(values: np.ndarray,
                                              want: tuple[float, float, float, str]) -> None:
    """The figures this version's predecessor gave, to 12 digits: the stretch touches no ordinary report."""
    h = headline(values)
    assert (h.estimate, h.low, h.high) == pytest.approx(want[:3], rel=1e-12)
    assert h.method == want[3]
    assert json.loads(json.dumps(headline_interval(list(values), "kl_mean").to_json()))["method"] == want[3]
