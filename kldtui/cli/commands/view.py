"""``kldtui view REPORT.json [MORE.json ...]``: the results viewer.

Every report is read and checked before any screen opens: a missing, unreadable or wrongly shaped
file is one line and exit 2 (a folder holding ``comparison.json`` is named in the hint). When
stdout is not a terminal (``kldtui view R.json > file``, a pipe) the text summary is printed
instead of the screen.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport

HELP = "show saved comparison reports: one as the result pane, several as a leaderboard"
REPORT_NAME = "comparison.json"  # the name `kldtui run` and `kldtui demo` give their report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="comparison report(s): kldtui's or the original comparator's; without a "
                        "terminal on stdout, their text summaries are printed instead")
    parser.add_argument("--theme", dest="view_theme", help="theme name (this time only; t in the viewer "
                        "switches and remembers)")


def check_reports(paths: list[str]) -> list[ComparisonReport]:
    """Load every report; BadInput (one line, exit 2) for the first that is not one."""
    from kldtui.errors import BadInput
    from kldtui.formats.report import load_report

    loaded = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            inside = path / REPORT_NAME
            if inside.is_file():
                raise BadInput(f"{p}: is a folder; did you mean `kldtui view {inside}`?")
            raise BadInput(f"{p}: is a folder, not a comparison report; give the path of a report JSON")
        if not path.is_file():
            raise BadInput(f"{p}: comparison report not found; give the path of a report JSON")
        loaded.append(load_report(path))
    return loaded


def run(args: argparse.Namespace) -> int:
    reports = check_reports(list(args.reports))
    if not sys.stdout.isatty():
        from kldtui.formats.report import summary_text

        for n, (path, report) in enumerate(zip(args.reports, reports, strict=True)):
            if len(reports) > 1:
                print(("\n" if n else "") + f"== {path}")
            print(summary_text(report).rstrip("\n"))
        return 0
    from kldtui.tui.app import run_viewer

    theme = args.view_theme or args.theme
    return run_viewer(args.reports, theme=theme)
