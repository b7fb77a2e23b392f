"""Real comparison reports of several candidates against one reference, for the exports tests:
a small suite (12 windows, three domains), candidates perturbed at different strengths, each
compared by ``kldtui compare`` (with a given size), so every report field is one compare writes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kldtui.cli.main import main
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from tests.fixtures_compare import make_suite, perturb

# name, perturbation scale, size in bytes (None: no size given)
CANDIDATES: tuple[tuple[str, float, int | None], ...] = (
    ("q8_0", 0.3, 8_540_000_000), ("q4_k_m", 1.0, 4_920_000_000), ("q4_0", 1.03, 4_660_000_000),
    ("q2_k", 3.0, 3_180_000_000))
PARAMETERS = 8_030_000_000


def make_reports(root: Path, candidates: Sequence[tuple[str, float, int | None]] = CANDIDATES, *,
                 windows: int = 12, samples: int = 2000) -> list[Path]:
    """One report per candidate under ``root`` (``root/NAME.json``), in the order given."""
    suite, ref, _, data = make_suite(root / "suite", windows=windows, context=33, vocab=300, seed=5)
    reports = []
    for k, (name, scale, size) in enumerate(candidates):
        rng = np.random.default_rng(100 + k)
        folder = root / name
        written = [write_logits_array(folder, w, perturb(rng, data[w.index][0], 0.01 * scale, 0.3 * scale),
                                      33) for w in suite.windows]
        write_logits_manifest(folder, suite, written, kind="candidate")
        out = root / f"{name}.json"
        size_flags = ([] if size is None else
                      ["--candidate-parameters", str(PARAMETERS), "--candidate-size-bytes", str(size)])
        code = main(["compare", "--suite-manifest", str(root / "suite"), "--reference-dir", str(ref),
                     "--candidate-dir", str(folder), "--output", str(out), "--bootstrap-samples",
                     str(samples), "--plain", *size_flags])
        assert code == 0, name
        reports.append(out)
    return reports
