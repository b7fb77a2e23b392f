"""How figures read, in one place: counts with their noun, byte amounts, percentages, top-1.

Every front end (the dashboard, ``--batch``, the viewer, the summaries) writes a figure of one kind
the same way: ``1 thread`` / ``2 threads``, ``3.99 MiB``, ``top-1 89.43 %``. Standard library only,
and nothing from kldtui: any layer may use it. So is how a command printed for the user to copy
writes each argument (:func:`shell_arg`) and names kldtui itself (:func:`kldtui_command`).
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

_IRREGULAR = {"was": "were", "is": "are", "it": "they", "this": "these", "has": "have"}


def plural(count: int | float, noun: str, many: str | None = None) -> str:
    """``count`` with its noun in the right number: ``1 window``, ``2 windows``, ``0 files``."""
    one = count == 1
    if many is None:
        many = _IRREGULAR.get(noun) or (noun + "es" if noun.endswith(("s", "sh", "ch", "x")) else noun + "s")
    shown = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{shown} {noun if one else many}"


# the magnitudes a figure reads in digits (0.000001 to 999,999); beyond, its digits would run on
# ("29400000000000000000000000000000000000 KL") and it reads in exponent form
PLAIN_RANGE = (1e-6, 1e6)


def plain_number(x: float, digits: int = 3) -> str:
    """A figure in sentences: ``digits`` significant digits (three unless told), in digits from
    0.000001 to 999,999 (0.00275, 0.000026, 1230), in exponent form beyond (2.94e+37, 1.59e-07), never
    fixed decimals that read 0.0000123 as 0.0000 or 1e29 in thirty digits; ``inf`` and ``nan`` as
    Python writes them (a sentence says in words what an infinite end means)."""
    value = float(x)
    if not math.isfinite(value):
        return str(value)
    rounded = f"{value:.{digits}g}"
    low, high = PLAIN_RANGE
    if value != 0 and not low <= abs(float(rounded)) < high:
        return rounded
    return format(Decimal(rounded), "f")


# how many significant digits a precise figure keeps: the text summary's (``kldtui view``, the end of
# a compare) and a perplexity ratio's, whose news is in its digits after 1.00 (1.00231)
PRECISE_DIGITS = 6


def precise_number(x: float) -> str:
    """A figure to :data:`PRECISE_DIGITS` significant digits, as :func:`plain_number` writes it:
    0.0512345, 1.00231, 0.0000123457, 1e+29, -0.25, ``inf``; the text summary's figures and a
    perplexity ratio."""
    return plain_number(x, PRECISE_DIGITS)


def _no_finite_end(low: float, high: float, shown: Callable[[float], str]) -> str | None:
    """An interval with an end that is not finite, that end in words; None when both are finite."""
    if math.isfinite(low) and math.isfinite(high):
        return None
    if math.isfinite(low):
        return f"from {shown(low)} with no finite upper end"
    if math.isfinite(high):
        return f"up to {shown(high)} with no finite lower end"
    return "with no finite end"


def interval_range(low: float, high: float, shown: Callable[[float], str] = plain_number) -> str:
    """``low to high`` in a sentence, each end ``shown``; an end that is not finite (it overflowed: KL
    over dozens of orders of magnitude) in words: ``from 0.2 with no finite upper end``, never
    ``0.2 to inf``."""
    return _no_finite_end(low, high, shown) or f"{shown(low)} to {shown(high)}"


def interval_ends(low: float, high: float, shown: Callable[[float], str] = plain_number) -> str:
    """``[low, high]`` beside a figure, each end ``shown``; an end that is not finite in the words of
    :func:`interval_range` (``from 0.2 with no finite upper end``, never ``[0.2, inf]`` or
    ``[0.2, n/a]``): the text summary (``kldtui view``), the viewer and the leaderboard's tables."""
    return _no_finite_end(low, high, shown) or f"[{shown(low)}, {shown(high)}]"


