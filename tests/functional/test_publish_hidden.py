"""``kldtui publish`` of a hidden-state suite: verified whole first (one-line refusals, exit 2), a
card whose figures are the folder's, only the files checksums.txt lists go up, resumable after a
kill; and the round trip: a suite kldtui captured (embedded server, hidden mode) published to a
loopback Hub with the real huggingface_hub, downloaded in part, verified, and compared against
with the same report as against the local folder."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.embedded.model import TinyModel
from kldtui.formats import fidelity as fid
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.suite import load_suite
from kldtui.metrics.replay import f32_to_bf16
from kldtui.workflow.profile import profile_from_dict
from tests import fidelity_fixture as fx
from tests.fixtures_capture_run import serve_capture_finalize
from tests.fixtures_commands import started_from_a_venv
from tests.hub_server import HubServer
from tests.paths import REPO as REPO_ROOT

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(300)
VOCAB, SEED, LENGTH, CONTEXTS = 512, 11, 40, 6
REPO = "me/tiny-hidden"


# -- a suite kldtui captured --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hidden-state suite captured by kldtui through the embedded server (hidden mode, a replay
    check on the sentinels), head exported first so finalize writes the whole published layout."""
    base = tmp_path_factory.mktemp("made")
    root = base / "suite"
    model = TinyModel(VOCAB, seed=SEED)
    contexts = [fid.NewContext(model.sample(LENGTH, seed=i), "prose" if i < 4 else "code",
                               partition="qualification" if i in (2, 5) else "analysis", sentinel=i in (1, 4),
                               fields={"dataset": "d/wiki" if i < 4 else "d/code", "source_id": f"s{i}",
                                       "source_cluster_id": f"c{i // 2}", "dataset_split": "train"})
                for i in range(CONTEXTS)]
    fid.write_context_suite(root, contexts)
    fid.write_lm_head(root / fid.LM_HEAD_DIR, f32_to_bf16(model.head), checkpoint_tensor_key="lm_head.weight")
    profile = profile_from_dict({
        "reference": {"local_dir": str(root)},
        "candidate": {"kind": "embedded", "served_model_name": "ref", "model_seed": SEED, "vocab_size": VOCAB,
                      "port": 0, "startup_timeout": 60.0, "request_timeout": 60.0},
        "run": {"workdir": str(base / "work"), "run_name": "hidden"},
        "capture": {"mode": "hidden", "replay_check": 2}}, base_dir=base)
    serve_capture_finalize(profile, root / fid.HIDDEN_DIR, "reference")
    assert (root / fid.CHECKSUMS).is_file() and (root / fid.TOP_MANIFEST).is_file()
    return root


def _candidate(suite_root: Path, out: Path) -> Path:
    """A candidate's finalized logits: the tiny model with its weights perturbed."""
    suite = load_suite(suite_root)
    model = TinyModel(VOCAB, seed=SEED, perturb=0.05)
    written = [write_logits_array(out, w, model.logits(model.hidden(suite.load_tokens(w))[:-1]),
                                  suite.context_length) for w in suite.windows]
    write_logits_manifest(out, suite, written, kind="candidate")
    return out


def _copy(root: Path, dest: Path) -> Path:
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(".kldtui*", ".cache"))
    return dest


def _hub_env(monkeypatch: pytest.MonkeyPatch, hub: HubServer) -> None:
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_DISABLE_XET", True)  # the loopback Hub speaks LFS
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def _lfs_files(root: Path) -> list[str]:
    return [rel for rel in fid.read_checksums(root) if rel.endswith(".safetensors")]


