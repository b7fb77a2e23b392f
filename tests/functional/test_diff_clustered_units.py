"""``kldtui diff`` of two hidden-state reports: its verdict counts source clusters (docs/STATISTICS.md,
"Clustered suites"), and so does everything said with it: the interval it prints, the windows needed
where it leaves a difference unresolved, the command that confirms a provisional one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats import fidelity as fid
from kldtui.formats.report import write_report
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from tests import fidelity_fixture as fx
from tests.fixtures_hidden import noisy_candidates, with_context_kl

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A report of one candidate over a 32-context suite (17 source clusters: 16 hosts of two contexts, one
    split by its dataset), as JSON, to set each context's KL in."""
    base = tmp_path_factory.mktemp("clustered-diff")
    f = fx.build(base / "suite", contexts=32)
    (folder,) = noisy_candidates(f, base, {"a": 0.03}).values()
    report = compare(f.root, f.root / fid.HIDDEN_DIR, folder, CompareOptions(backend=NUMPY,
                                                                             bootstrap_samples=100))
    doc: dict = json.loads(write_report(base / "measured.json", report).read_text())
    return doc


def cluster_of(doc: dict) -> np.ndarray:
    """Each context's source cluster (context order) as its number among the sorted keys: the order of
    the units a clustered verdict runs over."""
    keys = [e["source_cluster"] for e in sorted(doc["per_context"], key=lambda e: e["context_index"])]
    number = {k: n for n, k in enumerate(sorted(set(keys)))}
    return np.array([number[k] for k in keys])


def write_pair(doc: dict, kl_a: np.ndarray, kl_b: np.ndarray, where: Path) -> list[str]:
    """Reports ``A`` and ``B`` of ``doc``'s contexts with these per-context KL, as kldtui diff takes them."""
    paths = []
    for name, kl in (("A", kl_a), ("B", kl_b)):
        path = where / f"{name}.json"
        path.write_text(json.dumps(with_context_kl(doc, kl, name)))
        paths.append(str(path))
    return paths


