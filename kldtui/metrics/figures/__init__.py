"""The per-row figure registry: every figure a comparison reports per window is declared once,
as a :class:`RowFigure` (in the style of lm-eval's metric registry).

A declaration says

* ``name``: the report's key for it (a ``per_window_arrays`` column, a key of each
  ``per_window`` entry and, for new figures, of the report's ``figures`` object);
* ``slots``: the kernels' per-row outputs it reads (fields of
  :class:`~kldtui.metrics.kernels.RowStats`, which every kernel fills and the compare cache and
  score files store), and ``values``: one value per row from them;
* ``aggregation`` (a name in :data:`AGGREGATIONS`), ``finite_only`` and ``scale``: how a
  window's rows become its figure, ``scale x aggregation(values)``; the figure over the whole
  comparison is the same over every position (pooled), with a window-clustered bootstrap
  interval over the window figures;
* ``bounds``: the values the figure can take (a rate from 0, a share up to 100 %), which its
  interval's ends are held to;
* ``label``, ``unit``, ``fmt``, ``definition``, ``better``: how the dashboard, the viewer and the
  text summary show it (the report carries label, unit and definition, so it describes itself).

``report = "figures"`` (the default) puts a figure in the report's ``figures`` object and its
per-window values beside the built-in columns; the built-in figures (:mod:`.builtin`) use
``report = "columns"``: their per-window columns have fixed places in the report model, and their
overall forms (Stats objects, ``next_token``, ``topk_agreement``) predate the registry.

Adding a figure: a module here that calls :func:`register`, and its name in
:data:`FIGURE_MODULES` (docs/DEVELOPING.md, "Adding a per-row figure").
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from kldtui.metrics.kernels import FIELDS, RowStats
from kldtui.text import precise_number

if TYPE_CHECKING:
    from kldtui.metrics.inference import Headline

Aggregation = Callable[[np.ndarray], float]
AGGREGATIONS: dict[str, Aggregation] = {}
# how an aggregation's window values combine into the figure over windows: the mean of their p-th
# powers, to the power 1/p (1: their mean; an RMS: 2, so that over windows of equal positions it is the
# RMS over every position, as llama.cpp reports it)
WINDOW_POWERS: dict[str, int] = {}


def register_aggregation(name: str, window_power: int = 1) -> Callable[[Aggregation], Aggregation]:
    """Decorator: ``fn(values) -> float`` reduces a window's (or all) per-row values; ``window_power``:
    how the window values combine (:data:`WINDOW_POWERS`)."""
    def add(fn: Aggregation) -> Aggregation:
        if name in AGGREGATIONS:
            raise ValueError(f"aggregation {name!r} is registered twice")
        AGGREGATIONS[name] = fn
        WINDOW_POWERS[name] = window_power
        return fn
    return add


@register_aggregation("mean")
def _mean(v: np.ndarray) -> float:
    return float(np.mean(v))


@register_aggregation("median")
def _median(v: np.ndarray) -> float:
    return float(np.median(v))


@register_aggregation("p99")
def _p99(v: np.ndarray) -> float:
    return float(np.quantile(v, 0.99))


@register_aggregation("max")
def _max(v: np.ndarray) -> float:
    return float(np.max(v))


@register_aggregation("rms", window_power=2)
def _rms(v: np.ndarray) -> float:
    return float(np.sqrt(np.mean(v * v)))


@register_aggregation("count")
def _count(v: np.ndarray) -> float:
    """Rows where the value is true (non-zero)."""
    return float(np.count_nonzero(v))


def finite(a: np.ndarray) -> np.ndarray:
    """``a`` without its infinite entries (the same array when there are none, or when every
    entry is infinite: then the statistics are infinite, null in the JSON)."""
    ok = np.isfinite(a)
    return a if ok.all() or not ok.any() else a[ok]


def window_headline(values: Sequence[float | None], figure: RowFigure | None) -> Headline:
    """The headline interval (docs/STATISTICS.md) of ``figure`` over windows, from its window values
    (None: a figure this version does not register, taken as a mean): the interval of their mean, or,
    for an aggregation whose windows combine in p-th powers (:data:`WINDOW_POWERS`: an RMS), of the mean
    of the values' p-th powers with the estimate and ends taken back to the figure's scale, so that
    the estimate is the figure over every position wherever the windows have equal positions (RMS Δp:
    llama.cpp's figure; the mean of window RMS values is another, lower one)."""
    from kldtui.metrics.inference import UNBOUNDED, headline  # the registry needs no inference to load

    v = np.array([math.nan if x is None else float(x) for x in values], dtype=np.float64)
    if figure is None:
        return headline(v, UNBOUNDED)
    p = WINDOW_POWERS.get(figure.aggregation, 1)
    if p == 1:
        return headline(v, figure.bounds)
    low_bound, high_bound = figure.bounds
    powered = headline(np.abs(v) ** p, (0.0 if low_bound is None else max(low_bound, 0.0) ** p,
                                        None if high_bound is None else high_bound ** p))

    def back(x: float | None) -> float | None:
        return None if x is None else max(x, 0.0) ** (1.0 / p)

    estimate = back(powered.estimate)
    return replace(powered, estimate=math.nan if estimate is None else estimate, low=back(powered.low),
                   high=back(powered.high))


_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
# keys a per_window entry or per_window_arrays has besides its figures: a figure cannot take them
RESERVED = frozenset({"window_index", "domain", "positions", "kl_reference_to_candidate", "js",
                      "kl_candidate_to_reference", "figures", "extra"})
Values = Callable[[RowStats], "np.ndarray | None"]


@dataclass(frozen=True)
class RowFigure:
    """One per-row figure (see the module docstring)."""

    name: str
    label: str  # short, for the dashboard, the viewer and the text summary
    definition: str  # one sentence, written into the report
    slots: tuple[str, ...]  # the RowStats fields (kernel outputs) ``values`` reads
    values: Values  # one value per row; None when a slot was not computed (kl_reverse)
    aggregation: str = "mean"
    finite_only: bool = False  # leave infinite values out (as KL's statistics do: masked tokens)
    scale: float = 1.0  # figure = scale x aggregation (e.g. 10,000: per 10,000 tokens)
    unit: str = ""  # shown after the value, e.g. "per 10,000 tokens"
    # a function of kldtui.text (a signed shift: signed_table_figure, a q8's +0.0000123 nats in its
    # digits where five fixed decimals read +0.00001; unless told, six significant digits), or a format
    # string where another tool's precision is the figure's (llama.cpp's "Same top p")
    fmt: str | Callable[[float], str] = precise_number
    better: Literal["lower", "higher"] | None = "lower"
    integer: bool = False  # a count: written as a whole number
    report: Literal["figures", "columns"] = "figures"
    # the uncertainty another tool prints beside this figure, from every position's values (e.g.
    # llama.cpp's perplexity tool, which takes positions as independent), in the figure's scale;
    # the report shows it next to its own window-clustered interval
    per_token_uncertainty: Callable[[np.ndarray], float] | None = None
    # the values the figure can take, in its scale (lowest, highest; None: no limit): its interval's
    # ends are held to them (a rate is never shown below 0, an agreement never above 100 %)
    bounds: tuple[float | None, float | None] = (None, None)

    def pooled_uncertainty(self, windows: Sequence[RowStats]) -> float | None:
        """:attr:`per_token_uncertainty` over every position of ``windows`` (None without one)."""
        if self.per_token_uncertainty is None:
            return None
        parts = [self.values(rows) for rows in windows]
        if not parts or any(p is None for p in parts):
            return None
        return float(self.per_token_uncertainty(np.concatenate([p for p in parts if p is not None])))

    def _reduce(self, values: np.ndarray) -> float | int:
        kept = finite(values) if self.finite_only else values
        value = AGGREGATIONS[self.aggregation](kept)
        if self.scale != 1.0:
            value *= self.scale
        return int(value) if self.integer else value

    def window_value(self, rows: RowStats) -> float | int | None:
        """This figure for one window's rows (None when its slots were not computed)."""
        values = self.values(rows)
        return None if values is None else self._reduce(values)

    def pooled_value(self, windows: Sequence[RowStats]) -> float | int | None:
        """This figure over every position of ``windows`` together."""
        parts = [self.values(rows) for rows in windows]
        if not parts or any(p is None for p in parts):
            return None
        return self._reduce(np.concatenate([p for p in parts if p is not None]))

    def format(self, value: float | int | None) -> str:
        """The value as shown; "n/a" when unknown or not finite."""
        if value is None or not math.isfinite(value):
            return "n/a"
        return self.fmt.format(value) if isinstance(self.fmt, str) else self.fmt(value)


_REGISTRY: dict[str, RowFigure] = {}


def register(figure: RowFigure) -> RowFigure:
    """Add ``figure`` to the registry (ValueError on a bad or repeated declaration)."""
    if not _NAME.match(figure.name):
        raise ValueError(f"figure name {figure.name!r}: lower-case letters, digits and _ only")
    if figure.name in _REGISTRY:
        raise ValueError(f"figure {figure.name!r} is registered twice")
    if figure.name in RESERVED:
        raise ValueError(f"figure name {figure.name!r} is a field of the report's per-window entries")
    unknown = [s for s in figure.slots if s not in FIELDS]
    if unknown or not figure.slots:
        raise ValueError(f"figure {figure.name!r}: slots {unknown or '()'} are not kernel outputs "
                         f"(RowStats fields: {', '.join(FIELDS)})")
    if figure.aggregation not in AGGREGATIONS:
        raise ValueError(f"figure {figure.name!r}: unknown aggregation {figure.aggregation!r} "
                         f"(registered: {', '.join(AGGREGATIONS)})")
    _REGISTRY[figure.name] = figure
    return figure


@contextmanager
def registered(figure: RowFigure) -> Iterator[RowFigure]:
    """``figure`` registered for the duration of a ``with`` block (tests, experiments)."""
    register(figure)
    try:
        yield figure
    finally:
        _REGISTRY.pop(figure.name, None)


def all_figures() -> tuple[RowFigure, ...]:
    """Every registered figure, in registration order."""
    return tuple(_REGISTRY.values())


def reported_figures() -> tuple[RowFigure, ...]:
    """The figures of the report's ``figures`` object (not the built-in columns)."""
    return tuple(f for f in _REGISTRY.values() if f.report == "figures")


def get(name: str) -> RowFigure | None:
    return _REGISTRY.get(name)


def figure(name: str) -> RowFigure:
    """A registered figure (KeyError when ``name`` is not one)."""
    return _REGISTRY[name]


# The modules that register figures, imported once here; a new figure's module is added here.
FIGURE_MODULES = ("builtin", "ranking")
for _module in FIGURE_MODULES:
    importlib.import_module(f"{__name__}.{_module}")


__all__ = ["AGGREGATIONS", "FIGURE_MODULES", "WINDOW_POWERS", "RowFigure", "all_figures", "figure", "finite",
           "get", "register", "register_aggregation", "registered", "reported_figures", "window_headline"]