# -- the card tells the truth --------------------------------------------------------------------------
def check_card(card: str, root: Path, repo_id: str) -> None:
    """Every figure the card states, recomputed from the folder's JSON and files with the standard
    library (not kldtui's readers)."""
    suite = json.loads((root / "suite-manifest.json").read_text())
    hidden = json.loads((root / "reference-hidden" / "manifest.json").read_text())
    head = json.loads((root / "lm-head" / "manifest.json").read_text())
    contexts = suite["contexts"]
    n, length = len(contexts), suite["context_length"]
    vocab, width = head["shape"]
    assert f"- {n:,} contexts of {length:,} tokens; {length - 1:,} scored positions each, " \
           f"{n * (length - 1):,} in all" in card
    assert f"- hidden size {hidden['hidden_width']:,}; vocabulary {vocab:,}" in card and width == \
        hidden["hidden_width"]
    hidden_bytes = sum((root / "reference-hidden" / r["file"]).stat().st_size for r in hidden["contexts"])
    head_bytes = (root / "lm-head" / "weight.safetensors").stat().st_size
    f32 = n * (length - 1) * vocab * 4
    assert f"({hidden_bytes:,} bytes, " in card and f"({head_bytes:,} bytes, BF16 [{vocab}, {width}]" in card
    assert "full F32 logits: " in card and f"({f32:,} bytes, " in card
    assert f"are {f32 / (hidden_bytes + head_bytes):.1f}x smaller" in card
    analysis = sum(c["partition"] == "analysis" for c in contexts)
    clusters = {json.dumps([c.get("dataset"), c.get("source_cluster_id")]) for c in contexts}
    sentinels = sum(c["sentinel"] for c in contexts)
    assert (f"- {analysis:,} analysis and {n - analysis:,} qualification contexts; "
            f"{sentinels:,} sentinel contexts; {len(clusters):,} source clusters") in card
    for stratum in {c["allocation_stratum"] for c in contexts}:
        mine = [c for c in contexts if c["allocation_stratum"] == stratum]
        parts = [sum(c["partition"] == p for c in mine) for p in ("analysis", "qualification")]
        row = (f"| {stratum} | {len(mine)} | {parts[0]} | {parts[1]} | {sum(c['sentinel'] for c in mine)} | "
               f"{len({(c.get('dataset'), c.get('source_cluster_id')) for c in mine})} |")
        assert row in card, row
    assert f"- suite token hash: {suite['suite_token_hash_sha256']}" in card
    check = json.loads((root / "validation" / "hidden-replay-qualification.json").read_text())
    assert f"records status **{check['status']}**" in card
    if "kl_live_to_replay" in check:
        kl = check["kl_live_to_replay"]
        assert f"| mean KL | {kl['mean']:.6g} |" in card and f"| p99.9 KL | {kl['p99_9']:.6g} |" in card
        assert f"| max KL | {kl['max']:.6g} |" in card
        # six significant digits, in exponent form when tiny (fixed decimals read a tiny one as 0.000000)
        said = re.search(r"\| top-1 agreement \| ([-+0-9.e]+) \|", card)
        assert said is not None and float(said.group(1)) == pytest.approx(check["top1_agreement"], rel=1e-5)
        assert f"{check['contexts']} contexts ({check['positions']:,} positions)" in card
    assert f"kldtui download {repo_id} --local-dir reference" in card
    assert "kldtui compare --suite-manifest reference/suite-manifest.json --reference-dir " \
           "reference/reference-hidden" in card
    assert 'local_dir = "reference", logits_dir = "reference-hidden"' in card


