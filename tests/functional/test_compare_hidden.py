"""kldtui compare against a hidden-state reference (replayed with the reference's LM head): the
same per-row figures as against the full-logit reference of the same states, within the replay's
tolerance; candidates as kldtui logits, published live logits (BF16) or hidden states with their
own head; the suite's clustered statistics under the published names; one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats import fidelity as fid
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.report import load_report
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import bf16_to_f32, f32_to_bf16
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from tests import fidelity_fixture as fx

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

pytest.importorskip("torch")


def _bf16(values: np.ndarray) -> np.ndarray:
    return bf16_to_f32(f32_to_bf16(np.asarray(values, dtype=np.float32)))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The published-layout suite, a full-logit copy of its reference, and a candidate whose head
    is the reference's plus noise, as F32 logits and as hidden states with its own head."""
    base = tmp_path_factory.mktemp("hidden-compare")
    f = fx.build(base / "suite", contexts=12)
    suite = load_suite(f.root)
    rng = np.random.default_rng(7)
    cand_head = _bf16(f.head + rng.standard_normal(f.head.shape).astype(np.float32) * 0.05)
    full_ref, cand_logits = base / "full-ref", base / "cand-logits"
    written_ref, written_cand = [], []
    for w in suite.windows:
        exact = f.replay(w.index)
        written_ref.append(write_logits_array(full_ref, w, _bf16(exact), suite.context_length))
        cand = f.hidden[w.index].astype(np.float64) @ cand_head.astype(np.float64).T
        written_cand.append(write_logits_array(cand_logits, w, _bf16(cand), suite.context_length))
    write_logits_manifest(full_ref, suite, written_ref, kind="full-logit reference")
    write_logits_manifest(cand_logits, suite, written_cand, kind="candidate")
    # the candidate as hidden states (the same states) with its own head inside its folder
    cand_hidden = base / "cand-hidden"
    records = []
    for w in suite.windows:
        out = fid.write_context_tensor(cand_hidden, "hidden", w, f.hidden[w.index])
        records.append(fid.tensor_record(w, out))
    fid.write_tensor_manifest(cand_hidden, "hidden", suite, records, width=fx.HIDDEN, run_name="cand")
    fid.write_lm_head(cand_hidden / fid.LM_HEAD_DIR, cand_head, checkpoint_tensor_key="lm_head.weight")
    return {"fixture": f, "suite": suite, "full_ref": full_ref, "cand_logits": cand_logits,
            "cand_hidden": cand_hidden, "base": base}


def _cmp(world: dict, ref: Path, cand: Path,  # type: ignore[type-arg,no-untyped-def]
         backend: str = "auto", **kw) -> object:
    options = CompareOptions(bootstrap_samples=200, backend=BackendRequest(backend, server_signs=None), **kw)
    return compare(world["fixture"].root, ref, cand, options)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["numpy", "c", "torch-cpu"])
def test_replayed_reference_matches_the_full_logit_reference(world: dict,
                                                             backend: str) -> None:  # type: ignore[type-arg]
    root = world["fixture"].root
    replayed = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend=backend, reverse=True)
    full = _cmp(world, world["full_ref"], world["cand_logits"], backend=backend, reverse=True)
    # same contexts, positions and per-position figures within the replay's tolerance (the only
    # difference: a replayed logit may round to the other BF16 neighbour at a rounding midpoint)
    assert replayed.positions == full.positions == 12 * (fx.CONTEXT - 1)
    assert replayed.kl_reference_to_candidate.mean == pytest.approx(full.kl_reference_to_candidate.mean,
                                                                    rel=1e-3)
    assert replayed.top1_agreement == pytest.approx(full.top1_agreement, abs=2 / replayed.positions)
    for a, b in zip(replayed.per_window_arrays.kl_mean, full.per_window_arrays.kl_mean, strict=True):
        assert a == pytest.approx(b, rel=1e-2, abs=1e-6)
    assert replayed.reference.kind == "hidden" and full.reference.kind == "logits"
    head = fid.load_lm_head(root / fid.LM_HEAD_DIR)
    assert replayed.comparator.lm_head_file_sha256 == head.file_sha256
    assert replayed.comparator.replay_dtype == "bf16" and replayed.comparator.two_pass_full_vocabulary
    assert replayed.reference.bytes_on_disk < replayed.reference.full_logits_bytes or fx.HIDDEN * 2 > fx.VOCAB


