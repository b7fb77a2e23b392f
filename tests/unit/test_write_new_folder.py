"""A folder kldtui writes whole and renames into place (an LM head, a suite) is readable like every
other output: mkdir's permissions under the umask, never mkdtemp's private 0700; a stopped write
leaves nothing; a folder that holds anything is never replaced."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kldtui.embedded.model import TinyModel
from kldtui.events import Event
from kldtui.formats import fidelity as fid
from kldtui.formats.atomic import write_new_folder


@pytest.fixture(params=[0o022, 0o027], ids=["umask-022", "umask-027"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_folder_gets_the_permissions_mkdir_gives(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "parent" / "new"
    assert write_new_folder(out, lambda staging: (staging / "a").write_bytes(b"a")) == 1
    assert _mode(out) == 0o777 & ~umask
    assert (out / "a").read_bytes() == b"a"
    assert os.listdir(out.parent) == ["new"]  # nothing left beside it


def test_a_stopped_write_leaves_nothing_and_a_full_folder_is_never_replaced(tmp_path: Path) -> None:
    def stopped(staging: Path) -> None:
        (staging / "half").write_bytes(b"h")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_new_folder(tmp_path / "new", stopped)
    assert os.listdir(tmp_path) == []
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept").write_bytes(b"k")
    with pytest.raises(FileExistsError):
        write_new_folder(tmp_path / "full", lambda staging: (staging / "b").write_bytes(b"b"))
    assert sorted(os.listdir(tmp_path)) == ["full"] and os.listdir(tmp_path / "full") == ["kept"]
    (tmp_path / "empty").mkdir()
    write_new_folder(tmp_path / "empty", lambda staging: (staging / "b").write_bytes(b"b"))
    assert os.listdir(tmp_path / "empty") == ["b"]


def test_the_built_in_models_head_is_readable_like_other_outputs(tmp_path: Path, umask: int) -> None:
    TinyModel(256, seed=1).write_head(tmp_path / "lm-head")
    assert _mode(tmp_path / "lm-head") == 0o777 & ~umask
    for name in (fid.HEAD_FILE, fid.TENSOR_MANIFEST):
        assert _mode(tmp_path / "lm-head" / name) == 0o666 & ~umask


def test_a_reused_head_is_readable_like_other_outputs(tmp_path: Path, umask: int) -> None:
    from kldtui.stages.candidate_head import _reuse

    TinyModel(256, seed=1).write_head(tmp_path / "leader" / "lm-head")
    events: list[Event] = []
    assert _reuse(tmp_path / "leader" / "lm-head", tmp_path / "repeat" / "lm-head", events.append) is None
    assert _mode(tmp_path / "repeat" / "lm-head") == 0o777 & ~umask
    assert fid.load_lm_head(tmp_path / "repeat" / "lm-head").file_sha256 == \
        fid.load_lm_head(tmp_path / "leader" / "lm-head").file_sha256
