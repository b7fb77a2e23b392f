"""kldtui download / verify on a hidden-state suite, with the real huggingface_hub client against a
loopback Hub: subsets by range, partition, sentinels and strata fetch nothing beyond the subset;
checksums, suite and token hashes, tensor and LM-head identity are verified; a second run needs no
network; damage is named in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import KldError
from kldtui.formats import fidelity as fid
from kldtui.stages.reference_hidden import ensure_hidden_suite, ensure_suite
from kldtui.stages.verify import verify_path
from tests import fidelity_fixture as fx
from tests.hub_server import HubServer

pytest.importorskip("torch")
REPO = "kldtui-test/tiny-fidelity"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> fx.Fixture:
    return fx.build(tmp_path_factory.mktemp("hub") / "server", contexts=12)


@pytest.fixture()
def hub(published: fx.Fixture, monkeypatch: pytest.MonkeyPatch):
    with HubServer() as server:
        server.add_dataset(REPO, published.root)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


SUITE_LEVEL = {"checksums.txt", "manifest.json", "suite-manifest.json", "partitions.json", "sources.json",
               "source-registry.json", "capture-runtime.json", "reference-hidden/manifest.json",
               "lm-head/manifest.json"}


def _expected(published: fx.Fixture, contexts: list[int], runs: bool = False) -> set[str]:
    files = set(SUITE_LEVEL) | {"lm-head/weight.safetensors"}
    files |= {f"tokens/context-{i:04d}.json" for i in contexts}
    files |= {f"reference-hidden/hidden_{i:04d}.safetensors" for i in contexts}
    if runs:
        files.add("sentinel-live-logits/repeat-00/manifest.json")
        files |= {f"sentinel-live-logits/repeat-00/logits_{i:04d}.safetensors"
                  for i in contexts if published.sentinels[i]}
    return files


def test_subset_fetches_nothing_beyond_it(hub: HubServer, published: fx.Fixture, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "local"
    code = main(["download", REPO, "--local-dir", str(out), "--context-filter", "analysis",
                 "--stratum", fx.STRATA[0], "--stratum", fx.STRATA[1], "--start-context", "1"])
    assert code == 0, capsys.readouterr().err
    chosen = [i for i in range(1, 12) if published.partitions[i] == "analysis"
              and published.strata[i] in fx.STRATA[:2]]
    assert hub.fetched_files() == _expected(published, chosen)
    assert "hidden-state reference ready" in capsys.readouterr().out
    record = json.loads((out / ".kldtui-reference.json").read_text())
    assert record["windows"] == chosen and record["layout"] == "hidden-state suite"
    # verify checks what was downloaded (the record), and says the rest is not here
    result = verify_path(out)
    assert result.ok, result.failures
    assert result.windows == chosen
    assert any("not here (outside the selection)" in n for n in result.notes)
    # a second run over the complete folder uses no network
    before = len(hub.log)
    ref = ensure_suite(REPO, out, selection=fid.ContextFilter("analysis", fx.STRATA[:2], 1))
    assert ref.offline and len(hub.log) == before


def test_sentinels_and_their_runs(hub: HubServer, published: fx.Fixture, tmp_path: Path) -> None:
    out = tmp_path / "local"
    ref = ensure_hidden_suite(REPO, out, selection=fid.ContextFilter("sentinel"), sentinel_runs=True)
    sentinels = [i for i, s in enumerate(published.sentinels) if s]
    assert list(ref.contexts) == sentinels
    assert hub.fetched_files() == _expected(published, sentinels, runs=True)
    assert ref.verify is not None and ref.verify.ok


def test_verify_names_damage(hub: HubServer, published: fx.Fixture, tmp_path: Path) -> None:
    out = tmp_path / "local"
    ensure_hidden_suite(REPO, out, selection=fid.ContextFilter(start=0, stop=4))
    hidden = out / "reference-hidden" / "hidden_0002.safetensors"
    data = bytearray(hidden.read_bytes())
    data[-3] ^= 0x01
    hidden.write_bytes(bytes(data))
    (out / "reference-hidden" / "extra.bin").write_bytes(b"planted")
    result = verify_path(out, reverify=True)
    assert not result.ok
    text = "\n".join(result.failures)
    assert f"{hidden}: SHA-256" in text and "checksums.txt" in text
    assert "extra.bin: not listed in checksums.txt" in text
    # a head replaced by another of the same shape: its hashes no longer match
    (out / "reference-hidden" / "extra.bin").unlink()
    shutil.copy(hidden.with_name("hidden_0001.safetensors"), hidden)
    result = verify_path(out, reverify=True)
    assert any("context_index='1'" in f for f in result.failures)


def test_a_hidden_state_folder_alone(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "local"
    ensure_hidden_suite(REPO, out, selection=fid.ContextFilter(start=0, stop=3))
    # the downloaded folder lists all 12 contexts; 3 are here
    result = verify_path(out / "reference-hidden")
    assert result.kind == "hidden-state folder"
    assert sum("missing" in f for f in result.failures) == 9 and len(result.failures) == 9
    target = out / "reference-hidden" / "hidden_0001.safetensors"
    data = bytearray(target.read_bytes())
    data[-2] ^= 0x08
    target.write_bytes(bytes(data))
    result = verify_path(out / "reference-hidden")
    assert any(f.startswith(f"{target}: SHA-256") for f in result.failures)


def test_top_manifest_and_head_identity(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "local"
    ensure_hidden_suite(REPO, out, selection=fid.ContextFilter(start=0, stop=2))
    top = out / "manifest.json"
    doc = json.loads(top.read_text())
    doc["lm_head"]["file_sha256"] = "0" * 64
    top.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    result = verify_path(out)
    text = "\n".join(result.failures)
    assert "lm_head.file_sha256 differs" in text
    assert "manifest.json: SHA-256" in text  # checksums.txt no longer vouches for it either


def test_corrupt_file_on_the_hub_is_refused(hub: HubServer, published: fx.Fixture, tmp_path: Path) -> None:
    server_copy = tmp_path / "server"
    shutil.copytree(published.root, server_copy)
    target = server_copy / "reference-hidden" / "hidden_0001.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x10
    target.write_bytes(bytes(data))
    hub.add_dataset("kldtui-test/corrupt", server_copy)
    with pytest.raises(KldError,
                       match="hidden_0001.safetensors: context 0001 .* does not match checksums.txt"):
        ensure_hidden_suite("kldtui-test/corrupt", tmp_path / "local", selection=fid.ContextFilter(stop=3))
    assert not (tmp_path / "local" / "reference-hidden" / "hidden_0001.safetensors").exists()


def test_logits_suite_refuses_context_selections(tmp_path: Path) -> None:
    from tests.hub_server import make_dataset

    root = make_dataset(tmp_path / "logits", windows=2)
    with pytest.raises(KldError, match="a logits suite has windows"):
        ensure_suite(None, root, selection=fid.ContextFilter("analysis"))


def test_a_folder_of_another_repository_is_refused_before_any_request(
        hub: HubServer, published: fx.Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A complete folder was taken for any repository's suite (no look at its download record): a
    download of another repository into it answered "ready" with the first one's files. Its record is
    read as the logits download reads it: another repository is refused, one line naming the folder and
    what to do, exit 2, before any request; a download of its own that did not finish is resumed, not
    taken as complete."""
    other = "kldtui-test/other-fidelity"
    hub.add_dataset(other, published.root, commit="d" * 40)
    out = tmp_path / "local"
    subset = fid.ContextFilter(start=0, stop=3)
    first = ensure_hidden_suite(REPO, out, selection=subset)
    assert first.commit is not None
    before = len(hub.log)
    with pytest.raises(KldError) as refused:
        ensure_hidden_suite(other, out, selection=subset)
    assert refused.value.exit_code == 2
    assert str(refused.value) == (
        f"{out}: holds the suite downloaded from {REPO} (commit {first.commit[:12]}) "
        f"(.kldtui-reference.json), which a download of {other} would mix with or write over; download "
        f"{other} into a folder of its own (--local-dir, or [reference] local_dir), or delete this folder "
        "to download it here")
    capsys.readouterr()
    assert main(["download", other, "--local-dir", str(out), "--stop-context", "3"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"kldtui: error: {refused.value}"
    assert len(hub.log) == before
    # its own repository: complete, no network; a record of a download not finished: resumed at its commit
    assert ensure_hidden_suite(REPO, out, selection=subset).offline
    record_path = out / ".kldtui-reference.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "state": "downloading"}))
    events: list = []
    resumed = ensure_hidden_suite(REPO, out, selection=subset, emit=events.append)
    assert not resumed.offline and resumed.commit == first.commit
    assert any(f"was downloaded from commit {first.commit[:12]}" in getattr(e, "text", "") for e in events)
    assert not [r for r in hub.log[before:] if r.method == "GET" and r.path.endswith(".safetensors")]
    assert json.loads(record_path.read_text())["state"] == "finished"


def test_a_revision_move_sets_aside_the_old_commits_files_of_a_hidden_state_suite(
        hub: HubServer, published: fx.Fixture, tmp_path: Path) -> None:
    """A hidden-state suite moved to another revision: the old commit's files its checksums.txt listed that
    the new commit does not have here are set aside in .kldtui-previous/<old commit>/, so verify of the
    folder finds no file checksums.txt does not list."""
    out = tmp_path / "local"
    first = ensure_suite(REPO, out)
    assert first.commit is not None
    newer = hub.add_dataset(REPO, fx.build(tmp_path / "server-v2", contexts=6, seed=3).root, keep_older=True)
    moved = ensure_suite(REPO, out, revision="main")
    assert moved.commit == newer
    here = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    aside = f".kldtui-previous/{first.commit}/"
    assert {rel for rel in here if not rel.startswith(".")} == _expected(published, list(range(6)))
    assert {rel[len(aside):] for rel in here if rel.startswith(aside)} == {
        f"{kind}" for i in range(6, 12)
        for kind in (f"tokens/context-{i:04d}.json", f"reference-hidden/hidden_{i:04d}.safetensors")}
    result = verify_path(out)
    assert result.ok, result.failures
