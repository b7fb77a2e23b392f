"""``kldtui noise``: how much the metric moves between two captures of one model, stored for verdicts.

The measured noise model (docs/STATISTICS.md): two captures of one candidate, each compared with
the reference. Their per-window difference of mean KL against the reference is the *repeat
variation of the metric*, the quantity ``diff`` and ``leaderboard`` hold B - A against::

    kldtui noise CAPTURE1.json CAPTURE2.json --output noise.json      # two reports against the reference
    kldtui noise RUN1 RUN2 --suite-manifest M --reference REF -o noise.json   # two capture folders

The repeat KL between the two captures (the seed's figure) comes along with ``--repeat-report``
(a report of capture 2 against capture 1) or from folders. The seed's form, one report of RUN2
against RUN1 (optionally a second of RUN1 against RUN2), still stores a repeat KL only; a report of
the reference against a candidate (different models) is refused as a repeat capture unless
``--allow-different-models``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport

HELP = ("noise model from two captures of one candidate: how much its mean KL against the reference moves "
        "between captures (two reports, or two run folders with --reference); stored for diff and "
        "leaderboard")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run1", metavar="FIRST", help="comparison report of capture 1 against the reference "
                        "(or a finalized capture folder, or a report of RUN2 against RUN1)")
    parser.add_argument("run2", metavar="SECOND", nargs="?",
                        help="comparison report of capture 2 against the same reference (or the second "
                             "capture folder, or the reverse repeat report)")
    parser.add_argument("--output", "-o", required=True, metavar="NOISE.json",
                        help="where to store the noise model")
    parser.add_argument("--repeat-report", metavar="REPORT.json",
                        help="with two reports: a report of capture 2 against capture 1, for the repeat KL")
    parser.add_argument("--reference", metavar="DIR",
                        help="with two run folders: the reference, to measure the repeat variation of "
                             "the metric")
    parser.add_argument("--allow-different-models", action="store_true",
                        help="accept captures that look like different models (a reference against a "
                             "candidate) as repeat captures")
    parser.add_argument("--suite-manifest", metavar="FILE", help="suite-manifest.json (with run folders)")
    parser.add_argument("--start-window", type=int, default=0, help="first window (default 0)")
    parser.add_argument("--stop-window", type=int, default=None,
                        help="stop before this window (default: all)")
    parser.add_argument("--report", metavar="OUT.json", help="also save the comparison report (run folders)")
    parser.add_argument("--no-reverse", action="store_true",
                        help="forward KL only (default: also KL(RUN2 || RUN1), in the same pass)")


def _is_mirror(first: ComparisonReport, second: ComparisonReport) -> bool:
    rf, cf = first.reference_dir, first.candidate_dir
    rs, cs = second.reference_dir, second.candidate_dir
    if not (rf and cf and rs and cs):
        return False
    return (os.path.normpath(rf), os.path.normpath(cf)) == (os.path.normpath(cs), os.path.normpath(rs))


def describe(model: Any) -> list[str]:
    """What ``kldtui noise`` prints about a stored model."""
    lines = []
    if model.has_metric:
        iv = model.metric_interval()
        lines.append(f"repeat variation of the metric: capture 2 - capture 1 mean KL against the reference = "
                     f"{iv.text('.3g')} (95 %) over {iv.windows} windows; diff and leaderboard hold B - A "
                     f"against {model.repeat_variation_for([]):.3g}")
    if model.per_window:
        rev = f", reverse {model.kl_reverse_mean:.6g}" if model.kl_reverse_mean is not None else ""
        lines.append(f"repeat KL between the captures: mean {model.kl_mean:.6g}{rev} over "
                     f"{len(model.per_window)} windows")
    if not model.has_metric:
        lines.append("the repeat variation of the metric is not measured: give two reports of two captures "
                     "against the reference to measure it")
    return lines


def run(args: argparse.Namespace) -> int:
    from kldtui.folder_lock import hold
    from kldtui.formats.safe_io import check_output

    inputs = [args.run1, args.run2, args.repeat_report, args.reference, args.suite_manifest]
    check_output(args.output, [*inputs, args.report])
    check_output(args.report, inputs, "--report")
    # bad --output/--report paths are refused before the comparison runs; one writer per file
    with hold(files=[args.output] + ([args.report] if args.report else [])):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from kldtui.decide.noise import (
        check_repeat_capture,
        different_models,
        floor_from_reports,
        measure_floor,
        noise_from_capture_reports,
        save_floor,
    )
    from kldtui.errors import BadInput
    from kldtui.formats.report import load_report

    def done(model: Any) -> int:
        save_floor(args.output, model)
        for line in describe(model):
            print(line)
        print(f"wrote {args.output}")
        return 0

    allow = args.allow_different_models
    if not Path(args.run1).is_dir():
        if args.report or args.suite_manifest or args.reference:
            raise BadInput(f"{args.run1} is a report file: --report, --suite-manifest and --reference "
                           "apply to two run folders only")
        first = load_report(args.run1)
        if args.run2 is None:
            if args.repeat_report:
                raise BadInput("--repeat-report goes with two reports of captures against the reference")
            check_repeat_capture(first, args.run1, allow)
            return done(floor_from_reports(first, None, source=f"report {args.run1}", where=args.run1))
        second = load_report(args.run2)
        if _is_mirror(first, second):
            check_repeat_capture(first, args.run1, allow)
            return done(floor_from_reports(first, second, source=f"report {args.run1} and {args.run2}",
                                           where=args.run1, where_reverse=args.run2))
        repeat = load_report(args.repeat_report) if args.repeat_report else None
        return done(noise_from_capture_reports(first, second, where1=args.run1, where2=args.run2,
                                               repeat=repeat, where_repeat=args.repeat_report or "",
                                               allow_different_models=allow))
    if not args.run2 or not Path(args.run2).is_dir():
        raise BadInput(f"{args.run1} is a run folder: give SECOND, the second finalized capture folder of "
                       "the same model")
    if not args.suite_manifest:
        raise BadInput("--suite-manifest is required to compare two run folders")
    if not allow:
        why = different_models(args.run1, args.run2)
        if why:
            raise BadInput(f"{args.run1} and {args.run2} are not two captures of one model ({why}); add "
                           "--allow-different-models if that is really meant")
    from kldtui.cli.batch_reporter import BatchReporter, run_headless

    def job(emit: Any, cancel: Any) -> int:
        floor, report = measure_floor(args.suite_manifest, args.run1, args.run2,
                                      start_window=args.start_window, stop_window=args.stop_window,
                                      reverse=not args.no_reverse,
                                      report_path=args.report, emit=emit, cancel=cancel)
        if args.reference is None:
            return done(floor)
        from kldtui.stages.compare import CompareOptions, compare

        options = CompareOptions(start_window=args.start_window, stop_window=args.stop_window)
        first = compare(args.suite_manifest, args.reference, args.run1, options, emit, cancel)
        second = compare(args.suite_manifest, args.reference, args.run2, options, emit, cancel)
        return done(noise_from_capture_reports(first, second, where1=f"{args.reference} vs {args.run1}",
                                               where2=f"{args.reference} vs {args.run2}", repeat=report,
                                               where_repeat=f"{args.run1} vs {args.run2}",
                                               allow_different_models=True))

    return run_headless(job, BatchReporter(sys.stderr))
