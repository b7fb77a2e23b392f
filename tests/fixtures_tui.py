"""Helpers for the TUI tests: comparison reports in both schemas and a scripted event source.

The reports are built with the original comparator's conventions (window means, bootstrap with
``default_rng(1)``, NumPy quantiles) so the viewer is tested on realistic files. The scripted
pipeline emits a fixed sequence of real :mod:`kldtui.events` events (what the engine emits),
for tests that need a deterministic dashboard (snapshots) independent of timing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from textual.widgets import Static

from kldtui.events import (
    Cancel,
    EventSink,
    LogLine,
    Progress,
    ResultReady,
    ServerReady,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.screens.board import LOAD_GROUP, PANE_GROUP, RANK_GROUP
from kldtui.tui.screens.dashboard import DashboardScreen
from kldtui.tui.widgets.result_pane import ResultPane
from kldtui.workflow.state import RunState
from kldtui.workspace import Workspace


def sync(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test function (pilot tests) with asyncio.run; fixtures still inject."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


DOMAINS = ["prose", "prose", "prose", "prose", "code", "code", "instruction", "instruction"]
SUITE_HASH = "ab" * 32


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "median": float(np.median(x)), "p95": float(np.quantile(x, 0.95)),
            "p99": float(np.quantile(x, 0.99)), "max": float(x.max())}


def _boot(means: np.ndarray, samples: int = 2000) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    idx = rng.integers(0, means.size, (samples, means.size))
    res = means[idx].mean(axis=1)
    return {"estimate": float(means.mean()), "standard_error": float(res.std(ddof=1)),
            "ci95_low": float(np.quantile(res, 0.025)), "ci95_high": float(np.quantile(res, 0.975)),
            "bootstrap_samples": samples, "cluster_unit": "window"}


def make_report(name: str, level: float, seed: int, original: bool = False,
                domains: list[str] | None = None) -> dict[str, Any]:
    """A report of ``len(domains)`` windows whose per-token KL has mean about ``level``."""
    domains = domains or DOMAINS
    rng = np.random.default_rng(seed)
    per_window, means, js_means, top1s = [], [], [], []
    all_kl, all_js = [], []
    for w, dom in enumerate(domains):
        kl = rng.gamma(0.5, level * (1 + 0.15 * w) / 0.5, 64)
        js = kl / 4
        top1 = float(1 - min(0.5, 3 * kl.mean()))
        per_window.append({"window_index": w, "domain": dom, "positions": 64,
                           "kl_reference_to_candidate": _stats(kl), "js": _stats(js), "top1_agreement": top1})
        means.append(kl.mean())
        js_means.append(js.mean())
        top1s.append(top1)
        all_kl.append(kl)
        all_js.append(js)
    means_a = np.array(means)
    kl_all, js_all = np.concatenate(all_kl), np.concatenate(all_js)
    report: dict[str, Any] = {
        "direction": "KL(reference || candidate)",
        "reference_dir": "/data/reference/ref",
        "candidate_dir": f"/data/{name}",
        "positions": int(kl_all.size),
        "windows": len(domains),
        "window_range": [0, len(domains)],
        "kl_reference_to_candidate": _stats(kl_all),
        "js": _stats(js_all),
        "top1_agreement": float(np.mean(top1s)),
        "kl_window_cluster_bootstrap": _boot(means_a),
        "domains": {d: _boot(means_a[[i for i, x in enumerate(domains) if x == d]])
                    for d in dict.fromkeys(domains)},
        "per_window": per_window,
    }
    if original:
        return report
    report.update({
        "report_format": "kldtui-comparison-v1",
        "suite_token_hash_sha256": SUITE_HASH,
        "reference_manifest_sha256": "cd" * 32,
        "vocab_size": 4096,
        "next_token": {"perplexity_reference": 5.0, "perplexity_candidate": 5.0 * (1 + level),
                       "perplexity_ratio": 1 + level,
                       "perplexity_ratio_window_cluster_bootstrap": {
                           "estimate": 1 + level, "ci95_low": 1 + level * 0.8, "ci95_high": 1 + level * 1.2,
                           "standard_error": level / 10, "bootstrap_samples": 2000, "cluster_unit": "window"},
                       "delta_p": {"mean": -level / 3, "rms": level, "median": 0.0}},
        "per_window_arrays": {"window_index": list(range(len(domains))), "domain": list(domains),
                              "positions": [64] * len(domains), "kl_mean": [float(m) for m in means],
                              "js_mean": [float(m) for m in js_means], "top1_agreement": top1s},
    })
    return report


def write_report(path: Path, report: dict[str, Any]) -> Path:
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


# a campaign folder two profiles share: candidates a and b are profile one.toml's runs, c two.toml's
SHARED_RUNS = {"a": "one.toml", "b": "one.toml", "c": "two.toml"}


def shared_campaign_folder(root: Path, runs: dict[str, str] | None = None) -> Path:
    """``root/work`` holding one ``comparison-NAME.json`` per candidate of ``runs`` (candidate -> the
    profile file, in ``root``, whose run its ``profiles.json`` records it as; :data:`SHARED_RUNS`), as
    two campaigns sharing a work folder leave it; the profiles' files are there (empty)."""
    runs = SHARED_RUNS if runs is None else runs
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    for i, (name, profile) in enumerate(runs.items()):
        write_report(work / f"comparison-{name}.json", make_report(name, 0.01 * (i + 1), seed=i + 1))
        (root / profile).write_text("")
    record = {"format": "kldtui-profiles-v1", "owners": {},
              "runs": {f"comparison-{name}.json": {"profile": f"../{profile}", "windows": "0-7"}
                       for name, profile in runs.items()}}
    (work / "profiles.json").write_text(json.dumps(record))
    return work


