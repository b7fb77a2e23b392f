"""The server/engine log with search."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog

from kldtui.tui.model import DashboardModel
from kldtui.tui.widgets.plain import plain


class LogView(Vertical):
    """The server/engine log: follows new lines; ``/`` searches (shows matching lines only)."""

    def __init__(self, model: DashboardModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model
        self.query_text = ""
        self._shown_serial = 0
        self._width = 0
        self._no_matches_shown = False
        self._end_y: float | None = None  # where "the end" was when the log last went there (following)

    def compose(self) -> ComposeResult:
        yield RichLog(id="log-lines", max_lines=5000, wrap=True, markup=False, auto_scroll=True,
                      min_width=20)
        yield Input(placeholder="search the log (Enter: keep, Esc: clear)", id="log-search")

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False

    def _matches(self, text: str) -> bool:
        return not self.query_text or self.query_text.lower() in text.lower()

    def _line(self, level: str, text: str) -> Text:
        line = plain(text, style=self._level_style(level))  # a server's line may hold ESC
        if self.query_text:
            line.highlight_words([self.query_text], style="reverse", case_sensitive=False)
        return line

    def _level_style(self, level: str) -> Style | str:
        if level == "error":
            return self.app.current_theme.error or ""
        if level == "warning":
            return self.app.current_theme.warning or ""
        return ""

    def _hidden(self) -> bool:
        """Its tab is not shown: RichLog would wrap new lines at its minimum width (20)."""
        return self.query_one("#log-lines", RichLog).scrollable_content_region.width <= 0

    def refresh_from(self, model: DashboardModel) -> None:
        log = self.query_one("#log-lines", RichLog)
        new = model.log_serial - self._shown_serial
        if new <= 0 or self._hidden():
            return  # written when the tab shows again (on_show)
        if self._no_matches_shown:
            self.rebuild()
            return
        following = self._following(log)
        lines = list(model.log)[-new:] if new < len(model.log) else list(model.log)
        for level, text in lines:
            if self._matches(text):
                log.write(self._line(level, text), expand=True)
        self._shown_serial = model.log_serial
        if following:
            self._follow_end(log)

    def _following(self, log: RichLog) -> bool:
        """The log shows its last line, or did when it last followed it and nobody scrolled since."""
        return log.scroll_y >= log.max_scroll_y or (self._end_y is not None and log.scroll_y == self._end_y)

    def _follow_end(self, log: RichLog) -> None:
        """Scroll to the last line once the layout is done (and remember where that was)."""
        def to_end() -> None:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
            self._end_y = log.scroll_y

        self.call_after_refresh(to_end)

    def rebuild(self) -> None:
        log = self.query_one("#log-lines", RichLog)
        log.clear()
        shown = 0
        for level, text in list(self.model.log)[-5000:]:
            if self._matches(text):
                log.write(self._line(level, text), expand=True)
                shown += 1
        self._no_matches_shown = bool(self.query_text) and shown == 0
        self._follow_end(log)
        if self._no_matches_shown:
            log.write(Text(f"0 matches for \u201c{self.query_text}\u201d (Esc clears the search)",
                           style="italic"), expand=True)
        self._shown_serial = self.model.log_serial

    def on_show(self) -> None:
        # lines that came while the tab was hidden are laid out once its width is known
        self.call_after_refresh(self.rebuild)

    def on_resize(self) -> None:
        if self._width != self.size.width:  # re-wrap the lines for the new width
            self._width = self.size.width
            self.rebuild()
            return
        # a shorter log (the progress panel below grew) would keep its old top and hide the last
        # line: a log that followed its end keeps following it
        log = self.query_one("#log-lines", RichLog)
        if self._end_y is not None and log.scroll_y == self._end_y:
            self._follow_end(log)

    def open_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            self.query_text = event.value.strip()
            self.rebuild()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "log-search":
            self.query_one("#log-lines", RichLog).focus()

    def clear_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.value = ""
        box.display = False
        self.query_text = ""
        self.rebuild()

    def shown_lines(self) -> list[str]:
        return [strip.text for strip in self.query_one("#log-lines", RichLog).lines]
