"""The compare stage: a candidate's finalized logits (or its server's scores) against the
reference suite, by concern:

========================  =====================================================================
``options``               :class:`CompareOptions`: what a comparison is asked to do
``inputs``                :func:`prepare`: every input validated before the first row
                          (suite and token hashes, manifests, vocabularies, file identity)
``hashing``               files' SHA-256 against their manifests; the reference manifest's hash
``backends``              the backend vocabulary (:class:`Backend`), the one chooser and what a
                          comparison is given (:class:`BackendRequest` or a choice)
``rows``                  reading a logits file's row blocks (``mmap``, else ``pread``)
``engine``                :class:`Engine`: row blocks through a fused kernel on a thread pool
``results``               :class:`WindowResult` (per-position figures) and its window figures
``cache``                 the per-window cache (``compare/window-NNN.json``) and its encoding
``figures``               a window's figures as its server computed them (score mode: read
                          through the capture mode, :mod:`kldtui.capture_modes`)
``report``                :func:`build_report`: the report (docs/REPORT.md) from window results
``driver``                :class:`Comparer`, :func:`run_compare`, :func:`compare`: the stage
========================  =====================================================================

This package exports the stage's public interface, imported when first used (so that the light
modules, e.g. ``backends``, which the CLI and the profile read, do not pull in NumPy); the rest is
imported from its module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kldtui.stages.compare.backends import BackendRequest
    from kldtui.stages.compare.driver import Comparer, compare, compare_window, run_compare
    from kldtui.stages.compare.engine import Engine
    from kldtui.stages.compare.inputs import CompareInputs, prepare
    from kldtui.stages.compare.options import CompareOptions
    from kldtui.stages.compare.report import build_report
    from kldtui.stages.compare.results import WindowResult

_EXPORTS = {"Comparer": "driver", "compare": "driver", "compare_window": "driver", "run_compare": "driver",
            "Engine": "engine", "CompareInputs": "inputs", "prepare": "inputs", "CompareOptions": "options",
            "build_report": "report", "WindowResult": "results", "BackendRequest": "backends"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["BackendRequest", "CompareInputs", "CompareOptions", "Comparer", "Engine", "WindowResult",
           "build_report", "compare", "compare_window", "prepare", "run_compare"]
