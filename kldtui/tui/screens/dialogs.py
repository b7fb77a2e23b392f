"""Small modal dialogs: confirm, ask for a path, help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button("Stop and quit (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

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
            yield Label(self.prompt)
            yield Input(value=self.value, id="path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


COMMON_KEYS = """\
[b]Everywhere[/b]
  o        open a result report
  t        switch theme (remembered)
  ctrl+p   command palette
  ?        this help
  q        quit{quit_note}
"""


class HelpScreen(ModalScreen[None]):
    """The keys of the screen it was opened from (``text``), then the keys that work everywhere."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def __init__(self, text: str, quit_note: str = "") -> None:
        super().__init__()
        self.text = text
        self.quit_note = quit_note

    def compose(self) -> ComposeResult:
        body = self.text.rstrip("\n") + "\n" + COMMON_KEYS.format(quit_note=self.quit_note)
        with VerticalScroll(id="dialog"):
            yield Static(body, id="help-text")
            yield Static("[b]Esc[/b], [b]q[/b] or [b]?[/b] closes this help", id="help-close")

    def action_close(self) -> None:
        self.dismiss(None)
