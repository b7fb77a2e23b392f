"""The hidden-state suite format (kldtui.formats.fidelity): a suite written by another tool is read
as published, impossible values are refused in one line naming the file, and what kldtui's
writer writes passes the published format's own rules (tests/fidelity_fixture.check_published)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.formats import fidelity as fid
from kldtui.formats.suite import load_logits_manifest, load_suite, token_ids_hash
from tests import fidelity_fixture as fx


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> fx.Fixture:
    return fx.build(tmp_path_factory.mktemp("fidelity") / "suite")


def test_fixture_follows_the_published_rules(published: fx.Fixture) -> None:
    assert fx.check_published(published.root) == []


def test_suite_manifest_reads_as_contexts(published: fx.Fixture) -> None:
    suite = load_suite(published.root)
    assert suite.window_count == len(published.tokens)
    assert fid.is_context_suite(suite)
    suite.check_suite_hash()
    first = suite.windows[0]
    assert first.label == f"context 0000 ({published.strata[0]})"
    assert first.scored_positions == fx.CONTEXT - 1
    assert suite.load_tokens(first) == published.tokens[0]
    assert suite.domain_counts == {s: published.strata.count(s) for s in fx.STRATA}
    info = fid.context_info(suite.windows[3])
    assert info is not None
    assert (info.partition, info.sentinel) == (published.partitions[3], published.sentinels[3])
    assert info.cluster_key == json.dumps([info.dataset, published.clusters[3]], separators=(",", ":"))
    # contexts 2k and 2k+1 share a source cluster
    keys = [fid.cluster_key(w) for w in suite.windows]
    assert keys[4] == keys[5] != keys[6]


def test_tensor_folders_head_top_manifest_and_checksums(published: fx.Fixture) -> None:
    root = published.root
    suite = load_suite(root)
    hidden = fid.load_tensor_manifest(root / fid.HIDDEN_DIR)
    assert (hidden.kind, hidden.width, hidden.scored_rows) == ("hidden", fx.HIDDEN, fx.CONTEXT - 1)
    assert sorted(hidden.entries) == list(range(len(published.tokens)))
    for index in hidden.entries:
        problems, header = fid.check_tensor_file(hidden, index, suite)
        assert problems == [] and header is not None
    head = fid.load_lm_head(root / fid.LM_HEAD_DIR)
    assert (head.vocab, head.hidden) == (fx.VOCAB, fx.HIDDEN)
    assert head.file_sha256 == fx.sha_file(head.path)
    assert fid.load_lm_head(head.path).file_sha256 == head.file_sha256  # the file, manifest beside it
    bits = fid.head_bits(head)
    from kldtui.metrics.replay import bf16_to_f32

    np.testing.assert_array_equal(bf16_to_f32(bits), published.head)
    top = fid.load_top_manifest(root)
    assert top.suite_token_hash_sha256 == suite.suite_token_hash_sha256
    assert top.hidden_manifest == "reference-hidden/manifest.json"
    checksums = fid.read_checksums(root)
    assert sorted(checksums) == fid.listed_files(root)
    assert fid.check_partitions(suite, fid.read_partitions(root), "partitions.json") == []
    live = load_logits_manifest(root / "sentinel-live-logits" / "repeat-00")
    assert live.vocab_size == fx.VOCAB
    assert sorted(live.entries) == [i for i, s in enumerate(published.sentinels) if s]
    assert live.entries[0].dtype == "BF16" and live.entries[0].domain == ""


def test_hidden_folder_is_not_a_logits_folder(published: fx.Fixture) -> None:
    with pytest.raises(BadInput, match="holds hidden states.*--lm-head"):
        load_logits_manifest(published.root / fid.HIDDEN_DIR)


def test_context_filter(published: fx.Fixture) -> None:
    suite = load_suite(published.root)
    assert [w.index for w in fid.ContextFilter("qualification").apply(suite)] == [
        i for i, p in enumerate(published.partitions) if p == "qualification"]
    assert [w.index for w in fid.ContextFilter("sentinel").apply(suite)] == [
        i for i, s in enumerate(published.sentinels) if s]
    non = fid.ContextFilter("non-sentinel", strata=("chinese",), start=1).apply(suite)
    assert all(w.domain == "chinese" and w.index >= 1 and not published.sentinels[w.index] for w in non)
    with pytest.raises(BadInput, match="no stratum 'poetry'"):
        fid.ContextFilter(strata=("poetry",)).apply(suite)
    with pytest.raises(BadInput, match="'odd' is not a context filter"):
        fid.ContextFilter("odd")


def _mutate(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize(("rel", "change", "message"), [
    ("suite-manifest.json", lambda d: d.update(context_count=99), "context_count is 99"),
    ("suite-manifest.json", lambda d: d["contexts"][2].update(index=5), r"contexts\[2\]: index 5"),
    ("suite-manifest.json", lambda d: d["contexts"][1].update(partition="holdout"), "partition 'holdout'"),
    ("suite-manifest.json", lambda d: d["contexts"][1].update(scored_row_start=1), "scored rows"),
    ("suite-manifest.json", lambda d: d["contexts"][0].update(token_ids_json_sha256="abc"), "not a SHA-256"),
    ("suite-manifest.json", lambda d: d.update(sentinel_count=40), "sentinel_count 40"),
    ("suite-manifest.json", lambda d: d["partition_counts"].update(analysis=1), "partition_counts"),
    ("suite-manifest.json", lambda d: d["contexts"][0].update(token_file="../x.json"), "token_file"),
    ("reference-hidden/manifest.json", lambda d: d.update(total_size_bytes=7), "total_size_bytes 7"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(size_bytes=-4), "size_bytes"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(size_bytes=10), "smaller than"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(shape=[3, fx.HIDDEN]), "3 rows"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(shape=[15, 8]), "width 32"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(dtype="F32"), "dtype 'F32'"),
    ("reference-hidden/manifest.json", lambda d: d.update(runtime_manifest="/etc/passwd"), "absolute"),
    ("reference-hidden/manifest.json", lambda d: d.update(vocab_size=5), "exactly one of hidden_width"),
    ("reference-hidden/manifest.json", lambda d: d.update(semantic_point="logits"), "semantic_point"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"].append(dict(d["contexts"][0])),
     "listed twice"),
    ("reference-hidden/manifest.json", lambda d: d["contexts"][0].update(file="../../x"), "file"),
    # no records yet to hold the width to (a reference being captured): the width alone is checked, as
    # the disk plan reads it (2^30 planned 2 GiB a position; 401 digits crashed its arithmetic)
    ("reference-hidden/manifest.json", lambda d: d.update(contexts=[], total_size_bytes=0,
                                                       hidden_width=1 << 30),
     "'hidden_width' is 1073741824; a vocabulary or hidden width is a whole number from 1 to 16,777,216"),
    ("reference-hidden/manifest.json", lambda d: d.update(contexts=[], total_size_bytes=0,
                                                       hidden_width=10**400),
     r"'hidden_width' is 10000000\.\.\. \(401 digits\)"),
    ("lm-head/manifest.json", lambda d: d.update(shape=[3, 3]), "shape"),
    ("lm-head/manifest.json", lambda d: d.update(raw_tensor_sha256="0" * 64), "raw_tensor_sha256"),
    ("manifest.json", lambda d: d["reference_hidden"].update(context_count=3), "context_count 3"),
    ("manifest.json", lambda d: d.update(total_scored_positions=1), "total_scored_positions 1"),
    # verify hashes the file capture_runtime names: a path out of the suite is refused on load
    ("manifest.json", lambda d: d["capture_runtime"].update(file="/etc/passwd"), "capture_runtime: file"),
    ("manifest.json", lambda d: d["capture_runtime"].update(file="../../x.json"), "capture_runtime: file"),
    ("manifest.json", lambda d: d["capture_runtime"].update(sha256="0"), "capture_runtime: field 'sha256'"),
    ("manifest.json", lambda d: d.update(capture_runtime="capture-runtime.json"),
     "capture_runtime: expected"),
])
def test_impossible_values_are_refused(tmp_path: Path, rel: str, change, message: str) -> None:  # type: ignore[no-untyped-def]
    fixture = fx.build(tmp_path / "suite", contexts=4)
    path = fixture.root / rel
    _mutate(path, change)
    loaders = {"suite-manifest.json": load_suite, "reference-hidden/manifest.json": fid.load_tensor_manifest,
               "lm-head/manifest.json": fid.load_lm_head, "manifest.json": fid.load_top_manifest}
    with pytest.raises(BadInput, match=message) as info:
        loaders[rel](path if rel != "lm-head/manifest.json" else path.parent)
    assert str(path) in str(info.value) or str(path.parent) in str(info.value)
    assert "\n" not in str(info.value)


def test_tensor_file_identity_problems(tmp_path: Path) -> None:
    fixture = fx.build(tmp_path / "suite", contexts=4)
    suite = load_suite(fixture.root)
    hidden = fid.load_tensor_manifest(fixture.root / fid.HIDDEN_DIR)
    # context 1's file copied over context 2's: the manifest's size matches, the header does not
    (fixture.root / fid.HIDDEN_DIR / "hidden_0002.safetensors").write_bytes(
        (fixture.root / fid.HIDDEN_DIR / "hidden_0001.safetensors").read_bytes())
    problems, _ = fid.check_tensor_file(hidden, 2, suite)
    assert any("context_index='1'" in p for p in problems)
    (fixture.root / fid.HIDDEN_DIR / "hidden_0003.safetensors").unlink()
    problems, _ = fid.check_tensor_file(hidden, 3, suite)
    assert problems and "missing" in problems[0]


def test_checksums_lines_are_checked() -> None:
    good = "a" * 64
    assert fid.parse_checksums(f"{good}  tokens/context-0000.json\n{good} *lm-head/weight.safetensors\n",
                               "c") == {"tokens/context-0000.json": good, "lm-head/weight.safetensors": good}
    for text, message in ((f"{good}  ../x\n", "path"), (f"{good}  checksums.txt\n", "never covers"),
                          (f"{good}  .cache/a\n", "never covers"), ("xyz  a\n", "line 1"),
                          (f"{good}  a\n{good}  a\n", "listed twice"), ("", "lists no files")):
        with pytest.raises(BadInput, match=message):
            fid.parse_checksums(text, "c")


def test_hashes() -> None:
    assert fid.domain_hash("s", "a", "b") == fx.sha_text("s\0a\0b")
    assert fid.dataset_fingerprint("d", "r", None, "train") == fx.sha_text(
        "hugging-face-dataset-slice-v1\0d\0r\0\0train")
    assert token_ids_hash([1, 2, 3]) == fx.sha_text("[1,2,3]")


def test_writer_output_passes_the_published_rules(tmp_path: Path) -> None:
    """A suite written through kldtui's writers (as finalize in hidden mode, the head export and
    prepare do) passes the published format's validation, checked independently of kldtui."""
    rng = np.random.default_rng(3)
    root = tmp_path / "made"
    contexts = [fid.NewContext(tokens=[int(t) for t in rng.integers(0, 50, 12)],
                               allocation_stratum=("prose", "code")[i % 2],
                               partition="qualification" if i == 3 else "analysis", sentinel=i == 0,
                               fields={"dataset": "d/x", "source_id": f"s{i}",
                                       "source_cluster_id": f"c{i // 2}"})
                for i in range(5)]
    suite = fid.write_context_suite(root, contexts, selection_salt="sel")
    fx.dump(root / "capture-runtime.json", {"status": "qualified"})
    runtime_sha = fx.sha_file(root / "capture-runtime.json")
    head = fid.write_lm_head(root / fid.LM_HEAD_DIR, rng.standard_normal((50, 8)).astype(np.float32),
                             checkpoint_tensor_key="lm_head.weight")
    records = []
    for w in suite.windows:
        written = fid.write_context_tensor(root / fid.HIDDEN_DIR, "hidden", w,
                                           rng.standard_normal((11, 8)).astype(np.float32))
        records.append(fid.tensor_record(w, written, request_id=f"r{w.index}", elapsed_seconds=0.1))
    fid.write_tensor_manifest(root / fid.HIDDEN_DIR, "hidden", suite, records, width=8, run_name="ref",
                              runtime_manifest="capture-runtime.json", runtime_manifest_sha256=runtime_sha)
    live = fid.write_context_tensor(root / "sentinel-live-logits" / "repeat-00", "logits", suite.windows[0],
                                    rng.standard_normal((11, 50)).astype(np.float32))
    fid.write_tensor_manifest(root / "sentinel-live-logits" / "repeat-00", "logits", suite,
                              [fid.tensor_record(suite.windows[0], live)], width=50, run_name="live",
                              runtime_manifest="capture-runtime.json", runtime_manifest_sha256=runtime_sha)
    fid.write_top_manifest(root, artifact_kind="test suite")
    fid.write_checksums(root)
    assert fx.check_published(root) == []
    assert head.raw_tensor_sha256 is not None
    with pytest.raises(FileExistsError):  # never overwritten
        fid.write_context_tensor(root / fid.HIDDEN_DIR, "hidden", suite.windows[0],
                                 np.zeros((11, 8), np.float32))
    with pytest.raises(BadInput, match="already holds an LM head"):
        fid.write_lm_head(root / fid.LM_HEAD_DIR, np.zeros((2, 2), np.float32), checkpoint_tensor_key="k")


