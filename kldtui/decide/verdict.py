"""Verdicts: the paired Student-t interval of B - A over windows, the decision rule and its sentence.

One place decides for ``diff``, leaderboard ties and the dashboard (docs/STATISTICS.md has the
simulation that chose the method and the measured error rates):

- the interval is the paired Student-t interval of the per-window differences B - A (window
  means of KL(reference || candidate)); fewer than :data:`MIN_VERDICT_WINDOWS` windows give no
  verdict, only the estimate;
- an interval that includes 0 names no winner;
- with a measured repeat variation of the metric (``kldtui noise`` from two captures of one
  candidate), a difference must clear it; with only a repeat KL between captures (the published
  figure, or an old floor) a difference is named but marked *provisional* when it is smaller than
  that figure; with no noise model at all it is named and marked provisional too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from kldtui.metrics.stats import student_t_interval

if TYPE_CHECKING:
    from kldtui.decide.noise import NoiseFloor

MIN_VERDICT_WINDOWS = 8
LEVEL = 0.95
METHOD = "paired Student-t over windows"

Outcome = Literal["a_closer", "b_closer", "within_noise", "indistinguishable", "too_few_windows"]


def _json_num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


@dataclass(frozen=True)
class VerdictInterval:
    """Mean of per-window differences with its 95 % Student-t interval (None below 2 windows)."""

    estimate: float
    standard_error: float | None
    ci95_low: float | None
    ci95_high: float | None
    p_value: float | None
    windows: int

    @property
    def has_interval(self) -> bool:
        return self.ci95_low is not None and self.ci95_high is not None

    def excludes(self, value: float) -> bool:
        return self.has_interval and not self.ci95_low <= value <= self.ci95_high  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None else _json_num(x)

        return {"method": METHOD, "level": LEVEL, "estimate": _json_num(self.estimate),
                "standard_error": num(self.standard_error), "ci95_low": num(self.ci95_low),
                "ci95_high": num(self.ci95_high), "p_value": num(self.p_value), "windows": self.windows,
                "degrees_of_freedom": self.windows - 1 if self.windows >= 2 else None}

    def text(self, fmt: str = ".4g") -> str:
        if not self.has_interval:
            return f"{self.estimate:{fmt}}"
        return f"{self.estimate:{fmt}} [{self.ci95_low:{fmt}}, {self.ci95_high:{fmt}}]"


def verdict_interval(differences: Sequence[float] | np.ndarray) -> VerdictInterval:
    """The paired interval of ``mean(differences)`` (B - A per window)."""
    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    if d.size == 0:
        raise ValueError("no windows")
    if d.size < 2:
        return VerdictInterval(float(d.mean()), None, None, None, None, int(d.size))
    est, se, lo, hi, p = student_t_interval(d, LEVEL)
    return VerdictInterval(est, se, lo, hi, p, int(d.size))


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    provisional: bool
    # the noise figure the difference was held against, and what it is
    noise_value: float | None
    noise_kind: Literal["repeat_variation", "repeat_kl", "none"]
    # the 95 % interval excludes 0 but the multiple-comparison correction (leaderboard) does not reject
    held_by_correction: bool = False


def decide(iv: VerdictInterval, noise: NoiseFloor | None, window_indices: Sequence[int],
           *, significant: bool | None = None) -> Decision:
    """The decision for ``iv`` (B - A). ``significant`` overrides "the interval excludes 0" (the
    leaderboard passes its Holm-corrected test)."""
    if iv.windows < MIN_VERDICT_WINDOWS or not iv.has_interval:
        return Decision("too_few_windows", False, None, "none")
    real = iv.excludes(0.0) if significant is None else significant
    held = not real and iv.excludes(0.0)
    named: Outcome = "a_closer" if iv.estimate > 0 else "b_closer"
    variation = noise.repeat_variation_for(window_indices) if noise is not None else None
    if variation is not None:
        if not real:
            return Decision("indistinguishable", False, variation, "repeat_variation", held)
        near = min(abs(iv.ci95_low), abs(iv.ci95_high))  # type: ignore[arg-type]
        if near > variation:
            return Decision(named, False, variation, "repeat_variation")
        return Decision("within_noise", False, variation, "repeat_variation")
    if not real:
        return Decision("indistinguishable", False, noise.threshold if noise else None,
                        "repeat_kl" if noise else "none", held)
    if noise is None:
        return Decision(named, True, None, "none")
    return Decision(named, abs(iv.estimate) < noise.threshold, noise.threshold, "repeat_kl")


def plain_number(x: float) -> str:
    """Three significant digits, never in exponent notation (0.00275, 0.000026)."""
    if not np.isfinite(x):
        return str(x)
    return str(np.format_float_positional(x, precision=3, fractional=False, trim="-"))


_n = plain_number


def _range(lo: float, hi: float) -> str:
    return f"{_n(lo)} to {_n(hi)}"


def sentence(decision: Decision, iv: VerdictInterval, mean_a: float, name_a: str, name_b: str,
             confirm: str | None = None) -> str:
    """One sentence a non-statistician reads right (docs/STATISTICS.md lists them all)."""
    n = iv.windows
    over = f"over {n} window{'s' if n != 1 else ''}"
    if decision.outcome == "too_few_windows":
        return (f"too few windows ({n}) for a verdict: {name_b} - {name_a} = {_n(iv.estimate)} KL is an "
                f"estimate only (a verdict needs at least {MIN_VERDICT_WINDOWS} windows)")
    lo, hi = iv.ci95_low, iv.ci95_high
    assert lo is not None and hi is not None
    if decision.outcome == "indistinguishable" and decision.held_by_correction:
        return (f"no difference shown between {name_a} and {name_b} once corrected for comparing several "
                f"candidates (Holm): {name_b} - {name_a} = {_n(iv.estimate)} KL, 95 % interval "
                f"{_range(lo, hi)}, {over}")
    if decision.outcome == "indistinguishable":
        return (f"no difference shown between {name_a} and {name_b}: {name_b} - {name_a} = {_n(iv.estimate)} "
                f"KL, 95 % interval {_range(lo, hi)} includes zero, {over}")
    pct = f" ({abs(iv.estimate) / mean_a * 100:.0f} %)" if mean_a > 0 else ""
    if decision.outcome == "within_noise":
        return (f"{name_b} - {name_a} = {_n(iv.estimate)} KL{pct}, 95 % interval {_range(lo, hi)}, {over}: "
                f"not clearly larger than the measured repeat variation {_n(decision.noise_value or 0)} "
                "between two captures of one model, so no winner")
    worse = decision.outcome == "a_closer"
    a, b = (abs(iv.estimate), _range(lo, hi)) if worse else (abs(iv.estimate), _range(-hi, -lo))
    text = (f"{name_b} is {'worse' if worse else 'better'} than {name_a} by {_n(a)} KL{pct}, "
            f"95 % interval {b}, {over}")
    if decision.noise_kind == "repeat_variation":
        return text + f"; larger than the measured repeat variation {_n(decision.noise_value or 0)}"
    how = f"; confirm: {confirm}" if confirm else ""
    if decision.noise_kind == "repeat_kl" and decision.provisional:
        return (text + f"; provisional: smaller than the repeat KL {_n(decision.noise_value or 0)} between "
                f"two captures of one model, and the repeat variation of this metric is not measured{how}")
    if decision.noise_kind == "repeat_kl":
        return text + f"; larger than the repeat KL {_n(decision.noise_value or 0)} between two captures"
    return text + f"; provisional: the variation between two captures was not measured{how}"


def infinite_note(name: str, rows: int, windows: Sequence[int]) -> str:
    """What a verdict adds when a candidate gives probability 0 to tokens the reference predicts."""
    shown = ", ".join(str(w) for w in windows[:8]) + (", ..." if len(windows) > 8 else "")
    return (f"{name} gives probability 0 to a token the reference predicts at {rows} position"
            f"{'s' if rows != 1 else ''} (window{'s' if len(windows) != 1 else ''} {shown}): KL is infinite "
            "there, and those positions are left out of the mean KL above")


def noise_words(noise: NoiseFloor | None) -> str:
    """Which noise model a verdict used, in a quantization engineer's words."""
    if noise is None:
        return ("none: window-to-window variation only; how much this metric moves between two captures of "
                "one model is not known (measure it with kldtui noise)")
    return noise.describe()
