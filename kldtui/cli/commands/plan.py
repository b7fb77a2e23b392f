"""``kldtui plan``: how many windows a comparison needs, before capturing them.

From a pilot (two reports over a few windows: ``kldtui plan A.json B.json``) or from figures
(``kldtui plan --difference D --window-sd S``): the windows that would resolve the difference at
the asked power, with the verdict's own test (kldtui.decide.windows_needed). Of two reports of a
hidden-state suite it counts, and says, source clusters, the unit diff's and the leaderboard's verdicts
count there (contexts of one source are not independent evidence); from figures, windows.
"""

from __future__ import annotations

import argparse

# static, so true of both kinds of suite (the count of two reports says their unit: need.unit)
HELP = ("how many windows (source clusters of a hidden-state suite) would tell two candidates apart at 80 "
        "percent power: from two pilot reports, or from an expected difference and its window-to-window "
        "spread")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="*", metavar="REPORT.json",
                        help="two pilot comparison reports (same reference and suite), A then B")
    parser.add_argument("--difference", type=float, metavar="KL",
                        help="without reports: the mean KL difference per window (source cluster) to resolve")
    parser.add_argument("--window-sd", type=float, metavar="KL",
                        help="without reports: its standard deviation between windows (source clusters)")
    parser.add_argument("--repeat-variation", type=float, default=0.0, metavar="KL",
                        help="without reports: how far the metric moves between two captures of one model "
                             "(from kldtui noise; default 0)")
    floor = parser.add_mutually_exclusive_group()
    floor.add_argument("--noise", metavar="NOISE.json", help="with reports: the noise model (kldtui noise)")
    floor.add_argument("--no-noise-floor", action="store_true", help="with reports: use no noise model")
    parser.add_argument("--power", type=float, default=0.8, help="the chance to resolve it (default 0.8)")
    parser.add_argument("--candidates", type=int, default=2, metavar="K",
                        help="candidates ranked together (the leaderboard tests all K(K-1)/2 pairs; "
                             "default 2)")
    parser.add_argument("--suite-windows", type=int, metavar="N",
                        help="windows (a hidden-state suite: source clusters) the suite has (to say "
                             "whether it is enough)")


def run(args: argparse.Namespace) -> int:
    import math

    from kldtui.decide.windows_needed import for_reports, windows_for
    from kldtui.errors import BadInput
    from kldtui.text import kldtui_command, plain_number, plural

    if not 0.5 <= args.power < 1.0:
        raise BadInput(f"--power {args.power} is not between 0.5 and 1 (0.8: four times in five)")
    if args.candidates < 2:
        raise BadInput(f"--candidates {args.candidates}: at least 2 candidates are compared")
    comparisons = args.candidates * (args.candidates - 1) // 2
    by_figures = args.difference is not None or args.window_sd is not None
    if args.reports and by_figures:
        raise BadInput("give two pilot reports, or --difference and --window-sd, not both")
    if args.reports:
        from kldtui.cli.commands.diff import one_report

        # a run's work folder stands for its report, as for diff; a campaign's folder: which two
        args.reports = [one_report(p) for p in args.reports]
        if len(args.reports) != 2:
            raise BadInput(f"kldtui plan takes two pilot reports (A and B), not {len(args.reports)} "
                           f"({', '.join(args.reports)}); give A.json B.json")
        from kldtui.decide.noise import resolve_floor
        from kldtui.decide.paired import suite_hash_of
        from kldtui.decide.reports import check_same_suite
        from kldtui.formats.report import load_report

        a, b = (load_report(p) for p in args.reports)
        check_same_suite(a, b, args.reports[0], args.reports[1])
        noise = resolve_floor(args.noise, suite_hash_of(a, b)) if not args.no_noise_floor else None
        # a hidden-state suite's over its source clusters, as diff's and the leaderboard's verdicts count
        need = for_reports(a, b, noise, power=args.power, comparisons=comparisons, by_source_cluster=True)
        unit = need.unit  # the reports' (window), or source cluster, as the count below says it
        if unit == a.unit:
            counted, spread = plural(need.measured_windows, unit), f"{unit}-to-{unit} standard deviation"
        else:  # source clusters: how many contexts they hold, and the spread between clusters' means
            counted = f"{plural(need.measured_windows, unit)} ({plural(len(a.per_window), a.unit)})"
            spread = f"standard deviation between {unit}s"
        print(f"pilot: {counted}; B - A = {plain_number(need.difference)} KL per {unit}, {spread} "
              f"{plain_number(need.window_sd)}"
              + (f"; repeat variation {plain_number(need.margin)}" if need.margin else ""))
    else:
        if args.difference is None or args.window_sd is None:
            raise BadInput(f"give two pilot reports ({kldtui_command()} plan A.json B.json), or both "
                           "--difference and --window-sd")
        for name, value in (("--difference", args.difference), ("--window-sd", args.window_sd),
                            ("--repeat-variation", args.repeat_variation)):
            if not math.isfinite(value) or (value < 0 and name != "--difference"):
                raise BadInput(f"{name} {value} is not a finite KL >= 0")
        need = windows_for(args.difference, args.window_sd, margin=args.repeat_variation, power=args.power,
                           comparisons=comparisons)
    print(need.words(suite_windows=args.suite_windows))
    return 0 if need.windows is not None else 1
