"""The words of a campaign's live leaderboard, shared by the dashboard and the batch reporter.

A :class:`~kldtui.events.Standing` (one candidate, from a :class:`~kldtui.events.LeaderboardUpdated`
event) becomes one row of cells; both front ends show the same cells, so the same words.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

from kldtui.events import Standing
from kldtui.formats.report_names import interval_rests_on_too_few, too_few_text
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import NAMED_OUTCOMES, TIED_OUTCOMES, human_bytes, interval_ends, outcome_words, table_figure

# the verdict right after the mean: what a narrow terminal must still show
HEADERS = ("#", "candidate", "mean KL", "verdict vs best", "95% interval", "size", "bpw")

_STATE_WORDS = {"waiting": "waiting", "running": "running…", "stopped early": "stopped early (not ranked)",
                "failed": "failed"}


def _size(size: int | None) -> str:
    return "-" if size is None else human_bytes(size)


def verdict_words(row: Standing, unit: str = WINDOW_UNIT) -> str:
    """What the row's verdict against the current best is, in a few words (the suite's units called
    ``unit``)."""
    if row.state != "compared":
        return _STATE_WORDS.get(row.state, row.state)
    if row.mark == "best":
        return "best"
    if row.repeat_of is not None:  # against its own first capture, not the best (which it may not be)
        return _repeat_words(row, unit)
    # as the leaderboard says it: a verdict the noise model cannot fully back (kldtui.decide)
    return outcome_words(row.outcome, row.mark or "-", row.provisional, unit=unit)


def _repeat_words(row: Standing, unit: str) -> str:
    """A repeat capture's verdict against the capture it repeats: "tied with the best" read wrong where
    the leaderboard marks no best (too few windows for its candidates)."""
    if row.outcome in TIED_OUTCOMES:
        words = f"tied with {row.repeat_of} (its first capture)"
    elif row.outcome in NAMED_OUTCOMES:
        words = f"differs from {row.repeat_of} (its first capture)"
    else:
        return outcome_words(row.outcome, row.mark or "-", row.provisional, unit=unit)
    return f"{words} (provisional)" if row.provisional else words


def cells(row: Standing, windows: int | None = None, unit: str = WINDOW_UNIT,
          tie_unit: str = "") -> list[str]:
    """One row of the leaderboard (columns :data:`HEADERS`) over ``windows`` windows, called ``unit``
    (fewer than an interval needs: the interval cell says so instead of showing one); its verdict counts
    ``tie_unit`` s (a hidden-state suite's source clusters; "": the windows)."""
    low, high = row.ci_low, row.ci_high
    known = low is not None and high is not None
    interval = interval_ends(low, high, table_figure) if low is not None and high is not None else "-"
    if known and windows and interval_rests_on_too_few(windows):
        interval = too_few_text(windows, short=True, unit=unit)
    bpw = "-" if row.bits_per_weight is None else f"{row.bits_per_weight:.2f}"
    return [str(row.rank) if row.rank is not None else "-", row.name, table_figure(row.mean),
            verdict_words(row, tie_unit or unit), interval, _size(row.size_bytes), bpw]


def column_widths(rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's natural width: its widest cell among the headers and ``rows`` (:func:`cells`)."""
    return [max(len(line[i]) for line in (HEADERS, *rows)) for i in range(len(HEADERS))]


def table_lines(rows: Sequence[Standing], windows: int | None = None, unit: str = WINDOW_UNIT,
                tie_unit: str = "") -> list[str]:
    """The rows as aligned plain-text lines under a header line (:func:`cells`)."""
    table = [list(HEADERS)] + [cells(r, windows, unit, tie_unit) for r in rows]
    widths = column_widths(table[1:])
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
