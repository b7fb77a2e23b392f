"""Capture modes: what the server saves per prefill chunk, and everything that follows from it.

One strategy object per mode (:class:`~kldtui.capture_modes.base.CaptureMode`), in a registry
keyed by its name, the value of the profile's ``[capture] mode``, of ``kldtui capture/finalize
--mode`` and of the server's ``KLDTUI_CAPTURE_MODE``:

- ``logits`` (:mod:`kldtui.capture_modes.logits`, the default): the candidate's prompt logits;
- ``score`` (:mod:`kldtui.capture_modes.score`): per-row figures computed in the server;
- ``hidden`` (:mod:`kldtui.capture_modes.hidden`): the final normalized hidden states, replayed
  with the LM head (the published hidden-state layout).

Adding a mode is one module (a :class:`CaptureMode` subclass and its instance) and one line in
:data:`_MODES` below (docs/DEVELOPING.md, "A new capture mode").
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from pathlib import Path

from kldtui import settings
from kldtui.capture_modes.base import (
    MODE_ENV,
    CaptureMode,
    ChunkRows,
    Finalized,
    FinalizeJob,
    ServerFigures,
    ServerIO,
    ServerSink,
    Verify,
)
from kldtui.capture_modes.hidden import HIDDEN
from kldtui.capture_modes.logits import LOGITS
from kldtui.capture_modes.score import SCORE
from kldtui.errors import BadInput

_MODES: dict[str, CaptureMode] = {mode.name: mode for mode in (LOGITS, SCORE, HIDDEN)}
DEFAULT: CaptureMode = LOGITS


def names() -> tuple[str, ...]:
    """Every registered mode's name, in registration order."""
    return tuple(_MODES)


def modes() -> tuple[CaptureMode, ...]:
    return tuple(_MODES.values())


def get(name: str) -> CaptureMode:
    """The mode called ``name`` (KeyError for an unknown name: see :func:`parse` for user input)."""
    return _MODES[name]


def parse(value: object, where: str = "capture mode") -> CaptureMode:
    """A mode from user input (a profile value, a flag); BadInput in one line, naming ``where``
    and the known modes, for anything else."""
    if isinstance(value, CaptureMode):
        return value
    mode = _MODES.get(value) if isinstance(value, str) else None
    if mode is not None:
        return mode
    known = ", ".join(_MODES)
    close = difflib.get_close_matches(str(value), list(_MODES), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise BadInput(f"{where} {value!r} is not one of {known}{hint}")


def flag(value: str) -> CaptureMode:
    """``--mode`` as an argparse ``type``: the mode, or a one-line BadInput (exit 2)."""
    return parse(value, "--mode")


def add_mode_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--mode MODE`` (parsed into the mode; default the default mode), for the commands that
    must know what the server saves (``kldtui capture``, ``kldtui finalize``)."""
    parser.add_argument("--mode", type=flag, default=DEFAULT, metavar="{" + ",".join(_MODES) + "}",
                        help="what the server saves (the server's KLDTUI_CAPTURE_MODE): "
                        + "; ".join(f"{m.name}: {m.summary}" for m in _MODES.values())
                        + f" (default: {DEFAULT.name})")


def server_mode(env: Mapping[str, str] | None = None) -> CaptureMode:
    """A server process's mode, from ``KLDTUI_CAPTURE_MODE`` in ``env`` (default: this process's
    environment; unset: the default mode); :class:`kldtui.settings.SettingError` (exit 2) naming
    the variable for a name no mode has."""
    name = settings.CAPTURE_MODE.get(env)
    if name is None:
        return DEFAULT
    mode = _MODES.get(name)
    if mode is None:
        raise settings.SettingError(f"environment variable {MODE_ENV}={name!r}: not a capture mode; it "
                                    f"takes one of {', '.join(_MODES)} (default: {DEFAULT.name}): fix "
                                    "or unset it")
    return mode


def from_record(value: object) -> CaptureMode | None:
    """The mode a capture record's ``mode`` field names (absent: the mode whose records carry no
    field), None when no registered mode writes that value."""
    for mode in _MODES.values():
        if mode.record_value == value:
            return mode
    return None


def finalized_in(folder: Path) -> CaptureMode | None:
    """The mode whose finalized manifest is in ``folder`` (the default mode's first), or None."""
    for mode in _MODES.values():
        if mode.holds(folder):
            return mode
    return None


__all__ = ["DEFAULT", "HIDDEN", "LOGITS", "MODE_ENV", "SCORE", "CaptureMode", "ChunkRows", "FinalizeJob",
           "Finalized", "ServerFigures", "ServerIO", "ServerSink", "Verify", "add_mode_argument",
           "finalized_in", "flag", "from_record", "get", "modes", "names", "parse", "server_mode"]
