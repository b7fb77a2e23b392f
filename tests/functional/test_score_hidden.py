"""Score mode against a hidden-state reference (issue 22 item 3) on the embedded server: the server
replays each chunk's reference rows from the stored final hidden states and the LM head, where the
candidate's logits are, and scores them; the report equals score mode's against the full-logit
reference of the same model within score mode's own tolerance (docs/SCORE_MODE.md), and a score
file scored with another head, or a reference without its head, is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kldtui.embedded.model import TinyModel
from kldtui.errors import BadInput
from kldtui.formats import fidelity as fid
from kldtui.formats.report import load_report
from kldtui.metrics.replay import f32_to_bf16
from kldtui.stages.compare import CompareOptions, compare
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Profile, profile_from_dict
from tests.fixtures_capture_run import serve_capture_finalize
from tests.fixtures_score import report_differences

pytestmark = pytest.mark.timeout(300)
VOCAB, SEED, LENGTH = 2048, 7, 260


def _profile(suite: Path, workdir: Path, mode: str, *, logits_dir: str = "ref", perturb: float = 0.0,
             replay_check: int | None = None, env: dict[str, str] | None = None,
             run: dict[str, Any] | None = None) -> Profile:
    candidate: dict[str, Any] = {"kind": "embedded", "served_model_name": "m", "model_seed": SEED,
                                 "vocab_size": VOCAB, "perturb": perturb, "port": 0, "startup_timeout": 60.0,
                                 "request_timeout": 60.0, "env": env or {}}
    capture: dict[str, Any] = {"mode": mode}
    if replay_check is not None:
        capture["replay_check"] = replay_check
    return profile_from_dict({"reference": {"local_dir": str(suite), "logits_dir": logits_dir},
                              "candidate": candidate,
                              "run": {"workdir": str(workdir), "run_name": mode, **(run or {})},
                              "compare": {"bootstrap_samples": 200, "reverse": True},
                              "capture": capture}, base_dir=workdir)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A context suite with both references of one model: F32 logits in ref/, final hidden states
    in reference-hidden/ with its head in lm-head/."""
    root = tmp_path_factory.mktemp("hidden-score")
    model = TinyModel(VOCAB, seed=SEED)
    contexts = [fid.NewContext(model.sample(LENGTH, seed=i), "prose" if i < 2 else "code",
                               fields={"dataset": "d", "source_id": f"s{i}", "source_cluster_id": f"c{i}"})
                for i in range(4)]
    suite_dir = root / "suite"
    fid.write_context_suite(suite_dir, contexts)
    fid.write_lm_head(suite_dir / fid.LM_HEAD_DIR, f32_to_bf16(model.head),
                      checkpoint_tensor_key="lm_head.weight")
    serve_capture_finalize(_profile(suite_dir, root / "ref-logits", "logits"), suite_dir / "ref", "reference")
    serve_capture_finalize(_profile(suite_dir, root / "ref-hidden", "hidden", replay_check=0),
                           suite_dir / fid.HIDDEN_DIR, "reference")
    return suite_dir


OPTIONS = CompareOptions(bootstrap_samples=200, reverse=True)