class ScriptedPipeline:
    """Emits a fixed event script per stage. ``pause_after_window`` (capture) blocks there until
    :attr:`resume` is set, so a test can look at the dashboard mid-capture."""

    def __init__(self, emit: EventSink, cancel: Cancel, windows: int = 8,
                 pause_after_window: int | None = None, report_path: Path | None = None,
                 suite_windows: int | None = None) -> None:
        self.emit, self.cancel = emit, cancel
        self.n = windows
        self.suite_windows = windows if suite_windows is None else suite_windows  # what run_all says
        self.pause_after_window = pause_after_window
        self.resume = threading.Event()
        self.paused = threading.Event()
        self.report_path = report_path
        self.report_level, self.report_seed = 0.01, 3  # the report compare writes (make_report's)
        self.server: object | None = None  # like Pipeline.server: set while our server runs
        self.base_url: str | None = None
        self.stopped_server = False
        self.calls: list[str] = []

    @property
    def server_running(self) -> bool:
        return self.server is not None

    @property
    def server_url(self) -> str | None:
        return self.base_url

    @property
    def workspace(self) -> Workspace:
        folder = self.report_path.parent if self.report_path is not None else Path("scripted")
        return Workspace(suite_dir=folder / "suite", report_path=self.report_path, workdir=folder)

    def run_stage(self, stage: str) -> object:
        calls = {"all": self.run_all, "reference": self.reference, "server": self.serve,
                 "capture": self.capture, "finalize": self.finalize, "compare": self.compare}
        return calls[stage]()

    def window_list(self) -> list[tuple[int, str]]:
        return [(w, DOMAINS[w % len(DOMAINS)]) for w in range(self.n)]

    def windows(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(index=w, domain=d) for w, d in self.window_list()]

    def reference(self) -> None:
        self.calls.append("reference")
        self.emit(StageStarted("reference", detail="local suite"))
        total = 8 * 2**20
        for i in range(1, 5):
            self.emit(Progress("reference", task="download", done=total * i / 4, total=total, unit="bytes"))
        self.emit(StageFinished("reference", summary="verified", figures={"windows": self.n, "GiB": 0.008}))

    def serve(self) -> None:
        self.calls.append("serve")
        self.emit(StageStarted("server", detail="embedded"))
        for line in ("INFO starting embedded server", "INFO model loaded (vocab 4096)",
                     "WARNING prefix caching is off (required for capture)", "INFO Uvicorn running"):
            self.emit(LogLine("server", line=line, level="warning" if line.startswith("WARN") else "info"))
        self.emit(ServerReady("server", url="http://127.0.0.1:8123", served_model_name="tiny", pid=4242))
        self.server = object()
        self.base_url = "http://127.0.0.1:8123"
        self.emit(StageFinished("server", summary="ready", figures={"url": "http://127.0.0.1:8123"}))

    def capture(self) -> None:
        self.calls.append("capture")
        self.emit(StageStarted("capture", detail=f"{self.n} windows"))
        for w in range(self.n):
            self.cancel.check()
            dom = DOMAINS[w % len(DOMAINS)]
            self.emit(WindowState("capture", window_index=w, state="capturing", domain=dom))
            self.emit(Progress("capture", task="rows", done=2047, total=2047, unit="rows",
                               rate=4096.0, eta_s=0.5))
            self.emit(WindowState("capture", window_index=w, state="captured", domain=dom))
            self.emit(Progress("capture", task="windows", done=w + 1, total=self.n, unit="windows",
                               eta_s=float(self.n - w - 1)))
            self.emit(WindowState("compare", window_index=w, state="compared", domain=dom,
                                  figures={"kl": 0.002 * (1 + w) ** 1.5}))
            if self.pause_after_window is not None and w == self.pause_after_window:
                self.emit(WindowState("capture", window_index=w + 1, state="capturing",
                                      domain=DOMAINS[(w + 1) % len(DOMAINS)]))
                self.emit(Progress("capture", task="rows", done=1024, total=2047, unit="rows",
                                   rate=4096.0, eta_s=0.25))
                self.paused.set()
                while not self.resume.wait(0.05):
                    self.cancel.check()
        self.emit(StageFinished("capture", summary="done", figures={"windows": self.n, "tok/s": 4096}))

    def finalize(self) -> None:
        self.calls.append("finalize")
        self.emit(StageStarted("finalize"))
        for w in range(self.n):
            self.emit(Progress("finalize", task="windows", done=w + 1, total=self.n, unit="windows"))
            self.emit(WindowState("finalize", window_index=w, state="finalized"))
        self.emit(StageFinished("finalize", summary="merged", figures={"windows": self.n}))

    def compare(self) -> ComparisonReport:
        self.calls.append("compare")
        self.emit(StageStarted("compare"))
        report = make_report("tiny-candidate", self.report_level, seed=self.report_seed,
                             domains=[d for _, d in self.window_list()])
        for w in range(self.n):
            self.emit(Progress("compare", task="windows", done=w + 1, total=self.n, unit="windows"))
            self.emit(WindowState("compare", window_index=w, state="compared",
                                  figures={"kl": report["per_window_arrays"]["kl_mean"][w]}))
        if self.report_path is not None:
            write_report(self.report_path, report)
        self.emit(StageFinished("compare", summary="written",
                                figures={"mean KL": report["kl_window_cluster_bootstrap"]["estimate"]}))
        self.emit(ResultReady("compare", path=str(self.report_path) if self.report_path else None,
                              report=as_report(report)))
        return as_report(report)

    def run_all(self) -> RunState:
        """Every stage; returns the run state, as the pipeline does (``suite_windows`` as given)."""
        self.reference()
        self.serve()
        self.capture()
        self.finalize()
        report = self.compare()
        return RunState(suite_windows=self.suite_windows, reference_ready=True, report_path=self.report_path,
                        window_range=report.window_range, report=report)

    def stop_server(self, reason: str = "done") -> None:
        self.calls.append("stop_server")
        self.server = None
        self.base_url = None
        self.stopped_server = True