def table_figure(value: float | None) -> str:
    """A divergence (a mean KL, a JS) or an interval's end in a table's cell, "-" for none: four
    significant digits, three below 0.001 (the cell as wide as 0.001234's), so that a q8's 0.0001234
    keeps its digits (five fixed decimals read 0.00012 for anything from 0.000115 to 0.000125) and the
    figure reads as ``kldtui leaderboard`` prints it."""
    return _figure(value, "")


def signed_table_figure(value: float | None) -> str:
    """A signed figure (a mean change in a probability, Δp) in a table's cell or a pane, "-" for none:
    :func:`table_figure`'s digits with its sign always written (+0.0001234 reads +0.000123, -0.1 reads
    -0.1), not five fixed decimals that round a q8's -0.0000123 to -0.00001."""
    return _figure(value, "+")


def _figure(value: float | None, sign: str) -> str:
    """:func:`table_figure`'s rule, ``sign`` as the format spec's ("+": always written, "": for a minus)."""
    if value is None:
        return "-"
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:{sign}.3g}"
    return f"{value:{sign}.4g}"



# ---------------------------------------------------------------------------------- candidate names
# Quant names share their start and differ at their end ("Kimi-K3-Instruct-Q4_K_M", "..._Q4_K_S"): a
# name cut for room keeps its end, and a name wraps after a separator, never inside a part of it.
NAME_GAP = "…"
# where a name wraps: after a "-" or "." where it can, after a "_" only inside a part too long for a
# line ("Q4_K_M" stays on one line)
NAME_SEPARATORS = ("-.", "_")


def _default_head(width: int) -> int:
    """How much of a name's start a cut to ``width`` keeps: a third of the room (the rest its end)."""
    return (width - 1) // 3


def _cut(name: str, width: int, head: int) -> str:
    """``name`` as its first ``head`` characters, a "…" and as much of its end as fills ``width``."""
    if len(name) <= width:
        return name
    if width <= 1:
        return NAME_GAP[:width]
    tail = width - 1 - head
    return name[:head] + NAME_GAP + (name[-tail:] if tail else "")


def short_name(name: str, width: int) -> str:
    """``name`` whole where it fits in ``width`` cells, else cut in its middle with a "…": a third of
    the room its start, the rest its end, where quant names differ ("Kimi-…truct-Q4_K_M", never
    "Kimi-K3-Instruct-Q…"). Names shown together: :func:`short_names`."""
    return _cut(name, width, _default_head(width))


def short_names(names: Sequence[str], width: int) -> list[str]:
    """Each of ``names`` as :func:`short_name` cuts it, but told apart: where two names cut alike,
    the cut moves (more of the end kept, then more of the start) until every name reads differently
    ("llama-3.1-8…q4_k_m" and "llama-3.1-7…q4_k_m" for 8b and 70b); where no one cut does that, each
    name takes the first cut that no other name's form holds."""
    heads = _head_order(width)
    unique = list(dict.fromkeys(names))
    for head in heads:
        forms = {name: _cut(name, width, head) for name in unique}
        if len(set(forms.values())) == len(unique):
            return [forms[name] for name in names]
    taken = {name for name in unique if len(name) <= width}
    chosen: dict[str, str] = {}
    for name in unique:
        chosen[name] = next((form for form in (_cut(name, width, head) for head in heads)
                             if form not in taken), short_name(name, width))
        taken.add(chosen[name])
    return [chosen[name] for name in names]


def _head_order(width: int) -> list[int]:
    """The starts a cut to ``width`` tries, in turn: a third of the room, less (more of the end),
    then more."""
    default = max(0, _default_head(width))
    return [default, *range(default - 1, -1, -1), *range(default + 1, width)]


