"""The replay's choices without NumPy (the CLI and the profile read them at start-up):
how replayed logits are rounded and how many vocabulary rows of the head go into one product
(docs/REPLAY.md; the arithmetic itself is :mod:`kldtui.metrics.replay`)."""

from __future__ import annotations

OUTPUTS = ("bf16", "f32")  # how replayed logits are rounded: BF16 (the model's head, the default) or FP32
DEFAULT_OUTPUT = "bf16"
DEFAULT_CHUNK = 10240  # vocabulary rows of the head per GEMM (the published default)


def check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise ValueError(f"replay output {output!r}: choose from {', '.join(OUTPUTS)}")
    return output


__all__ = ["DEFAULT_CHUNK", "DEFAULT_OUTPUT", "OUTPUTS", "check_output"]
