"""Sub-commands. Each module defines ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``;
``HELP`` is a string read when the parser is built (convert's is said from its registered targets
when the module is imported).

Command modules import only the standard library at top level: heavy modules (numpy, torch,
vllm, huggingface_hub, textual) are imported inside ``run`` so ``kldtui --help`` stays fast.
"""

from __future__ import annotations

# name -> module under kldtui.cli.commands (order is the order of ``kldtui --help``)
COMMANDS: dict[str, str] = {
    "run": "run",
    "demo": "demo",
    "download": "download",
    "prepare": "prepare",
    "verify": "verify",
    "publish": "publish",
    "export-head": "export_head",
    "convert": "convert",
    "serve": "serve",
    "capture": "capture",
    "finalize": "finalize",
    "compare": "compare",
    "view": "view",
    "diff": "diff",
    "noise": "noise",
    "leaderboard": "leaderboard",
    "plot": "plot",
    "plan": "plan",
    "patch": "patch",
    "doctor": "doctor",
    "completion": "completion",
}
