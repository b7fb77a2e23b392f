"""kldtui diff over a hidden-state suite's contexts, clustered by source: the verdict's unit is the
source cluster, it names the partition used, reports of different partitions are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.decide.paired import paired_diff_files
from kldtui.errors import BadInput
from kldtui.formats import fidelity as fid
from kldtui.formats.report import write_report
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from kldtui.text import plain_number
from tests import fidelity_fixture as fx
from tests.fixtures_hidden import noisy_candidates

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[fx.Fixture, Path]:
    base = tmp_path_factory.mktemp("clustered")
    return fx.build(base / "suite", contexts=40), base


@pytest.fixture(scope="module")
def reports(suite: tuple[fx.Fixture, Path]) -> dict[str, Path]:
    f, base = suite
    out: dict[str, Path] = {}
    for name, folder in noisy_candidates(f, base, {"small": 0.03, "large": 0.09}).items():
        for part in ("analysis", "qualification"):
            report = compare(f.root, f.root / fid.HIDDEN_DIR, folder,
                             CompareOptions(context_filter=part, backend=NUMPY, bootstrap_samples=200))
            out[f"{name}-{part}"] = write_report(base / f"{name}-{part}.json", report)
        report = compare(f.root, f.root / fid.HIDDEN_DIR, folder,  # contexts 0..8: 5 source clusters
                         CompareOptions(context_filter="analysis", backend=NUMPY, bootstrap_samples=200,
                                        stop_window=9, reverse=True))  # reverse: KL(candidate || reference)
        out[f"{name}-few"] = write_report(base / f"{name}-few.json", report)
    return out


def test_verdict_over_source_clusters_names_the_partition(reports: dict[str, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    result = paired_diff_files(reports["small-analysis"], reports["large-analysis"], samples=300)
    c = result.clustered
    assert c is not None and c.partition == "analysis"
    doc = json.loads(reports["small-analysis"].read_text())
    assert c.contexts == doc["contexts"]
    assert c.clusters == len({e["source_cluster"] for e in doc["per_context"]}) < c.contexts
    assert c.interval.windows == c.clusters  # the verdict's unit is the cluster
    assert c.outcome == "b_closer" or c.outcome == "a_closer"
    assert "source clusters" in c.verdict and "(analysis partition)" in c.verdict
    assert result.verdict == c.verdict
    assert c.mean_difference > 0  # the larger perturbation is further from the reference
    assert c.bootstrap["cluster_unit"] == "source_cluster_within_stratum"
    code = main(["diff", str(reports["small-analysis"]), str(reports["large-analysis"]),
                 "--json", str(tmp_path / "d.json")])
    text = capsys.readouterr().out
    assert code == 0
    assert "clustered by source (analysis partition)" in text
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["clustered"]["verdict_interval"]["unit"] == "source cluster"
    assert saved["clustered"]["partition"] == "analysis"


def test_too_few_source_clusters_show_no_interval_and_do_not_claim_one(
        reports: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The clustered line said "B - A 0.0138 (95 %, the verdict's rule over source clusters)" with no
    interval when the clusters were too few for one."""
    assert main(["diff", str(reports["small-few"]), str(reports["large-few"])]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("clustered by source"))
    assert "in 5 source clusters" in line and "[" not in line
    assert "(no interval: the verdict's rule needs at least 8 source clusters)" in line
    assert "95 %" not in line


def test_reports_of_different_partitions_are_refused(reports: dict[str, Path]) -> None:
    with pytest.raises(BadInput, match="analysis partition and .* the qualification one"):
        paired_diff_files(reports["small-analysis"], reports["large-qualification"])


