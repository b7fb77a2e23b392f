"""How much disk a run needs, said before it starts (``kldtui doctor`` and the run's preflight line).

A window's finalized file is ``tokens - 1`` rows of the capture mode's bytes per row (logits mode:
``vocab`` F32 values) plus a small header; its capture chunks hold the same bytes. Chunks are
deleted once the window's finalized file is verified, and capture runs at most one window ahead
of finalize, so the peak is the finalized files plus two windows of chunks (all of them with
``keep_chunks``). In hidden mode a candidate's own LM head the run exports into its folder
(kldtui.stages.candidate_head) is counted too: vocabulary x hidden width BF16 values, ~2.2 GiB for
Kimi K3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kldtui.formats.suite import WINDOW_UNIT
from kldtui.text import human_bytes, plural

GIB = 1024**3
HEADER_BYTES = 4096  # safetensors header with metadata, rounded up
# the published Kimi K3 suite: 32 windows of 2,048 tokens, vocabulary 163,840
KIMI_WINDOWS, KIMI_TOKENS, KIMI_VOCAB = 32, 2048, 163840


@dataclass(frozen=True)
class DiskNeed:
    finalized: int  # bytes of finalized files still to write
    chunks: int  # peak bytes of capture chunks on disk at once
    windows: int
    unit: str = WINDOW_UNIT  # what the suite calls them (a hidden-state suite's: context; unit_of)
    # hidden mode: the candidate's own LM head the run exports into its folder (CandidateHead.size_bytes)
    head: int = 0

    @property
    def kept(self) -> int:
        """What stays on disk after the run: the finalized files and the exported head."""
        return self.finalized + self.head

    @property
    def total(self) -> int:
        return self.kept + self.chunks

    def describe(self) -> str:
        head = f" + {head_words(self.head)}" if self.head else ""
        return (f"{self.total / GIB:.1f} GiB at peak: {plural(self.windows, f'finalized {self.unit}')} "
                f"{self.finalized / GIB:.1f} GiB + capture chunks {self.chunks / GIB:.1f} GiB{head}")


def head_words(size: int) -> str:
    """How a plan line says the head hidden mode exports (the run's, each campaign candidate's)."""
    return f"the candidate's LM head {human_bytes(size)} (exported from its checkpoint)"


def window_bytes(num_tokens: int, vocab: int | None = None, *, row_bytes: int | None = None) -> int:
    """A window's rows: ``row_bytes`` each (the capture mode's; default F32 logits, 4 x vocab)."""
    if row_bytes is None:
        if vocab is None:
            raise ValueError("give the vocabulary or the bytes per row")
        row_bytes = vocab * 4
    return max(0, num_tokens - 1) * row_bytes


def disk_need(token_counts: Sequence[int], vocab: int | None = None, *, keep_chunks: bool = False,
              row_bytes: int | None = None, unit: str = WINDOW_UNIT) -> DiskNeed:
    """Peak disk for capturing and finalizing windows of ``token_counts`` tokens each, rows of
    ``row_bytes`` (:meth:`kldtui.capture_modes.CaptureMode.disk_bytes_per_row`; default F32
    logits of ``vocab``)."""
    sizes = [window_bytes(n, vocab, row_bytes=row_bytes) for n in token_counts]
    finalized = sum(s + HEADER_BYTES for s in sizes)
    chunks = sum(sizes) if keep_chunks else sum(sorted(sizes, reverse=True)[:2])
    return DiskNeed(finalized, chunks, len(sizes), unit)


def with_live_logits(need: DiskNeed, live: DiskNeed) -> DiskNeed:
    """``need`` (hidden mode's hidden states) with the replay check's live logits (``live``: the
    sample's F32 logits, captured beside their hidden states): both sets of files, both sets of
    chunks at once at worst; the count stays ``need``'s."""
    return DiskNeed(need.finalized + live.finalized, need.chunks + live.chunks, need.windows, need.unit,
                    need.head)


def kimi_need(keep_chunks: bool = False) -> DiskNeed:
    return disk_need([KIMI_TOKENS] * KIMI_WINDOWS, KIMI_VOCAB, keep_chunks=keep_chunks)
