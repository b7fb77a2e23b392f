"""What a front end may ask of a running pipeline: the seam the dashboard and the batch runner type against.

:class:`kldtui.workflow.pipeline.Pipeline` implements it; tests may hand a front end anything
else that does. No Textual here (the dashboard imports this module, the batch runner too).
"""

from __future__ import annotations

from typing import Literal, Protocol

from kldtui.events import PipelineStageName
from kldtui.workflow.state import RunState
from kldtui.workspace import Workspace

# A stage the front end can start: one pipeline stage, or everything overlapped.
StageRequest = PipelineStageName | Literal["all"]


class PipelineControl(Protocol):
    """A pipeline as the front ends see it. Stage calls block; run them in a worker thread."""

    @property
    def workspace(self) -> Workspace:
        """Every path of the run (the report, the work folder, the suite)."""
        ...

    def run_stage(self, stage: StageRequest) -> object:
        """Run one stage (resumable) or ``"all"``; progress goes to the pipeline's ``emit``."""
        ...

    def run_all(self) -> RunState:
        """Everything, overlapped; returns the state the run leaves (the report, per-window KL, the
        suite's size: what a front end shows next). The server is stopped at the end."""
        ...

    def stop_server(self, reason: str = "done") -> None:
        """Stop the server this pipeline started (never an attached one); safe any time."""
        ...

    @property
    def server_running(self) -> bool:
        """A server this pipeline started is up."""
        ...

    @property
    def server_url(self) -> str | None:
        """The ready server's URL (None until the server stage finished)."""
        ...

    def window_list(self) -> list[tuple[int, str]]:
        """``(index, domain)`` of the run's windows (empty until the suite is there)."""
        ...
