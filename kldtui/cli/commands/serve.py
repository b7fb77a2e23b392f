"""``kldtui serve``: start the profile's candidate server with the capture hook and keep it up.

Prints the server's URL and its capture folder, follows it until Ctrl-C (or SIGTERM/SIGHUP),
then stops its whole process group. Another shell can then ``kldtui capture`` against it.
"""

from __future__ import annotations

import argparse
import sys

HELP = "start the candidate server of a profile (with the capture hook) and keep it running"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=argparse.SUPPRESS, help="profile TOML (default: ./kldtui.toml)")
    parser.add_argument("--capture-dir", default=None,
                        help="VLLM_KLD_CAPTURE_DIR for the server: a fresh (empty or new) folder "
                        "(default: WORKDIR/capture/server-NNN)")
    parser.add_argument("--jsonl", action="store_true", help="one JSON event per line")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between progress lines")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kldtui.cli.commands.run import DEFAULT_PROFILE, run_batch_job
    from kldtui.errors import BadInput
    from kldtui.events import LogLine, Notice
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import load_profile

    profile = load_profile(getattr(args, "profile", None) or DEFAULT_PROFILE)
    if profile.candidate.kind == "attach":
        raise BadInput(f"{profile.where}: [candidate] kind = 'attach' points at a server started "
                       "elsewhere; kldtui serve starts one (use kind = 'vllm' or 'embedded')")
    args.server_log = True  # following the server's log is the point of this command
    holder: dict[str, Pipeline] = {}

    def job(emit, cancel):  # type: ignore[no-untyped-def]
        pipeline = Pipeline(profile, emit, cancel)
        holder["p"] = pipeline
        if args.capture_dir:
            pipeline.server_capture_dir_override = Path(args.capture_dir).resolve()
        try:
            url = pipeline.serve()
            emit(Notice("server", f"serving {profile.candidate.served_model_name} at {url}; capture "
                        f"folder {pipeline.server_capture_dir}; Ctrl-C stops it"))
            server = pipeline.server
            while True:
                dead = server.alive()
                if dead is not None:
                    from kldtui.errors import StageFailed

                    raise StageFailed(dead)
                if cancel.wait(0.5):
                    emit(LogLine("server", f"stopping ({cancel.reason})"))
                    return None
        finally:
            pipeline.stop_server(reason="kldtui serve ended")

    code = run_batch_job(job, args, lambda: holder["p"].stop_server("interrupted") if "p" in holder else None)
    if code == 130:
        print("kldtui: server stopped", file=sys.stderr)
        return 0
    return code
