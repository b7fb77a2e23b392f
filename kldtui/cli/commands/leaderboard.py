"""``kldtui leaderboard REPORT...``: candidates ranked by mean KL with intervals, ties marked."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Literal

from kldtui.cli.commands.diff import add_decision_arguments, check_decision_arguments

if TYPE_CHECKING:
    from kldtui.text import BarAxis

HELP = ("rank comparison reports (same reference and suite) by mean KL with 95 percent intervals; "
        "those not distinguishable from the best by the paired test are marked tied")


OUTPUT_FLAG = "--output"  # the export's file flag, also -o: a line about it names the one typed


class _OutputFile(argparse.Action):
    """``-o``/``--output FILE``, keeping the spelling typed (``args.output_flag``), so that every line
    about the file names the flag the user gave."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.output_flag = option_string or OUTPUT_FLAG


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="comparison reports, or work folders holding them (a campaign's: every "
                             "candidate's)")
    add_decision_arguments(parser)
    parser.add_argument("--json", metavar="OUT.json",
                        help="also write the leaderboard as JSON (atomically; the name ends in .json)")
    parser.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    parser.add_argument("--format", choices=EXPORT_FORMATS, default=None,
                        help="write the leaderboard for publishing instead of the table: a Markdown table "
                             "for a model card, CSV, or llama.cpp perplexity's --kl-divergence statistics")
    parser.set_defaults(output_flag=OUTPUT_FLAG)
    parser.add_argument("-o", OUTPUT_FLAG, metavar="FILE", action=_OutputFile,
                        help="write the export to FILE (atomically) instead of stdout; without --format, "
                             "FILE's name says which (.md or .markdown: markdown, .csv: csv); a name "
                             "saying another format than --format's (or .json, --json's) is refused")


# kldtui.decide.exports.FORMATS (spelt here so `kldtui --help` imports no NumPy; a test ties them)
EXPORT_FORMATS = ("markdown", "csv", "llama-cpp")


def _bar_axis(board: Any) -> BarAxis:
    """The axis every row's interval bar is drawn on (the footer names it)."""
    from kldtui.formats.report_names import interval_rests_on_too_few
    from kldtui.text import bar_axis

    few = interval_rests_on_too_few(board.windows)  # then no row's interval is shown, only its mean
    return bar_axis([v for r in board.rows for v in ((r.mean,) if few else (r.ci_low, r.mean, r.ci_high))])


def _cells(board: Any, bar_width: int = 24) -> list[list[str]]:
    from kldtui.formats.report_names import interval_rests_on_too_few, too_few_text
    from kldtui.text import ASCII_BAR, interval_bar, interval_ends, signed_table_figure, table_figure

    few = interval_rests_on_too_few(board.windows)  # then no row's interval is shown, only its mean
    # the same of the verdicts' units (a hidden-state suite's source clusters: fewer than its contexts)
    few_tied = interval_rests_on_too_few(board.units_tied_over)
    axis = _bar_axis(board)
    out = []
    for r in board.rows:
        if r.diff_vs_best is None:
            vs = "-"
        elif not r.diff_vs_best.shows_interval or few_tied:  # too few, or an end not a finite number
            vs = f"{signed_table_figure(r.diff_vs_best.estimate)} (estimate only)"
        else:
            vs = f"+{r.diff_vs_best.text()}".replace("+-", "-")
        if r.provisional:
            vs += " (provisional)"
        interval = (too_few_text(board.windows, short=True, unit=board.unit) if few
                    else interval_ends(r.ci_low, r.ci_high, table_figure))
        bar = interval_bar(None if few else r.ci_low, None if few else r.ci_high, r.mean, axis, bar_width,
                           ASCII_BAR)
        out.append([str(r.rank), r.name, table_figure(r.mean), interval, bar, vs, r.mark])
    return out


HEADERS = ["#", "candidate", "mean KL", "95% interval", "interval", "vs best (paired, 95%)", "tie"]


def format_plain(board: Any) -> str:
    rows = [HEADERS] + _cells(board)
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines + _footer(board))


def _footer(board: Any) -> list[str]:
    from kldtui.decide.leaderboard import marks_legend
    from kldtui.text import plural

    units = f"{board.tie_unit}s"  # what the verdicts count (a hidden-state suite's source clusters)
    # the test behind "vs best" and the tie marks is the ties note's, below: said there once, in full
    lines = ["", f"{plural(board.windows, board.unit)}; mean KL intervals: each report's headline interval "
             f"(docs/STATISTICS.md), drawn on a {_bar_axis(board).words()}; paired on: "
             f"{board.pairing_checked}",
             f"noise model: {board.noise_source}"]
    if len(board.rows) > 1:
        lines.append(marks_legend(board.tie_unit))
    deterministic = bool(board.noise_floor) and board.noise_floor.get("kind") == "deterministic"
    if any(r.provisional for r in board.rows) and deterministic:
        # kldtui.decide.noise.deterministic_floor: no capture can measure what does not move
        lines.append(f"provisional: the difference is shown over these {units}; the server answered two "
                     "captures of one model identically (deterministic), so there is no variation between "
                     "captures to hold it against, and capturing again gives the same")
    elif any(r.provisional for r in board.rows):
        # with a one-repeat model the step left is a third capture, not "measure the noise"
        lines.append(f"provisional: the difference is shown over these {units}, but not yet against how much "
                     "a whole capture's KL moves between captures of one model (three or more captures of "
                     "one candidate given to kldtui noise measure it)")
    return lines + [f"note: {n}" for n in board.notes]


