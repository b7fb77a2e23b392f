"""What a comparison is asked to do: the window (or context) selection, bootstrap, direction,
backend, mode, and for hidden-state sides the heads and the replay's arithmetic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kldtui.metrics.replay_spec import DEFAULT_CHUNK
from kldtui.stages.compare.backends import BackendChoice, BackendRequest

if TYPE_CHECKING:
    from kldtui.capture_modes import CaptureMode
    from kldtui.formats.fidelity import ContextFilter
    from kldtui.formats.model_size import ModelSize
    from kldtui.formats.suite import Suite, WindowSpec


@dataclass
class CompareOptions:
    start_window: int = 0
    stop_window: int | None = None
    bootstrap_samples: int = 10000
    bootstrap_seed: int = 1
    row_block: int | None = None  # rows per block; None: chosen by the backend
    reverse: bool = False
    # the backend, one of two: a request (option, threads, GPU and how the model servers on this
    # host show in /proc: the front end's kinds', kldtui.servers.registry.process_signs), which the
    # engine chooses from and says why; or the choice its caller made and said already (the
    # pipeline, by what else runs on this host), which the engine takes as it is. The default:
    # auto, with the servers' signs not known, so auto takes no GPU
    backend: BackendRequest | BackendChoice = BackendRequest(server_signs=None)
    verify_sha256: bool = False
    # what the candidate folder holds (kldtui.capture_modes); None: the mode whose finalized
    # manifest is there (logits first)
    mode: CaptureMode | None = None
    # the candidate's size and bits per weight, written into the report (kldtui.formats.model_size)
    candidate_size: ModelSize | None = None
    # a hidden-state suite's contexts: the published filter and strata (docs/FORMATS.md)
    context_filter: str = "all"
    strata: tuple[str, ...] = ()
    # hidden-state sides (docs/REPLAY.md): the heads, and the replay's rounding, chunk and rows
    lm_head: str | None = None  # the reference's head (file or folder); None: the suite's lm-head/
    candidate_lm_head: str | None = None  # a hidden-state candidate's own head
    # the replay's rounding (bf16, f32); None: each hidden-state folder's recorded replay_output,
    # else bf16 (the published rule)
    replay_dtype: str | None = None
    vocab_chunk: int = DEFAULT_CHUNK
    replay_rows: int | None = None  # rows replayed at once; None: the backend's (CPU 1024, CUDA 512)

    @property
    def contexts(self) -> ContextFilter:
        from kldtui.formats.fidelity import ContextFilter

        return ContextFilter(self.context_filter, self.strata, self.start_window, self.stop_window)

    def select(self, suite: Suite) -> list[WindowSpec]:
        """The windows (contexts) this comparison covers: the range, then the context filter."""
        return self.contexts.select(suite)


__all__ = ["CompareOptions"]
