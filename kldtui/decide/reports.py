"""Reading saved comparison reports for the decide tools: per-window KL and the pairing check.

Reports are the typed model (:mod:`kldtui.formats.report_model`), loaded by
:func:`kldtui.formats.report.load_report`; per-window values come from its window table
(``per_window_arrays``, or an original report's ``per_window``).  The functions also take a parsed
JSON document, validated on the way in.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.report_names import (
    report_name,  # noqa: F401 - re-exported
    suite_groups,
    suite_groups_words,
    unrecorded_suite,
)

ReportLike = ComparisonReport | Mapping[str, Any]  # a parsed JSON document is validated on use


@dataclass(frozen=True)
class WindowValues:
    """One report's per-window mean KL(reference || candidate), in window order."""

    where: str  # the report's file (or name) for messages
    window_index: np.ndarray  # int64
    domain: tuple[str, ...]
    positions: np.ndarray  # int64
    kl_mean: np.ndarray  # float64
    kl_reverse_mean: np.ndarray | None = None
    # positions per window where the candidate gives probability 0 to a token the reference predicts
    # (KL infinite there; the comparison leaves them out of kl_mean and counts them): zeros when the
    # report carries no such count (older reports)
    infinite_kl_rows: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.window_index.size)

    def domains(self) -> list[str]:
        """Domains in order of first appearance."""
        return list(dict.fromkeys(self.domain))


def check_finite_means(values: list[float], indices: list[int], where: str, what: str, unit: str) -> None:
    """Refuse an infinite per-window mean (another tool's, counting masked positions): sums over windows
    would be inf or nan. A finite one is at most KL_ROW_MAX, checked when the report is loaded.
    ``unit``: what the report's windows are called (:attr:`ComparisonReport.unit`)."""
    for w, value in zip(indices, values, strict=True):
        if not math.isfinite(value):
            raise BadInput(f"{where}: {unit} {w} {what} is {value!r}, which the statistics over {unit}s "
                           "cannot use; the report is damaged or the candidate is broken, re-run "
                           "kldtui compare")


def window_values(report: ReportLike, where: str = "report") -> WindowValues:
    """Per-window mean KL of a report; BadInput when the report carries none. Its refusals name the
    report's units (:attr:`ComparisonReport.unit`: a hidden-state suite's contexts)."""
    report = as_report(report, where)
    unit = report.unit
    table = report.window_table()
    if not table.window_index:
        raise BadInput(f"{where}: the report has no per-window values (per_window or per_window_arrays); "
                       "re-run kldtui compare, which writes them")
    order = sorted(range(len(table.window_index)), key=lambda i: table.window_index[i])
    indices = [table.window_index[i] for i in order]
    if len(set(indices)) != len(indices):
        raise BadInput(f"{where}: a {unit} appears twice in the per-window values; the report is damaged")
    rev = table.kl_reverse_mean
    inf = table.infinite_kl_rows
    check_finite_means(table.kl_mean, table.window_index, where, "kl_mean", unit)
    if rev is not None:
        check_finite_means(rev, table.window_index, where, "kl_reverse_mean", unit)
    return WindowValues(
        where=where,
        window_index=np.array(indices, dtype=np.int64),
        domain=tuple(table.domain[i] for i in order),
        positions=np.array([table.positions[i] for i in order], dtype=np.int64),
        kl_mean=np.array([table.kl_mean[i] for i in order], dtype=np.float64),
        kl_reverse_mean=np.array([rev[i] for i in order], dtype=np.float64) if rev is not None else None,
        infinite_kl_rows=np.array([inf[i] if inf is not None else 0 for i in order], dtype=np.int64),
    )


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] + "..." if len(text) > 15 else text


def _different(where_a: str, where_b: str, what: str, key: str, ha: str, hb: str) -> str:
    return (f"{where_a} and {where_b} come from different {what} ({key} {_short(ha)} vs {_short(hb)}); "
            "compare candidates against one reference")


