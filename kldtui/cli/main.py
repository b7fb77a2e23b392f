"""The ``kldtui`` command line: a thin dispatcher over :mod:`kldtui.cli.commands`.

Errors the engine raises on purpose (:class:`kldtui.errors.KldError`) become one line on stderr
and their exit code; anything else is reported as an internal error in one line too (set
``KLDTUI_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from types import ModuleType
from typing import NoReturn

from kldtui import __version__, settings, stop_signals
from kldtui.cli.commands import COMMANDS
from kldtui.cli.parser import Parser


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"kldtui.cli.commands.{COMMANDS[name]}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("kldtui.cli.commands."):
            return None  # not built yet
        raise


class _VersionAction(argparse.Action):
    """``--version``, worked out only when asked (it runs git and the C compiler's --version)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        try:
            from kldtui.workflow.doctor import version_text

            text = version_text()
        except Exception as exc:  # noqa: BLE001 - the version itself always prints
            text = f"kldtui {__version__} (build details unavailable: {type(exc).__name__}: {exc})"
        print(text)
        parser.exit()


def build_parser() -> Parser:
    """kldtui's parser and every command's (their arguments and commands listed by
    :func:`kldtui.cli.parser.arguments` and :func:`kldtui.cli.parser.commands`)."""
    parser = Parser(
        prog="kldtui",
        description="Measure how far a quantized LLM's output distribution has moved from a "
        "reference. Without a command: open the dashboard for ./kldtui.toml (or --profile).",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the version, the build it runs from (checkout and commit, or an "
                        "installed package) and the compare kernel's build, and exit")
    parser.add_argument("--profile", help="profile TOML (default: ./kldtui.toml)")
    parser.add_argument("--theme", help="theme for this session (t in the app picks one and remembers it)")
    parser.set_defaults(_module=None)  # no command: the dashboard
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on a closed pipe."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _report_error(message: str) -> None:
    from kldtui.formats.untrusted_json import printable  # a file name may hold an escape sequence

    print(f"kldtui: error: {printable(message)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from kldtui.errors import KldError

    if argv is None:  # the real command line (tests call main([...]) inside their own process)
        stop_signals.stop_like_ctrl_c()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        module = args._module
        if module is None:
            dashboard = _load("run")
            if dashboard is None:
                parser.print_help()
                return 2
            return int(dashboard.open_dashboard(args))
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe is found here, not in the interpreter's last flush
        return code
    except KldError as exc:
        _report_error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _report_error("interrupted")
        return 130
    except BrokenPipeError:
        # the reader of our output stopped early (`kldtui leaderboard ... | head -1`): it read what it
        # wanted, that is no failure; nothing more may reach the closed pipe (not even at exit)
        _drop_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence: one line, never a traceback
        if settings.DEBUG.get_or(True):  # set but unreadable: the user asked for something
            traceback.print_exc()
        _report_error(f"internal error: {type(exc).__name__}: {exc} "
                      "(set KLDTUI_DEBUG=1 for the traceback, and please report it)")
        return 1


def run() -> NoReturn:
    """The ``kldtui`` command (the console script and ``python -m kldtui``): :func:`main` on the
    real command line, then exit with its code; 130 when a stop signal came, even one that
    arrives right at the end, after the work but before the process is gone."""
    code = 130
    try:
        try:
            code = main()
        finally:
            stop_signals.record_only()
    except KeyboardInterrupt:  # the signal came between main's last line and the line above
        stop_signals.record_only()
        code = 130
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    # a signal recorded at any time: one that came after the work, or whose exception was lost
    sys.exit(130 if stop_signals.received() is not None else code)


if __name__ == "__main__":
    run()
