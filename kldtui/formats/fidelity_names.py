"""Names of a hidden-state suite's selections without NumPy (the CLI reads them at start-up);
the format itself is :mod:`kldtui.formats.fidelity`."""

from __future__ import annotations

PARTITION_NAMES = ("analysis", "qualification")
# the published comparator's context filters
CONTEXT_FILTERS = ("all", "analysis", "qualification", "sentinel", "non-sentinel")

__all__ = ["CONTEXT_FILTERS", "PARTITION_NAMES"]
