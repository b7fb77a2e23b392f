"""Reading saved comparison reports for the decide tools: per-window KL and the pairing check.

Reports are loaded through :func:`load_report_file`, i.e. ``kldtui.formats.report.load_report`` (it
validates and normalises kldtui's and the original comparator's reports).
Per-window values come from ``per_window_arrays`` (kldtui) or ``per_window`` (both formats).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.formats.report_names import report_name  # noqa: F401 - re-exported


def load_report_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A comparison report as a dict (kldtui's or the original comparator's), through
    :func:`kldtui.formats.report.load_report`, which validates and normalises both."""
    from kldtui.formats.report import load_report

    return load_report(path)


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


MAX_VALUE = 1e100


def _finite(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise BadInput(f"{where}: {what} is not a finite number ({value!r}); the report is damaged, "
                       "re-run kldtui compare")
    if abs(value) > MAX_VALUE:  # squares and sums of it would overflow to inf/nan in the statistics
        raise BadInput(f"{where}: {what} is {value!r}, too large to compare (at most {MAX_VALUE:g}); the "
                       "report is damaged or the candidate is broken, re-run kldtui compare")
    return float(value)


def window_values(report: dict[str, Any], where: str = "report") -> WindowValues:
    """Per-window mean KL of a report; BadInput when the report carries none."""
    arrays = report.get("per_window_arrays")
    rows: list[tuple[Any, Any, Any, float, float | None]] = []  # types checked below
    if isinstance(arrays, dict) and isinstance(arrays.get("kl_mean"), list):
        columns: list[Any] = [arrays.get(k) for k in ("window_index", "domain", "positions", "kl_mean")]
        idx, dom, pos, kl = columns
        rev = arrays.get("kl_reverse_mean")
        if not all(isinstance(v, list) and len(v) == len(kl) for v in (idx, dom, pos)):
            raise BadInput(f"{where}: per_window_arrays has arrays of different lengths; the report is "
                           "damaged, re-run kldtui compare")
        for i in range(len(kl)):
            r = _finite(rev[i], where, f"window {idx[i]} kl_reverse_mean") if (
                isinstance(rev, list) and len(rev) == len(kl)) else None
            rows.append((idx[i], dom[i], pos[i], _finite(kl[i], where, f"window {idx[i]} kl_mean"), r))
    elif isinstance(report.get("per_window"), list) and report["per_window"]:
        for entry in report["per_window"]:
            if not isinstance(entry, dict):
                raise BadInput(f"{where}: per_window holds a non-object entry; the report is damaged")
            w = entry.get("window_index")
            stats = entry.get("kl_reference_to_candidate")
            if not isinstance(stats, dict) or "mean" not in stats:
                raise BadInput(f"{where}: window {w}: per_window entry has no "
                               "kl_reference_to_candidate.mean; re-run kldtui compare")
            rev_stats = entry.get("kl_candidate_to_reference")
            r = entry.get("kl_reverse_mean")
            if r is None and isinstance(rev_stats, dict):
                r = rev_stats.get("mean")
            rows.append((w, entry.get("domain", ""), entry.get("positions", 0),
                         _finite(stats["mean"], where, f"window {w} KL mean"),
                         None if r is None else _finite(r, where, f"window {w} reverse KL mean")))
    else:
        raise BadInput(f"{where}: the report has no per-window values (per_window or per_window_arrays); "
                       "re-run kldtui compare, which writes them")
    for w, d, p, _, _ in rows:
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise BadInput(f"{where}: bad window_index {w!r} in the per-window values; the report is damaged")
        if not isinstance(d, str) or isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise BadInput(f"{where}: window {w}: bad domain or positions; the report is damaged")
    rows.sort(key=lambda r: r[0])
    indices = [r[0] for r in rows]
    if len(set(indices)) != len(indices):
        raise BadInput(f"{where}: a window appears twice in the per-window values; the report is damaged")
    has_rev = all(r[4] is not None for r in rows)
    inf_rows = _infinite_rows(report, indices, where)
    return WindowValues(
        where=where,
        window_index=np.array(indices, dtype=np.int64),
        domain=tuple(r[1] for r in rows),
        positions=np.array([r[2] for r in rows], dtype=np.int64),
        kl_mean=np.array([r[3] for r in rows], dtype=np.float64),
        kl_reverse_mean=np.array([r[4] for r in rows], dtype=np.float64) if has_rev else None,
        infinite_kl_rows=inf_rows,
    )


def _infinite_rows(report: Any, indices: list[int], where: str) -> np.ndarray:
    """Per-window ``infinite_kl_rows`` in the order of ``indices`` (zeros where the report has none).
    Takes the JSON document or the typed report model (through its ``to_json``)."""
    if not isinstance(report, dict) and hasattr(report, "to_json"):
        report = report.to_json()
    found: dict[int, int] = {}
    arrays = report.get("per_window_arrays")
    if isinstance(arrays, dict) and isinstance(arrays.get("infinite_kl_rows"), list):
        found = dict(zip(arrays.get("window_index") or [], arrays["infinite_kl_rows"], strict=False))
    elif isinstance(report.get("per_window"), list):
        for entry in report["per_window"]:
            if isinstance(entry, dict) and "infinite_kl_rows" in entry:
                found[entry.get("window_index")] = entry["infinite_kl_rows"]  # type: ignore[index]
    out = np.zeros(len(indices), dtype=np.int64)
    for i, w in enumerate(indices):
        v = found.get(w, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise BadInput(f"{where}: window {w}: infinite_kl_rows is not a count ({v!r}); the report is "
                           "damaged, re-run kldtui compare")
        out[i] = v
    return out


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] + "..." if len(text) > 15 else text


def check_same_suite(a: dict[str, Any], b: dict[str, Any], where_a: str, where_b: str,
                     va: WindowValues | None = None, vb: WindowValues | None = None) -> str:
    """Refuse (BadInput, one line) unless both reports pair window for window on one reference.

    Checks ``suite_token_hash_sha256`` and ``reference_manifest_sha256`` where both reports
    carry them; without a reference hash, ``reference_dir`` must match. Always: the same
    ``window_range`` and the same windows with the same domains and positions. Returns a short
    description of what was checked.
    """
    checked = []
    for key, what in (("suite_token_hash_sha256", "suites"), ("reference_manifest_sha256", "references")):
        ha, hb = a.get(key), b.get(key)
        if ha and hb:
            if ha != hb:
                raise BadInput(f"{where_a} and {where_b} come from different {what} ({key} "
                               f"{_short(ha)} vs {_short(hb)}); compare candidates against one reference")
            checked.append(key)
    if "reference_manifest_sha256" not in checked:
        ra, rb = a.get("reference_dir"), b.get("reference_dir")
        if ra and rb and os.path.normpath(str(ra)) != os.path.normpath(str(rb)):
            raise BadInput(f"{where_a} and {where_b} name different references (reference_dir {ra} vs {rb}) "
                           "and carry no reference hash; compare both candidates against one reference")
        if ra and rb:
            checked.append("reference_dir")
    wa, wb = a.get("window_range"), b.get("window_range")
    if wa is not None and wb is not None and list(wa) != list(wb):
        raise BadInput(f"{where_a} and {where_b} cover different windows (window_range {list(wa)} vs "
                       f"{list(wb)}); compare both candidates on the same windows")
    va = va if va is not None else window_values(a, where_a)
    vb = vb if vb is not None else window_values(b, where_b)
    if va.n != vb.n or not np.array_equal(va.window_index, vb.window_index):
        only_a = sorted(set(va.window_index.tolist()) - set(vb.window_index.tolist()))
        only_b = sorted(set(vb.window_index.tolist()) - set(va.window_index.tolist()))
        raise BadInput(f"{where_a} and {where_b} have different windows (only in the first: {only_a[:8]}, "
                       f"only in the second: {only_b[:8]}); compare both candidates on the same windows")
    for i in range(va.n):
        w = int(va.window_index[i])
        if va.domain[i] != vb.domain[i]:
            raise BadInput(f"{where_a} and {where_b}: window {w} is {va.domain[i]!r} in one and "
                           f"{vb.domain[i]!r} in the other; the reports come from different suites")
        if va.positions[i] != vb.positions[i]:
            raise BadInput(f"{where_a} and {where_b}: window {w} has {va.positions[i]} positions in one "
                           f"and {vb.positions[i]} in the other; the reports come from different suites")
    checked.append("windows/domains/positions")
    return ", ".join(checked)