# -- driving the app ------------------------------------------------------------------------------
WORKER_GROUPS = ("engine", LOAD_GROUP, RANK_GROUP, PANE_GROUP, "control")


def busy_workers(app: KldApp) -> list[Any]:
    """The engine, loading, ranking, pane and control workers that have not finished."""
    return [w for w in app.workers if w.group in WORKER_GROUPS and not w.is_finished]


async def settle(app: KldApp, pilot: Any, limit: float = 30.0) -> None:
    """Wait until no engine/loading/control worker runs and a refresh starts none.

    A refresh can start a worker (a finished run opened again loads its report in one), so the
    wait repeats until the dashboard is quiet: it waits on state, never on a fixed time, and
    holds on a loaded machine as on an idle one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        while busy_workers(app):
            assert loop.time() < deadline, f"workers did not finish: {[w.name for w in busy_workers(app)]}"
            await pilot.pause(0.02)
        await pilot.pause()
        if isinstance(app.main, DashboardScreen):
            app.main.refresh_now()
        await pilot.pause()
        if not busy_workers(app):
            return


async def feed(app: KldApp, pilot: Any, *events: Any) -> None:
    """Events through the dashboard's own bridge (as the engine's thread sends them, in one batch when
    given together), then a redraw."""
    screen = app.main
    assert isinstance(screen, DashboardScreen)
    for event in events:
        screen.bridge(event)
    await pilot.pause()
    screen.refresh_now()
    await pilot.pause()


async def open_with_o(app: KldApp, pilot: Any, path: str | Path) -> None:
    """Press o, type ``path`` into the open dialog's path box, press Enter, and wait until quiet."""
    from textual.widgets import Input

    await pilot.press("o")
    await pilot.pause()
    app.screen.query_one("#path", Input).value = str(path)
    await pilot.press("enter")
    await settle(app, pilot)


