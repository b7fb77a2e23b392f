"""Hidden mode end to end on the embedded server (issue 22): a context suite's reference captured as
final hidden states through the pipeline, finalized into the published layout (``reference-hidden/``,
the replay check's live logits in ``sentinel-live-logits/repeat-00/``, the check in
``validation/``, ``capture-runtime.json``, the top-level ``manifest.json`` and ``checksums.txt``),
finished only once the head is there, stable when finalized again; a candidate's hidden folder
keeps everything inside itself."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.embedded.model import TinyModel
from kldtui.events import Event, Notice, WindowState
from kldtui.formats import fidelity as fid
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import f32_to_bf16
from kldtui.workflow.profile import Profile, profile_from_dict
from tests.fixtures_capture_run import serve_capture_finalize

pytestmark = pytest.mark.timeout(300)
VOCAB, SEED, LENGTH = 2048, 7, 300


def _suite(root: Path) -> Path:
    model = TinyModel(VOCAB, seed=SEED)
    contexts = [fid.NewContext(model.sample(LENGTH, seed=i), "prose" if i < 3 else "code",
                               partition="analysis" if i % 2 == 0 else "qualification", sentinel=i in (1, 4),
                               fields={"dataset": "d", "source_id": f"s{i}",
                                       "source_cluster_id": f"c{i // 2}"})
                for i in range(6)]
    fid.write_context_suite(root, contexts)
    return root


def _head(folder: Path) -> None:
    fid.write_lm_head(folder, f32_to_bf16(TinyModel(VOCAB, seed=SEED).head),
                      checkpoint_tensor_key="lm_head.weight")


def _profile(suite: Path, workdir: Path, replay_check: int = 2) -> Profile:
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "ref", "model_seed": SEED,
                                 "vocab_size": VOCAB, "port": 0, "startup_timeout": 60.0,
                                 "request_timeout": 60.0}
    return profile_from_dict({"reference": {"local_dir": str(suite)}, "candidate": candidate,
                              "run": {"workdir": str(workdir), "run_name": "hidden"},
                              "capture": {"mode": "hidden", "replay_check": replay_check}}, base_dir=workdir)


def _notes(events: list[Event]) -> str:
    return "\n".join(e.text for e in events if isinstance(e, Notice))


def _check_published(suite_dir: Path) -> dict[str, Any]:
    """The published format's own rules: every listed file's SHA-256, the top-level manifest's
    hashes, the tensor manifests, each context's file against its record and the suite."""
    listed = fid.read_checksums(suite_dir)
    assert sorted(listed) == fid.listed_files(suite_dir)
    for rel, digest in listed.items():
        assert hashlib.sha256((suite_dir / rel).read_bytes()).hexdigest() == digest, rel
    top = fid.load_top_manifest(suite_dir)
    suite = load_suite(suite_dir)
    assert top.suite_token_hash_sha256 == suite.suite_token_hash_sha256
    assert top.hidden_manifest_sha256 == listed[top.hidden_manifest]
    assert top.suite_manifest_sha256 == listed[top.suite_manifest]
    assert top.lm_head_file_sha256 == listed[top.lm_head_file]
    hidden = fid.load_tensor_manifest(suite_dir / fid.HIDDEN_DIR)
    assert hidden.kind == "hidden" and sorted(hidden.entries) == list(range(6))
    assert hidden.runtime_manifest == fid.CAPTURE_RUNTIME
    assert hidden.runtime_manifest_sha256 == listed[fid.CAPTURE_RUNTIME]
    for index in hidden.entries:
        assert fid.check_tensor_file(hidden, index, suite)[0] == []
    live = fid.load_tensor_manifest(suite_dir / fid.SENTINEL_LIVE_DIR / fid.repeat_dir(0))
    assert live.kind == "logits" and sorted(live.entries) == [1, 4]  # the sentinels
    for index in live.entries:
        assert fid.check_tensor_file(live, index, suite)[0] == []
    check = suite_dir / fid.VALIDATION_DIR / "hidden-replay-qualification.json"
    doc: dict[str, Any] = json.loads(check.read_text())
    return doc


