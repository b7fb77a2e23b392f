"""Compare backends: the option values a user may ask for and what each resolves to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.metrics import ckernel

BACKENDS = ("auto", "c", "numpy", "torch", "torch-cpu", "torch-cuda")


def cuda_present() -> bool:
    """Whether torch is installed, an NVIDIA driver is there and torch sees a CUDA device
    (checked in that order: torch is imported only when a driver is there)."""
    if importlib.util.find_spec("torch") is None:
        return False
    if not (Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_backend(backend: str) -> str:
    """``c-kernel``, ``numpy-threads``, ``torch-cpu`` or ``torch-cuda`` for an option value.

    ``auto``: CUDA when torch sees a GPU, else the compiled C kernel (built at first use, see
    :mod:`kldtui.metrics.ckernel`), else NumPy when no C compiler could build it."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown compare backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "auto":
        if cuda_present():
            return "torch-cuda"
        return "c-kernel" if ckernel.available() else "numpy-threads"
    if backend == "c":
        if not ckernel.available():
            raise BadInput(f"backend 'c' asked for but the C kernel could not be built "
                           f"({ckernel.why_not()}); use --backend numpy or --backend auto")
        return "c-kernel"
    if backend == "numpy":
        return "numpy-threads"
    if importlib.util.find_spec("torch") is None:
        raise BadInput(f"backend {backend!r} needs torch, which is not installed; "
                       "use --backend numpy or install kldtui[torch]")
    if backend == "torch":
        return "torch-cuda" if cuda_present() else "torch-cpu"
    if backend == "torch-cuda" and not cuda_present():
        raise BadInput("backend 'torch-cuda' asked for but torch sees no CUDA device; use --backend auto")
    return backend


__all__ = ["BACKENDS", "cuda_present", "resolve_backend"]
