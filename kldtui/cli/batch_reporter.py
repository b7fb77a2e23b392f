"""The headless front end: prints pipeline events and maps how a run ended to an exit code.

:class:`BatchReporter` is an :data:`~kldtui.events.EventSink`. Plain mode writes one line per
meaningful event, fit for a log file: no cursor movement, progress coalesced per task (its first
line once it has run ``interval`` seconds, then at most one every ``interval`` seconds, and its
final one; a task that ends sooner prints none: see :meth:`BatchReporter._progress_line`), and
kldtui's lines alone: the server's own output stays in its server log unless ``server_log`` (the
first warning or error it holds back from a log file names that file in one line); kldtui's own
line about a server (``LogLine.own``: ``server stopped (REASON); exit code N``) is always printed.
JSONL mode writes every event as one JSON object per line (``Event.to_dict`` plus ``"schema"``)
and ends the stream with one ``RunFinished`` line (docs/EVENTS.md). Both are thread-safe. With
``live=True`` (a terminal, not JSONL) progress shows as rich bars below the scrolling lines
instead (enter the reporter as a context manager; :func:`run_headless` does).

:func:`run_headless` runs a job (``job(emit, cancel) -> result``) in a worker thread while the
main thread handles SIGINT, SIGTERM and SIGHUP: the first signal sets the :class:`Cancel` (the
stage stops at its next safe point and the server is stopped); if the job has not ended after
``grace_s`` seconds the ``on_force_stop`` callback runs (the pipeline stops its server, which
ends a pending request); a second signal forces it at once. Exit codes: 0 done, 1 failed,
2 bad input, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from kldtui import stop_signals
from kldtui.errors import BadInput, Interrupted, KldError
from kldtui.events import (
    BackendChosen,
    Cancel,
    CandidateStarted,
    EarlyAbort,
    Event,
    EventSink,
    LeaderboardUpdated,
    LogLine,
    Notice,
    Progress,
    ResultReady,
    ServerReady,
    StageFailed,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.untrusted_json import printable
from kldtui.text import BYTE_UNITS, amount, done_of_total, plural

EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
# the stages whose windows are the run's (a helper run's windows, the reference's capture, get no line)
_RUN_WINDOW_STAGES = ("capture", "finalize", "compare")
# Version of the JSONL stream's schema (docs/EVENTS.md): every line carries it as "schema".
EVENTS_SCHEMA_VERSION = 1
OUTCOMES = {EXIT_DONE: "finished", EXIT_FAILED: "failed", EXIT_BAD_INPUT: "bad_input",
            EXIT_INTERRUPTED: "interrupted"}
_PRINTED_WINDOW_STATES = ("captured", "finalized", "compared", "failed")


def _fmt_num(value: float | None, unit: str = "") -> str:
    """An amount or a rate as the dashboard writes it (``6264``, ``12.3k``, ``3.99 MiB``)."""
    if value is None:
        return "?"
    return amount(value, unit)


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f", ETA {seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f", ETA {seconds // 60}m{seconds % 60:02d}s"
    return f", ETA {seconds}s"


class BatchReporter:
    """Prints events as plain lines (``jsonl=False``) or JSON lines; see the module docstring."""

    def __init__(self, stream: IO[str] | None = None, *, jsonl: bool = False, interval: float = 2.0,
                 server_log: bool = False, clock: Callable[[], float] = time.monotonic,
                 live: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.jsonl = jsonl
        self.live = live and not jsonl
        self._progress: Any = None
        self._bars: dict[tuple[str, str], Any] = {}
        self.interval = interval
        self.server_log = server_log
        self.clock = clock
        self._lock = threading.Lock()
        # per running task (stage, task): when its first event came, when its last line was printed
        self._first_progress: dict[tuple[str, str], float] = {}
        self._last_progress: dict[tuple[str, str], float] = {}
        self.result_path: str | None = None
        # a campaign's last standings: what to do after it names its reports (kldtui.workflow.next_steps)
        self.standings: LeaderboardUpdated | None = None
        self.failures: list[str] = []
        self.early_abort: EarlyAbort | None = None  # the run stopped itself (a verdict)
        self.failed_messages: set[str] = set()  # failures already printed as words (not JSONL)
        self.noted_logs: set[str] = set()  # server logs whose held-back lines a note named
        # the lines a leaderboard table printed under it (its noise model, its notes): a campaign prints
        # a table after each candidate, and each fact they share is said once, under the first that has it
        self.board_lines_said: set[str] = set()

    def __call__(self, event: Event) -> None:
        if isinstance(event, ResultReady):
            self.result_path = event.path
        if isinstance(event, LeaderboardUpdated):
            self.standings = event
        if isinstance(event, EarlyAbort):
            self.early_abort = event
            if not self.jsonl:
                return  # its Notice says it in words
        if isinstance(event, StageFailed):
            self.failures.append(f"{event.stage}: {event.message}")
            if not self.jsonl:
                self.failed_messages.add(event.message)
        if self._progress is not None and isinstance(event, Progress):
            self._bar(event)
            return
        if self._progress is not None and isinstance(event, WindowState) and \
                event.state in _PRINTED_WINDOW_STATES:
            self._drop_window_bars(event.stage, event.name)
        if self._progress is not None and isinstance(event, StageFinished | StageFailed):
            self._drop_stage_bars(event.stage)
        if isinstance(event, WindowState) and event.state in _PRINTED_WINDOW_STATES:
            self._end_tasks(event.stage, event.name)
        if isinstance(event, StageFinished | StageFailed):
            self._end_tasks(event.stage)
        line: str | None
        if self.jsonl:
            doc = {"schema": EVENTS_SCHEMA_VERSION, **event.to_dict()}
            line = json.dumps(doc, default=str, sort_keys=True)
        else:
            line = self.format(event)
            # a name from a shared folder (a file, a server's log line) must not reach the terminal as
            # an escape sequence; JSON lines escape it already
            line = None if line is None else printable(line)
        if line is None:
            return
        with self._lock:
            if self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
                return
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    # -- live mode (a terminal): rich progress bars under the scrolling lines ----------------------
    def __enter__(self) -> BatchReporter:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import (
                Progress as RichProgress,
            )

            self._progress = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                          TextColumn("{task.fields[amount]}"), TimeRemainingColumn(),
                                          console=Console(file=self.stream), transient=True)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
                self._bars.clear()

    def write_final(self, code: int, message: str = "") -> None:
        """JSONL: the stream's last line, how the run ended (docs/EVENTS.md, ``RunFinished``)."""
        if not self.jsonl:
            return
        doc = {"schema": EVENTS_SCHEMA_VERSION, "event": "RunFinished", "stage": "run", "ts": time.time(),
               "outcome": OUTCOMES.get(code, "failed"), "exit_code": code, "report": self.result_path,
               "message": message}
        with self._lock:
            try:
                self.stream.write(json.dumps(doc, sort_keys=True) + "\n")
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def _drop_stage_bars(self, stage: str) -> None:
        """A finished or failed stage leaves no bar behind."""
        with self._lock:
            if self._progress is None:
                return
            for key in [k for k in self._bars if k[0] == stage]:
                self._progress.remove_task(self._bars.pop(key))

    def _drop_window_bars(self, stage: str, prefix: str) -> None:
        """A window's own bars (tasks named ``prefix``, ``WindowState.name``: ``window 003``, a
        context's ``context 0003``) go when it reaches a final state (its last update may not be 100 %)."""
        with self._lock:
            if self._progress is None:
                return
            for key in [k for k in self._bars if k[0] == stage and k[1].startswith(prefix)]:
                self._progress.remove_task(self._bars.pop(key))

    def _bar(self, event: Progress) -> None:
        key = (event.stage, event.task)
        finished = event.total is not None and event.done >= event.total
        with self._lock:
            progress = self._progress
            if progress is None:
                return
            bar = self._bars.get(key)
            if event.total is None:  # a count without a total is not a bar (it stayed at "6/?")
                return
            if finished:
                if bar is not None:  # a finished task leaves the screen
                    progress.remove_task(bar)
                    del self._bars[key]
                return
            amount = done_of_total(event.done, event.total, event.unit)
            if event.unit and event.unit not in BYTE_UNITS:
                amount += f" {event.unit}"
            if bar is None:
                bar = progress.add_task(f"{event.stage} {event.task}", total=event.total, amount=amount)
                self._bars[key] = bar
            progress.update(bar, completed=event.done, total=event.total, amount=amount)

    def format(self, event: Event) -> str | None:
        """One plain line for ``event``, or None when it is not worth a line (throttled)."""
        stamp = time.strftime("%H:%M:%S", time.localtime(event.ts))
        head = f"{stamp} {event.stage}:"
        if isinstance(event, StageStarted):
            return f"{head} started{' - ' + event.detail if event.detail else ''}"
        if isinstance(event, StageFinished):
            if event.stage == "server":  # loaded, not done: its ServerReady line said so, once
                return None
            return f"{head} done{' - ' + event.summary if event.summary else ''}"
        if isinstance(event, StageFailed):
            return f"{head} FAILED - {event.message}"
        if isinstance(event, Notice):
            mark = {"info": "note", "warning": "WARNING", "error": "ERROR"}[event.level]
            return f"{head} {mark}: {event.text}"
        if isinstance(event, BackendChosen):
            return f"{head} {event.line}"
        if isinstance(event, CandidateStarted):
            what = "repeat capture of the leader" if event.repeat else "candidate"
            return f"{head} {what} {event.number}/{event.total}: {event.name}"
        if isinstance(event, LeaderboardUpdated):
            return self._leaderboard(head, event)
        if isinstance(event, ServerReady):
            pid = f" (pid {event.pid})" if event.pid else ""
            return f"{head} ready at {event.url}, serving {event.served_model_name}{pid}"
        if isinstance(event, ResultReady):
            return f"{head} report written to {event.path}" if event.path else None
        if isinstance(event, WindowState):
            if event.state not in _PRINTED_WINDOW_STATES:
                return None
            if event.stage not in _RUN_WINDOW_STAGES and event.state != "failed":
                return None  # the reference's own capture: its bars and stage lines say enough
            return f"{head} {event.describe()}"
        if isinstance(event, Progress):
            return self._progress_line(head, event)
        if isinstance(event, LogLine):
            if event.stage == "server" and event.own and not self.server_log:
                return self._own_server_line(head, event)
            if event.stage == "server" and not self.server_log:
                return self._hold_back(head, event)
            return f"{head} {event.line}"
        return None

    def _end_tasks(self, stage: str, prefix: str = "") -> None:
        """A window in a final state, or a finished stage, ends its tasks, as it drops their bars: a
        task whose last update was not 100 % does not time the next run of its name from its start."""
        with self._lock:
            for key in [k for k in self._first_progress if k[0] == stage and k[1].startswith(prefix)]:
                del self._first_progress[key]
                self._last_progress.pop(key, None)

    def _progress_line(self, head: str, event: Progress) -> str | None:
        """A task's progress as a line, coalesced: its first line once it has run ``interval`` seconds,
        then at most one every ``interval`` seconds, and its final (100 %) line when an earlier one was
        printed or it ran that long. A task that ends sooner (a window's rows, a small file's hash)
        prints nothing: the line of its window or stage says it ended, and a 0 % or 100 % line from
        the same second adds no fact. A task that ended starts afresh (the next candidate's capture)."""
        key = (event.stage, event.task)
        final = event.total is not None and event.done >= event.total
        with self._lock:  # capture, finalize and compare report from their own threads
            now = self.clock()
            first = self._first_progress.setdefault(key, now)
            last = self._last_progress.get(key)
            if final:
                self._first_progress.pop(key, None)
                self._last_progress.pop(key, None)
                if last is None and now - first < self.interval:
                    return None
            elif now - (first if last is None else last) < self.interval:
                return None
            else:
                self._last_progress[key] = now
        unit = event.unit
        is_bytes = unit in BYTE_UNITS
        pct = f" ({100 * event.done / event.total:.0f}%)" if event.total else ""
        rate = (f", {_fmt_num(event.rate, unit)}{'/s' if is_bytes else f' {unit}/s'}"
                if event.rate else "")
        shown_unit = "" if is_bytes or not unit or event.task.endswith(unit) else f" {unit}"
        amount = done_of_total(event.done, event.total, unit) if event.total is not None \
            else _fmt_num(event.done, unit)
        return f"{head} {event.task} {amount}{shown_unit}{pct}{rate}{_fmt_eta(event.eta_s)}"

    def _own_server_line(self, head: str, event: LogLine) -> str:
        """kldtui's own line about a server (``server stopped (REASON); exit code N``): printed, never
        held back with the server's output; it names the server's log unless a note named it."""
        if event.log is None or event.log in self.noted_logs:
            return f"{head} {event.line}"
        self.noted_logs.add(event.log)
        return f"{head} {event.line}; the server's output is in {event.log}"

    def _hold_back(self, head: str, event: LogLine) -> str | None:
        """A line of the server's own output: kept in the server's log, never among kldtui's lines
        (vLLM's WARNING lines were printed between them). The first warning or error held back from
        a log file names that file, once per file (the reference server's and the candidates' are
        not the same); a server that exits says its last lines in the failure. A warning or error no
        file keeps is printed: held back, it would be lost."""
        if event.level not in ("warning", "error"):
            return None
        if event.log is None:
            return f"{head} {event.line}"
        if event.log in self.noted_logs:
            return None
        self.noted_logs.add(event.log)
        return (f"{head} note: the server's warnings and errors go to {event.log}, not here; "
                "--server-log prints every server line")

    def _leaderboard(self, head: str, event: LeaderboardUpdated) -> str | None:
        """The campaign's standings as a small table (the dashboard's campaign board, in text); under it
        the noise model and the notes that no earlier table of this output said (a changed one is new)."""
        from kldtui.workflow.standings import table_lines

        if not event.ranked or (not any(r.state == "compared" for r in event.rows) and not event.final):
            return None  # nothing ranked yet: the candidate lines say what runs
        title = "final leaderboard" if event.final else "leaderboard so far"
        lines = [f"{head} {title} ({plural(event.windows, event.unit)}, KL(reference || candidate), lower is "
                 "closer)"]
        table = table_lines(event.rows, event.windows, event.unit, event.tie_unit)
        lines += ["    " + line for line in table]
        shared = ([f"noise model: {event.noise_model}"] if event.noise_model else []) + [
            f"note: {note}" for note in event.notes]
        lines += [f"    {line}" for line in shared if line not in self.board_lines_said]
        self.board_lines_said.update(shared)
        if event.path:
            lines.append(f"    written to {event.path}")
        return "\n".join(lines)


