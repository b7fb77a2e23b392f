"""Process helpers shared by tests that check servers are really gone."""

from __future__ import annotations

from pathlib import Path


def pid_dead(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper (the container's PID 1 may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"
