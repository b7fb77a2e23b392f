"""Issue 27 item 1: a planted link never makes kldtui create, truncate or append to a file outside
the folders a command owns (lock files, server.log, the error marker, partial downloads, temporary
logits files), and a lock path that is not a regular file is refused before anything is written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.folder_lock import LOCK_NAME, hold, lock_path_for_file
from kldtui.formats.safe_io import NotRegularFile, open_private, read_text
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE
VICTIM_TEXT = "precious\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(VICTIM_TEXT)
    return victim


def test_folder_lock_that_is_a_symlink_is_refused_and_the_target_untouched(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / LOCK_NAME).symlink_to(victim)
    with pytest.raises(BadInput, match="symbolic link") as info, hold([work]):
        pass
    assert str(work) in str(info.value) and "\n" not in str(info.value)
    assert victim.read_text() == VICTIM_TEXT
    assert (work / LOCK_NAME).is_symlink()  # not removed either: it is not ours


def test_dangling_symlink_lock_does_not_create_its_target(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "new-file"
    target.parent.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / LOCK_NAME).symlink_to(target)
    with pytest.raises(BadInput, match="symbolic link"), hold([work]):
        pass
    assert not target.exists()


def test_hard_linked_and_fifo_lock_files_are_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    os.link(victim, work / LOCK_NAME)
    with pytest.raises(BadInput, match="hard link"), hold([work]):
        pass
    assert victim.read_text() == VICTIM_TEXT
    other = tmp_path / "other"
    other.mkdir()
    os.mkfifo(other / LOCK_NAME)
    with pytest.raises(BadInput, match="FIFO"), hold([other]):
        pass


def test_output_lock_symlink_compare_exit_2_and_victim_kept(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "w" / "out.json"
    out.parent.mkdir()
    lock_path_for_file(out).symlink_to(victim)
    code = main(["compare", "--suite-manifest", str(EXAMPLE), "--reference-dir", str(EXAMPLE / "ref"),
                 "--candidate-dir", str(EXAMPLE / "candidate"), "--output", str(out),
                 "--bootstrap-samples", "50"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "symbolic link" in err and len(err.strip().splitlines()) == 1
    assert victim.read_text() == VICTIM_TEXT and not out.exists()


def test_lock_released_only_removes_its_own_file(tmp_path: Path) -> None:
    """A lock file replaced by a link while held is not removed (nor followed) on release."""
    victim = _victim(tmp_path)
    work = tmp_path / "work"
    with hold([work]):
        (work / LOCK_NAME).unlink()
        (work / LOCK_NAME).symlink_to(victim)
    assert (work / LOCK_NAME).is_symlink() and victim.read_text() == VICTIM_TEXT


def test_server_log_symlink_is_refused(tmp_path: Path) -> None:
    from kldtui.stages.serve import ServerProcess

    victim = _victim(tmp_path)
    log = tmp_path / "work" / "server.log"
    log.parent.mkdir()
    log.symlink_to(victim)
    server = ServerProcess([sys.executable, "-c", "pass"], capture_dir=tmp_path / "cap",
                           served_model_name="m", log_path=log)
    with pytest.raises(BadInput, match="symbolic link"):
        server.start()
    assert server.proc is None and victim.read_text() == VICTIM_TEXT


def test_error_marker_symlink_is_not_appended_to(tmp_path: Path) -> None:
    from kldtui.formats.chunks import ERROR_MARKER, write_error_marker

    victim = _victim(tmp_path)
    folder = tmp_path / "cap" / "req-1"
    folder.mkdir(parents=True)
    (folder / ERROR_MARKER).symlink_to(victim)
    with pytest.raises(OSError):
        write_error_marker(tmp_path / "cap", "req-1", "boom")
    assert victim.read_text() == VICTIM_TEXT


def test_pending_marker_symlink_does_not_create_its_target(tmp_path: Path) -> None:
    from kldtui.hook.writer import ChunkWriter, pending_name

    target = tmp_path / "elsewhere" / "created"
    target.parent.mkdir()
    folder = tmp_path / "cap" / "req-1"
    folder.mkdir(parents=True)
    (folder / pending_name(0, 4)).symlink_to(target)
    ChunkWriter(inline=False)._pending(str(tmp_path / "cap"), "req-1", 0, 4)
    assert not target.exists()


def test_open_private_and_read_text_refuse_links_fifos_and_folders(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(NotRegularFile):
        open_private(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="FIFO"):
        open_private(fifo)
    with pytest.raises(NotRegularFile, match="FIFO"):
        read_text(fifo)  # returns at once: no writer is waited for
    with pytest.raises(IsADirectoryError):
        read_text(tmp_path)
    assert read_text(link) == VICTIM_TEXT  # reading may follow a link
    with pytest.raises(NotRegularFile):
        read_text(link, follow=False)


def test_logits_writer_temporary_file_is_created_exclusively(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted link at the writer's temporary name is never written through."""
    import kldtui.formats.logits_writer as lw
    from kldtui.formats.suite import load_suite

    victim = _victim(tmp_path)
    suite = load_suite(EXAMPLE)
    folder = tmp_path / "out"
    folder.mkdir()
    monkeypatch.setattr(lw.secrets, "token_hex", lambda n: "deadbeef")
    planted = folder / f".logits_000.safetensors.{os.getpid()}-deadbeef.partial"
    planted.symlink_to(victim)
    with pytest.raises(OSError):
        lw.LogitsFileWriter(folder, suite.windows[0], 8, suite.context_length)
    assert victim.read_text() == VICTIM_TEXT


def test_partial_download_link_is_not_written_through(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A link planted at a partial download's name (resumed with r+b before) is replaced, not followed."""
    from kldtui.stages import reference
    from tests.hub_server import HubServer, make_dataset

    victim = _victim(tmp_path)
    victim.write_bytes(b"x" * 64)  # "resumable": shorter than the file
    original = reference.HubDownloader._fetch_http

    def planted(self, location, url, part, size, name, meter):  # type: ignore[no-untyped-def]
        if not part.exists():
            part.parent.mkdir(parents=True, exist_ok=True)
            part.symlink_to(victim)
        return original(self, location, url, part, size, name, meter)

    monkeypatch.setattr(reference.HubDownloader, "_fetch_http", planted)
    server_root = make_dataset(tmp_path / "server", windows=2)
    with HubServer() as server:
        server.add_dataset("kldtui-test/links", server_root)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        ref = reference.ensure_reference("kldtui-test/links", tmp_path / "local")
    assert ref.verify is not None and ref.verify.ok
    assert victim.read_bytes() == b"x" * 64


@pytest.mark.skipif(os.geteuid() != 0, reason="making a link owned by another user needs root")
def test_a_folder_link_made_by_another_user_is_not_written_through(tmp_path: Path) -> None:
    """A work folder's subfolder replaced by another user's link (to a folder of yours) is refused;
    a link you (or root) made is followed as before."""
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "candidate").symlink_to(victim)
    os.lchown(work / "candidate", 12345, 12345)
    with pytest.raises(BadInput, match="user id 12345") as info, hold([work, work / "candidate"]):
        pass
    assert "\n" not in str(info.value)
    assert not list(victim.iterdir()) and not (work / LOCK_NAME).exists()
    os.lchown(work / "candidate", os.getuid(), os.getgid())
    with hold([work, work / "candidate"]):
        assert (victim / LOCK_NAME).exists()
