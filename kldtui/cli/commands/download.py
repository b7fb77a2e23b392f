"""``kldtui download REPO_ID --local-dir DIR``: fetch the reference suite from the Hub, then verify it.

A logits suite (``ref/``) is fetched for a window range, optionally only some domains' windows
(``--stratum``); a hidden-state suite (hidden states and
an LM head, docs/FORMATS.md) for a selection of contexts: a range, a partition, the sentinels or
the others, strata, and on request the sentinel repeat runs. Nothing outside the selection is
fetched.
"""

from __future__ import annotations

import argparse

HELP = "fetch the reference suite (dataset repository) from the Hugging Face Hub, then verify every hash"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kldtui.formats.fidelity_names import CONTEXT_FILTERS

    parser.add_argument("repo_id", metavar="REPO_ID",
                        help="dataset repository, e.g. festr2/kimi-k3-full-mxfp4-kld-reference-32x2048")
    parser.add_argument("--local-dir", required=True, help="folder that holds (or will hold) the suite")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    parser.add_argument("--start-window", "--start-context", dest="start_window", type=int, default=0,
                        help="first window (hidden-state suite: context) whose files are needed")
    parser.add_argument("--stop-window", "--stop-context", dest="stop_window", type=int, default=None,
                        help="fetch files of windows (contexts) before this one only (default: all)")
    parser.add_argument("--context-filter", choices=CONTEXT_FILTERS, default="all",
                        help="a hidden-state suite: only the analysis or qualification partition, the "
                             "sentinels or the others")
    parser.add_argument("--stratum", action="append", default=[], metavar="NAME",
                        help="only windows of this domain (a logits suite) or contexts of this allocation "
                             "stratum (a hidden-state suite); repeatable")
    parser.add_argument("--sentinel-runs", action="store_true",
                        help="a hidden-state suite: also the sentinel repeat runs (hidden and live logits) "
                             "of the selected sentinel contexts (large: live logits are full-vocabulary)")
    parser.add_argument("--reverify", action="store_true",
                        help="hash every local file again, even those unchanged since they were verified")
    parser.add_argument("--workers", type=int, default=None, help="files fetched / hashed in parallel")


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.folder_lock import hold
    from kldtui.formats.fidelity import ContextFilter
    from kldtui.formats.fidelity_names import parse_strata
    from kldtui.stages.reference import check_repo_id
    from kldtui.stages.reference_hidden import ensure_suite
    from kldtui.workspace import Workspace

    check_repo_id(args.repo_id)  # before any output
    selection = ContextFilter(args.context_filter, parse_strata(args.stratum, "--stratum"), args.start_window,
                              args.stop_window)
    workspace = Workspace.for_suite(args.local_dir)
    with hold([workspace.suite_dir], what="--local-dir"), ConsoleProgress() as emit:
        ref = ensure_suite(args.repo_id, workspace.suite_dir, revision=args.revision, selection=selection,
                           sentinel_runs=args.sentinel_runs, reverify=args.reverify, workers=args.workers,
                           emit=emit)
    print(ref.summary_line())
    return 0
