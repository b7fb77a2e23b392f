"""``kldtui demo``: the whole pipeline on a tiny built-in suite and model (no GPU, no network)."""

from __future__ import annotations

import argparse
import sys

from kldtui.cli.output import OutputOptions, add_output_arguments

HELP = "the whole pipeline on a tiny built-in suite and model: no GPU and no network needed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default="kldtui-demo",
                        help="where the demo's suite, captures and report go (default ./kldtui-demo); "
                        "run again with the same folder to resume")
    add_output_arguments(parser, batch=True, server_log=True)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--score", action="store_true",
                      help="score mode: the server scores each chunk against the reference and "
                      "saves per-row figures only (no candidate logits on disk); profile "
                      "WORKDIR/kldtui-score.toml")
    mode.add_argument("--hidden", action="store_true",
                      help="the hidden-state workflow: a suite of contexts in source clusters that "
                      "publishes the reference's final hidden states and LM head instead of logits "
                      "(WORKDIR/suite-hidden); the candidates are captured in hidden mode and "
                      "replayed with their own LM head; profile WORKDIR/kldtui-hidden.toml")


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.run import run_pipeline_batch

    # Not on a terminal (a pipe, CI, nohup): the dashboard cannot show, so run headless.
    score, hidden = bool(args.score), bool(args.hidden)
    if not args.batch and sys.stdin.isatty() and sys.stdout.isatty():
        from kldtui.tui.app import run_dashboard

        return int(run_dashboard(demo_workdir=args.workdir, demo_score=score, demo_hidden=hidden,
                                 theme=args.theme) or 0)

    from kldtui.folder_lock import hold
    from kldtui.workflow.demo import prepare_demo

    # held from the suite's first file on: two demos on one new folder would both write it
    with hold([args.workdir], what="--workdir"):
        profile = prepare_demo(args.workdir, score=score, hidden=hidden)
        return run_pipeline_batch(profile, OutputOptions.from_args(args))
