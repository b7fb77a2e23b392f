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


def _help() -> str:
    """The command's help, a clause per target: "convert A (--to a), or B (--to b)"."""
    said = [f"{target.converts} (--to {name})" for name, target in TARGETS.items()]
    return "convert " + (", ".join(said[:-1]) + ", or " if len(said) > 1 else "") + said[-1]


def __getattr__(name: str) -> str:
    """``HELP``, the command's help, said when the parser is built (kldtui.cli.main reads it), from
    the targets registered then: importing this module or a target builds nothing."""
    if name == "HELP":
        return _help()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _to_help() -> str:
    """``--to``'s help: each registered target's name and what it writes."""
    return "; ".join(f"{name}: {target.writes}" for name, target in TARGETS.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="a suite folder (with ref/), or a base file")
    parser.add_argument("--to", required=True, choices=tuple(TARGETS),
                        help=_to_help())
    parser.add_argument("destination", metavar="DEST", help="the base file, or the suite folder to make")
    owned: dict[str, list[tuple[str, str, object]]] = {}
    for name, target in TARGETS.items():
        before = len(parser._actions)  # the actions each target adds are its own flags
        target.add_arguments(parser)
        owned[name] = [(action.option_strings[0], action.dest, action.default)
                       for action in parser._actions[before:]]
    parser.add_argument("--force", action="store_true", help="replace an existing destination")
    parser.set_defaults(target_flags=owned)


def run(args: argparse.Namespace) -> int:
    from kldtui.errors import BadInput

    # another target's flag would be ignored without a word (--start-window with --to suite)
    for name, flags in args.target_flags.items():
        given = [flag for flag, dest, default in flags if name != args.to and getattr(args, dest) != default]
        if given:
            raise BadInput(f"{', '.join(given)}: for --to {name}, not --to {args.to}; leave "
                           f"{'it' if len(given) == 1 else 'them'} out")
    return TARGETS[args.to].convert(args)