async def until(pilot: Any, condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Wait until ``condition()`` holds (checked every 20 ms), failing after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, f"waited {limit:.0f} s for {what}"
        await pilot.pause(0.02)


async def open_pane(app: KldApp, pilot: Any, key: str, pane: str, text: str, says: str) -> None:
    """Press ``key`` and wait until the pane ``pane`` shows and its Static ``text`` says ``says``,
    then until it is drawn."""
    await pilot.press(key)
    await settle(app, pilot)
    shown = app.screen.query_one(pane)
    await until(pilot, lambda: shown.display and says in static_text(app, text), f"{pane} to say {says!r}")
    await pilot.pause()


async def ranking(app: KldApp, pilot: Any, rows: int) -> Any:
    """The screen's ranking (``#board``) once it holds ``rows`` rows and the app has settled."""
    from kldtui.tui.widgets.leaderboard import LeaderboardTable

    await settle(app, pilot)
    table = app.screen.query_one("#board", LeaderboardTable)
    await until(pilot, lambda: table.row_count == rows, "the ranking")
    await settle(app, pilot)
    return table


def dashboard(tmp_path: Path, **kwargs: Any) -> tuple[KldApp, dict[str, ScriptedPipeline]]:
    holder: dict[str, ScriptedPipeline] = {}

    def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        holder["p"] = ScriptedPipeline(emit, cancel, report_path=tmp_path / "comparison.json", **kwargs)
        return holder["p"]

    return create_app(pipeline_factory=factory, config_dir=tmp_path / "cfg", theme="kldtui-dark"), holder


def static_text(app: KldApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def drawn_lines(app: KldApp, selector: str) -> list[str]:
    """The lines a widget of the active screen draws at its width, all of them (also those scrolled
    out of sight), each without its trailing blanks: what the user reads, wrapped as it is shown."""
    from textual.geometry import Region

    widget = app.screen.query_one(selector)
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return [strip.text.rstrip() for strip in strips]


def screen_lines(app: KldApp) -> list[str]:
    """The whole screen as the user reads it, one line per row (what Textual's screenshot draws), each
    without its trailing blanks."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return [line.rstrip() for line in console.export_text().splitlines()]


def help_text(app: KldApp) -> str:
    """The open help's keys as drawn, one line per drawn line (a key's words may wrap)."""
    return "\n".join(drawn_lines(app, "#help-text"))


def headline_of(report: Any) -> dict[str, Any]:
    """The headline mean-KL interval every view shows of a report document
    (kldtui.formats.report_names.kl_headline_interval)."""
    from kldtui.formats.report_model import as_report
    from kldtui.formats.report_names import kl_headline_interval

    head = kl_headline_interval(as_report(report))
    return {"estimate": head.estimate, "ci95_low": head.ci95_low, "ci95_high": head.ci95_high}


def result_text(app: KldApp) -> str:
    """The result pane's words: its summary, positions and provenance."""
    pane = app.screen.query_one("#resultpane", ResultPane) if app.screen.query("#resultpane") else \
        app.query_one(ResultPane)
    parts = [str(pane.query_one(f"#{i}", Static).render()) for i in
             ("result-summary", "result-positions", "result-provenance")]
    return "\n".join(parts)
