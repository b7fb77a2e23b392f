"""``kldtui run``: the whole pipeline for a profile; ``--batch`` runs it headless.

Also :func:`open_dashboard`, what ``kldtui`` without a sub-command does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.cli.output import OutputOptions, add_output_arguments
from kldtui.workspace import DEFAULT_PROFILE

if TYPE_CHECKING:
    from kldtui.events import Cancel, EventSink
    from kldtui.workflow.profile import Profile

HELP = "run the whole pipeline for a profile (the dashboard, or headless with --batch)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=argparse.SUPPRESS,
                        help=f"profile TOML (default: ./{DEFAULT_PROFILE})")
    add_output_arguments(parser, batch=True, server_log=True)
    parser.add_argument("--keep-chunks", action="store_true",
                        help="keep the capture chunks after each window is finalized and verified "
                        "(default: deleted, so a run needs about one copy of the logits on disk)")


def run_batch_job(job: Callable[[EventSink, Cancel], object], output: OutputOptions,
                  on_force_stop: Callable[[], None] | None = None, profile: Profile | None = None) -> int:
    """Run ``job(emit, cancel)`` headless with the reporter ``output`` asks for; print the result:
    the run state a pipeline job returns (its report and the suite's size), else the report the
    job announced (read from its file); then what to do next (:mod:`kldtui.workflow.next_steps`, as the
    dashboard shows it: a campaign's from its last standings, which the reporter keeps)."""
    from kldtui.cli.batch_reporter import BatchReporter, run_headless
    from kldtui.formats.report import summary_text
    from kldtui.workflow.next_steps import next_steps, report_next_steps
    from kldtui.workflow.state import RunState

    reporter = BatchReporter(sys.stdout, jsonl=output.jsonl, interval=output.interval,
                             server_log=output.server_log, live=sys.stdout.isatty() and not output.plain)
    returned: list[object] = []

    def recorded(emit: EventSink, cancel: Cancel) -> object:
        returned.append(job(emit, cancel))
        return returned[-1]

    code = run_headless(recorded, reporter, on_force_stop=on_force_stop)
    if code != 0 or output.jsonl:
        return code
    state = returned[0] if returned else None
    where = str(profile.path) if profile is not None and profile.path else None
    if isinstance(state, RunState) and state.report is not None and state.report_path is not None:
        print(summary_text(state.report))
        print("\n".join(next_steps(reporter.standings if reporter.standings is not None else state, where)))
    elif reporter.result_path:
        from kldtui.formats.report import load_report

        report = load_report(reporter.result_path)
        print(summary_text(report))
        lines = report_next_steps(reporter.result_path, report.window_range, 0, where, unit=report.unit)
        print("\n".join(lines))
    return code


def run_pipeline_batch(profile: Profile, output: OutputOptions) -> int:
    """Run a profile's whole pipeline (a campaign's candidates one after another) headless; a
    second signal stops its server at once."""
    from kldtui.workflow.campaign import control_for

    holder: dict[str, Any] = {}

    def job(emit: EventSink, cancel: Cancel) -> object:
        holder["p"] = control_for(profile, emit, cancel)
        return holder["p"].run_all()

    def force_stop() -> None:
        if "p" in holder:
            holder["p"].stop_server(reason="interrupted")

    return run_batch_job(job, output, force_stop, profile=profile)


def run(args: argparse.Namespace) -> int:
    if not args.batch:
        return open_dashboard(args)
    from kldtui.workflow.profile import load_profile

    profile = load_profile(args.profile or DEFAULT_PROFILE)
    if args.keep_chunks:
        import dataclasses

        profile = dataclasses.replace(profile, run=dataclasses.replace(profile.run, keep_chunks=True))
    return run_pipeline_batch(profile, OutputOptions.from_args(args))


def open_dashboard(args: argparse.Namespace) -> int:
    """The dashboard for ``--profile`` or ``./kldtui.toml``; a hint and 2 when there is none."""
    path: str | None = args.profile  # the command's --profile, else the one before the command
    if path is None and not Path(DEFAULT_PROFILE).is_file():
        from kldtui.text import kldtui_command

        print(f"kldtui: no ./{DEFAULT_PROFILE} here; pass --profile FILE, or try `{kldtui_command()} demo` "
              "for the whole pipeline on a built-in tiny model (it writes a profile to start from: "
              f"kldtui-demo/{DEFAULT_PROFILE})", file=sys.stderr)
        return 2
    from kldtui.workflow.profile import load_profile

    profile = load_profile(path or DEFAULT_PROFILE)  # bad profile: one line, before any screen
    from kldtui.tui.app import run_dashboard

    return int(run_dashboard(profile_path=profile.path, theme=args.theme) or 0)
