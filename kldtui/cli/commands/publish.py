"""``kldtui publish DIR --repo-id ORG/NAME``: verify a dataset root, write its card, upload it."""

from __future__ import annotations

import argparse

HELP = ("verify a suite with its reference (ref/ logits, or a hidden-state suite with reference-hidden/ and "
        "lm-head/), write the dataset card and upload it to the Hub")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="DIR", help="dataset root: suite-manifest.json, tokens/ and "
                        "ref/; or a hidden-state suite (manifest.json, reference-hidden/, lm-head/, "
                        "checksums.txt)")
    parser.add_argument("--repo-id", required=True, help="dataset repository to create or update, ORG/NAME")
    parser.add_argument("--dry-run", action="store_true",
                        help="verify and print the card and the file list; write and upload nothing")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", default=None, help="branch to upload to (default: main)")
    parser.add_argument("--workers", type=int, default=None, help="files hashed in parallel while verifying")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kldtui.cli.commands.verify import ConsoleProgress, check_workers
    from kldtui.stages.publish import format_file_list, publish

    check_workers(args.workers)
    with ConsoleProgress() as emit:
        result = publish(args.path, args.repo_id, dry_run=args.dry_run, private=args.private,
                         revision=args.revision, workers=args.workers, emit=emit)
    if args.dry_run:
        print(result.card)
        print(f"--- {len(result.files)} files would be uploaded to dataset {args.repo_id}:")
        print(format_file_list(Path(args.path), result.files, result.card))
    else:
        print(f"published {len(result.files)} files: {result.url}")
    return 0