def test_hidden_candidate_replayed_with_its_own_head(world: dict) -> None:  # type: ignore[type-arg]
    root = world["fixture"].root
    hidden = _cmp(world, root / fid.HIDDEN_DIR, world["cand_hidden"], backend="numpy")
    logits = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy")
    assert hidden.kl_reference_to_candidate.mean == pytest.approx(logits.kl_reference_to_candidate.mean,
                                                                  rel=1e-3)
    assert hidden.kl_reference_to_candidate.mean > 1e-4  # the candidate's head differs: measured
    assert hidden.candidate.kind == "hidden"
    assert hidden.comparator.candidate_lm_head_file_sha256 != hidden.comparator.lm_head_file_sha256


def test_hidden_candidate_never_takes_the_reference_head(world: dict,
                                                         tmp_path: Path) -> None:  # type: ignore[type-arg]
    root = world["fixture"].root
    with pytest.raises(BadInput, match="--candidate-lm-head") as info:
        _cmp(world, root / fid.HIDDEN_DIR, root / fid.HIDDEN_DIR)
    # where its own head is read from: kldtui run takes no flag, so that is what to do there
    own = root / fid.HIDDEN_DIR / fid.LM_HEAD_DIR
    assert f"its own LM head is not in {own}; export it there (kldtui export-head --checkpoint CANDIDATE " \
           f"--output {own})" in str(info.value)
    # given explicitly, the reference's own states and head against themselves: zero
    same = _cmp(world, root / fid.HIDDEN_DIR, root / fid.HIDDEN_DIR,
                candidate_lm_head=str(root / fid.LM_HEAD_DIR),
                backend="numpy")
    assert same.kl_reference_to_candidate.max == 0.0 and same.top1_agreement == 1.0


def test_a_capture_compared_as_the_reference_is_replayed_with_its_own_head(world: dict,
                                                                           tmp_path: Path) -> None:  # type: ignore[type-arg]
    """Two captures of one candidate (a repeat) compared with each other: the first, as the reference,
    is replayed with its own lm-head/ like the second, not the suite's (which added the difference
    between the two heads to the repeat KL: the hidden demo's read 0.0036 where its noise gives 0.0015)."""
    cand = world["cand_hidden"]
    again = tmp_path / "repeat"
    shutil.copytree(cand, again)  # a second capture of the same states
    same = _cmp(world, cand, again, backend="numpy")
    own = fid.load_lm_head(cand / fid.LM_HEAD_DIR)
    assert same.comparator.lm_head_file_sha256 == own.file_sha256
    assert same.kl_reference_to_candidate.max == 0.0 and same.top1_agreement == 1.0
    # and against the candidate's own logits of those states: only their BF16 rounding differs
    logits = _cmp(world, cand, world["cand_logits"], backend="numpy")
    assert logits.kl_reference_to_candidate.mean < 1e-5, logits.kl_reference_to_candidate.mean
    # without its head, the error names every place looked at
    bare = tmp_path / "bare"
    shutil.copytree(cand, bare, ignore=shutil.ignore_patterns(fid.LM_HEAD_DIR))
    shutil.copytree(world["fixture"].root, tmp_path / "suite", ignore=shutil.ignore_patterns(fid.LM_HEAD_DIR))
    places = " or ".join(str(p / fid.LM_HEAD_DIR) for p in (bare, tmp_path, tmp_path / "suite"))
    with pytest.raises(BadInput, match=f"no LM head was found in {re.escape(places)}; give the head with "
                       "--lm-head"):
        compare(tmp_path / "suite", bare, again, CompareOptions(bootstrap_samples=200))


def test_published_live_logits_candidate_bf16(world: dict) -> None:  # type: ignore[type-arg]
    f = world["fixture"]
    live = f.root / "sentinel-live-logits" / "repeat-00"
    sentinels = [i for i, s in enumerate(f.sentinels) if s]
    report = _cmp(world, f.root / fid.HIDDEN_DIR, live, context_filter="sentinel", backend="numpy")
    assert [e.window_index for e in report.per_window] == sentinels
    # live logits are the BF16-rounded exact product: the replay agrees to rounding midpoints
    assert report.kl_reference_to_candidate.mean < 1e-6
    assert report.candidate.file_dtype == "BF16"
    assert report.suite_statistics.context_selection.filter == "sentinel"


