"""A run's state: what a work folder holds, stage by stage (:class:`RunState`).

A front end gets it two ways. After a run, from the pipeline: ``Pipeline.run_all()`` returns the
state it leaves (:func:`state_after_run`), the report included, so the front end shows it without
reading anything back. On reopening a work folder, from disk: :func:`load_state` looks only at
files the stages wrote (the workspace names them all): the reference manifest, the capture
records, the candidate manifest, the per-window compare cache and the report. It never changes
anything and never fails on a half-made folder: what cannot be read counts as not done (and is
named in ``problems``). What to do next after a run is :mod:`kldtui.workflow.next_steps`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kldtui.errors import KldError
from kldtui.formats.safe_io import read_text
from kldtui.formats.suite import unit_of
from kldtui.workspace import Workspace

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport
    from kldtui.formats.suite import Suite

DiskWindowState = Literal["pending", "captured", "finalized", "compared"]


@dataclass(frozen=True)
class DiskWindow:
    index: int
    domain: str
    state: DiskWindowState
    kl: float | None = None  # mean KL once compared


@dataclass(frozen=True)
class RunState:
    """A work folder's progress, stage by stage."""

    suite_windows: int  # windows in the suite (0: no suite yet)
    reference_ready: bool  # the reference logits manifest is there
    windows: dict[int, DiskWindow] = field(default_factory=dict)
    report_path: Path | None = None  # the report, when it exists
    headline: dict[str, Any] = field(default_factory=dict)  # kl_mean, ci95_low/high, top1, windows
    window_range: tuple[int, int] | None = None  # the report's window range
    problems: tuple[str, ...] = ()
    report: ComparisonReport | None = field(default=None, repr=False)  # the report, when there is one

    def count(self, *states: DiskWindowState) -> int:
        return sum(1 for w in self.windows.values() if w.state in states)

    @property
    def captured(self) -> int:
        return self.count("captured", "finalized", "compared")

    @property
    def finalized(self) -> int:
        return self.count("finalized", "compared")

    @property
    def compared(self) -> int:
        return self.count("compared")

    @property
    def anything(self) -> bool:
        """Some stage left something on disk (a reference alone does not count: it may be shared)."""
        return self.captured > 0 or self.report_path is not None


def load_state(workspace: Workspace) -> RunState:
    """Read the state of ``workspace`` from disk (see the module docstring)."""
    problems: list[str] = []
    domains: dict[int, str] = {}
    suite: Suite | None = None
    try:
        from kldtui.formats.suite import load_suite

        suite = load_suite(workspace.suite_dir)
        domains = {w.index: w.domain for w in suite.windows}
    except (KldError, OSError, ValueError) as exc:
        problems.append(str(exc))
    reference_ready = workspace.reference_dir is not None and workspace.reference_manifest.is_file()

    states: dict[int, DiskWindowState] = {}
    kls: dict[int, float] = {}
    if workspace.capture_root is not None:
        try:
            from kldtui.stages.capture import load_records

            # a suite that did not load says its own problem: the records' line then names windows
            for index in load_records(workspace.records_path, unit=unit_of(suite.windows if suite else [])):
                states[index] = "captured"
        except (KldError, OSError, ValueError) as exc:
            problems.append(str(exc))
    if workspace.candidate_dir is not None:
        from kldtui import capture_modes

        # each mode's finalized folder (logits, score, ...); modes that share a manifest's name (logits and
        # hidden: manifest.json) each try it, and it is a problem only when none of them reads it
        by_path: dict[Path, list[Any]] = {}
        for mode in capture_modes.modes():
            by_path.setdefault(mode.manifest_path(workspace.candidate), []).append(mode)
        for path, modes in by_path.items():
            if not path.is_file():
                continue
            failures: list[str] = []
            for mode in modes:
                try:  # as the mode's finalize lists them (domains where the manifest names none: the suite's)
                    entries = mode.listed(mode.read_manifest(path), suite)
                except (KldError, OSError, ValueError) as exc:
                    failures.append(str(exc))
                    continue
                for index, entry in entries.items():
                    if (workspace.candidate / entry.file).is_file():
                        states[index] = "finalized"
                        domains.setdefault(index, entry.domain)
                break
            else:
                problems.append(failures[0])

    report_path: Path | None = None
    loaded: ComparisonReport | None = None
    headline: dict[str, Any] = {}
    window_range: tuple[int, int] | None = None
    if workspace.report_path is not None and workspace.report_path.is_file():
        try:
            from kldtui.formats.report import headline as report_headline
            from kldtui.formats.report import load_report

            report = load_report(workspace.report_path)
            loaded = report
            report_path = workspace.report_path
            table = report.window_table()
            for index, mean_kl in zip(table.window_index, table.kl_mean, strict=True):
                kls[index] = float(mean_kl)
            headline = report_headline(report)
            window_range = report.window_range
        except (KldError, OSError, ValueError) as exc:
            problems.append(str(exc))
    for index in list(states):
        if index in kls:
            states[index] = "compared"
        elif states[index] == "finalized":
            kl = _cached_kl(workspace, index)
            if kl is not None:
                states[index], kls[index] = "compared", kl
    windows = {i: DiskWindow(i, domains.get(i, ""), states.get(i, "pending"), kls.get(i))
               for i in sorted(set(domains) | set(states))}
    return RunState(suite_windows=len(domains), reference_ready=reference_ready, windows=windows,
                    report_path=report_path, headline=headline, window_range=window_range,
                    problems=tuple(problems), report=loaded)


def state_after_run(suite: Suite, report: ComparisonReport, report_path: Path | None, *,
                    captured: set[int], finalized: set[int]) -> RunState:
    """The state a run leaves that just made ``report`` (written to ``report_path``), from what it
    knows: the suite, the windows it captured and finalized, the report's per-window KL. The same
    state :func:`load_state` reads back from the work folder afterwards."""
    from kldtui.formats.report import headline

    table = report.window_table()
    kls = {int(i): float(k) for i, k in zip(table.window_index, table.kl_mean, strict=True)}

    def state(index: int) -> DiskWindowState:
        return ("compared" if index in kls else "finalized" if index in finalized
                else "captured" if index in captured else "pending")

    windows = {w.index: DiskWindow(w.index, w.domain, state(w.index), kls.get(w.index))
               for w in suite.windows}
    return RunState(suite_windows=suite.window_count, reference_ready=True, windows=windows,
                    report_path=report_path, headline=headline(report), window_range=report.window_range,
                    report=report)


def _cached_kl(workspace: Workspace, index: int) -> float | None:
    """A window's mean KL from the per-window compare cache (None: not compared or unreadable)."""
    path = workspace.compare_cache(index)
    if path is None or not path.is_file():
        return None
    try:
        from kldtui.formats.verified_cache import signed_by_me
        from kldtui.stages.compare.cache import COMPARE_CACHE_LIMIT, decode_result

        doc = json.loads(read_text(path, limit=COMPARE_CACHE_LIMIT))
        if not signed_by_me({"key": doc["key"], "result": doc["result"]}, doc.get("signature")):
            return None  # not this user's: shown as finalized, compared again by the next run
        kl = decode_result(doc["result"]).kl_mean
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(kl) if kl is not None else None
