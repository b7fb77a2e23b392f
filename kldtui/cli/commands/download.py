"""``kldtui download REPO_ID --local-dir DIR``: fetch the reference suite from the Hub, then verify it."""

from __future__ import annotations

import argparse

HELP = "fetch the reference suite (dataset repository) from the Hugging Face Hub, then verify every hash"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", metavar="REPO_ID",
                        help="dataset repository, e.g. festr2/kimi-k3-full-mxfp4-kld-reference-32x2048")
    parser.add_argument("--local-dir", required=True, help="folder that holds (or will hold) the suite")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    parser.add_argument("--start-window", type=int, default=0, help="first window whose logits are needed")
    parser.add_argument("--stop-window", type=int, default=None,
                        help="fetch logits of windows before this one only (default: all)")
    parser.add_argument("--reverify", action="store_true",
                        help="hash every local file again, even those unchanged since they were verified")
    parser.add_argument("--workers", type=int, default=None, help="files fetched / hashed in parallel")


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.folder_lock import hold
    from kldtui.stages.reference import check_repo_id, run_reference
    from kldtui.workspace import Workspace

    check_repo_id(args.repo_id)  # before any output
    workspace = Workspace.for_suite(args.local_dir)
    with hold([workspace.suite_dir], what="--local-dir"), ConsoleProgress() as emit:
        ref = run_reference(workspace, emit, repo_id=args.repo_id, revision=args.revision,
                            start_window=args.start_window, stop_window=args.stop_window,
                            reverify=args.reverify, workers=args.workers)
    lo, hi = ref.window_range
    source = "local copy, no network" if ref.offline else f"commit {ref.commit}"
    print(f"reference ready: {ref.root} windows {lo}..{hi - 1} ({source}); "
          f"suite {ref.suite_manifest}, logits {ref.ref_dir}")
    return 0
