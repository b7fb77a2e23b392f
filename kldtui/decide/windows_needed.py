"""How many windows would resolve a difference that is not resolved yet (issue 23 item 4).

The verdict names a difference between two candidates when the test over windows rejects "no
difference" at its level (Holm-corrected in a leaderboard) and, with a measured noise model, the
interval's end nearer zero clears the repeat variation of the metric (docs/STATISTICS.md). If the
true difference per window is the one measured (mean ``delta``, window-to-window standard
deviation ``s``) and ``v`` is the repeat variation it must clear, that happens with probability
about ``P(mean > v + t * s / sqrt(n))``: the smallest ``n`` with

    (|delta| - v) * sqrt(n) / s >= t(1 - level / 2, n - 1) + t(power, n - 1)

resolves it with the asked power (80 % by default). ``level`` is 5 % divided by the number of
comparisons in the family (the Holm procedure's first step: the strictest it can ask), so the
answer holds in a leaderboard too. Where ``|delta| <= v`` more windows do not help: the difference
is within what the metric moves between two captures of one model. The count never goes below
the verdict's minimum window count.

``tests/unit/test_decide_windows_needed.py`` simulates the claim: windows drawn like the measured
ones, as many as said, run through the product's own decision rule, resolve the difference in
about 80 % of trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kldtui.decide.clustered import UNIT as SOURCE_CLUSTER
from kldtui.decide.clustered import paired_contexts
from kldtui.decide.reports import window_values
from kldtui.decide.verdict import LEVEL, MIN_VERDICT_WINDOWS, family_windows, verdict_interval
from kldtui.formats.report_model import ComparisonReport
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.metrics.stats import t_quantile
from kldtui.text import plain_number as _n

if TYPE_CHECKING:
    from kldtui.decide.noise import NoiseFloor

DEFAULT_POWER = 0.8
MAX_WINDOWS = 1_000_000  # beyond this the answer is "not with windows" in practice


@dataclass(frozen=True)
class WindowsNeeded:
    """The answer for one pair: ``windows`` (total, including those measured), or None with a reason."""

    windows: int | None
    measured_windows: int
    difference: float  # mean of B - A per window (KL)
    window_sd: float  # standard deviation of B - A over windows
    margin: float  # the repeat variation the difference must clear (0: none measured)
    level: float  # two-sided level of the test (5 % over the family's comparisons)
    power: float
    comparisons: int
    reason: str = ""  # why there is no count
    unit: str = WINDOW_UNIT  # what the windows are called (a hidden-state suite's: context)

    @property
    def more(self) -> int | None:
        """Windows beyond those measured."""
        return None if self.windows is None else max(0, self.windows - self.measured_windows)

    def words(self, suite_windows: int | None = None) -> str:
        """One line for a verdict's reader, counting :attr:`unit` s."""
        if self.windows is None:
            return self.reason
        more = self.more or 0
        fits = ""
        if suite_windows is not None and self.windows > suite_windows:
            fits = (f"; the suite has {suite_windows}: a larger suite is needed (kldtui prepare), or accept "
                    "the tie")
        elif suite_windows is not None:  # asked whether the suite is enough: it is, so say so
            fits = f"; the suite's {suite_windows} {self.unit}s are enough"
        family = (f", 5 % over {self.comparisons} comparisons" if self.comparisons > 1 else "")
        if self.measured_windows == 0:  # planned from figures
            size = _n(abs(self.difference))
            return (f"about {self.windows} {self.unit}s would resolve a difference of {size} KL at "
                    f"{self.power:.0%} power{family}{fits}").replace("% power", " % power")
        where = "" if more == 0 else f" ({more} more than the {self.measured_windows} compared)"
        return (f"about {self.windows} {self.unit}s{where} would resolve this difference at "
                f"{self.power:.0%} power{family}, if it is the {_n(self.difference)} KL measured{fits}"
                ).replace("% power", " % power")

    def to_dict(self) -> dict[str, Any]:
        return {"windows": self.windows, "more": self.more, "measured_windows": self.measured_windows,
                "difference": self.difference, "window_sd": self.window_sd, "margin": self.margin,
                "level": self.level, "power": self.power, "comparisons": self.comparisons,
                "reason": self.reason or None, "unit": self.unit,
                "method": "smallest n with (|difference| - margin) sqrt(n) / sd >= t(1 - level/2) + t(power)"}


