"""The viewer shows what a hidden-state reference was and its size on disk against the same
contexts as F32 logits, and a hidden-state suite's clustered interval and partition; the batch
summary prints the same lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from kldtui.errors import size_text
from kldtui.formats import fidelity as fid
from kldtui.formats.report import summary_text, write_report
from kldtui.stages.compare import CompareOptions, compare
from kldtui.tui.app import create_app
from tests import fidelity_fixture as fx
from tests.fixtures_tui import settle, static_text, sync

pytest.importorskip("torch")


@sync
async def test_viewer_shows_the_reference_kind_and_size(tmp_path: Path) -> None:
    f = fx.build(tmp_path / "suite", contexts=24)
    # the analysis partition (18 contexts of 12 source clusters), the reference against itself
    report = compare(f.root, f.root / fid.HIDDEN_DIR, f.root / fid.HIDDEN_DIR,
                     CompareOptions(context_filter="analysis", backend="numpy", bootstrap_samples=100,
                                    candidate_lm_head=str(f.root / fid.LM_HEAD_DIR)))
    ref = report.reference
    assert ref is not None and ref.bytes_on_disk and ref.full_logits_bytes
    analysis = [i for i, p in enumerate(f.partitions) if p == "analysis"]
    hidden = sum((f.root / fid.HIDDEN_DIR / f"hidden_{i:04d}.safetensors").stat().st_size for i in analysis)
    head = (f.root / fid.LM_HEAD_DIR / fid.HEAD_FILE).stat().st_size
    assert ref.bytes_on_disk == hidden + head
    assert ref.full_logits_bytes == len(analysis) * (fx.CONTEXT - 1) * fx.VOCAB * 4
    ratio = ref.full_logits_bytes / ref.bytes_on_disk
    times = f"{ratio:.1f}x more" if ratio >= 1 else f"{1 / ratio:.1f}x less"
    expected = (f"reference: hidden (BF16) + LM head, {size_text(ref.bytes_on_disk)} on disk; as F32 logits "
                f"{size_text(ref.full_logits_bytes)} ({times})")
    assert expected in summary_text(report)
    assert (f"{len(analysis)} contexts (analysis partition); mean KL 0.00000 [0.00000, 0.00000] (95%, "
            "source clusters resampled within strata)") in summary_text(report)
    # the sentinels fall in fewer source clusters than an interval needs: no interval, and why
    few = compare(f.root, f.root / fid.HIDDEN_DIR, f.root / "sentinel-live-logits" / "repeat-00",
                  CompareOptions(context_filter="sentinel", backend="numpy", bootstrap_samples=100))
    clusters = few.suite_statistics.kl_source_cluster_bootstrap.cluster_count
    assert clusters is not None and clusters < 8
    mean = few.suite_statistics.kl_stratified_source_cluster_bootstrap.micro.estimate
    assert (f"{few.suite_statistics.contexts} contexts (analysis partition); mean KL {mean:.5f} ({clusters} "
            "source clusters: too few for a 95 % interval, which needs 8)") in summary_text(few)
    path = write_report(tmp_path / "r.json", report)
    app = create_app(reports=[path], config_dir=tmp_path)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(app, pilot)
        text = " ".join(static_text(app, "#result-summary").split())
        assert " ".join(expected.split()) in text
        assert "source clusters resampled within strata" in text