def test_suite_statistics_and_the_published_names(world: dict, tmp_path: Path,
                                                  capsys) -> None:  # type: ignore[no-untyped-def,type-arg]
    f = world["fixture"]
    out = tmp_path / "r.json"
    code = main(["compare", "--suite-manifest", str(f.root), "--reference-dir", str(f.root / fid.HIDDEN_DIR),
                 "--candidate-dir", str(world["cand_logits"]), "--output", str(out), "--bootstrap-samples",
                 "300",
                 "--context-filter", "analysis", "--backend", "numpy"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    for key in ("contexts", "kl_micro_token_mean", "kl_macro_allocation_stratum_mean",
                "context_depth_buckets",
                "kl_context_bootstrap", "kl_source_cluster_bootstrap",
                "kl_stratified_source_cluster_bootstrap",
                "allocation_strata", "semantic_classes", "high_kld_contexts", "top1_discordant_contexts",
                "per_context", "reference", "candidate", "comparator", "suite_manifest_sha256"):
        assert key in doc, key
    analysis = [i for i, p in enumerate(f.partitions) if p == "analysis"]
    assert doc["contexts"] == len(analysis)
    assert doc["context_selection"]["partition"] == "analysis"
    assert [c["context_index"] for c in doc["per_context"]] == analysis
    per = doc["per_context"][0]
    assert per["source_cluster"] == json.dumps([per["dataset"], per["source_cluster_id"]], separators=(",",
                                                                                                       ":"))
    strat = doc["kl_stratified_source_cluster_bootstrap"]
    assert set(strat["stratum_sizes"]) == {f.strata[i] for i in analysis}
    assert strat["micro"]["estimate"] == pytest.approx(np.mean([c["kl_reference_to_candidate"]["mean"]
                                                                for c in doc["per_context"]]))
    assert doc["kl_source_cluster_bootstrap"]["cluster_count"] == len({f.clusters[i] for i in analysis})
    ranks = [r["kl_mean"] for r in doc["high_kld_contexts"]]
    assert ranks == sorted(ranks, reverse=True)
    report = load_report(out)  # the typed model reads it back
    assert report.suite_statistics is not None and report.suite_statistics.contexts == len(analysis)
    assert "kl_micro_token_mean" not in report.extra


def test_errors_name_the_file(world: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    root = world["fixture"].root
    with pytest.raises(BadInput, match="has nothing to replay"):
        _cmp(world, world["full_ref"], world["cand_logits"], lm_head=str(root / fid.LM_HEAD_DIR))
    other = tmp_path / "head"
    fid.write_lm_head(other, np.zeros((fx.VOCAB, 8), np.float32), checkpoint_tensor_key="k")
    with pytest.raises(BadInput, match="width 32"):
        _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], lm_head=str(other))
    # a head whose bytes no longer match its manifest
    copy = tmp_path / "bad-head"
    copy.mkdir()
    (copy / "manifest.json").write_bytes((root / fid.LM_HEAD_DIR / "manifest.json").read_bytes())
    data = bytearray((root / fid.LM_HEAD_DIR / "weight.safetensors").read_bytes())
    data[-1] ^= 0x40
    (copy / "weight.safetensors").write_bytes(bytes(data))
    with pytest.raises(BadInput, match="file_sha256"):
        _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], lm_head=str(copy))


