"""The capture hook as a source patch: ``patches/vllm-kld-capture.patch`` for a vLLM checkout.

The patch (made against the vLLM 0.32.0 sources) makes the V1 runner's
``_get_prompt_logprobs_dict`` and the V2 ``PromptLogprobsWorker.compute_prompt_logprobs`` call
kldtui (:func:`kldtui.hook.vllm_plugin.save_chunk` / :class:`kldtui.hook.vllm_plugin.V2BatchCapture`,
both writing through :func:`kldtui.formats.chunks.write_chunk`) at the same points the plugin hooks, and
sets ``KLDTUI_CAPTURE_PATCHED = True`` in both modules so the plugin stands aside.

:func:`patch_status` dry-runs the patch (forward and reverse); :func:`apply_patch` applies it
only after a clean dry run, so a checkout is never left half-patched. Both use the ``patch``
program (or ``git apply`` where ``patch`` is missing) through argument lists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kldtui import settings
from kldtui.errors import BadInput, KldError

PATCH_NAME = "vllm-kld-capture.patch"
PATCHED_FILES = ("vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/gpu/sample/prompt_logprob.py")
PATCH_MARKER = "KLDTUI_CAPTURE_PATCHED = True"

State = Literal["applies", "applied", "conflicts"]


@dataclass(frozen=True)
class PatchStatus:
    state: State
    detail: str


def patch_file() -> Path:
    """The shipped patch: inside the package (wheel) or at the repository root (checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "patches" / PATCH_NAME, here.parent.parent / "patches" / PATCH_NAME):
        if candidate.is_file():
            return candidate
    raise KldError(f"{PATCH_NAME} is not installed with kldtui (looked in {here / 'patches'} and "
                   f"{here.parent.parent / 'patches'}); reinstall kldtui")


def _check_source(vllm_src: Path) -> None:
    if not vllm_src.is_dir():
        raise BadInput(f"{vllm_src}: not a folder; pass --vllm-src the root of a vLLM source "
                       "checkout (the folder that holds vllm/)")
    missing = [f for f in PATCHED_FILES if not (vllm_src / f).is_file()]
    if missing:
        raise BadInput(f"{vllm_src}: {missing[0]} not found; pass --vllm-src the root of a vLLM "
                       "source checkout (the folder that holds vllm/)")


def _tool_args(vllm_src: Path, patch: Path, *, reverse: bool, dry_run: bool) -> list[str]:
    if shutil.which("patch"):
        args = ["patch", "-p1", "--batch", "--fuzz=0", "--forward" if not reverse else "--reverse",
                "--no-backup-if-mismatch", "-r", "-", "-d", str(vllm_src), "-i", str(patch)]
        if dry_run:
            args.insert(1, "--dry-run")
        return args
    if shutil.which("git"):
        args = ["git", "apply", "-p1", f"--directory={vllm_src}", "--unsafe-paths"]
        if reverse:
            args.append("--reverse")
        if dry_run:
            args.append("--check")
        return [*args, str(patch)]
    raise KldError("neither `patch` nor `git` is installed; install one to apply "
                   f"{PATCH_NAME}")


def _run(args: list[str], cwd: Path) -> tuple[bool, str]:
    env = settings.child_environment({"LC_ALL": "C"})  # messages parsed in English
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    out = " ".join((proc.stdout + " " + proc.stderr).split())
    return proc.returncode == 0, out


def patch_status(vllm_src: str | os.PathLike[str], patch: Path | None = None) -> PatchStatus:
    """Dry-run: does the patch apply, is it already applied, or does it conflict?"""
    src = Path(vllm_src).resolve()
    _check_source(src)
    patch = patch or patch_file()
    ok, out = _run(_tool_args(src, patch, reverse=False, dry_run=True), src)
    if ok:
        return PatchStatus("applies", f"{patch.name} applies cleanly to {src}")
    rev_ok, _ = _run(_tool_args(src, patch, reverse=True, dry_run=True), src)
    if rev_ok and all(PATCH_MARKER in (src / f).read_text(encoding="utf-8", errors="replace")
                      for f in PATCHED_FILES):
        return PatchStatus("applied", f"{patch.name} is already applied in {src}")
    return PatchStatus("conflicts", f"{patch.name} does not apply to {src}: {out[:400]}")


def apply_patch(vllm_src: str | os.PathLike[str], patch: Path | None = None) -> PatchStatus:
    """Apply the patch after a clean dry run; a no-op when it is already applied.

    Raises :class:`KldError` when it conflicts (nothing is changed then).
    """
    src = Path(vllm_src).resolve()
    patch = patch or patch_file()
    status = patch_status(src, patch)
    if status.state == "applied":
        return status
    if status.state == "conflicts":
        raise KldError(status.detail + "; nothing was changed (the patch is made for vLLM 0.32)")
    ok, out = _run(_tool_args(src, patch, reverse=False, dry_run=False), src)
    if not ok:
        raise KldError(f"applying {patch.name} to {src} failed after a clean dry run: {out[:400]}")
    return PatchStatus("applied", f"{patch.name} applied to {src}")


def source_is_patched(vllm_src: str | os.PathLike[str]) -> bool:
    """Whether both hooked modules under ``vllm_src`` carry the patch's marker."""
    src = Path(vllm_src)
    try:
        return all(PATCH_MARKER in (src / f).read_text(encoding="utf-8", errors="replace")
                   for f in PATCHED_FILES)
    except OSError:
        return False