def _status_refused(tmp_path: Path, status: object, mutate: Any) -> tuple[Path, str, str]:
    """A suite whose top-level manifest ``mutate`` gave ``status``: its path, the line loading it is
    refused with, and how that line shows the value."""
    fixture = fx.build(tmp_path / "suite", contexts=4)
    path = fixture.root / fid.TOP_MANIFEST
    _mutate(path, mutate)
    with pytest.raises(BadInput) as info:
        fid.load_top_manifest(path)
    shown = repr(status) if isinstance(status, str) else f"of type {type(status).__name__}"
    return path, str(info.value), shown


@pytest.mark.parametrize("status", ["implemented", "Qualified", 1, ["qualified"]])
def test_a_top_manifest_status_outside_the_three_is_refused(tmp_path: Path, status: object) -> None:
    """The top-level status is the replay check's verdict, which the dataset card quotes: it was
    read and never checked, so a card could claim anything."""
    path, error, shown = _status_refused(tmp_path, status, lambda d: d.update(status=status))
    assert error == (f"{path}: status {shown} is not one of 'qualified', 'not qualified', "
                     "'replay not checked'; download the suite again, or capture and finalize its "
                     "reference again")


@pytest.mark.parametrize("status", [*fid.TOP_STATUSES, None])
def test_the_top_manifest_statuses_kldtui_writes_load(tmp_path: Path, status: str | None) -> None:
    fixture = fx.build(tmp_path / "suite", contexts=4)
    path = fixture.root / fid.TOP_MANIFEST
    _mutate(path, lambda d: d.update(status=status) if status is not None else d.pop("status"))
    assert fid.load_top_manifest(path).raw.get("status") == status


