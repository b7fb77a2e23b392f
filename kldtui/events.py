"""Typed progress events: the only way engine stages talk to a front end.

Stages take an ``emit`` callable (an :data:`EventSink`) and call it with the dataclasses below.
The Textual app turns them into messages; the batch reporter prints them as lines or JSON.
Nothing here knows about either.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport

# The stages a pipeline runs, in order (the dashboard's stage rows, ``kldtui run`` steps).
PipelineStageName = Literal["reference", "server", "capture", "finalize", "compare"]
PIPELINE_STAGES: tuple[PipelineStageName, ...] = ("reference", "server", "capture", "finalize", "compare")
# Every stage an event can name: the pipeline's, the stand-alone tools', and "run" (the whole run).
StageName = Literal[PipelineStageName, "verify", "demo", "prepare", "publish", "export-head", "convert",
                    "run", "campaign"]
WindowStateName = Literal[
    "pending", "capturing", "captured", "finalizing", "finalized", "comparing", "compared", "failed"
]


@dataclass(frozen=True)
class Event:
    """Base of every event. ``ts`` is wall-clock seconds when it was made."""

    stage: StageName
    ts: float = field(default_factory=time.time, kw_only=True)

    @property
    def kind(self) -> str:
        return type(self).__name__

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict with ``event`` naming the class (used by ``--jsonl``)."""
        data = dataclasses.asdict(self)
        return {"event": self.kind, **data}


@dataclass(frozen=True)
class StageStarted(Event):
    detail: str = ""


@dataclass(frozen=True)
class StageFinished(Event):
    summary: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageFailed(Event):
    message: str = ""


@dataclass(frozen=True)
class Progress(Event):
    """``done`` of ``total`` ``unit`` for one task of a stage (a file, a window, the stage)."""

    task: str
    done: float
    total: float | None
    unit: str = ""
    rate: float | None = None  # units per second
    eta_s: float | None = None


@dataclass(frozen=True)
class LogLine(Event):
    """One line of a child process's log (the server) or an engine note. ``log``: the file that
    keeps the line too (a launched server's log, ``Workspace.server_log``), None: no file does.
    ``own``: kldtui's own line about the child (``server stopped (REASON); exit code N``), not a
    line of its output: front ends that keep the server's output out of their lines print it."""

    line: str
    level: Literal["debug", "info", "warning", "error"] = "info"
    log: str | None = None
    own: bool = False


@dataclass(frozen=True)
class Notice(Event):
    """Something the user should read once (a flag added, a file skipped)."""

    text: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True)
class BackendChosen(Event):
    """Which compare backend runs and why (``kldtui.stages.compare.backends.BackendChoice``): said
    once per compare by whoever chose it, and again when the pipeline's choice changes (a server
    of the run started or stopped)."""

    backend: str  # as the report's provenance names it: c-kernel, numpy-threads, torch-cpu, torch-cuda
    label: str  # with its GPU and threads: "torch-cuda on cuda:1", "c-kernel, 4 threads"
    reason: str  # one line: "no GPU seen: the CPU kernel"

    @property
    def line(self) -> str:
        """How the dashboard's log and ``--batch`` say it."""
        return f"compare backend: {self.label} ({self.reason})"


class NamedWindow(Protocol):
    """What a window's events say of it (:class:`kldtui.formats.suite.WindowSpec` has it all; this
    layer names no format): where it is, and what it is called."""

    @property
    def index(self) -> int: ...
    @property
    def domain(self) -> str: ...
    @property
    def unit(self) -> str: ...  # "window", a hidden-state suite's "context"
    @property
    def name(self) -> str: ...  # "window 003", "context 0008"
    @property
    def label(self) -> str: ...  # "context 0008 (chinese)"


@dataclass(frozen=True)
class WindowState(Event):
    """A window changed state; ``figures`` carries e.g. ``{"kl": 0.003, "rows": 2047}``. Its stages
    make it with :meth:`of`, which names the window as its spec does."""

    window_index: int
    state: WindowStateName
    domain: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # how messages name it ("context 0008 (chinese)"); "": "window NNN (domain)"
    # without its domain ("window 003", "context 0008"): the prefix of its own progress tasks, whose
    # bars go once it reaches a final state; "": "window NNN"
    name: str = ""
    # what it is called ("window", a hidden-state suite's "context"): the dashboard names the run's
    # units by it; "": not said (an event made without its spec), the front end keeps its own word
    unit: str = ""

    def __post_init__(self) -> None:
        # frozen: the unsaid names are filled once, here, as the spec would name a logits suite's window
        if not self.name:
            object.__setattr__(self, "name", f"window {self.window_index:03d}")
        if not self.label:
            object.__setattr__(self, "label", self.name + (f" ({self.domain})" if self.domain else ""))

    @classmethod
    def of(cls, stage: StageName, window: NamedWindow, state: WindowStateName,
           figures: dict[str, Any] | None = None) -> WindowState:
        """``window``'s event, named as its spec names it (``WindowSpec.unit``, ``.name``, ``.label``)."""
        return cls(stage, window.index, state, window.domain, figures if figures is not None else {},
                   label=window.label, name=window.name, unit=window.unit)

    def describe(self) -> str:
        """The window's line in a log (the dashboard's and ``--batch``'s):
        ``window 003 (code) compared, mean KL 0.0273169, top-1 90.22 %``."""
        from kldtui.text import precise_number, top_k

        label = self.label
        figures = self.figures
        if self.state == "failed":
            error = figures.get("error")
            return f"{label} failed" + (f": {error}" if error else "")
        extra = ""
        kl = figures.get("kl", figures.get("kl_mean"))
        if isinstance(kl, int | float) and not isinstance(kl, bool):
            extra += f", mean KL {precise_number(kl)}"
        top1 = figures.get("top1", figures.get("top1_agreement"))
        if isinstance(top1, int | float) and not isinstance(top1, bool):
            extra += f", {top_k(1, float(top1))}"
        if figures.get("skipped"):
            extra += " (earlier run, on disk)"
        return f"{label} {self.state}{extra}"


