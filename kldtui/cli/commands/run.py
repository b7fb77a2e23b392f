"""``kldtui run``: the whole pipeline for a profile; ``--batch`` runs it headless.

Also :func:`open_dashboard`, what ``kldtui`` without a sub-command does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.workspace import DEFAULT_PROFILE

if TYPE_CHECKING:
    from kldtui.formats.report_model import ComparisonReport

HELP = "run the whole pipeline for a profile (the dashboard, or headless with --batch)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=argparse.SUPPRESS,
                        help=f"profile TOML (default: ./{DEFAULT_PROFILE})")
    parser.add_argument("--batch", action="store_true",
                        help="no dashboard: plain progress lines (or --jsonl) on stdout; exit code 0 done, "
                        "1 failed, 2 bad input, 130 interrupted")
    parser.add_argument("--jsonl", action="store_true", help="with --batch: one JSON event per line")
    parser.add_argument("--plain", action="store_true",
                        help="with --batch on a terminal: plain lines instead of progress bars")
    parser.add_argument("--server-log", action="store_true",
                        help="with --batch: print every server log line (always kept in WORKDIR/server.log)")
    parser.add_argument("--keep-chunks", action="store_true",
                        help="keep the capture chunks after each window is finalized and verified "
                        "(default: deleted, so a run needs about one copy of the logits on disk)")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="with --batch: seconds between progress lines of one task (default 2)")


def _profile_path(args: argparse.Namespace) -> str | None:
    return getattr(args, "profile", None)


def run_batch_job(job, args: argparse.Namespace, on_force_stop=None,  # type: ignore[no-untyped-def]
                  profile=None) -> int:
    """Run ``job(emit, cancel)`` headless with the reporter the flags ask for; print the result."""
    from kldtui.cli.batch_reporter import BatchReporter, run_headless

    jsonl = bool(getattr(args, "jsonl", False))
    reporter = BatchReporter(sys.stdout, jsonl=jsonl, interval=float(getattr(args, "interval", 2.0)),
                             server_log=bool(getattr(args, "server_log", False)),
                             live=sys.stdout.isatty() and not getattr(args, "plain", False))
    code = run_headless(job, reporter, on_force_stop=on_force_stop)
    if code == 0 and reporter.result_path and not getattr(args, "jsonl", False):
        from kldtui.formats.report import load_report, summary_text

        report = load_report(reporter.result_path)
        print(summary_text(report))
        print(_next_steps(reporter.result_path, report, profile))
    return code


def _next_steps(path: str, report: ComparisonReport, profile: Any) -> str:
    """Where the report is and the useful next commands (the dashboard shows the same)."""
    from kldtui.workflow.state import next_steps

    suite_windows = 0
    if profile is not None:
        from kldtui.workflow.state import load_state
        from kldtui.workspace import Workspace

        suite_windows = load_state(Workspace.from_profile(profile)).suite_windows
    window_range = report.window_range
    shown = Path(path)
    try:
        shown = shown.resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError):
        pass
    where = str(profile.path) if profile is not None and profile.path else None
    return "\n".join(next_steps(shown, window_range, suite_windows, where))


def run_pipeline_batch(profile, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """Run a profile's whole pipeline headless; a second signal stops its server at once."""
    from kldtui.workflow.pipeline import Pipeline

    holder: dict[str, Pipeline] = {}

    def job(emit, cancel):  # type: ignore[no-untyped-def]
        holder["p"] = Pipeline(profile, emit, cancel)
        return holder["p"].run_all()

    def force_stop() -> None:
        if "p" in holder:
            holder["p"].stop_server(reason="interrupted")

    return run_batch_job(job, args, force_stop, profile=profile)


def run(args: argparse.Namespace) -> int:
    if not args.batch:
        return open_dashboard(args)
    from kldtui.workflow.profile import load_profile

    profile = load_profile(_profile_path(args) or DEFAULT_PROFILE)
    if args.keep_chunks:
        import dataclasses

        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, keep_chunks=True))
    return run_pipeline_batch(profile, args)


def open_dashboard(args: argparse.Namespace) -> int:
    """The dashboard for ``--profile`` or ``./kldtui.toml``; a hint and 2 when there is none."""
    path = _profile_path(args)
    if path is None and not Path(DEFAULT_PROFILE).is_file():
        print(f"kldtui: no ./{DEFAULT_PROFILE} here; pass --profile FILE (see examples/), or try "
              "`kldtui demo` for the whole pipeline on a built-in tiny model", file=sys.stderr)
        return 2
    from kldtui.workflow.profile import load_profile

    profile = load_profile(path or DEFAULT_PROFILE)  # bad profile: one line, before any screen
    from kldtui.tui.app import run_dashboard

    return int(run_dashboard(profile_path=profile.path, theme=getattr(args, "theme", None)) or 0)
