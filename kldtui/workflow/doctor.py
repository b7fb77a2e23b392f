"""Host checks for ``kldtui doctor``: what each server kind needs (vLLM, the capture hook, the
GPU: kldtui.servers.vllm_probe), the capture folder's disk, the compare kernel and its compiler,
torch, whether the Hugging Face Hub answers, the settings in effect; and ``kldtui --version``'s
account of the build.

:func:`collect` returns plain :class:`~kldtui.servers.base.Check` rows; the command prints them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from kldtui import settings
from kldtui.servers.base import Check
from kldtui.text import human_bytes

__all__ = ["Check", "collect", "format_checks", "install_info", "version_text"]


def _disk_check(capture_dir: str | None) -> Check:
    target = Path(capture_dir or settings.CAPTURE_DIR.get() or ".").expanduser()
    probe_path = target
    while not probe_path.exists() and probe_path != probe_path.parent:
        probe_path = probe_path.parent
    free = shutil.disk_usage(probe_path).free
    from kldtui.workflow.diskplan import kimi_need

    need = kimi_need()
    return Check("capture disk", free >= need.total, f"{human_bytes(free)} free at {probe_path}; "
                 f"a full 32-window Kimi K3 run needs {need.describe()} (chunks are deleted once "
                 f"their window is finalized; with --keep-chunks "
                 f"{human_bytes(kimi_need(keep_chunks=True).total)})", required=False)


def collect(python: str | None = None, capture_dir: str | None = None,
            import_vllm: bool = True) -> list[Check]:
    """Every check, in display order: kldtui, what each server kind needs on this host
    (kldtui.servers: ServerKind.doctor_checks; vLLM and its capture hook), disk, the compare kernel
    (built now unless ``import_vllm`` is False, ``--quick``), torch, the Hub, the capture variable,
    the settings in effect."""
    from kldtui import __version__
    from kldtui.servers.registry import KINDS

    checks = [Check("kldtui", True, f"{__version__}, {install_info()}")]
    for kind in KINDS.values():
        checks.extend(kind.doctor_checks(python, import_engine=import_vllm))
    checks.append(_disk_check(capture_dir))
    checks += [_kernel_check(build=import_vllm), _torch_check(import_torch=import_vllm), _hub_check()]
    if (capture_var := settings.CAPTURE_DIR.raw()) is not None:
        checks.append(Check("capture variable", True,
                            f"{settings.CAPTURE_DIR.name}={capture_var} is set in this shell",
                            required=False))
    checks.append(_settings_check())
    return checks


def install_info() -> str:
    """Where this kldtui runs from: a checkout (its commit, and whether it has uncommitted changes)
    or an installed package; the Python."""
    root = Path(__file__).resolve().parent.parent.parent
    where = f"installed at {root / 'kldtui'}"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5)
        if (root / "pyproject.toml").is_file() and head.returncode == 0 and head.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
                                    "--", "kldtui"], capture_output=True, text=True, timeout=5)
            changes = ", with uncommitted changes" if dirty.stdout.strip() else ""
            where = f"checkout {root} at commit {head.stdout.strip()}{changes}"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{where}; Python {sys.version.split()[0]} ({sys.executable})"


def version_text() -> str:
    """``kldtui --version``: the version, the build it runs from and the compare kernel's build
    (without building it)."""
    from kldtui import __version__
    from kldtui.metrics import ckernel

    st = ckernel.status(build=False)
    if st.compiler is None:
        kernel = f"compare kernel: not available ({st.why_not})"
    else:
        state = "built for this CPU" if st.cached else "not built yet (the first compare builds it)"
        kernel = f"compare kernel: {state}, compiler {st.compiler_version or st.compiler}"
        if st.why_not:
            kernel += f" ({st.why_not})"
    return f"kldtui {__version__}\n{install_info()}\n{kernel}"


def _kernel_check(build: bool) -> Check:
    """The compare kernel's compiler and build: the first compare otherwise compiles it silently."""
    from kldtui.metrics import ckernel

    st = ckernel.status(build=build)
    if st.compiler is None:
        return Check("compare kernel", False, f"{st.why_not}: compares use numpy threads (several times "
                     "slower); install gcc or clang (or set CC) for the C kernel", required=False)
    cc = f"{st.compiler} ({st.compiler_version})" if st.compiler_version else st.compiler
    if st.why_not and not st.built and build:
        return Check("compare kernel", False, f"compiler {cc}: {st.why_not}; compares use numpy threads",
                     required=False)
    if not build:
        state = "built for this CPU (cached)" if st.cached else ("not built yet: the first compare "
                                                                "compiles it (a few seconds; kldtui doctor "
                                                                "without --quick builds it now)")
        return Check("compare kernel", True, f"compiler {cc}; {state}", required=False)
    when = "cached" if st.cached else f"built now in {st.build_seconds:.1f} s (the first compare would have)"
    return Check("compare kernel", True, f"C kernel {when}, compiler {cc}, flags {st.flags}; "
                 f"{st.library}", required=False)


def _torch_check(import_torch: bool) -> Check:
    """torch in this Python: the torch-cuda compare backend needs it (imported only without --quick)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return Check("torch", False, "not installed in this Python: compares use the C kernel or numpy "
                     "(the torch-cuda backend needs it: pip install -e 'KLDTUI_CHECKOUT[torch]')",
                     required=False)
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = "version unknown"
    if not import_torch:
        cuda = "CUDA devices not checked (--quick)"
    else:
        try:
            import torch

            gpus = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
        except Exception as exc:  # noqa: BLE001 - a broken torch is this check's finding
            return Check("torch", False, f"torch {version} is installed but does not import: "
                         f"{type(exc).__name__}: {exc}", required=False)
        cuda = (f"{gpus} CUDA device{'s' if gpus != 1 else ''} for the torch-cuda backend" if gpus
                else "no CUDA device: the torch-cuda backend cannot run here")
    return Check("torch", True, f"torch {version} in {sys.executable}; {cuda}", required=False)


def _hub_check() -> Check:
    from kldtui.stages.hub import hub_endpoint, hub_unreachable

    reason = hub_unreachable()
    if reason is None:
        return Check("Hugging Face Hub", True, f"{hub_endpoint()} answers (download, prepare and publish "
                     "can reach it)", required=False)
    return Check("Hugging Face Hub", False, f"{hub_endpoint()} cannot be reached ({reason}): download, "
                 "prepare from Hub sources and publish need it; a complete local suite folder needs no "
                 "network", required=False)


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
