"""The batch/output flags, declared once for every command that runs a job headless.

``add_output_arguments(parser, ...)`` adds ``--jsonl``, ``--plain`` and ``--interval`` (and, where
the command has them, ``--batch`` and ``--server-log``); :meth:`OutputOptions.from_args` turns the
parsed flags into the typed options :func:`kldtui.cli.commands.run.run_batch_job` takes. A flag a
command does not offer still has its default in the parsed namespace, so nothing probes for it.
Standard library only: command modules import this at top level.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 2.0


@dataclass(frozen=True)
class OutputOptions:
    """How a headless job shows its events."""

    jsonl: bool = False  # one JSON event per line instead of plain lines
    plain: bool = False  # plain lines even on a terminal (no progress bars)
    interval: float = DEFAULT_INTERVAL_S  # seconds between progress lines of one task
    server_log: bool = False  # print every server log line too

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OutputOptions:
        """From a namespace parsed by a parser given :func:`add_output_arguments`."""
        return cls(jsonl=bool(args.jsonl), plain=bool(args.plain), interval=float(args.interval),
                   server_log=bool(args.server_log))


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def add_output_arguments(parser: argparse.ArgumentParser, *, batch: bool = False,
                         server_log: bool = False) -> None:
    """The output flags. ``batch``: the command opens a dashboard unless ``--batch`` is given (the
    other flags then apply with ``--batch``); ``server_log``: it runs a server whose log lines
    ``--server-log`` prints."""
    with_batch = "with --batch: " if batch else ""
    if batch:
        parser.add_argument("--batch", action="store_true",
                            help="no dashboard: plain progress lines (or --jsonl) on stdout; exit code 0 "
                            "done, 1 failed, 2 bad input, 130 interrupted")
    parser.add_argument("--jsonl", action="store_true", help=f"{with_batch}one JSON event per line")
    parser.add_argument("--plain", action="store_true",
                        help=f"{with_batch}plain lines on a terminal instead of progress bars")
    if server_log:
        parser.add_argument("--server-log", action="store_true",
                            help=f"{with_batch}print every server log line, its warnings and "
                            "errors too (always kept in WORKDIR/server.log)")
    parser.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL_S,
                        help=f"{with_batch}seconds between progress lines of one task, and before its first "
                        "(a task that ends sooner prints none; default "
                        f"{DEFAULT_INTERVAL_S:g})")
    if not server_log:
        parser.set_defaults(server_log=False)
