"""GGUF quants and a vLLM quant in one campaign, against one float32 reference (issue 24).

The tiny Llama: its float32 weights are the reference, captured through vLLM's CPU build; its
bf16 copy is a vLLM candidate; its Q8_0 and Q4_0 GGUFs (llama.cpp's converter and quantizer) are
``kind = "llama-cpp"`` candidates. The profiles are the shipped examples with this test's paths:
``examples/tiny-gguf.toml``, one ``kldtui run --batch`` of a ``[[candidates]]`` campaign that
captures the reference and ranks the three with intervals and verdicts;
``examples/tiny-gguf-q4_0.toml``, the Q4_0 alone in score mode against the
same reference, which must give the campaign's Q4_0 figures. ``kldtui leaderboard`` and ``kldtui
diff`` read the campaign's reports.

Then llama.cpp's own tool: the reference exported with ``kldtui convert --to llama-cpp`` and
``llama-perplexity --kl-divergence`` on each GGUF give a mean KLD that agrees with kldtui's for
the same positions within what the base file's uint16 encoding can move it (bounded per row from
the exact distributions), and exactly (to its printed digits) with the same arithmetic done on
the decoded file.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.formats import llamacpp_kld as kld
from kldtui.formats.report_names import leaderboard_file_name
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import load_logits_manifest, load_suite
from kldtui.workspace import profile_key
from tests.fixtures_llama_cpp import (
    CONTEXT,
    WINDOWS,
    example_profile,
    kldtui,
    llama_perplexity_kld,
    run_profile,
    tool,
    write_suite_of_random_ids,
)
from tests.fixtures_score import report_differences
from tests.fixtures_vllm_chain import leftover_servers

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]

NAMES = ("bf16", "q8_0", "q4_0")


@dataclass
class Campaign:
    root: Path
    suite: Path
    models: dict[str, Path]
    workdir: Path
    reports: dict[str, dict[str, Any]]
    output: str
    score_workdir: Path
    score_report: dict[str, Any]

    def report_path(self, name: str) -> Path:
        return self.workdir / f"comparison-{name}.json"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, ggufs) -> Campaign:
    root = tmp_path_factory.mktemp("campaign")
    vllm_python = str(tool("KLDTUI_VLLM_PYTHON", "the vLLM CPU venv's python"))
    suite = write_suite_of_random_ids(root / "suite")
    workdir, score_workdir = root / "work", root / "score-work"
    try:
        profile = example_profile("tiny-gguf.toml", root / "tiny-gguf.toml", suite_dir=suite, workdir=workdir,
                                  models=ggufs, vllm_python=vllm_python)
        run = run_profile(profile, workdir, reports=tuple(f"comparison-{n}.json" for n in NAMES),
                          timeout=1200.0)
        reports = {n: run[f"comparison-{n}.json"] for n in NAMES}
        score = example_profile("tiny-gguf-q4_0.toml", root / "tiny-gguf-q4_0.toml", suite_dir=suite,
                                workdir=score_workdir, models=ggufs)
        score_report = run_profile(score, score_workdir)["comparison.json"]
        yield Campaign(root, suite, ggufs, workdir, reports, run["stdout"]["text"], score_workdir,
                       score_report)
    finally:
        assert leftover_servers(root) == []
        models = str(ggufs["f32"].parent)
        ours = subprocess.run(["pgrep", "-af", "kldtui.embedded.llama_cpp"], capture_output=True, text=True,
                              check=False).stdout.splitlines()
        assert [line for line in ours if models in line] == [], "llama.cpp servers left running"


def test_all_three_are_compared_against_one_reference(campaign: Campaign) -> None:
    ref = load_logits_manifest(campaign.suite / "ref")
    assert ref.vocab_size == 4096 and sorted(ref.entries) == list(range(WINDOWS))
    assert (campaign.suite / "repeat-noise-window000.json").is_file()  # the reference's own repeat
    identities = {r["reference_identity_sha256"] for r in [*campaign.reports.values(), campaign.score_report]}
    assert len(identities) == 1
    for name, report in campaign.reports.items():
        assert report["windows"] == WINDOWS and report["positions"] == WINDOWS * (CONTEXT - 1), name
        boot = report["kl_window_cluster_bootstrap"]
        assert boot["ci95_low"] <= report["kl_reference_to_candidate"]["mean"] <= boot["ci95_high"]
        assert (campaign.workdir / "candidates" / name / "manifest.json").is_file(), name
    kl = {n: r["kl_reference_to_candidate"]["mean"] for n, r in campaign.reports.items()}
    assert 0 < kl["bf16"] < kl["q8_0"] < kl["q4_0"], kl  # fewer bits, further from the reference
    # each candidate's size, measured from its files' headers (GGUF: kldtui.formats.gguf)
    sizes = {n: r["candidate_size"] for n, r in campaign.reports.items()}
    assert sizes["bf16"]["source"] == "safetensors" and sizes["bf16"]["bits_per_weight"] == 16.0, sizes
    for name, quant in (("q8_0", "Q8_0"), ("q4_0", "Q4_0")):
        assert sizes[name]["source"] == "gguf" and sizes[name]["quantization"] == quant, sizes
    assert 16.0 > sizes["q8_0"]["bits_per_weight"] > sizes["q4_0"]["bits_per_weight"], sizes
    print(f"\nmean KL: {json.dumps(kl)}\nsizes: {json.dumps(sizes)}")


def test_the_campaign_ranks_them_with_intervals_and_verdicts(campaign: Campaign) -> None:
    # the campaign's own leaderboard, named after its profile's file (tiny-gguf.toml)
    name = leaderboard_file_name(profile_key(campaign.root / "tiny-gguf.toml"))
    board = json.loads((campaign.workdir / name).read_text())
    rows = board["rows"] if isinstance(board, dict) else board
    assert [r.get("name") for r in rows] == list(NAMES), rows  # best first
    out = campaign.output
    print("\n" + out[-3000:])
    for name in NAMES:
        assert name in out
    # the standings (kldtui.workflow.standings): each candidate's interval, size, bits per weight
    # and its verdict against the best
    assert "95% interval" in out and "bpw" in out and "worse than the best" in out
    assert not (campaign.workdir / "repeat").exists()  # repeat_leader = false in the example


def test_score_mode_gives_the_campaigns_figures_without_candidate_logits(campaign: Campaign) -> None:
    q4 = campaign.score_workdir / "candidate"
    assert (q4 / "scores-manifest.json").is_file()
    assert list(q4.glob("scores_*.safetensors")) and not list(q4.rglob("logits_*.safetensors"))
    q8 = campaign.workdir / "candidates" / "q8_0"
    assert len(list(q8.glob("logits_*.safetensors"))) == WINDOWS
    assert report_differences(campaign.reports["q4_0"], campaign.score_report,
                              skip=("reference_dir", "window_range")) == []


def test_leaderboard_and_verdict(campaign: Campaign) -> None:
    paths = [str(campaign.report_path(n)) for n in NAMES]
    board = kldtui("leaderboard", *paths, "--plain", "--json", str(campaign.root / "board.json"),
                   cwd=campaign.root)
    assert board.returncode == 0, board.stderr
    text = board.stdout
    print("\n" + text)
    assert "95% interval" in text and f"{WINDOWS} windows" in text
    doc = json.loads((campaign.root / "board.json").read_text())
    rows = doc["rows"] if isinstance(doc, dict) else doc
    assert len(rows) == 3
    diff = kldtui("diff", str(campaign.report_path("q8_0")), str(campaign.report_path("q4_0")),
                  cwd=campaign.root)
    assert diff.returncode == 0, diff.stderr
    print(diff.stdout)
    assert "q4_0" in diff.stdout and "worse" in diff.stdout.lower()


def _candidate_logits(models: dict[str, Path], name: str, tokens: list[int]) -> np.ndarray:
    from kldtui.embedded.llama_cpp import KV_TYPES, GgufModel

    model = GgufModel(models[name], n_ctx=2 * CONTEXT, n_batch=512, n_ubatch=512, n_threads=2,
                      type_k=KV_TYPES["f32"], type_v=KV_TYPES["f32"])
    return model.prefill(tokens).logits(0, len(tokens) - 1)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64)
    y -= y.max(axis=1, keepdims=True)
    return y - np.log(np.exp(y).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("name", ["q8_0", "q4_0"])
def test_llama_perplexity_agrees_with_kldtui(campaign: Campaign, name: str) -> None:
    binary = tool("KLDTUI_LLAMA_PERPLEXITY", "the llama-perplexity binary")
    base = campaign.root / "reference.kld"
    if not base.exists():
        out = kldtui("convert", str(campaign.suite), "--to", "llama-cpp", str(base), cwd=campaign.root)
        assert out.returncode == 0, out.stderr
        print("\n" + out.stdout)
    theirs = llama_perplexity_kld(binary, campaign.models[name], base, CONTEXT,
                                  campaign.root / f"llama-perplexity-{name}.log")
    # kldtui's figure for the positions llama.cpp scores: its report's 256-position bucket
    buckets = {(b["start"], b["stop"]): b for b in campaign.reports[name]["kl_by_position"]}
    ours = buckets[(CONTEXT // 2, CONTEXT - 1)]["kl_mean"]  # rows 256..510
    # the same arithmetic on the decoded file (llama.cpp's rule: entries at or below -16 skipped),
    # and the bound on what the encoding moves KL, per row from the exact distributions
    suite = load_suite(campaign.suite)
    ref = load_logits_manifest(campaign.suite / "ref")
    data = kld.read_base(base)
    first, rows = data.first, data.rows
    on_file, bounds, exact_kl = [], [], []
    for (_, encoded), window in zip(data.iter_chunks(), suite.windows, strict=True):
        logits = _candidate_logits(campaign.models, name, suite.load_tokens(window))
        q = _log_softmax(logits[first:first + rows])
        with RowReader(ref.file_path(window.index)) as reader:
            p = _log_softmax(reader.read(first, first + rows))
        dec = kld.decode_rows(encoded, data.n_vocab, mask_floor=False).astype(np.float64)
        keep = dec > -16
        on_file.append(np.where(keep, np.exp(dec) * (dec - q), 0.0).sum(axis=1))
        pe = np.exp(p)
        exact_kl.append((pe * (p - q)).sum(axis=1))
        scale, _ = kld.row_header(encoded)
        eps = scale.astype(np.float64)[:, None] / 2 + 1e-6
        kept = kld.decode_rows(encoded, data.n_vocab) > -np.inf
        bounds.append((np.where(kept, pe * (np.expm1(eps) * np.abs(p - q) + eps), 0.0)
                       + np.where(kept, 0.0, pe * (np.abs(p - q) + 1))).sum(axis=1))
    file_kl = float(np.concatenate(on_file).mean())
    bound = float(np.concatenate(bounds).mean())
    numpy_exact = float(np.concatenate(exact_kl).mean())
    print(f"\n{name}: llama-perplexity mean KLD {theirs:.6f}; kldtui (exact reference, positions {first}.."
          f"{CONTEXT - 2}) {ours:.6f}; numpy on the decoded file {file_kl:.6f}; numpy exact "
          f"{numpy_exact:.6f}; "
          f"encoding bound {bound:.2e}; |llama.cpp - kldtui| = {abs(theirs - ours):.2e}")
    assert abs(numpy_exact - ours) <= 1e-6 + 1e-4 * ours  # kldtui's figure is the exact one
    assert abs(theirs - file_kl) <= 2e-6 + 1e-4 * file_kl  # llama.cpp reads the file kldtui wrote
    assert abs(theirs - ours) <= bound + 1e-6  # within the base file's precision
