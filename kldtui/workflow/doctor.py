"""Host checks for ``kldtui doctor``: what each server kind needs (vLLM, the capture hook, the
GPU: kldtui.servers.vllm_probe), the capture folder's disk, the settings in effect.

:func:`collect` returns plain :class:`~kldtui.servers.base.Check` rows; the command prints them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from kldtui import settings
from kldtui.servers.base import Check

__all__ = ["Check", "collect", "format_checks"]


def _disk_check(capture_dir: str | None) -> Check:
    target = Path(capture_dir or settings.CAPTURE_DIR.get() or ".").expanduser()
    probe_path = target
    while not probe_path.exists() and probe_path != probe_path.parent:
        probe_path = probe_path.parent
    free = shutil.disk_usage(probe_path).free
    from kldtui.workflow.diskplan import GIB, kimi_need

    need = kimi_need()
    return Check("capture disk", free >= need.total, f"{free / GIB:.1f} GiB free at {probe_path}; "
                 f"a full 32-window Kimi K3 run needs {need.describe()} (chunks are deleted once "
                 f"their window is finalized; with --keep-chunks "
                 f"{kimi_need(keep_chunks=True).total / GIB:.1f} GiB)", required=False)


def collect(python: str | None = None, capture_dir: str | None = None,
            import_vllm: bool = True) -> list[Check]:
    """Every check, in display order: kldtui, what each server kind needs on this host
    (kldtui.servers: ServerKind.doctor_checks; vLLM and its capture hook), disk, the capture
    variable, the settings in effect."""
    from kldtui import __version__
    from kldtui.servers.registry import KINDS

    checks = [Check("kldtui", True, f"{__version__} at {Path(__file__).resolve().parent.parent} "
                    f"(Python {sys.version.split()[0]})")]
    for kind in KINDS.values():
        checks.extend(kind.doctor_checks(python, import_engine=import_vllm))
    checks.append(_disk_check(capture_dir))
    if (capture_var := settings.CAPTURE_DIR.raw()) is not None:
        checks.append(Check("capture variable", True,
                            f"{settings.CAPTURE_DIR.name}={capture_var} is set in this shell",
                            required=False))
    checks.append(_settings_check())
    return checks


def _settings_check() -> Check:
    """The environment variables kldtui reads (docs/SETTINGS.md) that are set here; a bad value
    fails: the command (or the server) that reads it would stop."""
    shown, problems = settings.in_effect()
    from kldtui import capture_modes

    try:
        capture_modes.server_mode()  # a capture mode's name is the registry's to check
    except settings.SettingError as exc:
        if str(exc) not in problems:  # a value that is not even a name is there already
            problems.append(str(exc))
    shown = [s for s in shown if not s.startswith(settings.CAPTURE_DIR.name + "=")]  # its own line
    if problems:
        return Check("settings", False, "; ".join(problems))
    return Check("settings", True, ("set here: " + ", ".join(shown)) if shown else
                 "none set: the defaults of docs/SETTINGS.md apply", required=False)


def format_checks(checks: list[Check]) -> str:
    lines = []
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = "ok  " if c.ok else ("FAIL" if c.required else "note")
        lines.append(f"[{mark}] {c.name.ljust(width)}  {c.detail}")
    return "\n".join(lines)
