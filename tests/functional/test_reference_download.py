"""ensure_reference / ``kldtui download`` with the real huggingface_hub client against a loopback Hub."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from kldtui.cli.main import main
from kldtui.errors import BadInput, Interrupted, StageFailed
from kldtui.events import Cancel, Event, Notice, Progress, StageFinished, StageStarted
from kldtui.formats.fidelity import ContextFilter
from kldtui.stages.reference import PARTIAL_DIR, ensure_reference
from kldtui.stages.reference_hidden import ensure_suite
from kldtui.stages.verify import PUBLISHED_REPO_ID, RECORD_NAME, verify_path
from tests.hub_server import HubServer, dead_endpoint, make_dataset

REPO = "kldtui-test/tiny-reference"
BIG_FILE = "ref/logits_000.safetensors"
CHUNK = hf_constants.DOWNLOAD_CHUNK_SIZE  # the client writes (and so resumes) in steps of this size


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    server_root = make_dataset(tmp_path / "server", windows=5)
    with HubServer() as server:
        server.add_dataset(REPO, server_root)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        server.root = server_root  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one window of 32 rows, wide enough for the file to span more than one client chunk (+1 MiB)
    vocab = (CHUNK + 2**20) // (32 * 4) + 1
    return make_dataset(tmp_path_factory.mktemp("big") / "server", windows=1, context_length=33,
                        vocab=vocab)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fresh_download_fetches_everything_and_verifies(hub: HubServer, tmp_path: Path) -> None:
    events: list = []
    out = tmp_path / "local"
    ref = ensure_reference(REPO, out, emit=events.append)
    assert not ref.offline and ref.window_range == (0, 5)
    assert ref.verify is not None and ref.verify.ok
    for i in range(5):
        name = f"ref/logits_{i:03d}.safetensors"
        assert _sha(out / name) == _sha(hub.root / name)  # type: ignore[attr-defined]
    assert sorted(ref.downloaded) == [f"ref/logits_{i:03d}.safetensors" for i in range(5)]
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["repo_id"] == REPO and record["windows"] == [0, 1, 2, 3, 4]
    assert len(record["commit"]) == 40
    # the logits came from the CDN origin after a 302 from the Hub, by GET; manifests first
    gets = [r for r in hub.log if r.method == "GET"]
    order = [r.path for r in gets]
    first_logits = min(i for i, p in enumerate(order) if p.endswith(".safetensors"))
    assert order.index("ref/manifest.json") < first_logits
    assert {r.origin for r in gets if r.path.endswith(".safetensors")} == {"cdn"}
    assert any(r.status == 302 and r.method == "HEAD" for r in hub.log)
    assert all(r.authorization is None for r in hub.log)
    # byte progress with totals, per file and overall
    overall = [e for e in events if isinstance(e, Progress) and e.task == "download"]
    assert all(e.total and e.total > 0 for e in overall)
    assert overall and overall[-1].done == overall[-1].total == sum(
        (hub.root / f"ref/logits_{i:03d}.safetensors").stat().st_size for i in range(5))  # type: ignore
    assert any(isinstance(e, Progress) and e.task == "logits_003.safetensors" and e.unit == "B"
               for e in events)
    assert {e.stage for e in events} == {"reference"}  # verification reports inside this stage
    assert not any((out / PARTIAL_DIR).glob("*.part"))
    assert verify_path(out).ok


def test_stop_window_fetches_only_the_needed_files(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "local"
    ref = ensure_reference(REPO, out, stop_window=2)
    assert ref.window_range == (0, 2)
    fetched = hub.fetched_files()
    logits = sorted(p for p in fetched if p.endswith(".safetensors"))
    assert logits == ["ref/logits_000.safetensors", "ref/logits_001.safetensors"]
    assert {f"tokens/window-{i:03d}-{d}.json" for i, d in
            [(0, "prose"), (1, "prose"), (2, "code"), (3, "code"), (4, "instruction")]} <= fetched
    assert not (out / "ref/logits_002.safetensors").exists()
    # a later run for more windows fetches only the missing ones
    before = len(hub.log)
    ensure_reference(REPO, out, start_window=1, stop_window=4)
    later = {r.path for r in hub.log[before:] if r.method == "GET" and r.path.endswith(".safetensors")}
    assert later == {"ref/logits_002.safetensors", "ref/logits_003.safetensors"}
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["windows"] == [0, 1, 2, 3]
    # `kldtui verify` of the partial folder checks the downloaded windows
    result = verify_path(out)
    assert result.ok and result.windows == [0, 1, 2, 3]


def test_strata_fetch_and_verify_only_their_domains_windows(hub: HubServer, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A run over some domains (``[run] strata``, ``kldtui download --stratum``) needs only their
    windows' logits: the others are neither fetched nor asked for by the verification."""
    out = tmp_path / "local"
    code_only = ContextFilter(strata=("code",))
    ref = ensure_reference(REPO, out, selection=code_only)
    assert ref.window_range == (0, 5) and ref.windows == (2, 3)
    assert ref.verify is not None and ref.verify.ok and ref.verify.windows == [2, 3]
    logits = sorted(p for p in hub.fetched_files() if p.endswith(".safetensors"))
    assert logits == ["ref/logits_002.safetensors", "ref/logits_003.safetensors"]
    assert sorted(p.name for p in (out / "ref").glob("*.safetensors")) == [
        "logits_002.safetensors", "logits_003.safetensors"]
    assert json.loads((out / RECORD_NAME).read_text())["windows"] == [2, 3]
    assert "2 window(s) of 0..4 (2, 3)" in ref.summary_line()
    # complete for that selection: no network the second time; another domain needs it
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    before = len(hub.log)
    again = ensure_reference(REPO, out, selection=code_only)
    assert again.offline and len(hub.log) == before
    with pytest.raises(StageFailed):
        ensure_reference(REPO, out, selection=ContextFilter(strata=("prose",)))
    with pytest.raises(BadInput, match="no stratum 'poetry'"):
        ensure_reference(REPO, out, selection=ContextFilter(strata=("poetry",)))
    # the CLI takes the same selection on a logits suite (a partition is for hidden-state suites)
    assert main(["download", REPO, "--local-dir", str(out), "--stratum", "code"]) == 0
    assert main(["download", REPO, "--local-dir", str(out), "--context-filter", "analysis"]) == 2