@pytest.fixture(scope="module")
def scored(suite: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same perturbed candidate scored in the server against each reference, compared."""
    root = tmp_path_factory.mktemp("cands")
    out = []
    for name, logits_dir in (("vs-logits", "ref"), ("vs-hidden", fid.HIDDEN_DIR)):
        work = root / name
        serve_capture_finalize(_profile(suite, work, "score", logits_dir=logits_dir, perturb=0.1))
        report = compare(suite, suite / logits_dir, work / "candidate", OPTIONS)
        (work / "comparison.json").write_text(json.dumps(report.to_json()))
        out.append(work)
    return out[0], out[1]


def test_scoring_against_hidden_states_gives_the_full_logit_references_report(
        suite: Path, scored: tuple[Path, Path]) -> None:
    vs_logits, vs_hidden = scored
    a = load_report(vs_logits / "comparison.json").to_json()
    b = load_report(vs_hidden / "comparison.json").to_json()
    assert a["positions"] == b["positions"] == 4 * (LENGTH - 1)
    # the reference folders (and so their identities) differ by design; every figure agrees within
    # score mode's tolerance
    for key in ("reference_dir", "reference_manifest_sha256", "reference_identity_sha256", "reference"):
        a.pop(key, None)
        b.pop(key, None)
    assert report_differences(a, b) == []
    assert b["kl_reference_to_candidate"]["mean"] > 1e-3  # a real difference was measured
    # what each reference was and its size on disk (the dashboard's reference line)
    ref_a, ref_b = load_report(vs_logits / "comparison.json"), load_report(vs_hidden / "comparison.json")
    assert ref_a.reference.kind == "logits" and ref_b.reference.kind == "hidden"
    assert ref_b.reference.bytes_on_disk < ref_a.reference.bytes_on_disk
    assert ref_b.candidate is None  # score mode: the candidate folder holds figures, not logits
    # each score file says what it was scored against: the hidden file, the head, the rounding
    from kldtui.formats.safetensors_io import read_header

    hidden = fid.load_tensor_manifest(suite / fid.HIDDEN_DIR)
    head = fid.load_lm_head(suite / fid.LM_HEAD_DIR)
    meta = read_header(vs_hidden / "candidate" / "scores_002.safetensors").metadata
    assert meta["reference_sha256"] == hidden.entry(2).sha256
    assert meta["lm_head_file_sha256"] == head.file_sha256
    assert meta["replay_output"] == "f32"  # the embedded server computes in float32
    # the server read the hidden states (~2 bytes x 65 a row), never the logits (4 x 2048)
    assert not list((vs_hidden / "candidate").glob("logits*"))


def test_a_score_file_scored_with_another_head_is_refused(suite: Path, scored: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    _, vs_hidden = scored
    copy = tmp_path / "suite"
    shutil.copytree(suite, copy)
    (copy / fid.LM_HEAD_DIR / "manifest.json").unlink()
    (copy / fid.LM_HEAD_DIR / "weight.safetensors").unlink()
    other = TinyModel(VOCAB, seed=SEED + 1).head
    fid.write_lm_head(copy / fid.LM_HEAD_DIR, f32_to_bf16(other), checkpoint_tensor_key="lm_head.weight")
    with pytest.raises(BadInput, match=r"scores_000\.safetensors: .*scored with an LM head of SHA-256 .*, "
                       r"the reference's head is .*; capture the window again in score mode with the "
                       r"reference's head"):
        compare(copy, copy / fid.HIDDEN_DIR, vs_hidden / "candidate", OPTIONS)
    shutil.rmtree(copy / fid.LM_HEAD_DIR)
    with pytest.raises(BadInput, match=r"manifest\.json: holds hidden states and no LM head was found in it, "
                       r"beside it or in .*; put the head the server replayed with in .*lm-head$"):
        compare(copy, copy / fid.HIDDEN_DIR, vs_hidden / "candidate", OPTIONS)


def test_the_server_refuses_a_head_of_another_vocabulary_per_request(suite: Path, tmp_path: Path) -> None:
    """A head whose rows are not the server's vocabulary fails the request in the server; the
    capture says why in one line."""
    from kldtui.errors import KldError

    copy = tmp_path / "suite"
    shutil.copytree(suite, copy, ignore=shutil.ignore_patterns("ref"))
    shutil.rmtree(copy / fid.LM_HEAD_DIR)
    small = TinyModel(VOCAB // 2, seed=SEED).head
    fid.write_lm_head(copy / fid.LM_HEAD_DIR, f32_to_bf16(small), checkpoint_tensor_key="lm_head.weight")
    with pytest.raises(KldError, match=r"the LM head has 1024 rows, the server's vocabulary is 2048; replay "
                       r"with the head of the reference's model"):
        serve_capture_finalize(_profile(copy, tmp_path / "work", "score", logits_dir=fid.HIDDEN_DIR,
                                        perturb=0.1))


def test_a_run_without_the_head_is_stopped_before_the_server_starts(suite: Path, tmp_path: Path) -> None:
    """``kldtui run``'s preflight asks the capture mode what its server lacks: score mode against
    hidden states without their head is one line naming the folders and the two ways to give it."""
    from kldtui.workflow.preflight import preflight

    copy = tmp_path / "suite"
    shutil.copytree(suite, copy, ignore=shutil.ignore_patterns("ref", fid.LM_HEAD_DIR))
    profile = _profile(copy, tmp_path / "work", "score", logits_dir=fid.HIDDEN_DIR, perturb=0.1)
    problems = preflight(profile, profile.workspace())
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{copy / fid.HIDDEN_DIR}: score mode replays these hidden states with "
                                  "their LM head, and there is none in ")
    assert "kldtui export-head --checkpoint MODEL" in problems[0] and "KLDTUI_SCORE_LM_HEAD" in problems[0]
    # the places looked at, in order, the suite's named once ("none in X or X" before): inside the
    # folder (a candidate's capture keeps its own head there), then beside it, which is the suite
    assert f"there is none in {copy / fid.HIDDEN_DIR / fid.LM_HEAD_DIR} or {copy / fid.LM_HEAD_DIR}; " \
        "export it" in problems[0]
    # the head named in the server's environment (a path on the server's host) is taken at its word
    with_env = _profile(copy, tmp_path / "work", "score", logits_dir=fid.HIDDEN_DIR, perturb=0.1,
                        env={"KLDTUI_SCORE_LM_HEAD": str(suite / fid.LM_HEAD_DIR)})
    assert preflight(with_env, with_env.workspace()) == []
    # logits mode (or score mode against logits) asks nothing of the kind
    logits = _profile(copy, tmp_path / "w2", "logits", logits_dir=fid.HIDDEN_DIR)
    assert preflight(logits, logits.workspace()) == []


def test_kldtui_run_scores_against_the_hidden_states_end_to_end(suite: Path, scored: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    """The whole pipeline (``kldtui run``'s ``run_all``: the reference stage checks the hidden folder
    against the suite as the logits its head replays to, the server scores, compare reads the
    scores) gives the report of the stage-by-stage run."""
    profile = _profile(suite, tmp_path / "work", "score", logits_dir=fid.HIDDEN_DIR, perturb=0.1)
    state = Pipeline(profile).run_all()
    assert state.report is not None
    a = load_report(scored[1] / "comparison.json").to_json()
    b = load_report(tmp_path / "work" / "comparison.json").to_json()
    assert b["provenance"]["backend"] == "server-scores"
    for doc in (a, b):  # the bootstrap's settings are the profile's in both; folders differ
        doc.pop("reference_dir", None)
    assert report_differences(a, b) == []


def test_a_profiles_context_filter_runs_and_compares_only_those_contexts(
        suite: Path, scored: tuple[Path, Path], tmp_path: Path) -> None:
    """``[run] strata`` and ``context_filter`` (kldtui compare's --stratum and --context-filter as profile
    keys): the run captures and compares only the chosen contexts, and its report is compare's
    with the same flags over the whole candidate; a filter the suite cannot take is said before
    the server starts."""
    from kldtui.stages.capture import load_records
    from kldtui.workflow.preflight import preflight

    work = tmp_path / "work"
    profile = _profile(suite, work, "score", logits_dir=fid.HIDDEN_DIR, perturb=0.1,
                       run={"strata": ["code"], "context_filter": "analysis"})
    state = Pipeline(profile).run_all()
    assert state.report is not None
    # only those were captured
    assert sorted(load_records(profile.workspace().records_path, unit="context")) == [2, 3]
    got = load_report(work / "comparison.json").to_json()
    want = compare(suite, suite / fid.HIDDEN_DIR, scored[1] / "candidate",
                   CompareOptions(bootstrap_samples=200, reverse=True, context_filter="analysis",
                                  strata=("code",))).to_json()
    assert got["per_window_arrays"]["window_index"] == [2, 3]
    assert got["context_selection"]["strata"] == ["code"]
    assert got["context_selection"]["filter"] == want["context_selection"]["filter"]
    for doc in (got, want):
        doc.pop("reference_dir", None)
    assert report_differences(want, got) == []
    lacking = _profile(suite, tmp_path / "w2", "score", logits_dir=fid.HIDDEN_DIR, run={"strata": ["poetry"]})
    assert any("no stratum 'poetry'" in p for p in preflight(lacking, lacking.workspace()))


def test_the_repeat_kl_of_a_filtered_run_compares_the_contexts_it_captured(suite: Path,
                                                                           tmp_path: Path) -> None:
    """A campaign's repeat capture under ``[run] strata`` / ``context_filter`` holds only those contexts:
    the repeat KL between the two captures (``measure_floor``, as the campaign calls it) compares
    exactly those; over the whole range it would ask for contexts neither capture has."""
    from kldtui.decide.noise import measure_floor

    run = {"strata": ["code"], "context_filter": "analysis"}
    runs = []
    for name in ("first", "repeat"):
        work = tmp_path / name
        serve_capture_finalize(_profile(suite, work, "logits", logits_dir=fid.HIDDEN_DIR, perturb=0.1,
                                        run=run))
        runs.append(work / "candidate")
    _, report = measure_floor(suite, runs[0], runs[1], context_filter="analysis", strata=("code",),
                              server_signs=None)  # no GPU taken: the servers' signs are not needed
    assert report.to_json()["per_window_arrays"]["window_index"] == [2, 3]
    with pytest.raises(BadInput):
        measure_floor(suite, runs[0], runs[1], server_signs=None)
