"""``kldtui convert``: a suite's reference to llama.cpp's KL-divergence base file and back.

    kldtui convert SUITE_DIR --to llama-cpp FILE          # what llama-perplexity --kl-divergence-base writes
    kldtui convert FILE --to suite DIR --model M.gguf      # its chunks as windows, its rows as the reference

Then ``llama-perplexity -m Q.gguf --kl-divergence-base FILE --kl-divergence -c N`` measures a
GGUF against the suite's reference with llama.cpp's own tool (N: the suite's context length).

The targets ``--to`` takes, with their flags and conversions, are in :mod:`kldtui.cli.convert_targets`.
"""

from __future__ import annotations

import argparse

from kldtui.cli.convert_targets import TARGETS


def command_help() -> str:
    """The command's help, a clause per registered target: "convert A (--to a), or B (--to b)"."""
    said = [f"{target.converts} (--to {name})" for name, target in TARGETS.items()]
    return "convert " + (", ".join(said[:-1]) + ", or " if len(said) > 1 else "") + said[-1]


# said once, from the targets registered when the module is imported (all of them: TARGETS is the
# registry's literal, imported above)
HELP = command_help()


def _to_help() -> str:
    """``--to``'s help: each registered target's name and what it writes."""
    return "; ".join(f"{name}: {target.writes}" for name, target in TARGETS.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="a suite folder (with ref/), or a base file")
    parser.add_argument("--to", required=True, choices=tuple(TARGETS),
                        help=_to_help())
    parser.add_argument("destination", metavar="DEST", help="the base file, or the suite folder to make")
    for target in TARGETS.values():  # each target's flags, from its table
        add = parser.add_mutually_exclusive_group().add_argument if target.exclusive else parser.add_argument
        for flag in target.flags:
            add(flag.flag, **flag.arguments(target.name))
    parser.add_argument("--force", action="store_true", help="replace an existing destination")


def run(args: argparse.Namespace) -> int:
    from kldtui.errors import BadInput

    # another target's flag would be ignored without a word (--start-window with --to suite)
    for name, target in TARGETS.items():
        given = [flag.flag for flag in target.flags
                 if name != args.to and getattr(args, flag.dest) != flag.default]
        if given:
            raise BadInput(f"{', '.join(given)}: for --to {name}, not --to {args.to}; leave "
                           f"{'it' if len(given) == 1 else 'them'} out")
    return TARGETS[args.to].convert(args)
