"""What ``kldtui convert --to`` accepts comes from one registry (kldtui.cli.convert_targets): its
choices, its help and the conversion that runs; a target added there needs no other change."""

from __future__ import annotations

import argparse

import pytest

from kldtui.cli.convert_targets import TARGETS, ConvertTarget
from kldtui.cli.convert_targets.base import TargetFlag
from kldtui.cli.main import build_parser, main
from kldtui.cli.parser import Parser, arguments, commands


def _convert_parser() -> Parser:
    return next(c.parser for c in commands(build_parser()) if c.name == "convert")


def _to(parser: Parser) -> argparse.Action:
    return next(a for a in arguments(parser) if "--to" in a.option_strings)


def test_the_targets_are_llama_cpp_and_suite_with_their_own_flags() -> None:
    assert list(TARGETS) == ["llama-cpp", "suite"]
    parser = _convert_parser()
    assert _to(parser).choices == ("llama-cpp", "suite")
    said = {flag: a.help for a in arguments(parser) for flag in a.option_strings}
    for flag in ("--reference-dir", "--start-window", "--stop-window"):
        assert str(said[flag]).startswith("--to llama-cpp: "), said[flag]
    for flag in ("--model", "--bos", "--no-bos"):
        assert str(said[flag]).startswith("--to suite: "), said[flag]


def test_a_registered_target_is_a_choice_of_convert_to_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, str, bool]] = []

    def convert(args: argparse.Namespace) -> int:
        ran.append((args.source, args.destination, args.loud))
        return 0

    with pytest.raises(SystemExit) as refused:  # argparse: not a choice before it is registered
        main(["convert", "a.kld", "--to", "echo", "b.kld"])
    assert refused.value.code == 2
    loud = TargetFlag("--loud", "say it twice", default=False, switch=True)
    monkeypatch.setitem(TARGETS, "echo", ConvertTarget("echo", "a file to itself", "write SOURCE again",
                                                       (loud,), convert))
    parser = _convert_parser()
    to = _to(parser)
    assert to.choices == ("llama-cpp", "suite", "echo")
    assert "echo: write SOURCE again" in str(to.help)
    assert {flag: a.help for a in arguments(parser) for flag in a.option_strings}["--loud"] == (
        "--to echo: say it twice")  # its table's line, after the target's name
    assert main(["convert", "a.kld", "--to", "echo", "b.kld", "--loud"]) == 0
    assert ran == [("a.kld", "b.kld", True)]


def test_a_targets_table_refuses_its_flags_with_another_target(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The flags each target's table lists are refused with another --to, by that table alone: a
    switch, a value, several at once; a flag given at its default is not "given"."""
    ran: list[str] = []
    flags = (TargetFlag("--loud", "say it twice", default=False, switch=True),
             TargetFlag("--times", "say it so often", default=1, type=int, metavar="N"))
    monkeypatch.setitem(TARGETS, "echo", ConvertTarget("echo", "a file to itself", "write SOURCE again",
                                                       flags, lambda args: ran.append(args.to) or 0))
    assert main(["convert", "a.kld", "--to", "suite", "b", "--loud", "--times", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kldtui: error: --loud, --times: for --to echo, not --to suite; leave them out")
    assert main(["convert", "a.kld", "--to", "llama-cpp", "b.kld", "--times", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kldtui: error: --times: for --to echo, not --to llama-cpp; leave it out")
    assert main(["convert", "a.kld", "--to", "echo", "b.kld", "--times", "1", "--no-bos"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kldtui: error: --no-bos: for --to suite, not --to echo; leave it out")
    assert main(["convert", "a.kld", "--to", "echo", "b.kld", "--times", "1", "--start-window", "0"]) == 0
    assert ran == ["echo"]


def test_an_exclusive_targets_flags_are_one_at_most(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:  # argparse, from the table's exclusive target
        main(["convert", "a.kld", "--to", "suite", "s", "--bos", "1", "--no-bos"])
    assert refused.value.code == 2
    assert "argument --no-bos: not allowed with argument --bos" in capsys.readouterr().err


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
    # the help is said once, when the command's module is imported, from the targets registered
    # then: a target registered before is in the command's line and in kldtui --help's
    assert command.HELP == command.command_help()
    monkeypatch.setitem(TARGETS, "echo", ConvertTarget("echo", "a file to itself", "write SOURCE again",
                                                       (), lambda args: 0))
    monkeypatch.setattr(command, "HELP", command.HELP)  # what the other tests see again afterwards
    importlib.reload(command)
    shown = _convert_help(capsys)
    assert ("convert a suite's reference to llama.cpp's KL-divergence base file (--to llama-cpp), "
            "llama.cpp's base file to a kldtui suite (--to suite), or a file to itself (--to echo)") in shown
    assert "echo: write SOURCE again" in shown
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = " ".join(capsys.readouterr().out.split())
    assert "or a file to itself (--to echo)" in listed  # kldtui --help's line for convert
