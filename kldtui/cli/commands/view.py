"""``kldtui view REPORT.json [MORE.json ...]``: the results viewer."""

from __future__ import annotations

import argparse

HELP = "show saved comparison reports: one as the result pane, several as a leaderboard"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="comparison report(s): kldtui's or the original comparator's")
    parser.add_argument("--theme", dest="view_theme", help="theme name (remembered)")


def run(args: argparse.Namespace) -> int:
    from kldtui.tui.app import run_viewer

    theme = getattr(args, "view_theme", None) or getattr(args, "theme", None)
    return run_viewer(args.reports, theme=theme)
