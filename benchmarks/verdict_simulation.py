"""Error rates of kldtui's verdicts and intervals by simulation, over a family of nulls.

    python benchmarks/verdict_simulation.py                       # every table of docs/STATISTICS.md
    python benchmarks/verdict_simulation.py --trials 2000 --power-trials 500   # a quick look

prints the tables of docs/STATISTICS.md (about an hour on two cores at the defaults: hold
/tmp/kldtui-full.lock). The tests (tests/unit/test_decide_simulation.py) run the same functions with
few trials and fixed seeds.

**Model** (one trial = one suite). Window i has a difficulty w_i, shared by the candidates, from a
*window-mean distribution* with mean 0.01: normal (sd 0.003), gamma (shape 4) or lognormal (sigma
1). Candidate A's window mean is ``w_i e_Ai``; B's is ``r c w_i^gamma e_Bi``, with independent
mean-one log-normal noise e of spread 0.1 (how differently two candidates fail on one window) and
``c = E[w] / E[w^gamma]``, so that B's mean KL is exactly r times A's. gamma = 1: B scales with A
(the exchangeable case); gamma != 1: B depends differently on window difficulty (gamma > 1: it hurts
hard windows more). A *null* is r = 1 (equal mean KL), for every gamma; power is measured at r =
1.1, 1.3 and 2. Windows follow the published layout (half prose, a quarter code, a quarter
instruction); a domain gets a verdict from 8 windows on, and the overall and per-domain verdicts
are one family (Holm). No noise model (the most liberal: a noise model only removes verdicts).

Every decision is kldtui's own (:func:`kldtui.decide.verdict.evidence`, which takes arrays of
trials; Holm by :func:`kldtui.metrics.stats.holm_batch`); the earlier rule (paired Student-t, no
family control) runs beside it on the same suites for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kldtui.decide import verdict as verdict_module  # noqa: E402
from kldtui.decide.noise import RepeatModel  # noqa: E402
from kldtui.decide.verdict import (  # noqa: E402
    ALPHA,
    MIN_VERDICT_WINDOWS,
    MODEL_INTERVAL_FROM,
    CheckStep,
    DependenceTier,
    Evidence,
    evidence,
)
from kldtui.metrics import inference as inf  # noqa: E402
from kldtui.metrics.inference import mean_interval, t_sf  # noqa: E402
from kldtui.metrics.stats import holm_batch, t_quantile  # noqa: E402

CellT = TypeVar("CellT")

DISTRIBUTIONS = ("normal", "gamma", "lognormal")
GAMMAS = (1.0, 0.5, 0.75, 1.25, 1.5)
WINDOW_COUNTS: tuple[int, ...] = (8, 16, 32, 64)  # --windows may run fewer
RATIOS = (1.1, 1.3, 2.0)
MEAN = 0.01
SPREAD = 0.1
CHUNK = 1000  # trials per evidence() call (memory: a few (CHUNK, 4096) arrays)


# ---------------------------------------------------------------------------- the model
def difficulty(dist: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Window difficulties with mean 0.01."""
    if dist == "normal":
        return np.abs(rng.normal(MEAN, 0.003, shape))
    if dist == "gamma":
        return rng.gamma(4.0, MEAN / 4.0, shape)
    if dist == "lognormal":
        return MEAN * rng.lognormal(-0.5, 1.0, shape)
    raise ValueError(dist)


def power_mean(dist: str, gamma: float) -> float:
    """E[w^gamma] for the window-mean distribution (exact; the normal one folded at 0, by quadrature)."""
    if dist == "gamma":
        theta = MEAN / 4.0
        return float(theta ** gamma * math.exp(math.lgamma(4.0 + gamma) - math.lgamma(4.0)))
    if dist == "lognormal":
        return float(MEAN ** gamma * math.exp(-0.5 * gamma + gamma * gamma / 2.0))
    if dist == "normal":
        sd = 0.003
        x = np.linspace(0.0, MEAN + 12 * sd, 400_001)
        dens = (np.exp(-0.5 * ((x - MEAN) / sd) ** 2) + np.exp(-0.5 * ((x + MEAN) / sd) ** 2)) / (
            sd * math.sqrt(2 * math.pi))
        return float(np.trapezoid(x ** gamma * dens, x))
    raise ValueError(dist)


def candidates(dist: str, trials: int, n: int, ratios: tuple[float, ...], rng: np.random.Generator,
               gamma: float = 1.0, spread: float = SPREAD) -> np.ndarray:
    """Window means ``(candidates, trials, n)`` sharing window difficulty: candidate 0 is ``w e``, the
    others ``r c w^gamma e`` (``c`` keeps the mean KL at r times candidate 0's)."""
    w = difficulty(dist, (trials, n), rng)
    noise = rng.lognormal(-spread * spread / 2.0, spread, (len(ratios), trials, n))
    c = MEAN / power_mean(dist, gamma)
    out = np.empty((len(ratios), trials, n))
    for k, r in enumerate(ratios):
        out[k] = w * noise[k] if k == 0 else r * c * w ** gamma * noise[k]
    return out


def domain_slices(n: int) -> dict[str, slice]:
    """The published layout scaled to n windows (tests/fixtures_decide.suite_domains)."""
    half, quarter = n // 2, n // 4
    return {"prose": slice(0, half), "code": slice(half, half + quarter),
            "instruction": slice(half + quarter, n)}


def verdict_groups(n: int) -> list[slice]:
    """The groups that get a verdict: all windows, and every domain of at least 8 windows."""
    out = [slice(0, n)]
    if n >= MIN_VERDICT_WINDOWS:
        out += [sl for sl in domain_slices(n).values() if sl.stop - sl.start >= MIN_VERDICT_WINDOWS]
    return out


# ---------------------------------------------------------------------------- kldtui's rule, vectorised
@dataclass(frozen=True)
class FamilyResult:
    """Per trial: which groups name a winner (and in which direction), and the overall group's
    evidence (interval, headline, calibration)."""

    named: np.ndarray  # (trials, groups) bool, overall first
    worse: np.ndarray  # (trials, groups) bool: B's mean larger
    uncalibrated: np.ndarray  # (trials, groups)
    overall: Evidence


def _concat(parts: list[Evidence]) -> Evidence:
    fields = {f: np.concatenate([getattr(p, f) for p in parts]) for f in Evidence.__dataclass_fields__
              if f != "windows"}
    return Evidence(windows=parts[0].windows, **fields)


def _rows(ev: Evidence, start: int, stop: int) -> Evidence:
    fields = {f: getattr(ev, f)[start:stop] for f in Evidence.__dataclass_fields__ if f != "windows"}
    return Evidence(windows=ev.windows, **fields)


def chunked_evidence(a: np.ndarray, b: np.ndarray, within: Evidence | None = None) -> Evidence:
    return _concat([evidence(a[i:i + CHUNK], b[i:i + CHUNK],
                             within=None if within is None else _rows(within, i, i + CHUNK))
                    for i in range(0, a.shape[0], CHUNK)])


