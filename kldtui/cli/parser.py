"""The command line's parser, which keeps what is declared on it: the one way to list a parser's
arguments and commands (:func:`arguments`, :func:`commands`).

argparse offers no public way to list what a parser holds; reading its private ``_actions`` ties a
caller to its internals. :class:`Parser` instead keeps every argument as it is declared, through
argparse's public methods: ``add_argument`` on the parser or on a group (``add_argument_group``,
``add_mutually_exclusive_group``) returns the argument's ``Action``, and ``add_parser`` on
``add_subparsers`` returns a command's parser. ``kldtui completion`` and the tests list flags and
commands through these two functions.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """A command declared on a parser (``kldtui NAME``): its name, its ``help`` and its parser."""

    name: str
    help: str
    parser: Parser


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that keeps its declared arguments (its own ``-h`` too) and commands;
    a command's parser is a Parser too (argparse makes it of its parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._declared: list[argparse.Action] = []
        self._commands: list[Command] = []
        self._grouping = False  # argparse's own groups (positionals, options) are made in __init__
        super().__init__(*args, **kwargs)
        self._grouping = True

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self._declared.append(action)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        group = super().add_argument_group(*args, **kwargs)
        return _Group(group, self._declared) if self._grouping else group

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> Any:
        return _Group(super().add_mutually_exclusive_group(*args, **kwargs), self._declared)

    def add_subparsers(self, *args: Any, **kwargs: Any) -> Any:
        return _Commands(super().add_subparsers(*args, **kwargs), self._commands)


class _Group:
    """A group of a :class:`Parser` whose arguments the parser keeps; the rest is the group's."""

    def __init__(self, group: Any, declared: list[argparse.Action]) -> None:
        self._group = group
        self._declared = declared

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action: argparse.Action = self._group.add_argument(*args, **kwargs)
        self._declared.append(action)
        return action

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> _Group:
        return _Group(self._group.add_mutually_exclusive_group(*args, **kwargs), self._declared)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


class _Commands:
    """``add_subparsers``' result: the commands it adds are kept by their parent :class:`Parser`."""

    def __init__(self, subparsers: Any, commands: list[Command]) -> None:
        self._subparsers = subparsers
        self._commands = commands

    def add_parser(self, name: str, **kwargs: Any) -> Parser:
        parser = self._subparsers.add_parser(name, **kwargs)
        if not isinstance(parser, Parser):
            raise TypeError(f"command {name!r}: its parser_class must be a kldtui.cli.parser.Parser")
        self._commands.append(Command(name, str(kwargs.get("help") or ""), parser))
        return parser

    def __getattr__(self, name: str) -> Any:
        return getattr(self._subparsers, name)


def arguments(parser: Parser) -> tuple[argparse.Action, ...]:
    """Every argument declared on ``parser``, flags and positionals (its ``-h`` too), in the order
    declared; not its commands (:func:`commands`)."""
    return tuple(parser._declared)


def commands(parser: Parser) -> tuple[Command, ...]:
    """The commands declared on ``parser``, in the order declared."""
    return tuple(parser._commands)
