"""What every target of ``kldtui convert --to`` is: a :class:`ConvertTarget`, its flags a table of
:class:`TargetFlag`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TargetFlag:
    """One flag of a target, as data: the command builds the parser from it and refuses it, in one
    line, with another target than its own (it would be ignored without a word)."""

    flag: str  # "--start-window"
    help: str  # said after "--to NAME: " (the command adds it)
    default: Any = None  # what the flag holds when not given: given is any other value
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    switch: bool = False  # a flag without a value (store_true; its default is False)

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments that holds it (``start_window``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def arguments(self, target: str) -> dict[str, Any]:
        """``add_argument``'s keywords for this flag of the target ``target``."""
        said = {"help": f"--to {target}: {self.help}", "default": self.default}
        if self.switch:
            return {**said, "action": "store_true"}
        return {**said, "type": self.type, "metavar": self.metavar}


@dataclass(frozen=True)
class ConvertTarget:
    """One value of ``kldtui convert --to``: what it makes of SOURCE, its own flags, and the
    conversion itself. Each target is one module of :mod:`kldtui.cli.convert_targets` holding one
    of these as ``TARGET``."""

    name: str  # the value of --to
    converts: str  # for the command's help: "a suite's reference to llama.cpp's ... base file"
    writes: str  # for --to's help: "write SOURCE's reference as a base file"
    flags: tuple[TargetFlag, ...]  # the target's own flags, in the order --help lists them
    # the exit status; heavy modules are imported inside it
    convert: Callable[[argparse.Namespace], int]
    exclusive: bool = False  # at most one of its flags may be given (argparse says so, exit 2)