def family(a: np.ndarray, b: np.ndarray) -> FamilyResult:
    """kldtui diff's verdicts for every trial of ``a``, ``b`` ``(trials, n)``: the overall and the
    per-domain groups (checked for difficulty dependence where all windows show it), Holm over those
    with a verdict (as kldtui.decide.paired.paired_diff)."""
    n = a.shape[-1]
    overall = chunked_evidence(a, b)
    groups = [overall] + [chunked_evidence(a[:, sl], b[:, sl], within=overall)
                          for sl in verdict_groups(n)[1:]]
    p = np.stack([g.p for g in groups], axis=-1)
    worse = np.stack([g.worse for g in groups], axis=-1)
    unc = np.stack([g.uncalibrated for g in groups], axis=-1)
    if n < MIN_VERDICT_WINDOWS:
        named = np.zeros(p.shape, dtype=bool)
    else:
        named = holm_batch(p, ALPHA)
    return FamilyResult(named, worse, unc & ~named, groups[0])


def student_t_family(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The earlier rule on the same suites: paired Student-t at 95 % per group, no family control, a
    verdict from 8 windows; ``(trials, groups)`` named."""
    n = a.shape[-1]
    out = []
    for sl in verdict_groups(n):
        d = b[:, sl] - a[:, sl]
        m = d.shape[-1]
        se = d.std(axis=-1, ddof=1) / math.sqrt(m)
        q = t_quantile(0.975, m - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append((np.abs(d.mean(axis=-1)) > q * se) & (m >= MIN_VERDICT_WINDOWS))
    return np.stack(out, axis=-1)


# ---------------------------------------------------------------------------- tables
def cell_seed(seed: int, *keys: float | int | str) -> int:
    text = "|".join(str(k) for k in keys)
    return seed * 1_000_003 + sum((i + 1) * ord(ch) for i, ch in enumerate(text))


def null_rates(dist: str, gamma: float, n: int, trials: int, seed: int) -> dict[str, float]:
    """A null (equal mean KL): family-wise false-winner rate, overall false-winner rate, how often a
    verdict is refused as uncalibrated, the headline interval's coverage of ratio 1; the earlier rule."""
    rng = np.random.default_rng(cell_seed(seed, "null", dist, gamma, n))
    a, b = candidates(dist, trials, n, (1.0, 1.0), rng, gamma)
    fam = family(a, b)
    old = student_t_family(a, b)
    ov = fam.overall
    cover = (ov.interval_low <= 1.0) & (1.0 <= ov.interval_high)
    # the direction the rule leaves to the sign-flip test alone below MODEL_INTERVAL_FROM windows (and from
    # there where the windows spread little): the faster-growing candidate named worse
    faster_worse = fam.named & (fam.worse if gamma > 1 else ~fam.worse)
    return {"fwer": float(fam.named.any(axis=-1).mean()), "overall": float(fam.named[:, 0].mean()),
            "faster_worse": float(faster_worse.any(axis=-1).mean()) if gamma != 1 else math.nan,
            "uncalibrated": float(fam.uncalibrated.any(axis=-1).mean()),
            "checked": float(ov.checked.mean()), "coverage": float(cover.mean()),
            "old_fwer": float(old.any(axis=-1).mean()), "old_overall": float(old[:, 0].mean())}


def power_rates(dist: str, gamma: float, n: int, ratio: float, trials: int, seed: int) -> dict[str, float]:
    """B ``ratio`` times A's mean KL: how often B is named worse overall (and by the earlier rule), and
    the headline interval's coverage of the true ratio."""
    rng = np.random.default_rng(cell_seed(seed, "power", dist, gamma, n, ratio))
    a, b = candidates(dist, trials, n, (1.0, ratio), rng, gamma)
    fam = family(a, b)
    old = student_t_family(a, b)
    ov = fam.overall
    cover = (ov.interval_low <= ratio) & (ratio <= ov.interval_high)
    d = b - a
    new_named = fam.named[:, 0] & fam.worse[:, 0]
    old_named = old[:, 0] & (d.mean(axis=-1) > 0)
    diff = new_named.astype(np.float64) - old_named.astype(np.float64)
    return {"power": float(new_named.mean()),
            "wrong_sign": float((fam.named & ~fam.worse).any(axis=-1).mean()),
            "old_power": float(old_named.mean()),
            "paired_se": float(diff.std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan,
            "checked": float(ov.checked.mean()), "coverage": float(cover.mean())}


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _fmt4(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4f}"


JOBS = 1  # processes for the cells of a table (--jobs); every cell has its own seed, so any count gives
# the same tables


def _cells(fn: Callable[..., CellT], args: list[tuple[object, ...]]) -> Iterator[CellT]:
    """``fn(*a)`` for every ``a`` in order, over :data:`JOBS` processes."""
    if JOBS <= 1:
        yield from (fn(*a) for a in args)
        return
    with ProcessPoolExecutor(max_workers=JOBS) as pool:
        yield from pool.map(fn, *zip(*args, strict=True))


def null_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    lines = ["| window means | gamma | windows | family-wise false winners | overall | "
             "of which the faster-growing one named worse | "
             "cannot be calibrated | headline interval covers 1 (log-normal check applied) | "
             "earlier rule: family-wise / overall |",
             "|---|---|---|---|---|---|---|---|---|"]
    cells = [(dist, gamma, n) for dist in DISTRIBUTIONS for gamma in GAMMAS for n in WINDOW_COUNTS]
    rates = _cells(null_rates, [c + (trials, seed) for c in cells])
    for (dist, gamma, n), r in zip(cells, rates, strict=True):
        lines.append(f"| {dist} | {gamma:g} | {n} | {r['fwer']:.4f} | {r['overall']:.4f} | "
                     f"{_fmt4(r['faster_worse'])} | {r['uncalibrated']:.3f} | "
                     f"{_fmt(r['coverage'])} ({r['checked']:.2f}) | "
                     f"{r['old_fwer']:.3f} / {r['old_overall']:.3f} |")
        log(lines[-1])
    return "\n".join(lines)


def power_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    head = " | ".join(f"B {'2x' if r == 2 else f'{(r - 1) * 100:.0f} %'} worse: named (earlier rule) | "
                      "coverage (check applied)" for r in RATIOS)
    lines = [f"| window means | gamma | windows | {head} |", "|---|---|---|" + "---|---|" * len(RATIOS)]
    groups = [(dist, gamma, n) for dist in DISTRIBUTIONS for gamma in GAMMAS for n in WINDOW_COUNTS]
    rates = iter(_cells(power_rates, [g + (ratio, trials, seed) for g in groups for ratio in RATIOS]))
    for dist, gamma, n in groups:
        cells = []
        for _ in RATIOS:
            r = next(rates)
            cells.append(f"{r['power']:.3f} ({r['old_power']:.3f}) | {_fmt(r['coverage'])} "
                         f"({r['checked']:.2f})")
        lines.append(f"| {dist} | {gamma:g} | {n} | " + " | ".join(cells) + " |")
        log(lines[-1])
    return "\n".join(lines)


def goal_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    """Power to name a 30 % worse candidate where B scales with A (gamma 1) at 8 and 32 windows, with
    the null cells' trial count: the cells the earlier rule's power is quoted for (issue 25)."""
    lines = ["| window means | windows | B 30 % worse: named | earlier rule on the same suites | "
             "difference (two standard errors, paired) |", "|---|---|---|---|---|"]
    cells = [(dist, n) for dist in DISTRIBUTIONS for n in (8, 32) if n in WINDOW_COUNTS]
    rates = _cells(power_rates, [(dist, 1.0, n, 1.3, trials, seed) for dist, n in cells])
    for (dist, n), r in zip(cells, rates, strict=True):
        lines.append(f"| {dist} | {n} | {r['power']:.4f} | {r['old_power']:.4f} | "
                     f"{r['power'] - r['old_power']:+.4f} ({2 * r['paired_se']:.4f}) |")
        log(lines[-1])
    return "\n".join(lines)


def goal_precise_table(trials: int, seed: int, log: Callable[[str], None], runs: int = 10) -> str:
    """The 8-window cells of :func:`goal_table` where the two rules come closest (normal and gamma
    window means), over ``runs`` further runs of ``trials`` suites (seeds ``seed + 1`` on, none of them
    the goal table's), so that the paired difference is measured to a few hundredths of a point."""
    lines = ["| window means | suites | B 30 % worse: named | earlier rule on the same suites | "
             "difference (two standard errors, paired) |", "|---|---|---|---|---|"]
    for dist in ("normal", "gamma"):
        rates = list(_cells(power_rates, [(dist, 1.0, 8, 1.3, trials, seed + k) for k in range(1, runs + 1)]))
        new = float(np.mean([r["power"] for r in rates]))
        old = float(np.mean([r["old_power"] for r in rates]))
        se = math.sqrt(sum(r["paired_se"] ** 2 for r in rates)) / runs
        lines.append(f"| {dist} | {runs * trials:,} | {new:.4f} | {old:.4f} | "
                     f"{new - old:+.4f} ({2 * se:.4f}) |")
        log(lines[-1])
    return "\n".join(lines)


def _tiers(first_bound: float = 0.45, first_level: float = 0.10, first_check: float = 0.10,
           second_bound: float = 0.65, second_widen: float = 2.0) -> tuple[DependenceTier, ...]:
    """The rule's dependence tiers (kldtui.decide.verdict.DEPENDENCE_TIERS) with the knobs that decide
    8-window suites changed: the first tier's bound, dependence level and check level, the second tier's
    bound and its widening under MODEL_INTERVAL_FROM windows."""
    return (DependenceTier(first_bound, first_level, (CheckStep(3, "cox"),), check_level=first_check),
            DependenceTier(second_bound, 0.20, (CheckStep(3, "cox", second_widen),
                                                CheckStep(MODEL_INTERVAL_FROM, "cox", 3.0),
                                                CheckStep(32, "sandwich", 3.0))),
            DependenceTier(math.inf, 0.30, (CheckStep(3, "gpq"),)))


# The rule before its first tier's sign-flip test was weighted (verdict.FIRST_TIER_WEIGHT_POWER) and its
# check made strict where the dependence t exceeds 3: the search for the 8-window power target (the tiers,
# shapes, shapeprecise and bands tables) was made on it, and measures it still, so that those tables stay as
# docs/STATISTICS.md shows them.
UNWEIGHTED_TIERS = _tiers()


@contextlib.contextmanager
def unweighted_rule() -> Iterator[None]:
    """kldtui's rule as it was before the weighted first tier (:data:`UNWEIGHTED_TIERS`, unweighted
    sign-flip test) inside the block; the tier variants below replace the tiers inside it."""
    kept = verdict_module.FIRST_TIER_WEIGHT_POWER, verdict_module.DEPENDENCE_TIERS
    verdict_module.FIRST_TIER_WEIGHT_POWER, verdict_module.DEPENDENCE_TIERS = None, UNWEIGHTED_TIERS
    try:
        yield
    finally:
        verdict_module.FIRST_TIER_WEIGHT_POWER, verdict_module.DEPENDENCE_TIERS = kept


# variants of the tiers measured for the 8-window power target (docs/STATISTICS.md), on the unweighted rule:
# its own tiers first
TIER_VARIANTS: dict[str, tuple[DependenceTier, ...]] = {
    "the unweighted rule": UNWEIGHTED_TIERS,
    "second tier widened by 1 + 1 / (n - 1)": _tiers(second_widen=1.0),
    "first tier up to a spread of 0.50": _tiers(first_bound=0.50),
    "first tier: dependence at 5 %, check at 20 %": _tiers(first_level=0.05, first_check=0.20),
    "first tier: check at 20 %": _tiers(first_check=0.20),
    "both of the first tier's and the second's widening": _tiers(first_level=0.05, first_check=0.20,
                                                                 second_widen=1.0),
}


def tier_variant_rates(variant: str, kind: str, dist: str, gamma: float, trials: int,
                       seed: int) -> dict[str, float]:
    """:func:`power_rates` (``kind`` "power": B 30 % worse, gamma 1) or :func:`null_rates` at 8 windows
    with the unweighted rule's tiers replaced by :data:`TIER_VARIANTS` ``[variant]`` (the same suites as the
    goal and null tables: the cells' seeds)."""
    with unweighted_rule():
        verdict_module.DEPENDENCE_TIERS = TIER_VARIANTS[variant]
        if kind == "power":
            return power_rates(dist, 1.0, 8, 1.3, trials, seed)
        return null_rates(dist, gamma, 8, trials, seed)


def tier_variant_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    """For each of :data:`TIER_VARIANTS`, over 8 windows: power to name a 30 % worse candidate (gamma
    1; the goal table's suites) and the largest family-wise false-winner rate over the 15 nulls (the
    null table's suites)."""
    lines = ["| tiers | B 30 % worse, normal / gamma / log-normal window means (earlier rule "
             f"{'/'.join('{' + d + '}' for d in DISTRIBUTIONS)}) | largest family-wise false winners "
             "over the 15 nulls (which null) |", "|---|---|---|"]
    old: dict[str, float] = {}
    for variant in TIER_VARIANTS:
        power = list(_cells(tier_variant_rates,
                            [(variant, "power", d, 1.0, trials, seed) for d in DISTRIBUTIONS]))
        nulls = [(d, g) for d in DISTRIBUTIONS for g in GAMMAS]
        rates = list(_cells(tier_variant_rates, [(variant, "null", d, g, trials, seed) for d, g in nulls]))
        worst, (dist, gamma) = max(zip((r["fwer"] for r in rates), nulls, strict=True))
        old = {d: r["old_power"] for d, r in zip(DISTRIBUTIONS, power, strict=True)}
        named = " / ".join(f"{r['power']:.4f}" for r in power)
        lines.append(f"| {variant} | {named} | "
                     f"{worst:.4f} ({dist}, gamma {gamma:g}) |")
        log(lines[-1])
    lines[0] = lines[0].format(**{d: f"{old[d]:.4f}" for d in DISTRIBUTIONS})
    return "\n".join(lines)


# the 8-window nulls nearest the 5.5 % limit in the null table (docs/STATISTICS.md)
NEAREST_NULLS = (("lognormal", 0.75), ("gamma", 0.75), ("gamma", 1.25))


def null_precise_table(trials: int, seed: int, log: Callable[[str], None], runs: int = 10) -> str:
    """The 8-window nulls nearest the limit (:data:`NEAREST_NULLS`) over ``runs`` runs of ``trials``
    suites, seeds ``seed`` (the null table's own) to ``seed + runs - 1``: how far one run's rate strays
    from the cell's true rate, and that rate to a tenth of a point."""
    lines = ["| window means | gamma | family-wise false winners, run by run | runs above 5.5 % | "
             "over all runs (two standard errors) |", "|---|---|---|---|---|"]
    for dist, gamma in NEAREST_NULLS:
        rates = [r["fwer"] for r in _cells(null_rates, [(dist, gamma, 8, trials, seed + k)
                                                        for k in range(runs)])]
        lines.append(f"| {dist} | {gamma:g} | {_runs_cells(rates, trials)} |")
        log(lines[-1])
    return "\n".join(lines)


def _runs_cells(rates: list[float], trials: int) -> str:
    """A null's rates over several runs of ``trials`` suites as table cells: run by run, how many runs
    land above 5.5 %, and the rate over all runs with two standard errors."""
    mean = float(np.mean(rates))
    se = math.sqrt(mean * (1.0 - mean) / (trials * len(rates)))
    return (f"{' '.join(f'{r:.4f}' for r in rates)} | {sum(r > 0.055 for r in rates)} of {len(rates)} | "
            f"{mean:.4f} ({2 * se:.4f})")


def _correlation_t(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, int]:
    """The t statistic of the correlation of ``u`` and ``v`` over the last axis, and its degrees of
    freedom (``n - 2``)."""
    n = u.shape[-1]
    uc = u - u.mean(axis=-1, keepdims=True)
    vc = v - v.mean(axis=-1, keepdims=True)
    r = np.clip((uc * vc).sum(axis=-1) / np.sqrt((uc * uc).sum(axis=-1) * (vc * vc).sum(axis=-1)),
                -1.0 + 1e-12, 1.0 - 1e-12)
    return r * np.sqrt((n - 2) / (1.0 - r * r)), n - 2


def _robust_dependence(ev: Evidence, a: np.ndarray, b: np.ndarray, how: str) -> Evidence:
    """``ev`` with the difficulty-dependence test (Pitman-Morgan: the correlation of ``log B - log A``
    with ``log A + log B``) replaced by one that a single window near zero, far out on a log scale,
    cannot sway: ``"ranks"`` correlates their ranks (Spearman), ``"drop lowest"`` leaves out the window
    with the lowest ``log A + log B``; at each suite's own tier's level."""
    x, y = np.log(a), np.log(b)
    if how == "ranks":
        t, df = _correlation_t(np.argsort(np.argsort(y - x, axis=-1), axis=-1).astype(np.float64),
                               np.argsort(np.argsort(x + y, axis=-1), axis=-1).astype(np.float64))
    elif how == "drop lowest":
        keep = np.argsort(x + y, axis=-1)[..., 1:]
        xk, yk = np.take_along_axis(x, keep, axis=-1), np.take_along_axis(y, keep, axis=-1)
        t, df = _correlation_t(yk - xk, xk + yk)
    else:
        raise ValueError(how)
    crit = np.array([t_quantile(1.0 - tier.level / 2.0, df) for tier in verdict_module.DEPENDENCE_TIERS])
    dependent = ev.log_scale & (np.abs(t) > crit[ev.tier])
    return replace(ev, dependence_t=t, dependent=dependent, faster_b=(t > 0) & ev.log_scale)


def weighted_flip_p(a: np.ndarray, b: np.ndarray, worse: np.ndarray, power: float = 0.5) -> np.ndarray:
    """One-sided p-value, in the direction the windows' mean points (``worse``: B's mean larger), of the
    sign-flip test of ``sum((B - A) / (A + B)^power)``: each window's difference weighed down by its
    size, as the per-window noise grows with it. The weights do not change when A and B swap inside a
    window, so it is exact where the candidates are alike window by window; where they depend
    differently on difficulty it tests a weighted mean, not the mean."""
    d = (b - a) / (a + b) ** power
    sums = d @ inf.flip_patterns(d.shape[-1]).T
    obs = sums[..., :1]
    tol = 1e-12 * np.abs(d).sum(axis=-1, keepdims=True)
    out: np.ndarray = np.where(worse, (sums >= obs - tol).mean(axis=-1), (sums <= obs + tol).mean(axis=-1))
    return out


def _shape_decisions(ev: Evidence, a: np.ndarray, b: np.ndarray, shape: str) -> np.ndarray:
    """8-window decisions (one verdict: no domain reaches 8 windows) of :data:`RULE_SHAPES` ``[shape]``
    from the unweighted rule's evidence on the same suites (:func:`unweighted_rule`)."""
    flip = np.where(ev.worse, ev.p_flip_worse, ev.p_flip_better)
    model = np.nan_to_num(np.where(ev.worse, ev.model_p_worse, ev.model_p_better), nan=1.0)
    checked = ev.checked
    test = flip
    if shape == "no check in the first tier":
        checked = checked & (ev.tier > 0)
    elif shape == "paired t in place of the sign-flip test in the first tier":
        d = b - a
        t = d.mean(axis=-1) / (d.std(axis=-1, ddof=1) / math.sqrt(d.shape[-1]))
        student = t_sf(np.where(ev.worse, t, -t), d.shape[-1] - 1)
        test = np.where(ev.tier == 0, student, flip)
    elif shape == "first tier's check at 5 % where the dependence t exceeds 3":
        strong = (ev.tier == 0) & (np.abs(np.nan_to_num(ev.dependence_t)) > 3.0)
        model = np.where(strong, 2.0 * model, model)  # the first tier's p is scaled for its 10 %
    elif shape == "check only where the sign-flip test needs more windows than the suite holds":
        checked = checked & (ev.needed > ev.windows)
    elif shape in WEIGHTED_SHAPES:
        test = np.where(ev.tier == 0, weighted_flip_p(a, b, ev.worse), flip)
        if WEIGHTED_SHAPES[shape]:
            strong = (ev.tier == 0) & (np.abs(np.nan_to_num(ev.dependence_t)) > 3.0)
            model = np.where(strong, 2.0 * model, model)
    elif shape in ROBUST_DEPENDENCE:
        robust: np.ndarray = _robust_dependence(ev, a, b, ROBUST_DEPENDENCE[shape]).p <= ALPHA
        return robust
    elif shape != "the unweighted rule":
        raise ValueError(shape)
    out: np.ndarray = 2.0 * np.where(checked, np.maximum(test, model), test) <= ALPHA
    return out


# the dependence test made robust to one window near zero (a folded normal window's far-out logarithm)
ROBUST_DEPENDENCE = {"dependence test on ranks (Spearman)": "ranks",
                     "dependence test leaving out the lowest window": "drop lowest"}
# the sign-flip test of differences weighed by (A + B)^-1/2 in the first tier (where windows spread little),
# the rule's check as it is (False) or at 5 % where the dependence t exceeds 3 (True): the latter is
# kldtui's rule at 8 windows (FIRST_TIER_WEIGHT_POWER, the first tier's strict_above_t), and decides as it
# does on every suite
WEIGHTED_SHAPES = {"first tier: sign-flip test of (B - A) / (A + B)^1/2": False,
                   "the same, and its check at 5 % where the dependence t exceeds 3 (the rule)": True}
THE_RULE_SHAPE = next(shape for shape, strict in WEIGHTED_SHAPES.items() if strict)
RULE_SHAPES = ("the unweighted rule", "no check in the first tier",
               "paired t in place of the sign-flip test in the first tier",
               "first tier's check at 5 % where the dependence t exceeds 3",
               "check only where the sign-flip test needs more windows than the suite holds",
               *ROBUST_DEPENDENCE, *WEIGHTED_SHAPES)


def rule_shape_rates(dist: str, gamma: float, ratio: float, trials: int, seed: int) -> dict[str, float]:
    """For every one of :data:`RULE_SHAPES` over 8 windows, on the goal table's suites (ratio 1.3,
    seed ``seed``) or the null table's (ratio 1): how often B is named worse (power) or anyone is named
    (a null)."""
    rng = np.random.default_rng(cell_seed(seed, "power", dist, gamma, 8, ratio) if ratio != 1.0
                                else cell_seed(seed, "null", dist, gamma, 8))
    a, b = candidates(dist, trials, 8, (1.0, ratio), rng, gamma)
    with unweighted_rule():
        ev = chunked_evidence(a, b)
    return {shape: float((_shape_decisions(ev, a, b, shape) & (ev.worse if ratio != 1.0 else True)).mean())
            for shape in RULE_SHAPES}


def rule_shape_table(trials: int, seed: int, log: Callable[[str], None], runs: int = 10) -> str:
    """Other shapes of the 8-window rule: power to name a 30 % worse candidate over normal window means
    (the goal-precise table's 200,000 suites) and the largest family-wise false-winner rate over the 15
    nulls (the null table's suites)."""
    power = list(_cells(rule_shape_rates, [("normal", 1.0, 1.3, trials, seed + k)
                                           for k in range(1, runs + 1)]))
    nulls = [(d, g) for d in DISTRIBUTIONS for g in GAMMAS]
    null = list(_cells(rule_shape_rates, [(d, g, 1.0, trials, seed) for d, g in nulls]))
    lines = ["| 8-window rule | B 30 % worse, normal window means | largest family-wise false winners "
             "over the 15 nulls (which null) |", "|---|---|---|"]
    for shape in RULE_SHAPES:
        worst, (dist, gamma) = max(zip((r[shape] for r in null), nulls, strict=True))
        lines.append(f"| {shape} | {np.mean([r[shape] for r in power]):.4f} | "
                     f"{worst:.4f} ({dist}, gamma {gamma:g}) |")
        log(lines[-1])
    return "\n".join(lines)


# ------------------------------------------------------------------ the best rule of the rule's shape
# At 8 windows the unweighted rule is: the sign-flip test, and where the candidates depend differently on
# difficulty (a dependence test at a level set by how widely the windows spread) a log-normal check that
# must confirm it. BAND_MENU is every such choice for one band of spreads: no check, or a dependence level
# with one of the checks; that rule's own three tiers are among them. The bands table picks one per band of
# BAND_EDGES so as to name a 30 % worse candidate over normal window means most often while every null stays
# under a limit, on the suites it then reports (so the best any rule of this shape can do there).
BAND_EDGES = (0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.8)
BAND_CHECKS: tuple[tuple[str, float, float], ...] = (  # (kind, widening, two-sided level)
    ("cox", 0.0, 0.20), ("cox", 0.0, 0.10), ("cox", 0.0, 0.05), ("cox", 2.0, 0.10), ("cox", 2.0, 0.05),
    ("gpq", 0.0, 0.10), ("gpq", 0.0, 0.05))
BAND_MENU: tuple[tuple[float, tuple[str, float, float]] | None, ...] = (None, *(
    (level, check) for level in (0.05, 0.10, 0.20, 0.30, 0.40) for check in BAND_CHECKS))
BAND_LIMITS = (0.050, 0.055, 0.060, 0.070)


def _band_choice_words(choice: tuple[float, tuple[str, float, float]] | None) -> str:
    if choice is None:
        return "no check"
    level, (kind, widen, check) = choice
    name = {"cox": "Cox", "gpq": "the pivotal quantity"}[kind]
    widened = f" widened by 1 + {widen:g} / (n - 1)" if widen else ""
    return f"dependence at {level * 100:g} %, {name}{widened} at {check * 100:g} %"


def band_of(spread: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.digitize(np.nan_to_num(spread, nan=0.0), np.array(BAND_EDGES))
    return out


def rule_bands() -> list[int]:
    """The unweighted rule's tiers (:data:`UNWEIGHTED_TIERS` at 8 windows) as one BAND_MENU index per
    band."""
    out = []
    for low in (0.0, *BAND_EDGES):
        with unweighted_rule():
            tier = UNWEIGHTED_TIERS[int(verdict_module.dependence_tier(np.array(low)))]
        kind, widen = tier.check_at(8)
        out.append(BAND_MENU.index((tier.level, (kind, widen, tier.check_level))))
    return out


def band_decisions(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For 8-window suites ``a``, ``b`` ``(trials, 8)``: each suite's band, the decisions ``(menu,
    trials)`` of every BAND_MENU choice (a difference named), and the direction the mean points (B
    worse)."""
    n = a.shape[-1]
    with unweighted_rule():
        ev = chunked_evidence(a, b)
    fit = inf.log_fit(a, b)
    worse = ev.worse
    flip = np.where(worse, ev.p_flip_worse, ev.p_flip_better) <= ALPHA / 2
    closer_faster = ev.log_scale & (ev.faster_b != worse)
    t = np.abs(np.nan_to_num(ev.dependence_t))
    checks: dict[tuple[str, float, float], np.ndarray] = {}
    for kind, widen, level in BAND_CHECKS:
        model = (inf.lognormal_ratio(fit, 1.0 - level) if kind == "gpq"
                 else inf.cox_ratio(fit, 1.0 - level, widen))
        checks[(kind, widen, level)] = np.where(worse, model.p_worse, model.p_better) <= level / 2
    out = np.empty((len(BAND_MENU), a.shape[0]), dtype=bool)
    for k, choice in enumerate(BAND_MENU):
        if choice is None:
            out[k] = flip
            continue
        level, check = choice
        gated = closer_faster & (t > t_quantile(1.0 - level / 2.0, n - 2))
        out[k] = flip & ~(gated & ~checks[check])
    return band_of(ev.spread), out, worse


def band_rates(kind: str, dist: str, gamma: float, trials: int, seed: int) -> np.ndarray:
    """Per band and BAND_MENU choice, the share of all suites named (``kind`` "null": the null table's
    8-window suites) or with B named worse (``kind`` "power": the goal table's, 30 % worse, gamma 1);
    ``(bands, menu)``, summing over bands to the cell's rate."""
    if kind == "power":
        rng = np.random.default_rng(cell_seed(seed, "power", dist, 1.0, 8, 1.3))
        a, b = candidates(dist, trials, 8, (1.0, 1.3), rng, 1.0)
    else:
        rng = np.random.default_rng(cell_seed(seed, "null", dist, gamma, 8))
        a, b = candidates(dist, trials, 8, (1.0, 1.0), rng, gamma)
    bands, named, worse = band_decisions(a, b)
    if kind == "power":
        named = named & worse
    out = np.zeros((len(BAND_EDGES) + 1, len(BAND_MENU)))
    for k in range(len(BAND_EDGES) + 1):
        out[k] = named[:, bands == k].sum(axis=1) / trials
    return out


def best_bands(power: np.ndarray, nulls: np.ndarray, limit: float) -> list[int] | None:
    """The BAND_MENU choice per band that names most where ``power`` ``(bands, menu)`` is measured while
    every null of ``nulls`` ``(nulls, bands, menu)`` stays at or under ``limit`` (an integer program:
    scipy's HiGHS); None where no choice keeps them there."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    bands, menu = power.shape
    one_each = np.kron(np.eye(bands), np.ones(menu))
    rows = np.vstack([one_each, nulls.reshape(len(nulls), -1)])
    low = np.concatenate([np.ones(bands), np.full(len(nulls), -np.inf)])
    high = np.concatenate([np.ones(bands), np.full(len(nulls), limit)])
    found = milp(-power.ravel(), constraints=LinearConstraint(rows, low, high),
                 integrality=np.ones(bands * menu), bounds=Bounds(0, 1))
    if not found.success:
        return None
    return [int(i) for i in found.x.reshape(bands, menu).argmax(axis=1)]


def _chosen(rates: np.ndarray, choice: list[int]) -> float:
    return float(rates[np.arange(len(choice)), choice].sum())


def band_table(trials: int, seed: int, log: Callable[[str], None], runs: int = 10) -> str:
    """The best rule of the rule's shape at 8 windows, chosen per band of spreads on the null table's and
    the goal table's suites (seed ``seed``), for each of BAND_LIMITS; then the one chosen at 5.5 %
    measured on suites it was not chosen on (nulls: seed ``seed + 1``; normal power: the goal-precise
    table's ``runs`` runs)."""
    nulls = [(d, g) for d in DISTRIBUTIONS for g in GAMMAS]
    null = np.array(list(_cells(band_rates, [("null", d, g, trials, seed) for d, g in nulls])))
    power = np.array(list(_cells(band_rates, [("power", d, 1.0, trials, seed) for d in DISTRIBUTIONS])))
    old = [power_rates(d, 1.0, 8, 1.3, trials, seed)["old_power"] for d in DISTRIBUTIONS]
    lines = ["| every null at most | B 30 % worse named, normal / gamma / log-normal window means (earlier "
             f"rule {' / '.join(f'{x:.4f}' for x in old)}) | largest family-wise false winners (which null) "
             "| per band of spreads (upper ends) |", "|---|---|---|---|"]
    chosen: dict[float, list[int]] = {}

    def row(name: str, choice: list[int]) -> None:
        rates = [_chosen(null[k], choice) for k in range(len(nulls))]
        worst = int(np.argmax(rates))
        bands = "; ".join(f"{up}: {_band_choice_words(BAND_MENU[c])}"
                          for up, c in zip((*BAND_EDGES, "beyond"), choice, strict=True))
        lines.append(f"| {name} | {' / '.join(f'{_chosen(p, choice):.4f}' for p in power)} | "
                     f"{rates[worst]:.4f} ({nulls[worst][0]}, gamma {nulls[worst][1]:g}) | {bands} |")
        log(lines[-1])

    row("the unweighted rule", rule_bands())
    for limit in BAND_LIMITS:
        choice = best_bands(power[0], null, limit)
        if choice is None:
            lines.append(f"| {limit * 100:g} % | none keeps every null there | | |")
            continue
        chosen[limit] = choice
        row(f"{limit * 100:g} %", choice)
    if 0.055 not in chosen:
        return "\n".join(lines)
    fresh_null = np.array(list(_cells(band_rates, [("null", d, g, trials, seed + 1) for d, g in nulls])))
    fresh_power = np.array(list(_cells(band_rates, [("power", "normal", 1.0, trials, seed + k)
                                                    for k in range(1, runs + 1)])))
    old_fresh = float(np.mean([r["old_power"] for r in _cells(
        power_rates, [("normal", 1.0, 8, 1.3, trials, seed + k) for k in range(1, runs + 1)])]))
    lines += ["", "| on suites it was not chosen on | B 30 % worse named, normal window means (earlier rule) "
              "| largest family-wise false winners (which null) |", "|---|---|---|"]
    for name, choice in (("the unweighted rule", rule_bands()), ("chosen at 5.5 %", chosen[0.055])):
        rates = [_chosen(fresh_null[k], choice) for k in range(len(nulls))]
        worst = int(np.argmax(rates))
        named = float(np.mean([_chosen(p, choice) for p in fresh_power]))
        lines.append(f"| {name} | {named:.4f} ({old_fresh:.4f}) | "
                     f"{rates[worst]:.4f} ({nulls[worst][0]}, gamma {nulls[worst][1]:g}) |")
        log(lines[-1])
    return "\n".join(lines)


def shape_precise_table(trials: int, seed: int, log: Callable[[str], None], runs: int = 10) -> str:
    """The 8-window nulls nearest the limit (:data:`NEAREST_NULLS`) over ``runs`` runs (the null-precise
    table's suites) for the unweighted rule and the weighted sign-flip shapes (:data:`WEIGHTED_SHAPES`)."""
    shapes = ("the unweighted rule", *WEIGHTED_SHAPES)
    cells: list[tuple[object, ...]] = [(d, g, 1.0, trials, seed + k) for d, g in NEAREST_NULLS
                                       for k in range(runs)]
    rates = list(_cells(rule_shape_rates, cells))
    lines = ["| window means | gamma | 8-window rule | family-wise false winners, run by run | "
             "runs above 5.5 % | over all runs (two standard errors) |", "|---|---|---|---|---|---|"]
    for i, (dist, gamma) in enumerate(NEAREST_NULLS):
        for shape in shapes:
            each = [r[shape] for r in rates[i * runs:(i + 1) * runs]]
            lines.append(f"| {dist} | {gamma:g} | {shape} | {_runs_cells(each, trials)} |")
            log(lines[-1])
    return "\n".join(lines)


BETWEEN_COUNTS = tuple(range(MIN_VERDICT_WINDOWS + 1, MODEL_INTERVAL_FROM))


def between_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    """The window counts between 8 and MODEL_INTERVAL_FROM, where the rule is the 8-window one (the
    weighted first tier; no domain reaches 8 windows) but the null and power tables do not look: the
    family-wise false-winner rate of every null, then the power to name a 30 % worse candidate where B
    scales with A (gamma 1), with the null trials per cell."""
    lines = ["| window means | gamma | " + " | ".join(f"{n} windows" for n in BETWEEN_COUNTS) + " |",
             "|---|---|" + "---|" * len(BETWEEN_COUNTS)]
    nulls = [(d, g) for d in DISTRIBUTIONS for g in GAMMAS]
    rates = iter(_cells(null_rates, [(d, g, n, trials, seed) for d, g in nulls for n in BETWEEN_COUNTS]))
    for dist, gamma in nulls:
        lines.append(f"| {dist} | {gamma:g} | " + " | ".join(f"{next(rates)['fwer']:.4f}"
                                                            for _ in BETWEEN_COUNTS) + " |")
        log(lines[-1])
    power = iter(_cells(power_rates, [(d, 1.0, n, 1.3, trials, seed) for d in DISTRIBUTIONS
                                      for n in BETWEEN_COUNTS]))
    for dist in DISTRIBUTIONS:
        cells = [next(power) for _ in BETWEEN_COUNTS]
        lines.append(f"| {dist}, B 30 % worse: named (earlier rule) | 1 | " + " | ".join(
            f"{r['power']:.4f} ({r['old_power']:.4f})" for r in cells) + " |")
        log(lines[-1])
    return "\n".join(lines)


def interval_rates(dist: str, gamma: float, n: int, ratio: float, trials: int, seed: int) -> dict[str, float]:
    """Coverage of the true ratio by the headline interval of mean(B) / mean(A) and by the alternatives it
    was chosen over: the sign-flip test's alone; the log-normal model's wherever the windows spread
    beyond the first tier and the candidates depend differently on difficulty, at every window count
    (the headline takes it from MODEL_INTERVAL_FROM windows); the headline as it was before it held the
    windows' own 80 % interval where their logarithms skew to the left (LEAN_FROM windows on); the joined
    interval of an earlier rule (the union where the check applied, the far end widened in the other
    direction)."""
    rng = np.random.default_rng(cell_seed(seed, "interval", dist, gamma, n, ratio))
    a, b = candidates(dist, trials, n, (1.0, ratio), rng, gamma)
    ev = chunked_evidence(a, b)
    dep = ev.dependent & ev.log_scale
    model_everywhere = dep & (ev.tier >= 1)
    old_checked = dep & (ev.faster_b != ev.worse)
    old_low = np.where(old_checked | (dep & ~ev.worse), np.fmin(ev.ratio_low, ev.model_low), ev.ratio_low)
    old_high = np.where(old_checked | (dep & ev.worse), np.fmax(ev.ratio_high, ev.model_high), ev.ratio_high)
    observed = ev.mean_b / ev.mean_a  # the model's interval is stretched to hold it, as the headline's
    lean = ev.leans_on_windows  # the headline before it held the windows' own 80 % interval there
    intervals = {"headline": (ev.interval_low, ev.interval_high), "flip": (ev.ratio_low, ev.ratio_high),
                 "model_alone": (np.where(lean, np.fmin(ev.model_low, observed), ev.interval_low),
                                 np.where(lean, np.fmax(ev.model_high, observed), ev.interval_high)),
                 "model": (np.where(model_everywhere, np.fmin(ev.model_low, observed), ev.ratio_low),
                           np.where(model_everywhere, np.fmax(ev.model_high, observed), ev.ratio_high)),
                 "joined": (old_low, old_high)}
    out = {k: float(((lo <= ratio) & (ratio <= hi)).mean()) for k, (lo, hi) in intervals.items()}
    out["model_share"] = float(model_everywhere.mean())
    out["lean_share"] = float(lean.mean())
    return out


def interval_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    lines = ["| window means | gamma | windows | B / A | headline (share joined with the windows' own 80 %) "
             "| without the join | sign-flip alone | log-normal model at "
             "every window count (share of suites it applies to) | joined (an earlier rule) |",
             "|---|---|---|---|---|---|---|---|---|"]
    cells = [(dist, gamma, n, r) for dist in DISTRIBUTIONS for gamma in GAMMAS if gamma != 1
             for n in WINDOW_COUNTS for r in (1.0, 1.3, 2.0)]
    rates = _cells(interval_rates, [c + (trials, seed) for c in cells])
    for (dist, gamma, n, r), x in zip(cells, rates, strict=True):
        lines.append(f"| {dist} | {gamma:g} | {n} | {r:g} | {x['headline']:.3f} ({x['lean_share']:.2f}) | "
                     f"{x['model_alone']:.3f} | {x['flip']:.3f} | "
                     f"{x['model']:.3f} ({x['model_share']:.2f}) | {x['joined']:.3f} |")
        log(lines[-1])
    return "\n".join(lines)


# ---------------------------------------------------------------------------- one report's mean KL
def percentile_bootstrap(x: np.ndarray, resamples: int, rng: np.random.Generator,
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The original comparator's interval (percentile window bootstrap) for each row of ``x``."""
    n = x.shape[-1]
    idx = rng.integers(0, n, (resamples, n))
    lo, hi = [], []
    for i in range(0, x.shape[0], 500):
        means = x[i:i + 500][:, idx].mean(axis=-1)
        q = np.quantile(means, [0.025, 0.975], axis=-1)
        lo.append(q[0])
        hi.append(q[1])
    return np.concatenate(lo), np.concatenate(hi)


def mean_coverage(dist: str, n: int, trials: int, seed: int, resamples: int = 999) -> dict[str, float]:
    rng = np.random.default_rng(cell_seed(seed, "mean", dist, n))
    x = difficulty(dist, (trials, n), rng)
    got = mean_interval(x)
    plo, phi = percentile_bootstrap(x, resamples, rng)
    return {"headline": float(np.mean((got.low <= MEAN) & (MEAN <= got.high))),
            "percentile": float(np.mean((plo <= MEAN) & (MEAN <= phi))),
            "log_scale": float(got.log_scale.mean()), "stretched": float(got.stretched.mean())}


def mean_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    counts = (4, 8, 16, 32, 64)
    lines = ["| window means | " + " | ".join(f"{n} windows: headline (percentile bootstrap)"
                                            for n in counts) + " |",
             "|---|" + "---|" * len(counts)]
    for dist in DISTRIBUTIONS:
        cells = []
        for n in counts:
            r = mean_coverage(dist, n, trials, seed)
            cells.append(f"{r['headline']:.3f} ({r['percentile']:.3f})")
        lines.append(f"| {dist} | " + " | ".join(cells) + " |")
        log(lines[-1])
    return "\n".join(lines)


# ---------------------------------------------------------------------------- leaderboard
def leaderboard_not_tied(x: np.ndarray) -> np.ndarray:
    """``(k, trials)``: which rows the leaderboard marks *not tied* with the best (Holm over all pairs,
    as kldtui.decide.leaderboard); the best row is False."""
    k, trials, n = x.shape
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    p = np.stack([chunked_evidence(x[i], x[j]).p for i, j in pairs], axis=-1)
    rejected = holm_batch(p, ALPHA)
    best = x.mean(axis=-1).argmin(axis=0)
    out = np.zeros((k, trials), dtype=bool)
    if n < MIN_VERDICT_WINDOWS:
        return out
    for col, (i, j) in enumerate(pairs):
        out[j] |= rejected[:, col] & (best == i)
        out[i] |= rejected[:, col] & (best == j)
    return out


def leaderboard_rates(dist: str, n: int, trials: int, seed: int, k: int = 4,
                      gamma: float = 1.0) -> dict[str, float]:
    rng = np.random.default_rng(cell_seed(seed, "board", dist, n, gamma))
    same = candidates(dist, trials, n, (1.0,) * k, rng, gamma)
    out = {"false_positive": float(leaderboard_not_tied(same).any(axis=0).mean())}
    bad = candidates(dist, trials, n, (1.0,) * (k - 1) + (1.3,), rng)
    out["power"] = float(leaderboard_not_tied(bad)[-1].mean())
    return out


def leaderboard_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    lines = ["| window means | windows | 4 identical (gamma 1): any not tied | 4 equal means "
             "(one gamma 1.5): any not tied | a 30 % worse row: not tied |", "|---|---|---|---|---|"]
    for dist in DISTRIBUTIONS:
        for n in WINDOW_COUNTS:
            r = leaderboard_rates(dist, n, trials, seed)
            r2 = leaderboard_rates(dist, n, trials, seed + 1, gamma=1.5)
            lines.append(f"| {dist} | {n} | {r['false_positive']:.3f} | {r2['false_positive']:.3f} | "
                         f"{r['power']:.3f} |")
            log(lines[-1])
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the noise model
def capture(true: np.ndarray, offset_sd: float, per_window_sd: float, rng: np.random.Generator) -> np.ndarray:
    """One capture's window means: every window shifted by a capture-wide relative offset, plus each
    window's own relative noise."""
    o = rng.normal(0.0, offset_sd, true.shape[:-1] + (1,))
    return true * (1.0 + o + rng.normal(0.0, per_window_sd, true.shape))


def noise_rates(offset: float, captures: int, n: int, trials: int, seed: int, ratio: float = 1.0,
                per_window_sd: float = 0.02) -> dict[str, float]:
    """A noise model from ``captures`` captures of candidate X, then diff of a new capture of X (A) and
    a new capture of Y = ratio x X (B): how often a winner is named (ratio 1: falsely), as diff
    decides with that model (overall verdict, lognormal window means)."""
    rng = np.random.default_rng(cell_seed(seed, "noise", offset, captures, n, ratio))
    named = 0
    windows = list(range(n))
    for _ in range(trials):
        true = difficulty("lognormal", (n,), rng)
        model = RepeatModel.from_captures(np.stack([capture(true, offset, per_window_sd, rng)
                                                    for _ in range(captures)]), windows, [])
        a = capture(true, offset, per_window_sd, rng)
        b = capture(ratio * true, offset, per_window_sd, rng)
        ev = evidence(a, b)
        if float(ev.p) > ALPHA:
            continue
        mean_a = float(a.mean())
        lo, hi = (float(ev.interval_low) - 1) * mean_a, (float(ev.interval_high) - 1) * mean_a
        near = min(abs(lo), abs(hi))
        named += near > model.variation_for(windows)
    return {"named": named / trials}


def noise_table(trials: int, seed: int, log: Callable[[str], None]) -> str:
    lines = ["| capture-wide offset (sd, of the mean) | windows | same model, one repeat (2 captures) | "
             "two repeats (3 captures) | three repeats (4) | B 30 % worse, two repeats |",
             "|---|---|---|---|---|---|"]
    for offset in (0.01, 0.03, 0.05):
        for n in (16, 32):
            cells = [noise_rates(offset, c, n, trials, seed)["named"] for c in (2, 3, 4)]
            power = noise_rates(offset, 3, n, trials, seed, ratio=1.3)["named"]
            lines.append(f"| {offset * 100:.0f} % | {n} | " + " | ".join(f"{c:.3f}" for c in cells)
                         + f" | {power:.3f} |")
            log(lines[-1])
    return "\n".join(lines)


# --tables NAME: its heading, the function that prints it, and which trial count it takes (--trials,
# --power-trials, half or a quarter of them, --noise-trials), in the order the tables are printed
TABLES: dict[str, tuple[str, Callable[[int, int, Callable[[str], None]], str], str]] = {
    "null": ("nulls (equal mean KL)", null_table, "null"),
    "goal": ("power where B scales with A (null trials per cell)", goal_table, "null"),
    "goalprecise": ("power where B scales with A at 8 windows, over ten more runs of the null trials",
                    goal_precise_table, "null"),
    "tiers": ("variants of the dependence tiers at 8 windows", tier_variant_table, "null"),
    "nullprecise": ("the 8-window nulls nearest the limit, over ten runs of the null trials",
                    null_precise_table, "null"),
    "shapes": ("other shapes of the 8-window rule", rule_shape_table, "null"),
    "shapeprecise": ("the 8-window nulls nearest the limit under the weighted shapes, over ten runs",
                     shape_precise_table, "null"),
    "bands": ("the best rule of the rule's shape at 8 windows, band by band", band_table, "null"),
    "between": ("nulls and power at 9-15 windows", between_table, "null"),
    "power": ("power and coverage", power_table, "power"),
    "interval": ("the ratio interval's coverage, by the interval", interval_table, "interval"),
    "mean": ("one report's mean KL, coverage of the true mean", mean_table, "power"),
    "board": ("leaderboard", leaderboard_table, "board"),
    "noise": ("noise model (lognormal window means, 2 % per-window repeat noise)", noise_table, "noise"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000, help="trials per null cell (default 20000)")
    parser.add_argument("--power-trials", type=int, default=5000,
                        help="trials per power, coverage and leaderboard cell (default 5000)")
    parser.add_argument("--noise-trials", type=int, default=2000, help="trials per noise-model cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes (default 1; the tables do not depend on it)")
    parser.add_argument("--windows", default="8,16,32,64",
                        help="the window counts of the tables with rows by window count, comma-separated "
                             "(default 8,16,32,64; every cell has its own seed, so a row is the same "
                             "whichever others are run)")
    parser.add_argument("--tables", default="null,goal,power,interval,mean,board,noise",
                        help="which tables, comma-separated (default: these; also goalprecise, the "
                             "goal table's 8-window cells over 200,000 more suites; tiers, variants "
                             "of the dependence tiers at 8 windows; nullprecise, the 8-window nulls "
                             "nearest the limit over ten runs; shapes, other shapes of the 8-window "
                             "rule; shapeprecise, the nearest nulls under its weighted shapes over ten "
                             "runs; bands, the best rule of its shape chosen band by band of spreads; "
                             "between, nulls and power at 9-15 windows)")
    args = parser.parse_args(argv)
    global JOBS, WINDOW_COUNTS
    JOBS = max(1, args.jobs)
    every = (8, 16, 32, 64)
    try:
        counts = tuple(int(n) for n in args.windows.split(","))
    except ValueError:
        parser.error(f"--windows {args.windows}: expected window counts such as 8,16")
    if set(counts) - set(every):
        parser.error(f"--windows {args.windows}: the tables have rows for 8, 16, 32 and 64 windows")
    WINDOW_COUNTS = tuple(n for n in every if n in counts)
    tables = set(args.tables.split(","))
    if tables - TABLES.keys():
        unknown = ", ".join(sorted(tables - TABLES.keys()))
        parser.error(f"no such table: {unknown} (the tables: {', '.join(TABLES)})")
    from measure import cpu_summary, loadavg  # benchmarks/measure.py (run as a script: on sys.path)

    t0 = time.time()

    def log(line: str) -> None:
        print(f"  [{time.time() - t0:6.0f} s] {line}", file=sys.stderr, flush=True)

    print(f"seed {args.seed}; nulls {args.trials} trials per cell, power/coverage/leaderboard "
          f"{args.power_trials}, noise model {args.noise_trials}; verdicts from {MIN_VERDICT_WINDOWS} "
          "windows")
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}\n")
    trials = {"null": args.trials, "power": args.power_trials, "interval": args.power_trials // 2,
              "board": args.power_trials // 4, "noise": args.noise_trials}
    for name, (heading, table, count) in TABLES.items():  # in this order, whatever --tables says
        if name in tables:
            print(f"{heading}:\n\n" + table(trials[count], args.seed, log) + "\n")
    print(f"({time.time() - t0:.0f} s)")
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
