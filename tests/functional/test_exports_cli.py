"""``kldtui leaderboard --format`` and ``kldtui plot``: the exports read back, every number the
report JSON's."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.commands.leaderboard import EXPORT_FORMATS
from kldtui.cli.main import main
from kldtui.decide.exports import CSV_COLUMNS, FORMATS, MARKDOWN_HEADERS, export_table
from kldtui.decide.leaderboard import leaderboard_from_files
from kldtui.decide.plots import chart_data
from kldtui.formats.report import load_report
from tests.fixtures_exports import CANDIDATES, PARAMETERS, make_reports


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return make_reports(tmp_path_factory.mktemp("exports"))


def _json(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _close(text: str, value: float | None, digits: int = 4) -> bool:
    """``text`` is ``value`` as printed with ``digits`` significant digits."""
    if value is None:
        return text == "-"
    return math.isclose(float(text), value, rel_tol=0.5 * 10 ** (1 - digits), abs_tol=1e-300)


def _export(reports: list[Path], fmt: str, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    assert main(["leaderboard", *map(str, reports), "--format", fmt, *extra]) == 0
    return capsys.readouterr().out


def test_cli_formats_are_the_exporters() -> None:
    assert EXPORT_FORMATS == FORMATS


def test_markdown_table_numbers_are_the_reports(reports: list[Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    text = _export(reports, "markdown", capsys)
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:len(MARKDOWN_HEADERS)] == MARKDOWN_HEADERS
    assert header[-4:] == ["KL prose", "KL code", "KL instruction", "verdict"]
    assert set(lines[1].replace("|", "").replace("-", "").replace(":", "")) == set()
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:2 + len(reports)]]
    by_name = {p.stem: _json(p) for p in reports}
    assert [r["candidate"] for r in rows] == [c[0] for c in CANDIDATES[:3]] + ["q2_k"]
    assert rows[0]["verdict"] == "best" and rows[-1]["verdict"].startswith("worse than the best")
    for r in rows:
        doc = by_name[r["candidate"]]
        kl = doc["kl_reference_to_candidate"]
        boot = doc["kl_window_cluster_bootstrap"]
        assert _close(r["mean KL"], boot["estimate"])
        low, high = r["95% interval"].strip("[]").split(", ")
        head = doc["kl_mean_interval"]  # the headline interval (docs/STATISTICS.md), as the leaderboard's
        assert _close(low, head["ci95_low"]) and _close(high, head["ci95_high"])
        for col, key in (("median KL", "median"), ("p99 KL", "p99"), ("p99.9 KL", "p99_9"),
                         ("max KL", "max")):
            assert _close(r[col], kl[key]), col
        assert _close(r["RMS Δp %"], 100 * doc["next_token"]["delta_p"]["rms"])
        assert _close(r["same top-1 %"], 100 * doc["top1_agreement"], 5)
        assert _close(r["top-1 agreement"], doc["topk_agreement"]["1"], 5)
        assert _close(r["PPL ratio"], doc["next_token"]["perplexity_ratio"], 5)
        for d in ("prose", "code", "instruction"):
            assert _close(r[f"KL {d}"], doc["domains"][d]["estimate"])
        size = doc["candidate_size"]
        assert r["bpw"] == f"{size['bits_per_weight']:.3f}" and r["parameters"] == "8.03 B"
    footer = "\n".join(lines[2 + len(reports):])
    first = by_name["q8_0"]
    assert "mean over 12 windows x 32 positions" in footer
    assert first["suite_token_hash_sha256"][:12] in footer
    assert first["reference_identity_sha256"][:12] in footer
    assert f"kldtui {first['provenance']['kldtui_version']}" in footer


def test_csv_reads_back_to_the_reports_numbers(reports: list[Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(reports, "csv", capsys))))
    assert list(rows[0])[:len(CSV_COLUMNS)] == CSV_COLUMNS
    assert len(rows) == len(reports)
    for r in rows:
        doc = _json(Path(r["report"]))
        kl = doc["kl_reference_to_candidate"]
        boot = doc["kl_window_cluster_bootstrap"]
        assert float(r["kl_mean"]) == boot["estimate"]
        head = doc["kl_mean_interval"]
        assert (float(r["kl_ci95_low"]), float(r["kl_ci95_high"])) == (head["ci95_low"], head["ci95_high"])
        for key in ("median", "p99", "p99_9", "max"):
            assert float(r[f"kl_{key}"]) == kl[key]
        assert float(r["rms_delta_p_percent"]) == 100 * doc["next_token"]["delta_p"]["rms"]
        assert float(r["same_top_p_percent"]) == 100 * doc["top1_agreement"]
        assert float(r["perplexity_ratio"]) == doc["next_token"]["perplexity_ratio"]
        assert int(r["parameters"]) == PARAMETERS == doc["candidate_size"]["parameters"]
        assert int(r["size_bytes"]) == doc["candidate_size"]["tensor_bytes"]
        assert float(r["bits_per_weight"]) == doc["candidate_size"]["bits_per_weight"]
        assert r["reference_identity_sha256"] == doc["reference_identity_sha256"]
        assert int(r["windows"]) == doc["windows"] and int(r["positions"]) == doc["positions"]
        for d in ("prose", "code", "instruction"):
            assert float(r[f"kl_mean_{d}"]) == doc["domains"][d]["estimate"]


LLAMA_LINE = re.compile(r"^(?P<label>[^:]+?)\s*: *(?P<value>-?[\d.]+)(?: ± *(?P<unc>[\d.]+))? ?%?$")


def test_llama_cpp_block_has_llamas_layout_and_the_reports_numbers(
        reports: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    text = _export(reports, "llama-cpp", capsys)
    blocks = text.split("# kldtui: ")[1:]
    assert [b.split(" ", 1)[0] for b in blocks] == ["q8_0", "q4_k_m", "q4_0", "q2_k"]
    for block in blocks:
        doc = _json(reports[[p.stem for p in reports].index(block.split(" ", 1)[0])])
        lines = block.splitlines()[1:]
        assert lines[0] == "====== Perplexity statistics ======"
        assert "====== KL divergence statistics ======" in lines
        assert "====== Token probability statistics ======" in lines
        values = {}
        for line in lines:
            m = LLAMA_LINE.match(line)
            if m:
                values[m["label"]] = (float(m["value"]), m["unc"] and float(m["unc"]))
        kl = doc["kl_reference_to_candidate"]
        nt = doc["next_token"]
        # llama.cpp's formats: %10.6f for KLD (labels padded as it pads them)
        assert re.search(r"^Mean    KLD: [ \d.]{10} ± [ \d.]{10}$", block, re.M)
        assert abs(values["Mean    KLD"][0] - kl["mean"]) <= 5e-7
        assert abs(values["Mean    KLD"][1] - doc["kl_window_cluster_bootstrap"]["standard_error"]) <= 5e-7
        for label, key in (("Maximum KLD", "max"), ("99.9%   KLD", "p99_9"), ("99.0%   KLD", "p99"),
                           ("Median  KLD", "median"), ("Minimum KLD", "min")):
            assert abs(values[label][0] - kl[key]) <= 5e-7, label
        assert abs(values["Mean PPL(Q)/PPL(base)"][0] - nt["perplexity_ratio"]) <= 5e-7
        assert abs(values["Mean PPL(Q)"][0] - nt["perplexity_candidate"]) <= 5e-7
        assert abs(values["RMS Δp"][0] - 100 * nt["delta_p"]["rms"]) <= 5e-4
        p = doc["top1_agreement"]
        same, unc = values["Same top p"]
        assert abs(same - 100 * p) <= 5e-4
        assert abs(unc - 100 * math.sqrt(p * (1 - p) / (doc["positions"] - 1))) <= 5e-4
        assert re.search(r"^Same top p: [ \d.]{6} ± [ \d.]{5} %$", block, re.M)


def test_export_to_a_file_and_refusals(reports: list[Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "board.md"
    assert main(["leaderboard", *map(str, reports), "--format", "markdown", "-o", str(out)]) == 0
    assert out.read_text() == _export(reports, "markdown", capsys)
    assert main(["leaderboard", *map(str, reports), "-o", str(tmp_path / "x.txt")]) == 2
    assert "give --format" in capsys.readouterr().err
    assert main(["leaderboard", *map(str, reports), "--format", "csv", "-o", str(reports[0])]) == 2
    assert "a .json file is --json's JSON leaderboard" in capsys.readouterr().err  # its name says first
    odd = tmp_path / "q8_0.csv"  # a report under a name the export could have
    odd.write_bytes(reports[0].read_bytes())
    for flag in ("-o", "--output"):  # the line names the flag as it was typed
        assert main(["leaderboard", str(odd), *map(str, reports[1:]), "--format", "csv", flag, str(odd)]) == 2
        assert f"kldtui: error: {flag} {odd}: is an input of this command" in capsys.readouterr().err


def test_an_export_s_file_name_gives_its_format_or_must_not_contradict_it(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o's help: without --format, FILE's name says which (.md or .markdown: markdown, .csv: csv);
    a name saying another format than --format's (or .json, --json's) is refused: one line naming
    the file and what to do, exit 2, nothing written."""
    for name, fmt in (("board.md", "markdown"), ("board.MARKDOWN", "markdown"), ("board.Csv", "csv")):
        out = tmp_path / name
        assert main(["leaderboard", *map(str, reports), "-o", str(out)]) == 0
        assert out.read_text() == _export(reports, fmt, capsys), name
        out.unlink()
    plain = tmp_path / "board.txt"  # the llama.cpp block has no suffix of its own: any other name
    assert main(["leaderboard", *map(str, reports), "--format", "llama-cpp", "-o", str(plain)]) == 0
    assert plain.read_text() == _export(reports, "llama-cpp", capsys)
    plain.unlink()
    capsys.readouterr()
    refused = {
        ("board.csv", "markdown"): "a .csv file is csv, not --format markdown; give --format csv, or {flag} "
                                   "a name ending in .md or .markdown",
        ("board.md", "csv"): "a .md file is markdown, not --format csv; give --format markdown, or {flag} a "
                             "name ending in .csv",
        ("board.md", "llama-cpp"): "a .md file is markdown, not --format llama-cpp; give --format markdown, "
                                   "or {flag} a name ending in none of .md, .markdown, .csv or .json",
        ("board.json", "csv"): "a .json file is --json's JSON leaderboard, not --format csv; give {flag} a "
                               "name ending in .csv",
        ("board.json", None): "a .json file is the JSON leaderboard: give --json {out} instead of {flag}",
    }
    for flag in ("-o", "--output"):  # the line names the flag as it was typed
        for (name, fmt), said in refused.items():
            out = tmp_path / name
            given = ["--format", fmt] if fmt else []
            assert main(["leaderboard", *map(str, reports), *given, flag, str(out)]) == 2
            captured = capsys.readouterr()
            assert captured.out == "" and captured.err.splitlines() == [
                f"kldtui: error: {out}: {said.format(out=out, flag=flag)}"], captured.err
    assert not list(tmp_path.iterdir())


