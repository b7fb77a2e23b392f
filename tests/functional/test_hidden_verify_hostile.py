"""``kldtui verify`` on a whole hidden-state suite that a shared disk or the Hub handed over damaged:
a file ``checksums.txt`` lists taken away, or a FIFO, a folder or a dangling link in its place, is a
failure naming the file (never "OK" with a note that it lies outside a selection nobody made); the
hidden-state folder given as a link to another disk is followed, not an internal error."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.formats import fidelity as fid
from kldtui.stages.verify import verify_path
from tests import fidelity_fixture as fx


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fx.build(tmp_path_factory.mktemp("hidden-verify") / "suite", contexts=4).root


@pytest.fixture()
def suite(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "suite"
    shutil.copytree(built, copy)
    return copy


# files every whole suite has beside its tensors, which no manifest's identity check reads
LISTED = [fid.PARTITIONS, fid.SOURCES, fid.SOURCE_REGISTRY, "validation/hidden-replay-qualification.json",
          "sentinel-live-logits/repeat-00/manifest.json"]


def test_the_fixture_verifies(suite: Path) -> None:
    result = verify_path(suite)
    assert result.ok, result.failures
    assert not any("not here" in n for n in result.notes)


@pytest.mark.parametrize("rel", LISTED)
def test_a_listed_file_taken_away_is_a_failure(suite: Path, rel: str) -> None:
    (suite / rel).unlink()
    result = verify_path(suite)
    assert not result.ok
    named = [f for f in result.failures if f.startswith(f"{suite / rel}: ") and "missing" in f]
    assert named, result.failures
    assert not any("outside the selection" in n for n in result.notes)


@pytest.mark.parametrize("planted", ["fifo", "folder", "dangling link"])
@pytest.mark.parametrize("rel", [fid.PARTITIONS, "validation/hidden-replay-qualification.json"])
def test_a_non_file_at_a_listed_name_is_a_failure(suite: Path, rel: str, planted: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = suite / rel
    path.unlink()
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "folder":
        path.mkdir()
    else:
        path.symlink_to(suite / "nothing-here")
    assert main(["verify", str(suite)]) == 1  # returns at once: nothing waits for a writer
    said = capsys.readouterr()
    out = said.out + said.err
    word = {"fifo": "is a FIFO", "folder": "is a folder",
            "dangling link": "is a symbolic link to nothing"}[planted]
    assert f"{path}: {word}" in out and "fetch it again" in out
    assert "FAILED" in out


def test_a_downloaded_subset_still_only_notes_what_it_did_not_fetch(suite: Path) -> None:
    (suite / ".kldtui-reference.json").write_text('{"windows": [0, 1]}')
    for rel in ("validation/hidden-replay-qualification.json", "reference-hidden/hidden_0003.safetensors"):
        (suite / rel).unlink()
    result = verify_path(suite)
    assert result.ok, result.failures
    assert any("not here (outside the selection)" in n for n in result.notes)


def test_a_record_listing_no_whole_numbers_checks_every_context(suite: Path) -> None:
    """A record whose windows are not whole numbers (["0", "1"]) kept none of them, so verify checked no
    context at all and said OK with "checked the 0 context(s) downloaded into this folder"."""
    (suite / ".kldtui-reference.json").write_text('{"windows": ["0", "1"]}')
    (suite / "reference-hidden/hidden_0003.safetensors").write_bytes(b"damaged")
    result = verify_path(suite)
    assert not result.ok and any("hidden_0003" in f for f in result.failures), result.summary()
    assert not any("downloaded into this folder" in n for n in result.notes), result.notes


def test_the_hidden_folder_as_a_link_to_another_disk_is_followed(suite: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-disk" / fid.HIDDEN_DIR
    elsewhere.parent.mkdir()
    shutil.move(suite / fid.HIDDEN_DIR, elsewhere)
    (suite / fid.HIDDEN_DIR).symlink_to(elsewhere)
    result = verify_path(suite)  # an internal error (ValueError from relative_to) before
    assert result.ok, result.failures
    damaged = elsewhere / "hidden_0001.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0x01
    damaged.write_bytes(bytes(data))
    result = verify_path(suite, reverify=True)
    assert any("hidden_0001.safetensors: SHA-256" in f for f in result.failures), result.failures


def test_a_head_linked_out_of_its_folder_is_refused_as_hidden_files_are(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hidden file that is a link out of reference-hidden/ was refused, the LM head's out of
    lm-head/ read (verify said OK, compare replayed through it)."""
    from kldtui.errors import BadInput

    head = suite / fid.LM_HEAD_DIR / "weight.safetensors"
    outside = tmp_path / "elsewhere.safetensors"
    shutil.move(head, outside)
    head.symlink_to(outside)
    with pytest.raises(BadInput, match="a link leading out of"):
        fid.load_lm_head(suite / fid.LM_HEAD_DIR)
    assert main(["verify", str(suite)]) == 2
    said = capsys.readouterr()
    assert f"{head}: a link leading out of {suite / fid.LM_HEAD_DIR}" in said.out + said.err
    # a link to the head's folder (another disk) is followed
    head.unlink()
    shutil.move(suite / fid.LM_HEAD_DIR, tmp_path / "heads")
    shutil.move(outside, tmp_path / "heads" / "weight.safetensors")
    (suite / fid.LM_HEAD_DIR).symlink_to(tmp_path / "heads")
    assert fid.load_lm_head(suite / fid.LM_HEAD_DIR).vocab == fx.VOCAB
    result = verify_path(suite)
    assert result.ok, result.failures


def test_a_fifo_in_place_of_a_hidden_state_file_is_named_as_one(suite: Path) -> None:
    """It read "0 bytes, the manifest says 1224; the file is truncated or was replaced"."""
    target = sorted((suite / fid.HIDDEN_DIR).glob("*.safetensors"))[0]
    target.unlink()
    os.mkfifo(target)
    result = verify_path(suite)
    named = [f for f in result.failures if f.startswith(f"{target}: ")]
    assert named and "is a FIFO (named pipe), not a regular file; delete it and fetch it again" in named[0], \
        result.failures
    assert not any("truncated" in f for f in named)