def test_a_difference_named_over_source_clusters_is_printed_with_an_interval_that_excludes_zero(
        measured: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """17 source clusters, B about 1 % worse, p 0.0488: the verdict named the difference and printed a
    95 % interval from -0.000000159 to 0.000169 beside it. Beyond 12 units the sign-flip test draws random
    patterns, not closed under a change of sign; the p-value (the one-sided count, doubled) and the
    interval (inverting the two-sided test of |sum| over the same patterns) were two different tests. The
    interval now inverts the test the verdict runs, and excludes zero where it names a difference."""
    rng = np.random.default_rng(67)
    units_a = np.round(rng.lognormal(np.log(0.01), 0.3, 17), 6)
    units_b = np.round(units_a * (1 + rng.normal(0.01, 0.02, 17)), 6)
    of = cluster_of(measured)
    paths = write_pair(measured, units_a[of], units_b[of], tmp_path)
    out_json = tmp_path / "diff.json"
    assert main(["diff", *paths, "--no-noise-floor", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    clustered = json.loads(out_json.read_text())["clustered"]
    iv = clustered["verdict_interval"]
    assert (clustered["source_clusters"], iv["windows"], iv["unit"]) == (17, 17, "source cluster")
    assert iv["difficulty_dependence"]["interval_source"] == "sign_flip"
    assert 0.048 < iv["p_value"] < 0.049, iv["p_value"]
    assert clustered["outcome"] == "a_closer"
    assert 0.0 < iv["ci95_low"] < iv["estimate"] < iv["ci95_high"], iv
    # the paired receipt's bootstrap beside it is another figure's interval, and says so
    receipt = clustered["paired_context_difference"]["bootstrap"]
    assert receipt["method"].endswith("not the verdict's interval (verdict_interval)"), receipt
    verdict = next(x for x in out.splitlines() if x.startswith("verdict: "))
    said = re.search(r"B is worse than A by \S+ KL \(\d+ % of A's mean KL\), 95 % interval (\S+) to (\S+) ",
                     verdict)
    assert said is not None and 0.0 < float(said[1]) < float(said[2]), verdict
    # the partition stays with the count, not after the confirm command
    assert "over 17 source clusters (mixed partition);" in verdict, verdict
    assert not verdict.endswith("(mixed partition)"), verdict
    line = next(x for x in out.splitlines() if x.startswith("clustered by source"))
    ends = re.search(r"B - A \S+ \[(\S+), (\S+)\] \(95 %, the verdict's rule over source clusters\)", line)
    assert ends is not None and 0.0 < float(ends[1]) < float(ends[2]), line


def test_the_confirming_command_names_the_candidate_the_clustered_verdict_names_the_closer(
        measured: dict, tmp_path: Path) -> None:
    """One source of eight contexts where B is much closer, 24 sources of one context each where it is a
    little further: counted by context B is closer on average, counted by source cluster (the verdict) A
    is, and the verdict names B worse. Its provisional verdict's command to confirm it captured B again
    (the contexts' mean decided who was better); it captures A again, as the leaderboard's verdict on the
    same pair says."""
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.decide.paired import paired_diff_files

    doc = json.loads(json.dumps(measured))
    for e in doc["per_context"]:
        i = e["context_index"]
        host = "big" if i < 8 else f"solo-{i:02d}"
        e["source_cluster"] = f'["wikimedia/wikipedia","{host}"]'
    contexts = len(doc["per_context"])
    kl_a = 0.01 * np.exp(np.random.default_rng(5).normal(0.0, 0.1, contexts))
    kl_b = kl_a * np.where(np.arange(contexts) < 8, 0.7, 1.05)
    paths = write_pair(doc, kl_a, kl_b, tmp_path)
    diff = paired_diff_files(*paths, use_noise_floor=False)
    clustered = diff.clustered
    assert clustered is not None and clustered.clusters == 25
    assert diff.overall.interval.estimate < 0 < clustered.interval.estimate  # contexts: B; clusters: A
    assert clustered.outcome == "a_closer" and clustered.provisional, clustered.verdict
    assert clustered.verdict.startswith("B is worse than A by "), clustered.verdict
    confirm = clustered.verdict[clustered.verdict.index("; confirm: "):]
    assert confirm.startswith("; confirm: capture A again, compare it with the reference (AGAIN.json), then "
                              f"run `kldtui noise {paths[0]} AGAIN.json --output noise.json`"), confirm
    board = leaderboard_from_files(paths, use_noise_floor=False)
    assert [r.name for r in board.rows] == ["B", "A"]  # ranked by the contexts' mean KL
    row = board.rows[1].verdict_vs_best
    assert row.startswith("A is better than B by ") and confirm in row, row


# each source cluster's B / A - 1 for a candidate a little worse than A, in sorted key order: mostly worse,
# sometimes better (tests/functional/test_leaderboard_clustered.py's)
CLOSE = np.array([0.03, -0.02] * 6 + [0.03] * 4 + [-0.02])


def test_the_windows_needed_line_counts_source_clusters_where_the_verdict_does(
        measured: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two contexts of each source nearly alike, B 1.2 % worse: counted as 32 independent contexts B is
    worse (p 0.005, and Holm over the strata holds it), counted by source (the verdict) no difference is
    shown (p 0.09). kldtui diff printed no windows needed (the contexts'
    verdict had named the difference) below a verdict that leaves it unresolved; it says how many source
    clusters would resolve it, the leaderboard's count for the same pair, and --json says the unit."""
    from kldtui.decide.leaderboard import leaderboard_from_files

    of = cluster_of(measured)
    contexts = sorted(measured["per_context"], key=lambda e: e["context_index"])
    kl = np.array([e["kl_reference_to_candidate"]["mean"] for e in contexts])
    units = np.bincount(of, weights=kl) / np.bincount(of)
    kl_a = units[of] * np.where(np.arange(len(of)) % 2 == 0, 1.0005, 0.9995)  # near duplicates
    paths = write_pair(measured, kl_a, kl_a * (1.002 + CLOSE[of]), tmp_path)
    out_json = tmp_path / "diff.json"
    assert main(["diff", *paths, "--no-noise-floor", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert doc["overall"]["outcome"] == "a_closer"  # the contexts as independent
    assert doc["clustered"]["outcome"] == "indistinguishable", doc["clustered"]["verdict"]
    need = next((x for x in out.splitlines() if " needed: " in x), None)
    assert need is not None and need.startswith("source clusters needed: about "), out
    assert "source clusters (" in need and "more than the 17 compared) would resolve this difference" in need
    assert "context" not in need, need
    needed = doc["windows_needed"]
    assert (needed["measured_windows"], needed["unit"]) == (17, "source cluster")
    board_json = tmp_path / "board.json"
    assert main(["leaderboard", *paths, "--no-noise-floor", "--plain", "--json", str(board_json)]) == 0
    board = capsys.readouterr().out
    said = next(x for x in board.splitlines() if x.startswith("source clusters needed: B vs A: "))
    words = need.removeprefix("source clusters needed: ")
    assert said.removeprefix("source clusters needed: B vs A: ") == words, (said, need)
    assert json.loads(board_json.read_text())["windows_needed"]["B"] == needed
    assert leaderboard_from_files(paths, use_noise_floor=False).rows[1].outcome_vs_best == "indistinguishable"


def test_no_windows_needed_line_where_the_clustered_verdict_names_the_difference(
        measured: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each source's two contexts far apart in opposite directions, their mean about 2 % worse in each source:
    counted as independent contexts no difference is shown, counted by source (the verdict) B is worse.
    kldtui diff printed "contexts needed: about N contexts would resolve this difference" under a verdict
    that had resolved it; it prints none."""
    of = cluster_of(measured)
    n = len(of)
    rng = np.random.default_rng(4)
    kl_a = 0.01 * np.exp(rng.normal(0.0, 0.3, of.max() + 1))[of]
    ratio = (1.02 * np.exp(rng.normal(0.0, 0.01, of.max() + 1)))[of]
    first = np.array([np.flatnonzero(of == c)[0] for c in of]) == np.arange(n)
    alone = np.bincount(of)[of] == 1
    swing = np.where(alone, 0.0, np.where(first, 0.3, -0.3))
    paths = write_pair(measured, kl_a, kl_a * (ratio + swing), tmp_path)
    out_json = tmp_path / "diff.json"
    assert main(["diff", *paths, "--no-noise-floor", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert doc["overall"]["outcome"] in ("indistinguishable", "cannot_calibrate"), doc["overall"]["verdict"]
    assert doc["clustered"]["outcome"] == "a_closer", doc["clustered"]["verdict"]
    assert " needed: " not in out, out
    assert doc["windows_needed"] is None


def _one_context_at(doc: dict, kl: float, lists: tuple[str, ...] = ("per_context", "per_window")) -> dict:
    """``doc`` with context 0's KL raised to ``kl`` in ``lists`` (its per_context figures; its per_window
    entry and window table row): one wild context among ordinary ones."""
    out = json.loads(json.dumps(doc))
    if "per_context" in lists:
        entry = next(e for e in out["per_context"] if e["context_index"] == 0)
        entry["kl_reference_to_candidate"].update(mean=kl, max=kl)
    if "per_window" not in lists:
        return out
    window = next(w for w in out["per_window"] if w["window_index"] == 0)
    window["kl_reference_to_candidate"].update(mean=kl, max=kl)
    window.update(kl_mean=kl, kl_max=kl)
    table = out["per_window_arrays"]
    row = table["window_index"].index(0)
    table["kl_mean"][row] = table["kl_max"][row] = kl
    return out


@pytest.mark.parametrize("command", ["diff", "leaderboard"])
@pytest.mark.parametrize("entry", ["per_context", "per_window"])
def test_a_kl_above_what_float32_logits_give_is_refused_on_load(
        measured: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, entry: str) -> None:
    """A context's mean KL of 1e300 (finite, and more than twice the largest float32, which no row of
    float32 logits gives) passed load, and diff then said "no interval: the verdict's rule needs at
    least 8 source clusters" of 17: the interval overflowed. It is refused on load, one line naming the
    file and the entry (exit 2)."""
    of = cluster_of(measured)
    kl = 0.01 * np.exp(np.random.default_rng(1).normal(0.0, 0.3, of.max() + 1))[of]
    paths = write_pair(measured, kl, kl * 1.1, tmp_path)
    Path(paths[1]).write_text(json.dumps(_one_context_at(json.loads(Path(paths[1]).read_text()), 1e300,
                                                         (entry,))))
    assert main([command, *paths, "--no-noise-floor"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and err.startswith(f"kldtui: error: {paths[1]}: {entry}["), err
    assert "].kl_reference_to_candidate.mean: 1e+300 is impossible" in err, err
    assert "at most 7e+38" in err, err
    assert "source clusters" not in captured.out + err


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the overflow is expected and said, never warned
def test_an_interval_whose_end_overflows_says_so_not_that_clusters_are_too_few(
        measured: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A context's mean KL of 6.8e38, which float32 logits can give (a candidate logit near -3.4e38):
    the log-normal model's far end over the 17 source clusters overflows to inf, and diff said "no
    interval: the verdict's rule needs at least 8 source clusters". It says what is so; the leaderboard
    marks the estimate as one."""
    of = cluster_of(measured)
    kl = 0.01 * np.exp(np.random.default_rng(1).normal(0.0, 0.3, of.max() + 1))[of]
    paths = write_pair(measured, kl, kl * 1.1, tmp_path)
    Path(paths[1]).write_text(json.dumps(_one_context_at(json.loads(Path(paths[1]).read_text()), 6.8e38)))
    assert main(["diff", *paths, "--no-noise-floor"]) == 0
    out = capsys.readouterr().out
    assert main(["leaderboard", *paths, "--no-noise-floor", "--plain"]) == 0
    board = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("clustered by source"))
    assert "in 17 source clusters" in line, line
    assert ("(no interval: the verdict's rule gives no finite upper end over these 17 source clusters)"
            in line), line
    verdict = next(x for x in out.splitlines() if x.startswith("verdict: "))
    # no difference named on an interval with no finite end: no verdict, not "no difference shown"
    assert verdict == ("verdict: no verdict: the verdict's rule gives no finite upper end over these 17 "
                       "source clusters (mixed partition), whose KL spans too many orders of magnitude to "
                       "bound it, so the rule shows neither a difference nor that there is none: B - A = "
                       "2e+37 KL is an estimate only"), verdict
    said = [x for x in (out + board).splitlines() if not x.startswith("tie: ")]  # the legend names them all
    assert not [x for x in said if "needs at least" in x or "too few" in x], said
    row = next(x for x in board.splitlines() if x.startswith("2  B "))
    assert "(estimate only)" in row and "[" not in row.split("|")[-1], row
    assert row.endswith("no verdict"), row  # it was "tied", on that interval
