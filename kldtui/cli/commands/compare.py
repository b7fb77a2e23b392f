"""``kldtui compare``: a candidate's finalized capture (logits, scores or hidden states) against the
reference suite.

Accepts the original comparator's flags.  Either side may be a hidden-state folder (the published
``reference-hidden/`` layout), whose logits are replayed with an LM head (docs/REPLAY.md); either
side may be a logits folder of kldtui's layout or the published live-logits layout, F32 or BF16.
Everything is validated before the first row is compared; the report goes to ``--output``
atomically (nothing is written there unless the run completed) and a summary to the terminal.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kldtui.cli.output import OutputOptions, add_output_arguments

if TYPE_CHECKING:
    from kldtui.formats.model_size import ModelSize

HELP = ("compare a candidate's logits, scores or hidden states with the reference "
        "(KL, JS, top-k, next-token, bootstrap)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reference-dir", required=True,
                        help="reference folder: logits (ref/ with manifest.json) or hidden states "
                             "(reference-hidden/, replayed with --lm-head)")
    parser.add_argument("--candidate-dir", required=True,
                        help="candidate's folder: finalized logits, score-mode scores, published live "
                             "logits, or hidden states (replayed with --candidate-lm-head)")
    parser.add_argument("--suite-manifest", required=True, help="suite-manifest.json (or its folder)")
    parser.add_argument("--output", required=True, metavar="REPORT.json",
                        help="report JSON to write (atomically; the name ends in .json)")
    parser.add_argument("--start-window", "--start-context", dest="start_window", type=int, default=0,
                        metavar="N",
                        help="first window (a hidden-state suite: context) of the range (default 0)")
    parser.add_argument("--stop-window", "--stop-context", dest="stop_window", type=int, default=None,
                        metavar="N", help="window (context) after the last one: the range is [start, stop) "
                                          "(default: all)")
    from kldtui.formats.fidelity_names import CONTEXT_FILTERS
    from kldtui.metrics.replay_spec import DEFAULT_CHUNK, OUTPUTS

    parser.add_argument("--context-filter", choices=CONTEXT_FILTERS, default="all",
                        help="a hidden-state suite's contexts: analysis or qualification partition, "
                             "sentinels or the others (the report names the partition it used)")
    parser.add_argument("--stratum", action="append", default=[], metavar="NAME",
                        help="only contexts of this allocation stratum (repeat for several)")
    parser.add_argument("--lm-head", default=None, metavar="PATH",
                        help="LM head (weight.safetensors or its folder) replaying a hidden-state "
                             "reference (default: the lm-head/ in its folder, as a candidate's capture has, "
                             "else beside it, else the suite's)")
    parser.add_argument("--candidate-lm-head", default=None, metavar="PATH",
                        help="the candidate's own LM head, for a hidden-state candidate (never taken "
                             "from the reference silently)")
    parser.add_argument("--replay-dtype", choices=OUTPUTS, default=None,
                        help="replayed logits rounded to BF16 as a BF16 model's head returns them, or kept "
                             "in FP32 (default: as the hidden-state folder records its model computed, "
                             "else bf16)")
    parser.add_argument("--vocab-chunk", type=int, default=DEFAULT_CHUNK,
                        help=f"vocabulary rows of the head per product (default {DEFAULT_CHUNK})")
    parser.add_argument("--replay-rows", type=int, default=None,
                        help="hidden rows replayed at once (default: 1024 on the CPU, 512 on CUDA)")
    parser.add_argument("--bootstrap-samples", type=int, default=10000, metavar="N",
                        help="resamples of the 95 %% intervals' bootstraps, of windows (a hidden-state "
                             "suite: contexts, and source clusters) (default 10000)")
    parser.add_argument("--bootstrap-seed", type=int, default=1, metavar="SEED",
                        help="seed of the resampling, numpy.random.default_rng(SEED) (default 1)")
    parser.add_argument("--row-block", type=int, default=None,
                        help="rows per block (default: chosen by the backend)")
    parser.add_argument("--reverse", action="store_true", help="also KL(candidate || reference)")
    from kldtui.stages.compare.backends import AUTO, BACKEND_OPTIONS

    parser.add_argument("--backend", default=AUTO, choices=BACKEND_OPTIONS,
                        help="auto: torch-cuda when a GPU is usable, else the C kernel (compiled at "
                             "first use), else numpy threads")
    parser.add_argument("--threads", type=int, default=None, help="worker threads (default: every core)")
    parser.add_argument("--verify-sha256", action="store_true",
                        help="hash every logits file against its manifest first")
    add_size_arguments(parser)
    add_output_arguments(parser)


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_argument_group("candidate size (shown by the leaderboard and its exports)")
    size.add_argument("--candidate-model", metavar="PATH",
                      help="the candidate's weights: a .safetensors or .gguf file or their folder "
                           "(headers only are read)")
    size.add_argument("--candidate-parameters", type=int, metavar="N",
                      help="how many weights the candidate has")
    size.add_argument("--candidate-size-bytes", type=int, metavar="BYTES",
                      help="the candidate's weights' size in bytes")
    size.add_argument("--candidate-bits-per-weight", type=float, metavar="BPW",
                      help="the candidate's bits per weight (8 x bytes / weights)")


def candidate_size(args: argparse.Namespace) -> ModelSize | None:
    """The ModelSize the size flags give (None without them)."""
    from kldtui.errors import BadInput
    from kldtui.formats import model_size

    stated = (args.candidate_parameters, args.candidate_size_bytes, args.candidate_bits_per_weight)
    if args.candidate_model is not None:
        if any(v is not None for v in stated):
            raise BadInput("--candidate-model measures the size; leave out --candidate-parameters, "
                           "--candidate-size-bytes and --candidate-bits-per-weight (or give those alone)")
        return model_size.measure(args.candidate_model)
    if all(v is None for v in stated):
        return None
    return model_size.given(parameters=args.candidate_parameters, size_bytes=args.candidate_size_bytes,
                            bits_per_weight=args.candidate_bits_per_weight, where="--candidate-*")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from kldtui.cli.commands.run import run_batch_job
    from kldtui.errors import BadInput
    from kldtui.events import Cancel, EventSink
    from kldtui.folder_lock import check_json_output, hold
    from kldtui.servers.registry import process_signs
    from kldtui.stages.compare import BackendRequest, CompareOptions, run_compare
    from kldtui.workspace import Workspace

    # the report is written as JSON whatever its name: a name that says otherwise, a folder or a
    # missing folder is refused before anything is read
    output = check_json_output(args.output, "comparison report")
    from kldtui.formats.fidelity_names import parse_strata
    from kldtui.formats.safe_io import check_output

    suite_path = Path(args.suite_manifest)
    check_output(output, [suite_path if suite_path.is_dir() else suite_path.parent, suite_path,
                          args.reference_dir, args.candidate_dir, args.lm_head, args.candidate_lm_head])
    from kldtui import bounds

    bounds.bootstrap_samples(args.bootstrap_samples, "--bootstrap-samples")
    bounds.seed(args.bootstrap_seed, "--bootstrap-seed")
    for name in ("row_block", "threads", "vocab_chunk", "replay_rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise BadInput(f"--{name.replace('_', '-')} {value} is too small")
    options = CompareOptions(start_window=args.start_window, stop_window=args.stop_window,
                             bootstrap_samples=args.bootstrap_samples, bootstrap_seed=args.bootstrap_seed,
                             row_block=args.row_block, reverse=args.reverse,
                             backend=BackendRequest(args.backend, args.threads, server_signs=process_signs()),
                             verify_sha256=args.verify_sha256,
                             candidate_size=candidate_size(args),
                             context_filter=args.context_filter,
                             strata=parse_strata(args.stratum, "--stratum"),
                             lm_head=args.lm_head, candidate_lm_head=args.candidate_lm_head,
                             replay_dtype=args.replay_dtype, vocab_chunk=args.vocab_chunk,
                             replay_rows=args.replay_rows)
    from kldtui.redact import redact_argv

    shown = redact_argv(sys.argv[1:])
    from kldtui.text import shell_arg

    # the command line's own words (an option's dash is its own), recorded in the report and read on
    # other machines: the documented name, not kldtui_command()'s path of this one
    command = "kldtui " + " ".join(shell_arg(a, path=False) for a in shown) if shown else None

    workspace = Workspace.for_compare(args.suite_manifest, args.reference_dir, args.candidate_dir, output)

    def job(emit: EventSink, cancel: Cancel) -> object:
        return run_compare(workspace, emit, cancel, options=options, suite=args.suite_manifest,
                           command=command)

    with hold(files=[output]):  # two compares to one --output: the second exits 2
        return run_batch_job(job, OutputOptions.from_args(args))
