"""One capture through the pipeline's own stages, for tests that need captured files (a hidden-state
reference, a candidate's hidden states, score records): serve, capture, finalize, and the server
stopped whatever happens."""

from __future__ import annotations

from pathlib import Path

from kldtui.events import Event
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Profile


def serve_capture_finalize(profile: Profile, output: Path | None = None, kind: str = "candidate",
                           events: list[Event] | None = None) -> list[Event]:
    """Serve ``profile``'s candidate, capture every window and finalize into ``output`` (the
    workspace's folder when None) as ``kind`` (``reference`` or ``candidate``); the events, appended
    to ``events`` when given."""
    seen = events if events is not None else []
    pipeline = Pipeline(profile, seen.append, output_dir=output, output_kind=kind)
    try:
        pipeline.serve()
        pipeline.capture()
        pipeline.finalize()
    finally:
        pipeline.stop_server(reason="done")
    return seen
