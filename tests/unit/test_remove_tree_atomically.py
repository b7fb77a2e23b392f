"""A folder removed by kldtui is whole under its name or gone at any kill (renamed aside first); what a
kill leaves aside is cleared later; links are never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kldtui.formats.atomic import REMOVING_MARK, remove_tree_atomically, sweep_removals


def test_the_folder_goes_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "window-000-prose-chunks"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a").write_bytes(b"a")
    remove_tree_atomically(folder)
    assert os.listdir(tmp_path) == []


def test_the_rename_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill after the rename (here: the deletion fails) leaves nothing under the folder's name."""
    import kldtui.formats.atomic as atomic

    folder = tmp_path / "w-chunks"
    folder.mkdir()
    (folder / "c").write_bytes(b"c")
    monkeypatch.setattr(atomic, "_delete_tree", lambda _p: None)
    remove_tree_atomically(folder)
    left = os.listdir(tmp_path)
    assert not folder.exists() and len(left) == 1 and left[0].startswith(".w-chunks" + REMOVING_MARK)
    monkeypatch.undo()
    sweep_removals(tmp_path)
    assert os.listdir(tmp_path) == []


def test_links_and_files_are_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("kept")
    link = tmp_path / "w-chunks"
    link.symlink_to(target)
    remove_tree_atomically(link)
    planted = tmp_path / f".x{REMOVING_MARK}1"
    planted.symlink_to(target)
    sweep_removals(tmp_path)
    assert link.is_symlink() and planted.is_symlink() and (target / "keep").read_text() == "kept"
    plain = tmp_path / "a-file"
    plain.write_text("f")
    remove_tree_atomically(plain)
    assert plain.read_text() == "f"
