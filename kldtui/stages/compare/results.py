"""One compared window: its per-position figures (:class:`WindowResult`) and its summary
figures (:class:`WindowFigures`, the report's ``per_window_arrays`` columns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kldtui.metrics import figures as registry
from kldtui.metrics.kernels import RowStats


@dataclass(frozen=True)
class WindowFigures:
    """One window's figures: its entry of ``per_window_arrays`` (docs/REPORT.md), one value per
    registered figure (:mod:`kldtui.metrics.figures`; None where a figure's slots were not
    computed, e.g. the reverse KL without ``--reverse``)."""

    window_index: int
    domain: str
    positions: int
    values: dict[str, float | int | None]

    def __getitem__(self, name: str) -> Any:
        """A figure's value (float, int for counts, None when not computed): Any, because the
        registry, not this class, knows each figure's kind."""
        return self.values[name]


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
    threads: int | None = None  # the kernel's worker threads; None: a server computed the figures
    # why that backend (BackendChoice.reason); "": not known (a server computed the figures, or a
    # cache entry an older kldtui wrote)
    backend_reason: str = ""

    @property
    def positions(self) -> int:
        return len(self.rows)

    @property
    def reverse(self) -> bool:
        return self.rows.kl_reverse is not None

    def figure(self, name: str) -> float | int | None:
        """One registered figure of this window (:mod:`kldtui.metrics.figures`)."""
        return registry.figure(name).window_value(self.rows)

    def _always(self, name: str) -> float:
        value = self.figure(name)
        assert value is not None  # from slots every kernel fills
        return float(value)

    @property
    def kl_mean(self) -> float:
        return self._always("kl_mean")

    @property
    def top1_agreement(self) -> float:
        return self._always("top1_agreement")

    def figures(self) -> WindowFigures:
        """This window's figures: its entry of ``per_window_arrays`` (docs/REPORT.md)."""
        return WindowFigures(self.window_index, self.domain, self.positions,
                             {f.name: f.window_value(self.rows) for f in registry.all_figures()})


__all__ = ["WindowFigures", "WindowResult"]