@pytest.mark.parametrize("status", ["implemented", "Captured", 1])
def test_the_capture_runtime_status_of_a_top_manifest_is_checked_on_load(tmp_path: Path,
                                                                           status: object) -> None:
    """capture_runtime.status repeats capture-runtime.json's: kldtui writes "captured", the published
    suite says "qualified"; anything else was loaded unchecked."""
    path, error, shown = _status_refused(tmp_path, status,
                                         lambda d: d["capture_runtime"].update(status=status))
    assert error == (f"{path} capture_runtime: status {shown} is not one of 'captured', "
                     "'qualified'; download the suite again, or capture and finalize its reference "
                     "again")


@pytest.mark.parametrize("status", ["captured", "qualified", None, "absent"])
def test_the_capture_runtime_statuses_kldtui_and_the_published_suite_write_load(
        tmp_path: Path, status: str | None) -> None:
    """kldtui writes null where capture-runtime.json has no status."""
    fixture = fx.build(tmp_path / "suite", contexts=4)
    path = fixture.root / fid.TOP_MANIFEST
    _mutate(path, lambda d: d["capture_runtime"].update(status=status) if status != "absent"
            else d["capture_runtime"].pop("status"))
    assert fid.load_top_manifest(path).raw["capture_runtime"].get("status") == (
        None if status == "absent" else status)


