"""Stop signals (SIGINT, SIGTERM, SIGHUP) from the first line of ``kldtui`` until a command installs
its own handlers, and after its work is done.

Until a command takes over, a stop signal raises :class:`SignalStop` wherever the main thread is, as
Ctrl-C does. That exception can be lost: a handler runs between any two bytecodes, and an extension
module being imported may swallow what its own initialisation raised (numpy.random's Cython modules
do: a SIGTERM a few milliseconds into ``kldtui demo --batch`` let the whole demo run and exit 0). So
every stop signal is also recorded here: the batch runner stops at once when it starts and finds
one, the dashboard does not open, and ``kldtui`` exits 130 whatever the command returned.
Standard library only: the bottom layer, asked by the CLI and the dashboard alike.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


class SignalStop(KeyboardInterrupt):
    """A stop signal, caught wherever Ctrl-C is.

    A subclass on purpose: CPython remembers a plain KeyboardInterrupt that escaped any code it ran
    through its PyRun API (some extension modules run their setup that way while being imported) and
    then ends the process by SIGINT (status -2) after main() has returned 130. It checks the exact
    type, so a subclass keeps the documented exit code.
    """


def _install(handler: Callable[[int, FrameType | None], None]) -> None:
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(sig, handler)


def stop_like_ctrl_c() -> None:
    """From now on a stop signal is recorded and raises :class:`SignalStop` (exit 130, the documented
    code, even in the first second)."""
    def stop(signum: int, frame: FrameType | None) -> None:
        _received.append(signum)
        raise SignalStop

    _install(stop)


def record_only() -> None:
    """From now on a stop signal is only recorded: the work is done or being reported, and an
    exception raised while Python shuts down would end the process by the signal (-2) or with a
    traceback instead of 130."""
    def remember(signum: int, frame: FrameType | None) -> None:
        _received.append(signum)

    _install(remember)


def received() -> int | None:
    """The first stop signal recorded in this process, or None."""
    return _received[0] if _received else None


def raise_if_received() -> None:
    """Raise :class:`SignalStop` when a stop signal was recorded (its exception may have been lost)."""
    if _received:
        raise SignalStop
