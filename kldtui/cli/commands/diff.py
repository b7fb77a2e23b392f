"""``kldtui diff A.json B.json``: paired, window-clustered comparison of two candidates."""

from __future__ import annotations

import argparse
from typing import Any

from kldtui.text import interval_ends, plain_number, plural, signed_table_figure, table_figure

# static, so true of both kinds of suite: a hidden-state suite's windows are its contexts (PairedDiff.unit)
HELP = ("paired comparison of two candidates' reports (same reference and suite): B - A per window (per "
        "context of a hidden-state suite), 95 percent paired interval over them, verdict against the "
        "measured repeat variation")


def add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    """Bootstrap and noise-floor flags shared by ``diff`` and ``leaderboard``."""
    parser.add_argument("--bootstrap-samples", type=int, default=10_000, metavar="N",
                        help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=1, help="bootstrap seed (default 1)")
    floor = parser.add_mutually_exclusive_group()
    floor.add_argument("--noise", metavar="NOISE.json",
                       help="noise model from kldtui noise (default: the published repeat KL for the Kimi K3 "
                            "suite, else none)")
    floor.add_argument("--no-noise-floor", action="store_true",
                       help="use no noise model (differences are named, marked provisional)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report_a", metavar="A.json", help="comparison report of candidate A (or its run's "
                                                        "work folder)")
    parser.add_argument("report_b", metavar="B.json", help="comparison report of candidate B (or its run's "
                                                        "work folder)")
    add_decision_arguments(parser)
    parser.add_argument("--json", metavar="OUT.json",
                        help="also write the result as JSON (atomically; the name ends in .json)")
    parser.add_argument("--per-window", action="store_true",
                        help="also print every window's difference (a hidden-state suite's: every context's)")


# the outcome table's verdict column; ``{unit}``: what the suite's units are called (PairedDiff.unit)
SHORT = {"a_closer": "A closer", "b_closer": "B closer", "within_noise": "within repeat variation",
         "indistinguishable": "no difference shown", "too_few_windows": "too few {unit}s",
         "cannot_calibrate": "cannot be calibrated here", "no_finite_interval": "no finite interval"}


def _cells(label: str, s: Any, unit: str) -> tuple[str, ...]:
    """One row of the outcome table: its group's name, count, means, interval, ratio and verdict."""
    ratio = s.mean_b / s.mean_a if s.mean_a > 0 else float("nan")
    ratio_text = plain_number(ratio) if ratio == ratio else "n/a (a mean of 0)"
    call = SHORT.get(s.outcome, s.outcome).format(unit=unit) + (" (provisional)" if s.provisional else "")
    return (label, str(s.windows), table_figure(s.mean_a), table_figure(s.mean_b), s.interval.text(),
            ratio_text, call)


def _outcome_table(result: Any, unit: str) -> list[str]:
    """The outcome table, its heading first: each column as wide as its widest cell (at least the
    usual widths), so that a domain's name longer than 14 characters (a hidden-state suite's
    ``code_tests_documentation_issues``), an interval in exponent notation or a ratio of n/a moves no
    row's later columns out of line."""
    rows = [_cells(label, s, unit) for label, s in [("all", result.overall), *result.domains.items()]]
    name_w = max([14, *(len(r[0]) + 2 for r in rows)])  # two blanks after the longest name
    count_w = _count_width(unit)
    interval_w = max([34, *(len(r[4]) for r in rows)])
    ratio_w = max([8, *(len(r[5]) for r in rows)])

    def line(cells: tuple[str, ...]) -> str:
        name, count, a, b, interval, ratio, call = cells
        return (f"{name:<{name_w}}{count:>{count_w}}  {a:>10}  {b:>10}  {interval:<{interval_w}}  "
                f"{ratio:<{ratio_w}}  {call}")

    heading = ("", f"{unit}s", "mean KL A", "mean KL B", "B - A [95% interval]", "B / A", "verdict")
    return [line(cells) for cells in (heading, *rows)]


def _count_width(unit: str) -> int:
    """The outcome table's count column: as wide as its heading (``windows``, ``contexts``)."""
    return len(f"{unit}s")