def test_views_of_too_few_contexts_name_them_contexts(reports: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A hidden-state suite's reports count contexts: the leaderboard's interval cells and notes, the
    viewer's result pane and the campaign's batch lines said "too few windows (6)" of them. (Its ties
    count source clusters: too few of them, the note says so in their words.)"""
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.events import LeaderboardUpdated, Standing
    from kldtui.formats.report import load_report
    from kldtui.tui.resultdata import result_from_report

    few = [reports["small-few"], reports["large-few"]]
    n = load_report(few[0]).windows
    assert n < 8  # below what an interval needs
    board = leaderboard_from_files(few)
    assert board.unit == "context" and board.tie_unit == "source cluster" and board.tie_units == 5
    assert (f"too few source clusters (5) for a verdict: the {n} contexts come from 5 sources, each counted "
            "once; the rows are in order of mean KL only") in board.notes[-1], board.notes
    assert not [note for note in board.notes if "window" in note], board.notes
    assert main(["leaderboard", *map(str, few)]) == 0
    out = capsys.readouterr().out
    cells = [line for line in out.splitlines() if line.startswith(("1 ", "2 "))]
    assert len(cells) == 2 and all(f"too few contexts ({n})" in line for line in cells), out
    result = result_from_report(load_report(few[0]), few[0])
    assert result.kl is not None and result.kl.interval_text() == f"too few contexts ({n})"
    assert result.kl.text().endswith(f"({n} contexts: too few for a 95 % interval, which needs 8)")
    text = io.StringIO()
    row = board.rows[0]
    with BatchReporter(text) as rep:
        rep(LeaderboardUpdated("campaign", rows=(Standing(row.name, "compared", rank=1, mean=row.mean,
                                                          ci_low=row.ci_low, ci_high=row.ci_high),),
                               windows=board.windows, unit=board.unit))
    said = text.getvalue()
    assert f"leaderboard so far ({n} contexts, KL(reference || candidate), lower is closer)" in said, said
    assert f"too few contexts ({n})" in said and "window" not in said, said


def test_verdict_column_of_too_few_contexts_names_them_contexts(reports: dict[str, Path]) -> None:
    """A campaign's standings and the exports said "too few contexts (6)" in the interval column and
    "no verdict (too few windows)" in the verdict column of one hidden-state row, and the exports'
    footer counted windows. The verdict column counts what the verdict counts: source clusters."""
    from kldtui.decide.exports import export_table, to_csv, to_llama_cpp, to_markdown
    from kldtui.decide.leaderboard import build_leaderboard
    from kldtui.events import Standing
    from kldtui.formats.report import load_report
    from kldtui.workflow.standings import table_lines

    few = [reports["small-few"], reports["large-few"]]
    loaded = [load_report(p) for p in few]
    n = loaded[0].windows
    board = build_leaderboard(loaded, paths=few, noise=None)
    second = board.rows[1]
    assert second.outcome_vs_best == "too_few_windows"
    standing = Standing(second.name, "compared", rank=2, mean=second.mean, ci_low=second.ci_low,
                        ci_high=second.ci_high, outcome=second.outcome_vs_best, mark=second.mark)
    line = table_lines([standing], board.windows, board.unit, board.tie_unit)[1]
    assert f"too few contexts ({n})" in line and "no verdict (too few source clusters)" in line, line
    table = export_table(board, loaded, paths=few)
    markdown, csv, llama = to_markdown(table), to_csv(table), to_llama_cpp(table)
    assert "no verdict (too few source clusters" in markdown and "no verdict (too few source clusters)" in csv
    assert "source clusters to resolve)" in markdown  # the source clusters that would resolve it
    assert "sign-flip test over the 5 source clusters of the" in markdown, markdown
    assert "each cluster the mean of its contexts' KL" in markdown, markdown
    assert f"mean over {n} contexts" in markdown and f"{n} contexts, " in llama
    assert "window" not in markdown + llama, markdown + llama


def test_paired_verdicts_over_contexts_name_them_contexts(reports: dict[str, Path]) -> None:
    """The leaderboard's verdict against the best, kldtui diff's per-context verdict (and the dashboard's
    diff, which shows it) and their noise model said "over 20 windows" and "window-to-window
    variation" of a hidden-state suite's contexts; the leaderboard's JSON said its cluster unit was the
    window. The leaderboard's verdict counts source clusters, as diff's clustered verdict does, in the
    same words."""
    from kldtui.decide.leaderboard import leaderboard_from_files

    pair = [reports["small-analysis"], reports["large-analysis"]]
    doc = json.loads(pair[0].read_text())
    n, k = doc["contexts"], len({e["source_cluster"] for e in doc["per_context"]})
    board = leaderboard_from_files(pair, use_noise_floor=False)
    said = board.rows[1].verdict_vs_best
    assert f"over {k} source clusters" in said and "(analysis partition)" in said, said
    assert "window" not in said, said
    assert board.noise_source.startswith("none: context-to-context variation only"), board.noise_source
    assert "window" not in board.noise_brief
    doc = board.to_dict()
    assert (doc["cluster_unit"], doc["unit"], doc["windows"], doc["tie_units"], doc["partition"]) == (
        "source_cluster", "context", n, k, "analysis"), doc
    result = paired_diff_files(*pair, samples=300, use_noise_floor=False)
    assert f"over {n} contexts" in result.overall.verdict and "window" not in result.overall.verdict
    assert result.to_dict()["cluster_unit"] == "context" and "window" not in result.noise_source


def test_leaderboard_footer_of_contexts_names_them_contexts(reports: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """kldtui leaderboard's footer said "7 windows; ... sign-flip test over windows", its tie legend
    "too few windows to tell", and "windows needed:" of a hidden-state suite's contexts; kldtui diff
    too. Its ties count the contexts' 5 source clusters: the footer, the legend and the count needed
    say so, and so does kldtui diff's count, whose verdict counts them too (it counted contexts)."""
    few = [str(reports["small-few"]), str(reports["large-few"])]
    n = json.loads(Path(few[0]).read_text())["contexts"]
    assert main(["leaderboard", *few, "--no-noise-floor", "--plain"]) == 0
    out = capsys.readouterr().out
    assert f"{n} contexts; mean KL intervals" in out, out
    ties = f"note: ties: sign-flip test over the 5 source clusters of the {n} contexts ("
    assert ties in out and out.count("sign-flip test") == 1, out
    assert "no verdict = too few source clusters, or no calibrated verdict" in out, out
    assert "source clusters needed: large vs small: about 8 source clusters (3 more than the 5" in out, out
    assert "window" not in out, out
    assert main(["diff", *few, "--no-noise-floor"]) == 0
    out = capsys.readouterr().out  # diff's verdict counts the source clusters too, and so does its count
    assert "source clusters needed: about 8 source clusters (3 more than the 5" in out, out
    assert "contexts needed" not in out and "windows needed" not in out, out
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.tui.screens.board import row_verdict

    board = leaderboard_from_files(few, use_noise_floor=False)  # the viewer's line under the best row
    said = row_verdict(board.rows[0], 2, board.tie_unit)
    assert "but 5 source clusters are too few to say it is best" in said, said


def test_charts_of_contexts_name_them_contexts(reports: dict[str, Path]) -> None:
    """kldtui plot's title and panels and the viewer's charts (key c) said "mean KL per window" and
    "7 windows" of a hidden-state suite's contexts."""
    pytest.importorskip("matplotlib")
    from kldtui.decide.exports import export_table
    from kldtui.decide.leaderboard import build_leaderboard
    from kldtui.decide.plots import chart_data, figure
    from kldtui.formats.report import load_report
    from kldtui.tui.widgets.board_charts import render_charts

    few = [reports["small-few"], reports["large-few"]]
    loaded = [load_report(p) for p in few]
    table = export_table(build_leaderboard(loaded, paths=few, noise=None), loaded, paths=few)
    fig = figure(table)
    words = [fig.get_suptitle()] + [t for ax in fig.axes for t in (ax.get_title(), ax.get_xlabel())]
    said = " | ".join(words)
    assert f"{loaded[0].windows} contexts" in said and "mean KL per context" in said, said
    assert "contexts resampled" in said and "window" not in said, said
    text = render_charts(chart_data(table), width=40).plain
    assert "mean KL per context" in text and "window" not in text, text


def test_intervals_of_contexts_name_their_cluster_unit_context(reports: dict[str, Path]) -> None:
    """kldtui diff --json's difference and ratio intervals (overall and per domain) and kldtui
    leaderboard --json's ratio_vs_best said ``cluster_unit: "window"`` of a hidden-state suite's
    contexts, under a top level that said "context". (The leaderboard's ratio pairs source clusters, as
    its ties do: its cluster unit is the top level's.)"""
    from kldtui.decide.leaderboard import leaderboard_from_files

    pair = [reports["small-analysis"], reports["large-analysis"]]
    doc = paired_diff_files(*pair, samples=300, use_noise_floor=False).to_dict()
    groups = [doc["overall"], *doc["domains"].values()]
    units = {g[key]["cluster_unit"] for g in groups for key in ("difference_b_minus_a", "ratio_b_over_a")}
    assert units == {"context"}, units
    board = leaderboard_from_files(pair, use_noise_floor=False).to_dict()
    rows = board["rows"]
    assert rows[1]["ratio_vs_best"]["cluster_unit"] == board["cluster_unit"] == "source_cluster", rows[1]
    assert rows[1]["diff_vs_best"]["unit"] == "source cluster", rows[1]


def test_diff_of_contexts_counts_contexts(reports: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """kldtui diff's header line ("7 windows; ... sign-flip test over windows"), its outcome table (a
    "windows" column, "too few windows"), its figures' and buckets' headings and its per-context
    listing said windows of a hidden-state suite's contexts."""
    few = [str(reports["small-few"]), str(reports["large-few"])]
    n = json.loads(Path(few[0]).read_text())["contexts"]
    assert main(["diff", *few, "--no-noise-floor", "--per-window"]) == 0
    out = capsys.readouterr().out
    assert f"; {n} contexts; 95 % intervals: sign-flip test over contexts" in out, out
    lines = out.splitlines()
    head = next(line for line in lines if "mean KL A" in line)
    overall = next(line for line in lines if line.startswith("all "))
    assert head.split()[0] == "contexts" and head.index("contexts") + len("contexts") == overall.index(
        f"{n}") + len(f"{n}"), out  # the count under its heading
    assert overall.endswith("too few contexts"), overall
    assert "per-context differences, 95 % interval over contexts" in out, out
    assert "KL by depth in the context (positions)" in out and "context-clustered 95 % interval" in out
    assert any(line.startswith("context  domain") for line in lines), out
    assert "window" not in out, out


def test_refusals_to_pair_contexts_name_contexts(reports: dict[str, Path]) -> None:
    """kldtui diff's refusals of two hidden-state reports that do not pair context for context said
    "cover different windows", "have different windows" and "window 3 is ..." of their contexts."""
    import dataclasses

    from kldtui.decide.reports import check_same_suite, window_values
    from kldtui.formats.report import load_report

    a, b = load_report(reports["small-few"]), load_report(reports["large-few"])
    with pytest.raises(BadInput) as refused:
        check_same_suite(a, dataclasses.replace(b, window_range=(0, 5)), "A.json", "B.json")
    said = str(refused.value)
    assert "cover different contexts (window_range" in said and "on the same contexts" in said, said
    va, vb = window_values(a, "A.json"), window_values(b, "B.json")
    w = int(va.window_index[1])
    changed = {
        "have different contexts (only in the first: [": dataclasses.replace(
            vb, window_index=vb.window_index[1:], domain=vb.domain[1:], positions=vb.positions[1:],
            kl_mean=vb.kl_mean[1:]),
        f": context {w} is {va.domain[1]!r} in one and 'other'": dataclasses.replace(
            vb, domain=(vb.domain[0], "other", *vb.domain[2:])),
        f": context {w} has {va.positions[1]} positions in one and 1 in the other": dataclasses.replace(
            vb, positions=np.array([vb.positions[0], 1, *vb.positions[2:]])),
    }
    for words, other in changed.items():
        with pytest.raises(BadInput) as refused:
            check_same_suite(a, b, "A.json", "B.json", va, other)
        assert words in str(refused.value) and "window " not in str(refused.value), str(refused.value)


def test_summary_of_too_few_contexts_names_them_contexts(reports: dict[str, Path]) -> None:
    """A hidden-state report's summary (kldtui view --plain, compare's last lines) said "(no interval:
    too few windows)" beside KL(candidate || reference) of its contexts."""
    from kldtui.formats.report import load_report, summary_text

    text = summary_text(load_report(reports["small-few"]))
    reverse = next(line for line in text.splitlines() if "KL(candidate || reference)" in line)
    assert reverse.endswith("(no interval: too few contexts)"), text
    assert "window" not in text, text


def test_viewer_help_of_contexts_names_them_contexts(reports: dict[str, Path], tmp_path: Path) -> None:
    """The viewer's help (?) said what the tie column's "no verdict" means as "too few windows to tell"
    of a leaderboard of a hidden-state suite's contexts; the dashboard's takes the same section. The
    tie column counts their source clusters, and says so."""
    from kldtui.tui.app import create_app
    from tests.fixtures_tui import help_text, settle, sync

    @sync
    async def check() -> None:
        app = create_app(reports=[reports["small-few"], reports["large-few"]], config_dir=tmp_path / "cfg")
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("question_mark")
            await pilot.pause()
            keys = " ".join(help_text(app).split())
            assert "no verdict too few source clusters, or no calibrated verdict with a finite interval on " \
                   "these source clusters" in keys, keys
            ties = keys[keys.index("The leaderboard's tie column"):]
            assert "window" not in ties, ties

    check()


def test_plan_from_two_reports_of_contexts_counts_source_clusters(reports: dict[str, Path],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """kldtui plan from two hidden-state reports counted contexts ("pilot: 12 contexts; ... KL per
    context"), while the verdicts it plans for (diff's, the leaderboard's) count source clusters: it
    plans over the clusters, with diff's own count (its "source clusters needed" line)."""
    from kldtui.decide.clustered import paired_contexts
    from kldtui.decide.windows_needed import for_reports
    from kldtui.formats.report import load_report

    few = [str(reports["small-few"]), str(reports["large-few"])]
    a, b = load_report(few[0]), load_report(few[1])
    paired = paired_contexts(a, b, "A", "B")
    assert paired is not None
    clusters = len(paired[0].units(paired[1]))
    contexts = json.loads(Path(few[0]).read_text())["contexts"]
    assert clusters < contexts  # contexts share sources: the two counts differ
    need = for_reports(a, b, None, by_source_cluster=True)
    assert main(["plan", *few, "--no-noise-floor", "--suite-windows", "40"]) in (0, 1)
    out = capsys.readouterr().out
    pilot, verdict = out.splitlines()[:2]
    assert pilot.startswith(f"pilot: {clusters} source clusters ({contexts} contexts); B - A = "
                            f"{plain_number(need.difference)} KL per source cluster, standard deviation "
                            f"between source clusters {plain_number(need.window_sd)}"), out
    assert verdict == need.words(suite_windows=40), out
    assert "source clusters" in verdict and "window" not in out, out


@pytest.fixture(scope="module")
def captures(suite: tuple[fx.Fixture, Path]) -> list[Path]:
    """Reports of three captures of one candidate (the same noise scale as "small", drawn again each time)
    against the hidden-state reference, over the analysis partition as the reports' "-analysis" are."""
    f, base = suite
    folders = noisy_candidates(f, base / "again", {f"capture{i}": 0.03 for i in (1, 2, 3)}, seed=12)
    return [write_report(base / f"{name}.json",
                         compare(f.root, f.root / fid.HIDDEN_DIR, folder,
                                 CompareOptions(context_filter="analysis", backend=NUMPY,
                                                bootstrap_samples=200)))
            for name, folder in folders.items()]


def test_noise_model_of_contexts_counts_contexts(reports: dict[str, Path], captures: list[Path],
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kldtui noise on a hidden-state suite's reports said "... over 12 windows (per-window sd ...); an
    offset shared by every window ...", and so did the "noise model:" line of diff and leaderboard with
    that model: the stored model does not record its unit, the reports it is read from and shown with
    do (contexts)."""
    n = json.loads(captures[0].read_text())["contexts"]
    two, three = tmp_path / "two.json", tmp_path / "three.json"
    assert main(["noise", *map(str, captures[:2]), "-o", str(two), "--allow-different-models"]) == 0
    out = capsys.readouterr().out
    assert f"from 2 captures of one candidate over {n} contexts (per-context sd " in out, out
    assert "an offset shared by every context of a capture is not measured" in out, out
    assert "window" not in out, out
    assert main(["noise", *map(str, captures), "-o", str(three), "--allow-different-models"]) == 0
    out = capsys.readouterr().out
    assert f"from 3 captures of one candidate over {n} contexts: " in out and "per-context sd " in out, out
    assert "window" not in out, out
    pair = [str(reports["small-analysis"]), str(reports["large-analysis"])]
    for command in (["diff", *pair, "--bootstrap-samples", "300"], ["leaderboard", *pair, "--plain"]):
        assert main([*command, "--noise", str(three)]) in (0, 1)
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if x.startswith("noise model:"))
        assert f"from 3 captures of one candidate over {n} contexts: " in line, line
        assert "per-context sd" in line and "window" not in line, line


def test_provisional_verdict_of_contexts_names_contexts(
        reports: dict[str, Path], captures: list[Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With a noise model of one repeat, diff's provisional verdicts on a hidden-state suite's reports
    said the model "cannot tell an offset shared by every window of a capture from a real difference"."""
    two = tmp_path / "two.json"
    assert main(["noise", *map(str, captures[:2]), "-o", str(two), "--allow-different-models"]) == 0
    capsys.readouterr()
    pair = [str(reports["small-analysis"]), str(reports["large-analysis"])]
    assert main(["diff", *pair, "--bootstrap-samples", "300", "--noise", str(two)]) == 0
    out = capsys.readouterr().out
    assert "cannot tell an offset shared by every context of a capture from a real difference" in out, out
    assert "window" not in out, out


def test_noise_refusals_of_contexts_name_contexts(suite: tuple[fx.Fixture, Path], reports: dict[str, Path],
                                                  captures: list[Path], tmp_path: Path) -> None:
    """kldtui noise's refusals of a hidden-state suite's reports said "one window only: ... at least 2
    windows; compare the captures over more windows", "have identical per-window KL" and "cover
    different windows" of their contexts. (A logits suite's still say windows:
    tests/unit/test_decide_reports.py, tests/functional/test_decide_cli.py.)"""
    from kldtui.decide.noise import floor_from_reports, noise_from_capture_reports
    from kldtui.formats.report import load_report

    f, base = suite
    # two captures (the captures fixture's folders) compared over one context, context 0
    one = [write_report(tmp_path / f"one-{i}.json",
                        compare(f.root, f.root / fid.HIDDEN_DIR, base / "again" / f"capture{i}",
                                CompareOptions(backend=NUMPY, bootstrap_samples=100, stop_window=1)))
           for i in (1, 2)]
    said: list[str] = []
    with pytest.raises(BadInput) as refused:
        noise_from_capture_reports(load_report(one[0]), load_report(one[1]), where1="c1.json",
                                   where2="c2.json", allow_different_models=True)
    said.append(str(refused.value))
    assert said[-1].startswith("c1.json: one context only: the repeat variation of the metric needs at least "
                               "2 contexts; compare the captures over more contexts"), said[-1]
    doc = json.loads(captures[0].read_text())
    doc["candidate_dir"] = str(tmp_path / "elsewhere")  # the same KL, from a folder that is not there
    twin = tmp_path / "twin.json"
    twin.write_text(json.dumps(doc))
    first, again, third = load_report(captures[0]), load_report(twin), load_report(captures[1])
    with pytest.raises(BadInput) as refused:
        noise_from_capture_reports(first, again, where1="c1.json", where2="twin.json",
                                   allow_different_models=True)
    said.append(str(refused.value))
    assert said[-1].startswith("c1.json and twin.json have identical per-context KL and cannot be shown to "
                               "be two captures"), said[-1]
    with pytest.raises(BadInput) as refused:
        noise_from_capture_reports(first, again, third, where1="c1.json", where2="twin.json",
                                   where_more=["c3.json"], allow_different_models=True)
    said.append(str(refused.value))
    assert said[-1].startswith("c1.json and twin.json have identical per-context KL but c3.json does not"), \
        said[-1]
    with pytest.raises(BadInput) as refused:  # the reverse over another partition's contexts
        floor_from_reports(first, load_report(reports["small-qualification"]), source="s", where="c1.json",
                           where_reverse="q.json")
    said.append(str(refused.value))
    assert said[-1] == ("c1.json and q.json cover different contexts; give two comparisons of the same two "
                        "runs over the same contexts"), said[-1]
    for line in said:
        assert "\n" not in line and "window" not in line, line


def _second_entry_as_first(doc: dict) -> None:  # type: ignore[type-arg]
    doc["per_context"][1]["context_index"] = doc["per_context"][0]["context_index"]


@pytest.mark.parametrize(("damage", "said"), [
    (lambda d: d["per_context"][0]["kl_reference_to_candidate"].update(mean=-5.0, min=-5.0),
     r"per_context\[0\].kl_reference_to_candidate.*a KL divergence is >= 0"),
    (lambda d: d["per_context"][2].update(top1_agreement=1.5), r"per_context\[2\].top1_agreement"),
    (lambda d: d["per_context"][0]["js"].update(max=5.0), r"per_context\[0\].js"),
    (_second_entry_as_first, r"per_context: context \d+ is listed twice"),
    (lambda d: d.update(per_context=d["per_context"][:3]), r"contexts: \d+ but per_context lists 3"),
], ids=["negative KL", "top-1 above 1", "JS above ln 2", "context twice", "fewer entries"])
def test_a_damaged_per_context_list_is_refused_on_load(reports: dict[str, Path], tmp_path: Path,
                                                        damage, said: str) -> None:  # type: ignore[no-untyped-def]
    """The clustered verdict is made from per_context, which was not checked as per_window is: a context
    with a negative mean KL got a verdict ("B - A -0.107"), a context listed twice collapsed into one
    and two with fewer entries than contexts read as "cover different contexts", naming neither file's
    fault. Each is refused on load, one line naming the file and the entry."""
    doc = json.loads(reports["large-analysis"].read_text())
    damage(doc)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=said) as info:
        paired_diff_files(reports["small-analysis"], path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value), str(info.value)
