"""Helpers of the hostile-folder tests (tests/functional/test_hostile_*.py): a capture run to put a FIFO
in, finalize's arguments for it, and a call that must return at once rather than block on a FIFO."""

from __future__ import annotations

import os
from pathlib import Path

from tests.paths import EXAMPLE_SUITE as EXAMPLE


def capture_run(tmp_path: Path) -> tuple[Path, Path]:
    """A capture folder whose run recorded window 0 of the example suite from real chunks."""
    import numpy as np

    from kldtui.formats.chunks import write_chunk
    from kldtui.formats.safetensors_io import RowReader
    from kldtui.formats.suite import load_suite
    from kldtui.stages.capture import CaptureRecord, save_records
    from kldtui.workspace import Workspace

    suite = load_suite(EXAMPLE)
    w = suite.windows[0]
    with RowReader(EXAMPLE / "candidate" / "logits_000.safetensors") as reader:
        rows = reader.read(0, reader.rows)
    ws = Workspace.for_capture(EXAMPLE, tmp_path / "cap", "run", tmp_path / "out")
    request = "cmpl-kldtui-run-w000-abcdef01-0"
    write_chunk(tmp_path / "server", request, 0, np.ascontiguousarray(rows[:10]), rows.shape[1])
    write_chunk(tmp_path / "server", request, 10, np.ascontiguousarray(rows[10:]), rows.shape[1])
    chunk_dir = ws.chunk_dir(w.chunk_dir_name)
    chunk_dir.parent.mkdir(parents=True)
    (tmp_path / "server" / request).rename(chunk_dir)
    record = CaptureRecord(window_index=0, domain=w.domain, prompt_tokens=w.num_tokens, request_id=request,
                           elapsed_seconds=0.1, usage={}, finish_reason="length",
                           chunk_dir=chunk_dir.name, chunks=sorted(os.listdir(chunk_dir)))
    save_records(ws.records_path, {0: record})
    return ws.records_path, chunk_dir


def finalize_args(tmp_path: Path) -> list[str]:
    return ["finalize", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"), "--run-name",
            "run", "--output-dir", str(tmp_path / "out"), "--start-window", "0", "--stop-window", "1"]


def returns_at_once(call, timeout: float = 10.0) -> list[object]:  # type: ignore[no-untyped-def]
    """What ``call()`` returned or raised, run in a thread: a call that blocks fails the test here
    rather than hanging it."""
    import threading

    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:  # noqa: BLE001 - what it raised is the result
            out.append(exc)

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(timeout)
    assert not reader.is_alive(), "blocked on a FIFO"
    return out


def plant(out: Path, what: str, victim: Path) -> Path:
    """Put ``what`` at an output's name: ``"link"`` (to ``victim``, which must stay as it is), ``"fifo"``,
    ``"folder"``; ``"no folder"`` plants nothing and gives the same name in a folder that does not
    exist. Returns the output's name to use."""
    if what == "link":
        out.symlink_to(victim)
    elif what == "fifo":
        os.mkfifo(out)
    elif what == "folder":
        out.mkdir()
    elif what == "no folder":
        return out.parent / "gone" / out.name
    else:
        raise ValueError(what)
    return out


def then_plant_folder(real, folder: Path, when=lambda kwargs: True):  # type: ignore[no-untyped-def]
    """``real`` wrapped to make ``folder`` after it returns (where ``when(kwargs)``): a folder planted at
    an output's name while a stage ran, for the writer's own check to meet."""
    def wrapped(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)
        if when(kwargs):
            folder.mkdir()
        return result

    return wrapped
