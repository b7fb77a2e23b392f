"""The capture client's wait for a request folder on a shared file system whose listings lag (issue 21):
NFS caches attributes for about 30 s, and the client used to give up after 2 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from kldtui.formats.suite import WindowSpec
from kldtui.stages import capture
from kldtui.this_host import filesystem_type, on_network_filesystem


class _Clock:
    """time.monotonic and time.sleep of the capture module, without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(capture.time, "monotonic", c.monotonic)
    monkeypatch.setattr(capture.time, "sleep", c.sleep)
    return c


def _window() -> WindowSpec:
    return WindowSpec(index=0, domain="d", domain_index=0, num_tokens=3, token_file="",
                      token_ids_json_sha256="")


def _late_listing(folder: Path, clock: _Clock, after: float):
    """A listing that shows the finished request folder only ``after`` seconds (a lagging NFS)."""
    start = clock.now

    def listing() -> list[Path]:
        return [folder] if clock.now - start >= after else []
    return listing


def _finished_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "cmpl-kldtui-r-w000-00000000-0-1"
    folder.mkdir()
    (folder / "logits.rows-000000-000002.safetensors").write_bytes(b"x")
    return folder


def test_a_listing_that_lags_30_s_on_a_network_file_system_is_waited_for(tmp_path, clock, monkeypatch):
    folder = _finished_folder(tmp_path)
    monkeypatch.setattr(capture.LOGITS_CHUNKS.__class__, "rows_landed", lambda self, f: 2)
    monkeypatch.delenv("KLDTUI_LISTING_WAIT", raising=False)
    monkeypatch.setattr("kldtui.this_host.on_network_filesystem", lambda path: True)
    wait = capture.listing_wait(tmp_path)
    assert wait == capture.NETWORK_SETTLE_SECONDS >= 45
    late = _late_listing(folder, clock, 30.0)
    assert capture.settled_folders(late, _window(), settle_seconds=wait) == [folder]
    # a local file system keeps the short wait: a folder that never shows fails in 2 s
    monkeypatch.setattr("kldtui.this_host.on_network_filesystem", lambda path: False)
    start = clock.now
    assert capture.settled_folders(lambda: [], _window(), settle_seconds=capture.listing_wait(tmp_path)) == []
    assert clock.now - start < 3


def test_the_wait_is_a_setting(tmp_path, clock, monkeypatch):
    folder = _finished_folder(tmp_path)
    monkeypatch.setattr(capture.LOGITS_CHUNKS.__class__, "rows_landed", lambda self, f: 2)
    monkeypatch.setenv("KLDTUI_LISTING_WAIT", "90")
    assert capture.listing_wait(tmp_path) == 90.0
    assert capture.settled_folders(_late_listing(folder, clock, 80.0), _window(),
                                   settle_seconds=capture.listing_wait(tmp_path)) == [folder]
    monkeypatch.setenv("KLDTUI_LISTING_WAIT", "soon")
    from kldtui.settings import SettingError

    with pytest.raises(SettingError, match="KLDTUI_LISTING_WAIT"):
        capture.listing_wait(tmp_path)


def test_network_file_systems_are_told_from_the_mount_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("rootfs / ext4 rw 0 0\n"
                      "server:/export /shared nfs4 rw,relatime 0 0\n"
                      "server:/export/x /shared/local\\040disk ext4 rw 0 0\n"
                      "//nas/share /mnt/nas cifs rw 0 0\n")
    assert filesystem_type("/shared/runs/capture", mounts) == "nfs4"
    assert on_network_filesystem("/shared/runs/capture", mounts)
    assert not on_network_filesystem("/shared/local disk/capture", mounts)
    assert not on_network_filesystem("/sharedx/capture", mounts)
    assert on_network_filesystem("/mnt/nas", mounts)
    assert not on_network_filesystem("/home/me", mounts)
    assert filesystem_type("/x", tmp_path / "missing") is None