def wrap_name(name: str, width: int) -> list[str]:
    """``name`` in lines of at most ``width`` cells, each broken after a separator: after a ``-`` or
    ``.`` ("Kimi-K3-" / "Instruct-" / "Q4_K_M"), after a ``_`` only inside a part longer than a line,
    and inside a part only where it is longer than a line with no separator left; never mid-word
    ("Instruct-Q4_K" / "_M")."""
    if width <= 0 or len(name) <= width:
        return [name]
    return _fill(_parts(name, width, NAME_SEPARATORS), width)


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` (a sentence, a line of a pane) in lines of at most ``width`` cells, broken at spaces;
    a word longer than a line (a path, a hash) broken as :func:`wrap_name` breaks a name. One line
    when it fits, or when ``width`` is not positive (not laid out yet)."""
    if width <= 0 or len(text) <= width:
        return [text]
    lines: list[str] = []
    line: str | None = None
    for word in text.split(" "):
        # a long word's pieces each fill a line (wrap_name joins as many as fit), never joined by a space
        for piece in wrap_name(word, width):
            if line is None:
                line = piece
            elif len(line) + 1 + len(piece) <= width:
                line += " " + piece
            else:
                lines.append(line)
                line = piece
    lines.append(line or "")
    return lines


def _parts(text: str, width: int, separators: tuple[str, ...]) -> list[str]:
    """``text`` split after each of the first ``separators``, a part longer than ``width`` split after
    the next ones in turn, and cut at ``width`` where none is left."""
    if len(text) <= width:
        return [text]
    if not separators:
        return [text[k:k + width] for k in range(0, len(text), width)]
    ends = re.escape(separators[0])
    pieces = re.findall(f"[^{ends}]*[{ends}]|[^{ends}]+", text)
    if len(pieces) == 1:
        return _parts(text, width, separators[1:])
    return [part for piece in pieces for part in _parts(piece, width, separators[1:])]


def _fill(parts: list[str], width: int) -> list[str]:
    """``parts`` (each at most ``width``) joined into as few lines of at most ``width`` as they fill
    in order."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return lines


BYTE_UNITS = ("B", "bytes")


# binary units: a size reads in the largest one that leaves it at least 1 (PiB the last)
BYTE_STEPS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _three_digits(x: float) -> str:
    """``x`` (below 1024) to three significant digits, whole from 100 on: 3.99, 18.8, 163, 1010."""
    shown = f"{x:.2f}"
    if abs(float(shown)) >= 10:
        shown = f"{x:.1f}"
    if abs(float(shown)) >= 100:
        shown = f"{x:.0f}"
    return shown


def in_steps(value: float, base: int, units: Sequence[str], shown: Callable[[float, int], str]) -> str:
    """``value`` in the first of ``units`` (each ``base`` times the one before) whose figure, as
    ``shown`` writes it (the scaled value and the unit's step), stays below ``base`` (the last unit
    whatever): the unit is picked after rounding, so a figure that rounds up to ``base`` reads as the
    next unit's 1 (1023.7 KiB: ``1.00 MiB``; 999,999,999 weights: ``1 B``), never ``1024 KiB`` or
    ``1000 M``. The one rule of :func:`human_bytes` and :func:`human_count`; a unit "" writes the
    figure alone."""
    for step, unit in enumerate(units):
        figure = shown(float(value) / base ** step, step)
        if abs(float(figure)) < base or step == len(units) - 1:
            return f"{figure} {unit}" if unit else figure
    raise AssertionError("unreachable: units is empty")


def human_bytes(value: float) -> str:
    """A byte amount as every message, table and progress line writes it, from bytes to PiB:
    ``0 B``, ``1023 B``, ``1.00 KiB``, ``3.99 MiB``, ``18.8 MiB``, ``40.0 GiB``, ``163 GiB``; three
    significant digits (whole bytes below 1 KiB), so a small amount never reads as ``0.0 GiB``; the
    unit picked after rounding (:func:`in_steps`)."""
    return in_steps(value, 1024, BYTE_STEPS,
                    lambda scaled, step: f"{scaled:.0f}" if step == 0 else _three_digits(scaled))


# decimal units of a count (a model's parameters): a count reads in the largest one that leaves it at
# least 1 (T the last)
COUNT_STEPS = ("", "K", "M", "B", "T")


def human_count(value: int | float) -> str:
    """A large count (a model's parameters) as tables and descriptions write it: whole below 1,000
    (``999``), else three significant digits in decimal units to T (``1.5 K``, ``8.03 B``, ``671 B``,
    ``1.2 T``); the unit picked after rounding, as :func:`human_bytes` picks its (:func:`in_steps`):
    999,999,999 reads ``1 B``, never ``1000 M``."""
    return in_steps(value, 1000, COUNT_STEPS,
                    lambda scaled, step: f"{scaled:.0f}" if step == 0 else plain_number(scaled))


def amount(value: float, unit: str = "") -> str:
    """A progress amount or rate: bytes in binary units, large counts as ``12.3k``, whole numbers
    from 100 on (``6264``), one decimal below (``4.8``)."""
    if unit in BYTE_UNITS:
        return human_bytes(value)
    if abs(value) >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"


def done_of_total(done: float, total: float | None, unit: str = "") -> str:
    """``3/6``, ``1.50/4.00 MiB``: what a progress line shows (bytes keep their unit once)."""
    if total is None:
        return amount(done, unit)
    if unit in BYTE_UNITS:
        whole = human_bytes(total)
        number, _, suffix = whole.partition(" ")
        part = human_bytes(done)
        if part.endswith(" " + suffix):
            return f"{part.rsplit(' ', 1)[0]}/{whole}"
        return f"{part}/{whole}"
    return f"{amount(done, unit)}/{amount(total, unit)}"


def percent(fraction: float | None, digits: int = 2) -> str:
    """A fraction as a percentage: ``0.89432`` -> ``89.43 %`` (``n/a`` when unknown)."""
    if fraction is None or not isinstance(fraction, int | float) or isinstance(fraction, bool) \
            or not math.isfinite(fraction):
        return "n/a"
    return f"{100.0 * fraction:.{digits}f} %"


def top_k(k: int, fraction: float | None, digits: int = 2) -> str:
    """How often the candidate's top-k holds the reference's top token: ``top-1 89.43 %``."""
    return f"top-{k} {percent(fraction, digits)}"


def window_span(start: int, stop: int, unit: str = "window") -> str:
    """Windows ``[start, stop)`` as people count them: ``windows 0-5``, ``window 3``; ``unit``: what
    they are called (a hidden-state suite's report: ``contexts 0-11``, kldtui.formats.suite.unit_name)."""
    return f"{unit} {start}" if stop - start == 1 else f"{unit}s {start}-{stop - 1}"


# what a command printed to copy cannot hold as it is: C0 (a line break, a tab, ESC), DEL and C1, which
# break the line or drive the terminal, and a file name's bytes that are not text (os.fsdecode's
# surrogates), which no terminal shows
_NOT_AS_IS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _dollar_quoted(text: str) -> str:
    """``text`` as one ``$'...'`` word: ``\\`` and ``\\'`` for a backslash and a quote, ``\\n``,
    ``\\t`` and ``\\r``, and each byte of any other character of :data:`_NOT_AS_IS` as ``\\xNN`` (the
    file name's own bytes, os.fsencode's, whatever the locale)."""
    def escaped(ch: str) -> str:
        if ch in "\\'":
            return "\\" + ch
        if ch in _NAMED_ESCAPES:
            return _NAMED_ESCAPES[ch]
        if _NOT_AS_IS.match(ch):
            try:
                raw = os.fsencode(ch)
            except UnicodeEncodeError:  # a surrogate no file name's byte decodes to: its code units
                raw = ch.encode("utf-8", "surrogatepass")
            return "".join(f"\\x{byte:02x}" for byte in raw)
        return ch
    return "$'" + "".join(escaped(ch) for ch in text) + "'"


def shell_arg(arg: str | os.PathLike[str], *, path: bool = True) -> str:
    """One argument of a command that kldtui prints for the user to copy into a shell, the one rule
    for every such command (the "next:" lines, a verdict's "confirm:", each hint naming a file):
    quoted where the shell would split or expand it (a space, ``$``, a quote, ``;``, ``&``, ``*``,
    parentheses: :func:`shlex.quote`), as it is where nothing needs quoting (``runs/q4/comparison.json``
    stays as it is). A ``path`` that starts with ``-`` (a relative ``-x.json``) is shown as
    ``./-x.json``, which no command reads as an option; ``path=False`` for a value that is not a file's
    (a model's name, the command line's own words).

    An argument holding a control character (a line break, a tab, ESC) or bytes that are not text is
    written in ``$'...'`` quoting (``$'my\\nruns/comparison.json'``: :func:`_dollar_quoted`), so that
    the command stays one line, shows every character and gives back the exact name when run as
    copied. bash, zsh and ksh read ``$'...'``; a POSIX sh that predates its 2024 edition (dash 0.5.12,
    Debian 12's ``/bin/sh``) reads it as a ``$`` and a quoted string, so such a command is for bash, zsh
    or ksh. An argument without one is for any POSIX shell."""
    text = os.fspath(arg)
    if path and text.startswith("-"):
        text = f"./{text}"
    if _NOT_AS_IS.search(text):
        return _dollar_quoted(text)
    return shlex.quote(text)


def kldtui_command() -> str:
    """How to run kldtui again, as this process was started, for the commands a hint prints:
    ``kldtui`` when that name on PATH is this program; else the path it was started by
    (``.venv/bin/kldtui`` after the README's quick start); ``python -m kldtui`` for a module run. A
    path is quoted for the shell as every argument of such a command is (:func:`shell_arg`)."""
    import shutil
    import sys
    from pathlib import Path

    def as_typed(program: Path, name: str) -> str:
        """``name`` when that name on PATH is ``program``, else its path (relative to here when inside)."""
        found = shutil.which(name)
        try:
            # the same path, not the same file: a venv's python links to a system one
            if found and Path(found).absolute() == program.absolute():
                return name
            shown = program.absolute().relative_to(Path.cwd().resolve())
            return shell_arg(shown if "/" in str(shown) else f"./{shown}")
        except (OSError, ValueError):
            return shell_arg(program)

    argv0 = sys.argv[0] if sys.argv else ""
    started = Path(argv0)
    if started.name == "__main__.py" and started.parent.name == "kldtui":
        return f"{as_typed(Path(sys.executable), 'python')} -m kldtui"
    if started.name != "kldtui":
        return "kldtui"  # embedded (tests, another program): the documented name
    return as_typed(started, "kldtui")


# The decision rules' outcome of a candidate B against A (kldtui.decide.verdict's outcomes), in the
# words every view of a ranking uses (the campaign's standings, the exports; A: ``{other}``, the best)
# and the headline of a difference (kldtui.decide.verdict.headline). ``{unit}``: what the suite's
# units are called (kldtui.formats.suite.unit_name: window, a hidden-state suite's context).
OUTCOME_WORDS = {
    "a_closer": "worse than {other}",
    "b_closer": "closer than {other}",
    "indistinguishable": "tied with {other}",
    "within_noise": "tied with {other} (within noise)",
    "too_few_windows": "no verdict (too few {unit}s)",
    "cannot_calibrate": "no verdict (cannot be calibrated)",
    "no_finite_interval": "no verdict (no finite interval)",
}


def no_verdict_words(unit: str) -> str:
    """What a leaderboard's ``no verdict`` mark means, over the suite's ``unit`` s (kldtui.formats.suite.
    unit_name): the text legend (kldtui.decide.leaderboard.marks_legend) and the viewer's help say it."""
    return f"too few {unit}s, or no calibrated verdict with a finite interval on these {unit}s"


# the outcomes that read as a tie with the other candidate, those that name one of the two, and those
# that give no verdict (a leaderboard's "no verdict" mark)
TIED_OUTCOMES = frozenset({"indistinguishable", "within_noise"})
NAMED_OUTCOMES = frozenset({"a_closer", "b_closer"})
NO_VERDICT_OUTCOMES = frozenset({"too_few_windows", "cannot_calibrate", "no_finite_interval"})


def outcome_words(outcome: str | None, fallback: str, provisional: bool = False, *, unit: str,
                  other: str = "the best") -> str:
    """A candidate's verdict against ``other`` (the best) in a few words (``fallback`` for an outcome
    this list does not name), counting the suite's ``unit`` s (``no verdict (too few contexts)``);
    ``(provisional)`` where the noise model cannot fully back it."""
    template = OUTCOME_WORDS.get(outcome or "")
    words = fallback if template is None else template.format(unit=unit, other=other)
    return f"{words} (provisional)" if provisional else words


# ---------------------------------------------------------------------------------- interval bars
# ``├──●──┤`` drawn in a text column, every row on one axis: the leaderboard (text and dashboard)
# and the dashboard's size chart draw theirs here, so they place a value alike.
UNICODE_BAR = ("├", "─", "●", "┤")
ASCII_BAR = ("|", "-", "*", "|")
LOG_AXIS_FROM = 10.0  # values spanning more than this factor get a log axis


def wants_log_axis(values: list[float]) -> bool:
    """A log axis for ``values`` (non-finite ones left out): all positive and spanning more than
    :data:`LOG_AXIS_FROM` times; on a linear one the closest of a dozen quants lie on the axis. The one
    rule for the text bars and ``kldtui plot``'s panels."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) > LOG_AXIS_FROM * min(finite)


@dataclass(frozen=True)
class BarAxis:
    """The axis interval bars share: ``low`` to ``high``, logarithmic when ``log``."""

    low: float
    high: float
    log: bool = False

    def position(self, value: float, width: int) -> int:
        """The column (0 to ``width - 1``) of ``value``; the middle when the axis has no span."""
        low, high = self.low, self.high
        if self.log:
            value, low, high = (math.log10(max(v, 1e-300)) for v in (value, low, high))
        span = high - low
        if not span > 0 or not math.isfinite(span):
            return width // 2
        return int(round((min(max(value, low), high) - low) / span * (width - 1)))

    def words(self) -> str:
        """How a reader should take the axis, e.g. ``log axis 0.0008 to 0.19``."""
        return (f"{'log' if self.log else 'linear'} axis {plain_number(self.low, 2)} to "
                f"{plain_number(self.high, 2)}")


def bar_axis(values: list[float], pad: float = 0.0) -> BarAxis:
    """One axis for ``values`` (the rows' lows, estimates and highs; non-finite ones left out):
    logarithmic when all are positive and span more than :data:`LOG_AXIS_FROM` times (on a linear
    one the closest of a dozen quants lie on the axis' first column), else linear, ``pad`` of the
    span added at both ends."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return BarAxis(0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if wants_log_axis(finite):
        factor = (hi / lo) ** pad
        return BarAxis(lo / factor, hi * factor, log=True)
    margin = (hi - lo) * pad or abs(hi) * pad
    return BarAxis(lo - margin, hi + margin)


def interval_bar(low: float | None, high: float | None, mean: float, axis: BarAxis, width: int,
                 glyphs: tuple[str, str, str, str] = UNICODE_BAR) -> str:
    """``├──●──┤`` of ``width`` columns on ``axis``; the mean alone when there is no interval.

    An end that is not a finite number (the log-normal model's far end where KL spans dozens of
    orders of magnitude) is drawn open, the line running to the axis' edge with no end mark, so that
    it does not read as an end at the axis' edge. A finite end always shows its mark: where the mean's
    column is an end's (a narrow interval drew ``├●``, read as a bar without its upper end), that end
    is drawn a column further out, and at the axis' edge the bar and its mean a column further in (a
    bar is read to a column; its figures are beside it)."""
    if width < 3:
        raise ValueError("width must be at least 3")
    left, line, dot, right = glyphs
    cells = [" "] * width
    m = axis.position(mean, width)
    if low is not None and high is not None:
        low_open, high_open = not math.isfinite(low), not math.isfinite(high)
        a = 0 if low_open else axis.position(low, width)
        b = width - 1 if high_open else axis.position(high, width)
        # the mean a column of its own between the finite ends' marks: the bar widened around it,
        # then, where that passes the axis' edge, moved back inside with the mean
        if not low_open and m <= a:
            a = m - 1
        if not high_open and m >= b:
            b = m + 1
        if a < 0:
            a, m = 0, m - a
            b = max(b, m + (0 if high_open else 1))
        if b > width - 1:
            a, m, b = a, m - (b - width + 1), width - 1
            a = min(a, m - (0 if low_open else 1))
        for k in range(a, b + 1):
            cells[k] = line
        if not low_open:
            cells[a] = left
        if not high_open:
            cells[b] = right
    cells[m] = dot
    return "".join(cells)
