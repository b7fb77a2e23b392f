"""``kldtui convert FILE --to suite DIR``: llama.cpp's KL-divergence base file as a kldtui suite,
its chunks as windows and its rows as the reference (kldtui.stages.convert.import_llama_cpp)."""

from __future__ import annotations

import argparse
import sys

from kldtui.cli.convert_targets.base import ConvertTarget, TargetFlag

NAME = "suite"
# what llama.cpp put at each chunk's first position: one of them (the target is exclusive)
FLAGS = (
    TargetFlag("--model", "the GGUF the file was made with; its BOS setting says what llama.cpp put at "
               "each chunk's first position", metavar="GGUF"),
    TargetFlag("--bos", "llama.cpp replaced each chunk's first token by this BOS id", type=int, metavar="ID"),
    TargetFlag("--no-bos", "the model adds no BOS (chunks were evaluated as stored)", default=False,
               switch=True),
)


def _convert(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.stages.convert import bos_choice, check_suite_destination, import_llama_cpp

    check_suite_destination(args.destination, force=args.force)  # before the GGUF or the file is read
    bos = bos_choice(model=args.model, bos=args.bos, no_bos=args.no_bos)
    with ConsoleProgress() as progress:
        result = import_llama_cpp(args.source, args.destination, bos=bos, force=args.force, emit=progress)
    for line in result.lines():
        print(line)
    sys.stdout.flush()
    return 0


TARGET = ConvertTarget(NAME, "llama.cpp's base file to a kldtui suite",
                       "write the base file SOURCE as a suite folder", FLAGS, _convert, exclusive=True)
