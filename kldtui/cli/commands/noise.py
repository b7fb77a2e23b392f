"""``kldtui noise RUN1 RUN2 --output FLOOR.json``: the runtime noise floor of one model.

RUN1 and RUN2 are two finalized capture folders of the same model (same flags, same suite):
they are compared (RUN1 as the reference, RUN2 as the candidate, reverse KL too) and the floor
is stored. Instead of folders, RUN1 may be a saved comparison report of RUN2 against RUN1 (and
RUN2, optionally, the report of the opposite direction).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HELP = ("runtime noise floor from two captures of the same model (two finalized run folders, or "
        "their saved comparison report); stores it for diff and leaderboard")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run1", metavar="RUN1", help="finalized capture folder (or a comparison report "
                        "of RUN2 against RUN1)")
    parser.add_argument("run2", metavar="RUN2", nargs="?",
                        help="second finalized capture folder of the same model (or the reverse report)")
    parser.add_argument("--output", "-o", required=True, metavar="FLOOR.json",
                        help="where to store the floor")
    parser.add_argument("--suite-manifest", metavar="FILE", help="suite-manifest.json (with run folders)")
    parser.add_argument("--start-window", type=int, default=0, help="first window (default 0)")
    parser.add_argument("--stop-window", type=int, default=None,
                        help="stop before this window (default: all)")
    parser.add_argument("--report", metavar="OUT.json", help="also save the comparison report (run folders)")
    parser.add_argument("--no-reverse", action="store_true",
                        help="forward KL only (default: also KL(RUN2 || RUN1), in the same pass)")


def run(args: argparse.Namespace) -> int:
    from kldtui.decide.noise import NoiseFloor, floor_from_report_files, measure_floor, save_floor
    from kldtui.errors import BadInput

    def done(floor: NoiseFloor) -> int:
        save_floor(args.output, floor)
        rev = f", reverse {floor.kl_reverse_mean:.6g}" if floor.kl_reverse_mean is not None else ""
        print(f"noise floor: mean repeat KL {floor.kl_mean:.6g}{rev} over {len(floor.per_window)} windows; "
              f"threshold {floor.threshold:.6g}")
        print(f"wrote {args.output}")
        return 0

    if not Path(args.run1).is_dir():
        if args.report or args.suite_manifest:
            raise BadInput(f"{args.run1} is a report file: --report and --suite-manifest apply to two run "
                           "folders only")
        return done(floor_from_report_files(args.run1, args.run2))
    if not args.run2 or not Path(args.run2).is_dir():
        raise BadInput(f"{args.run1} is a run folder: give RUN2, the second finalized capture folder of the "
                       "same model")
    if not args.suite_manifest:
        raise BadInput("--suite-manifest is required to compare two run folders")
    from kldtui.cli.batch_reporter import BatchReporter, run_headless

    def job(emit: Any, cancel: Any) -> int:
        floor, _ = measure_floor(args.suite_manifest, args.run1, args.run2, start_window=args.start_window,
                                 stop_window=args.stop_window, reverse=not args.no_reverse,
                                 report_path=args.report, emit=emit, cancel=cancel)
        return done(floor)

    return run_headless(job, BatchReporter(sys.stderr))
