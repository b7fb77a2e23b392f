"""The keeper of a launched server's process group (Linux), run as a script by
:class:`kldtui.stages.serve.ServerProcess`: ``python server_keeper.py PGID TERM_WAIT``.

``PR_SET_PDEATHSIG`` takes the server's main process with a killed kldtui, not the rest of its
process group: vLLM's engine core and workers lived on after a ``kill -9`` of kldtui, holding their
memory (and on a GPU host the GPUs the next run needs). The keeper, in a session of its own, reads
its standard input until kldtui writes ``stopped`` (the server was stopped: it ends, touching
nothing) or dies (end of file: killed, ``kill -9`` included, without stopping the server). Then it
sends the group SIGTERM and, ``TERM_WAIT`` seconds later, SIGKILL. Only processes of the server's
own session count as the group (a process group id freed and taken by an unrelated process again
is left alone). Standard library only: it runs as a file, without importing kldtui.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` in the session ``pgid`` leads."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 3 and rest[0] not in ("Z", "X") and int(rest[2]) == pgid and int(rest[3]) == pgid:
            out.append(int(name))
    return out


def main(argv: list[str]) -> int:
    pgid, term_wait = int(argv[0]), float(argv[1])
    if sys.stdin.buffer.read() == b"stopped":
        return 0
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, 5.0)):
        if not members(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait
        while members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
