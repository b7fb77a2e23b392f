"""Issue 26: every word the producer's commands print is true, and every failure is actionable.
Each test reads stdout/stderr as a user does (the command in a subprocess where a terminal or a
pipe matters, ``main([...])`` elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.cli.main import main
from tests.fixtures_decide import make_report as decide_report
from tests.fixtures_decide import suite_domains
from tests.fixtures_decide import write_report as decide_write
from tests.fixtures_tui import make_report, write_report
from tests.paths import REPO as ROOT


def kldtui(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kldtui", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout, stdin=subprocess.DEVNULL)


# -- numbers with their caveat ----------------------------------------------------------------------
def test_summary_of_few_windows_shows_no_95_percent_interval(tmp_path: Path) -> None:
    few = write_report(tmp_path / "few.json", make_report("few", 0.01, seed=2,
                                                          domains=["prose", "prose", "code", "dialog"]))
    done = kldtui("view", str(few))
    assert done.returncode == 0, done.stderr
    head, *rest = done.stdout.splitlines()
    assert "95% CI" not in head and "(4 windows, 256 positions: too few windows for a 95 % interval, " \
        "which needs 8)" in head, head
    by_domain = next(line for line in rest if "by domain" in line)
    assert "dialog" in by_domain and "(1 window: no interval)" in by_domain and "[" not in by_domain
    assert "(no interval: too few windows)" in done.stdout  # the perplexity ratio's interval too
    enough = write_report(tmp_path / "enough.json", make_report("enough", 0.01, seed=2))
    done = kldtui("view", str(enough))
    assert "95% CI [" in done.stdout.splitlines()[0] and "8 windows" in done.stdout


def test_view_of_several_reports_to_a_file_prints_the_leaderboard(tmp_path: Path) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("int4", 0.05, 1), ("fp8", 0.01, 2))]
    done = kldtui("view", *paths)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["#", "candidate", "mean"], lines[0]  # the leaderboard its help promises
    assert lines[1].split()[:2] == ["1", "fp8"] and lines[2].split()[:2] == ["2", "int4"]
    assert f"== {paths[0]}" in done.stdout and f"== {paths[1]}" in done.stdout  # then each summary


def _noise_reports(tmp_path: Path) -> tuple[Path, Path, Path]:
    domains = suite_domains(32)
    base = np.random.default_rng(4).gamma(4.0, 0.0025, 32)
    a = decide_write(tmp_path / "a.json", decide_report(base, domains, candidate_dir="/runs/a"))
    b = decide_write(tmp_path / "b.json", decide_report(base + 0.002, domains, candidate_dir="/runs/b"))
    rep = decide_write(tmp_path / "repeat.json", decide_report(
        np.full(32, 0.003), domains, reference_dir="/r/run1", candidate_dir="/r/run2"))
    again = decide_write(tmp_path / "a2.json", decide_report(
        base + np.random.default_rng(20).normal(0, 0.02, 32), domains, candidate_dir="/runs/a2"))
    model = tmp_path / "noise.json"
    assert main(["noise", str(a), str(again), "--repeat-report", str(rep), "--output", str(model)]) == 0
    return a, b, model


def test_view_takes_a_noise_model_as_leaderboard_does(tmp_path: Path, capsys: Any) -> None:
    a, b, model = _noise_reports(tmp_path)
    capsys.readouterr()
    done = kldtui("view", str(a), str(b))
    assert done.stdout.splitlines()[2].rstrip().endswith("worse"), done.stdout
    done = kldtui("view", "--noise", str(model), str(a), str(b))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].rstrip().endswith("tied"), done.stdout  # as leaderboard --noise
    assert "noise model: measured repeat variation" in done.stdout
    assert main(["leaderboard", "--noise", str(model), str(a), str(b), "--plain"]) == 0
    assert capsys.readouterr().out.splitlines()[2].rstrip().endswith("tied")
    bad = tmp_path / "bad-noise.json"
    bad.write_text("{}")
    done = kldtui("view", "--noise", str(bad), str(a), str(b))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "bad-noise.json" in done.stderr


def test_leaderboard_of_one_report_marks_nothing_and_says_why(tmp_path: Path, capsys: Any) -> None:
    path = write_report(tmp_path / "one.json", make_report("one", 0.01, seed=1))
    assert main(["leaderboard", str(path), "--plain"]) == 0
    out = capsys.readouterr().out
    row = out.splitlines()[1]
    assert not row.rstrip().endswith("best"), row  # it said "best" beside "no row is marked"
    assert "one report: nothing to rank it against" in out
    assert "no row is marked" not in out


def test_leaderboard_of_few_windows_marks_no_best(tmp_path: Path, capsys: Any) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s, domains=["prose"] * 4)))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.03, 2))]
    assert main(["leaderboard", *paths, "--plain"]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()[1:3]
    assert all(r.rstrip().endswith("no verdict") for r in rows), rows
    assert all("too few windows (4)" in r and "[" not in r for r in rows), rows  # no "95 %" from 4 windows
    assert "(estimate only)" in rows[1]
    assert "too few windows (4) for a verdict: the rows are in order of mean KL only" in out
    assert "tie: best = lowest mean KL" in out  # every mark is explained


def test_leaderboard_json_keeps_its_figures(tmp_path: Path, capsys: Any) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.03, 2))]
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", *paths, "--plain", "--json", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    assert [r["name"] for r in doc["rows"]] == ["x", "y"] and doc["rows"][0]["ci95_low"] is not None
