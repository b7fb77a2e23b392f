"""Rows that cannot be scored, and the one line that says so.

A row of logits cannot be scored when it holds a NaN or +Inf, or no finite logit at all (-inf
alone is a mask: that token has probability 0); a row of hidden states when it holds a NaN or an
infinity. This is the one rule: the capture client and finalize (the chunks a server wrote,
:mod:`kldtui.formats.chunks`, :mod:`kldtui.capture_modes.logits`), the compare stage (both sides'
files, :mod:`kldtui.stages.compare.sides`), score mode's server (the reference rows it reads and
the candidate's logits it scores, :mod:`kldtui.scoring`) and the llama.cpp conversions
(:mod:`kldtui.stages.convert`, :mod:`kldtui.formats.llamacpp_kld`) ask here, so a masked token
passes everywhere and a NaN reads the same wherever it is found.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

LOGITS_RULE = "NaN, +Inf or no finite logit in a row"
# the side a message names: compare's and score mode's ("reference", "candidate"), or the rows a
# server wrote, which capture and finalize check before they know which side they will be
CAPTURED = "captured"
SHOWN_ROWS = 5  # rows a message names; "..." after them


def unscorable_logit_rows(rows: Any) -> np.ndarray:
    """Indices of the rows of ``rows`` (logits ``[rows, vocab]``: a float array, or a torch tensor
    on any device) that break :data:`LOGITS_RULE`. A row's maximum is NaN when the row holds one,
    +Inf when it holds one, -Inf when no logit is finite."""
    if hasattr(rows, "detach"):  # torch: the maxima are copied off the device, not the rows
        top = np.asarray(rows.detach().float().amax(dim=1).cpu().numpy())
    else:
        top = np.max(np.asarray(rows), axis=1) if len(rows) else np.empty(0, np.float32)
    return np.flatnonzero(~np.isfinite(top))


def logits_block_problem(rows: Any, path: str | Path | None, label: str, role: str,
                         first_row: int = 0) -> str | None:
    """The line (:func:`logits_problem`) for the rows of ``rows`` (logits ``[rows, vocab]``, rows
    ``first_row..`` of ``path``) that break :data:`LOGITS_RULE`; None when every row can be scored."""
    hit = unscorable_logit_rows(rows)
    return logits_problem(path, label, role, first_row + hit) if hit.size else None


def nonfinite_state_rows(bits: np.ndarray) -> np.ndarray:
    """Indices of the rows of BF16 hidden states (``uint16`` bit patterns) holding a NaN or an
    infinity (every exponent bit set)."""
    return np.flatnonzero(((np.asarray(bits) & 0x7F80) == 0x7F80).any(axis=1))


def shown_rows(rows: Iterable[int]) -> str:
    """``"4, 9, 12"``: the first :data:`SHOWN_ROWS` rows, then ``...`` when there are more."""
    rows = [int(r) for r in rows]
    more = " ..." if len(rows) > SHOWN_ROWS else ""
    return ", ".join(str(r) for r in rows[:SHOWN_ROWS]) + more


def logits_problem(path: str | Path | None, label: str, role: str, rows: Iterable[int]) -> str:
    """The line for ``role``'s (``reference``, ``candidate``, or :data:`CAPTURED`) logits breaking
    :data:`LOGITS_RULE` at ``rows`` of ``path`` (None: the logits a server scored in memory; the
    capture client names the request's folder): the file's rows, which in a chunk are the window's."""
    where = f"{path}: " if path is not None else ""
    return (f"{where}{label}: NaN or Inf in the {role} logits at rows {shown_rows(rows)} ({LOGITS_RULE}); "
            "capture and finalize this window again")


def states_problem(path: str | Path, label: str, role: str, rows: Iterable[int]) -> str:
    """The line for ``role``'s hidden states holding a NaN or an infinity at ``rows`` of ``path``."""
    again = " (or download it again)" if role == "reference" else ""
    return (f"{path}: {label}: NaN or Inf in the {role} hidden states at rows {shown_rows(rows)}; "
            f"capture this context again{again}")


def replay_problem(head: str | Path, path: str | Path, label: str, rows: Iterable[int]) -> str:
    """The line for logits replayed from finite hidden states that are not finite."""
    return (f"{path}: {label}: the logits replayed with {head} are not finite at rows {shown_rows(rows)}; "
            "the head or the hidden states are damaged")


def overflow_problem(path: str | Path | None, label: str, rows: Iterable[int]) -> str:
    """The line for figures that are not finite although both sides' rows are."""
    where = f"{path}: " if path is not None else ""
    return f"{where}{label}: non-finite results at rows {shown_rows(rows)}; the logits overflow float64 sums"


__all__ = ["CAPTURED", "LOGITS_RULE", "logits_block_problem", "logits_problem", "nonfinite_state_rows",
           "overflow_problem", "replay_problem", "shown_rows", "states_problem", "unscorable_logit_rows"]
