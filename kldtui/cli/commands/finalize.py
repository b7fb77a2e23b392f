"""``kldtui finalize``: merge a capture run's chunks into one file per window + manifest.

Reads ``--capture-dir/--run-name/window-NNN-DOMAIN-chunks`` and writes
``--output-dir/logits_NNN.safetensors`` and ``manifest.json`` (the published ``ref/`` layout); in
the capture mode's layout with ``--mode`` (score mode's ``scores_NNN.safetensors``, hidden mode's
``hidden_NNNN.safetensors`` and its replay check's live logits: kldtui.capture_modes).
A finalized file is never overwritten without ``--force``; one that matches is kept, so an
interrupted finalize resumes. A window's chunk folder is deleted once its file is written,
verified and listed in the manifest (one copy of what was captured on disk); ``--keep-chunks`` keeps
them, and so does ``--verify none`` (nothing was checked).
"""

from __future__ import annotations

import argparse

from kldtui import capture_modes
from kldtui.cli.output import OutputOptions, add_output_arguments

HELP = ("merge a capture run's chunks into one file per window (a hidden-state suite: context) and "
        "manifest.json: logits_NNN.safetensors, or with --mode scores_NNN.safetensors (score) or "
        "hidden_NNNN.safetensors and the replay check's live logits (hidden)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite-dir", required=True, help="suite folder (suite-manifest.json, tokens/)")
    parser.add_argument("--capture-dir", required=True, help="folder holding the run folder")
    parser.add_argument("--run-name", required=True, help="name of the capture run")
    parser.add_argument("--output-dir", required=True, help="the finalized folder to write")
    parser.add_argument("--expected-vocab", type=int, default=None,
                        help="vocabulary every chunk must have (default: the first chunk's)")
    parser.add_argument("--start-window", type=int, default=0, metavar="N",
                        help="first window (a hidden-state suite: context) of the range (default 0)")
    parser.add_argument("--stop-window", type=int, default=None, metavar="N",
                        help="window (context) after the last one: the range is [start, stop) "
                             "(default: all)")
    parser.add_argument("--force", action="store_true", help="rewrite already finalized files")
    parser.add_argument("--kind", default="candidate", help="manifest 'kind' (default: candidate)")
    parser.add_argument("--runtime-json", default=None,
                        help="JSON file with the runtime identity (vLLM version, model, arguments) "
                        "to store under the manifest's 'runtime'")
    parser.add_argument("--verify", choices=("sample", "full", "none"), default="sample",
                        help="re-read after writing: header and sample rows (default), full "
                        "re-hash, or nothing")
    parser.add_argument("--keep-chunks", action="store_true",
                        help="keep each window's chunk folder after its file is finalized and verified "
                        "(default: delete it, so what was captured is on disk once)")
    capture_modes.add_mode_argument(parser)
    add_output_arguments(parser)


# What to do about a --runtime-json file kldtui cannot use
RUNTIME_JSON = "give --runtime-json a file holding one JSON object (vLLM version, model, arguments)"


def run(args: argparse.Namespace) -> int:
    import json

    from kldtui.cli.commands.run import run_batch_job
    from kldtui.errors import BadInput
    from kldtui.events import Cancel, EventSink
    from kldtui.formats import untrusted_json
    from kldtui.formats.suite import MANIFEST_LIMIT, load_suite
    from kldtui.stages.finalize import run_finalize
    from kldtui.workspace import Workspace

    runtime = None
    if args.runtime_json:
        # the runtime identity is written into the manifest, so it is bounded as one
        runtime = untrusted_json.read_json(args.runtime_json, what="runtime identity", remedy=RUNTIME_JSON,
                                           limit=MANIFEST_LIMIT)
        if not isinstance(runtime, dict):
            raise BadInput(f"{args.runtime_json}: the runtime identity must be a JSON object; {RUNTIME_JSON}")
        try:  # checked now: the manifest is written after every window (JSON has no NaN/Infinity)
            json.dumps(runtime, allow_nan=False)
        except ValueError:
            raise BadInput(f"{args.runtime_json}: holds NaN or Infinity, which a manifest cannot "
                           "store; replace them with numbers or strings") from None
    suite = load_suite(args.suite_dir)
    suite.check_suite_hash()
    windows = suite.select(args.start_window, args.stop_window)
    workspace = Workspace.for_capture(args.suite_dir, args.capture_dir, args.run_name, args.output_dir)
    if not workspace.run_dir.is_dir():
        raise BadInput(f"{workspace.run_dir}: no such capture run; check --capture-dir and --run-name")

    def job(emit: EventSink, cancel: Cancel) -> object:
        return run_finalize(workspace, emit, cancel, suite=suite, windows=windows, runtime=runtime,
                            force=args.force, kind=args.kind, expected_vocab=args.expected_vocab,
                            verify=args.verify, keep_chunks=args.keep_chunks or args.verify == "none",
                            mode=args.mode)

    from kldtui.folder_lock import hold

    # one finalize per output folder, and none while a capture writes the capture folder (finalize
    # deletes chunks and writes there): `kldtui capture` on it locks that folder too
    with hold([workspace.candidate], what="--output-dir"), hold([workspace.captures], what="--capture-dir"):
        return run_batch_job(job, OutputOptions.from_args(args))
