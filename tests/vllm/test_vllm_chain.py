"""The real chain on vLLM (issue 4, item 7): serve, capture, finalize, compare with kldtui's stages.

Reference = the tiny float32 Llama, candidate = its bf16 copy, on a two-window suite of 2,048
tokens. Three server starts in all: the float32 model for the reference (Pipeline API into the
suite's ``ref/``), the float32 model again and the bf16 model as candidates
(``kldtui run --batch --profile``). Checks: float32 against itself gives KL below 1e-6; bf16's KL
agrees within 10 % with what transformers gives for the same pair and tokens; no server is left.

The bf16 checkpoint is served with ``--dtype float32`` (its bf16 weights widened, arithmetic in
float32), like a weight-only quantized model, and transformers runs it the same way. Served with
``--dtype bfloat16`` the arithmetic itself is rounded and the outcome depends on the kernels:
measured on this suite, vLLM gave KL 0.085, transformers in bf16 0.099 (14 % apart, both windows
alike), and the two bf16 implementations were 0.06 apart from each other; no transformers
computation reproduces vLLM's bf16 kernels, so that comparison could not check kldtui.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kldtui.stages.serve import RUNTIME_DIR_PREFIX
from tests.fixtures_vllm_chain import (
    CONTEXT,
    WINDOWS,
    build_models,
    capture_reference,
    kldtui_run_batch,
    leftover_servers,
    transformers_kl,
    write_chain_suite,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a real vLLM server

SCORED = len(WINDOWS) * (CONTEXT - 1)
CANDIDATE_DTYPE = "float32"  # the arithmetic of the bf16 checkpoint, in vLLM and in transformers


@dataclass
class Chain:
    root: Path
    f32: Path
    bf16: Path
    suite: Path
    ref_dir: Path

    def profile(self, name: str, model: Path, dtype: str) -> tuple[Path, Path]:
        workdir = self.root / f"work-{name}"
        path = write_profile(self.root / f"{name}.toml", model=model, dtype=dtype, suite_dir=self.suite,
                             workdir=workdir, run_name=name)
        return path, workdir


@pytest.fixture(scope="module")
def chain(tmp_path_factory, vllm_version) -> Chain:
    root = tmp_path_factory.mktemp("chain")
    f32, bf16 = build_models(root / "models")
    suite = write_chain_suite(root / "suite")
    c = Chain(root, f32, bf16, suite, suite / "ref")
    profile, _ = c.profile("reference", f32, "float32")
    try:
        assert capture_reference(profile) == c.ref_dir
        assert leftover_servers(root) == []
        yield c
    finally:
        left = leftover_servers(root)
        assert left == [], f"servers left running: {left}"


def _check_report(report: dict, chain: Chain, workdir: Path) -> None:
    assert report["windows"] == len(WINDOWS) and report["positions"] == SCORED
    assert report["window_range"] == [0, len(WINDOWS)]
    assert [w["window_index"] for w in report["per_window"]] == list(range(len(WINDOWS)))
    manifest = json.loads((workdir / "candidate" / "manifest.json").read_text())
    assert [w["shape"] for w in manifest["windows"]] == [[CONTEXT - 1, 4096]] * len(WINDOWS)
    assert manifest["runtime"]["model"] in (str(chain.f32), str(chain.bf16))


def test_vllm_chain_float32_twice_agrees(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    # the run's temp folder is a fresh one (short: the server's runtime folder is made in it), so
    # what the launched server leaves in its temp folder shows there, and no other process's files
    temp = Path(tempfile.mkdtemp(prefix="kt-"))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    profile, workdir = chain.profile("f32-again", chain.f32, "float32")
    try:
        report = kldtui_run_batch(profile, workdir)
        # vLLM's rendezvous file (one per launch) went with the server's runtime folder
        left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
        assert not [p for p in left if "vllm_dist_" in p or p.startswith(RUNTIME_DIR_PREFIX)], left
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert leftover_servers(chain.root) == []
    _check_report(report, chain, workdir)
    kl = report["kl_reference_to_candidate"]["mean"]
    worst = report["kl_reference_to_candidate"]["max"]
    print(f"float32 vs float32 (two captures): mean KL {kl:.3e}, max {worst:.3e}, "
          f"top-1 {report['top1_agreement']:.6f}")
    assert 0.0 <= kl < 1e-6


def test_vllm_chain_bf16_matches_transformers(chain: Chain) -> None:
    from kldtui.formats.suite import load_suite

    profile, workdir = chain.profile("bf16", chain.bf16, CANDIDATE_DTYPE)
    report = kldtui_run_batch(profile, workdir)
    assert leftover_servers(chain.root) == []
    _check_report(report, chain, workdir)
    suite = load_suite(chain.suite)
    tokens = [suite.load_tokens(w) for w in suite.select(0, None)]
    expected = transformers_kl(chain.f32, chain.bf16, CANDIDATE_DTYPE, tokens)
    kl = report["kl_reference_to_candidate"]["mean"]
    print(f"float32 vs bf16 weights: kldtui on vLLM mean KL {kl:.6f}, transformers {expected:.6f} "
          f"(relative difference {abs(kl - expected) / expected:.2e}); per window "
          f"{[round(w['kl_reference_to_candidate']['mean'], 6) for w in report['per_window']]}")
    assert kl == pytest.approx(expected, rel=0.10)
