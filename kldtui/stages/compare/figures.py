"""Windows whose figures the candidate's server computed (score mode): read through the capture
mode (:meth:`kldtui.capture_modes.CaptureMode.server_figures`, which checks every file first),
never computed here."""

from __future__ import annotations

import time

from kldtui.capture_modes import ServerFigures
from kldtui.formats.suite import WindowSpec
from kldtui.stages.compare.options import CompareOptions
from kldtui.stages.compare.results import WindowResult


def figures_window(figures: ServerFigures, window: WindowSpec, options: CompareOptions) -> WindowResult:
    """One window's result from the figures its server computed."""
    t0 = time.perf_counter()
    rows, nbytes = figures.window(window, options.reverse)
    return WindowResult(window.index, window.domain, figures.reference.vocab_size, rows,
                        elapsed_seconds=time.perf_counter() - t0, bytes_compared=nbytes,
                        backend=figures.backend)


__all__ = ["figures_window"]