def test_a_hidden_reference_becomes_a_published_suite_once_its_head_is_there(tmp_path: Path) -> None:
    suite_dir = _suite(tmp_path / "suite")
    events: list[Event] = []
    serve_capture_finalize(_profile(suite_dir, tmp_path / "work"), suite_dir / fid.HIDDEN_DIR, "reference",
                           events)
    notes = _notes(events)
    assert "no LM head yet; export it (kldtui export-head" in notes
    assert not (suite_dir / fid.TOP_MANIFEST).exists() and not (suite_dir / fid.CHECKSUMS).exists()
    assert sorted(p.name for p in (suite_dir / fid.HIDDEN_DIR).glob("*.safetensors")) == [
        f"hidden_{i:04d}.safetensors" for i in range(6)]
    assert not list((tmp_path / "work").rglob("*.rows-*"))  # chunks dropped once finalized

    _head(suite_dir / fid.LM_HEAD_DIR)
    args = ["finalize", "--suite-dir", str(suite_dir), "--capture-dir", str(tmp_path / "work" / "capture"),
            "--run-name", "hidden", "--output-dir", str(suite_dir / fid.HIDDEN_DIR), "--mode", "hidden",
            "--kind", "reference"]
    assert main(args) == 0
    check = _check_published(suite_dir)
    assert check["status"] == "qualified" and check["context_indices"] == [1, 4]
    assert check["positions"] == 2 * (LENGTH - 1) and check["top1_agreement"] == 1.0
    assert check["kl_live_to_replay"]["max"] == 0.0  # the embedded model's logits are h · Wᵀ
    assert check["replay"]["output"] == "f32"  # a float32 model's head returns float32 logits
    assert json.loads((suite_dir / fid.TOP_MANIFEST).read_text())["status"] == "qualified"

    before = {p: p.read_bytes() for p in suite_dir.rglob("*") if p.is_file()}
    assert main(args) == 0  # nothing new: the same bytes
    assert {p: p.read_bytes() for p in suite_dir.rglob("*") if p.is_file()} == before


def test_a_candidates_hidden_folder_keeps_its_live_sample_runtime_and_head_inside(tmp_path: Path) -> None:
    suite_dir = _suite(tmp_path / "suite")
    output = tmp_path / "work" / "candidate"
    _head(output / fid.LM_HEAD_DIR)
    events: list[Event] = []
    serve_capture_finalize(_profile(suite_dir, tmp_path / "work", replay_check=1), output, "candidate",
                           events)
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["hidden_width"] == TinyModel(VOCAB, seed=SEED).hidden_size
    assert manifest["runtime"]["kind"] == "embedded" and manifest["runtime_manifest"] is None
    assert manifest["kldtui_kind"] == "candidate" and manifest["replay_output"] == "f32"
    assert [r["context_index"] for r in manifest["contexts"] if "kldtui_live" in r] == [1]
    assert sorted(p.name for p in (output / "live-logits").iterdir()) == ["logits_0001.safetensors",
                                                                          "manifest.json"]
    check = json.loads((output / "hidden-replay-qualification.json").read_text())
    assert check["status"] == "qualified"
    assert sorted(p.name for p in suite_dir.iterdir()) == ["partitions.json", "suite-manifest.json", "tokens"]
    rec = json.loads((tmp_path / "work" / "capture" / "capture-hidden.json").read_text())
    assert {r["window_index"]: r.get("live_logits", False) for r in rec} == {
        0: False, 1: True, 2: False, 3: False, 4: False, 5: False}
    assert {r["mode"] for r in rec} == {"hidden"} and {r["vocab_size"] for r in rec} == {VOCAB}
    # the file holds the model's final states of the context's rows 0..L-2, in BF16
    from kldtui.formats.safetensors_io import RowReader

    suite = load_suite(suite_dir)
    tokens = suite.load_tokens(suite.windows[2])
    with RowReader(output / "hidden_0002.safetensors", "hidden_states", "BF16") as reader:
        got = reader.read(0, reader.rows)
    assert np.array_equal(got, f32_to_bf16(TinyModel(VOCAB, seed=SEED).hidden(tokens)[:-1]))