def test_a_capture_runtime_file_whose_status_would_be_refused_is_not_written_into_a_top_manifest(
        tmp_path: Path) -> None:
    fixture = fx.build(tmp_path / "suite", contexts=4)
    top = fixture.root / fid.TOP_MANIFEST
    before = top.read_bytes()
    runtime = fixture.root / fid.CAPTURE_RUNTIME
    _mutate(runtime, lambda d: d.update(status="approved"))
    with pytest.raises(BadInput) as info:
        fid.write_top_manifest(fixture.root, artifact_kind="test suite")
    assert str(info.value) == (f"{runtime}: status 'approved' is not one of 'captured', 'qualified'; "
                               "download the suite again, or capture and finalize its reference again")
    assert top.read_bytes() == before  # nothing written that load would refuse


def test_a_selection_that_keeps_none_of_a_range_says_the_suites_unit(published: fx.Fixture,
                                                                      tmp_path: Path) -> None:
    """"no window of a..b is left by ..." was said of a hidden-state suite's contexts; strata name a
    logits suite's domains too, so each says its own unit."""
    from kldtui.formats.suite_writer import write_suite

    contexts = load_suite(published.root)
    first = contexts.windows[0]
    other = next(s for s in contexts.domain_counts if s != first.domain)
    with pytest.raises(BadInput, match=r"no context of 0\.\.0 is left by strata "):
        fid.ContextFilter(strata=(other,)).indices_within(contexts, 0, 1)
    windows = write_suite(tmp_path / "logits", [("prose", list(range(8))), ("code", list(range(8)))])
    with pytest.raises(BadInput, match=r"no window of 0\.\.0 is left by strata code"):
        fid.ContextFilter(strata=("code",)).indices_within(windows, 0, 1)


@pytest.mark.parametrize("shape", [[1, (1 << 24) + 1], [(1 << 24) + 1, 1]], ids=["hidden", "vocabulary"])
def test_an_lm_head_wider_than_any_model_is_refused(tmp_path: Path, shape: list[int]) -> None:
    """A head file holds its data, so its shape is bounded by its size; a sparse file has any size for
    free, and its shape was taken as the vocabulary and hidden width the disk plan reckons with."""
    from kldtui.formats.safetensors_io import encode_header

    weight = tmp_path / "lm-head" / fid.HEAD_FILE
    weight.parent.mkdir()
    header = encode_header({"lm_head.weight": ("BF16", tuple(shape))})
    with weight.open("wb") as handle:
        handle.write(header)
        handle.truncate(len(header) + 2 * shape[0] * shape[1])  # sparse: no data written
    with pytest.raises(BadInput, match="16,777,216") as info:
        fid.load_lm_head(weight.parent)
    assert str(weight) in str(info.value) and "\n" not in str(info.value)
