"""``kldtui plot REPORT... -o FILE.svg|FILE.png``: the leaderboard's charts as a file."""

from __future__ import annotations

import argparse

from kldtui.cli.commands.diff import add_decision_arguments, check_decision_arguments

HELP = ("chart comparison reports (same reference and suite) into an SVG or PNG: mean KL against size "
        "with the Pareto front, per-window (a hidden-state suite: per-context) KL, per-domain KL (needs "
        "matplotlib: the 'plot' extra)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="comparison reports, or work folders holding them (a campaign's: every "
                             "candidate's)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.svg|FILE.png",
                        help="the file to write (atomically); its suffix picks the format")
    add_decision_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.view import gathered_reports, use_folder_noise_model
    from kldtui.decide.exports import export_table
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.decide.paired import suite_hash_of
    from kldtui.decide.plots import check_plot_path, write_plot
    from kldtui.folder_lock import check_output_file, hold
    from kldtui.formats.safe_io import check_output
    from kldtui.text import shell_arg
    from kldtui.workflow.owners import board_whose

    check_decision_arguments(args)
    check_plot_path(args.output)  # the arguments first: nothing read or said before they hold
    check_output_file(args.output)
    paths, reports = gathered_reports(list(args.reports),  # folders: the reports they hold
                                      f"plot -o {shell_arg(args.output)}")
    use_folder_noise_model(args, suite_hash_of(*reports))  # a folder's, of the reports' suite
    args.reports = paths
    check_output(args.output, [*args.reports, args.noise], "--output")
    with hold(files=[args.output]):
        board = leaderboard_from_files(args.reports, samples=args.bootstrap_samples, seed=args.seed,
                                       noise_path=args.noise, use_noise_floor=not args.no_noise_floor)
        table = export_table(board, reports, paths=args.reports)
        # whose runs they are, where they are more than one profile's: the rankings' notes, in the title
        _, whose = board_whose(board)
        write_plot(table, args.output, whose=[full for full, _ in whose])
    print(f"wrote {args.output}")
    return 0