def _bucket(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "-"
    return table_figure(value) + (f" {interval_ends(low, high, table_figure)}" if low is not None
                                  and high is not None else "")


def _interval_sources(result: Any, weighted: bool) -> list[str]:
    """The rows whose interval is not the plain sign-flip test's, and what it is (docs/STATISTICS.md rule
    4): those whose sign-flip test weighed the windows (``weighted``), or the others."""
    from kldtui.decide.verdict import interval_source_words

    groups = [("all", result.overall), *result.domains.items()]
    said = [(label, interval_source_words(s.interval.interval_source, result.unit)) for label, s in groups
            if (s.interval.interval_source == "weighted_sign_flip") == weighted]
    return [f"{label}: {words}" for label, words in said if words is not None]


def format_diff(result: Any, per_window: bool = False) -> str:
    """The text ``kldtui diff`` prints, counting the suite's units (:attr:`PairedDiff.unit`: a
    hidden-state suite's contexts)."""
    other_sources = _interval_sources(result, weighted=False)
    weighted_sources = _interval_sources(result, weighted=True)
    unit = result.unit
    lines = [
        f"A: {result.name_a}" + (f"  ({result.path_a})" if result.path_a else ""),
        f"B: {result.name_b}" + (f"  ({result.path_b})" if result.path_b else ""),
        f"paired on: {result.pairing_checked}; {plural(len(result.window_index), unit)}; 95 % intervals: "
        f"sign-flip test over {unit}s (mean(B) / mean(A), shown as B - A at A's mean)"
        + (", except the rows named below the table" if other_sources or weighted_sources else "")
        + "; verdicts held together by Holm",
        f"noise model: {result.noise_source}",
        "",
        *_outcome_table(result, unit),
    ]
    if weighted_sources:
        lines.append("intervals of a weighted sign-flip test: " + "; ".join(weighted_sources))
    if other_sources:
        lines.append(f"intervals where the candidates depend differently on {unit} difficulty (the sign-flip "
                     f"test's alone would miss the hardest {unit}s): " + "; ".join(other_sources))
    if result.figures:
        lines += ["", f"other figures, A and B (B - A: mean of the per-{unit} differences, 95 % interval "
                  f"over {unit}s by the sign-flip test):"]
        for f in result.figures:
            measure = f" {f.unit}" if f.unit else ""  # the figure's own unit (%, nats)
            interval = (f" {interval_ends(f.ci95_low, f.ci95_high, signed_table_figure)}"
                        if f.ci95_low is not None and f.ci95_high is not None else "")
            lines.append(f"  {f.label:<16} A {table_figure(f.a)}  B {table_figure(f.b)}{measure}  "
                         f"B - A {signed_table_figure(f.difference)}{interval}"
                         + (f" ({f.better} is better)" if f.better else ""))
    for kind, title in (("reference_confidence", "KL by reference confidence"),
                        ("depth", f"KL by depth in the {unit} (positions)")):
        rows = [x for x in result.buckets if x.kind == kind]
        if rows:
            lines += ["", f"{title}, A and B (each with its own {unit}-clustered 95 % interval; not paired):"]
            lines += [f"  {x.label:<12} A {_bucket(x.a, x.a_low, x.a_high):<28}  B "
                      f"{_bucket(x.b, x.b_low, x.b_high)}" for x in rows]
    if per_window:
        width = max(6, len(unit))  # a window index's column: as wide as its heading
        domain_w = max([12, *(len(d) for d in result.domain)])  # as wide as the longest domain's name
        lines += ["", f"{unit:>{width}}  {'domain':<{domain_w}}  {'KL A':>10}  {'KL B':>10}  {'B - A':>11}"]
        n = len(result.window_index)
        inf_a = result.infinite_a or [0] * n
        inf_b = result.infinite_b or [0] * n
        for i, (w, d, a, b) in enumerate(zip(result.window_index, result.domain, result.kl_a, result.kl_b,
                                             strict=True)):
            infinite = "".join(f"  {name}: {k} positions with infinite KL (left out)"
                               for name, k in (("A", inf_a[i]), ("B", inf_b[i])) if k)
            lines.append(f"{w:>{width}}  {d:<{domain_w}}  {table_figure(a):>10}  {table_figure(b):>10}  "
                         f"{signed_table_figure(b - a):>11}{infinite}")
    clustered = result.clustered
    if clustered is not None:
        iv = clustered.interval
        why = iv.no_interval_reason("source cluster")
        how = "95 %, the verdict's rule over source clusters" if why is None else f"no interval: {why}"
        lines += ["", f"clustered by source ({clustered.partition} partition): {clustered.contexts} contexts "
                      f"in {clustered.clusters} source clusters; B - A {iv.text()} ({how}); B wins "
                      f"{clustered.wins['b']} contexts, A wins {clustered.wins['a']}"]
    lines += [""] + [f"note: {n}" for n in result.notes]
    lines.append(f"verdict: {result.verdict}")
    return "\n".join(lines)


def check_decision_arguments(args: argparse.Namespace) -> None:
    """The bootstrap flags' values, before any report is read (one line, exit 2)."""
    from kldtui import bounds

    bounds.bootstrap_samples(args.bootstrap_samples, "--bootstrap-samples")
    bounds.seed(args.seed, "--seed")


def one_report(path: str) -> str:
    """A report file, or a run's work folder for its ``comparison.json`` (as ``view`` and ``leaderboard``
    take one); a campaign's folder holds several, so one must be named (BadInput, one line: the
    candidates' report files, each as it can be given, and the stray ``comparison-*.json`` left out, so
    the count matches what the folder shows). A campaign folder's reports that are not its candidates'
    are named on stderr, as view and leaderboard name them."""
    from kldtui.cli.commands.view import said_left_out
    from kldtui.errors import BadInput
    from kldtui.formats.report_names import folder_reports

    folder = folder_reports(path)
    found = folder.reports
    if len(found) > 1:
        stray = folder.left_out_words()
        raise BadInput(f"{path}: a campaign's work folder holds {len(found)} reports "
                       f"({', '.join(str(f) for f in found)}); give the two to compare by file"
                       + (f"; {stray}" if stray else ""))
    return str(said_left_out(folder, path)[0])


def run(args: argparse.Namespace) -> int:
    from kldtui.decide.noise import resolve_floor
    from kldtui.decide.paired import paired_diff, suite_hash_of
    from kldtui.decide.windows_needed import UNRESOLVED, for_reports
    from kldtui.folder_lock import check_json_output, hold
    from kldtui.formats.atomic import write_json_atomic
    from kldtui.formats.report import load_report
    from kldtui.formats.safe_io import check_output

    check_decision_arguments(args)
    if args.json is not None:  # written as JSON whatever its name: refused before a report is read
        check_json_output(args.json, "JSON result")
    args.report_a, args.report_b = one_report(args.report_a), one_report(args.report_b)
    check_output(args.json, [args.report_a, args.report_b, args.noise], "--json")
    with hold(files=[args.json] if args.json else []):  # a bad --json path: refused before the work
        a, b = load_report(args.report_a), load_report(args.report_b)
        noise = resolve_floor(args.noise, suite_hash_of(a, b)) if not args.no_noise_floor else None
        result = paired_diff(a, b, samples=args.bootstrap_samples, seed=args.seed, noise=noise,
                             path_a=args.report_a, path_b=args.report_b)
        print(format_diff(result, per_window=args.per_window))
        # where the verdict leaves the difference unresolved, in its unit: a hidden-state suite's source
        # clusters (the clustered verdict's outcome and count, as the leaderboard's), else the windows
        clustered = result.clustered is not None
        need = (for_reports(a, b, noise, by_source_cluster=clustered) if result.outcome in UNRESOLVED
                else None)
        if need is not None:
            print(f"{need.unit}s needed: {need.words()}")
        if args.json:
            doc = result.to_dict()
            doc["windows_needed"] = need.to_dict() if need is not None else None
            write_json_atomic(args.json, doc)
            print(f"wrote {args.json}")
    return 0
