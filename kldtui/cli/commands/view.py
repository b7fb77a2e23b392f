"""``kldtui view REPORT.json [MORE.json ...]``: the results viewer.

Every report is read and checked before any screen opens: a missing, unreadable or wrongly shaped
file is one line and exit 2 (a folder holding ``comparison.json`` is named in the hint). When
stdout is not a terminal (``kldtui view R.json > file``, a pipe) the text summary is printed
instead of the screen. A work folder's report (``comparison.json``; a campaign candidate's
``comparison-NAME.json``) is said to be the run of the profile its ``profiles.json`` records
(kldtui.workflow.owners.report_owner; read only): beside the file's name on the screen, on stderr with
the text summary; a ranking of reports of more than one profile says each one's
(kldtui.workflow.owners.with_whose)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport
    from kldtui.formats.report_names import FolderNoise, FolderReports

HELP = ("show saved comparison reports: one as the result pane, several as a leaderboard (without a "
        "terminal on stdout: the leaderboard as text, then each report's summary)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="comparison report(s): kldtui's or the original comparator's; without a "
                        "terminal on stdout, their text summaries are printed instead")
    parser.add_argument("--theme", dest="view_theme", metavar="NAME",
                        help="theme name (this time only; t in the viewer switches and remembers)")
    floor = parser.add_mutually_exclusive_group()
    floor.add_argument("--noise", metavar="NOISE.json",
                       help="with several reports: the noise model the leaderboard's ties use, from kldtui "
                            "noise, as kldtui leaderboard --noise (default: the published repeat KL for the "
                            "Kimi K3 suite, else none)")
    floor.add_argument("--no-noise-floor", action="store_true",
                       help="with several reports: no noise model for the ties, as kldtui leaderboard")


def gathered_reports(given: list[str], subcommand: str) -> tuple[list[str], list[ComparisonReport]]:
    """The reports the arguments ``given`` name (:func:`report_paths`), loaded: their paths and
    reports. BadInput (one line, exit 2) for the first that is not one (load_report words it: a FIFO
    is not "not found"), and where folders among them bring reports of more than one suite (one work
    folder holds ``kldtui demo`` and ``kldtui demo --hidden``), before any noise model is said: each
    suite's reports and kldtui's ``subcommand`` (``leaderboard``, kldtui named as it was started) given
    one suite's (kldtui.formats.report_names.mixed_suites_line)."""
    from kldtui.errors import BadInput
    from kldtui.formats.report import load_report
    from kldtui.formats.report_names import mixed_suites_line

    paths = report_paths(given)
    reports = [load_report(path) for path in paths]
    mixed = mixed_suites_line(given, paths, [r.suite_token_hash_sha256 for r in reports], subcommand)
    if mixed is not None:
        raise BadInput(mixed)
    return [str(p) for p in paths], reports


def report_paths(paths: list[str]) -> list[Path]:
    """Each argument's reports (:func:`reports_of`)."""
    return [report for p in paths for report in reports_of(p)]


def reports_of(path: str) -> list[Path]:
    """The reports one argument names: a report file, a work folder's report, a campaign's candidates'
    reports (kldtui.formats.report_names.folder_reports; the others in its folder named on stderr, one
    line: every command that takes a folder for its reports says it so); BadInput (one line) for a
    folder without any."""
    from kldtui.formats.report_names import folder_reports

    return said_left_out(folder_reports(path), path)


def said_left_out(found: FolderReports, path: str) -> list[Path]:
    """``found``'s reports, once the files of the campaign folder ``path`` it left out are named on
    stderr (:meth:`FolderReports.left_out_line`; nothing for a report file or a run's folder)."""
    line = found.left_out_line(path)  # a campaign's folder: reports not of its candidates
    if line is not None:
        print(f"kldtui: {line}", file=sys.stderr)
    return found.reports


def use_folder_noise_model(args: argparse.Namespace, suite_hash: str | None) -> FolderNoise:
    """With neither ``--noise`` nor ``--no-noise-floor``, a campaign folder among ``args.reports``
    brings its measured noise model of the reports' suite (``suite_hash``: ``noise-model-HASH.json``),
    so that ``kldtui leaderboard DIR`` and ``kldtui view DIR`` judge ties as the campaign's own
    leaderboard and dashboard do (they used none, and named as final what the campaign called
    provisional or the reverse). Said on stderr, in one line; folders with different models, or with
    models of other suites only: none is used, and the line says so and how to choose
    (``kldtui.formats.report_names.FolderNoise``, the rule the dashboard and viewer follow too).
    Returns what the folders brought (nothing when the user chose)."""
    from kldtui.formats.report_names import FolderNoise, folder_noise

    if getattr(args, "noise", None) is not None or getattr(args, "no_noise_floor", False):
        return FolderNoise()
    found = folder_noise(args.reports, suite_hash)
    words = found.words()
    if found.model is not None:
        args.noise = str(found.model)
        print(f"kldtui: {words} (give --noise FILE or --no-noise-floor for another)", file=sys.stderr)
    elif words is not None:
        print(f"kldtui: {words}: give --noise FILE to use one", file=sys.stderr)
    return found


def run(args: argparse.Namespace) -> int:
    from kldtui.decide.paired import suite_hash_of

    chosen = getattr(args, "noise", None)  # the user's --noise, not a folder's
    paths, reports = gathered_reports(list(args.reports), "view")  # folders: the reports they hold
    folders = use_folder_noise_model(args, suite_hash_of(*reports))  # a folder's, of the reports' suite
    args.reports = paths
    noise_path = getattr(args, "noise", None)
    use_floor = not getattr(args, "no_noise_floor", False)
    if noise_path is not None:  # a bad noise file: one line and exit 2, before any screen
        from kldtui.decide.noise import resolve_floor

        resolve_floor(noise_path, suite_hash_of(*reports))
    if not sys.stdout.isatty():
        from kldtui.formats.report import summary_text
        from kldtui.workflow.owners import report_owner, with_whose

        for path in args.reports:  # a work folder's run: whose it is, as the screen says it
            if (owner := report_owner(Path(path))) is not None:
                print(f"kldtui: {path}: {owner}", file=sys.stderr)

        if len(reports) > 1:  # several reports: the leaderboard the screen would show, then each summary
            from kldtui.cli.commands.leaderboard import format_plain
            from kldtui.decide.leaderboard import leaderboard_from_files

            print(format_plain(with_whose(leaderboard_from_files(args.reports, noise_path=noise_path,
                                                                 use_noise_floor=use_floor))))
        for path, report in zip(args.reports, reports, strict=True):
            if len(reports) > 1:
                print(f"\n== {path}")
            print(summary_text(report).rstrip("\n"))
        return 0
    from kldtui.tui.app import run_viewer

    theme = args.view_theme or args.theme
    return run_viewer(args.reports, theme=theme, noise_path=chosen, use_noise_floor=use_floor,
                      folder_noise=folders)
