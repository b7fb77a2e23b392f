"""Verdicts: the evidence that B differs from A over windows, the decision rule and its sentence.

One place decides for ``diff``, leaderboard ties and the dashboard (docs/STATISTICS.md has the
simulation that chose every rule and the error rates it measured):

- the test is the **sign-flip test** of B - A over windows (exact whenever swapping A and B inside
  a window changes nothing in distribution), and the headline interval is the one it gives for
  the ratio ``mean(B) / mean(A)`` (:mod:`kldtui.metrics.inference`); over 8-15 windows that spread
  little, each window's difference weighed by ``(A + B)^-1/2`` (:data:`FIRST_TIER_WEIGHT_POWER`);
- where the two candidates' KL grows differently with window difficulty (one quantization hurts
  hard windows more), the mean over windows rests on the few hardest ones and the windows at hand
  may hold none of them, which flatters the candidate that grows faster: when the windows' mean
  names that one the closer, the difference must also be shown by a log-normal model of the
  windows, which accounts for the unseen hard windows; where the two disagree the verdict is
  "cannot be calibrated here", with the number of windows that would be needed; from
  :data:`MODEL_INTERVAL_FROM` windows, where the windows spread widely, the model's interval is the
  headline (its coverage is the honest one there) and the model must show a difference in either
  direction, so that the verdict agrees with the interval shown;
- fewer than :data:`MIN_VERDICT_WINDOWS` windows give no verdict, only the estimate; so does an
  interval with no finite end where no difference is named (KL over dozens of orders of magnitude):
  "no difference shown" would claim the two alike on an interval that bounds nothing;
- several verdicts at once (overall and per domain; the leaderboard's pairs) are held as a family
  by Holm's procedure (:func:`family_decisions`);
- with a measured noise model the difference must clear the repeat variation of the metric; with
  only a repeat KL, or none, a named difference is marked provisional.

:func:`evidence` works on arrays with a leading trial axis as well, so the simulation in
``benchmarks/verdict_simulation.py`` runs the product's own rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from kldtui.formats.suite import WINDOW_UNIT
from kldtui.metrics import inference as inf
from kldtui.metrics.stats import holm, t_quantile
from kldtui.text import (
    PLAIN_RANGE,
    TIED_OUTCOMES,
    interval_range,
    outcome_words,
    plain_number,
    table_figure,
)

if TYPE_CHECKING:
    from kldtui.decide.noise import NoiseFloor

MIN_VERDICT_WINDOWS = 8
LEVEL = 0.95
ALPHA = 1.0 - LEVEL

Outcome = Literal["a_closer", "b_closer", "within_noise", "indistinguishable", "too_few_windows",
                  "cannot_calibrate", "no_finite_interval"]


ModelCheck = Literal["cox", "sandwich", "gpq"]


@dataclass(frozen=True)
class CheckStep:
    """From ``windows`` windows on, a tier's log-normal check: Cox's closed form, the same estimate with
    the standard error measured on the windows ("sandwich"), either widened by ``1 + widen / (n - 1)``,
    or the generalised pivotal quantity ("gpq")."""

    windows: int
    kind: ModelCheck
    widen: float = 0.0


@dataclass(frozen=True)
class DependenceTier:
    """Up to a log-scale spread of window means (:func:`kldtui.metrics.inference.upper_spread`): the level
    of the difficulty-dependence test, and the log-normal check that must then confirm a verdict at the
    two-sided ``check_level`` (its interval at ``1 - check_level``), by window count (``checks``: the last
    step whose ``windows`` the suite reaches); at ``strict_check_level`` instead where the sign-flip test
    weighs the windows (:data:`FIRST_TIER_WEIGHT_POWER`) and the dependence t exceeds ``strict_above_t``
    in size: strong dependence moves the weighted mean the test sees away from the mean."""

    up_to: float
    level: float
    checks: tuple[CheckStep, ...]
    check_level: float = 0.05
    strict_above_t: float = math.inf
    strict_check_level: float = 0.05

    def check_level_for(self, dependence_t: np.ndarray, weighted: np.ndarray) -> np.ndarray:
        """The check's two-sided level for each dependence t (NaN: off a log scale, the usual level) and
        whether the sign-flip test weighed the windows."""
        strong = np.abs(np.nan_to_num(np.asarray(dependence_t, dtype=np.float64))) > self.strict_above_t
        out: np.ndarray = np.where(strong & weighted, self.strict_check_level, self.check_level)
        return out

    def check_at(self, windows: int) -> tuple[ModelCheck, float]:
        """The check this tier runs over ``windows`` windows, and its widening."""
        step = [c for c in self.checks if windows >= c.windows][-1]
        return step.kind, step.widen

    def check_name(self, windows: int) -> str:
        """What ``diff --json`` calls the check (``lognormal_check.method``)."""
        kind, widen = self.check_at(windows)
        return f"{kind}_widened" if widen and kind != "gpq" else kind

    def model(self, fit: inf.LogFit, check_level: float | None = None) -> inf.ModelRatio:
        """The check on ``fit``: its interval of ``E[B] / E[A]`` at ``1 - check_level`` (default: the tier's
        :attr:`check_level`) and one-sided p-values."""
        kind, widen = self.check_at(fit.windows)
        level = 1.0 - (self.check_level if check_level is None else check_level)
        if kind == "gpq":
            return inf.lognormal_ratio(fit, level)
        if kind == "sandwich":
            return inf.sandwich_ratio(fit, level, widen)
        return inf.cox_ratio(fit, level, widen)


# From this many windows a log-normal model fitted to them is trusted for the interval itself: where the
# candidates depend differently on window difficulty and the windows spread beyond the first tier, the
# headline interval is the model's alone, and a verdict needs the model to show the difference in either
# direction, so that the interval always agrees with it. Below it, the model's own spreads are too
# uncertain to stand alone (as little as 0.908 at 8 windows): the interval joins the two
# (docs/STATISTICS.md, "Which ratio interval").
MODEL_INTERVAL_FROM = 16

# Over fewer than MODEL_INTERVAL_FROM windows that spread little (the first tier), the sign-flip test
# weighs each window's difference B - A by (A + B)^-FIRST_TIER_WEIGHT_POWER: a window's difference is
# noisier the more KL it holds, and the test then listens less to the noisiest windows (8 windows, B 30 %
# worse, normal window means: named in 0.9862 of 200,000 suites against 0.9840 unweighted). The weights do
# not change when A and B swap inside a window, so the test stays exact where the two are alike window
# by window; its interval is the ratio sum(w B) / sum(w A) it inverts (the same ratio as mean(B) / mean(A)
# where B scales with A), stretched to hold the windows' own ratio. From MODEL_INTERVAL_FROM windows, and
# in a domain (one gets a verdict only in a suite of 16 windows or more), the test is unweighted. None:
# unweighted everywhere (the earlier rule, which the simulation's search tables measure).
# docs/STATISTICS.md, "The rule".
FIRST_TIER_WEIGHT_POWER: float | None = 0.5


def weights_text(power: float) -> str:
    """How the weights ``(A + B)^-power`` are written wherever kldtui says them (the method, diff --json's
    ``sign_flip_weights``, kldtui diff's note): ``1 / sqrt(A + B)`` for the rule's power."""
    return "1 / sqrt(A + B)" if power == 0.5 else f"(A + B)^-{power:g}"


METHOD = ("sign-flip test over windows" + (
    "" if FIRST_TIER_WEIGHT_POWER is None else
    f" (fewer than {MODEL_INTERVAL_FROM} of them that spread little: of each one's difference weighed by "
    f"{weights_text(FIRST_TIER_WEIGHT_POWER)})") + "; interval of mean(B) / mean(A) by inverting it; "
    "log-normal check where the candidates depend differently on window difficulty")

# The wider the window means spread, the more an unseen hard window moves the mean: the weaker the
# evidence of dependence that calls for the check, and the more cautious the check. Cox's form is the
# more powerful check where windows spread little; in few widely spread windows it is liberal (the
# spreads it rests on are themselves uncertain), so it is widened, and the pivotal quantity, calibrated
# at any spread, takes over beyond. Where windows spread little the differences are nearly symmetric and
# the sign-flip test nearly exact, so the check there only has to confirm the direction at 10 %: at 5 %
# it cost power where the dependence test fired by chance (B scaling with A). Where the sign-flip test is
# weighted (FIRST_TIER_WEIGHT_POWER: under MODEL_INTERVAL_FROM windows) and the dependence t exceeds 3,
# the dependence is no chance and the check confirms at 5 %: the weighted test sees a weighted mean, which
# such dependence moves away from the mean (without it a log-normal null with gamma 0.75 named a false
# winner in 5.55 % of 8-window suites, with it 5.35 %). In the gamma-like tier from
# MODEL_INTERVAL_FROM windows, where the check's interval is the headline, its standard error is measured
# on the windows from 32: Cox's form reads it off a normal model of the log window means, and on
# gamma-shaped windows (skewed on a log scale) its interval covered the true ratio in up to 0.99 of
# suites; at 16-31 windows a spread measured on so few windows is itself too uncertain (log-normal
# windows that happen to spread like gamma-shaped ones were covered in 0.930), so Cox's form stays,
# widened as the sandwich one is. Chosen on the simulation (docs/STATISTICS.md, "The rule" and "Which
# ratio interval").
DEPENDENCE_TIERS: tuple[DependenceTier, ...] = (
    DependenceTier(0.45, 0.10, (CheckStep(3, "cox"),), check_level=0.10, strict_above_t=3.0),
    DependenceTier(0.65, 0.20, (CheckStep(3, "cox", 2.0), CheckStep(MODEL_INTERVAL_FROM, "cox", 3.0),
                                CheckStep(32, "sandwich", 3.0))),
    DependenceTier(math.inf, 0.30, (CheckStep(3, "gpq"),)),
)
assert all(math.isclose(t.check_level, ALPHA) for t in DEPENDENCE_TIERS[1:]), "95 % model intervals"

# Where the log-normal model's interval is the headline, from LEAN_FROM windows whose log window means
# are skewed to the left beyond LEFT_SKEWED_BELOW (inference.log_skewness), the model is misspecified in
# the way that matters: those windows have a lighter upper tail than a log-normal one, and its estimate
# of the ratio leans toward the candidate that grows faster (2.5 % high for gamma-shaped windows with
# gamma 1.5, half a standard error at 64 windows). There the headline also holds the sign-flip test's
# interval at LEAN_FLIP_LEVEL (the windows' own, which the model's bias does not reach), and the verdict
# asks the sign-flip test at that level, so that it still agrees with the interval shown. From 32
# windows the skewness is measured well enough to tell gamma-shaped windows (skewness about -0.5) from
# log-normal ones; at 95 % the joined interval covered up to 0.99. Chosen on the simulation
# (docs/STATISTICS.md, "Which ratio interval").
LEAN_FROM = 32
LEFT_SKEWED_BELOW = -0.4
LEAN_FLIP_LEVEL = 0.80

# The lowest coverage of the true ratio B / A the headline interval reached at each simulated window count,
# over every cell of the family (the null, power and interval tables of docs/STATISTICS.md; a test reads
# them back from there): what diff --json's measured_coverage says.
RATIO_INTERVAL_COVERAGE = {8: 0.943, 16: 0.937, 32: 0.935, 64: 0.937}

IntervalSource = Literal["sign_flip", "weighted_sign_flip", "joined", "far_end_widened", "lognormal_model",
                         "model_and_windows"]
# what each headline interval is, for a reader (kldtui diff's table): the sign-flip test's needs no note
INTERVAL_SOURCE_WORDS: dict[str, str] = {
    "weighted_sign_flip": ("the sign-flip test's with each {unit}'s difference weighed by {weights} "
                           "(fewer than 16 {units} that spread little: the noisier {units} that hold more KL "
                           "count less), stretched to hold the {units}' own ratio"),
    "lognormal_model": "a log-normal model's of the {units}",
    "model_and_windows": ("a log-normal model's of the {units} joined with the {units}' own 80 % one (their "
                          "hardest {units} are less extreme than the model assumes)"),
    "joined": "the sign-flip test's and a log-normal model's joined",
    "far_end_widened": "the sign-flip test's, its far end a log-normal model's",
}


def interval_source_words(source: str, unit: str) -> str | None:
    """What a headline interval of ``source`` is (:data:`INTERVAL_SOURCE_WORDS`), counting ``unit`` s;
    None for the sign-flip test's, which needs no note."""
    words = INTERVAL_SOURCE_WORDS.get(source)
    weights = weights_text(FIRST_TIER_WEIGHT_POWER or 0.0)
    return None if words is None else words.format(unit=unit, units=f"{unit}s", weights=weights)


def dependence_tier(spread: np.ndarray) -> np.ndarray:
    """The index in :data:`DEPENDENCE_TIERS` for each spread."""
    bounds = np.array([t.up_to for t in DEPENDENCE_TIERS[:-1]])
    out: np.ndarray = np.digitize(np.nan_to_num(np.asarray(spread, dtype=np.float64), nan=0.0), bounds)
    return out


def json_number(x: float | None) -> float | None:
    """A figure for JSON: null where it is not a finite number (JSON has no infinity)."""
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass(frozen=True)
class Evidence:
    """Everything the rule uses about B - A over one group of windows; arrays over leading trial axes
    (0-d for one group). NaN where a figure does not apply (log-scale figures need positive means)."""

    windows: int
    mean_a: np.ndarray
    mean_b: np.ndarray
    p_flip_worse: np.ndarray  # sign-flip test, one-sided: B's mean larger
    p_flip_better: np.ndarray
    ratio_low: np.ndarray  # interval of mean(B) / mean(A) from the sign-flip test
    ratio_high: np.ndarray
    log_scale: np.ndarray  # bool: every window mean of A and B is positive
    spread: np.ndarray  # log-scale spread of the window means (inference.upper_spread)
    tier: np.ndarray  # index in DEPENDENCE_TIERS (at least the enclosing group's)
    dependence_t: np.ndarray  # Pitman-Morgan t: > 0 when B's KL grows faster with difficulty
    dependent: np.ndarray  # bool: the dependence test rejects at its tier's level, here or in the
    # enclosing group (evidence(within=...))
    faster_b: np.ndarray  # bool: B's KL grows faster with difficulty (by the test that found dependence)
    model_low: np.ndarray  # log-normal check: interval of E[B] / E[A] at its tier's check level
    model_high: np.ndarray
    model_p_worse: np.ndarray  # the check's one-sided p-values on the rule's scale: times
    model_p_better: np.ndarray  # ALPHA / check_level, so that it confirms where this is <= ALPHA / 2
    model_estimate: np.ndarray
    null_skewness: np.ndarray
    needed: np.ndarray  # windows the sign-flip test needs at this skewness
    log_skewness: np.ndarray  # inference.log_skewness: < 0 where the log window means skew to the left
    lean_low: np.ndarray  # the sign-flip test's interval of mean(B) / mean(A) at LEAN_FLIP_LEVEL
    lean_high: np.ndarray
    weighted: np.ndarray  # bool: the sign-flip test weighed the differences (FIRST_TIER_WEIGHT_POWER)
    check_level: np.ndarray  # the log-normal check's two-sided level (DependenceTier.check_level_for)

    @property
    def worse(self) -> np.ndarray:
        """The direction the windows' mean points: True when B's mean is larger."""
        out: np.ndarray = self.mean_b > self.mean_a
        return out

    @property
    def p_flip(self) -> np.ndarray:
        """Two-sided p-value of the sign-flip test."""
        out: np.ndarray = np.minimum(1.0, 2.0 * np.minimum(self.p_flip_worse, self.p_flip_better))
        return out

    @property
    def model_interval(self) -> np.ndarray:
        """Where the headline interval is the log-normal model's alone (:data:`MODEL_INTERVAL_FROM`): the
        candidates depend differently on window difficulty, the windows spread beyond the first tier
        (the later tiers' checks run at 5 %, so the model's interval is the 95 % one), and there are
        enough of them."""
        out: np.ndarray = (self.dependent & self.log_scale & (self.tier >= 1)
                           & (self.windows >= MODEL_INTERVAL_FROM))
        return out

    @property
    def leans_on_windows(self) -> np.ndarray:
        """Where the headline is the model's but the windows' logarithms skew to the left
        (:data:`LEFT_SKEWED_BELOW`, from :data:`LEAN_FROM` windows): the model's estimate leans toward
        the faster-growing candidate there, so the interval also holds the sign-flip test's at
        :data:`LEAN_FLIP_LEVEL`, and the verdict asks the test at that level."""
        out: np.ndarray = (self.model_interval & (self.windows >= LEAN_FROM)
                           & (np.nan_to_num(self.log_skewness, nan=0.0) < LEFT_SKEWED_BELOW))
        return out

    @property
    def checked(self) -> np.ndarray:
        """Where the log-normal check must confirm the direction: the candidates depend differently on
        window difficulty and the windows' mean favours the one whose KL grows faster. The hard windows
        a sample lacks are the ones that would raise that candidate's mean most, so only this direction
        can be a false winner; in the other the missing windows would widen the gap, and the sign-flip
        test alone holds its level there. Where the headline interval is the model's
        (:attr:`model_interval`) the check applies in both directions, so that a verdict always agrees
        with the interval shown."""
        out: np.ndarray = (self.dependent & self.log_scale
                           & ((self.faster_b != self.worse) | self.model_interval))
        return out

    @property
    def p(self) -> np.ndarray:
        """Two-sided p-value of the rule (what Holm's procedure takes): the sign-flip test's in the
        direction the mean points, and where :attr:`checked` the larger of it and the log-normal
        check's in the same direction (both must show it)."""
        flip = np.where(self.worse, self.p_flip_worse, self.p_flip_better)
        # the test at LEAN_FLIP_LEVEL where the interval holds its interval at that level
        flip = np.where(self.leans_on_windows, flip * ALPHA / (1.0 - LEAN_FLIP_LEVEL), flip)
        model = np.where(self.worse, self.model_p_worse, self.model_p_better)
        one = np.where(self.checked, np.maximum(flip, np.nan_to_num(model, nan=1.0)), flip)
        out: np.ndarray = np.minimum(1.0, 2.0 * one)
        return out

    @property
    def uncalibrated(self) -> np.ndarray:
        """The windows' mean would name a winner but the log-normal check does not confirm it, and the
        sign-flip test needs more windows at this skewness: "cannot be calibrated here"."""
        out: np.ndarray = (self.checked & (self.p_flip <= ALPHA) & (self.p > ALPHA)
                           & (self.needed > self.windows))
        return out

    @property
    def _observed_ratio(self) -> np.ndarray:
        """mean(B) / mean(A) over these windows (NaN where A's mean is 0: fmin/fmax then ignore it)."""
        out: np.ndarray = self.mean_b / np.where(self.mean_a > 0, self.mean_a, np.nan)
        return out

    @property
    def joined(self) -> np.ndarray:
        """Below :data:`MODEL_INTERVAL_FROM` windows, where the check applies: the headline interval is
        the union of the sign-flip test's and the model's (both must exclude 1 for a verdict, and the
        union says what both allow)."""
        out: np.ndarray = self.checked & (self.windows < MODEL_INTERVAL_FROM)
        return out

    @property
    def far_end_widened(self) -> np.ndarray:
        """Below :data:`MODEL_INTERVAL_FROM` windows, dependent but not checked (the faster-growing
        candidate named the worse): the end nearer 1 stays the sign-flip test's (it alone decides there)
        and the far end is the farther of the two, since the hard windows the suite lacks would only
        widen the gap, which the windows' own interval cannot show."""
        out: np.ndarray = (self.dependent & self.log_scale & ~self.checked
                           & (self.windows < MODEL_INTERVAL_FROM))
        return out

    @property
    def interval_low(self) -> np.ndarray:
        """The headline interval of ``mean(B) / mean(A)``: the log-normal model's where
        :attr:`model_interval` (stretched to hold the windows' own ratio where that falls outside it, in
        at most 2 % of the simulated suites, so that the estimate shown always lies in its interval;
        the verdict is unchanged, as the model must then show a difference in the mean's direction);
        the union of it and the sign-flip test's where :attr:`joined`; the
        sign-flip test's with the far end widened where :attr:`far_end_widened`; else the sign-flip
        test's. The simulation measures its coverage in every cell (docs/STATISTICS.md)."""
        far = self.far_end_widened & ~self.worse  # B closer: the low end is the far one
        model = np.fmin(self.model_low, self._observed_ratio)
        model = np.where(self.leans_on_windows, np.fmin(model, self.lean_low), model)
        out: np.ndarray = np.where(self.model_interval, model,
                                   np.where(self.joined | far, np.fmin(self.ratio_low, self.model_low),
                                            self.ratio_low))
        return out

    @property
    def interval_high(self) -> np.ndarray:
        far = self.far_end_widened & self.worse  # B worse: the high end is the far one
        model = np.fmax(self.model_high, self._observed_ratio)
        model = np.where(self.leans_on_windows, np.fmax(model, self.lean_high), model)
        out: np.ndarray = np.where(self.model_interval, model,
                                   np.where(self.joined | far, np.fmax(self.ratio_high, self.model_high),
                                            self.ratio_high))
        return out


def evidence(a: np.ndarray, b: np.ndarray, within: Evidence | None = None,
             flips: int = inf.FLIPS) -> Evidence:
    """:class:`Evidence` for window means ``a`` and ``b`` (last axis: windows, at least 3).

    ``within``: the evidence of all windows when ``a`` and ``b`` are one domain's. Whether the two
    candidates depend differently on window difficulty is a property of the candidates, which all the
    windows show far better than a domain's few: a domain is checked where either shows it, at the more
    cautious of the two tiers."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[-1]
    if n < 3:
        raise ValueError("evidence needs at least 3 windows")
    log_scale = np.all(a > 0, axis=-1) & np.all(b > 0, axis=-1)
    safe_a = np.where(log_scale[..., None], a, 1.0)
    safe_b = np.where(log_scale[..., None], b, 1.0)
    fit = inf.log_fit(safe_a, safe_b)
    t = inf.difficulty_dependence(fit)
    spread = inf.upper_spread(safe_a, safe_b)
    tier = dependence_tier(spread)
    crit = np.array([t_quantile(1.0 - tr.level / 2.0, n - 2) for tr in DEPENDENCE_TIERS])[tier]
    dependent = log_scale & (np.abs(t) > crit)
    faster_b = t > 0
    if within is not None:
        tier = np.maximum(tier, within.tier)
        faster_b = np.where(within.dependent, within.faster_b, faster_b)
        dependent = log_scale & (dependent | within.dependent)
    weighted = log_scale & (tier == 0) & (FIRST_TIER_WEIGHT_POWER is not None and within is None
                                          and n < MODEL_INTERVAL_FROM)
    # the test and the intervals that invert it, from the same sign patterns (so the interval excludes 1
    # exactly when the test names a difference, at any number of windows); weighted, the windows' A and B
    # both times w (1 elsewhere), so that the test is of sum(w (B - A)) and its interval of
    # sum(w B) / sum(w A), stretched to hold the windows' own ratio
    w = np.where(weighted[..., None], (safe_a + safe_b) ** -(FIRST_TIER_WEIGHT_POWER or 0.0), 1.0)
    flipped = inf.flip_inference(a * w, b * w, (LEVEL, LEAN_FLIP_LEVEL), flips)
    flip = flipped.test
    (ratio_low, ratio_high), (lean_low, lean_high) = flipped.intervals
    observed = b.mean(axis=-1) / np.where(weighted, a.mean(axis=-1), 1.0)
    ratio_low = np.where(weighted, np.fmin(ratio_low, observed), ratio_low)
    ratio_high = np.where(weighted, np.fmax(ratio_high, observed), ratio_high)
    levels = [tr.check_level_for(t, weighted) for tr in DEPENDENCE_TIERS]
    check_level = np.choose(tier, levels)
    checks = []
    for tr, level in zip(DEPENDENCE_TIERS, levels, strict=True):
        usual = tr.model(fit)
        strict = level != tr.check_level
        if strict.any():  # the suites of this tier whose check runs at its strict level
            at_strict = tr.model(fit, tr.strict_check_level)
            usual = inf.ModelRatio(**{f.name: np.where(strict, getattr(at_strict, f.name),
                                                       getattr(usual, f.name))
                                      for f in dataclasses.fields(inf.ModelRatio)})
        checks.append(usual)
    # the checks' one-sided p-values on the rule's scale: times ALPHA / check level, so that a check
    # confirms where it is at most ALPHA / 2, whatever its own level
    p_scale = ALPHA / check_level

    def pick(name: str) -> np.ndarray:
        out: np.ndarray = np.choose(tier, [getattr(c, name) for c in checks])
        return out

    model = inf.ModelRatio(pick("low"), pick("high"), pick("p_worse") * p_scale,
                           pick("p_better") * p_scale, pick("estimate"))
    skew = inf.null_skewness(fit)
    nan = np.full(np.shape(log_scale), np.nan)

    def logged(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.where(log_scale, x, nan)
        return out

    return Evidence(
        windows=n, mean_a=a.mean(axis=-1), mean_b=b.mean(axis=-1),
        p_flip_worse=flip.p_worse, p_flip_better=flip.p_better, ratio_low=ratio_low, ratio_high=ratio_high,
        log_scale=log_scale, spread=logged(spread), tier=tier, dependence_t=logged(t), dependent=dependent,
        faster_b=faster_b & log_scale,
        model_low=logged(model.low), model_high=logged(model.high), model_p_worse=logged(model.p_worse),
        model_p_better=logged(model.p_better), model_estimate=logged(model.estimate),
        null_skewness=logged(skew),
        needed=np.where(log_scale, inf.windows_needed(skew), float(MIN_VERDICT_WINDOWS)),
        log_skewness=logged(inf.log_skewness(safe_a, safe_b)), lean_low=lean_low, lean_high=lean_high,
        weighted=weighted, check_level=check_level)


def family_flips(verdicts: int) -> int:
    """The sign-flip test's random patterns for a family of ``verdicts`` held together by Holm: enough
    that its smallest p-value (2 / patterns) is at most a quarter of Holm's strictest threshold
    (ALPHA / verdicts). With :data:`~kldtui.metrics.inference.FLIPS` alone a leaderboard of 16
    candidates (120 pairs, threshold 0.00042) could name no difference however far apart they were
    (2 / 4096 = 0.00049); up to 25 verdicts FLIPS is enough and nothing changes."""
    need = 8.0 * max(verdicts, 1) / ALPHA
    return max(inf.FLIPS, 1 << math.ceil(math.log2(need)))


def family_resolvable(windows: int, verdicts: int) -> bool:
    """Whether a family of ``verdicts`` over ``windows`` windows can name any difference at all: the
    sign-flip test's smallest p-value reaches Holm's strictest threshold. Over up to 12 windows every
    sign pattern is used and the smallest p-value is ``2 / 2^windows``: 8 windows cannot tell 5
    candidates apart (10 pairs: 0.005 against 0.0078)."""
    return inf.smallest_flip_p(windows, family_flips(verdicts)) <= ALPHA / max(verdicts, 1)


def family_windows(verdicts: int) -> int:
    """The fewest windows over which a family of ``verdicts`` can name a difference (at least
    :data:`MIN_VERDICT_WINDOWS`)."""
    n = MIN_VERDICT_WINDOWS
    while not family_resolvable(n, verdicts):
        n += 1
    return n


def family_size_for(windows: int) -> int | None:
    """The most candidates a leaderboard over ``windows`` windows can tell apart (all pairs by Holm);
    None beyond :data:`~kldtui.metrics.inference.EXACT_FLIPS_UP_TO` windows, where any number can."""
    if windows > inf.EXACT_FLIPS_UP_TO:
        return None
    k = 2
    while family_resolvable(windows, (k + 1) * k // 2):
        k += 1
    return k


def family_decisions(p_values: Sequence[float], windows: Sequence[int]) -> list[bool]:
    """Which verdicts of a family are significant: Holm's procedure (family-wise 5 %) over the
    groups that can get a verdict (at least :data:`MIN_VERDICT_WINDOWS` windows)."""
    eligible = [i for i, n in enumerate(windows) if n >= MIN_VERDICT_WINDOWS]
    rejected = holm([p_values[i] for i in eligible], ALPHA) if eligible else []
    out = [False] * len(p_values)
    for i, r in zip(eligible, rejected, strict=True):
        out[i] = r
    return out


@dataclass(frozen=True)
class VerdictInterval:
    """B - A over one group of windows: the estimate and the headline interval the verdict rests on, as
    the ratio ``mean(B) / mean(A)`` (:attr:`Evidence.interval_low`) and in KL (``ci95_low``/``ci95_high``:
    the ratio interval's ends times A's mean KL on these windows). None under 3 windows."""

    estimate: float
    ci95_low: float | None
    ci95_high: float | None
    p_value: float | None
    windows: int
    mean_a: float = float("nan")
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_flip: float | None = None
    dependence_t: float | None = None
    dependent: bool = False  # the log-normal check applied (Evidence.checked)
    # what the headline interval is (Evidence.interval_low): the sign-flip test's; joined with the
    # log-normal model's (the check applied, under MODEL_INTERVAL_FROM windows); its far end widened by the
    # model's (dependent, the faster-growing one named the worse, under MODEL_INTERVAL_FROM); the model's
    interval_source: IntervalSource = "sign_flip"
    spread: float | None = None
    model_low: float | None = None
    model_high: float | None = None
    needed_windows: int | None = None
    # the log-normal check of this group's tier (DependenceTier.check_name) and the level of its interval
    # (model_low, model_high); None off a log scale
    model_check: str | None = None
    model_level: float | None = None
    log_skewness: float | None = None  # inference.log_skewness (model_and_windows below LEFT_SKEWED_BELOW)
    # the sign-flip test weighed each window's difference by (A + B)^-power (FIRST_TIER_WEIGHT_POWER); None:
    # unweighted
    weight_power: float | None = None

    @property
    def far_end_widened(self) -> bool:
        return self.interval_source == "far_end_widened"

    @property
    def has_interval(self) -> bool:
        return self.ci95_low is not None and self.ci95_high is not None

    @property
    def standard_error(self) -> None:
        """Kept for callers of the earlier t interval: the sign-flip interval has no standard error."""
        return None

    @property
    def measured_coverage(self) -> float | None:
        """The lowest coverage the simulation measured for this interval at these many windows (the
        largest simulated count not above them); None below a verdict's minimum."""
        return inf.measured_coverage(self.windows, RATIO_INTERVAL_COVERAGE)

    def excludes(self, value: float) -> bool:
        return self.has_interval and not self.ci95_low <= value <= self.ci95_high  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        return {"method": METHOD, "level": LEVEL, "estimate": json_number(self.estimate),
                "standard_error": None, "ci95_low": json_number(self.ci95_low),
                "ci95_high": json_number(self.ci95_high), "p_value": json_number(self.p_value),
                "windows": self.windows, "degrees_of_freedom": None,
                "ratio": json_number(self.ratio), "ratio_ci95_low": json_number(self.ratio_low),
                "ratio_ci95_high": json_number(self.ratio_high),
                "p_value_sign_flip": json_number(self.p_flip),
                "sign_flip_weights": None if self.weight_power is None else weights_text(self.weight_power),
                "difficulty_dependence": {
                    "pitman_morgan_t": json_number(self.dependence_t), "dependent": self.dependent,
                    "far_end_widened": self.far_end_widened, "interval_source": self.interval_source,
                    "log_spread": json_number(self.spread), "log_skewness": json_number(self.log_skewness),
                    "lognormal_ratio_ci95": [json_number(self.model_low), json_number(self.model_high)],
                    "lognormal_check": None if self.model_check is None else {
                        "method": self.model_check, "level": self.model_level}},
                "windows_needed": self.needed_windows, "measured_coverage": self.measured_coverage}

    @property
    def shows_interval(self) -> bool:
        """Whether :meth:`text` gives an interval: a finite one over at least
        :data:`MIN_VERDICT_WINDOWS` windows (a verdict is not given below, and the sign-flip interval
        of 3-7 windows is mostly unbounded)."""
        return bool(self.has_interval and self.windows >= MIN_VERDICT_WINDOWS
                    and math.isfinite(self.ci95_low) and math.isfinite(self.ci95_high))  # type: ignore[arg-type]

    def no_interval_reason(self, unit: str = WINDOW_UNIT) -> str | None:
        """Why :meth:`text` gives no interval, in words (``unit``: what :attr:`windows` counts); None where
        it gives one. Below :data:`MIN_VERDICT_WINDOWS` the count; above, an end that is not a finite
        number (KL spread over so many orders of magnitude that the log-normal model's end overflows)."""
        if self.shows_interval:
            return None
        if self.windows < MIN_VERDICT_WINDOWS or not self.has_interval:
            return f"the verdict's rule needs at least {MIN_VERDICT_WINDOWS} {unit}s"
        end = "upper" if not math.isfinite(self.ci95_high) else "lower"  # type: ignore[arg-type]
        return f"the verdict's rule gives no finite {end} end over these {self.windows} {unit}s"

    def text(self) -> str:
        """The estimate and its interval in a table's figures (kldtui.text.table_figure); the estimate
        alone where :attr:`shows_interval` is false."""
        if not self.shows_interval:
            return table_figure(self.estimate)
        low, high = table_figure(self.ci95_low), table_figure(self.ci95_high)
        return f"{table_figure(self.estimate)} [{low}, {high}]"


def _interval_source(ev: Evidence) -> IntervalSource:
    """Which interval :attr:`Evidence.interval_low` took, for one group."""
    if bool(ev.leans_on_windows):
        return "model_and_windows"
    if bool(ev.model_interval):
        return "lognormal_model"
    if bool(ev.joined):
        return "joined"
    if bool(ev.far_end_widened):
        return "far_end_widened"
    return "weighted_sign_flip" if bool(ev.weighted) else "sign_flip"


def _f(x: np.ndarray | float) -> float:
    return float(np.asarray(x))


def verdict_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                     within: Evidence | None = None, flips: int = inf.FLIPS) -> VerdictInterval:
    """The :class:`VerdictInterval` of B - A for window means ``a`` and ``b`` (one group); ``within``: the
    evidence of all windows when the group is one domain (:func:`evidence`); ``flips``: the sign-flip
    test's random patterns (:func:`family_flips` for a large family)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError("no windows")
    est = float(b.mean() - a.mean())
    if a.size < 3:
        return VerdictInterval(est, None, None, None, int(a.size), mean_a=float(a.mean()))
    ev = evidence(a, b, within=within, flips=flips)
    mean_a = _f(ev.mean_a)
    ratio = _f(ev.mean_b) / mean_a if mean_a > 0 else None
    log_scale = bool(ev.log_scale)
    needed = int(_f(ev.needed)) if log_scale else None
    tier = DEPENDENCE_TIERS[int(ev.tier)]
    r_lo, r_hi = _f(ev.interval_low), _f(ev.interval_high)
    lo = hi = None
    if mean_a > 0:
        lo, hi = (r_lo - 1.0) * mean_a, (r_hi - 1.0) * mean_a
    else:  # A's mean is 0 (A identical to the reference): the mean difference's own interval
        dlo, dhi = inf.flip_ratio_interval(np.ones_like(a), b - a, LEVEL, flips, null=0.0)
        lo, hi = _f(dlo), _f(dhi)

    def opt(x: np.ndarray) -> float | None:
        v = _f(x)
        return v if math.isfinite(v) else None

    return VerdictInterval(
        est, lo, hi, _f(ev.p), int(a.size), mean_a=mean_a, ratio=ratio,
        ratio_low=opt(ev.interval_low) if mean_a > 0 else None,
        ratio_high=opt(ev.interval_high) if mean_a > 0 else None,
        p_flip=_f(ev.p_flip), dependence_t=opt(ev.dependence_t), dependent=bool(ev.checked),
        interval_source=_interval_source(ev),
        spread=opt(ev.spread), model_low=opt(ev.model_low), model_high=opt(ev.model_high),
        needed_windows=needed, model_check=tier.check_name(ev.windows) if log_scale else None,
        model_level=1.0 - _f(ev.check_level) if log_scale else None, log_skewness=opt(ev.log_skewness),
        weight_power=FIRST_TIER_WEIGHT_POWER if bool(ev.weighted) else None)


T = TypeVar("T")


def closer(iv: VerdictInterval, a: T, b: T) -> T:
    """Of A's ``a`` and B's ``b``, the one of the candidate a verdict on ``iv`` names the closer to the
    reference where it names a difference (B - A above zero: A): the one place that decides the
    direction, for :func:`decide` and for the command that confirms a provisional difference (a repeat
    capture of the closer candidate), so that the two never name different candidates."""
    return a if iv.estimate > 0 else b


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    provisional: bool
    # the noise figure the difference was held against, and what it is
    noise_value: float | None
    noise_kind: Literal["repeat_variation", "repeat_kl", "none"]
    # the test alone would name a winner but the family's correction (Holm) does not
    held_by_correction: bool = False
    # why a named difference is provisional (words for the sentence), when it is
    provisional_reason: str | None = None


def decide(iv: VerdictInterval, noise: NoiseFloor | None, window_indices: Sequence[int],
           *, significant: bool | None = None, unit: str = WINDOW_UNIT) -> Decision:
    """The decision for ``iv`` (B - A). ``significant``: the family's verdict (Holm) for this group;
    None decides the group alone (p-value at 5 %). ``unit``: what the reports' windows are called (a
    hidden-state suite's: contexts), for the noise model's provisional reason.

    A decision that names no difference (a tie: no difference shown, or within the repeat variation)
    needs a finite interval: one with an infinite end (an end overflowed, with KL over dozens of
    orders of magnitude) bounds nothing, so such a group has no verdict
    (``no_finite_interval``). A named difference keeps its verdict: its nearer end is finite and
    clears zero (and the repeat variation). Where the interval is finite nothing changes."""
    decision = _decide(iv, noise, window_indices, significant, unit)
    if decision.outcome in TIED_OUTCOMES and iv.no_interval_reason(unit) is not None:
        return Decision("no_finite_interval", False, None, "none")
    return decision


def _decide(iv: VerdictInterval, noise: NoiseFloor | None, window_indices: Sequence[int],
            significant: bool | None, unit: str) -> Decision:
    """:func:`decide` on any interval, finite or not."""
    if iv.windows < MIN_VERDICT_WINDOWS or iv.p_value is None:
        return Decision("too_few_windows", False, None, "none")
    alone = iv.p_value <= ALPHA
    real = alone if significant is None else significant
    if not real:
        if iv.p_flip is not None and iv.p_flip <= ALPHA and iv.dependent and iv.needed_windows is not None \
                and iv.needed_windows > iv.windows and not alone:
            return Decision("cannot_calibrate", False, None, "none")
        return Decision("indistinguishable", False, None, "none", held_by_correction=alone)
    named: Outcome = closer(iv, "a_closer", "b_closer")
    variation = noise.repeat_variation_for(window_indices) if noise is not None else None
    if variation is not None and noise is not None:
        near = _nearer_end(iv)
        if near is not None and near <= variation:
            return Decision("within_noise", False, variation, "repeat_variation")
        reason = noise.provisional_reason(unit)
        return Decision(named, reason is not None, variation, "repeat_variation", provisional_reason=reason)
    if noise is None or noise.threshold <= 0:
        return Decision(named, True, None, "none",
                        provisional_reason=(noise.provisional_reason(unit) if noise is not None else None)
                        or "the variation between two captures was not measured")
    if abs(iv.estimate) < noise.threshold:
        return Decision(named, True, noise.threshold, "repeat_kl",
                        provisional_reason=(f"smaller than the repeat KL {plain_number(noise.threshold)} "
                                            "between two captures of one model, and the repeat variation of "
                                            "this "
                                            "metric is not measured"))
    return Decision(named, False, noise.threshold, "repeat_kl")


def _nearer_end(iv: VerdictInterval) -> float | None:
    """The end of the KL interval nearer zero, in size (the estimate where there is none)."""
    if iv.has_interval:
        return min(abs(iv.ci95_low), abs(iv.ci95_high))  # type: ignore[arg-type]
    return abs(iv.estimate)


_n = plain_number


def _percent(value: float) -> str:
    """A whole percentage ("24 %"); in :func:`plain_number`'s form where its digits would run on."""
    return f"{value:.0f} %" if abs(value) < PLAIN_RANGE[1] else f"{plain_number(value)} %"