def test_plot_svg_and_png_are_real_files_of_the_reports(reports: list[Path], tmp_path: Path) -> None:
    svg, png = tmp_path / "board.svg", tmp_path / "board.png"
    assert main(["plot", *map(str, reports), "-o", str(svg)]) == 0
    assert main(["plot", *map(str, reports), "-o", str(png)]) == 0
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    for name, _, _ in CANDIDATES:
        assert {f"size-point-{name}", f"window-series-{name}", f"domain-bars-{name}"} <= ids
    assert "pareto-front" in ids
    # an interval bar where one is shown: the 12 windows overall; none for a domain of 4 windows (not
    # even the cap a zero-length bar draws)
    assert {f"size-interval-{name}" for name, _, size in CANDIDATES if size is not None} <= ids
    assert not any(i.startswith("domain-interval-") for i in ids), ids
    text = " ".join(t for el in root.iter() for t in [el.text] if t)
    assert "mean KL against size" in text and "q4_k_m (4.90 bpw)" in text
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    assert struct.unpack(">II", head[16:24]) == (900, 1300)  # 9 x 13 inches at 100 dpi
    # the drawn numbers are the reports'
    board = leaderboard_from_files(reports, samples=2000)
    data = chart_data(export_table(board, [load_report(p) for p in reports], paths=reports))
    for point in data.sizes:
        doc = _json(reports[[p.stem for p in reports].index(point.name)])
        assert point.mean == doc["kl_window_cluster_bootstrap"]["estimate"]
        assert point.size_gib == doc["candidate_size"]["tensor_bytes"] / 2**30
    assert all(p.on_front for p in data.sizes)  # each smaller candidate is further: all worth their size
    for series in data.windows:
        doc = _json(reports[[p.stem for p in reports].index(series.name)])
        assert series.kl_mean == doc["per_window_arrays"]["kl_mean"]


