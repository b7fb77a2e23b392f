"""Errors the engine raises on purpose: each carries a one-line message and an exit code.

The CLI prints ``str(err)`` on one line and exits with ``err.exit_code``; it never shows a
traceback for these. Anything else escaping a stage is a bug and is reported as such.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class KldError(Exception):
    """A failure the user can act on. ``exit_code`` 1: the run failed."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        # One line, always: multi-line text would break log files and the status bar.
        super().__init__(" ".join(str(message).split()))


class BadInput(KldError):
    """The input is wrong (a file, a flag, a profile). ``exit_code`` 2; nothing was changed."""

    exit_code = 2


class BadField(BadInput):
    """A field of a file is wrong. The message names the file, the field and the problem, not what
    to do: the loader of that kind of file adds it once for all its fields (:func:`remedy`), as
    only it knows which command wrote the file."""


@contextmanager
def remedy(what_to_do: str) -> Iterator[None]:
    """Inside: a :class:`BadField` leaves as a :class:`BadInput` ending with ``; what_to_do`` (the
    innermost loader's remedy wins; any other error passes unchanged)."""
    try:
        yield
    except BadField as exc:
        raise BadInput(f"{exc}; {what_to_do}") from None


class Interrupted(KldError):
    """The user or a signal stopped the run; state on disk is resumable. ``exit_code`` 130."""

    exit_code = 130


class StageFailed(KldError):
    """A stage ran and failed (server died, request failed, disk full)."""

    exit_code = 1


class DiskFull(StageFailed, OSError):
    """A file could not be written for lack of space (or quota, or a file size limit). Also an
    ``OSError``, so code that tolerates a failed optional write (a cache) keeps tolerating it."""

    exit_code = 1


DISK_FULL_ERRNOS = (28, 122, 27)  # ENOSPC, EDQUOT, EFBIG
