"""What the benchmarks sample: the machine (CPU model, vector features, load), disk used by a folder,
/proc figures of a process.

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


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages, as text."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


CPU_FEATURES = ("sse2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512_bf16", "amx_bf16", "amx_tile",
                "asimd", "sve", "sve2", "bf16")


def cpu_summary(features: tuple[str, ...] = CPU_FEATURES) -> str:
    """CPU model, architecture, core count and which of ``features`` the CPU has (the vector and
    matrix units that decide the kernels' and the GEMM's speed)."""
    import platform

    model, flags = "", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key in ("model name", "CPU part") and not model:
                model = val.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(val.split())
    except OSError:
        pass
    feats = " ".join(f for f in features if f in flags) or "unknown"
    name = model or platform.processor() or "unknown"
    return f"{name} ({platform.machine()}, {os.cpu_count()} cpus; {feats})"