def check_one_suite(reports: Sequence[ComparisonReport], wheres: Sequence[str]) -> None:
    """Refuse (BadInput, one line) reports of more than one suite, as :func:`check_same_suite` refuses
    the first two that differ, saying which of them belong together (each suite's reports:
    :func:`~kldtui.formats.report_names.suite_groups`): of several files, which two differ alone did
    not tell the user which to give together."""
    suites = [r.suite_token_hash_sha256 for r in reports]
    paths = [Path(w) for w in wheres]
    groups = suite_groups(paths, suites)
    if len(groups) < 2:
        return
    (ha, _), (hb, _) = groups[0], groups[1]
    where_a, where_b = wheres[suites.index(ha)], wheres[suites.index(hb)]
    words = suite_groups_words(groups, unrecorded_suite(paths, suites))
    raise BadInput(f"{_different(where_a, where_b, 'suites', 'suite_token_hash_sha256', ha, hb)}: give "
                   f"the reports of one suite together ({words})")


def check_same_suite(a_doc: ReportLike, b_doc: ReportLike, where_a: str, where_b: str,
                     va: WindowValues | None = None, vb: WindowValues | None = None) -> str:
    """Refuse (BadInput, one line) unless both reports pair window for window on one reference.

    Checks ``suite_token_hash_sha256`` where both reports carry it, and the reference: by its
    content (``reference_identity_sha256``: the files' hashes over the compared windows, never the
    manifest's time or the server's port, kldtui.formats.reference_identity) where both carry it,
    else by the manifest's bytes (``reference_manifest_sha256``, older reports), else
    ``reference_dir`` must match. Always: the same ``window_range`` and the same windows with the
    same domains and positions. Returns a short description of what was checked. The refusals and
    the description name the reports' units (:attr:`ComparisonReport.unit`: a hidden-state suite's
    contexts).
    """
    a, b = as_report(a_doc, where_a), as_report(b_doc, where_b)
    unit = a.unit
    checked = []
    reference_key = "reference_identity_sha256" if a.reference_identity_sha256 and \
        b.reference_identity_sha256 else "reference_manifest_sha256"
    for key, what in (("suite_token_hash_sha256", "suites"), (reference_key, "references")):
        ha, hb = getattr(a, key), getattr(b, key)
        if ha and hb:
            if ha != hb:
                raise BadInput(_different(where_a, where_b, what, key, ha, hb))
            checked.append(key)
    if reference_key not in checked:
        ra, rb = a.reference_dir, b.reference_dir
        if ra and rb and os.path.normpath(str(ra)) != os.path.normpath(str(rb)):
            raise BadInput(f"{where_a} and {where_b} name different references (reference_dir {ra} vs {rb}) "
                           "and carry no reference hash; compare both candidates against one reference")
        if ra and rb:
            checked.append("reference_dir")
    wa, wb = a.window_range, b.window_range
    if wa is not None and wb is not None and list(wa) != list(wb):
        raise BadInput(f"{where_a} and {where_b} cover different {unit}s (window_range {list(wa)} vs "
                       f"{list(wb)}); compare both candidates on the same {unit}s")
    va = va if va is not None else window_values(a, where_a)
    vb = vb if vb is not None else window_values(b, where_b)
    if va.n != vb.n or not np.array_equal(va.window_index, vb.window_index):
        only_a = sorted(set(va.window_index.tolist()) - set(vb.window_index.tolist()))
        only_b = sorted(set(vb.window_index.tolist()) - set(va.window_index.tolist()))
        raise BadInput(f"{where_a} and {where_b} have different {unit}s (only in the first: {only_a[:8]}, "
                       f"only in the second: {only_b[:8]}); compare both candidates on the same {unit}s")
    for i in range(va.n):
        w = int(va.window_index[i])
        if va.domain[i] != vb.domain[i]:
            raise BadInput(f"{where_a} and {where_b}: {unit} {w} is {va.domain[i]!r} in one and "
                           f"{vb.domain[i]!r} in the other; the reports come from different suites")
        if va.positions[i] != vb.positions[i]:
            raise BadInput(f"{where_a} and {where_b}: {unit} {w} has {va.positions[i]} positions in one "
                           f"and {vb.positions[i]} in the other; the reports come from different suites")
    checked.append(f"{unit}s/domains/positions")  # a hidden-state suite: contexts
    return ", ".join(checked)