def _hidden_run(tmp_path: Path, keep_chunks: bool = False) -> tuple[Path, Profile]:
    """A 4-context hidden-state suite and the profile of an embedded candidate captured in hidden mode
    against it, its own head already in its folder: the folder and the profile."""
    from tests import fidelity_fixture as fx

    fx.build(tmp_path / "suite", contexts=4)
    output = tmp_path / "work" / "candidate"
    fid.write_lm_head(output / fid.LM_HEAD_DIR, f32_to_bf16(TinyModel(fx.VOCAB, seed=SEED).head),
                      checkpoint_tensor_key="lm_head.weight")
    profile = profile_from_dict({
        "reference": {"local_dir": str(tmp_path / "suite"), "logits_dir": fid.HIDDEN_DIR},
        "candidate": {"kind": "embedded", "served_model_name": "c", "model_seed": SEED,
                      "vocab_size": fx.VOCAB, "port": 0, "startup_timeout": 60.0, "request_timeout": 60.0},
        "run": {"workdir": str(tmp_path / "work"), "run_name": "hidden", "keep_chunks": keep_chunks},
        "capture": {"mode": "hidden", "replay_check": 2},
        "compare": {"bootstrap_samples": 50}}, base_dir=tmp_path)
    return output, profile


def test_kldtui_run_finishes_a_hidden_candidate_folder_and_reads_its_state_back(tmp_path: Path) -> None:
    """The whole run (Pipeline.run_all, what `kldtui run` and the dashboard run) finalized each
    context but never finished the folder: no live-logits manifest, no replay check, which only
    `kldtui finalize` wrote; and reading the work folder's state back (a campaign's ranking, a
    reopened dashboard) failed on the hidden-state manifest's records."""
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.state import load_state

    output, profile = _hidden_run(tmp_path)
    Pipeline(profile).run_all()
    check = json.loads((output / "hidden-replay-qualification.json").read_text())
    assert check["status"] == "qualified" and check["positions"] > 0
    assert (output / "live-logits" / "manifest.json").is_file()
    state = load_state(profile.workspace())
    assert state.problems == () and state.compared == 4


def test_a_resumed_hidden_folder_shows_the_domains_finalize_gave(tmp_path: Path) -> None:
    """Finalize names a context's domain by the suite's allocation stratum; the folder read back (a
    resumed finalize, a reopened work folder) named it by the records' source_class, a finer
    grouping: the entries differed, so finalizing a finished context again rewrote the manifest."""
    from kldtui.capture_modes.hidden import HIDDEN
    from kldtui.stages.finalize import Finalizer, load_finalized
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.state import load_state

    output, profile = _hidden_run(tmp_path, keep_chunks=True)
    suite = load_suite(tmp_path / "suite")
    events: list[Event] = []
    Pipeline(profile, events.append).run_all()
    said = {e.window_index: e.domain for e in events
            if isinstance(e, WindowState) and e.stage == "finalize" and e.state == "finalized"}
    assert said == {w.index: w.domain for w in suite.windows}
    assert any(w.domain != w.raw["semantic_class"] for w in suite.windows)  # the two groupings differ
    workspace = profile.workspace()
    assert {i: w.domain for i, w in load_state(workspace).windows.items()} == said
    assert {i: e.domain for i, e in load_finalized(workspace, suite, mode=HIDDEN).items()} == said
    # finalized again (kept: the files match), nothing changes
    manifest = output / "manifest.json"
    before = manifest.stat().st_mtime_ns
    finalizer = Finalizer(workspace, suite, mode=HIDDEN)
    for w in suite.windows:
        finalizer.finalize(w)
    assert not finalizer._changed and manifest.stat().st_mtime_ns == before
