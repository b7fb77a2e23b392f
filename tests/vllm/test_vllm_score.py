"""Score mode on the real vLLM CPU server (issue 16): one suite, one candidate, captured in both modes.

Reference = the tiny float32 Llama (captured into the suite's ``ref/`` in logits mode), candidate
= its bf16 copy served in float32 arithmetic, run twice with ``kldtui run --batch``: once with
``[capture] mode = "logits"`` (logits to disk, finalize, compare), once with ``mode = "score"``
(the vLLM plugin scores every prefill chunk inside the engine against ``ref/`` and saves only
per-row records; ``KLDTUI_SCORE_KERNEL=torch`` makes it use ``score_block``, the arithmetic a GPU
server runs, instead of the C kernel a CPU server uses by default). The two reports must agree
within score mode's tolerance (tests/fixtures_score.py), row by row too, and the score run must
leave no candidate logits.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures_score import report_differences, row_differences
from tests.fixtures_vllm_chain import (
    build_models,
    capture_reference,
    dump_toml,
    kldtui_run_batch,
    leftover_servers,
    write_chain_suite,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server


@dataclass
class Modes:
    root: Path
    suite: Path
    logits: tuple[Path, Path]  # (profile, workdir)
    score: tuple[Path, Path]


def _profile(root: Path, name: str, model: Path, suite: Path, mode: str) -> tuple[Path, Path]:
    workdir = root / f"work-{name}"
    path = write_profile(root / f"{name}.toml", model=model, dtype="float32", suite_dir=suite,
                         workdir=workdir, run_name=name)
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    doc["compare"]["reverse"] = True
    doc["capture"] = {"mode": mode}
    if mode == "score":  # the device path (score_block), as a GPU server runs it; CPU default: C kernel
        doc["candidate"]["env"]["KLDTUI_SCORE_KERNEL"] = "torch"
    path.write_text(dump_toml(doc), encoding="utf-8")
    return path, workdir


@pytest.fixture(scope="module")
def modes(tmp_path_factory: pytest.TempPathFactory, vllm_version: str) -> Modes:
    root = tmp_path_factory.mktemp("score")
    f32, bf16 = build_models(root / "models")
    suite = write_chain_suite(root / "suite")
    ref_profile, _ = _profile(root, "reference", f32, suite, "logits")
    try:
        capture_reference(ref_profile)
        m = Modes(root, suite, _profile(root, "bf16-logits", bf16, suite, "logits"),
                  _profile(root, "bf16-score", bf16, suite, "score"))
        yield m
    finally:
        left = leftover_servers(root)
        assert left == [], f"servers left running: {left}"


def test_vllm_score_mode_report_equals_logits_mode(modes: Modes) -> None:
    from kldtui import capture_modes
    from kldtui.stages.compare import CompareOptions, Comparer
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import load_profile

    a = kldtui_run_batch(*modes.logits)
    b = kldtui_run_batch(*modes.score)
    assert leftover_servers(modes.root) == []
    assert b["provenance"]["backend"] == "server-scores"
    assert report_differences(a, b) == []
    print(f"vLLM CPU, bf16 weights: mean KL logits mode {a['kl_reference_to_candidate']['mean']:.9g}, "
          f"score mode {b['kl_reference_to_candidate']['mean']:.9g}")
    pa, pb = load_profile(modes.logits[0]), load_profile(modes.score[0])
    suite = Pipeline(pa).load_suite()
    rows_a = Comparer(pa.workspace(), suite, CompareOptions(reverse=True)).windows()
    rows_b = Comparer(pb.workspace(), suite, CompareOptions(reverse=True, mode=capture_modes.SCORE)).windows()
    assert len(rows_a) == len(rows_b) == 2
    for ra, rb in zip(rows_a, rows_b, strict=True):
        assert row_differences(ra.rows, rb.rows) == [], ra.window_index
    work = modes.score[1]
    assert not list(work.rglob("logits*.safetensors")), "score mode wrote candidate logits"
    assert len(list((work / "candidate").glob("scores_*.safetensors"))) == 2
    log = (work / "server.log").read_text(errors="replace")
    assert "kldtui score mode: scoring against" in log
