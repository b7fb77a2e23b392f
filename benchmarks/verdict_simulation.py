"""Error rates of kldtui's verdicts by simulation: false positives, power and interval coverage.

    python benchmarks/verdict_simulation.py [--trials 20000] [--seed 1]

prints the table in docs/STATISTICS.md. The tests (tests/unit/test_decide_simulation.py) run the same
functions with fewer trials and fixed seeds.

Model (one trial = one suite): every window i has a difficulty w_i shared by all candidates, drawn
from a *window-mean distribution* scaled to mean 0.01 (normal sd 0.003, gamma shape 4, lognormal
sigma 1); candidate c's window mean is ``r_c * w_i * e_ci`` with independent mean-one lognormal
noise e of spread ``s`` (how differently two candidates fail on the same window). A and B identical
in distribution is r_B = r_A = 1; "B 30 % worse" is r_B = 1.3. Windows follow the published layout
(half prose, a quarter code, a quarter instruction). The decision is kldtui's
(:mod:`kldtui.decide.verdict`) with no noise model, i.e. the most liberal one: a difference is named
whenever its 95 % interval excludes zero; a noise model only removes verdicts.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kldtui.decide.verdict import LEVEL, MIN_VERDICT_WINDOWS  # noqa: E402
from kldtui.metrics.stats import t_quantile  # noqa: E402

DISTRIBUTIONS = ("normal", "gamma", "lognormal")
WINDOW_COUNTS = (4, 8, 16, 32)
MEAN = 0.01


def difficulty(dist: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Window difficulties with mean 0.01."""
    if dist == "normal":
        return np.abs(rng.normal(MEAN, 0.003, shape))
    if dist == "gamma":
        return rng.gamma(4.0, MEAN / 4.0, shape)
    if dist == "lognormal":
        return MEAN * rng.lognormal(-0.5, 1.0, shape)
    raise ValueError(dist)


def candidates(dist: str, trials: int, n: int, ratios: tuple[float, ...], spread: float,
               rng: np.random.Generator) -> np.ndarray:
    """Window means ``(candidates, trials, n)`` of candidates sharing window difficulty."""
    w = difficulty(dist, (trials, n), rng)
    noise = rng.lognormal(-spread * spread / 2.0, spread, (len(ratios), trials, n))
    return np.asarray(ratios, dtype=np.float64)[:, None, None] * w[None] * noise


def domain_slices(n: int) -> dict[str, slice]:
    """The published layout scaled to n windows (tests/fixtures_decide.suite_domains)."""
    half, quarter = n // 2, n // 4
    return {"prose": slice(0, half), "code": slice(half, half + quarter),
            "instruction": slice(half + quarter, n)}


@dataclass(frozen=True)
class Intervals:
    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    t: np.ndarray  # |estimate| / standard error
    windows: int