def print_rich(board: Any) -> None:
    """A rich table; the interval bar shrinks (or goes) on a narrow terminal, and below that the
    plain layout is printed."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cells = _cells(board, 24)
    widths = [max(len(row[i]) for row in [HEADERS] + cells) + 3 for i in range(len(HEADERS))]
    base = sum(widths) - widths[4] + 1  # each column: text, 2 padding, 1 border; plus the last border
    columns = list(range(len(HEADERS)))
    if console.width - base >= 13:
        cells = _cells(board, min(24, console.width - base - 3))
    elif console.width >= base:
        columns.remove(4)
    else:
        print(format_plain(board))
        return
    table = Table(title="leaderboard: KL(reference || candidate), lower is closer")
    for i in columns:
        justify: Literal["right", "left"] = "right" if HEADERS[i] in ("#", "mean KL") else "left"
        table.add_column(HEADERS[i], justify=justify, no_wrap=True)
    for row in cells:
        style = "bold green" if row[-1] == "best" else ("yellow" if row[-1] == "tied" else None)
        table.add_row(*(row[i] for i in columns), style=style)
    console.print(table)
    for line in _footer(board):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.view import gathered_reports, use_folder_noise_model
    from kldtui.decide.exports import export_table, leaderboard_document, windows_lines
    from kldtui.decide.leaderboard import build_leaderboard
    from kldtui.decide.noise import resolve_floor
    from kldtui.decide.paired import suite_hash_of
    from kldtui.folder_lock import check_json_output, check_output_file, distinct_outputs, hold
    from kldtui.formats.atomic import write_json_atomic
    from kldtui.formats.safe_io import check_output
    from kldtui.workflow.owners import with_whose

    check_decision_arguments(args)
    # the arguments first: nothing read or said (a folder's noise model) before they hold
    distinct_outputs({"--json": args.json, args.output_flag: args.output})
    if args.output is not None:
        args.format = export_format(args.output, args.format, args.output_flag)
    if args.json is not None:  # written as JSON whatever its name
        check_json_output(args.json, "JSON leaderboard")
    if args.output is not None:
        check_output_file(args.output)
    paths, reports = gathered_reports(list(args.reports), "leaderboard")  # folders: their reports
    use_folder_noise_model(args, suite_hash_of(*reports))  # a folder's, of the reports' suite
    args.reports = paths
    check_output(args.json, [*args.reports, args.noise], "--json")
    check_output(args.output, [*args.reports, args.noise], args.output_flag)
    outputs = [f for f in (args.json, args.output) if f]
    with hold(files=outputs):  # a bad --json or --output path: refused before the work
        noise = resolve_floor(args.noise, suite_hash_of(*reports)) if not args.no_noise_floor else None
        # whose run each report is, as its folder's profiles.json records it (read only)
        board = with_whose(build_leaderboard(reports, paths=list(args.reports),
                                             samples=args.bootstrap_samples, seed=args.seed, noise=noise))
        table = export_table(board, reports, paths=args.reports, noise=noise)
        if args.format is not None:
            _export(table, args)
        else:
            if sys.stdout.isatty() and not args.plain:
                print_rich(board)
            else:
                print(format_plain(board))
            for line in windows_lines(table):
                print(f"{board.tie_unit}s needed: {line}")
        if args.json:
            write_json_atomic(args.json, leaderboard_document(board, table))
            print(f"wrote {args.json}")
    return 0


def export_format(output: str, given: str | None, flag: str = OUTPUT_FLAG) -> str:
    """The export ``--output output`` gets: ``given`` (--format), else the one its name says
    (:func:`kldtui.decide.exports.format_named_by`). BadInput (one line naming the file and what to
    do, ``flag`` as the user typed it: ``-o`` or ``--output``) when the name says none and none is
    given, or says another format than ``given`` (``.json``: ``--json``'s JSON leaderboard)."""
    import os

    from kldtui.decide.exports import EXPORTS, format_named_by
    from kldtui.errors import BadInput

    named = format_named_by(output)
    suffix = os.path.splitext(output)[1]
    if given is None and suffix.lower() == ".json":
        raise BadInput(f"{output}: a .json file is the JSON leaderboard: give --json {output} "
                       f"instead of {flag}")
    if given is None:
        if named is None:
            said = "; ".join(f"{' or '.join(f.suffixes)}: {name}" for name, f in EXPORTS.items()
                             if f.suffixes)
            raise BadInput(f"{output}: the name does not say which export to write ({said}); give --format "
                           f"{', '.join(EXPORT_FORMATS[:-1])} or {EXPORT_FORMATS[-1]}")
        return named
    own = EXPORTS[given].suffixes
    others = [s for f in EXPORTS.values() if f.suffixes != own for s in f.suffixes] + [".json"]
    rename = (f"{flag} a name ending in {' or '.join(own)}" if own
              else f"{flag} a name ending in none of {', '.join(others[:-1])} or {others[-1]}")
    if suffix.lower() == ".json":
        raise BadInput(f"{output}: a .json file is --json's JSON leaderboard, not --format {given}; "
                       f"give {rename}")
    if named is not None and named != given:
        raise BadInput(f"{output}: a {suffix} file is {named}, not --format {given}; give --format {named}, "
                       f"or {rename}")
    return given


def _export(table: Any, args: argparse.Namespace) -> None:
    """The leaderboard as --format says, to stdout or --output."""
    from kldtui.decide.exports import render
    from kldtui.formats.atomic import atomic_open

    text = render(table, args.format)
    if args.output is None:
        sys.stdout.write(text)
        return
    with atomic_open(args.output, "w") as out:
        out.write(text)
    print(f"wrote {args.output}", file=sys.stderr)