def _percent_range(iv: VerdictInterval, worse: bool) -> str:
    """The ratio interval as percentages of A's mean ("24 % to 37 %" worse, or better)."""
    if iv.ratio_low is None or iv.ratio_high is None:
        return ""
    lo, hi = (iv.ratio_low - 1.0) * 100, (iv.ratio_high - 1.0) * 100
    if not worse:
        lo, hi = -hi, -lo
    return f" ({interval_range(lo, hi, _percent)})"


def needed_words(windows: int | None, unit: str = WINDOW_UNIT) -> str:
    """"about 3100 windows", or "more than 10,000 windows" beyond that (``unit`` s)."""
    if windows is None:
        return f"more {unit}s"
    return f"more than 10,000 {unit}s" if windows > 10_000 else f"about {windows} {unit}s"


def _dependence_words(iv: VerdictInterval, name_a: str, name_b: str, unit: str) -> str:
    faster = name_b if (iv.dependence_t or 0.0) > 0 else name_a
    slower = name_a if faster == name_b else name_b
    return (f"{faster}'s KL grows faster with {unit} difficulty than {slower}'s, so the mean over {unit}s "
            f"rests on the few hardest {unit}s")


def _source_words(iv: VerdictInterval, unit: str) -> str:
    """Whose interval a "cannot be calibrated" sentence shows."""
    return {"joined": "joining both", "lognormal_model": "the model's",
            "model_and_windows": f"the model's joined with the {unit}s' own 80 % one",
            "far_end_widened": "its far end the model's"}.get(iv.interval_source, f"the {unit}s' own")


