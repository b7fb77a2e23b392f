"""``kldtui verify DIR``: check a suite folder, a logits folder or a dataset root completely."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

HELP = "verify suite, token and file hashes of a local suite, logits folder or dataset root"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="DIR", help="suite folder, logits folder (manifest.json) or "
                        "dataset root (suite-manifest.json + ref/)")
    parser.add_argument("--reverify", action="store_true",
                        help="hash every file again, even those unchanged since they were verified")
    parser.add_argument("--workers", type=int, default=None, help="files hashed in parallel (default: "
                        "up to 4)")
    parser.add_argument("--start-window", "--start-context", dest="start_window", type=int, default=None,
                        help="first logits window (hidden-state suite: context) to check")
    parser.add_argument("--stop-window", "--stop-context", dest="stop_window", type=int, default=None,
                        help="check logits windows (contexts) before this")
    from kldtui.formats.fidelity_names import CONTEXT_FILTERS

    parser.add_argument("--context-filter", choices=CONTEXT_FILTERS, default=None,
                        help="a hidden-state suite: check only these contexts (default: those downloaded "
                             "here, else all)")
    parser.add_argument("--stratum", action="append", default=[], metavar="NAME",
                        help="only windows of this domain (a logits suite) or contexts of this allocation "
                             "stratum (a hidden-state suite); repeatable")
    parser.add_argument("--sentinel-runs", action="store_true",
                        help="a hidden-state suite: require the sentinel repeat runs of the selected "
                             "sentinel contexts (by default those present are checked)")
    parser.add_argument("--suite-manifest", default=None,
                        help="suite a logits folder belongs to (default: the one in the folder above)")
    parser.add_argument("--published", action="store_true",
                        help="also require the published Kimi K3 suite hash")


class ConsoleProgress:
    """Shows engine events on stderr: a rich progress bar on a terminal, plain lines otherwise.

    Use as a context manager and pass the instance as ``emit``. Byte tasks show size, rate and ETA.
    """

    AGGREGATE_TASKS = ("hash", "download")

    def __init__(self, *, live: bool | None = None, stream: Any = None, plain_interval: float = 5.0,
                 stage_summaries: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        # False where the command prints the stage's result on stdout itself (one line, not two)
        self.stage_summaries = stage_summaries
        self.live = self.stream.isatty() if live is None else live
        self.plain_interval = plain_interval
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        self._last_plain: dict[str, float] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ConsoleProgress:
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), TimeRemainingColumn(),
                                      console=Console(file=self.stream), transient=False)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _print(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            with self._lock:  # events come from several worker threads: one write per line
                self.stream.write(text + "\n")
                self.stream.flush()

    def __call__(self, event: Any) -> None:
        from kldtui.events import LogLine, Notice, Progress, StageFailed, StageFinished, StageStarted

        if isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, StageStarted):
            self._print(f"[{event.stage}] {event.detail}".rstrip())
        elif isinstance(event, StageFinished):
            if self.stage_summaries:
                self._print(f"[{event.stage}] {event.summary}")
        elif isinstance(event, StageFailed):
            self._print(f"[{event.stage}] failed: {event.message}")
        elif isinstance(event, Notice):
            self._print(f"[{event.stage}] {event.level}: {event.text}" if event.level != "info"
                        else f"[{event.stage}] {event.text}")
        elif isinstance(event, LogLine) and event.level != "debug":
            self._print(f"[{event.stage}] {event.line}")

    def _on_progress(self, event: Any) -> None:
        key = f"{event.stage}:{event.task}"
        if self._progress is not None:
            if event.unit != "B":
                return  # counts of small files: not worth a bar
            task = self._tasks.get(key)
            finished = event.total is not None and event.done >= event.total
            if finished and event.task not in self.AGGREGATE_TASKS:
                if task is not None:  # a finished file leaves the screen; the stage total stays
                    self._progress.remove_task(task)
                    del self._tasks[key]
                return
            if task is None:
                task = self._progress.add_task(f"{event.stage} {event.task}", total=event.total)
                self._tasks[key] = task
            self._progress.update(task, completed=event.done, total=event.total)
            return
        finished = event.total is not None and event.done >= event.total
        now = time.monotonic()
        if not finished and now - self._last_plain.get(key, 0.0) < self.plain_interval:
            return
        self._last_plain[key] = now
        if event.unit == "B":
            from kldtui.text import human_bytes

            total = f"/{human_bytes(event.total)}" if event.total is not None else ""
            rate = f" {human_bytes(event.rate)}/s" if event.rate else ""
            eta = f" ETA {event.eta_s:.0f}s" if event.eta_s is not None and not finished else ""
            self._print(f"[{event.stage}] {event.task}: {human_bytes(event.done)}{total}{rate}{eta}")
        elif finished:
            self._print(f"[{event.stage}] {event.task}: {event.done:g}/{event.total:g} {event.unit}")


def check_workers(workers: int | None) -> None:
    """``--workers`` (verify, publish): 1 or more (0 was taken as the default, -3 as 1, unsaid)."""
    from kldtui.errors import BadInput

    if workers is not None and workers < 1:
        raise BadInput(f"--workers {workers}: give 1 or more files hashed at once (default: up to 4)")


def check_arguments(args: argparse.Namespace) -> None:
    """The flags alone, before any file is read or a line printed (BadInput, one line)."""
    from pathlib import Path

    from kldtui.errors import BadInput

    check_workers(args.workers)
    # a negative start is refused by the stage, in the words of the suite's units (windows, contexts)
    start, stop = args.start_window or 0, args.stop_window
    if stop is not None and stop <= start:
        raise BadInput(f"--start-window {start} --stop-window {stop}: the range [{start}, {stop}) is empty; "
                       "give a stop after the start")
    if args.suite_manifest is not None and not Path(args.suite_manifest).exists():
        raise BadInput(f"{args.suite_manifest}: suite manifest not found; give --suite-manifest the "
                       "suite-manifest.json (or folder) the logits folder was captured from")


def run(args: argparse.Namespace) -> int:
    from kldtui.stages.verify import PUBLISHED_SUITE_HASH, verify_path

    check_arguments(args)
    selection = None
    if args.context_filter is not None or args.stratum:
        from kldtui.formats.fidelity import ContextFilter
        from kldtui.formats.fidelity_names import parse_strata

        selection = ContextFilter(args.context_filter or "all", parse_strata(args.stratum, "--stratum"))
    with ConsoleProgress(stage_summaries=False) as emit:  # the result is printed below, on stdout
        result = verify_path(args.path, reverify=args.reverify, workers=args.workers,
                             start_window=args.start_window, stop_window=args.stop_window,
                             suite=args.suite_manifest,
                             expected_suite_hash=PUBLISHED_SUITE_HASH if args.published else None,
                             emit=emit, selection=selection,
                             sentinel_runs=True if args.sentinel_runs else None)
    for failure in result.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(result.summary())
    return result.exit_code
