"""Deciding between candidates: verdicts, paired comparison, noise model, leaderboard.

Pure functions over saved comparison reports (plus small file I/O); no Textual, no torch.
``docs/STATISTICS.md`` says what each interval means and which tolerances the tests check.
"""

from __future__ import annotations

from kldtui.decide.leaderboard import Leaderboard, LeaderboardRow, build_leaderboard
from kldtui.decide.noise import (
    PUBLISHED_SUITE_HASH,
    NoiseFloor,
    floor_from_reports,
    load_floor,
    published_floor,
    resolve_floor,
    save_floor,
)
from kldtui.decide.paired import (
    Interval,
    PairedDiff,
    PairedStats,
    WindowValues,
    check_same_suite,
    paired_diff,
    window_values,
)

__all__ = [
    "PUBLISHED_SUITE_HASH",
    "Interval",
    "Leaderboard",
    "LeaderboardRow",
    "NoiseFloor",
    "PairedDiff",
    "PairedStats",
    "WindowValues",
    "build_leaderboard",
    "check_same_suite",
    "floor_from_reports",
    "load_floor",
    "paired_diff",
    "published_floor",
    "resolve_floor",
    "save_floor",
    "window_values",
]