def sentence(decision: Decision, iv: VerdictInterval, mean_a: float, name_a: str, name_b: str,
             confirm: str | None = None, unit: str = WINDOW_UNIT, scope: str = "") -> str:
    """One sentence a non-statistician reads right (docs/STATISTICS.md lists them all); ``unit``:
    what the interval's units are (windows; a hidden-state suite's contexts, or its source clusters);
    ``scope``: where they come from (``analysis partition``), said in brackets right after their count,
    so that it stays with the count rather than trailing a confirm command."""
    n = iv.windows
    units = f"{unit}s"
    dep = _dependence_words(iv, name_a, name_b, unit)
    over = f"over {n} {unit}{'s' if n != 1 else ''}" + (f" ({scope})" if scope else "")
    if decision.outcome == "too_few_windows":
        count = f"{n}, {scope}" if scope else f"{n}"
        return (f"too few {unit}s ({count}) for a verdict: {name_b} - {name_a} = {_n(iv.estimate)} KL is an "
                f"estimate only (a verdict needs at least {MIN_VERDICT_WINDOWS} {unit}s)")
    if decision.outcome == "no_finite_interval":
        where = f" ({scope})" if scope else ""
        return (f"no verdict: {iv.no_interval_reason(unit)}{where}, whose KL spans too many orders of "
                "magnitude to bound it, so the rule shows neither a difference nor that there is none: "
                f"{name_b} - {name_a} = {_n(iv.estimate)} KL is an estimate only")
    interval = (f"95 % interval {interval_range(iv.ci95_low, iv.ci95_high)}" if iv.has_interval  # type: ignore[arg-type]
                else "no interval")
    if decision.outcome == "cannot_calibrate":
        point = name_b if iv.estimate < 0 else name_a
        return (f"cannot be calibrated here: the {units}' mean favours {point} ({name_b} - {name_a} = "
                f"{_n(iv.estimate)} KL {over}), but {dep}, and a log-normal model of the {units} does not "
                f"confirm it ({interval}, {_source_words(iv, unit)}); "
                f"{needed_words(iv.needed_windows, unit)} would be needed for a verdict")
    if decision.outcome == "indistinguishable" and decision.held_by_correction:
        return (f"no difference shown between {name_a} and {name_b} once corrected for the several verdicts "
                f"given together (Holm): {name_b} - {name_a} = {_n(iv.estimate)} KL, {interval}, {over}")
    if decision.outcome == "indistinguishable":
        if iv.has_interval and iv.excludes(0.0):
            unshown = (f"the {units}' own sign-flip test does not show the difference (both must)"
                       if iv.interval_source in ("lognormal_model", "model_and_windows")
                       else f"a log-normal model of the {units} does not confirm the difference")
            return (f"no difference shown between {name_a} and {name_b}: {name_b} - {name_a} = "
                    f"{_n(iv.estimate)} KL, {interval}, {over}, but {dep} "
                    f"and {unshown}")
        return (f"no difference shown between {name_a} and {name_b}: {name_b} - {name_a} = {_n(iv.estimate)} "
                f"KL, {interval}" + (" includes zero" if iv.has_interval else "") + f", {over}")
    pct = f" ({_percent(abs(iv.estimate) / mean_a * 100)} of {name_a}'s mean KL)" if mean_a > 0 else ""
    if decision.outcome == "within_noise":
        return (f"{name_b} - {name_a} = {_n(iv.estimate)} KL{pct}, {interval}, {over}: not clearly larger "
                f"than the measured repeat variation {_n(decision.noise_value or 0)} between captures of one "
                "model, so no winner")
    worse = decision.outcome == "a_closer"
    size = abs(iv.estimate)
    interval = "no interval"
    if iv.has_interval:
        lo, hi = (iv.ci95_low, iv.ci95_high) if worse else (-iv.ci95_high, -iv.ci95_low)  # type: ignore[operator]
        interval = f"95 % interval {interval_range(lo, hi)}{_percent_range(iv, worse)}"  # type: ignore[arg-type]
    text = (f"{name_b} is {'worse' if worse else 'better'} than {name_a} by {_n(size)} KL{pct}, {interval}, "
            f"{over}")
    if iv.interval_source == "model_and_windows":
        text += (f" ({dep}: the interval joins a log-normal model's of the {units}, which allows for harder "
                 f"{units} than these, with the {units}' own 80 % interval, since their hardest {units} are "
                 "less extreme than the model assumes; both show the difference)")
    elif iv.interval_source == "lognormal_model":
        text += (f" ({dep}: the interval is a log-normal model's of the "
                 f"{units}, which allows for harder {units} than these, and the {units}' own test shows the "
                 "difference too)")
    elif iv.interval_source == "joined":
        text += (f" ({dep}: the interval joins the {units}' own and a "
                 "log-normal model's, and both show the difference)")
    elif iv.dependent:
        text += (f" ({dep}: a log-normal model of the {units} "
                 "confirms the difference)")
    elif iv.far_end_widened:
        text += (f" ({dep}: harder {units} than these would only "
                 f"widen the gap, so the interval's far end is a log-normal model's of the {units}, which "
                 "allows for them)")
    if decision.noise_kind == "repeat_variation" and not decision.provisional:
        return text + f"; larger than the measured repeat variation {_n(decision.noise_value or 0)}"
    how = f"; confirm: {confirm}" if confirm else ""
    if decision.provisional:
        return text + f"; provisional: {decision.provisional_reason}{how}"
    return text + f"; larger than the repeat KL {_n(decision.noise_value or 0)} between two captures"


