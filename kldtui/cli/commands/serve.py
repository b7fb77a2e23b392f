"""``kldtui serve``: start the profile's candidate server with the capture hook and keep it up.

Prints the server's URL and its capture folder, follows it until Ctrl-C (or SIGTERM/SIGHUP),
then stops its whole process group. Another shell can then ``kldtui capture`` against it. Before the
server starts, the profile claims its work folder as ``kldtui run`` does (kldtui.workflow.owners.claim:
another profile's run there is refused, one line naming both and ``profiles.json``, exit 2).
The serve stage is :func:`kldtui.stages.serve.run_serve`, the driver the pipeline calls too.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kldtui.cli.output import OutputOptions, add_output_arguments

HELP = "start the candidate server of a profile (with the capture hook) and keep it running"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=argparse.SUPPRESS, help="profile TOML (default: ./kldtui.toml)")
    parser.add_argument("--capture-dir", default=None,
                        help="VLLM_KLD_CAPTURE_DIR for the server: a fresh (empty or new) folder "
                        "(default: WORKDIR/capture/server-NNN)")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from kldtui.cli.commands.run import run_batch_job
    from kldtui.errors import BadInput, StageFailed
    from kldtui.events import Cancel, EventSink, LogLine, Notice
    from kldtui.servers.registry import KINDS, kind_of
    from kldtui.stages.serve import ServerSession, run_serve, start_serve
    from kldtui.workflow.owners import claim
    from kldtui.workflow.profile import load_profile, server_plan
    from kldtui.workspace import DEFAULT_PROFILE

    profile = load_profile(args.profile or DEFAULT_PROFILE)
    kind = kind_of(profile.candidate)
    if not kind.launches:
        launched = " or ".join(repr(name) for name, k in KINDS.items() if k.launches)
        raise BadInput(f"{profile.candidate.label} kind = {kind.name!r} points at a server started "
                       f"elsewhere; kldtui serve starts one (use kind = {launched})")
    problems = kind.problems(profile.candidate)  # before anything is launched, as `kldtui run` does
    if problems:
        raise BadInput(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    # following the server's log is the point of this command
    output = dataclasses.replace(OutputOptions.from_args(args), server_log=True)
    plan = server_plan(profile, Path(args.capture_dir).resolve() if args.capture_dir else None)
    workspace = profile.workspace()
    running: list[ServerSession] = []

    def job(emit: EventSink, cancel: Cancel) -> Any:
        # what the profile writes in its work folder (the server's capture folder, server.log) is another
        # profile's: refused before the server starts, as `kldtui run` is; else recorded as this one's
        claim(profile, workspace, emit, "server")
        try:
            running.append(start_serve(workspace, emit, plan))  # a forced stop reaches it while it loads
            session = run_serve(workspace, emit, cancel, plan, session=running[0])
            emit(Notice("server", f"serving {plan.served_model_name} at {session.url}; capture "
                        f"folder {session.capture_dir}; Ctrl-C stops it"))
            assert session.process is not None
            while True:
                dead = session.process.alive()
                if dead is not None:
                    raise StageFailed(dead)
                if cancel.wait(0.5):
                    emit(LogLine("server", f"stopping ({cancel.reason})", own=True))
                    return None
        finally:
            for s in running:
                s.stop(reason="kldtui serve ended")

    def force_stop() -> None:
        for s in running:
            s.stop("interrupted")

    code = run_batch_job(job, output, force_stop)
    if code == 130:
        print("kldtui: server stopped", file=sys.stderr)
        return 0
    return code
