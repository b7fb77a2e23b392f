"""A fake /proc for the tests of which processes are model servers (kldtui.this_host.gpu_servers):
a folder per pid with its ``cmdline`` and, where given, its ``environ``, NUL-separated as the
kernel writes them."""

from __future__ import annotations

from pathlib import Path


def fake_proc(root: Path, processes: dict[int, list[str]],
              environ: dict[int, dict[str, str]] | None = None) -> Path:
    """``root/proc`` holding each pid's command line (``processes``) and the environments given
    (a pid without one: another user's process, whose environ cannot be read), beside ``self``
    (not a pid)."""
    proc = root / "proc"
    for pid, argv in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    for pid, env in (environ or {}).items():
        pairs = (f"{name}={value}".encode() + b"\0" for name, value in env.items())
        (proc / str(pid) / "environ").write_bytes(b"".join(pairs))
    (proc / "self").mkdir(parents=True, exist_ok=True)
    return proc
