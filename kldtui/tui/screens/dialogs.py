"""Small modal dialogs: confirm, ask for a path, help."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from kldtui.tui.widgets.key_help import HelpSection, KeyHelp
from kldtui.tui.widgets.plain import PlainLabel, PlainStatic

NOTHING_RUNS = "Nothing is running any more. Quit?"


class ConfirmScreen(ModalScreen[bool]):
    """Asks before quitting. ``question`` may be a callable, asked again twice a second while the
    dialog is open, so the text follows what runs (a run that ends meanwhile: "nothing is running";
    ``None`` from the callable means that)."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]
    RECHECK_S = 0.5

    def __init__(self, question: str | Callable[[], str | None]) -> None:
        super().__init__()
        self.ask = question if callable(question) else (lambda: question)
        self.question = self.ask() or NOTHING_RUNS

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield PlainLabel(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button(self._yes_label(), variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.set_interval(self.RECHECK_S, self.recheck)

    def _yes_label(self) -> str:
        return "Quit (y)" if self.question == NOTHING_RUNS else "Stop and quit (y)"

    def recheck(self) -> None:
        question = self.ask() or NOTHING_RUNS
        if question != self.question:
            self.question = question
            self.query_one("#question", PlainLabel).update(question)
            self.query_one("#yes", Button).label = self._yes_label()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class PathScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, value: str = "") -> None:
        super().__init__()
        self.prompt, self.value = prompt, value

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield PlainLabel(self.prompt, id="path-prompt")
            yield Input(value=self.value, id="path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def common_keys(quit_note: str = "") -> HelpSection:
    """The keys that work on every screen; ``quit_note`` says when q asks first."""
    return HelpSection("Everywhere", (
        ("o", "open a result report"),
        ("t", "switch theme (remembered)"),
        ("ctrl+p", "command palette"),
        ("?", "this help"),
        ("q", f"quit{quit_note}"),
    ))


class HelpScreen(ModalScreen[None]):
    """The keys of the screen it was opened from (``sections``), then the keys that work everywhere,
    then the ranking's notes in full. The keys and notes scroll (at 80x24 they are taller than the
    screen); how to close the help stays in sight below them."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def __init__(self, sections: tuple[HelpSection, ...], quit_note: str = "",
                 notes: list[str] | None = None) -> None:
        super().__init__()
        self.sections = (*sections, common_keys(quit_note))
        self.notes = list(notes or [])

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="help-body"):
                yield KeyHelp(self.sections, id="help-text")
                if self.notes:  # names and paths from the reports: text, never markup
                    notes = "\n".join(["The ranking's notes in full:", *self.notes])
                    yield PlainStatic(notes, id="help-notes")
            yield Static("[b]Esc[/b], [b]q[/b] or [b]?[/b] closes this help", id="help-close")

    def action_close(self) -> None:
        self.dismiss(None)
