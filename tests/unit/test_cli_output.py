"""The batch/output flags are declared once (kldtui/cli/output.py): every command that runs a job
headless offers the same ones with the same meaning, and they reach the reporter as OutputOptions."""

from __future__ import annotations

import pytest

from kldtui.cli.main import build_parser
from kldtui.cli.output import OutputOptions
from kldtui.cli.parser import Parser, arguments, commands

HEADLESS = ("capture", "compare", "finalize", "serve")  # always headless
DASHBOARD = ("run", "demo")  # a dashboard unless --batch


def _subparsers() -> dict[str, Parser]:
    return {c.name: c.parser for c in commands(build_parser())}


def _flags(parser: Parser) -> set[str]:
    return {opt for a in arguments(parser) for opt in a.option_strings}


def test_every_headless_command_has_the_same_output_flags() -> None:
    subs = _subparsers()
    for name in HEADLESS + DASHBOARD:
        assert {"--jsonl", "--plain", "--interval"} <= _flags(subs[name]), name
    for name in DASHBOARD:
        assert {"--batch", "--server-log"} <= _flags(subs[name]), name
    for name in HEADLESS:
        assert "--batch" not in _flags(subs[name]), name


def test_flags_become_typed_options() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "--batch", "--jsonl", "--interval", "0.5", "--server-log"])
    assert OutputOptions.from_args(args) == OutputOptions(jsonl=True, interval=0.5, server_log=True)
    args = parser.parse_args(["compare", "--reference-dir", "r", "--candidate-dir", "c", "--suite-manifest",
                              "s", "--output", "o", "--plain"])
    assert OutputOptions.from_args(args) == OutputOptions(plain=True)  # no --server-log here: off


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_interval_is_refused_by_the_parser(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["demo", "--batch", "--interval", value])
    assert exc.value.code == 2
    assert "--interval" in capsys.readouterr().err