def test_replay_without_torch_uses_numpy_blas(world: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """Where torch cannot be imported the CPU replay is NumPy's SGEMM: the same figures."""
    import subprocess
    import sys

    from tests.paths import REPO

    root = world["fixture"].root
    out = tmp_path / "r.json"
    code = f'''
import sys
sys.modules["torch"] = None
from kldtui.cli.main import main
rc = main(["compare", "--suite-manifest", {str(root)!r}, "--reference-dir", {str(root / fid.HIDDEN_DIR)!r},
           "--candidate-dir", {str(world["cand_logits"])!r}, "--output", {str(out)!r}, "--bootstrap-samples",
           "200"])
assert "torch" not in [m for m, v in sys.modules.items() if v is not None], "torch was imported"
sys.exit(rc)
'''
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["comparator"]["library"] == "numpy"
    with_torch = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"])
    expected = with_torch.kl_reference_to_candidate.mean
    assert report["kl_reference_to_candidate"]["mean"] == pytest.approx(expected, rel=1e-3)


def test_a_live_logits_file_of_another_context_is_refused(world: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    f = world["fixture"]
    live = tmp_path / "live"
    shutil.copytree(f.root / "sentinel-live-logits" / "repeat-00", live)
    first, second = [i for i, s in enumerate(f.sentinels) if s][:2]
    # the second sentinel's file copied over the first's, and the manifest's size and hash fixed
    a, b = live / f"logits_{first:04d}.safetensors", live / f"logits_{second:04d}.safetensors"
    a.write_bytes(b.read_bytes())
    doc = json.loads((live / "manifest.json").read_text())
    for record in doc["contexts"]:
        if record["context_index"] == first:
            record["sha256"], record["size_bytes"] = fx.sha_file(a), a.stat().st_size
    doc["total_size_bytes"] = sum(r["size_bytes"] for r in doc["contexts"])
    (live / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    with pytest.raises(BadInput, match=f"context_index='{second}'"):
        _cmp(world, f.root / fid.HIDDEN_DIR, live, context_filter="sentinel")


def test_a_replayed_reference_is_identified_by_its_states_and_head(world: dict,
                                                                   tmp_path: Path) -> None:  # type: ignore[type-arg]
    """Reports against one hidden-state reference pair by its content (the states' files, the
    head's file and the replay's rounding), not by its manifest's bytes: a copy whose manifest
    records another time pairs; the same states replayed with another head, or kept in FP32, do
    not."""
    from kldtui.decide.reports import check_same_suite

    root = world["fixture"].root
    first = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy")
    copy = tmp_path / "copy"
    shutil.copytree(root / fid.HIDDEN_DIR, copy / fid.HIDDEN_DIR)
    doc = json.loads((copy / fid.HIDDEN_DIR / "manifest.json").read_text())
    doc["created_utc"] = "2031-01-01T00:00:00Z"
    (copy / fid.HIDDEN_DIR / "manifest.json").write_text(json.dumps(doc, indent=2))
    again = _cmp(world, copy / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy",
                 lm_head=str(root / fid.LM_HEAD_DIR))
    assert first.reference_identity_sha256 is not None
    assert first.reference_manifest_sha256 != again.reference_manifest_sha256
    assert first.reference_identity_sha256 == again.reference_identity_sha256
    check_same_suite(first, again, "first.json", "again.json")  # pairs: no error
    other_head = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy",
                      lm_head=str(world["cand_hidden"] / fid.LM_HEAD_DIR))
    fp32 = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy", replay_dtype="f32")
    assert len({first.reference_identity_sha256, other_head.reference_identity_sha256,
                fp32.reference_identity_sha256}) == 3
    with pytest.raises(BadInput):
        check_same_suite(first, other_head, "first.json", "other.json")


def test_the_replay_rounds_as_the_folder_records_its_model_computed(world: dict,
                                                                     tmp_path: Path) -> None:  # type: ignore[type-arg]
    """A hidden-state folder kldtui captured from a float32 server records ``replay_output: f32``:
    its logits are replayed in FP32 unless --replay-dtype says otherwise; a folder that records
    nothing (the published suite) is replayed in BF16."""
    root = world["fixture"].root
    f32_folder = tmp_path / fid.HIDDEN_DIR
    shutil.copytree(root / fid.HIDDEN_DIR, f32_folder)
    doc = json.loads((f32_folder / "manifest.json").read_text())
    doc["replay_output"] = "f32"
    (f32_folder / "manifest.json").write_text(json.dumps(doc, indent=2))
    head = str(root / fid.LM_HEAD_DIR)
    published = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy")
    recorded = _cmp(world, f32_folder, world["cand_logits"], backend="numpy", lm_head=head)
    forced = _cmp(world, root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy", replay_dtype="f32")
    overridden = _cmp(world, f32_folder, world["cand_logits"], backend="numpy", lm_head=head,
                      replay_dtype="bf16")
    assert published.comparator.replay_dtype == overridden.comparator.replay_dtype == "bf16"
    assert recorded.comparator.replay_dtype == forced.comparator.replay_dtype == "f32"
    # the report says how the GEMM took BF16: an f32 replay multiplies widened chunks on any CPU
    assert recorded.comparator.bf16_gemm == forced.comparator.bf16_gemm == "widened to FP32"
    assert published.comparator.bf16_gemm in ("native", "widened to FP32")
    assert recorded.kl_reference_to_candidate.mean == forced.kl_reference_to_candidate.mean
    assert overridden.kl_reference_to_candidate.mean == published.kl_reference_to_candidate.mean
    assert recorded.kl_reference_to_candidate.mean != published.kl_reference_to_candidate.mean


def test_the_memory_said_before_a_run_counts_the_replay_buffers(world: dict) -> None:  # type: ignore[type-arg]
    from kldtui.stages.compare.sides import Replays, load_side, memory_text
    from kldtui.text import human_bytes

    root = world["fixture"].root
    ref = load_side(root / fid.HIDDEN_DIR, "reference", suite_dir=root)
    cand = load_side(world["cand_logits"], "candidate")
    hidden, vocab, rows = ref.head.hidden, ref.head.vocab, 100  # type: ignore[attr-defined]
    text = memory_text((ref, cand), rows, vocab, Replays("cpu", chunk=64, threads=1))
    assert text.startswith(f"replaying 1 side(s) {rows} rows at a time: {human_bytes(rows * vocab * 4)} ")
    # the BF16 product; where the chunk is widened, also the FP32 product and the head's chunk in FP32
    native = "a BF16 GEMM" in text
    assert native != ("widened to FP32" in text)
    buffers = rows * 64 * 2 if native else rows * 64 * 2 + rows * 64 * 4 + hidden * 64 * 4
    assert f"{human_bytes(buffers)} of buffers per vocabulary chunk" in text


def test_a_context_suites_bootstraps_name_their_cluster_unit_context(world: dict,  # type: ignore[type-arg]
                                                                      tmp_path: Path) -> None:
    """The report's window-cluster bootstraps (overall, JS, reverse KL, per domain, the perplexity
    ratio's, each figure's) said ``"cluster_unit": "window"`` of a hidden-state suite's contexts, where
    kldtui diff's JSON of the same reports says ``"context"`` (one rule: the report's unit)."""
    from kldtui.decide.paired import paired_diff_files
    from kldtui.formats.report import write_report

    f = world["fixture"]
    report = _cmp(world, f.root / fid.HIDDEN_DIR, world["cand_logits"], backend="numpy", reverse=True)
    path = write_report(tmp_path / "r.json", report)  # type: ignore[arg-type]
    doc = json.loads(path.read_text())
    said = {"kl": doc["kl_window_cluster_bootstrap"]["cluster_unit"],
            "js": doc["js_window_cluster_bootstrap"]["cluster_unit"],
            "reverse": doc["kl_reverse_window_cluster_bootstrap"]["cluster_unit"],
            "ppl ratio": doc["next_token"]["perplexity_ratio_window_cluster_bootstrap"]["cluster_unit"],
            **{f"domain {d}": b["cluster_unit"] for d, b in doc["domains"].items()},
            **{f"figure {n}": s["window_cluster_bootstrap"]["cluster_unit"]
               for n, s in (doc.get("figures") or {}).items()}}
    assert len(said) > 4 and set(said.values()) == {"context"}, said
    other = write_report(tmp_path / "hidden.json", _cmp(world, f.root / fid.HIDDEN_DIR,  # type: ignore[arg-type]
                                                        world["cand_hidden"], backend="numpy"))
    assert paired_diff_files(path, other, samples=100).to_dict()["cluster_unit"] == "context"


def test_the_lm_heads_are_named_once_per_compare_not_once_per_context(world: dict) -> None:  # type: ignore[type-arg]
    """The pipeline compares each context as it is finalized, preparing it on its own: each head's
    "mapped from the page cache" line (and the same-head warning) came once per context."""
    from kldtui.events import Event, Notice
    from kldtui.stages.compare.driver import Comparer
    from kldtui.workspace import Workspace

    root = world["fixture"].root
    suite = world["suite"]
    events: list[Event] = []
    workspace = Workspace(suite_dir=root, reference_dir=root / fid.HIDDEN_DIR,
                          candidate_dir=world["cand_hidden"])
    comparer = Comparer(workspace, suite, CompareOptions(bootstrap_samples=200, backend=NUMPY),
                        emit=events.append)
    for w in suite.windows[:4]:
        comparer.window(w)
    notes = [e.text for e in events if isinstance(e, Notice) and "mapped from the page cache" in e.text]
    assert len(notes) == 2, notes
    assert notes[0].startswith(f"LM head {root / fid.LM_HEAD_DIR / fid.HEAD_FILE}: [")
    assert notes[1].startswith(f"LM head {world['cand_hidden'] / fid.LM_HEAD_DIR / fid.HEAD_FILE}: [")
