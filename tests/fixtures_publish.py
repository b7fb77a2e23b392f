"""What a published dataset card must say, checked against the folder it describes (the publish
tests and the real-vLLM producer test)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kldtui.formats.suite import load_logits_manifest, load_suite
from kldtui.text import human_bytes


def check_card_figures(card: str, root: Path) -> None:
    """Every figure the card states equals what the folder's manifests and files say."""
    suite = load_suite(root)
    ref = load_logits_manifest(root / "ref")
    n = len(ref.entries)
    rows = suite.context_length - 1
    payload = sum((root / "ref" / e.file).stat().st_size for e in ref.entries.values())
    assert f"- {n} independent {suite.context_length}-token windows" in card
    assert f"- {n * rows:,} scored next-token positions ({n} * {rows})" in card
    assert f"- vocabulary size {ref.vocab_size:,}" in card
    assert f"- one [{rows}, {ref.vocab_size}] F32 safetensors tensor per window" in card
    assert "- tensor key: logits" in card
    assert f"- total logit payload: {payload:,} bytes ({human_bytes(payload)})" in card
    assert f"- suite token hash: {suite.suite_token_hash_sha256}" in card
    noise = root / "repeat-noise-window000.json"
    if noise.is_file():
        doc = json.loads(noise.read_text())
        kl = float(re.search(r"KL\(first \|\| repeat\) = ([0-9.e-]+)", card).group(1))  # type: ignore[union-attr]
        assert kl == pytest.approx(doc["kl_reference_to_candidate"]["mean"], rel=1e-7)
        # six significant digits (kldtui.text.precise_number), in exponent form where tiny, then " %"
        top1 = float(re.search(r"top-1 agreement = ([-+0-9.e]+) ?%", card).group(1))  # type: ignore[union-attr]
        assert top1 == pytest.approx(doc["top1_agreement"] * 100, rel=1e-5, abs=1e-300)