def test_dry_run_prints_a_true_card_and_the_listed_files_and_writes_nothing(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", REPO, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert f", {len(fid.read_checksums(root))} files hashed (" in err  # every listed file, each a file
    card, _, listing = out.partition(f"files would be uploaded to dataset {REPO}:")
    check_card(card, root, REPO)
    assert "records status **qualified**" in card  # the embedded model's replay is exact
    # the card quotes capture-runtime.json without kldtui's own token of the server start
    assert json.loads((root / fid.CAPTURE_RUNTIME).read_text())["runtime"]["server_start"]
    assert "server_start" not in card and '"kind": "embedded"' in card, card
    shown = re.findall(r"^\s+([\d,]+)  (\S+)$", listing, re.M)
    expected = sorted([*fid.read_checksums(root), "checksums.txt", "README.md"])
    assert [rel for _, rel in shown] == expected
    for size, rel in shown:
        if rel != "README.md":
            assert int(size.replace(",", "")) == (root / rel).stat().st_size, rel
    assert after_is(root, before)


def after_is(root: Path, before: dict[Path, bytes]) -> bool:
    now = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}
    return now == before


def test_another_tools_suite_gets_a_true_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The published format written by another tool (no replay figures, only a status)."""
    f = fx.build(tmp_path / "suite", contexts=12)
    capsys.readouterr()
    assert main(["publish", str(f.root), "--repo-id", REPO, "--dry-run"]) == 0
    out = capsys.readouterr().out
    check_card(out, f.root, REPO)
    assert "It records no figures" in out


# -- refusals: one line, the file, what to do, exit 2 ---------------------------------------------------
def _refused(capsys: pytest.CaptureFixture[str], root: Path, *needles: str) -> str:
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", REPO, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    for needle in needles:
        assert needle in err, err
    return err


def test_refuses_what_does_not_verify(made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    target = root / "reference-hidden" / "hidden_0003.safetensors"
    data = bytearray(target.read_bytes())
    data[-2] ^= 0x40
    target.write_bytes(bytes(data))
    _refused(capsys, root, f"{target}: SHA-256", "publish refuses a suite that does not verify")
    shutil.copy(made / "reference-hidden" / "hidden_0003.safetensors", target)
    # a file nobody listed
    (root / "notes.txt").write_text("mine\n")
    _refused(capsys, root, f"{root / 'notes.txt'}: not listed in checksums.txt")
    (root / "notes.txt").unlink()
    # the top-level manifest names another head
    top = json.loads((root / "manifest.json").read_text())
    top["lm_head"]["file_sha256"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    _refused(capsys, root, "lm_head.file_sha256 differs")


def test_refuses_a_subset(made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    (root / "reference-hidden" / "hidden_0005.safetensors").unlink()
    gone = root / "reference-hidden" / "hidden_0005.safetensors"
    _refused(capsys, root, f"{gone}: listed in checksums.txt but missing", "--context-filter all")


def test_refuses_links(made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    # the same bytes through a link: verify's hashes pass, the upload would follow it
    outside = tmp_path / "elsewhere.json"
    shutil.move(root / "tokens" / "context-0002.json", outside)
    (root / "tokens" / "context-0002.json").symlink_to(outside)
    _refused(capsys, root, f"{root / 'tokens' / 'context-0002.json'}: a symbolic link")
    (root / "tokens" / "context-0002.json").unlink()
    shutil.move(outside, root / "tokens" / "context-0002.json")
    # a folder on the way
    shutil.move(root / "lm-head", tmp_path / "head-elsewhere")
    (root / "lm-head").symlink_to(tmp_path / "head-elsewhere")
    _refused(capsys, root, f"{root / 'lm-head'}: a symbolic link")


def test_refuses_secrets_it_cannot_redact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = fx.build(tmp_path / "suite", contexts=8)
    secret = "hf_" + "k" * 34
    sources = json.loads((f.root / "sources.json").read_text())
    sources[0]["metadata"]["fetched_with"] = secret
    (f.root / "sources.json").write_text(json.dumps(sources, indent=2, sort_keys=True) + "\n")
    fid.write_checksums(f.root)  # so the suite verifies: only the secret is wrong
    err = _refused(capsys, f.root, f"{f.root / 'sources.json'}: holds what looks like a secret",
                   "publish does not rewrite it")
    assert secret not in err


def test_refuses_a_stale_replay_check(made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    path = root / "validation" / "hidden-replay-qualification.json"
    doc = json.loads(path.read_text())
    doc["hidden_manifest_sha256"] = "1" * 64
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    fid.write_checksums(root)
    _refused(capsys, root, f"{path}: hidden_manifest_sha256 111111111111... is not", "finalize again")


def test_head_payload_is_checked_even_when_the_file_hash_is_cached(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A head whose stated payload hash is not its payload's, every other hash consistent: verify
    says so when it hashes the file; once the verified-file cache vouches for the file, publish
    still checks the payload it states on the card."""
    root = _copy(made, tmp_path / "suite")
    head = fid.load_lm_head(root / "lm-head")
    weight = fid.head_bits(head).copy()
    wrong = "2" * 64
    (root / "lm-head" / "weight.safetensors").unlink()
    written = fid.write_tensor_file(root / "lm-head" / "weight.safetensors", "weight", weight,
                                    {"checkpoint_tensor_key": "lm_head.weight", "raw_tensor_sha256": wrong})
    doc = json.loads((root / "lm-head" / "manifest.json").read_text())
    doc.update(raw_tensor_sha256=wrong, file_sha256=written.sha256, size_bytes=written.size_bytes)
    (root / "lm-head" / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    top = json.loads((root / "manifest.json").read_text())
    top["lm_head"].update(raw_tensor_sha256=wrong, file_sha256=written.sha256)
    (root / "manifest.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    fid.write_checksums(root)
    assert main(["verify", str(root)]) == 1  # hashed now: the payload is not what is stated
    assert main(["verify", str(root)]) == 1  # and again: the cache does not vouch for a head that failed
    capsys.readouterr()
    _refused(capsys, root, f"{root / 'lm-head' / 'weight.safetensors'}: the tensor payload's SHA-256",
             "export the head again")


# -- upload, resume after a kill, round trip -------------------------------------------------------------
@pytest.mark.slow  # a signal and a rerun: a child process killed in mid-upload, then publish again
def test_a_killed_upload_resumes_with_only_what_is_missing(made: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = _copy(made, tmp_path / "suite")
    (root / ".kldtui-mine.json").write_text("{}")  # local state never goes up
    (root / ".cache").mkdir()
    (root / ".cache" / "x").write_text("client state")
    lfs = _lfs_files(root)
    with HubServer() as hub:
        _hub_env(monkeypatch, hub)
        hub.hold_uploads_after(3)
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_XET": "1",
               "PYTHONPATH": str(REPO_ROOT)}
        child = subprocess.Popen([sys.executable, "-m", "kldtui", "publish", str(root), "--repo-id", REPO],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert hub.wait_held(120), "the upload never reached its fourth file"
            deadline = time.monotonic() + 30
            while hub.uploads_stored < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            child.kill()
            child.wait(30)
        finally:
            hub.release()
            if child.poll() is None:
                child.kill()
        stored = hub.uploads_stored
        # killed before anything was committed, with the held uploads not stored (under load a request
        # the killed client sent earlier may still be stored after release: the rerun skips it too)
        assert 3 <= stored < len(lfs) and not hub.commits
        puts_before = len(hub.requests(method="PUT", origin="cdn"))
        assert main(["publish", str(root), "--repo-id", REPO]) == 0
        second = [r for r in hub.requests(method="PUT", origin="cdn")[puts_before:] if r.status == 200]
        assert len(second) == len(lfs) - stored  # only what was missing
        remote = hub.repo_folder(REPO)
        got = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file())
        assert got == sorted([*fid.read_checksums(root), "checksums.txt", "README.md"])
        for rel in got:
            if rel != "README.md":
                assert hashlib.sha256((remote / rel).read_bytes()).digest() == \
                    hashlib.sha256((root / rel).read_bytes()).digest(), rel
        check_card((remote / "README.md").read_text(), root, REPO)
        # once more: nothing changed, nothing is sent or committed
        commits, puts = len(hub.commits), len(hub.requests(method="PUT"))
        assert main(["publish", str(root), "--repo-id", REPO]) == 0
        assert len(hub.commits) == commits and len(hub.requests(method="PUT")) == puts
    assert not (root / "README.md").exists()  # the card is not one of the suite's files
    assert main(["verify", str(root)]) == 0


VOLATILE = {"created_utc", "elapsed_seconds", "positions_per_second", "throughput_gb_per_s"}


def _report(path: Path) -> dict[str, Any]:
    """A report without what names where and how fast it was made (absolute paths, times)."""
    doc = json.loads(path.read_text())

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()
                    if k not in VOLATILE}
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, str) and ("/" in value and str(Path(value).anchor) == "/"):
            return "<path>"
        return value

    return clean(doc)  # type: ignore[no-any-return]


def test_round_trip_publish_download_verify_compare(made: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    cand = _candidate(root, tmp_path / "candidate")
    with HubServer() as hub:
        _hub_env(monkeypatch, hub)
        capsys.readouterr()
        assert main(["publish", str(root), "--repo-id", REPO]) == 0
        total = sum((root / rel).stat().st_size for rel in [*fid.read_checksums(root), "checksums.txt"])
        from kldtui.text import human_bytes

        assert f"uploading {len(fid.read_checksums(root)) + 1} files ({human_bytes(total)}) and the card" in \
            capsys.readouterr().err
        remote = hub.repo_folder(REPO)
        hub.add_dataset(REPO, remote)  # served for download from what was uploaded
        for name, flags, chosen in (
                ("range", ["--start-context", "1", "--stop-context", "4"], [1, 2, 3]),
                ("partition", ["--context-filter", "qualification"], [2, 5])):
            local = tmp_path / f"down-{name}"
            hub.log.clear()
            assert main(["download", REPO, "--local-dir", str(local), *flags]) == 0, capsys.readouterr().err
            fetched = hub.fetched_files()
            hidden = {rel for rel in fetched if rel.startswith("reference-hidden/hidden_")}
            assert hidden == {f"reference-hidden/hidden_{i:04d}.safetensors" for i in chosen}
            assert {rel for rel in fetched if rel.startswith("tokens/")} == {
                f"tokens/context-{i:04d}.json" for i in chosen}
            assert "README.md" not in fetched and not any(r.startswith("sentinel-") for r in fetched)
            assert main(["verify", str(local)]) == 0
            reports = []
            for suite_dir in (root, local):
                out = tmp_path / f"{name}-{suite_dir.name}.json"
                assert main(["compare", "--suite-manifest", str(suite_dir / "suite-manifest.json"),
                             "--reference-dir", str(suite_dir / "reference-hidden"),
                             "--candidate-dir", str(cand),
                             "--output", str(out), "--bootstrap-samples", "200", "--backend", "numpy",
                             "--plain", *flags]) == 0
                reports.append(_report(out))
            assert reports[0] == reports[1]  # the reference's identity and hashes included
            assert reports[0]["positions"] == len(chosen) * (LENGTH - 1)


def test_a_full_hub_snapshot_verifies_with_its_card_and_nothing_else_unlisted(
        made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A full snapshot of the published repository (huggingface_hub's snapshot_download, what `hf
    download` gives) holds the card, README.md, which checksums.txt does not list: verify accepts it
    as the card and says so, and still fails any other file nobody listed, a README.md anywhere else,
    a link under the card's name, and a card checksums.txt lists with another hash."""
    from huggingface_hub import snapshot_download

    root = _copy(made, tmp_path / "suite")
    with HubServer() as hub:
        _hub_env(monkeypatch, hub)
        assert main(["publish", str(root), "--repo-id", REPO]) == 0
        hub.add_dataset(REPO, hub.repo_folder(REPO))
        snap = Path(snapshot_download(REPO, repo_type="dataset", local_dir=tmp_path / "snap",
                                      endpoint=hub.endpoint))
    card = snap / "README.md"
    assert card.is_file() and "README.md" not in fid.read_checksums(snap)
    capsys.readouterr()
    assert main(["verify", str(snap)]) == 0
    out, err = capsys.readouterr()
    assert f"{card}: the dataset card the Hub shows; not part of the suite's data" in err
    assert out.startswith(f"hidden-state suite {snap}: OK")

    def fails(*needles: str) -> None:
        capsys.readouterr()
        assert main(["verify", str(snap)]) == 1
        err = capsys.readouterr().err
        for needle in needles:
            assert needle in err, err

    strangers = (snap / "notes.txt", snap / "reference-hidden" / "README.md", snap / "tokens" / "README.md")
    for stranger in strangers:
        stranger.write_text("mine\n")
        fails(f"FAIL {stranger}: not listed in checksums.txt, so nothing vouches for it; remove it")
        stranger.unlink()
    moved = tmp_path / "card-elsewhere.md"  # a link under the card's name is not taken for the card
    shutil.move(card, moved)
    card.symlink_to(moved)
    fails(f"FAIL {card}: not listed in checksums.txt")
    card.unlink()
    shutil.move(moved, card)
    # finalize's writer leaves the card out, so the card publish writes never contradicts a listed hash
    fid.write_checksums(snap)
    assert "README.md" not in fid.read_checksums(snap)
    assert main(["verify", str(snap)]) == 0
    # a card another tool's checksums.txt lists is one of the suite's files: checked like any other
    with (snap / "checksums.txt").open("a") as listing:
        listing.write(f"{'0' * 64}  README.md\n")
    fails(f"FAIL {card}: SHA-256")


def test_a_card_checksums_lists_goes_up_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another tool's checksums.txt may list its own card: it is then one of the suite's files, and a
    card of kldtui's over it would contradict the listed hash on the Hub."""
    f = fx.build(tmp_path / "suite", contexts=4)
    theirs = "# their card\n"
    (f.root / "README.md").write_text(theirs)
    with (f.root / "checksums.txt").open("a") as listing:
        listing.write(f"{hashlib.sha256(theirs.encode()).hexdigest()}  README.md\n")
    capsys.readouterr()
    assert main(["publish", str(f.root), "--repo-id", REPO, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(theirs) and "hidden-state reference" not in out
    assert f"{f.root / 'README.md'}: listed in checksums.txt, so it is the suite's own card" in err
    assert len(re.findall(r"\sREADME\.md$", out, re.M)) == 1


def test_an_unfinished_suite_says_how_to_finish_it(made: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    (root / "checksums.txt").unlink()
    _refused(capsys, root, f"{root / 'checksums.txt'}: not found; the suite is not finished",
             "kldtui finalize --mode hidden")
    # hidden states beside a suite of windows: not the published layout
    from tests.hub_server import make_dataset

    windows = make_dataset(tmp_path / "windows", windows=2)
    shutil.rmtree(windows / "ref")
    shutil.copytree(root / "reference-hidden", windows / "reference-hidden")
    _refused(capsys, windows, f"{windows / 'reference-hidden'}: hidden states of a suite of windows")


def test_a_hostile_model_name_cannot_break_the_card(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    f = fx.build(tmp_path / "suite", contexts=4)
    top = json.loads((f.root / "manifest.json").read_text())
    top["checkpoint"] = "evil: yes\n---\n# Owned | table"
    (f.root / "manifest.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    fid.write_checksums(f.root)
    capsys.readouterr()
    assert main(["publish", str(f.root), "--repo-id", REPO, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "---" and lines.index("---", 1) == 6  # the YAML header is what publish wrote
    title = "evil: yes --- # Owned | table hidden-state reference"
    assert json.loads(lines[1].removeprefix("pretty_name: ")) == title
    assert "# evil: yes --- # Owned \\| table hidden-state reference" in lines  # Markdown text, no cell


def test_a_replay_check_that_did_not_qualify_is_published_as_it_is(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(made, tmp_path / "suite")
    path = root / "validation" / "hidden-replay-qualification.json"
    doc = json.loads(path.read_text())
    doc.update(status="not qualified", reasons=["top-1 agreement 0.996300 < 0.999"], top1_agreement=0.9963)
    doc["kl_live_to_replay"]["mean"] = 6.0e-5
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    fid.write_checksums(root)
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", REPO, "--dry-run"]) == 0
    captured = capsys.readouterr()
    check_card(captured.out, root, REPO)
    assert "records status **not qualified**" in captured.out
    assert "Not met: top-1 agreement 0.996300 < 0.999." in captured.out
    assert "| mean KL | 6e-05 |" in captured.out and "| top-1 agreement | 0.9963 |" in captured.out
    assert f"{path}: status 'not qualified'" in captured.err


def test_a_run_on_part_of_a_downloaded_suite_is_refused_before_launching(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A download by partition holds only those contexts: `kldtui run` over the whole range says so
    before a server starts (it stopped at the first missing token file after the launch), with the
    download that fetches the range, kldtui named as it was started."""
    root = _copy(made, tmp_path / "suite")
    for i in (2, 5):  # the qualification contexts, as a download of the analysis partition leaves it
        (root / "tokens" / f"context-{i:04d}.json").unlink()
        (root / "reference-hidden" / f"hidden_{i:04d}.safetensors").unlink()
    profile = tmp_path / "cand.toml"
    profile.write_text(f"""
[reference]
local_dir = "{root}"
logits_dir = "reference-hidden"

[candidate]
kind = "embedded"
served_model_name = "cand"
model_seed = {SEED}
vocab_size = {VOCAB}
perturb = 0.05
port = 0

[run]
workdir = "{tmp_path / 'work'}"
""")
    capsys.readouterr()
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    err = capsys.readouterr().err
    first = root / "tokens" / "context-0002.json"
    assert f"{first}: missing, with 1 more of the run's 6 contexts (4 here" in err
    assert f"(kldtui download REPO --local-dir {root} --start-context A --stop-context B)" in err
    assert not (tmp_path / "work" / "server.log").exists()  # nothing was launched
    kldtui = started_from_a_venv(tmp_path, monkeypatch)  # as .venv/bin/kldtui, not on PATH
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    err = capsys.readouterr().err
    assert f"({kldtui} download REPO --local-dir {root} --start-context A --stop-context B)" in err, err
