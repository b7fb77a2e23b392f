"""Text that comes from data, shown as it is.

Report and candidate names, file paths, domain names, verdict sentences and server lines are never
read as Textual markup: a report named ``q4 [imatrix].json`` lost its ``[imatrix]``, and a path
through a folder named ``x[`` (``x[/]y.json``) stopped the viewer with a MarkupError. Control
characters show as ``\\xNN`` (a file name in a shared folder can hold an escape sequence, and Rich
passes ESC through). Static text the dashboard writes itself (the help) may still use markup.
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Label, Static

from kldtui.formats.untrusted_json import printable


def plain(text: str, style: str | Style = "") -> Text:
    """``text`` as a Rich Text that no markup is read from (a DataTable cell, a log line)."""
    return Text(printable(text), style=style)


def _shown(content: VisualType) -> VisualType:
    return printable(content) if isinstance(content, str) else content


class _Plain:
    """Never markup, control characters escaped: the one rule of the widgets below."""

    def __init__(self, content: VisualType = "", **kwargs: Any) -> None:
        super().__init__(_shown(content), markup=False, **kwargs)  # type: ignore[call-arg]

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        super().update(_shown(content), layout=layout)  # type: ignore[misc]


class PlainStatic(_Plain, Static):
    """A Static for text from data."""


class PlainLabel(_Plain, Label):
    """A Label for text from data (a question naming a path)."""
