"""``kldtui export-head``: export a checkpoint's LM head for hidden-state replay (docs/PRODUCING.md).

Reads ``model.safetensors.index.json`` (or the single ``model.safetensors``, or a ``.safetensors``
file) to find the head tensor (``lm_head.weight``, ``language_model.lm_head.weight``, ...; the
input embedding when the config ties word embeddings), copies it without loading the model into
``--output/weight.safetensors`` (BF16) with ``manifest.json`` (raw and file SHA-256), never
overwriting (:mod:`kldtui.stages.export_head`).
"""

from __future__ import annotations

import argparse

from kldtui.cli.output import OutputOptions, add_output_arguments

HELP = "export a checkpoint's LM head (lm-head/weight.safetensors + manifest.json) for hidden-state replay"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="the checkpoint folder (model.safetensors.index.json or model.safetensors, "
                        "config.json) or one .safetensors file")
    parser.add_argument("--output", required=True,
                        help="the folder to write (new or empty), e.g. SUITE/lm-head")
    parser.add_argument("--tensor", default=None,
                        help="the head tensor's name in the checkpoint (default: found from the index and "
                        "config: lm_head.weight, language_model.lm_head.weight, or the tied input embedding)")
    parser.add_argument("--expect-raw-sha256", default=None, metavar="HEX",
                        help="the SHA-256 the head's raw BF16 bytes must have (a published suite's "
                        "lm_head.raw_tensor_sha256); nothing is kept otherwise")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.run import run_batch_job
    from kldtui.events import Cancel, EventSink
    from kldtui.stages.export_head import export_head

    def job(emit: EventSink, cancel: Cancel) -> object:
        return export_head(args.checkpoint, args.output, tensor=args.tensor,
                           expect_raw_sha256=args.expect_raw_sha256, emit=emit)

    return run_batch_job(job, OutputOptions.from_args(args))
