"""Display names of comparison reports: short, and unique when several are shown together.

Light on purpose (standard library only): the viewer imports it at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kldtui.formats.report_model import Bootstrap, ComparisonReport


def report_name(report: ComparisonReport, path: str | os.PathLike[str] | None = None) -> str:
    """The candidate folder's name, else the report file's stem, else ``candidate``."""
    cand = report.candidate_dir
    if cand is not None and cand.strip("/\\"):
        return Path(cand.rstrip("/\\")).name
    if path is not None:
        return Path(path).stem
    return "candidate"


def unique_names(names: Sequence[str], paths: Sequence[str | os.PathLike[str] | None]) -> list[str]:
    """Names made unique by the shortest part of the report path that tells equal names apart.

    Three reports all named ``candidate`` in ``runs/a/comparison.json``, ``runs/b/...`` become
    ``candidate (a)``, ``candidate (b)``: the file name alone would not tell them apart.
    """
    out = list(names)
    for name in set(names):
        same = [i for i, n in enumerate(names) if n == name]
        if len(same) < 2:
            continue
        parts: dict[int, tuple[str, ...]] = {}
        for i in same:
            where = paths[i]
            parts[i] = Path(where).resolve().parts if where is not None else ()
        for level in range(1, max((len(p) for p in parts.values()), default=0) + 1):
            tags = {i: _tag(p, level) for i, p in parts.items()}
            if len(set(tags.values())) == len(same) and all(tags.values()):
                for i in same:
                    out[i] = f"{name} ({tags[i]})"
                break
    if len(set(out)) != len(out):
        out = [f"{n} #{i + 1}" for i, n in enumerate(out)]
    return out


def _tag(parts: tuple[str, ...], level: int) -> str:
    """Level 1: the report's folder; 2: its file stem; then the last ``level - 1`` folders."""
    if not parts:
        return ""
    stem = Path(parts[-1]).stem
    if level == 1:
        return parts[-2] if len(parts) > 1 else stem
    if level == 2:
        return stem
    return "/".join(parts[-level:-1])


def report_interval(report: ComparisonReport) -> Bootstrap:
    """The one mean-KL interval of a report that every view shows (viewer, dashboard, leaderboard,
    diff): the report's own ``kl_window_cluster_bootstrap`` (estimate, ci95_low, ci95_high,
    standard_error, bootstrap_samples), exactly as the comparison wrote it. Recomputing it elsewhere
    with other resample counts is what made the viewer and the leaderboard disagree. Every report
    has one: loading checks it (kldtui.formats.report_model). (Verdicts use their own paired
    interval: kldtui.decide.verdict.)"""
    return report.kl_window_cluster_bootstrap
