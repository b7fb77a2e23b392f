"""The one wording of a file that cannot be read (kldtui.formats.safe_io.read_failure, through
kldtui.formats.untrusted_json.read_json) and of a damaged field (kldtui.errors.remedy): one line,
the file, the problem, then what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kldtui.errors import BadField, BadInput, remedy
from kldtui.formats.untrusted_json import read_json
from kldtui.text import human_bytes

TO_DO = "give a widget file that kldtui widget wrote"
LIMIT = 1 << 20  # bytes a widget file may hold (above the 200,000 of the deeply nested one)


@pytest.mark.parametrize("content, problem", [
    (None, "widget file not found"),
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("folder", "is a folder, not a file"),
    (b"\xff\xfe{}", "widget file is not UTF-8 text, so not JSON"),
    (b"{'a': 1}", "widget file is not valid JSON (Expecting property name"),
    (b"[" * 100_000 + b"]" * 100_000, "widget file is JSON nested too deeply"),
    ("sparse", f"widget file cannot be read (larger than {human_bytes(LIMIT)})"),
])
def test_read_json_says_the_problem_then_what_to_do(tmp_path: Path, content: bytes | str | None,
                                                    problem: str) -> None:
    path = tmp_path / "w.json"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "folder":
        path.mkdir()
    elif content == "sparse":  # a hole past the limit: a valid document, then what a hostile folder adds
        path.write_text('{"a": 1}')
        with path.open("r+b") as handle:
            handle.seek(LIMIT)
            handle.write(b" ")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(BadInput) as info:
        read_json(path, what="widget file", remedy=TO_DO, limit=LIMIT)
    message = str(info.value)
    assert message.startswith(f"{path}: {problem}"), message
    assert message.endswith(f"; {TO_DO}") and "\n" not in message, message


def test_read_json_reads_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text('{"a": [1, 2]}')
    assert read_json(path, what="widget file", remedy=TO_DO, limit=LIMIT) == {"a": [1, 2]}


def test_remedy_ends_a_field_error_once_and_passes_the_rest() -> None:
    with pytest.raises(BadInput) as info, remedy("download it again"), remedy("capture it again"):
        raise BadField("m.json windows[0]: expected an object")
    assert str(info.value) == "m.json windows[0]: expected an object; capture it again"  # the innermost
    assert not isinstance(info.value, BadField)
    with pytest.raises(BadInput) as other, remedy("download it again"):
        raise BadInput("m.json: is a FIFO (named pipe), not a regular file; give the folder")
    assert str(other.value).endswith("; give the folder")  # already says what to do: unchanged
