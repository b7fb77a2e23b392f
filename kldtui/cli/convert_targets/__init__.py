"""The targets of ``kldtui convert --to``, keyed by their name: the command's choices, its help
and what it runs all come from :data:`TARGETS` (the choices and ``--to``'s help when the parser is
built, the command's help when its module is imported).

Each target's flags are a table (:class:`~.base.TargetFlag`): the command builds the parser from it,
and refuses, in one line, a flag of another target than ``--to``'s (kldtui.cli.commands.convert): it
would be ignored without a word.

Adding a target: one module beside the others (a :class:`~.base.ConvertTarget` named ``TARGET``,
importing only the standard library at top level, as command modules do) and one line here.
"""

from __future__ import annotations

from kldtui.cli.convert_targets import llama_cpp, suite
from kldtui.cli.convert_targets.base import ConvertTarget

TARGETS: dict[str, ConvertTarget] = {
    llama_cpp.TARGET.name: llama_cpp.TARGET,
    suite.TARGET.name: suite.TARGET,
}

__all__ = ["TARGETS", "ConvertTarget"]
