"""kldtui.cli.parser: the one way to list a parser's arguments and commands. Its Parser keeps what is
declared on it (on the parser, in a group, in a mutually exclusive group, a command), so nothing
reads argparse's private ``_actions``; this module alone does, to check that the listing misses
nothing argparse holds."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kldtui.cli.main import build_parser
from kldtui.cli.parser import Parser, arguments, commands

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> tuple[Parser, dict[str, argparse.Action]]:
    parser = Parser(prog="p")
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child", help="a command")
    made = {"--top": parser.add_argument("--top"),
            "place": parser.add_argument("place", nargs="?", choices=("a", "b"))}
    group = parser.add_argument_group("grouped")
    made["--in-group"] = group.add_argument("--in-group", action="store_true")
    inner = group.add_mutually_exclusive_group()
    made["--x"] = inner.add_argument("--x", action="store_true")
    either = parser.add_mutually_exclusive_group()
    made["--y"] = either.add_argument("--y", action="store_true")
    made["--z"] = either.add_argument("--z", action="store_true")
    made["--child-flag"] = child.add_argument("--child-flag", choices=("1", "2"))
    return parser, made


def test_every_declared_argument_and_command_is_listed_in_order() -> None:
    parser, made = _declared()
    listed = arguments(parser)
    assert [a.option_strings for a in listed[:1]] == [["-h", "--help"]]  # argparse's own, first
    assert listed[1:] == tuple(made[k] for k in ("--top", "place", "--in-group", "--x", "--y", "--z"))
    (child,) = commands(parser)
    assert (child.name, child.help, isinstance(child.parser, Parser)) == ("child", "a command", True)
    assert arguments(child.parser)[1:] == (made["--child-flag"],)
    assert commands(child.parser) == ()


def test_the_groups_still_do_what_argparse_does() -> None:
    parser, _ = _declared()
    assert parser.parse_args(["--in-group", "--y"]).in_group is True
    with pytest.raises(SystemExit):  # the mutually exclusive group is argparse's, refusing both
        parser.parse_args(["--y", "--z"])
    assert parser.parse_args(["child", "--child-flag", "2"]).child_flag == "2"


def test_kldtuis_parsers_list_every_argument_argparse_holds() -> None:
    """The listing against argparse's own record (its private ``_actions``, read here only): every
    command's and kldtui's own, nothing missed, nothing extra, and every command once."""
    parser = build_parser()
    for p in (parser, *(c.parser for c in commands(parser))):
        held = [a for a in p._actions if not isinstance(a, argparse._SubParsersAction)]
        assert list(arguments(p)) == held
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {c.name: c.parser for c in commands(parser)} == dict(choices)


def test_nothing_else_reads_argparses_private_actions() -> None:
    readers = [p.relative_to(ROOT).as_posix()
               for folder in ("kldtui", "tests", "benchmarks") for p in sorted((ROOT / folder).rglob("*.py"))
               if "._actions" in p.read_text(encoding="utf-8") or "_SubParsersAction" in p.read_text(
                   encoding="utf-8")]
    assert readers == ["tests/unit/test_cli_parser.py"]
