"""The dashboard's event model, result extraction and event bridge (no terminal needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kldtui.events import (
    LogLine,
    Progress,
    ResultReady,
    ServerReady,
    StageFailed,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.report_model import as_report
from kldtui.formats.report_names import kl_headline_interval
from kldtui.tui.model import DashboardModel
from kldtui.tui.resultdata import live_result, result_from_report
from tests.fixtures_tui import make_report


def test_model_tracks_stages_windows_progress_and_log() -> None:
    m = DashboardModel()
    m.apply(StageStarted("capture", detail="8 windows"))
    assert m.stages["capture"].state == "running"
    m.apply(Progress("capture", task="rows", done=10, total=100, unit="rows"))
    m.apply(WindowState("capture", window_index=3, state="capturing", domain="code"))
    m.apply(WindowState("compare", window_index=3, state="compared", figures={"kl": 0.25}))
    m.apply(WindowState("capture", window_index=1, state="captured", domain="prose"))
    assert list(m.windows) == [1, 3]  # kept in window order
    assert m.windows[3].domain == "code" and m.windows[3].kl == 0.25
    assert m.live_window_kl() == [(3, "code", 0.25)]
    m.apply(LogLine("server", line="a\nb"))
    assert [t for _, t in m.log][-2:] == ["[server] a", "[server] b"]  # each line says where it came from
    m.apply(StageFinished("capture", summary="ok", figures={"windows": 8}))
    assert m.stages["capture"].state == "done" and m.stages["capture"].figures == {"windows": 8}
    m.apply(StageStarted("capture"))  # a new run of the stage drops its old progress
    assert ("capture", "rows") not in m.progress
    m.apply(StageFailed("verify", message="hash mismatch"))  # verify shows on the reference stage
    assert m.stages["reference"].state == "failed"
    assert "hash mismatch" in m.stages["reference"].detail
    m.apply(ServerReady("server", url="http://h:1", served_model_name="x"))
    assert m.server is not None
    report = as_report(make_report("c", 0.01, seed=1))
    m.apply(ResultReady("compare", path="/r.json", report=report))
    assert m.result_path == "/r.json" and m.result_report is report
    assert {"stages", "windows", "progress", "log", "result", "live"} <= m.take_dirty()
    assert m.take_dirty() == set()


@pytest.mark.parametrize("original", [False, True])
def test_result_from_both_report_schemas(original: bool) -> None:
    report = make_report("cand-q4", 0.01, seed=5, original=original)
    r = result_from_report(report, "/x/comparison.json")
    assert r.name == "cand-q4"
    assert r.original is original
    # the headline interval (docs/STATISTICS.md), the one every view shows
    head = kl_headline_interval(as_report(report))
    assert r.kl is not None and (r.kl.estimate, r.kl.low, r.kl.high) == (
        head.estimate, head.ci95_low, head.ci95_high)
    assert [b.index for b in r.windows] == list(range(8))
    assert r.windows[2].kl == pytest.approx(report["per_window"][2]["kl_reference_to_candidate"]["mean"])
    assert [d.domain for d in r.domains] == ["prose", "code", "instruction"]
    assert [d.windows for d in r.domains] == [4, 2, 2]
    assert r.domains[1].band is not None and r.domains[1].band.low == report["domains"]["code"]["ci95_low"]
    assert r.top1 == report["top1_agreement"]
    assert r.js_mean == report["js"]["mean"]
    if original:
        assert r.ppl_ratio is None and r.delta_p_mean is None
    else:
        assert r.ppl_ratio is not None and r.ppl_ratio.low == pytest.approx(1.008)
        assert r.delta_p_rms == pytest.approx(0.01)


def test_live_result_means() -> None:
    r = live_result([(2, "code", 0.3), (0, "prose", 0.1), (1, "prose", 0.2)])
    assert [b.index for b in r.windows] == [0, 1, 2]
    assert r.kl is not None and r.kl.estimate == pytest.approx(0.2) and r.kl.low is None
    assert {d.domain: d.band.estimate for d in r.domains if d.band} == pytest.approx(
        {"prose": 0.15, "code": 0.3})


def test_bridge_keeps_order_and_coalesces_progress() -> None:
    from kldtui.tui.screens.dashboard import EventBridge, EventsPending

    posted: list[object] = []
    bridge = EventBridge(SimpleNamespace(post_message=posted.append))  # type: ignore[arg-type]
    for i in range(100):
        bridge(Progress("capture", task="rows", done=i, total=100))
    bridge(StageStarted("finalize"))
    bridge(Progress("capture", task="rows", done=100, total=100))
    bridge(Progress("finalize", task="windows", done=1, total=2))
    assert len(posted) == 1 and isinstance(posted[0], EventsPending)  # one message per batch
    events = bridge.take()
    assert [type(e).__name__ for e in events] == ["Progress", "StageStarted", "Progress", "Progress"]
    assert events[0].done == 99  # type: ignore[attr-defined]  # the latest of the coalesced run
    assert events[2].done == 100  # type: ignore[attr-defined]  # not merged across the StageStarted
    assert bridge.take() == []
    bridge(LogLine("server", line="x"))
    assert len(posted) == 2


def test_rates_on_the_cards_read_number_then_unit() -> None:
    from kldtui.tui.model import stage_figures

    assert stage_figures({"windows": "6/6", "tokens_per_s": 1966.0}) == ["windows 6/6", "1966 tok/s"]
