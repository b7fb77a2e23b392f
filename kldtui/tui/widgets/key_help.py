"""The keys a screen takes, as the help (?) shows them: a heading per section, then one row per key.

A row's description wraps under itself, beside its keys (a hanging indent): written as one string
whose continuation lines were wrapped by hand, the help broke at the dialog's edge at 80 columns and
its continuation lines started under the keys ("verdict" under "↑ ↓"), so the key column was lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.widgets import Static


@dataclass(frozen=True)
class HelpSection:
    """A heading and its rows: (keys, what they do)."""

    title: str
    rows: tuple[tuple[str, str], ...]


class KeyHelp(Static):
    """Sections of keys; each section's descriptions start in one column and wrap in it."""

    def __init__(self, sections: tuple[HelpSection, ...], *, id: str | None = None) -> None:
        self.sections = sections
        super().__init__(self._renderable(), id=id)

    def _renderable(self) -> Group:
        parts: list[Text | Padding] = []
        for section in self.sections:
            parts.append(Text(section.title, style="bold"))
            grid = Table.grid(padding=(0, 2))
            grid.add_column(no_wrap=True)  # the keys: never split
            grid.add_column()  # the words: wrapped in their own column
            for keys, words in section.rows:
                grid.add_row(Text(keys), Text(words))
            parts.append(Padding(grid, (0, 0, 0, 2)))
        return Group(*parts)