@dataclass(frozen=True)
class EarlyAbort(Event):
    """The run stopped itself (``[compare] abort_kl_above``): a verdict, not an interruption.

    ``report_path`` holds the report of the windows compared so far."""

    reason: str
    report_path: str | None = None


@dataclass(frozen=True)
class ServerReady(Event):
    url: str
    served_model_name: str
    pid: int | None = None


@dataclass(frozen=True)
class ResultReady(Event):
    """A comparison report was written (``path``) or is available in memory (``report``)."""

    path: str | None
    report: ComparisonReport | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The report as its JSON document (``--jsonl`` carries what the report file holds)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["report"] = self.report.to_json() if self.report is not None else {}
        return {"event": self.kind, **data}


CandidateStateName = Literal["waiting", "running", "compared", "stopped early", "failed"]


@dataclass(frozen=True)
class CandidateStarted(Event):
    """A campaign (``[[candidates]]``) starts candidate ``name``, number ``number`` of ``total``;
    the pipeline's events for it follow. ``repeat``: the leader's repeat capture (noise model)."""

    name: str
    number: int
    total: int
    repeat: bool = False


@dataclass(frozen=True)
class Standing:
    """One campaign candidate in the live leaderboard. The figures are its report's (mean KL and
    its 95 % headline interval, ``kl_headline_interval``) and the decision rules' (``mark``: best,
    tied, no verdict or empty; ``verdict``: the sentence against the current best), filled once it
    is compared."""

    name: str
    state: CandidateStateName
    rank: int | None = None
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mark: str = ""
    verdict: str = ""
    outcome: str | None = None  # kldtui.decide.verdict.Outcome against the best
    size_bytes: int | None = None
    bits_per_weight: float | None = None
    report_path: str | None = None
    note: str = ""  # why it is not ranked (stopped early, failed)
    provisional: bool = False  # the verdict holds only as far as the noise model can say
    repeat_of: str | None = None  # a second capture of this candidate (the noise model's): not ranked


@dataclass(frozen=True)
class LeaderboardUpdated(Event):
    """The campaign's leaderboard after a candidate finished: ranked rows first (by mean KL),
    then the candidates still to come; ``noise_model`` says which noise model the verdicts use."""

    rows: tuple[Standing, ...]
    windows: int = 0
    # what the windows are called: "window", or a hidden-state suite's "context" (the rule is
    # kldtui.formats.suite.unit_name, which this layer cannot import)
    unit: str = "window"
    # what the verdicts against the best count ("" : the windows): a hidden-state suite's source
    # clusters, each counted once (kldtui.decide.leaderboard.Leaderboard.tie_unit)
    tie_unit: str = ""
    noise_model: str = ""
    notes: tuple[str, ...] = ()
    # the same in one short line each (the dashboard's campaign board; the help has them in full)
    noise_brief: str = ""
    brief_notes: tuple[str, ...] = ()
    path: str | None = None  # the campaign's leaderboard.json (kldtui.workspace) once written
    noise_path: str | None = None  # the measured noise model's file (noise-model-HASH.json), if any
    final: bool = False
    ranked: bool = True  # False: only a candidate's state changed (it started), not the ranking


EventSink = Callable[[Event], None]


def null_sink(event: Event) -> None:
    """An :data:`EventSink` that drops everything."""


@contextmanager
def failure_reported(emit: EventSink, stage: StageName) -> Iterator[None]:
    """Emit :class:`StageFailed` for a :class:`~kldtui.errors.KldError` leaving the block, then
    re-raise it; an interruption is not a failure and is only re-raised."""
    from kldtui.errors import Interrupted, KldError

    try:
        yield
    except KldError as exc:
        if not isinstance(exc, Interrupted):
            emit(StageFailed(stage, message=str(exc)))
        raise


class Cancel:
    """A cancellation flag shared between a front end and a running stage.

    Stages call :meth:`check` at safe points (between row blocks, chunks, files); it raises
    :class:`kldtui.errors.Interrupted` once :meth:`set` was called.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self.reason = "interrupted"

    def set(self, reason: str = "interrupted") -> None:
        self.reason = reason
        self._flag.set()

    def is_set(self) -> bool:
        return self._flag.is_set()

    def wait(self, timeout: float) -> bool:
        return self._flag.wait(timeout)

    def check(self) -> None:
        if self._flag.is_set():
            from kldtui.errors import Interrupted

            raise Interrupted(self.reason)


class Throttle:
    """Lets a progress event through at most every ``interval`` seconds (plus the last one)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self._last = 0.0

    def ready(self, final: bool = False) -> bool:
        now = time.monotonic()
        if final or now - self._last >= self.interval:
            self._last = now
            return True
        return False