def test_names_from_shared_folders_are_text_in_markdown_and_never_a_formula_in_csv(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = ("[q4](evil.invalid) <img src=x> a|b", '=HYPERLINK("evil.invalid")')  # a folder name: no "/"
    named = []
    for path, name in zip(reports[:2], hostile, strict=True):
        doc = _json(path)
        doc["candidate_dir"] = f"/runs/{name}"
        named.append(tmp_path / f"{len(named)}.json")
        named[-1].write_text(json.dumps(doc))
    md = _export(named, "markdown", capsys)
    assert "\\[q4\\](evil.invalid) \\<img src=x> a\\|b" in md, md
    unescaped = md.replace("\\<", "").replace("\\](", "")
    assert "<img" not in unescaped and "](evil" not in unescaped
    lines = md.splitlines()
    rows = [line for line in lines[2:] if line.startswith("| ")]
    assert len(rows) == 2 and all(row.replace("\\|", "").count("|") == lines[0].count("|") for row in rows)
    table = list(csv.reader(io.StringIO(_export(named, "csv", capsys))))
    names = {row[table[0].index("candidate")] for row in table[1:]}
    assert names == {hostile[0], "'" + hostile[1]}, names  # a spreadsheet shows it, never runs it


def _renamed(reports: list[Path], folder: Path, names: list[str], *,
             drop_size: bool = False) -> list[Path]:
    """Copies of the reports under other candidate names (cycling through them)."""
    out = []
    for k, name in enumerate(names):
        doc = _json(reports[k % len(reports)])
        doc["candidate_dir"] = f"/runs/{name}"
        if drop_size:
            doc.pop("candidate_size", None)
        out.append(folder / f"{name}.json")
        out[-1].write_text(json.dumps(doc))
    return out


def _series_styles(svg: Path, prefix: str) -> dict[str, str]:
    """Each candidate's drawn style in the SVG: the first path's style under its ``prefix`` group."""
    out = {}
    for el in ET.parse(svg).getroot().iter():
        gid = el.get("id") or ""
        if gid.startswith(prefix) and gid[len(prefix):] not in out:
            path = next(c for c in el.iter() if c.tag.endswith("path"))
            out[gid[len(prefix):]] = path.get("style", "")
    return out


def test_a_dozen_candidates_are_each_drawn_unlike_the_others(reports: list[Path], tmp_path: Path) -> None:
    # matplotlib's default colours repeat after ten: the 11th and 12th of a dozen quants were drawn in
    # the 1st's and 2nd's colours, in the per-window lines and the per-domain bars alike
    names = [f"q{k:02d}" for k in range(12)]
    svg = tmp_path / "dozen.svg"
    assert main(["plot", *map(str, _renamed(reports, tmp_path, names)), "-o", str(svg)]) == 0
    for prefix in ("window-series-", "domain-bars-"):
        styles = _series_styles(svg, prefix)
        assert set(styles) == set(names)
        assert len(set(styles.values())) == len(names), (prefix, styles)
    text = " ".join(t for el in ET.parse(svg).getroot().iter() for t in [el.text] if t)
    # KL over a factor of a hundred (perturbations 0.3 to 3): on a linear axis the closest lie flat on it
    assert text.count("log axis") == 2, text


def test_plot_without_sizes_says_how_to_give_them(reports: list[Path], tmp_path: Path) -> None:
    from kldtui.decide.plots import NO_SIZE, figure

    named = _renamed(reports, tmp_path, ["a", "b"], drop_size=True)
    png = tmp_path / "nosize.png"
    assert main(["plot", *map(str, named), "-o", str(png)]) == 0
    assert struct.unpack(">II", png.read_bytes()[16:24]) == (900, 900)  # two panels, no empty third
    board = leaderboard_from_files(named, samples=2000)
    fig = figure(export_table(board, [load_report(p) for p in named], paths=named))
    try:
        assert [ax.get_title() for ax in fig.axes][0].startswith("mean KL per window")
        assert len(fig.axes) == 2
        assert fig.get_supxlabel().replace("\n", " ") == NO_SIZE
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_plot_of_reports_without_domains_says_so(reports: list[Path], tmp_path: Path) -> None:
    # reports with no per-domain figures (another tool's, a suite of no domains) left a bare frame
    named = _renamed(reports, tmp_path, ["a", "b"])
    for path in named:
        doc = _json(path)
        doc.pop("domains", None)
        path.write_text(json.dumps(doc))
    svg = tmp_path / "nodomains.svg"
    assert main(["plot", *map(str, named), "-o", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    text = " ".join(t for el in root.iter() for t in [el.text] if t)
    assert "these reports hold no per-domain figures" in text
    assert not any((el.get("id") or "").startswith("domain-bars-") for el in root.iter())


def test_plot_draws_names_as_text_not_mathtext(reports: list[Path], tmp_path: Path) -> None:
    # a candidate folder's name is text: "$x^2$" is not typeset, and "$\\frac$" failed the whole plot
    # with a mathtext parse error ("internal error")
    named = []
    for path, name in zip(reports[:2], ("$\\frac$ q4", "q8 $x^2$"), strict=True):
        doc = _json(path)
        doc["candidate_dir"] = f"/runs/{name}"
        named.append(tmp_path / f"{len(named)}.json")
        named[-1].write_text(json.dumps(doc))
    svg = tmp_path / "names.svg"
    assert main(["plot", *map(str, named), "-o", str(svg)]) == 0
    text = " ".join(t for el in ET.parse(svg).getroot().iter() for t in [el.text] if t)
    assert "$\\frac$ q4" in text and "q8 $x^2$" in text, text


def test_plot_without_matplotlib_names_the_extra(reports: list[Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["plot", *map(str, reports), "-o", str(tmp_path / "x.svg")]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install matplotlib" in err and "'.[plot]'" in err and "\n" not in err
    assert "kldtui[" not in err  # no package index serves kldtui: the extra is installed from a checkout
    assert not (tmp_path / "x.svg").exists()


def test_a_plot_is_written_only_where_a_file_can_be(reports: list[Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The output-file rule's one line (folder_lock.check_output_file), through the CLI (exit 2) and from
    the plot's writer itself, when its folder is gone or a folder took the name after the CLI's check."""
    from kldtui.decide.plots import write_plot
    from kldtui.errors import BadInput

    missing = tmp_path / "missing" / "dir" / "x.svg"
    assert main(["plot", *map(str, reports), "-o", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"kldtui: error: {missing}: folder {missing.parent} does not exist; "
                                 "create it first\n")
    table = export_table(leaderboard_from_files(reports, samples=200), [load_report(p) for p in reports],
                         paths=reports)
    taken = tmp_path / "taken.svg"
    taken.mkdir()
    for path, said in ((missing, f"{missing}: folder {missing.parent} does not exist; create it first"),
                       (taken, f"{taken}: is a folder; give a file name")):
        with pytest.raises(BadInput) as info:
            write_plot(table, path)
        assert str(info.value) == said
    assert not missing.parent.exists() and not any(taken.iterdir())


def test_unresolved_differences_say_the_windows_that_would_resolve_them(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from kldtui.decide.windows_needed import windows_for

    close = [reports[1], reports[2]]  # q4_k_m and q4_0: 1.03 x the perturbation, not told apart
    a, b = (np.array(_json(p)["per_window_arrays"]["kl_mean"]) for p in close)
    d = b - a
    want = windows_for(float(d.mean()), float(d.std(ddof=1)), measured_windows=12).windows
    assert want is not None and want > 12
    # diff
    capsys.readouterr()
    assert main(["diff", *map(str, close), "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert f"windows needed: about {want} windows ({want - 12} more than the 12 compared)" in out
    assert _json(tmp_path / "d.json")["windows_needed"]["windows"] == want
    # the leaderboard (a pair: one comparison), its exports
    capsys.readouterr()
    assert main(["leaderboard", *map(str, close), "--plain", "--json", str(tmp_path / "l.json")]) == 0
    assert f"windows needed: q4_0 vs q4_k_m: about {want} windows" in capsys.readouterr().out
    assert _json(tmp_path / "l.json")["windows_needed"]["q4_0"]["windows"] == want
    md = _export(close, "markdown", capsys)
    assert f"| tied with the best (~{want} windows to resolve) |" in md
    # a verdict with its own bracket takes the count inside it, not in a second bracket
    import dataclasses

    from kldtui.decide import exports

    row = next(r for r in export_table(leaderboard_from_files(close, samples=2000),
                                       [load_report(p) for p in close], paths=close).rows
               if r.windows_needed is not None)
    braced = dataclasses.replace(row, verdict="no verdict (too few windows)")
    assert exports._verdict_cell(braced) == f"no verdict (too few windows; ~{want} windows to resolve)"
    rows = list(csv.DictReader(io.StringIO(_export(close, "csv", capsys))))
    assert [r["windows_to_resolve"] for r in rows] == ["", str(want)]
    # plan from the same two reports as pilots: the same count
    assert main(["plan", *map(str, close)]) == 0
    assert f"about {want} windows" in capsys.readouterr().out
    # with four candidates the family is 6 comparisons: more windows
    assert main(["plan", *map(str, close), "--candidates", "4"]) == 0
    four = int(re.search(r"about (\d+) windows", capsys.readouterr().out)[1])  # type: ignore[index]
    assert four > want


def test_plan_from_figures_and_its_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--difference", "0.001", "--window-sd", "0.003"]) == 0
    said = capsys.readouterr().out.strip()
    assert said == "about 73 windows would resolve a difference of 0.001 KL at 80 % power"
    assert main(["plan", "--difference", "0.001", "--window-sd", "0.003", "--repeat-variation", "0.002"]) == 1
    assert "more windows will not resolve it" in capsys.readouterr().out
    for bad, words in [(["--difference", "0.001"], "both --difference and --window-sd"),
                       (["--difference", "0.001", "--window-sd", "nan"], "not a finite KL"),
                       (["--difference", "0.001", "--window-sd", "0.1", "--power", "0.3"], "--power"),
                       (["a.json"], "two pilot reports")]:
        assert main(["plan", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err


def test_a_campaigns_folder_stands_for_its_reports(reports: list[Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`kldtui leaderboard DIR` and `kldtui view DIR` (not a terminal) on a campaign's work folder take
    each candidate's comparison-NAME.json, as if named one by one; a folder without a report is one
    line, exit 2."""
    camp = tmp_path / "camp"
    camp.mkdir()
    for path in reports:
        shutil.copy(path, camp / f"comparison-{path.stem}.json")
    assert main(["leaderboard", "--plain", *map(str, sorted(camp.iterdir()))]) == 0
    one_by_one = capsys.readouterr().out
    assert main(["leaderboard", "--plain", str(camp)]) == 0
    by_folder = capsys.readouterr().out
    assert by_folder == one_by_one and all(p.stem in by_folder for p in reports)
    assert main(["view", str(camp)]) == 0
    viewed = capsys.readouterr().out
    assert viewed.count("\n== ") == len(reports)
    assert all(f"comparison-{p.stem}.json" in viewed for p in reports)
    (tmp_path / "empty").mkdir()
    assert main(["leaderboard", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a folder without a comparison.json" in err[0]


def test_a_campaigns_folder_ranks_its_own_candidates_and_names_a_stray_report(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign's folder is shared: a comparison-*.json another tool or person left there is not one
    of its candidates. `kldtui leaderboard DIR` ranks what the campaign's state names (leaderboard.json's
    rows and its candidates/ folders: a run stopped before it ranked again has compared candidates its last
    ranking lacks) and says in one line what it left out."""
    camp = tmp_path / "camp"
    camp.mkdir()
    ours, stray = reports[:3], reports[3]
    for path in ours:
        shutil.copy(path, camp / f"comparison-{path.stem}.json")
    assert main(["leaderboard", "--plain", *(str(camp / f"comparison-{p.stem}.json") for p in ours),
                 "--json", str(camp / "leaderboard.json")]) == 0  # the campaign's ranking
    expected = capsys.readouterr().out.replace(f"wrote {camp / 'leaderboard.json'}\n", "")
    shutil.copy(stray, camp / f"comparison-{stray.stem}.json")  # dropped in later, by someone else
    assert main(["leaderboard", "--plain", str(camp)]) == 0
    captured = capsys.readouterr()
    assert captured.out == expected and stray.stem not in captured.out
    why = (f"not a candidate of the campaign there (neither ranked in a {camp / 'leaderboard*.json'} nor "
           f"with a {camp / 'candidates'}/NAME folder) (give a report's file by name to rank it anyway)")
    assert captured.err.splitlines() == [f"kldtui: {camp}: left out comparison-{stray.stem}.json: {why}"]
    # before its first ranking: the candidates it finalized (candidates/NAME) are its candidates
    (camp / "leaderboard.json").unlink()
    for path in ours[:2]:
        (camp / "candidates" / path.stem).mkdir(parents=True)
    assert main(["leaderboard", "--plain", str(camp / f"comparison-{ours[2].stem}.json"),
                 "--json", str(camp / "leaderboard.json")]) == 0  # an earlier ranking of one of them
    capsys.readouterr()
    assert main(["leaderboard", "--plain", str(camp)]) == 0  # a run stopped before it ranked again
    captured = capsys.readouterr()
    assert captured.out == expected
    assert captured.err.splitlines() == [f"kldtui: {camp}: left out comparison-{stray.stem}.json: {why}"]


def test_diff_and_plan_of_a_campaigns_folder_name_the_stray_report_they_left_out(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kldtui diff DIR B` and `kldtui plan DIR B` take a campaign's folder of one candidate for its report,
    as leaderboard and view take a campaign's folder; they left a stray comparison-*.json out without a
    word, which those name on stderr in one line. The line is theirs."""
    camp = tmp_path / "camp"
    (camp / "candidates" / reports[0].stem).mkdir(parents=True)
    shutil.copy(reports[0], camp / f"comparison-{reports[0].stem}.json")
    shutil.copy(reports[3], camp / f"comparison-{reports[3].stem}.json")  # dropped in by someone else
    why = (f"not a candidate of the campaign there (neither ranked in a {camp / 'leaderboard*.json'} nor "
           f"with a {camp / 'candidates'}/NAME folder) (give a report's file by name to rank it anyway)")
    said = f"kldtui: {camp}: left out comparison-{reports[3].stem}.json: {why}"
    assert main(["diff", str(camp), str(reports[1]), "--bootstrap-samples", "200"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [said], captured.err
    ours = camp / f"comparison-{reports[0].stem}.json"
    assert main(["diff", str(ours), str(reports[1]), "--bootstrap-samples", "200"]) == 0
    assert capsys.readouterr().out == captured.out  # the candidate's report, the stray left out
    assert main(["plan", str(camp), str(reports[1])]) in (0, 1)
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [said], captured.err
    assert captured.out.startswith("pilot: ")


def test_diff_and_plan_of_a_campaign_of_several_candidates_list_them_and_the_stray_report(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kldtui diff DIR` / `kldtui plan DIR` on a campaign's folder of two candidates and a stray
    comparison-*.json stopped with "holds 2 reports (...)" while the folder showed three, without a
    word of the third. The one line lists the candidates' report files, as they can be given, and
    names the stray one as left out (never as a candidate)."""
    camp = tmp_path / "camp"
    for report in reports[:2]:
        (camp / "candidates" / report.stem).mkdir(parents=True)
        shutil.copy(report, camp / f"comparison-{report.stem}.json")
    shutil.copy(reports[3], camp / f"comparison-{reports[3].stem}.json")  # dropped in by someone else
    ours = sorted(camp / f"comparison-{r.stem}.json" for r in reports[:2])
    said = (f"kldtui: error: {camp}: a campaign's work folder holds 2 reports ({ours[0]}, {ours[1]}); give "
            f"the two to compare by file; left out comparison-{reports[3].stem}.json: not a candidate of the "
            f"campaign there (neither ranked in a {camp / 'leaderboard*.json'} nor with a "
            f"{camp / 'candidates'}/NAME folder)")
    capsys.readouterr()
    for argv in (["diff", str(camp), str(reports[2])], ["plan", str(camp)]):
        assert main(argv) == 2
        assert capsys.readouterr().err.splitlines() == [said], argv
    assert main(["diff", *map(str, ours), "--bootstrap-samples", "200"]) == 0  # the two it lists: a diff


def test_rms_delta_p_is_shown_once(reports: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    # the report's RMS Δp figure (%, with its interval) and the next-token line's rms (a fraction) are
    # one figure: the text summary and the result pane show it once
    from kldtui.tui.resultdata import result_from_report

    capsys.readouterr()
    assert main(["view", str(reports[0])]) == 0
    out = capsys.readouterr().out
    next_token = next(line for line in out.splitlines() if "next token:" in line)
    assert "Δp mean" in next_token and " rms " not in next_token, next_token
    assert sum(line.strip().startswith("RMS Δp ") for line in out.splitlines()) == 1, out
    shown = result_from_report(load_report(reports[0]))
    assert shown.delta_p_rms_in_figures and any(line.startswith("RMS Δp ") for line in shown.figures)


def test_a_name_with_a_line_break_stays_on_its_line(reports: list[Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # a folder name may hold a line break: it would print a made-up line under the name (here a fake
    # llama.cpp statistic); names show it as \x0a on their own line
    doc = _json(reports[0])
    doc["candidate_dir"] = "/runs/q4\nMean    KLD:   0.000001"
    named = tmp_path / "n.json"
    named.write_text(json.dumps(doc))
    block = _export([named, reports[1]], "llama-cpp", capsys)
    assert not any(line.startswith("Mean    KLD:   0.000001") for line in block.splitlines()), block
    assert "# kldtui: q4\\x0aMean    KLD:   0.000001 (" in block
    capsys.readouterr()
    assert main(["leaderboard", str(named), str(reports[1])]) == 0
    assert "q4\\x0aMean" in capsys.readouterr().out


def test_views_compute_intervals_from_the_windows_not_the_reports_stored_copy(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a report from a shared folder edited to claim other intervals: "[-5, ...]" was shown as written
    from kldtui.formats.report import figure_lines, summary_text
    from kldtui.formats.report_names import figure_headline_interval, kl_headline_interval

    doc = _json(reports[1])
    real = (doc["kl_mean_interval"]["ci95_low"], doc["kl_mean_interval"]["ci95_high"])
    same = doc["figures"]["same_top_p"]["interval"]
    real_same = (same["ci95_low"], same["ci95_high"])
    doc["kl_mean_interval"]["ci95_low"] = -5.0
    doc["kl_mean_interval"]["ci95_high"] = 0.5
    same["ci95_low"], same["ci95_high"] = 12.0, 250.0
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    report = load_report(edited)
    head = kl_headline_interval(report)
    assert (head.ci95_low, head.ci95_high) == pytest.approx(real, rel=1e-12)
    figure = figure_headline_interval(report, "same_top_p")
    assert figure is not None and (figure.ci95_low, figure.ci95_high) == pytest.approx(real_same, rel=1e-12)
    shown = summary_text(report) + "\n".join(figure_lines(report))
    assert "[-5," not in shown and ", 250" not in shown and ", 0.5]" not in shown
    board = leaderboard_from_files([reports[0], edited], samples=2000)
    row = next(r for r in board.rows if r.name == "q4_k_m")  # its candidate folder names it
    assert (row.ci_low, row.ci_high) == pytest.approx(real, rel=1e-12)


def _run_folders(reports: list[Path], where: Path) -> list[Path]:
    """A run's work folder for each report (``run-a``, ``run-b``, ...: its comparison.json)."""
    runs = []
    for letter, report in zip("abcdefgh", reports, strict=False):
        folder = where / f"run-{letter}"
        folder.mkdir()
        shutil.copy(report, folder / "comparison.json")
        runs.append(folder)
    return runs


def test_diff_takes_a_runs_work_folder_and_asks_which_report_of_a_campaigns(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _run_folders(reports[1:3], tmp_path)
    capsys.readouterr()
    assert main(["diff", *map(str, reports[1:3])]) == 0
    files = capsys.readouterr().out
    assert main(["diff", *map(str, runs)]) == 0  # "is a folder, not a file" before
    folders = capsys.readouterr().out
    assert folders.split("\n", 2)[2] == files.split("\n", 2)[2]  # all but the two paths
    assert f"({runs[0] / 'comparison.json'})" in folders.splitlines()[0]
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    for report in reports[:3]:
        shutil.copy(report, campaign / f"comparison-{report.stem}.json")
    assert main(["diff", str(campaign), str(runs[0])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kldtui: error: {campaign}: a campaign's work folder holds 3 reports (")
    assert "give the two to compare" in err and "\n" not in err


def test_plan_takes_work_folders_as_diff_does_and_names_what_it_was_given(
        reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kldtui plan DIR` on a campaign's folder said "takes two pilot reports (A and B), not 1",
    naming nothing: a run's work folder stands for its report and a campaign's is asked which two,
    as for diff; a wrong count names the reports given."""
    runs = _run_folders(reports[1:3], tmp_path)
    capsys.readouterr()
    assert main(["plan", *map(str, reports[1:3])]) in (0, 1)
    files = capsys.readouterr().out
    assert main(["plan", *map(str, runs)]) in (0, 1)
    assert capsys.readouterr().out == files
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    for report in reports[:3]:
        shutil.copy(report, campaign / f"comparison-{report.stem}.json")
    assert main(["plan", str(campaign)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kldtui: error: {campaign}: a campaign's work folder holds 3 reports (")
    assert "\n" not in err
    assert main(["plan", str(reports[1])]) == 2
    said = capsys.readouterr().err.strip()
    assert said == ("kldtui: error: kldtui plan takes two pilot reports (A and B), not 1 "
                    f"({reports[1]}); give A.json B.json")