def headline(outcome: Outcome, provisional: bool, iv: VerdictInterval, name_a: str, name_b: str,
             unit: str = WINDOW_UNIT) -> str:
    """:func:`sentence` in one short line: the outcome in a few words (:func:`kldtui.text.outcome_words`),
    then B - A and its interval over ``unit`` s, signed as a difference chart draws them. A view shows
    it above its chart, and the sentence in full (why, how to confirm) further down."""
    words = outcome_words(outcome, "no verdict", provisional, unit=unit, other=name_a)
    interval = f", 95 % interval {interval_range(iv.ci95_low, iv.ci95_high)}" if iv.shows_interval else ""  # type: ignore[arg-type]
    over = f"over {iv.windows} {unit}{'s' if iv.windows != 1 else ''}"
    return f"{name_b}: {words}; {name_b} - {name_a} = {_n(iv.estimate)} KL{interval}, {over}"


def infinite_note(name: str, rows: int, windows: Sequence[int], unit: str = WINDOW_UNIT) -> str:
    """What a verdict adds when a candidate gives probability 0 to tokens the reference predicts (at
    ``windows``, called ``unit``)."""
    shown = ", ".join(str(w) for w in windows[:8]) + (", ..." if len(windows) > 8 else "")
    return (f"{name} gives probability 0 to a token the reference predicts at {rows} position"
            f"{'s' if rows != 1 else ''} ({unit}{'s' if len(windows) != 1 else ''} {shown}): KL is infinite "
            "there, and those positions are left out of the mean KL above")


def infinite_brief(name: str, rows: int) -> str:
    """:func:`infinite_note` in one short line (the dashboard and viewer above a ranking)."""
    return f"{name}: KL infinite at {rows} position{'s' if rows != 1 else ''}, left out of its mean KL"


def noise_brief(noise: NoiseFloor | None, unit: str = WINDOW_UNIT) -> str:
    """:func:`noise_words` in one short line: what a difference must clear, and from what."""
    if noise is None:
        return f"none: {unit}-to-{unit} variation only (kldtui noise measures more)"
    return noise.brief()


def noise_words(noise: NoiseFloor | None, unit: str = WINDOW_UNIT) -> str:
    """Which noise model a verdict used, in a quantization engineer's words (the suite's units called
    ``unit``)."""
    if noise is None:
        return (f"none: {unit}-to-{unit} variation only; how much this metric moves between two captures of "
                "one model is not known (measure it with kldtui noise)")
    return noise.describe(unit)
