"""``kldtui convert``: a suite's reference to llama.cpp's KL-divergence base file and back.

    kldtui convert SUITE_DIR --to llama-cpp FILE          # what llama-perplexity --kl-divergence-base writes
    kldtui convert FILE --to suite DIR --model M.gguf      # its chunks as windows, its rows as the reference

Then ``llama-perplexity -m Q.gguf --kl-divergence-base FILE --kl-divergence -c N`` measures a
GGUF against the suite's reference with llama.cpp's own tool (N: the suite's context length).
"""

from __future__ import annotations

import argparse
import sys

HELP = ("convert a suite's reference to llama.cpp's KL-divergence base file (--to llama-cpp), or such a "
        "file to a kldtui suite (--to suite)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="a suite folder (with ref/), or a base file")
    parser.add_argument("--to", required=True, choices=("llama-cpp", "suite"),
                        help="llama-cpp: write SOURCE's reference as a base file; suite: write the base "
                             "file SOURCE as a suite folder")
    parser.add_argument("destination", metavar="DEST", help="the base file, or the suite folder to make")
    parser.add_argument("--reference-dir", default=None,
                        help="--to llama-cpp: the reference logits folder (default: SUITE_DIR/ref)")
    parser.add_argument("--start-window", type=int, default=0,
                        help="--to llama-cpp: first window (a hidden-state suite: context)")
    parser.add_argument("--stop-window", type=int, default=None,
                        help="--to llama-cpp: stop before this window (context)")
    bos = parser.add_mutually_exclusive_group()
    bos.add_argument("--model", default=None, metavar="GGUF",
                     help="--to suite: the GGUF the file was made with; its BOS setting says what "
                          "llama.cpp put at each chunk's first position")
    bos.add_argument("--bos", type=int, default=None, metavar="ID",
                     help="--to suite: llama.cpp replaced each chunk's first token by this BOS id")
    bos.add_argument("--no-bos", action="store_true",
                     help="--to suite: the model adds no BOS (chunks were evaluated as stored)")
    parser.add_argument("--force", action="store_true", help="replace an existing destination")


def run(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.errors import BadInput

    if args.to == "llama-cpp":
        if args.model or args.bos is not None or args.no_bos:
            raise BadInput("--model, --bos and --no-bos are for --to suite (the base file is written "
                           "from the suite's tokens as they are)")
        from kldtui.stages.convert import export_llama_cpp

        with ConsoleProgress() as progress:  # windows written, on stderr
            result = export_llama_cpp(args.source, args.destination, reference_dir=args.reference_dir,
                                      start_window=args.start_window, stop_window=args.stop_window,
                                      force=args.force, emit=progress)
        for line in result.lines():
            print(line)
        # OMP_WAIT_POLICY=PASSIVE: llama-perplexity's last lines (its Mean KLD) are often lost at
        # exit when ggml's spinning OpenMP threads starve its logging thread (docs/FORMATS.md)
        print(f"next: OMP_WAIT_POLICY=PASSIVE llama-perplexity -m MODEL.gguf --kl-divergence-base "
              f"{result.path} --kl-divergence -c {result.n_ctx} -b {result.n_ctx} -ctk f32 -ctv f32 -fa off")
        return 0
    from kldtui.stages.convert import bos_choice, import_llama_cpp

    bos = bos_choice(model=args.model, bos=args.bos, no_bos=args.no_bos)
    with ConsoleProgress() as progress:
        result_in = import_llama_cpp(args.source, args.destination, bos=bos, force=args.force, emit=progress)
    for line in result_in.lines():
        print(line)
    sys.stdout.flush()
    return 0
