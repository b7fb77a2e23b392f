"""What ``kldtui convert --to`` accepts comes from one registry (kldtui.cli.convert_targets): its
choices, its help and the conversion that runs; a target added there needs no other change."""

from __future__ import annotations

import argparse

import pytest

from kldtui.cli.convert_targets import TARGETS, ConvertTarget
from kldtui.cli.main import build_parser, main


def _convert_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["convert"]
    return parser


def _to(parser: argparse.ArgumentParser) -> argparse.Action:
    return next(a for a in parser._actions if "--to" in a.option_strings)


def test_the_targets_are_llama_cpp_and_suite_with_their_own_flags() -> None:
    assert list(TARGETS) == ["llama-cpp", "suite"]
    parser = _convert_parser()
    assert _to(parser).choices == ("llama-cpp", "suite")
    said = {flag: a.help for a in parser._actions for flag in a.option_strings}
    for flag in ("--reference-dir", "--start-window", "--stop-window"):
        assert str(said[flag]).startswith("--to llama-cpp: "), said[flag]
    for flag in ("--model", "--bos", "--no-bos"):
        assert str(said[flag]).startswith("--to suite: "), said[flag]


def test_a_registered_target_is_a_choice_of_convert_to_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, str, bool]] = []

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--loud", action="store_true", help="--to echo: say it twice")

    def convert(args: argparse.Namespace) -> int:
        ran.append((args.source, args.destination, args.loud))
        return 0

    with pytest.raises(SystemExit) as refused:  # argparse: not a choice before it is registered
        main(["convert", "a.kld", "--to", "echo", "b.kld"])
    assert refused.value.code == 2
    monkeypatch.setitem(TARGETS, "echo", ConvertTarget("echo", "a file to itself", "write SOURCE again",
                                                       add_arguments, convert))
    parser = _convert_parser()
    to = _to(parser)
    assert to.choices == ("llama-cpp", "suite", "echo")
    assert "echo: write SOURCE again" in str(to.help)
    assert main(["convert", "a.kld", "--to", "echo", "b.kld", "--loud"]) == 0
    assert ran == [("a.kld", "b.kld", True)]


def _convert_help(capsys: pytest.CaptureFixture[str]) -> str:
    """What ``kldtui convert --help`` prints, its lines joined (argparse wraps them to the terminal)."""
    with pytest.raises(SystemExit) as done:
        main(["convert", "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_convert_help_lists_every_registered_target_with_its_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    import kldtui.cli.commands.convert as command

    shown = _convert_help(capsys)
    for name, target in TARGETS.items():
        assert f"{target.converts} (--to {name})" in shown, shown  # the command's line
        assert f"{name}: {target.writes}" in shown, shown  # --to's
    # the help is said when the parser is built, from the targets registered then: a target added
    # after the command was imported is in it, and importing the command again builds nothing
    monkeypatch.setitem(TARGETS, "echo", ConvertTarget("echo", "a file to itself", "write SOURCE again",
                                                       lambda parser: None, lambda args: 0))
    importlib.reload(command)
    assert "HELP" not in vars(command)
    shown = _convert_help(capsys)
    assert ("convert a suite's reference to llama.cpp's KL-divergence base file (--to llama-cpp), "
            "llama.cpp's base file to a kldtui suite (--to suite), or a file to itself (--to echo)") in shown
    assert "echo: write SOURCE again" in shown
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = " ".join(capsys.readouterr().out.split())
    assert "or a file to itself (--to echo)" in listed  # kldtui --help's line for convert