def t_intervals(d: np.ndarray) -> Intervals:
    """The verdict interval (paired Student-t, kldtui.decide.verdict) for each row of ``d``."""
    n = d.shape[-1]
    est = d.mean(axis=-1)
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    q = t_quantile(0.5 + LEVEL / 2.0, n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(est / se)
    return Intervals(est, est - q * se, est + q * se, np.nan_to_num(t, nan=0.0), n)


def named(iv: Intervals) -> np.ndarray:
    """Where a verdict names a winner (no noise model): enough windows and the interval excludes 0."""
    if iv.windows < MIN_VERDICT_WINDOWS:
        return np.zeros(iv.estimate.shape, dtype=bool)
    return (iv.low > 0) | (iv.high < 0)


def holm_reject(t: np.ndarray, df: int, alpha: float = 0.05) -> np.ndarray:
    """Holm over the last axis on |t| statistics with one ``df`` (p ascending = |t| descending): which
    hypotheses are rejected, per trial. Same decisions as kldtui.metrics.stats.holm on their p-values."""
    m = t.shape[-1]
    order = np.argsort(-t, axis=-1)
    st = np.take_along_axis(t, order, axis=-1)
    cut = np.array([t_quantile(1.0 - alpha / (2.0 * (m - k)), df) for k in range(m)])
    ok = np.cumprod(st >= cut, axis=-1).astype(bool)  # step-down: stop at the first non-rejection
    out = np.zeros_like(ok)
    np.put_along_axis(out, order, ok, axis=-1)
    return out


def leaderboard_not_tied(x: np.ndarray) -> np.ndarray:
    """``(k, trials)`` bools: which rows the leaderboard marks *not tied* with the best (Holm over all
    pairs, as kldtui.decide.leaderboard); the best row is False."""
    k, trials, n = x.shape
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    t = np.stack([t_intervals(x[j] - x[i]).t for i, j in pairs], axis=-1)
    rejected = holm_reject(t, n - 1)
    best = x.mean(axis=-1).argmin(axis=0)
    out = np.zeros((k, trials), dtype=bool)
    if n < MIN_VERDICT_WINDOWS:
        return out
    for col, (i, j) in enumerate(pairs):
        out[j] |= rejected[:, col] & (best == i)
        out[i] |= rejected[:, col] & (best == j)
    return out


def diff_rates(dist: str, n: int, trials: int, ratio: float, spread: float, seed: int) -> dict[str, float]:
    """``kldtui diff`` over ``trials`` simulated suites: how often a winner is named overall and per
    domain (where a domain gets a verdict), and how often the overall interval covers the truth."""
    rng = np.random.default_rng(seed)
    a, b = candidates(dist, trials, n, (1.0, ratio), spread, rng)
    iv = t_intervals(b - a)
    truth = (ratio - 1.0) * MEAN
    out = {"named": float(named(iv).mean()),
           "wrong_sign": float(((iv.high < 0) if ratio > 1 else np.zeros(1)).mean()),
           "coverage": float(((iv.low <= truth) & (truth <= iv.high)).mean())}
    per_domain = []
    for sl in domain_slices(n).values():
        if sl.stop - sl.start >= MIN_VERDICT_WINDOWS:  # smaller domains get no verdict
            per_domain.append(float(named(t_intervals(b[:, sl] - a[:, sl])).mean()))
    out["named_domain_max"] = max(per_domain) if per_domain else float("nan")
    return out


def leaderboard_rates(dist: str, n: int, trials: int, k: int, worse: float, spread: float,
                      seed: int) -> dict[str, float]:
    """Leaderboard over ``k`` candidates: with all identical, how often any row is marked not tied
    (false positive); with the last one ``worse`` times the others, how often it is marked not tied."""
    rng = np.random.default_rng(seed)
    same = candidates(dist, trials, n, (1.0,) * k, spread, rng)
    out = {"false_positive": float(leaderboard_not_tied(same).any(axis=0).mean())}
    bad = candidates(dist, trials, n, (1.0,) * (k - 1) + (worse,), spread, rng)
    out["power"] = float(leaderboard_not_tied(bad)[-1].mean())
    return out


def table(trials: int, seed: int, spread: float = 0.1) -> str:
    lines = ["| window means | windows | diff: winner named, A = B (overall) | per domain (max, where a "
             "verdict is given) | B 10 % worse: named | B 30 % worse: named | coverage, B 30 % worse | "
             "leaderboard, 4 identical: any not tied | leaderboard: 30 % worse row not tied |",
             "|---|---|---|---|---|---|---|---|---|"]
    for dist in DISTRIBUTIONS:
        for n in WINDOW_COUNTS:
            s = seed + 1000 * n + DISTRIBUTIONS.index(dist)
            null = diff_rates(dist, n, trials, 1.0, spread, s)
            p10 = diff_rates(dist, n, trials, 1.1, spread, s + 1)
            p30 = diff_rates(dist, n, trials, 1.3, spread, s + 2)
            board = leaderboard_rates(dist, n, trials // 4, 4, 1.3, spread, s + 3)
            worst = null["named_domain_max"]
            dom = "no verdict" if math.isnan(worst) else f"{worst:.3f}"
            verdict = n >= MIN_VERDICT_WINDOWS
            cov = f"{p30['coverage']:.3f}" + ("" if verdict else " (no verdict)")
            lines.append(f"| {dist} | {n} | {null['named']:.3f} | {dom} | {p10['named']:.3f} | "
                         f"{p30['named']:.3f} | {cov} | {board['false_positive']:.3f} | "
                         f"{board['power']:.3f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- method comparison
def _norm_ppf(p: np.ndarray) -> np.ndarray:
    """Standard normal quantile (Acklam's rational approximation refined by one Newton step)."""
    from statistics import NormalDist

    nd = NormalDist()
    flat = np.clip(np.asarray(p, dtype=np.float64).ravel(), 1e-12, 1 - 1e-12)
    return np.array([nd.inv_cdf(float(x)) for x in flat]).reshape(np.shape(p))


def method_intervals(d: np.ndarray, resamples: int, rng: np.random.Generator
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """95 % intervals of mean(d) per row by four methods: Student-t, percentile bootstrap (the original
    comparator's), bootstrap-t and BCa (windows resampled with replacement)."""
    from statistics import NormalDist

    trials, n = d.shape
    iv = t_intervals(d)
    out = {"Student-t": (iv.low, iv.high)}
    idx = rng.integers(0, n, (resamples, n))
    res = d[:, idx]  # trials, resamples, n
    means = res.mean(axis=-1)
    est = d.mean(axis=-1)
    lo, hi = np.quantile(means, [0.025, 0.975], axis=-1)
    out["percentile bootstrap"] = (lo, hi)
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        tt = (means - est[:, None]) / (res.std(axis=-1, ddof=1) / math.sqrt(n))
    tt = np.where(np.isfinite(tt), tt, np.nan)
    tlo, thi = np.nanquantile(tt, [0.025, 0.975], axis=-1)
    out["bootstrap-t"] = (est - thi * se, est - tlo * se)
    z0 = _norm_ppf((means < est[:, None]).mean(axis=-1))
    jack = (d.sum(axis=-1, keepdims=True) - d) / (n - 1)
    dev = jack.mean(axis=-1, keepdims=True) - jack
    den = 6.0 * (dev ** 2).sum(axis=-1) ** 1.5
    accel = np.where(den > 0, (dev ** 3).sum(axis=-1) / np.where(den > 0, den, 1.0), 0.0)
    ordered = np.sort(means, axis=-1)
    ends = []
    for alpha in (0.025, 0.975):
        z = NormalDist().inv_cdf(alpha)
        prob = np.array([NormalDist().cdf(float(x)) for x in z0 + (z0 + z) / (1 - accel * (z0 + z))])
        k = np.clip(np.round(prob * (resamples - 1)).astype(int), 0, resamples - 1)
        ends.append(np.take_along_axis(ordered, k[:, None], axis=-1)[:, 0])
    out["BCa"] = (ends[0], ends[1])
    return out


def methods_table(trials: int, resamples: int, seed: int, spread: float = 0.1) -> str:
    """Coverage (B 30 % worse) and false positives (A = B, interval excludes 0) of each method."""
    names = ["Student-t", "percentile bootstrap", "bootstrap-t", "BCa"]
    lines = ["| window means | windows | " + " | ".join(f"{m}: coverage / false pos." for m in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for dist in DISTRIBUTIONS:
        for n in (8, 16, 32):
            rng = np.random.default_rng(seed + 1000 * n + DISTRIBUTIONS.index(dist))
            a, b = candidates(dist, trials, n, (1.0, 1.3), spread, rng)
            worse = method_intervals(b - a, resamples, rng)
            a0, b0 = candidates(dist, trials, n, (1.0, 1.0), spread, rng)
            null = method_intervals(b0 - a0, resamples, rng)
            truth = 0.3 * MEAN
            cells = []
            for m in names:
                lo, hi = worse[m]
                lo0, hi0 = null[m]
                cover = np.mean((lo <= truth) & (truth <= hi))
                cells.append(f"{cover:.3f} / {np.mean((lo0 > 0) | (hi0 < 0)):.3f}")
            lines.append(f"| {dist} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_interval_table(trials: int, resamples: int, seed: int) -> str:
    """Coverage of one report's own mean-KL interval (the comparator's percentile window bootstrap)."""
    lines = ["| window means | 8 windows | 16 windows | 32 windows |", "|---|---|---|---|"]
    for dist in DISTRIBUTIONS:
        cells = []
        for n in (8, 16, 32):
            rng = np.random.default_rng(seed + 7000 + 100 * n + DISTRIBUTIONS.index(dist))
            x = difficulty(dist, (trials, n), rng)
            idx = rng.integers(0, n, (resamples, n))
            means = x[:, idx].mean(axis=-1)
            lo, hi = np.quantile(means, [0.025, 0.975], axis=-1)
            cells.append(f"{np.mean((lo <= MEAN) & (MEAN <= hi)):.3f}")
        lines.append(f"| {dist} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spread", type=float, default=0.1, help="candidate noise spread s (default 0.1)")
    parser.add_argument("--methods", action="store_true",
                        help="also compare interval methods (Student-t, percentile, bootstrap-t, BCa)")
    parser.add_argument("--resamples", type=int, default=999, help="bootstrap resamples for --methods")
    args = parser.parse_args(argv)
    print(f"{args.trials} trials per cell (leaderboard: {args.trials // 4}), seed {args.seed}, "
          f"candidate spread s = {args.spread}, verdicts from {MIN_VERDICT_WINDOWS} windows\n")
    print(table(args.trials, args.seed, args.spread))
    if args.methods:
        trials = max(args.trials // 20, 200)
        print(f"\nmethods: {trials} trials per cell, {args.resamples} resamples; coverage with B 30 % worse, "
              "false positives with A = B (any window count)\n")
        print(methods_table(trials, args.resamples, args.seed, args.spread))
        print(f"\none report's own mean-KL interval (percentile window bootstrap): coverage, "
              f"{trials} trials\n")
        print(report_interval_table(trials, args.resamples, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