def test_complete_local_folder_needs_no_network(hub: HubServer, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "local"
    fetched: list[Event] = []
    ensure_reference(REPO, out, stop_window=3, emit=fetched.append)
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    before = len(hub.log)
    events: list[Event] = []
    ref = ensure_reference(REPO, out, stop_window=3, emit=events.append)
    assert ref.offline and ref.verify is not None and ref.verify.ok
    assert len(ref.verify.cached) == 3 and ref.verify.checked == []
    # each fact once: the verification's start and summary were said again as notices, and its
    # cached files twice (a notice before the summary said so)
    for said in (fetched, events):
        texts = [getattr(e, "text", "") or getattr(e, "summary", "") or getattr(e, "detail", "")
                 for e in said if isinstance(e, Notice | StageStarted | StageFinished)]
        assert len([t for t in texts if "verifying" in t]) == 1, texts
        assert len([t for t in texts if ref.verify.summary().split(":", 1)[0] in t]) == 1, texts
    assert [t for t in texts if "unchanged since verified" in t] == [
        f"reference ready (local): {ref.verify.summary()}"], texts
    assert len(hub.log) == before
    # in a fresh process: huggingface_hub is not even imported
    code = (
        "import sys\n"
        "from kldtui.stages.reference import ensure_reference\n"
        f"ref = ensure_reference({REPO!r}, {str(out)!r}, stop_window=3)\n"
        "print('offline', ref.offline, 'huggingface_hub' in sys.modules)\n"
    )
    env = {**os.environ, "HF_ENDPOINT": dead_endpoint()}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "offline True False" in proc.stdout
    # the CLI too, exit 0; a window that is not here needs the (dead) network: one-line error
    assert main(["download", REPO, "--local-dir", str(out), "--stop-window", "3"]) == 0
    assert main(["download", REPO, "--local-dir", str(out)]) == 1
    assert len(hub.log) == before


def test_offline_mode_with_an_incomplete_folder_fails_clearly(hub: HubServer, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(StageFailed, match="HF_HUB_OFFLINE"):
        ensure_reference(REPO, tmp_path / "local")
    with pytest.raises(BadInput, match="give a repository id"):
        ensure_reference(None, tmp_path / "local")
    with pytest.raises(StageFailed, match="the reference is incomplete and HF_HUB_OFFLINE is set"):
        ensure_suite(REPO, tmp_path / "local")  # kldtui download: its probe is not begun offline
    assert hub.log == []


def test_a_download_begun_offline_without_its_caller_s_words_says_what_to_do(
        hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """begin_download's offline line is optional (kldtui download's probe begins only online): without
    one, HF_HUB_OFFLINE is refused in a line naming the folder, the repository and what to do, and
    nothing is recorded or fetched."""
    from kldtui.stages.reference import begin_download

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = tmp_path / "local"
    with pytest.raises(StageFailed) as refused:
        begin_download(root, REPO, None, emit=lambda e: None, cancel=None)
    assert str(refused.value) == (f"{root}: HF_HUB_OFFLINE is set, so {REPO} is not downloaded here; "
                                  "unset it to download")
    assert not root.exists() and hub.log == []


def test_connection_dropped_mid_file_is_resumed_with_range(tmp_path: Path, big_dataset: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with HubServer() as hub:
        hub.add_dataset(REPO, big_dataset)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        hub.drop_after(BIG_FILE, CHUNK + 512 * 1024)
        ref = ensure_reference(REPO, tmp_path / "local")
        assert ref.verify is not None and ref.verify.ok
        gets = hub.requests(method="GET", path=BIG_FILE)
    assert len(gets) == 2
    assert gets[0].range is None and gets[0].body_bytes == CHUNK + 512 * 1024
    assert gets[1].range == f"bytes={CHUNK}-" and gets[1].status == 206
    size = (big_dataset / BIG_FILE).stat().st_size
    assert gets[1].body_bytes == size - CHUNK
    assert _sha(tmp_path / "local" / BIG_FILE) == _sha(big_dataset / BIG_FILE)


def test_interrupted_download_resumes_in_the_next_run(tmp_path: Path, big_dataset: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "local"
    with HubServer() as hub:
        hub.add_dataset(REPO, big_dataset)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        cancel = Cancel()

        def stop_after_first_bytes(event: object) -> None:
            if isinstance(event, Progress) and event.task == "logits_000.safetensors" and event.done > 0:
                cancel.set("test stops the download")

        with pytest.raises(Interrupted):
            ensure_reference(REPO, out, emit=stop_after_first_bytes, cancel=cancel)
        assert not (out / BIG_FILE).exists()
        parts = list((out / PARTIAL_DIR).glob("*.part"))
        assert len(parts) == 1 and parts[0].stat().st_size == CHUNK
        events: list = []
        ref = ensure_reference(REPO, out, emit=events.append)
        gets = hub.requests(method="GET", path=BIG_FILE)
    assert ref.verify is not None and ref.verify.ok
    assert [g.range for g in gets] == [None, f"bytes={CHUNK}-"]
    assert any(isinstance(e, Notice) and "resuming" in e.text for e in events)
    assert _sha(out / BIG_FILE) == _sha(big_dataset / BIG_FILE)
    assert not list((out / PARTIAL_DIR).glob("*.part"))


def test_corrupt_file_on_the_server_is_named_and_not_kept(hub: HubServer, tmp_path: Path) -> None:
    served = hub.root / "ref/logits_001.safetensors"  # type: ignore[attr-defined]
    data = bytearray(served.read_bytes())
    data[-3] ^= 0x55
    served.write_bytes(bytes(data))
    out = tmp_path / "local"
    with pytest.raises(StageFailed) as info:
        ensure_reference(REPO, out, stop_window=3)
    message = str(info.value)
    assert "logits_001.safetensors" in message and "SHA-256" in message and "\n" not in message
    assert not (out / "ref/logits_001.safetensors").exists()
    assert not list((out / PARTIAL_DIR).glob("*logits_001*"))


def test_missing_file_and_missing_repository(hub: HubServer, tmp_path: Path) -> None:
    (hub.root / "ref/logits_002.safetensors").unlink()  # type: ignore[attr-defined]
    with pytest.raises(StageFailed, match=r"ref/logits_002.safetensors: missing from .*404"):
        ensure_reference(REPO, tmp_path / "a")
    with pytest.raises(BadInput, match="repository not found"):
        ensure_reference("nobody/nothing", tmp_path / "b")
    with pytest.raises(BadInput, match="revision"):
        ensure_reference(REPO, tmp_path / "c", revision="no-such-branch")


def test_disk_space_is_checked_before_any_logits_transfer(hub: HubServer, tmp_path: Path) -> None:
    manifest_path = hub.root / "ref/manifest.json"  # type: ignore[attr-defined]
    doc = json.loads(manifest_path.read_text())
    for w in doc["windows"]:
        w["size_bytes"] = 2**60  # more than any disk
    manifest_path.write_text(json.dumps(doc))
    with pytest.raises(StageFailed) as info:
        ensure_reference(REPO, tmp_path / "local", stop_window=2)
    message = str(info.value)
    assert str(2 * 2**60) in message and "bytes) are free" in message
    assert not any(r.path.endswith(".safetensors") for r in hub.log)


def test_token_is_sent_to_the_hub_but_not_to_the_cdn(hub: HubServer, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    ensure_reference(REPO, tmp_path / "local", stop_window=1)
    hub_auth = {r.authorization for r in hub.log if r.origin == "hub"}
    cdn_auth = {r.authorization for r in hub.log if r.origin == "cdn"}
    assert hub_auth == {"Bearer hf_test_token"}
    assert cdn_auth == {None}


def test_published_repository_requires_the_published_suite_hash(hub: HubServer, tmp_path: Path) -> None:
    hub.add_dataset(PUBLISHED_REPO_ID, hub.root)  # type: ignore[attr-defined]
    with pytest.raises(StageFailed, match="published"):
        ensure_reference(PUBLISHED_REPO_ID, tmp_path / "local", stop_window=1)


def test_cli_download(hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "local"
    assert main(["download", REPO, "--local-dir", str(out), "--stop-window", "2"]) == 0
    captured = capsys.readouterr()
    assert "reference ready" in captured.out
    assert "[reference]" in captured.err  # plain progress lines when not on a terminal
    assert main(["download", REPO, "--local-dir", str(out), "--stop-window", "9"]) == 2
    assert "outside" in capsys.readouterr().err


def test_updated_repository_is_fetched_only_when_asked(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "local"
    first = ensure_reference(REPO, out, stop_window=2)
    new_root = make_dataset(tmp_path / "server-v2", windows=5, seed=7)
    new_commit = hub.add_dataset(REPO, new_root)
    assert new_commit != first.commit
    kept = ensure_reference(REPO, out, stop_window=2)  # complete here: no network, same files
    assert kept.offline and kept.commit == first.commit
    before = len(hub.log)
    updated = ensure_reference(REPO, out, stop_window=2, revision="main")
    assert not updated.offline and updated.commit == new_commit
    refetched = {r.path for r in hub.log[before:] if r.method == "GET" and r.path.endswith(".safetensors")}
    assert refetched == {"ref/logits_000.safetensors", "ref/logits_001.safetensors"}
    assert _sha(out / "ref/logits_001.safetensors") == _sha(new_root / "ref/logits_001.safetensors")
    assert verify_path(out).ok


def test_reference_range_words_name_a_hidden_state_suites_contexts(tmp_path: Path) -> None:
    """The reference stage's range words ("windows 0..31", "2 window(s) of 0..4 (2, 3)", "no complete
    reference suite here for the requested windows") said windows of a hidden-state suite too; they
    say its unit word now, contexts (a logits suite's stay windows: the test above)."""
    from kldtui.formats.suite import load_suite
    from kldtui.stages.reference import windows_text
    from tests import fidelity_fixture as fx

    root = tmp_path / "fid"
    fx.build(root, contexts=4)
    suite = load_suite(root)
    assert windows_text(suite, (0, 4), [0, 1, 2, 3]) == "contexts 0..3"
    assert windows_text(suite, (0, 4), [1, 2]) == "2 context(s) of 0..3 (1, 2)"
    with pytest.raises(BadInput) as refused:
        ensure_reference(None, root)
    assert "no complete reference suite here for the requested contexts " in str(refused.value), refused.value
    logits = make_dataset(tmp_path / "logits")
    assert windows_text(load_suite(logits), (0, 4), []) == "windows 0..3"


@pytest.mark.parametrize("listed", [["x", None, {"w": 0}], 5, [1.5, True, -1]],
                         ids=["not numbers", "not a list", "not whole numbers"])
def test_a_damaged_download_record_never_narrows_verify(tmp_path: Path, listed: object,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """verify checks the windows a download record lists ("checked the N window(s) downloaded into this
    folder"); a record whose list is not whole numbers crashed it (int(None): a traceback) or was read
    as windows (1.5 as window 1, True as 1). Such a record lists none: every window is checked."""
    from kldtui.stages.reference import write_record

    root = make_dataset(tmp_path / "ds", windows=3)
    (root / RECORD_NAME).write_text(json.dumps({"repo_id": REPO, "commit": "c" * 40, "windows": listed}))
    result = verify_path(root)
    assert result.ok and result.windows == [0, 1, 2], result.summary()
    assert not any("downloaded into this folder" in note for note in result.notes)
    assert main(["verify", str(root)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    write_record(root, REPO, None, "c" * 40, {2}, None)  # adds to the record's own windows
    assert json.loads((root / RECORD_NAME).read_text())["windows"] == [2]


OTHER = "kldtui-test/another-reference"


def test_a_download_of_another_repository_into_the_folder_is_refused_before_any_request(
        hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The folder's download record says which repository it holds: a download of another one over it
    (which fetched that suite's manifests over the first one's and its windows beside them) is refused,
    one line naming the folder and what to do, exit 2, before any request; so is one of a folder whose
    download did not finish. The same repository resumes there."""
    other_root = make_dataset(tmp_path / "other", windows=5, seed=3)
    hub.add_dataset(OTHER, other_root)
    out = tmp_path / "local"
    first = ensure_reference(REPO, out, stop_window=2)
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["state"] == "finished"
    before = len(hub.log)
    with pytest.raises(BadInput) as refused:
        ensure_reference(OTHER, out)
    assert str(refused.value) == (
        f"{out}: holds the suite downloaded from {REPO} (commit {first.commit[:12]}) ({RECORD_NAME}), which "
        f"a download of {OTHER} would mix with or write over; download {OTHER} into a folder of its own "
        "(--local-dir, or [reference] local_dir), or delete this folder to download it here")
    capsys.readouterr()
    assert main(["download", OTHER, "--local-dir", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"kldtui: error: {refused.value}"
    assert len(hub.log) == before  # nothing asked of the Hub
    assert json.loads((out / RECORD_NAME).read_text()) == record
    # a download under way (its record says so) is refused to another repository the same way
    (out / RECORD_NAME).write_text(json.dumps({**record, "state": "downloading"}))
    with pytest.raises(BadInput, match=f"holds a download, not finished, of {REPO} "):
        ensure_reference(OTHER, out)
    assert len(hub.log) == before
    ensure_reference(REPO, out)  # its own repository finishes it, and more windows
    assert json.loads((out / RECORD_NAME).read_text())["windows"] == [0, 1, 2, 3, 4]


def test_a_moving_revision_resumes_at_the_commit_the_folder_was_downloaded_at(
        hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile's revision = "main" against a folder missing some windows fetched main's newer commit's
    manifests over the folder (two commits in one folder). The download resumes at the commit its
    record names, and says so; where the Hub no longer has that commit it is refused, one line naming
    the folder and what to do, exit 2, before any file."""
    out, gone = tmp_path / "local", tmp_path / "gone"
    first = ensure_reference(REPO, out, stop_window=2, revision="main")
    ensure_reference(REPO, gone, stop_window=2, revision="main")
    old_root = hub.root  # type: ignore[attr-defined]
    newer = hub.add_dataset(REPO, make_dataset(tmp_path / "server-v2", windows=5, seed=7), keep_older=True)
    assert newer != first.commit
    before = len(hub.log)
    events: list = []
    ref = ensure_reference(REPO, out, revision="main", emit=events.append)
    assert ref.commit == first.commit and ref.verify is not None and ref.verify.ok
    assert [e.text for e in events if isinstance(e, Notice) and "downloaded from commit" in e.text] == [
        f"{out} was downloaded from commit {first.commit[:12]} (revision main); fetching the rest from that "
        "commit, so every file is of one commit"]
    assert not [r for r in hub.log[before:] if "/resolve/main/" in r.url]  # main was never asked for
    for rel in ["suite-manifest.json", "ref/manifest.json",
                *[f"ref/logits_{i:03d}.safetensors" for i in range(5)]]:
        assert _sha(out / rel) == _sha(old_root / rel), rel
    record = json.loads((out / RECORD_NAME).read_text())
    assert (record["revision"], record["commit"], record["windows"], record["state"]) == (
        "main", first.commit, [0, 1, 2, 3, 4], "finished")
    # a history rewritten: the commit is gone, and main's newer one would mix two suites
    hub.forget_commit(REPO, first.commit)
    before = len(hub.log)
    with pytest.raises(BadInput) as refused:
        ensure_reference(REPO, gone, revision="main")
    assert str(refused.value) == (
        f"{gone}: was downloaded from {REPO} at commit {first.commit[:12]}, which {hub.endpoint} dataset "
        f"{REPO} no longer has; the files still missing cannot come from it, and another commit's would mix "
        "two versions of the suite; download into a new folder (--local-dir, or [reference] local_dir), or "
        "delete this folder to download it again")
    capsys.readouterr()
    assert main(["download", REPO, "--local-dir", str(gone), "--revision", "main"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"kldtui: error: {refused.value}"
    assert not [r for r in hub.log[before:] if r.method == "GET"]
    assert json.loads((gone / RECORD_NAME).read_text())["commit"] == first.commit
    # what the line says to do: a new folder downloads main's newer commit
    assert ensure_reference(REPO, tmp_path / "new", revision="main").commit == newer


def test_an_empty_partial_file_is_started_again(hub: HubServer, tmp_path: Path) -> None:
    """A run killed after it created a logits file's partial file and before its first byte left it empty:
    every later run failed on it (FileExistsError, "run again to resume", for ever). It is started again."""
    out = tmp_path / "local"
    name = "ref/logits_001.safetensors"
    sha = _sha(hub.root / name)  # type: ignore[attr-defined]
    (out / PARTIAL_DIR).mkdir(parents=True)
    (out / PARTIAL_DIR / f"ref__logits_001.safetensors.{sha[:16]}.part").touch()
    ref = ensure_reference(REPO, out, stop_window=2)
    assert ref.verify is not None and ref.verify.ok
    assert _sha(out / name) == sha and not list((out / PARTIAL_DIR).glob("*.part"))


def test_verify_of_an_unfinished_download_says_so_first_and_exits_1(
        hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """verify on a folder whose download stopped (record state "downloading") listed the files not fetched
    yet as failures without saying why. Its first line says the download has not finished, naming the
    folder and the command that resumes it; the exit status is 1 even where every file there verifies."""
    out = tmp_path / "local"
    ensure_reference(REPO, out, stop_window=2)
    cancel = Cancel()

    def stop_at_the_first_logits_bytes(event: object) -> None:
        if isinstance(event, Progress) and event.unit == "B" and event.task != "hash":
            cancel.set("test stops the download")

    with pytest.raises(Interrupted):
        ensure_reference(REPO, out, emit=stop_at_the_first_logits_bytes, cancel=cancel)
    record = json.loads((out / RECORD_NAME).read_text())
    assert (record["state"], record["windows"]) == ("downloading", [0, 1])
    line = (f"{out}: the download of {REPO} (commit {record['commit'][:12]}) into this folder has not "
            f"finished ({RECORD_NAME}), so files may be missing; resume it: kldtui download {REPO} "
            f"--local-dir {out}")
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1  # the windows recorded (0, 1) verify; the folder is not the suite
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[:2] == [f"[verify] dataset {out}", f"[verify] warning: {line}"], err  # before any check
    assert [x for x in err if x.startswith("FAIL ")] == [f"FAIL {line}"], err
    assert "FAILED (1 problem)" in captured.out
    assert main(["verify", str(out), "--stop-window", "5"]) == 1
    fails = [x for x in capsys.readouterr().err.splitlines() if x.startswith("FAIL ")]
    assert fails[0] == f"FAIL {line}" and len(fails) > 1  # then the files not fetched yet
    # the command the line names resumes it; then verify says OK
    assert main(["download", REPO, "--local-dir", str(out)]) == 0
    assert main(["verify", str(out)]) == 0


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).as_posix().startswith((".cache/", PARTIAL_DIR))}


def test_a_revision_move_leaves_the_folder_holding_one_commits_files(hub: HubServer, tmp_path: Path) -> None:
    """Moving a folder to another revision left the old commit's files the new one does not have here
    (windows outside the range, token files of other names) in the folder, unrecorded. They are set
    aside in .kldtui-previous/<old commit>/; what the folder's manifests never listed is left alone."""
    out = tmp_path / "local"
    first = ensure_reference(REPO, out)
    assert first.commit is not None
    (out / "notes.txt").write_text("mine\n")
    (out / "lm-head").mkdir()
    (out / "lm-head" / "head.bin").write_bytes(b"head")
    old = {rel: (out / rel).read_bytes() for rel in _tree(out)}
    new_root = make_dataset(tmp_path / "server-v2", windows=3, seed=7)  # token files of other names
    newer = hub.add_dataset(REPO, new_root, keep_older=True)
    events: list = []
    moved = ensure_reference(REPO, out, revision="main", stop_window=2, emit=events.append)
    assert moved.commit == newer and moved.verify is not None and moved.verify.ok
    aside = f".kldtui-previous/{first.commit}"
    kept = {"suite-manifest.json", "ref/manifest.json", "tokens/window-000-prose.json",
            "tokens/window-001-code.json", "tokens/window-002-instruction.json", "ref/logits_000.safetensors",
            "ref/logits_001.safetensors", "notes.txt", "lm-head/head.bin", RECORD_NAME}
    set_aside = {"ref/logits_002.safetensors", "ref/logits_003.safetensors", "ref/logits_004.safetensors",
                 "tokens/window-001-prose.json", "tokens/window-002-code.json", "tokens/window-003-code.json",
                 "tokens/window-004-instruction.json"}
    assert _tree(out) == kept | {f"{aside}/{rel}" for rel in set_aside}
    for rel in set_aside:
        assert (out / aside / rel).read_bytes() == old[rel], rel
    for rel in kept - {"notes.txt", "lm-head/head.bin", RECORD_NAME}:
        assert _sha(out / rel) == _sha(new_root / rel), rel
    assert (out / "notes.txt").read_text() == "mine\n"
    record = json.loads((out / RECORD_NAME).read_text())
    assert (record["commit"], record["windows"], record["state"]) == (newer, [0, 1], "finished")
    assert "moving_from" not in record
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert any(t.startswith(f"{out} holds files of commit {first.commit[:12]}; moving it to commit "
                            f"{newer[:12]}") for t in texts), texts
    assert any(t.startswith(f"7 file(s) of commit {first.commit[:12]} that commit {newer[:12]} does not "
                            f"have here set aside in {out / aside} (") for t in texts), texts
    assert verify_path(out).ok


def test_a_file_the_verified_cache_does_not_know_is_fetched_again_when_it_does_not_match(
        hub: HubServer, tmp_path: Path) -> None:
    """A file in the range whose hash the verified cache did not know (a copy: another inode) was kept and
    then failed the verification. It is hashed, and fetched again when it is not the recorded commit's."""
    import shutil

    out = tmp_path / "local"
    first = ensure_reference(REPO, out, stop_window=2)
    new_root = make_dataset(tmp_path / "server-v2", windows=5, seed=7)
    newer = hub.add_dataset(REPO, new_root, keep_older=True)
    assert newer != first.commit
    name = out / "ref/logits_001.safetensors"
    shutil.copyfile(name, tmp_path / "copy")
    os.replace(tmp_path / "copy", name)  # another inode: the cache does not know it
    before = len(hub.log)
    events: list = []
    ref = ensure_reference(REPO, out, stop_window=2, revision="main", emit=events.append)
    assert ref.commit == newer and ref.verify is not None and ref.verify.ok
    got = {r.path for r in hub.log[before:] if r.method == "GET" and r.path.endswith(".safetensors")}
    assert got == {"ref/logits_000.safetensors", "ref/logits_001.safetensors"}
    assert _sha(name) == _sha(new_root / "ref/logits_001.safetensors")
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert f"1 file(s) here not verified yet: hashing them against ref/manifest.json of commit {newer[:12]}" \
        in texts, texts
    # the same commit: a file changed in place (its cache record no longer applies) is fetched again too
    data = bytearray(name.read_bytes())
    data[-3] ^= 0x55
    name.write_bytes(bytes(data))
    before = len(hub.log)
    ref = ensure_reference(REPO, out, stop_window=3, revision="main")
    got = {r.path for r in hub.log[before:] if r.method == "GET" and r.path.endswith(".safetensors")}
    assert got == {"ref/logits_001.safetensors", "ref/logits_002.safetensors"}
    assert ref.verify is not None and ref.verify.ok


def test_a_revision_move_follows_no_link(hub: HubServer, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A link at a listed name is what is set aside, not what it points to; a link where kldtui makes a
    set-aside folder stops the move with one line naming it, exit 2, and nothing is written through it."""
    import shutil

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.json").write_text("theirs\n")
    out = tmp_path / "local"
    first = ensure_reference(REPO, out)
    assert first.commit is not None
    token = out / "tokens/window-004-instruction.json"
    token.unlink()
    token.symlink_to(outside / "theirs.json")
    hub.add_dataset(REPO, make_dataset(tmp_path / "server-v2", windows=3, seed=7), keep_older=True)
    blocked = tmp_path / "blocked"
    shutil.copytree(out, blocked, symlinks=True)
    ensure_reference(REPO, out, revision="main")
    moved = out / f".kldtui-previous/{first.commit}/tokens/window-004-instruction.json"
    assert moved.is_symlink() and (outside / "theirs.json").read_text() == "theirs\n"
    # a link at the set-aside folder's name: refused, nothing written outside
    (blocked / ".kldtui-previous").symlink_to(outside, target_is_directory=True)
    capsys.readouterr()
    assert main(["download", REPO, "--revision", "main", "--local-dir", str(blocked)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == (f"kldtui: error: {blocked / '.kldtui-previous'}: a link or a file, not a folder kldtui "
                    "made; move it away and run the download again"), last
    assert sorted(p.name for p in outside.iterdir()) == ["theirs.json"]
    (blocked / ".kldtui-previous").unlink()
    assert main(["download", REPO, "--revision", "main", "--local-dir", str(blocked)]) == 0
    assert verify_path(blocked).ok
