"""The dashboard of a run against a hidden-state suite names its units contexts, as its log and its
reports do: the grid's title, the cards' counts and range, a resumed stage's "N of M ... ; r resumes",
the early-abort line, the Result tab's empty chart and its live result, and what to run next. They
said windows. A logits suite's dashboard still says windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kldtui.events import Progress, StageStarted, WindowState
from kldtui.formats.suite import WindowSpec
from kldtui.tui.app import KldApp, create_app
from kldtui.tui.model import DashboardModel
from kldtui.tui.widgets import StageBox
from kldtui.workflow.next_steps import report_next_steps
from kldtui.workflow.state import DiskWindow, RunState
from tests.fixtures_tui import feed, screen_lines, settle, sync

DOMAINS = ("prose", "code", "prose")


def _context_profile(tmp_path: Path) -> Any:
    """A profile whose reference is a three-context hidden-state suite (nothing is served or read
    beyond the suite's manifest: the dashboard only opens on it)."""
    from kldtui.embedded.model import TinyModel
    from kldtui.formats import fidelity as fid
    from kldtui.workflow.profile import profile_from_dict

    model = TinyModel(64, seed=3)
    contexts = [fid.NewContext(model.sample(24, seed=i), DOMAINS[i], partition="analysis",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(3)]
    fid.write_context_suite(tmp_path / "suite", contexts)
    candidate = {"kind": "embedded", "served_model_name": "cand", "model_seed": 3, "vocab_size": 64,
                 "port": 0}
    return profile_from_dict({"reference": {"local_dir": str(tmp_path / "suite")}, "candidate": candidate,
                              "run": {"workdir": str(tmp_path / "work"), "run_name": "c"},
                              "compare": {"abort_kl_above": 0.5}}, base_dir=tmp_path)


def _earlier_run() -> RunState:
    """A run stopped after context 0 was finalized and context 1 captured."""
    states = {0: "finalized", 1: "captured", 2: "pending"}
    return RunState(suite_windows=3, reference_ready=True,
                    windows={i: DiskWindow(i, DOMAINS[i], states[i]) for i in range(3)})  # type: ignore[arg-type]


def _card(app: KldApp, stage: str) -> str:
    return app.query_one(f"#stage-{stage}", StageBox).render().plain  # type: ignore[union-attr]


@sync
async def test_the_dashboard_of_a_hidden_state_suite_counts_contexts(tmp_path: Path) -> None:
    app = create_app(profile=_context_profile(tmp_path), config_dir=tmp_path / "cfg", remember_theme=False)
    model = app.main.model
    assert model.stages["compare"].detail == "aborts if a context's KL > 0.5"  # from the suite, at once
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        text = "\n".join(screen_lines(app))
        assert "Contexts" in text and "Windows" not in text, text
        app.main.action_show_tab("result")
        await settle(app, pilot)
        text = "\n".join(screen_lines(app))
        assert "no contexts compared yet" in text, text
        app.main.apply_disk_state(_earlier_run())
        await pilot.pause()
        app.main.refresh_now()
        await pilot.pause()
        assert "contexts 0-2" in _card(app, "reference"), _card(app, "reference")
        assert "contexts 2/3" in _card(app, "capture") and "contexts 1/3" in _card(app, "finalize")
        assert model.stages["capture"].detail == "2 of 3 contexts; r resumes"
        assert model.stages["finalize"].detail == "1 of 3 contexts; r resumes"
        await feed(app, pilot, WindowState("compare", 0, "compared", "prose", figures={"kl": 0.01},
                                           label="context 0000 (prose)"))
        await settle(app, pilot)
        text = "\n".join(screen_lines(app))
        assert "live: contexts compared so far" in text and "KL per context" in text, text
        assert "window" not in text.lower(), text


def test_the_dashboards_words_follow_the_runs_units() -> None:
    """The model takes the unit from the suite (set_windows) or from a window's event (a suite that
    arrives with the run), and its resume lines and cards say it; a logits suite's say windows."""
    for unit in ("context", "window"):
        for told in ("suite", "event"):
            model = DashboardModel()
            model.set_windows([(i, DOMAINS[i]) for i in range(3)], unit if told == "suite" else None)
            if told == "event":
                spec = WindowSpec(1, "code", 0, 24, "", "", context=unit == "context")
                model.apply(WindowState.of("capture", spec, "captured"))
            assert model.unit == unit, (unit, told)
            model.apply_disk_state(_earlier_run())
            assert model.stages["capture"].detail == f"2 of 3 {unit}s; r resumes", (unit, told)
            assert model.card_figures("capture") == {f"{unit}s": "2/3"}, (unit, told)
            assert model.card_figures("reference") == {f"{unit}s": [0, 3]}, (unit, told)
    # an event without its name (a helper's, an older emitter's) leaves the suite's word alone
    model = DashboardModel()
    model.set_windows([(0, "prose")], "context")
    model.apply(WindowState("capture", 0, "captured", "prose"))
    assert model.unit == "context"


def test_the_dashboard_takes_the_unit_an_event_says_not_its_label() -> None:
    """A window's event says what it is called (from its spec); the model reads that, not the label's
    first word: a context labelled otherwise still makes the run's units contexts, and its own bars
    (named "context 0008 ...") go when it is captured."""
    model = DashboardModel()
    model.set_windows([(8, "chinese")])
    model.apply(StageStarted("capture"))
    model.apply(Progress("capture", "context 0008 rows", 3, 9))
    model.apply(WindowState("capture", 8, "captured", "chinese", label="Chinese prose, eighth",
                            name="context 0008", unit="context"))
    assert model.unit == "context"
    assert model.card_figures("capture") == {"contexts": "1/1"}
    assert model.progress == {}
    assert ("info", "[capture] Chinese prose, eighth captured") in model.log, model.log


def test_what_to_run_next_counts_the_suites_units() -> None:
    said = report_next_steps(Path("r.json"), (0, 2), 3, "kldtui.toml", unit="context")
    assert said[-1].strip() == "all 3 contexts: [run] start_window = 0, stop_window = 3 in kldtui.toml", said
    said = report_next_steps(Path("r.json"), (0, 2), 3, "kldtui.toml")
    assert said[-1].strip() == "all 3 windows: [run] start_window = 0, stop_window = 3 in kldtui.toml", said


@sync
async def test_a_logits_suites_dashboard_still_says_windows(tmp_path: Path) -> None:
    from tests.fixtures_tui import ScriptedPipeline

    def factory(emit: Any, cancel: Any) -> ScriptedPipeline:
        return ScriptedPipeline(emit, cancel, windows=3, report_path=tmp_path / "comparison.json")

    app = create_app(pipeline_factory=factory, config_dir=tmp_path / "cfg", remember_theme=False,
                     windows=[(i, DOMAINS[i]) for i in range(3)])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        assert "Windows" in "\n".join(screen_lines(app))
        app.main.action_show_tab("result")
        await settle(app, pilot)
        assert "no windows compared yet" in "\n".join(screen_lines(app))
        app.main.apply_disk_state(_earlier_run())
        await pilot.pause()
        app.main.refresh_now()
        await pilot.pause()
        assert "windows 0-2" in _card(app, "reference") and "windows 2/3" in _card(app, "capture")
        assert app.main.model.stages["capture"].detail == "2 of 3 windows; r resumes"
        await feed(app, pilot, WindowState("compare", 0, "compared", "prose", figures={"kl": 0.01}))
        await settle(app, pilot)
        text = "\n".join(screen_lines(app))
        assert "live: windows compared so far" in text and "KL per window" in text, text
        assert "context" not in text.lower(), text
