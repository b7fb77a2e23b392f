"""What the pipeline benchmarks sample while a run goes: disk used by a folder, /proc figures of a process.

Imported by the scripts next to it (run as ``benchmarks/NAME.py``, this folder is on ``sys.path``).
"""

from __future__ import annotations

import os
from pathlib import Path


def disk_bytes(root: Path) -> int:
    """Bytes the files below ``root`` take on disk (allocated blocks, so sparse files count as written)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def proc_field(pid: int | str, file: str, key: str) -> int:
    """The number after ``key`` in ``/proc/PID/FILE`` (e.g. ``status``/``VmRSS:`` in KiB,
    ``io``/``wchar:`` in bytes); 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/{file}", encoding="ascii") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def rss_kib(pid: int | str) -> int:
    """Resident memory of a process in KiB (0 once it is gone)."""
    return proc_field(pid, "status", "VmRSS:")
