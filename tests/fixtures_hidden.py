"""Candidates of a hidden-state suite (:mod:`tests.fidelity_fixture`): logits folders whose head is the
reference's plus noise, written through kldtui's writers, for the tests that compare them against the
suite's hidden-state reference and read the reports (whose units are contexts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import bf16_to_f32, f32_to_bf16
from tests import fidelity_fixture as fx


def noisy_candidates(f: fx.Fixture, base: Path, scales: dict[str, float], seed: int = 11) -> dict[str, Path]:
    """One logits folder per name under ``base`` (``base / name``): the suite's contexts through the
    reference's head plus Gaussian noise of that scale (BF16-rounded logits), drawn in the order given."""
    suite = load_suite(f.root)
    rng = np.random.default_rng(seed)
    out: dict[str, Path] = {}
    for name, scale in scales.items():
        head = f.head + rng.standard_normal(f.head.shape).astype(np.float32) * scale
        folder = base / name
        written = [write_logits_array(folder, w, bf16_to_f32(f32_to_bf16(
            (f.hidden[w.index].astype(np.float64) @ head.astype(np.float64).T).astype(np.float32))),
            suite.context_length) for w in suite.windows]
        write_logits_manifest(folder, suite, written, kind=name)
        out[name] = folder
    return out
