"""Issue 27 item 4: the verified-hash cache cannot be forged by whoever writes the verified folder.

The cache lives in the user's cache folder (not in the folder verified), keyed by device, inode,
size, modification time and change time; a file changed in place, even with its modification time
put back, is hashed again; a cache folder others can write is not trusted (everything is hashed)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.formats.verified_cache import VerifiedCache
from kldtui.stages.verify import verify_path
from tests.hub_server import make_dataset


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "user-cache" / "verified"
    monkeypatch.setenv("KLDTUI_VERIFIED_CACHE", str(path))
    return path


def _tamper_same_size(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_forged_cache_file_in_the_folder_vouches_for_nothing(tmp_path: Path, store: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2)
    target = root / "ref" / "logits_001.safetensors"
    want = json.loads((root / "ref" / "manifest.json").read_text())["windows"][1]["sha256"]
    _tamper_same_size(target)
    st = target.stat()
    forged = {"format": 1, "files": {"logits_001.safetensors": {
        "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": want,
        "verified_utc": "2020-01-01T00:00:00Z"}}}
    (root / "ref" / ".kldtui-verified.json").write_text(json.dumps(forged))
    result = verify_path(root)
    assert not result.ok and any("logits_001" in f and "SHA-256" in f for f in result.failures)
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    assert "logits_001" in capsys.readouterr().err


def test_a_file_changed_in_place_with_its_mtime_put_back_is_hashed_again(tmp_path: Path, store: Path) -> None:
    root = make_dataset(tmp_path / "ds", windows=2)
    assert verify_path(root).ok
    assert len(verify_path(root).cached) == 2  # remembered, outside the folder
    assert not (root / "ref" / ".kldtui-verified.json").exists()
    assert any(store.iterdir())
    target = root / "ref" / "logits_000.safetensors"
    before = target.stat()
    _tamper_same_size(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # what a forger would do
    assert target.stat().st_mtime_ns == before.st_mtime_ns and target.stat().st_size == before.st_size
    result = verify_path(root)
    assert [p.name for p in result.checked] == ["logits_000.safetensors"]
    assert not result.ok and "SHA-256" in result.failures[0]


def test_a_cache_folder_others_can_write_is_not_trusted(tmp_path: Path, store: Path) -> None:
    root = make_dataset(tmp_path / "ds", windows=2)
    assert verify_path(root).ok
    os.chmod(store, 0o777)
    result = verify_path(root)
    assert result.ok and result.cached == [] and len(result.checked) == 2
    assert any("not trusted" in n for n in result.notes)


def test_a_cache_folder_you_cannot_write_is_a_note_saying_what_to_do(tmp_path: Path, store: Path) -> None:
    root = make_dataset(tmp_path / "ds", windows=2)
    store.mkdir(parents=True, mode=0o500)
    try:
        if os.access(store, os.W_OK):
            pytest.skip("a folder of mode 0o500 is writable here (running as root)")
        result = verify_path(root)
        assert result.ok and len(result.checked) == 2
        assert f"{store}: not writable; verified hashes are not remembered (make it writable, or set " \
               "KLDTUI_VERIFIED_CACHE to a folder of yours)" in result.notes
        os.chmod(store, 0o700)  # what the note says to do
        assert verify_path(root).notes == [] and len(verify_path(root).cached) == 2
    finally:
        os.chmod(store, 0o700)


def test_cache_entries_are_keyed_by_inode_and_change_time(tmp_path: Path, store: Path) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc" * 100)
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    cache = VerifiedCache(tmp_path)
    cache.record(f, sha)
    assert cache.save()
    assert VerifiedCache(tmp_path).lookup(f) == sha
    copy = tmp_path / "g.bin"
    copy.write_bytes(f.read_bytes())
    os.utime(copy, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns))
    assert VerifiedCache(tmp_path).lookup(copy) is None  # same size and mtime, another inode
    os.chmod(f, 0o600)  # changes ctime only
    assert VerifiedCache(tmp_path).lookup(f) is None


def test_records_of_gone_files_are_pruned(tmp_path: Path, store: Path) -> None:
    import hashlib as _h

    files = []
    for i in range(6):
        f = tmp_path / f"f{i}.bin"
        f.write_bytes(bytes([i]) * 10)
        files.append(f)
    cache = VerifiedCache(tmp_path)
    for f in files:
        cache.record(f, _h.sha256(f.read_bytes()).hexdigest())
    assert cache.save()
    for f in files[:4]:
        f.unlink()
    assert cache.prune(keep=3) == 4
    assert all(VerifiedCache(tmp_path).lookup(f) is not None for f in files[4:])
