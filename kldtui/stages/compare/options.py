"""What a comparison is asked to do: the window range, bootstrap, direction, backend and mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kldtui.capture_modes import CaptureMode
    from kldtui.formats.model_size import ModelSize


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
    # what the candidate folder holds (kldtui.capture_modes); None: the mode whose finalized
    # manifest is there (logits first)
    mode: CaptureMode | None = None
    # the candidate's size and bits per weight, written into the report (kldtui.formats.model_size)
    candidate_size: ModelSize | None = None


__all__ = ["CompareOptions"]
