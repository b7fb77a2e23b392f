"""How much disk a run needs, said before it starts (``kldtui doctor`` and the run's preflight line).

A window's finalized file is ``tokens - 1`` rows of the capture mode's bytes per row (logits mode:
``vocab`` F32 values) plus a small header; its capture chunks hold the same bytes. Chunks are
deleted once the window's finalized file is verified, and capture runs at most one window ahead
of finalize, so the peak is the finalized files plus two windows of chunks (all of them with
``keep_chunks``). In hidden mode a candidate's own LM head the run puts in its folder
(kldtui.stages.candidate_head) is counted too: vocabulary x hidden width BF16 values, ~2.2 GiB for
Kimi K3, exported, or the same model's head reused by a repeat capture, counted as a copy ("0 if
hardlinked": a link is known to hold only once it is made).
"""

from __future__ import annotations

import dataclasses
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
    # hidden mode: the candidate's own LM head the run puts in its folder (CandidateHead.size_bytes)
    head: int = 0
    head_reused: bool = False  # the same model's head, copied or hardlinked (CandidateHead.reused)

    @property
    def kept(self) -> int:
        """What stays on disk after the run: the finalized files and the exported head."""
        return self.finalized + self.head

    @property
    def total(self) -> int:
        return self.kept + self.chunks

    def describe(self) -> str:
        head = f" + {head_words(self.head, self.head_reused)}" if self.head else ""
        return (f"{human_bytes(self.total)} at peak: {plural(self.windows, f'finalized {self.unit}')} "
                f"{human_bytes(self.finalized)} + capture chunks {human_bytes(self.chunks)}{head}")


def head_words(size: int, reused: bool = False) -> str:
    """How a plan line says the head hidden mode puts in a candidate's folder (the run's, each
    campaign candidate's, the leader's repeat's): exported, or the same model's, counted as a copy."""
    how = "a copy of the same model's; 0 if hardlinked" if reused else "exported from its checkpoint"
    return f"the candidate's LM head {human_bytes(size)} ({how})"


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
    return dataclasses.replace(need, finalized=need.finalized + live.finalized,
                               chunks=need.chunks + live.chunks)


def kimi_need(keep_chunks: bool = False) -> DiskNeed:
    return disk_need([KIMI_TOKENS] * KIMI_WINDOWS, KIMI_VOCAB, keep_chunks=keep_chunks)
