"""Number and amount formatting shared by the widgets (no Textual here)."""

from __future__ import annotations

import math

KL_LEVELS = (0.005, 0.02, 0.1)  # kl0 < 0.005 <= kl1 < 0.02 <= kl2 < 0.1 <= kl3


def kl_level(kl: float) -> int:
    for level, bound in enumerate(KL_LEVELS):
        if kl < bound:
            return level
    return len(KL_LEVELS)


def fmt_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"



def clip(text: str, width: int) -> str:
    """``text`` whole where it fits in ``width`` cells, else cut with a visible "…" at its end."""
    if len(text) <= width:
        return text
    return text[:max(0, width - 1)] + "…" if width > 0 else ""


def trim_number(value: float) -> str:
    """0.005 -> ".005" (compact legend labels)."""
    text = f"{value:g}"
    return text[1:] if text.startswith("0.") else text
