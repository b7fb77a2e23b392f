"""One compared window: its per-position figures (:class:`WindowResult`) and its summary
figures (:class:`WindowFigures`, the report's ``per_window_arrays`` columns)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from kldtui.metrics.kernels import RowStats


def finite(a: np.ndarray) -> np.ndarray:
    """``a`` without its infinite entries (the same array when there are none, or when every
    entry is infinite: then the statistics are infinite, null in the JSON)."""
    ok = np.isfinite(a)
    return a if ok.all() or not ok.any() else a[ok]


@dataclass(frozen=True)
class WindowFigures:
    """One window's figures (its ``per_window_arrays`` column values, docs/REPORT.md)."""

    window_index: int
    domain: str
    positions: int
    kl_mean: float
    kl_median: float
    kl_p99: float
    kl_max: float
    js_mean: float
    top1_agreement: float
    p_reference_mean: float
    p_candidate_mean: float
    delta_p_mean: float
    delta_p_rms: float
    nll_reference_mean: float
    nll_candidate_mean: float
    infinite_kl_rows: int
    top5_agreement: float
    top10_agreement: float
    kl_reverse_mean: float | None = None  # only when the rows have the reverse KL


FIGURE_NAMES = tuple(f.name for f in fields(WindowFigures))


@dataclass
class WindowResult:
    """The per-position figures of one compared window (serialisable, so a resumed run need not
    compare it again: :mod:`kldtui.stages.compare.cache`) and its per-window summary figures."""

    window_index: int
    domain: str
    vocab_size: int
    rows: RowStats = field(repr=False)
    elapsed_seconds: float = 0.0
    bytes_compared: int = 0
    backend: str = ""

    @property
    def positions(self) -> int:
        return len(self.rows)

    @property
    def reverse(self) -> bool:
        return self.rows.kl_reverse is not None

    @property
    def kl_mean(self) -> float:
        return float(np.mean(finite(self.rows.kl)))

    @property
    def top1_agreement(self) -> float:
        return float(np.mean(self.rows.argmax_ref == self.rows.argmax_cand))

    def figures(self) -> WindowFigures:
        """This window's figures: its entry of ``per_window_arrays`` (docs/REPORT.md)."""
        r = self.rows
        kl = finite(r.kl)  # KL statistics are over the positions with finite KL (docs/REPORT.md)
        p_ref = np.exp(r.logp_ref_next)
        p_cand = np.exp(r.logp_cand_next)
        dp = p_cand - p_ref
        return WindowFigures(
            window_index=self.window_index,
            domain=self.domain,
            positions=self.positions,
            kl_mean=float(np.mean(kl)),
            kl_median=float(np.median(kl)),
            kl_p99=float(np.quantile(kl, 0.99)),
            kl_max=float(np.max(kl)),
            js_mean=float(np.mean(r.js)),
            top1_agreement=self.top1_agreement,
            p_reference_mean=float(np.mean(p_ref)),
            p_candidate_mean=float(np.mean(p_cand)),
            delta_p_mean=float(np.mean(dp)),
            delta_p_rms=float(np.sqrt(np.mean(dp * dp))),
            nll_reference_mean=float(-np.mean(r.logp_ref_next)),
            nll_candidate_mean=float(-np.mean(r.logp_cand_next)),
            # rows where the candidate gives probability 0 to a token the reference does not
            infinite_kl_rows=int(r.infinite_kl_rows().size),
            top5_agreement=float(np.mean(r.rank_ref_top < 5)),
            top10_agreement=float(np.mean(r.rank_ref_top < 10)),
            kl_reverse_mean=(float(np.mean(finite(r.kl_reverse))) if r.kl_reverse is not None else None),
        )


__all__ = ["FIGURE_NAMES", "WindowFigures", "WindowResult", "finite"]
