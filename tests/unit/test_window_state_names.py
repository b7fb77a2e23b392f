"""A window's event says what the window is called (``unit``, ``name``, ``label``) as its spec does,
as fields: front ends read them, not a parse of the label (which took the label's first word for
the unit and its text before " (" for the name)."""

from __future__ import annotations

from kldtui.events import WindowState
from kldtui.formats.suite import WindowSpec


def _spec(index: int, domain: str, context: bool) -> WindowSpec:
    return WindowSpec(index, domain, 0, 16, "", "", context=context)


def test_an_event_names_its_window_as_its_spec_does() -> None:
    context = WindowState.of("finalize", _spec(8, "chinese", context=True), "finalized", {"bytes": 10})
    assert (context.unit, context.name) == ("context", "context 0008")
    assert context.label == "context 0008 (chinese)"
    assert (context.window_index, context.domain, context.figures) == (8, "chinese", {"bytes": 10})
    assert context.describe() == "context 0008 (chinese) finalized"
    window = WindowState.of("compare", _spec(3, "code", context=False), "compared", {"kl": 0.0273169})
    assert (window.unit, window.name) == ("window", "window 003")
    assert window.describe() == "window 003 (code) compared, mean KL 0.0273169"


def test_the_unit_and_name_are_the_events_not_its_labels() -> None:
    event = WindowState("capture", 8, "captured", "chinese", label="Chinese prose, eighth",
                        name="context 0008", unit="context")
    assert (event.unit, event.name) == ("context", "context 0008")
    assert event.describe() == "Chinese prose, eighth captured"
    doc = event.to_dict()
    assert (doc["unit"], doc["name"], doc["label"]) == ("context", "context 0008", "Chinese prose, eighth")


def test_an_event_made_without_its_spec_is_a_window_and_says_no_unit() -> None:
    event = WindowState("capture", 3, "captured", "code")
    assert (event.name, event.label, event.unit) == ("window 003", "window 003 (code)", "")
    assert WindowState("capture", 3, "failed").describe() == "window 003 failed"
