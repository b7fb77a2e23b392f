"""What a comparison is asked to do: the window range, bootstrap, direction, backend and mode."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompareOptions:
    start_window: int = 0
    stop_window: int | None = None
    bootstrap_samples: int = 10000
    bootstrap_seed: int = 1
    row_block: int | None = None  # rows per block; None: chosen by the backend
    reverse: bool = False
    backend: str = "auto"  # a request: kldtui.stages.compare.backends.BACKEND_OPTIONS
    threads: int | None = None  # worker threads (numpy backend); None: every core
    cuda_device: int | None = None  # torch-cuda: the GPU index (None: the current device)
    verify_sha256: bool = False
    mode: str = "logits"  # "score": the candidate folder holds the server's scores (issue 16)


__all__ = ["CompareOptions"]