def windows_for(difference: float, window_sd: float, *, margin: float = 0.0, power: float = DEFAULT_POWER,
                comparisons: int = 1, measured_windows: int = 0,
                at_least: int | None = None, unit: str = WINDOW_UNIT) -> WindowsNeeded:
    """Windows (called ``unit``) that resolve a true per-window difference ``difference`` (KL, B - A)
    with spread ``window_sd`` between windows, against a repeat variation ``margin``; never fewer than
    ``at_least`` (the windows the sign-flip test needs to be calibrated at the differences'
    skewness, where the candidates depend differently on window difficulty), nor fewer than a family of
    ``comparisons`` can tell apart at all (:func:`kldtui.decide.verdict.family_windows`: 8 windows give
    the sign-flip test no p-value below 0.0078, too large for 66 pairs)."""
    if not 0.5 <= power < 1.0:
        raise ValueError("power is between 0.5 and 1")
    if comparisons < 1:
        raise ValueError("comparisons is at least 1")
    level = (1.0 - LEVEL) / comparisons

    def answer(windows: int | None, reason: str = "") -> WindowsNeeded:
        return WindowsNeeded(windows, measured_windows, float(difference), float(window_sd), float(margin),
                             level, power, comparisons, reason, unit)

    effect = abs(difference) - max(margin, 0.0)
    if not math.isfinite(effect) or not math.isfinite(window_sd):
        return answer(None, f"the difference is not finite (masked tokens): no {unit} count applies")
    if difference == 0.0:
        return answer(None, f"the measured difference is 0: no number of {unit}s resolves it")
    if effect <= 0.0:
        return answer(None, f"the measured difference {_n(abs(difference))} KL is within the repeat "
                            f"variation {_n(margin)} of the metric: more {unit}s will not resolve it "
                            "(the two are as close as two captures of one model)")
    floor = max(MIN_VERDICT_WINDOWS, 3, at_least or 0, family_windows(comparisons))
    if window_sd <= 0.0:
        return answer(floor)

    def enough(n: int) -> bool:
        return effect * math.sqrt(n) / window_sd >= (t_quantile(1.0 - level / 2.0, n - 1)
                                                     + t_quantile(power, n - 1))

    # the normal approximation, then the first n whose t condition holds
    z = t_quantile(1.0 - level / 2.0, 1e6) + t_quantile(power, 1e6)
    n = max(floor, int(math.ceil((z * window_sd / effect) ** 2)))
    if n > MAX_WINDOWS:
        return answer(None, f"more than {MAX_WINDOWS:,} {unit}s: the difference is tiny next to how much "
                            f"it varies between {unit}s")
    while n > floor and enough(n - 1):
        n -= 1
    while not enough(n):
        n += 1
    return answer(n)


def windows_needed(kl_a: Sequence[float] | np.ndarray, kl_b: Sequence[float] | np.ndarray, *,
                   margin: float | None = None, power: float = DEFAULT_POWER,
                   comparisons: int = 1, at_least: int | None = None,
                   unit: str = WINDOW_UNIT) -> WindowsNeeded:
    """From the measured window means of A and B (same windows, same order), called ``unit``."""
    d = np.asarray(kl_b, dtype=np.float64) - np.asarray(kl_a, dtype=np.float64)
    sd = float(d.std(ddof=1)) if d.size >= 2 else math.inf
    return windows_for(float(d.mean()), sd, margin=margin or 0.0, power=power, comparisons=comparisons,
                       measured_windows=int(d.size), at_least=at_least, unit=unit)


# outcomes a verdict leaves unresolved (kldtui.decide.verdict.Outcome): more windows may resolve them
# (not no_finite_interval: what leaves its interval unbounded is how far the KL spreads, not the count)
UNRESOLVED = ("indistinguishable", "within_noise", "too_few_windows", "cannot_calibrate")


def for_reports(a: ComparisonReport, b: ComparisonReport, noise: NoiseFloor | None, *,
                power: float = DEFAULT_POWER, comparisons: int = 1,
                by_source_cluster: bool = False) -> WindowsNeeded:
    """For two reports of one suite (B - A over their windows), against ``noise``'s repeat
    variation of the metric where it measured one; counted in the reports' unit. ``by_source_cluster``:
    where the reports' contexts share sources, over their source clusters (each the mean of its
    contexts' KL, :mod:`kldtui.decide.clustered`), counted in source clusters: the units the
    leaderboard's ties then count."""
    va, vb = window_values(a, "A"), window_values(b, "B")
    margin = noise.repeat_variation_for(va.window_index.tolist()) if noise is not None else None
    kl_a, kl_b, unit = va.kl_mean, vb.kl_mean, a.unit
    paired = paired_contexts(a, b, "A", "B") if by_source_cluster else None
    if paired is not None:
        layout, context_a, context_b = paired
        kl_a, kl_b, unit = layout.units(context_a), layout.units(context_b), SOURCE_CLUSTER
    at_least = None
    if kl_a.size >= 3:  # where the log-normal check engages, the sign-flip test needs its windows
        iv = verdict_interval(kl_a, kl_b)
        at_least = iv.needed_windows if iv.dependent else None
    return windows_needed(kl_a, kl_b, margin=margin, power=power, comparisons=comparisons,
                          at_least=at_least, unit=unit)


__all__ = ["DEFAULT_POWER", "UNRESOLVED", "WindowsNeeded", "for_reports", "windows_for", "windows_needed"]
