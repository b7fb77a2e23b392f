"""paired_diff, noise floors and the leaderboard over saved reports (kldtui's and the original's)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.decide import (
    PUBLISHED_SUITE_HASH,
    build_leaderboard,
    floor_from_reports,
    load_floor,
    paired_diff,
    published_floor,
    resolve_floor,
    save_floor,
)
from kldtui.decide.noise import noise_from_capture_reports
from kldtui.decide.paired import confirm_command, draw_indices, paired_bootstrap
from kldtui.decide.verdict import plain_number, verdict_interval
from kldtui.errors import BadInput
from kldtui.metrics.stats import t_quantile
from kldtui.text import signed_table_figure
from tests.fixtures_decide import SUITE_HASH, make_report, suite_domains, write_report

DOMAINS = suite_domains(32)


def _kl(seed: int, scale: float = 1.0, n: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.gamma(4.0, 0.0025, n) * scale


def test_paired_diff_overall_and_per_domain_match_the_bootstrap():
    base = _kl(1)
    worse = base * 1.5 * np.exp(np.random.default_rng(101).normal(0, 0.05, 32))
    a = make_report(base, DOMAINS, candidate_dir="/runs/q4")
    b = make_report(worse, DOMAINS, candidate_dir="/runs/q3")
    res = paired_diff(a, b, samples=2000, seed=1, noise=None)
    want_d, want_r = paired_bootstrap(base, worse, draw_indices(32, 2000, 1))
    assert res.overall.difference == want_d and res.overall.ratio == want_r  # compatibility fields
    assert set(res.domains) == {"prose", "code", "instruction"}
    code = np.array([d == "code" for d in DOMAINS])
    want_code, _ = paired_bootstrap(base[code], worse[code], draw_indices(8, 2000, 1))
    assert res.domains["code"].difference == want_code
    assert res.overall.outcome == "a_closer" and res.overall.provisional  # no noise model: provisional
    iv = res.overall.interval
    # the headline interval: the ratio of means by the sign-flip test, shown in KL at A's mean
    assert iv.ratio_low < worse.mean() / base.mean() < iv.ratio_high
    assert iv.ci95_low == pytest.approx((iv.ratio_low - 1) * base.mean())
    assert res.verdict.startswith(f"q3 is worse than q4 by {plain_number(worse.mean() - base.mean())} KL (")
    assert f"95 % interval {plain_number(iv.ci95_low)} to {plain_number(iv.ci95_high)} (" in res.verdict
    assert "over 32 windows" in res.verdict and "kldtui noise" in res.verdict
    assert res.per_window_difference == pytest.approx((worse - base).tolist())
    assert res.noise_floor is None and "not known" in res.noise_source
    doc = res.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["overall"]["excludes_zero"] is True
    assert doc["domains"]["code"]["windows"] == 8
    assert doc["overall"]["verdict_interval"]["method"].startswith("sign-flip test over windows")
    assert doc["overall"]["verdict_interval"]["ratio_ci95_low"] == iv.ratio_low
    assert doc["overall"]["provisional"] is True
    assert doc["verdict_method"]["family"].startswith("Holm over the overall and per-domain verdicts")


def test_b_closer_and_not_distinguishable_verdicts():
    base = _kl(2)
    a = make_report(base * 1.3, DOMAINS, candidate_dir="/runs/a")
    b = make_report(base, DOMAINS, candidate_dir="/runs/b")
    res = paired_diff(a, b, samples=1000, noise=None)
    assert res.overall.outcome == "b_closer" and res.verdict.startswith("b is better than a by ")
    noisy = base * np.exp(np.random.default_rng(3).normal(0, 0.2, 32))
    res = paired_diff(make_report(base, DOMAINS, candidate_dir="/r/a"),
                      make_report(noisy, DOMAINS, candidate_dir="/r/b"), samples=1000, noise=None)
    assert res.overall.outcome == "indistinguishable"
    assert res.verdict.startswith("no difference shown between a and b") and "includes zero" in res.verdict


def test_the_headline_says_the_verdict_in_short_with_the_interval_it_rests_on():
    """What the viewer shows above the difference chart: the outcome (provisional where the sentence
    says so), then B - A and the interval of the sentence, signed as the chart draws it."""
    base = _kl(2)
    a = make_report(base * 1.3, DOMAINS, candidate_dir="/runs/a")
    b = make_report(base, DOMAINS, candidate_dir="/runs/b")
    res = paired_diff(a, b, samples=1000, noise=None)
    iv = res.verdict_interval
    assert res.provisional and "; provisional: " in res.verdict
    assert res.headline == (f"b: closer than a (provisional); b - a = {plain_number(iv.estimate)} KL, 95 % "
                            f"interval {plain_number(iv.ci95_low)} to {plain_number(iv.ci95_high)}, "
                            "over 32 windows")
    noisy = base * np.exp(np.random.default_rng(3).normal(0, 0.2, 32))
    res = paired_diff(make_report(base, DOMAINS, candidate_dir="/r/a"),
                      make_report(noisy, DOMAINS, candidate_dir="/r/b"), samples=1000, noise=None)
    assert res.outcome == "indistinguishable" and not res.provisional
    assert res.headline.startswith("b: tied with a; b - a = "), res.headline


def test_published_floor_is_the_default_for_the_published_suite_only():
    base = _kl(4)
    a = make_report(base, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/a")
    # B worse by 0.003 on every window: significant, but within the published floor 0.004
    b = make_report(base + 0.003, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/b")
    res = paired_diff(a, b, samples=1000)
    assert res.noise_floor is not None and res.noise_floor["threshold"] == 0.004
    assert "published repeat KL 0.004 for the Kimi K3 suite" in res.noise_source
    # a clear difference smaller than the published repeat KL: named, but provisional
    assert res.overall.outcome == "a_closer" and res.overall.provisional
    assert "provisional: smaller than the repeat KL 0.004" in res.verdict and "kldtui noise" in res.verdict
    # larger than the published figure: not provisional
    big = paired_diff(a, make_report(base + 0.006, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH,
                                     candidate_dir="/r/b"), samples=1000)
    assert big.overall.outcome == "a_closer" and not big.overall.provisional
    # the same reports on another suite: no noise model, the difference is named, provisional
    other = paired_diff(make_report(base, DOMAINS), make_report(base + 0.003, DOMAINS, candidate_dir="/r/b"),
                        samples=1000)
    assert other.noise_floor is None and other.overall.outcome == "a_closer" and other.overall.provisional
    # beyond the floor: called even on the published suite
    far = make_report(base + 0.006, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/b")
    assert paired_diff(a, far, samples=1000).overall.outcome == "a_closer"


def test_original_comparator_reports_pair_on_reference_dir_and_windows():
    base = _kl(5, n=8)
    a = make_report(base, fmt="original", candidate_dir="/r/a")
    b = make_report(base * 2, fmt="original", candidate_dir="/r/b")
    res = paired_diff(a, b, samples=500, noise=None)
    assert "reference_dir" in res.pairing_checked and "suite_token_hash" not in res.pairing_checked
    assert res.overall.mean_b == pytest.approx(2 * base.mean())
    c = make_report(base, fmt="original", reference_dir="/elsewhere/ref", candidate_dir="/r/c")
    with pytest.raises(BadInput, match="different references .*reference_dir"):
        paired_diff(a, c, noise=None)
    mixed = paired_diff(a, make_report(base * 2, DOMAINS[:8], candidate_dir="/r/k"), samples=200, noise=None)
    assert mixed.overall.windows == 8  # kldtui report against an original one: pairs on the windows


@pytest.mark.parametrize("change, message", [
    ({"suite_hash": "6" * 64}, "different suites"),
    ({"ref_hash": "8" * 64}, "different references"),
    ({"start": 1}, "cover different windows"),
    ({"positions": 1000}, "window 0 has 2047 positions in one and 1000"),
])
def test_refuses_reports_that_do_not_pair(change, message):
    base = _kl(6)
    a = make_report(base, DOMAINS)
    b = make_report(base, DOMAINS, **change)
    with pytest.raises(BadInput, match=message) as err:
        paired_diff(a, b, noise=None, path_a="A.json", path_b="B.json")
    assert "\n" not in str(err.value) and "A.json" in str(err.value)


def test_refuses_different_domains_and_missing_per_window_values():
    base = _kl(7)
    doms = list(DOMAINS)
    doms[3] = "code"
    with pytest.raises(BadInput, match="window 3 is 'prose' in one and 'code'"):
        paired_diff(make_report(base, DOMAINS), make_report(base, doms), noise=None)
    bare = make_report(base, DOMAINS, fmt="original")
    del bare["per_window"]
    with pytest.raises(BadInput, match="^old.json: per_window: missing field"):
        paired_diff(bare, make_report(base, DOMAINS), noise=None, path_a="old.json")
    broken = make_report(base, DOMAINS)
    broken["per_window_arrays"]["kl_mean"][4] = None
    with pytest.raises(BadInput, match=r"per_window_arrays.kl_mean: expected finite numbers, found null at"):
        paired_diff(broken, make_report(base, DOMAINS), noise=None)


def test_measured_floor_round_trip_and_per_window_thresholds(tmp_path):
    kl = np.full(32, 0.002)
    kl[:16] = 0.001  # prose windows are quieter
    rev = kl * 1.1
    fwd = make_report(kl, DOMAINS, reverse=rev, reference_dir="/runs/r1", candidate_dir="/runs/r2")
    floor = floor_from_reports(fwd, None, source="test")
    assert floor.kl_mean == pytest.approx(0.0015) and floor.kl_reverse_mean == pytest.approx(0.00165)
    assert floor.threshold == pytest.approx(0.00165)
    assert floor.threshold_for(range(16)) == pytest.approx(0.0011)
    assert floor.threshold_for([0, 99]) == floor.threshold  # not covered: the overall threshold
    path = tmp_path / "floor.json"
    save_floor(path, floor)
    loaded = load_floor(path)
    assert loaded.per_window == floor.per_window and loaded.per_window_reverse == floor.per_window_reverse
    assert loaded.threshold == floor.threshold and loaded.suite_token_hash_sha256 == SUITE_HASH
    assert loaded.run1 == "/runs/r1" and loaded.kind == "measured"
    # a reverse report of the other direction
    back = make_report(rev, DOMAINS, reference_dir="/runs/r2", candidate_dir="/runs/r1")
    both = floor_from_reports(make_report(kl, DOMAINS, reference_dir="/runs/r1", candidate_dir="/runs/r2"),
                              back, source="two reports")
    assert both.kl_reverse_mean == pytest.approx(0.00165)
    not_back = make_report(rev, DOMAINS, reference_dir="/runs/r1", candidate_dir="/runs/r3")
    with pytest.raises(BadInput, match="is not the reverse of"):
        floor_from_reports(fwd, not_back, source="x")


def test_domain_verdicts_use_the_measured_repeat_variation():
    base = _kl(8)
    rng = np.random.default_rng(80)
    prose = np.array(DOMAINS) == "prose"
    # the metric moves little between captures on prose windows, a lot on the others
    wobble = np.where(prose, rng.normal(0, 0.0001, (2, 32)), rng.normal(0, 0.01, (2, 32)))
    caps = [make_report(np.abs(base + w), DOMAINS, candidate_dir=f"/r/c{i}")  # a KL is >= 0
            for i, w in enumerate([0, *wobble])]
    # the folders /r/c0.. do not exist: the same-model check is waived
    two = noise_from_capture_reports(caps[0], caps[1], where1="c0.json", where2="c1.json",
                                     allow_different_models=True)
    assert two.has_metric and two.repeat_variation_for(np.flatnonzero(prose)) < 0.0003
    pair = (make_report(base, DOMAINS, candidate_dir="/r/a"),
            make_report(base * 1.25, DOMAINS, candidate_dir="/r/b"))
    res = paired_diff(*pair, samples=500, noise=two)
    # one repeat cannot see an offset shared by every window of a capture: named, but provisional
    assert res.domains["prose"].outcome == "a_closer" and res.domains["prose"].provisional
    assert "one repeat capture" in res.domains["prose"].verdict
    # what settles it is a third capture and the noise model of all three, not a second model of two
    said = res.domains["prose"].verdict
    assert ("confirm: capture the model of c0.json once more, compare it with the reference (AGAIN.json), "
            "then run `kldtui noise c0.json c1.json AGAIN.json --output noise.json`") in said
    assert res.domains["code"].outcome == "within_noise"
    three = noise_from_capture_reports(*caps, where1="c0.json", where2="c1.json", where_more=["c2.json"],
                                       allow_different_models=True)
    assert three.repeat is not None and three.repeat.captures == 3 and three.repeat.capture_wide_measured
    res = paired_diff(*pair, samples=500, noise=three)
    assert res.domains["prose"].outcome == "a_closer" and not res.domains["prose"].provisional
    assert "larger than the measured repeat variation" in res.domains["prose"].verdict
    assert res.domains["code"].outcome == "within_noise"
    assert res.noise_floor["kind"] == "measured" and res.noise_floor["model"] == "repeat_variation"
    assert res.noise_floor["captures"] == 3 and res.noise_floor["capture_wide_measured"] is True


def test_floor_files_are_checked(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(BadInput, match="not a kldtui noise floor"):
        load_floor(bad)
    with pytest.raises(BadInput, match="not found"):
        load_floor(tmp_path / "missing.json")
    path = tmp_path / "f.json"
    save_floor(path, floor_from_reports(make_report(_kl(9), DOMAINS), None, source="x"))
    with pytest.raises(BadInput, match="measured on suite 555555555555"):
        resolve_floor(path, "6" * 64)
    assert resolve_floor(path, SUITE_HASH).kind == "measured"
    assert resolve_floor(None, PUBLISHED_SUITE_HASH) == published_floor()
    assert resolve_floor(None, SUITE_HASH) is None
    doc = json.loads(path.read_text())
    doc["threshold"] = -1
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="'threshold' is -1; a repeat KL is a finite number from 0 to 7e"):
        load_floor(path)


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d.update(threshold=1e300), "{p}: field 'threshold' is 1e+300; a repeat KL is a finite number "
                                          "from 0 to 7e+38"),
    (lambda d: d["per_window"][3].update(kl_mean=1e300),
     "{p}: window 3: field 'kl_mean' is 1e+300; a repeat KL is a finite number from 0 to 7e+38"),
    (lambda d: d.update(metric_repeat={"per_window": [{"window_index": 0, "difference": -1e300}]}),
     "{p}: metric_repeat entry {{'window_index': 0, 'difference': -1e+300}} needs an integer window_index "
     "and a difference of two mean KL from -7e+38 to 7e+38"),
    (lambda d: d.update(repeat_model={"window_index": [0, 1], "kl_mean": [[0.01, 0.02], [0.011, 1e300]]}),
     "{p}: repeat_model kl_mean[1] (capture 2) holds 1e+300 for window 1; a repeat KL is a finite number "
     "from 0 to 7e+38"),
])
def test_a_noise_model_s_kl_above_what_float32_logits_give_is_refused(tmp_path: Path, edit: Any,
                                                                      words: str) -> None:
    """A noise model refused a negative or infinite KL only: a finite 1e300 (no mean over float32 logits'
    rows gives more than KL_ROW_MAX, 7e38) passed, and every verdict was then held against it. It is
    refused on load, one line naming the file and the entry."""
    path = tmp_path / "f.json"
    save_floor(path, floor_from_reports(make_report(_kl(9), DOMAINS), None, source="x"))
    assert load_floor(path).kind == "measured"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as err:
        load_floor(path)
    text = str(err.value)
    assert text.startswith(words.format(p=path)), text
    assert text.endswith("; write the file again with kldtui noise") and "\n" not in text, text


def test_leaderboard_ranks_and_marks_ties():
    base = _kl(10)
    rng = np.random.default_rng(11)
    reports = {
        "mid": base * 1.4,
        "best": base,
        "twin": base * np.exp(rng.normal(0, 0.15, 32)),  # same mean in distribution: tied with best
        "worst": base * 2.5,
    }
    board = build_leaderboard(
        [make_report(v, DOMAINS, candidate_dir=f"/runs/{k}") for k, v in reports.items()],
        samples=2000, seed=1, noise=None)
    names = [r.name for r in board.rows]
    assert names[0] in ("best", "twin") and names[-2:] == ["mid", "worst"]
    by = {r.name: r for r in board.rows}
    other_of_pair = "twin" if names[0] == "best" else "best"
    assert by[names[0]].is_best and by[names[0]].mark == "best" and by[names[0]].diff_vs_best is None
    assert by[other_of_pair].tied_with_best and by[other_of_pair].mark == "tied"
    assert not by["mid"].tied_with_best and not by["worst"].tied_with_best
    assert [r.rank for r in board.rows] == [1, 2, 3, 4]
    assert by["mid"].mean == pytest.approx(reports["mid"].mean())
    d = verdict_interval(reports[names[0]], reports["mid"])
    assert by["mid"].diff_vs_best == d
    doc = board.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["rows"][0]["is_best"] and "Holm-corrected over all 6 pairs" in " ".join(doc["notes"])


def test_leaderboard_uses_floor_for_ties_and_refuses_mixed_suites():
    base = _kl(12)
    a = make_report(base, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/a")
    b = make_report(base + 0.002, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/b")
    board = build_leaderboard([a, b], samples=500)
    # a clear difference below the published repeat KL: not tied, but provisional
    assert not board.rows[1].tied_with_best and board.rows[1].provisional
    assert "published repeat KL" in board.noise_source
    rng = np.random.default_rng(120)
    wobble = rng.normal(0, 0.01, 32)
    model = noise_from_capture_reports(a, make_report(np.abs(base + wobble), DOMAINS,  # a KL is >= 0
                                                      suite_hash=PUBLISHED_SUITE_HASH, candidate_dir="/r/a2"),
                                       where1="a", where2="a2", allow_different_models=True)
    tied = build_leaderboard([a, b], samples=500, noise=model).rows[1]
    assert tied.tied_with_best and tied.outcome_vs_best == "within_noise" and tied.mark == "tied"
    with pytest.raises(BadInput, match="different suites"):
        build_leaderboard([a, make_report(base, DOMAINS)], paths=["a.json", "c.json"])


def test_duplicate_candidate_names_are_told_apart(tmp_path):
    base = _kl(13)
    pa = write_report(tmp_path / "first.json", make_report(base, DOMAINS, candidate_dir="/x/cand"))
    pb = write_report(tmp_path / "second.json", make_report(base * 2, DOMAINS, candidate_dir="/y/cand"))
    from kldtui.decide.leaderboard import leaderboard_from_files

    board = leaderboard_from_files([pa, pb], samples=200)
    assert [r.name for r in board.rows] == ["cand (first)", "cand (second)"]


def test_reports_with_the_same_file_name_are_told_apart_by_folder():
    from kldtui.formats.report_names import unique_names

    paths = ["/runs/q4/comparison.json", "/runs/q8/comparison.json", "/old/q4/comparison.json"]
    assert unique_names(["candidate"] * 3, paths) == [
        "candidate (runs/q4)", "candidate (runs/q8)", "candidate (old/q4)"]
    assert unique_names(["a", "b"], paths[:2]) == ["a", "b"]
    assert unique_names(["c", "c"], [None, None]) == ["c #1", "c #2"]


def test_single_report_board_and_bad_bootstrap_settings():
    board = build_leaderboard([make_report(_kl(14), DOMAINS)], samples=100)
    assert len(board.rows) == 1 and board.rows[0].is_best and board.rows[0].ci_low < board.rows[0].mean
    with pytest.raises(BadInput, match="--bootstrap-samples must be at least 2"):
        build_leaderboard([make_report(_kl(14), DOMAINS)], samples=1)
    with pytest.raises(BadInput, match="--seed must be a non-negative integer"):
        paired_diff(make_report(_kl(14), DOMAINS), make_report(_kl(15), DOMAINS), seed=-1)
    with pytest.raises(BadInput, match="no reports to rank"):
        build_leaderboard([])


def test_diff_and_leaderboard_on_real_compare_reports(tmp_path):
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.formats.report import write_report as save_report
    from kldtui.stages.compare import CompareOptions, compare
    from tests.fixtures_compare import make_suite, perturb

    suite, ref, close, data = make_suite(tmp_path / "s", windows=8, context=17, vocab=300, seed=4,
                                         candidate=lambda rng, x: perturb(rng, x, 0.02, 0.05))
    rng = np.random.default_rng(5)
    far = tmp_path / "s" / "far"
    written = [write_logits_array(far, suite.window(w), perturb(rng, x, 0.3, 0.5), 17)
               for w, (x, _, _) in data.items()]
    write_logits_manifest(far, suite, written, kind="candidate")
    opts = CompareOptions(bootstrap_samples=2000)
    pa = save_report(tmp_path / "close.json", compare(suite.path, ref, close, opts))
    pb = save_report(tmp_path / "far.json", compare(suite.path, ref, far, opts))
    from kldtui.decide.paired import paired_diff_files

    res = paired_diff_files(pa, pb, samples=2000)
    assert "suite_token_hash_sha256" in res.pairing_checked
    assert "reference_identity_sha256" in res.pairing_checked
    assert res.overall.outcome == "a_closer" and res.verdict.startswith("far is worse than s by")
    report_ci = json.loads(pa.read_text())["kl_window_cluster_bootstrap"]
    assert res.overall.mean_a == pytest.approx(report_ci["estimate"])
    from kldtui.decide.leaderboard import leaderboard_from_files

    board = leaderboard_from_files([pb, pa], samples=2000)
    assert [r.name for r in board.rows] == ["s", "far"]  # a run folder's candidate/ is named by its folder
    headline = json.loads(pa.read_text())["kl_mean_interval"]
    assert board.rows[0].ci_low == pytest.approx(headline["ci95_low"], rel=1e-12)
    assert board.rows[0].ci_high == pytest.approx(headline["ci95_high"], rel=1e-12)
    assert board.rows[0].percentile_ci == pytest.approx((report_ci["ci95_low"], report_ci["ci95_high"]))
    assert not board.rows[1].tied_with_best


def test_one_interval_per_report_in_every_view(tmp_path):
    """The demo's report was written with 2000 resamples; the leaderboard (default 10000) used to
    recompute and show [0.02775, 0.02873] where the viewer showed [0.02775, 0.02871]. Every view now
    shows the report's one headline interval (kldtui.formats.report_names.kl_headline_interval: closed
    form, so a report without the field gets the same figures everywhere); the original comparator's
    percentile bootstrap stays in the report and beside it in the leaderboard's JSON."""
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.formats.report_model import as_report
    from kldtui.formats.report_names import kl_headline_interval, report_interval
    from kldtui.metrics.stats import window_cluster_bootstrap
    from kldtui.tui.resultdata import result_from_report

    kl = _kl(30)
    report = make_report(kl, DOMAINS, candidate_dir="/r/demo")
    report["kl_window_cluster_bootstrap"] = window_cluster_bootstrap(kl, samples=2000, seed=1)
    other = make_report(kl * 1.2, DOMAINS, candidate_dir="/r/other")
    other["kl_window_cluster_bootstrap"] = window_cluster_bootstrap(kl * 1.2, samples=2000, seed=1)
    pa, pb = write_report(tmp_path / "demo.json", report), write_report(tmp_path / "other.json", other)
    head = kl_headline_interval(as_report(report))
    assert head.method == "hall-t" and head.windows == 32 and not head.rests_on_too_few_windows
    board = leaderboard_from_files([pa, pb])  # 10000 resamples by default for its paired figures
    row = next(r for r in board.rows if r.name == "demo")
    assert (row.ci_low, row.ci_high) == (head.ci95_low, head.ci95_high)
    own = report_interval(as_report(report))
    assert row.mean == own.estimate and row.percentile_ci == (own.ci95_low, own.ci95_high)
    viewer = result_from_report(report, pa).kl
    assert (viewer.low, viewer.high) == (head.ci95_low, head.ci95_high)


