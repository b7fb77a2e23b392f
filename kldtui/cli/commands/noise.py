"""``kldtui noise``: how much the metric moves between captures of one model, stored for verdicts.

The measured noise model (docs/STATISTICS.md): captures of one candidate, each compared with the
reference. How their window means of KL against the reference move is the *repeat variation of the
metric*, the quantity ``diff`` and ``leaderboard`` hold B - A against: per window, and capture-wide
(an offset shared by every window of a capture), which needs three captures or more (one repeat
cannot tell it from a real difference; such a model says so and verdicts stay provisional)::

    kldtui noise CAPTURE1.json CAPTURE2.json [CAPTURE3.json ...] --output noise.json   # reports
    kldtui noise RUN1 RUN2 [RUN3 ...] --suite-manifest M --reference REF -o noise.json  # capture folders

Captures that came out identical are a deterministic server's, written as a noise model of kind
``deterministic`` (nothing to measure; verdicts stay provisional saying so), when each folder records
a server start of its own, and refused otherwise (the same folder, a copy): ``decide.noise.one_capture``.

The repeat KL between the two captures (the seed's figure) comes along with ``--repeat-report``
(a report of capture 2 against capture 1) or from folders. The seed's form, one report of RUN2
against RUN1 (optionally a second of RUN1 against RUN2), still stores a repeat KL only; a report of
the reference against a candidate (different models), or one whose two sides were replayed with
different LM heads (``decide.noise.different_heads``: an earlier version's repeat of hidden-state
captures), is refused as a repeat capture unless ``--allow-different-models``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport

HELP = ("noise model from captures of one candidate: how much its mean KL against the reference moves "
        "between captures (reports, or run folders with --reference; three or more also measure the "
        "capture-wide variation); stored for diff and leaderboard")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run1", metavar="FIRST", help="comparison report of capture 1 against the reference "
                        "(or a finalized capture folder, or a report of RUN2 against RUN1)")
    parser.add_argument("run2", metavar="SECOND", nargs="?",
                        help="comparison report of capture 2 against the same reference (or the second "
                             "capture folder, or the reverse repeat report)")
    parser.add_argument("more", metavar="MORE", nargs="*",
                        help="further captures of the same candidate (reports against the same reference, "
                             "or capture folders): with three captures or more the capture-wide variation "
                             "is measured too")
    parser.add_argument("--output", "-o", required=True, metavar="NOISE.json",
                        help="where to store the noise model (JSON: the name ends in .json)")
    parser.add_argument("--repeat-report", metavar="REPORT.json",
                        help="with two reports: a report of capture 2 against capture 1, for the repeat KL")
    parser.add_argument("--reference", metavar="DIR",
                        help="with two run folders: the reference, to measure the repeat variation of "
                             "the metric")
    parser.add_argument("--allow-different-models", action="store_true",
                        help="accept captures that look like different models (a reference against a "
                             "candidate, a report whose sides were replayed with different LM heads) "
                             "as repeat captures")
    parser.add_argument("--suite-manifest", metavar="FILE", help="suite-manifest.json (with run folders)")
    parser.add_argument("--start-window", type=int, default=0,
                        help="first window (a hidden-state suite: context) of the range (default 0)")
    parser.add_argument("--stop-window", type=int, default=None,
                        help="stop before this window (context) (default: all)")
    parser.add_argument("--report", metavar="OUT.json",
                        help="also save the comparison report (run folders; JSON: the name ends in .json)")
    parser.add_argument("--no-reverse", action="store_true",
                        help="forward KL only (default: also KL(RUN2 || RUN1), in the same pass)")


def _is_mirror(first: ComparisonReport, second: ComparisonReport) -> bool:
    rf, cf = first.reference_dir, first.candidate_dir
    rs, cs = second.reference_dir, second.candidate_dir
    if not (rf and cf and rs and cs):
        return False
    return (os.path.normpath(rf), os.path.normpath(cf)) == (os.path.normpath(cs), os.path.normpath(rs))


def describe(model: Any, unit: str = "window") -> list[str]:
    """What ``kldtui noise`` prints about a stored model, its windows called ``unit``: the unit of the
    reports it was measured from (a hidden-state suite's are contexts; the stored model does not
    record it)."""
    from kldtui.decide.noise import DETERMINISTIC_REASON
    from kldtui.text import plural, precise_number

    if model.kind == "deterministic":
        return [f"noise model: {model.describe(unit)}",
                f"verdicts ranked with it stay provisional: {DETERMINISTIC_REASON}"]
    lines = []
    if model.repeat is not None:
        lines.append(f"repeat variation of the metric: {model.repeat.describe(unit)}")
    if model.per_window:
        reverse = model.kl_reverse_mean
        rev = f", reverse {precise_number(reverse)}" if reverse is not None else ""
        lines.append(f"repeat KL between the captures: mean {precise_number(model.kl_mean)}{rev} over "
                     f"{plural(len(model.per_window), unit)}")
    if not model.has_metric:
        lines.append("the repeat variation of the metric is not measured: give the reports of two or more "
                     "captures against the reference to measure it")
    return lines


def run(args: argparse.Namespace) -> int:
    from kldtui.folder_lock import check_json_output, distinct_outputs, hold
    from kldtui.formats.safe_io import check_output

    # the noise model and the report are written as JSON whatever their names: a name that says
    # otherwise is refused first, before anything is read
    check_json_output(args.output, "noise model")
    if args.report is not None:
        check_json_output(args.report, "comparison report")
    inputs = [args.run1, args.run2, args.repeat_report, args.reference, args.suite_manifest]
    distinct_outputs({"--output": args.output, "--report": args.report})
    check_output(args.output, inputs)
    check_output(args.report, inputs, "--report")
    # bad --output/--report paths are refused before the comparison runs; one writer per file
    with hold(files=[args.output] + ([args.report] if args.report else [])):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from kldtui.decide.noise import (
        alike_captures_floor,
        check_repeat_capture,
        different_models,
        floor_from_reports,
        measure_floor,
        noise_from_capture_reports,
        save_floor,
    )
    from kldtui.errors import BadInput
    from kldtui.formats.report import load_report

    def done(model: Any, unit: str) -> int:
        """Store ``model`` and say what it is, in ``unit`` s: the unit of the reports it came from."""
        if model.kind == "measured" and not model.has_metric and model.threshold <= 0:
            # a repeat KL of 0 in every window, both ways: the two captures gave identical logits, which
            # a deterministic server's two starts do and a copy does (one rule, as for reports)
            dirs = [model.run1, model.run2]
            model = alike_captures_floor(
                [str(d) for d in dirs] if all(dirs) else [args.run1, args.run2 or args.run1], dirs,
                suite_token_hash_sha256=model.suite_token_hash_sha256, reference_dir=None,
                alike=f"gave identical logits (KL 0 between them in every {unit})")
        save_floor(args.output, model)
        for line in describe(model, unit):
            print(line)
        print(f"wrote {args.output}")
        return 0

    allow = args.allow_different_models
    if not Path(args.run1).is_dir():
        if args.report or args.suite_manifest or args.reference:
            raise BadInput(f"{args.run1} is a report file: --report, --suite-manifest and --reference "
                           "apply to two run folders only")
        first = load_report(args.run1)
        if args.more:
            if args.run2 is None or Path(args.run2).is_dir() or any(Path(m).is_dir() for m in args.more):
                raise BadInput("give either reports or capture folders, not both")
            reports = [load_report(m) for m in args.more]
            repeat = load_report(args.repeat_report) if args.repeat_report else None
            return done(noise_from_capture_reports(first, load_report(args.run2), *reports, where1=args.run1,
                                                   where2=args.run2, where_more=args.more, repeat=repeat,
                                                   where_repeat=args.repeat_report or "",
                                                   allow_different_models=allow), first.unit)
        if args.run2 is None:
            if args.repeat_report:
                raise BadInput("--repeat-report goes with two reports of captures against the reference")
            check_repeat_capture(first, args.run1, allow)
            return done(floor_from_reports(first, None, source=f"report {args.run1}", where=args.run1),
                        first.unit)
        second = load_report(args.run2)
        if _is_mirror(first, second):
            check_repeat_capture(first, args.run1, allow)
            check_repeat_capture(second, args.run2, allow)  # replayed with its own two heads
            return done(floor_from_reports(first, second, source=f"report {args.run1} and {args.run2}",
                                           where=args.run1, where_reverse=args.run2), first.unit)
        repeat = load_report(args.repeat_report) if args.repeat_report else None
        return done(noise_from_capture_reports(first, second, where1=args.run1, where2=args.run2,
                                               repeat=repeat, where_repeat=args.repeat_report or "",
                                               allow_different_models=allow), first.unit)
    if not args.run2 or not Path(args.run2).is_dir() or not all(Path(m).is_dir() for m in args.more):
        raise BadInput(f"{args.run1} is a run folder: give SECOND (and any more), finalized capture "
                       "folders of the same model")
    if not args.suite_manifest:
        raise BadInput("--suite-manifest is required to compare run folders")
    if args.more and args.reference is None:
        raise BadInput("three or more capture folders need --reference (each capture is compared with it)")
    folders = [args.run1, args.run2, *args.more]
    if not allow:
        for i in range(len(folders)):
            for j in range(i + 1, len(folders)):
                why = different_models(folders[i], folders[j])
                if why:
                    raise BadInput(f"{folders[i]} and {folders[j]}: not shown to be captures of one model "
                                   f"({why}); add --allow-different-models if they really are")
    from kldtui.cli.batch_reporter import BatchReporter, run_headless
    from kldtui.servers.registry import process_signs

    signs = process_signs()  # the servers on this host whose GPUs the compare leaves alone

    def job(emit: Any, cancel: Any) -> int:
        floor, report = measure_floor(args.suite_manifest, args.run1, args.run2,
                                      start_window=args.start_window, stop_window=args.stop_window,
                                      reverse=not args.no_reverse, report_path=args.report,
                                      emit=emit, cancel=cancel, server_signs=signs)
        if args.reference is None:
            return done(floor, report.unit)
        from kldtui.stages.compare import BackendRequest, CompareOptions, compare

        options = CompareOptions(start_window=args.start_window, stop_window=args.stop_window,
                                 backend=BackendRequest(server_signs=signs))
        captures = [compare(args.suite_manifest, args.reference, f, options, emit, cancel) for f in folders]
        names = [f"{args.reference} vs {f}" for f in folders]
        return done(noise_from_capture_reports(*captures, where1=names[0], where2=names[1],
                                               where_more=names[2:], repeat=report,
                                               where_repeat=f"{args.run1} vs {args.run2}",
                                               allow_different_models=True), captures[0].unit)

    return run_headless(job, BatchReporter(sys.stderr))