def exit_code_for(exc: BaseException | None, cancel: Cancel, early_abort: bool = False,
                  signalled: bool = False) -> int:
    """0 done, 2 bad input, 130 interrupted (by the user), else 1. A run that stopped itself
    (:class:`~kldtui.events.EarlyAbort`) failed: it is not an interruption. ``signalled``: a stop
    signal came; a job that finished anyway (the signal landed after its last check) still exits
    130, as ``kldtui`` does for a signal after its work (:func:`kldtui.cli.main.run`), so that a
    script that sent it sees the code it documents."""
    if exc is None:
        return EXIT_INTERRUPTED if signalled and not early_abort else EXIT_DONE
    if isinstance(exc, BadInput):
        return EXIT_BAD_INPUT
    if not early_abort and (isinstance(exc, Interrupted | KeyboardInterrupt) or cancel.is_set()):
        return EXIT_INTERRUPTED
    if isinstance(exc, KldError):
        return exc.exit_code
    return EXIT_FAILED


def _same_file(a: IO[str], b: IO[str]) -> bool:
    """Whether two streams write to one file or terminal (then a line on both is seen twice)."""
    if a is b:
        return True
    try:
        return os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def run_headless(job: Callable[[EventSink, Cancel], Any], reporter: BatchReporter, *,
                 on_force_stop: Callable[[], None] | None = None, grace_s: float = 10.0,
                 err: IO[str] | None = None) -> int:
    """Run ``job`` with signal handling; print the outcome in one line; return the exit code."""
    err = err if err is not None else sys.stderr
    cancel = Cancel()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = job(reporter, cancel)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="kldtui-batch", daemon=True)
    signals_seen: list[int] = []
    forced = threading.Event()

    def force() -> None:
        if on_force_stop is not None and not forced.is_set():
            forced.set()
            with contextlib.suppress(Exception):
                on_force_stop()

    def handler(signum: int, frame: object) -> None:
        signals_seen.append(signum)
        name = signal.Signals(signum).name
        if not cancel.is_set():
            cancel.set(f"interrupted by {name}")
            # in no suite's units: a logits suite's windows, a hidden-state suite's contexts, a download's
            # files are all kept (this runs before, or without, any suite being read)
            reporter(Notice("run", f"{name} received: stopping (the server is stopped, what is finished "
                            "is kept; run again to resume)", level="warning"))
        elif len(signals_seen) > 1:
            force()

    previous: dict[int, Any] = {}
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        for sig in stop_signals.STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)
        early = stop_signals.received()
        if early is not None:  # came before these handlers, its exception lost (kldtui.stop_signals)
            handler(early, None)
    try:
        reporter.__enter__()
        worker.start()
        deadline: float | None = None
        while worker.is_alive():
            worker.join(timeout=0.1)
            if cancel.is_set() and reporter.early_abort is None:
                if deadline is None:
                    deadline = time.monotonic() + grace_s
                elif time.monotonic() > deadline:
                    force()
    finally:
        reporter.__exit__(None, None, None)
        if on_main:
            for signum, old in previous.items():
                signal.signal(signum, old)
    error = box.get("error")
    code = exit_code_for(error, cancel, early_abort=reporter.early_abort is not None,
                         signalled=bool(signals_seen))
    message = ""
    if code == EXIT_INTERRUPTED:
        reason = cancel.reason if cancel.is_set() else "interrupted"
        message = f"interrupted ({reason}); state is kept, run the same command again to resume"
    elif error is not None:
        if reporter.early_abort is not None:
            message = f"stopped early: {reporter.early_abort.reason}"
        elif isinstance(error, KldError):
            message = f"error: {error}"
        else:
            message = f"internal error: {type(error).__name__}: {error}"
    said = isinstance(error, KldError) and str(error) in reporter.failed_messages \
        and _same_file(reporter.stream, err)
    if message and not said:  # a failure its stage's FAILED line just said on this terminal: once
        print(f"kldtui: {printable(message)}", file=err)
    reporter.write_final(code, message)
    return code