def test_diff_of_real_reports_names_masked_positions(tmp_path, capsys):
    """End to end with the compare stage: a candidate that gives probability 0 to tokens the reference
    predicts (window 1) is named in the diff verdict, with the count and the window."""
    from kldtui.cli.main import main
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.stages.compare import CompareOptions, compare
    from tests.fixtures_compare import make_suite, perturb

    suite, ref, plain, data = make_suite(tmp_path / "s", windows=8, context=17, vocab=200, seed=6,
                                         candidate=lambda rng, x: perturb(rng, x, 0.05, 0.1))
    rng = np.random.default_rng(7)
    masked = tmp_path / "s" / "masked"
    written = []
    for w, (x, _, _) in data.items():
        y = perturb(rng, x, 0.05, 0.1)
        if w == 1:
            y[3, 10] = -np.inf
            y[4, :5] = -np.inf
        written.append(write_logits_array(masked, suite.window(w), y, 17))
    write_logits_manifest(masked, suite, written, kind="candidate")
    opts = CompareOptions(bootstrap_samples=200)
    pa = write_report(tmp_path / "plain.json", compare(suite.path, ref, plain, opts).to_json())
    pb = write_report(tmp_path / "masked.json", compare(suite.path, ref, masked, opts).to_json())
    assert main(["diff", str(pa), str(pb), "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "masked gives probability 0 to a token the reference predicts at 2 positions (window 1)" in out
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["overall"]["infinite_kl_rows_b"] == 2 and doc["per_window"]["infinite_kl_rows_b"][1] == 2


def test_one_window_reports_give_no_noise_model_that_measures_nothing(tmp_path):
    """Earlier versions printed "not measured" for one-window reports but wrote a measured model with
    threshold 0, after which diff dropped its "provisional" mark everywhere."""
    one = [make_report([0.01], ["prose"], candidate_dir=f"/r/c{i}") for i in (1, 2)]
    one[1]["per_window_arrays"]["kl_mean"] = [0.011]
    with pytest.raises(BadInput, match="one window only: the repeat variation of the metric needs at "
                                       "least 2"):
        noise_from_capture_reports(*one, where1="c1.json", where2="c2.json", allow_different_models=True)
    # such a file written by an earlier version is refused when read
    old = {"format": "kldtui-noise-floor-v1", "kind": "measured", "source": "c1.json and c2.json",
           "kl_mean": 0.0, "threshold": 0.0, "per_window": [],
           "metric_repeat": {"per_window": [{"window_index": 0, "difference": 0.001}]}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(BadInput, match="measures nothing"):
        load_floor(path)
    # and a model without a threshold never makes a named difference final
    base = _kl(40)
    floor = floor_from_reports(make_report(np.zeros(32), DOMAINS), None, source="identical captures")
    res = paired_diff(make_report(base, DOMAINS, candidate_dir="/r/a"),
                      make_report(base * 1.5, DOMAINS, candidate_dir="/r/b"), samples=100, noise=floor)
    assert res.overall.outcome == "a_closer" and res.overall.provisional


def test_captures_whose_folders_cannot_be_read_are_not_accepted_as_a_repeat(tmp_path):
    """Two different candidates were accepted as a repeat when their capture folders could not be read:
    the same-model check needs their manifests."""
    base = _kl(41)
    first = make_report(base, DOMAINS, candidate_dir=str(tmp_path / "gone-q4"))
    second = make_report(base * 1.7, DOMAINS, candidate_dir=str(tmp_path / "gone-q2"))
    with pytest.raises(BadInput, match="cannot check that they are captures of one model: the capture folder "
                                       ".*gone-q4 has no readable manifest.json"):
        noise_from_capture_reports(first, second, where1="q4.json", where2="q2.json")
    model = noise_from_capture_reports(first, second, where1="q4.json", where2="q2.json",
                                       allow_different_models=True)
    assert model.repeat is not None and model.repeat.captures == 2
    assert "cannot tell an offset shared by every window" in (model.provisional_reason() or "")


def test_repeat_model_from_three_captures_separates_capture_wide_and_per_window_variation():
    rng = np.random.default_rng(42)
    true = _kl(42)
    offsets = np.array([0.0, 0.03, -0.02])
    kl = np.stack([true * (1 + o + rng.normal(0, 0.002, 32)) for o in offsets])
    from kldtui.decide.noise import RepeatModel

    model = RepeatModel.from_captures(kl, range(32), ["c0", "c1", "c2"])
    assert model.capture_wide_measured and model.captures == 3
    sd_means = float(np.std(kl.mean(axis=1), ddof=1))
    assert model.capture_wide_sd == pytest.approx(math.sqrt(sd_means ** 2 - model.per_window_var / 32))
    assert model.per_window_sd < model.capture_wide_sd  # the offsets dominate here
    v = model.variation_for(range(32))
    assert v == pytest.approx(t_quantile(0.975, 2) * math.sqrt(2) * sd_means)
    back = RepeatModel.from_dict(model.to_dict(), "noise.json")
    assert back.variation_for(range(32)) == pytest.approx(v) and back.captures == 3
    two = RepeatModel.from_captures(kl[:2], range(32), ["c0", "c1"])
    assert not two.capture_wide_measured and two.capture_wide_sd is None
    assert "not measured with one repeat" in two.describe()
    # the one-line forms the views show above a ranking: what a difference must clear
    from kldtui.decide.noise import published_floor
    from kldtui.decide.verdict import noise_brief, plain_number

    assert model.brief() == f"3 captures of one candidate; B - A must clear {plain_number(v)}"
    assert two.brief() == ("2 captures (one repeat); B - A must clear "
                           f"{plain_number(two.variation_for([]))}")
    assert noise_brief(published_floor()) == "the published repeat KL 0.004 of the Kimi K3 suite"
    assert noise_brief(None).startswith("none: window-to-window variation only")


def test_the_confirm_command_names_the_captures_a_noise_model_already_has() -> None:
    assert confirm_command("q8", "runs/q8.json") == (
        "capture q8 again, compare it with the reference (AGAIN.json), then run "
        "`kldtui noise runs/q8.json AGAIN.json --output noise.json` and diff again with --noise noise.json")
    base = _kl(8)
    caps = [make_report(base * f, DOMAINS, candidate_dir=f"/r/c{i}") for i, f in enumerate((1.0, 1.01))]
    two = noise_from_capture_reports(caps[0], caps[1], where1="runs/q8.json", where2="runs/again dir/q8.json",
                                     allow_different_models=True)
    said = confirm_command("q8", "./runs/q8.json", two)
    assert said.startswith("capture q8 once more")  # the better one is the model the captures are of
    assert "`kldtui noise runs/q8.json 'runs/again dir/q8.json' AGAIN.json --output noise.json`" in said


def test_a_figure_no_window_moves_has_no_negative_zero() -> None:
    """Equal per-window figures: the difference and its interval read 0, never "-0" ([+0, -0] was
    printed for a confident-flip rate of 0 on both sides)."""
    from kldtui.decide.paired import figure_differences
    from kldtui.formats.report_model import as_report

    kl = _kl(8)
    a = as_report(make_report(kl, DOMAINS, candidate_dir="/r/a", fmt="original"))  # per-window JS
    b = as_report(make_report(kl, DOMAINS, candidate_dir="/r/b", fmt="original"))
    js = next(f for f in figure_differences(a, b) if f.name == "js_mean")
    assert (js.difference, js.ci95_low, js.ci95_high) == (0.0, 0.0, 0.0)
    shown = signed_table_figure  # as kldtui diff prints them
    assert f"{shown(js.difference)} [{shown(js.ci95_low)}, {shown(js.ci95_high)}]" == "+0 [+0, +0]"


@pytest.mark.parametrize(("edit", "words"), [
    (lambda m: (m["kl_mean"].append(list(m["kl_mean"][0])), m.update(captures=3)),
     "names 2 capture reports for 3 rows"),
    (lambda m: (m["kl_mean"].append(list(m["kl_mean"][0])), m["sources"].append("c2"), m.update(captures=3)),
     "rows 1 and 3 of kl_mean are identical: one capture counted twice"),
    (lambda m: m.update(captures=3), "says captures 3 but kl_mean holds 2"),
    (lambda m: m.update(windows=31), "says windows 31 but kl_mean holds 32"),
    (lambda m: m.update(sources=["c0", "c0"]), "names one capture report twice"),
    (lambda m: m.update(sources="c0"), "sources is not a list of report names"),
])
def test_a_stored_repeat_model_that_its_rows_do_not_give_is_refused(edit: Any, words: str) -> None:
    # a model edited to look measured from more captures (a row copied, a count raised) must not drop
    # diff's "provisional" mark: what the file says beside the rows must be what the rows give
    from kldtui.decide.noise import RepeatModel

    rng = np.random.default_rng(5)
    true = _kl(5)
    kl = np.stack([true * (1 + rng.normal(0, 0.002, 32)) for _ in range(2)])
    doc = RepeatModel.from_captures(kl, range(32), ["c0", "c1"]).to_dict()
    assert RepeatModel.from_dict(doc, "noise.json").captures == 2
    edit(doc)
    with pytest.raises(BadInput) as err:
        RepeatModel.from_dict(doc, "noise.json")
    text = str(err.value)
    assert text.startswith("noise.json: repeat_model ") and words in text, text
    assert text.endswith("; write the file again with kldtui noise") and "\n" not in text


@pytest.mark.parametrize("edit", [
    lambda d: d.update(threshold=0.5),
    lambda d: d.update(per_window=[{"window_index": 0, "kl_mean": 0.5}]),
    lambda d: d.update(metric_repeat={"per_window": [{"window_index": w, "difference": 0.01 * w}
                                                     for w in range(4)]}),
])
def test_a_deterministic_noise_model_holding_figures_is_refused(tmp_path: Path, edit: Any) -> None:
    """A deterministic server's model measures nothing, so it never makes a verdict final; one edited to
    hold a threshold (or repeat rows) would, on the word of a file that says nothing moves."""
    from kldtui.decide.noise import deterministic_floor, load_floor, save_floor

    path = tmp_path / "noise.json"
    save_floor(path, deterministic_floor(["a.json", "b.json"], ["/r/a", "/r/b"], suite_token_hash_sha256=None,
                                         reference_dir=None))
    assert load_floor(path).kind == "deterministic"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as err:
        load_floor(path)
    assert str(err.value) == (f"{path}: a noise model of kind 'deterministic' holds measured figures (a "
                              "threshold above 0, repeat rows or per-window repeat KL), which that kind "
                              "never has; write the file again with kldtui noise")


def _quants(k: int, n: int, seed: int = 3) -> list[dict[str, Any]]:
    """k candidates over n windows, each twice as far from the reference as the one before."""
    rng = np.random.default_rng(seed)
    base = _kl(seed)[:n] if n <= 32 else rng.lognormal(-5, 0.5, n)
    return [make_report(base * 2.0 ** i * rng.lognormal(0, 0.05, n), candidate_dir=f"/runs/q{i:02d}")
            for i in range(k)]


def test_a_leaderboard_of_more_candidates_than_its_windows_can_tell_apart_gives_no_verdict() -> None:
    # 12 candidates over 8 windows: Holm over 66 pairs needs p <= 0.00076, and the sign-flip test over 8
    # windows never goes below 2/256: no row can be shown worse, so none may read "tied with the best"
    from kldtui.decide.leaderboard import build_leaderboard
    from kldtui.decide.verdict import family_resolvable, family_size_for, family_windows

    assert (family_size_for(8), family_windows(66), family_resolvable(8, 6), family_resolvable(8, 10)) == (
        4, 12, True, False)
    board = build_leaderboard(_quants(12, 8), noise=None)
    assert [r.mark for r in board.rows] == ["no verdict"] * 12
    assert all(r.outcome_vs_best == "too_few_windows" and not r.tied_with_best for r in board.rows[1:])
    last = board.rows[-1]
    assert last.verdict_vs_best.startswith(
        f"too few windows (8) to tell 12 candidates apart: {last.name} - q00 = "), last.verdict_vs_best
    note = [n for n in board.notes if n.startswith("too few windows (8) to tell 12 candidates apart")]
    assert note == ["too few windows (8) to tell 12 candidates apart: over all 66 pairs (Holm) a difference "
                    "must reach p <= 0.000758, and the sign-flip test over 8 windows gives p >= 0.00781; the "
                    "rows are in order of mean KL only, none is marked best, worse or tied (12 windows would "
                    "do, or rank at most 4 candidates at a time)"], board.notes
    # what the note says would do, does: over 12 windows the farthest ones are shown worse
    board = build_leaderboard(_quants(12, 12), noise=None)
    assert board.rows[0].mark == "best" and board.rows[-1].mark == "worse"
    # and 4 candidates over the same 8 windows get verdicts as before
    board = build_leaderboard(_quants(4, 8), noise=None)
    assert [r.mark for r in board.rows] == ["best", "worse", "worse", "worse"]


def test_a_leaderboard_of_sixteen_candidates_can_name_differences() -> None:
    # 120 pairs: Holm's strictest threshold 0.00042 is below 2 / 4096, the smallest p-value of the test's
    # 4096 drawn patterns: every row read "tied" however far apart. The family draws enough patterns.
    from kldtui.decide.leaderboard import build_leaderboard
    from kldtui.decide.verdict import family_flips

    assert family_flips(6) == 4096 and family_flips(120) == 32768
    board = build_leaderboard(_quants(16, 16), noise=None)
    assert board.rows[-1].mark == "worse" and board.rows[1].mark == "worse", [r.mark for r in board.rows]


def test_two_score_mode_captures_are_told_from_a_copy_by_their_own_manifest(tmp_path: Path) -> None:
    """Score mode's finalized folder has scores-manifest.json, not manifest.json: the identical-captures
    rule and the same-model check read it (they found no manifest, so a deterministic server's two
    score-mode captures, which the campaign ranked with a deterministic model, were refused)."""
    import shutil

    from kldtui.decide.noise import different_models, one_capture

    for name, start in (("a", "2026-12-03T10:00:00Z 00000000000000aa"), ("b", "2026-12-03T10:09:00Z bb")):
        (tmp_path / name).mkdir()
        runtime = {"launcher": "kldtui", "model": "m", "server_start": start}
        (tmp_path / name / "scores-manifest.json").write_text(json.dumps({"kind": "candidate-scores",
                                                                          "runtime": runtime}))
    shutil.copytree(tmp_path / "b", tmp_path / "c")
    a, b, c = (str(tmp_path / n) for n in "abc")
    assert one_capture(a, b) is None and different_models(a, b) is None
    assert one_capture(b, c) == "both record the same server start, so one folder is a copy of the other"


def test_a_small_measured_noise_floor_reads_in_a_sentences_digits() -> None:
    """The noise model's line and its brief said a q8's repeat KL in four digits (``.4g``); a sentence
    says three (kldtui.text.plain_number), as the verdicts do."""
    from kldtui.decide.noise import NoiseFloor

    floor = NoiseFloor(kind="measured", source="report r.json", kl_mean=0.0001844, threshold=0.0001844)
    assert floor.brief() == "repeat KL 0.000184 between two captures of one model"
    assert floor.describe().startswith("repeat KL 0.000184 between two captures of one model (measured: ")
