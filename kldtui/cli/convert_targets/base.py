"""What every target of ``kldtui convert --to`` is: a :class:`ConvertTarget`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConvertTarget:
    """One value of ``kldtui convert --to``: what it makes of SOURCE, its own flags, and the
    conversion itself. Each target is one module of :mod:`kldtui.cli.convert_targets` holding one
    of these as ``TARGET``."""

    name: str  # the value of --to
    converts: str  # for the command's help: "a suite's reference to llama.cpp's ... base file"
    writes: str  # for --to's help: "write SOURCE's reference as a base file"
    # the target's own flags (their help starts "--to NAME:"); heavy modules are imported in convert
    add_arguments: Callable[[argparse.ArgumentParser], None]
    convert: Callable[[argparse.Namespace], int]  # the exit status
