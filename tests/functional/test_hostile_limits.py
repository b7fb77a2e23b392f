"""Every file kldtui reads whole from a shared folder is read through safe_io with its kind's size limit
(docs/SAFETY.md, "Files that are not files"): a FIFO there never blocks, and a huge (sparse) file is
refused in one line naming it, or passed over where the file is only a cache, before a byte of it is
read. Before, the compare cache, capture records, the workflow state's figures, a profile and the
hidden-state suite's JSON records were read whole whatever their size."""

from __future__ import annotations

import os
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.text import human_bytes
from kldtui.workspace import Workspace
from tests.fixtures_hostile import capture_run, finalize_args, returns_at_once
from tests.paths import EXAMPLE_SUITE

pytestmark = pytest.mark.timeout(120)


def _sparse(path: Path, limit: int) -> Path:
    """A file of ``limit + 1`` bytes that is all hole but its last byte (made in no time, no disk)."""
    with path.open("wb") as handle:
        handle.seek(limit)
        handle.write(b" ")
    return path


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _peak_bytes(call: Callable[[], object]) -> tuple[object, int]:
    """What ``call()`` returned (or raised) and the most memory Python held meanwhile: a file read
    whole shows as its size."""
    tracemalloc.start()
    try:
        try:
            out: object = call()
        except Exception as exc:  # noqa: BLE001 - what it raised is the result
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _one_line(exc: object, path: Path, limit: int) -> str:
    assert isinstance(exc, BadInput), exc
    line = str(exc)
    assert "\n" not in line and line.startswith(f"{path}: "), line
    assert f"larger than {human_bytes(limit)}" in line, line
    return line


# -- the compare cache and the figures the dashboard shows from it: a cache, passed over --------------
def _cache_workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "compare").mkdir()
    return Workspace(suite_dir=EXAMPLE_SUITE, compare_dir=tmp_path / "compare")


def _cache_get(ws: Workspace) -> Callable[[], object]:
    from kldtui.formats.suite import load_suite
    from kldtui.stages.compare import CompareOptions
    from kldtui.stages.compare.cache import WindowCache

    window = load_suite(EXAMPLE_SUITE).windows[1]
    return lambda: WindowCache(ws, CompareOptions()).get(window)


def _cached_kl(ws: Workspace) -> Callable[[], object]:
    from kldtui.workflow.state import _cached_kl

    return lambda: _cached_kl(ws, 1)


@pytest.mark.parametrize("reader", [_cache_get, _cached_kl], ids=["compare cache", "workflow state"])
def test_a_compare_cache_entry_that_is_a_fifo_or_huge_is_passed_over_unread(
        tmp_path: Path, reader: Callable[[Workspace], Callable[[], object]]) -> None:
    from kldtui.stages.compare.cache import COMPARE_CACHE_LIMIT

    ws = _cache_workspace(tmp_path)
    entry = ws.compare_cache(1)
    assert entry is not None
    _fifo(entry)
    assert returns_at_once(reader(ws)) == [None]
    entry.unlink()
    _sparse(entry, COMPARE_CACHE_LIMIT)
    result, peak = _peak_bytes(reader(ws))
    assert result is None
    assert peak < COMPARE_CACHE_LIMIT // 16, f"read {peak} bytes of a file over the limit"


# -- capture records: refused, one line ----------------------------------------------------------------
def test_capture_records_over_their_limit_are_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.stages.capture import CAPTURE_RECORDS_LIMIT, load_records

    records, _ = capture_run(tmp_path)
    _sparse(records, CAPTURE_RECORDS_LIMIT)
    result, peak = _peak_bytes(lambda: load_records(records, unit="window"))
    line = _one_line(result, records, CAPTURE_RECORDS_LIMIT)
    assert "capture records" in line and "restore or delete the file" in line, line
    assert peak < CAPTURE_RECORDS_LIMIT // 16
    code = main(finalize_args(tmp_path))
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip() and not x.startswith("[")]
    assert code == 2 and len(err) == 1 and f"larger than {human_bytes(CAPTURE_RECORDS_LIMIT)}" in err[0], err
    assert str(records) in err[0], err


def test_a_fifo_for_capture_records_does_not_block(tmp_path: Path) -> None:
    from kldtui.stages.capture import load_records

    records, _ = capture_run(tmp_path)
    _fifo(records)
    (result,) = returns_at_once(lambda: load_records(records, unit="window"))
    assert isinstance(result, BadInput) and "FIFO" in str(result), result


def test_writer_records_that_are_fifos_or_huge_are_passed_over(tmp_path: Path) -> None:
    import json

    from kldtui.formats.chunks import WRITER_RECORD_LIMIT, writer_record_path
    from kldtui.stages.capture import writer_records

    good = writer_record_path(tmp_path, "a", 1)
    good.parent.mkdir()
    good.write_text(json.dumps({"host": "a", "pid": 1}))
    _fifo(writer_record_path(tmp_path, "b", 2))
    _sparse(writer_record_path(tmp_path, "c", 3), WRITER_RECORD_LIMIT)
    assert returns_at_once(lambda: writer_records(tmp_path)) == [[{"host": "a", "pid": 1}]]


# -- the profile: refused, one line, exit 2 ------------------------------------------------------------
def test_a_profile_over_its_limit_is_refused_in_one_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.workflow.profile import PROFILE_LIMIT, load_profile

    profile = _sparse(tmp_path / "kldtui.toml", PROFILE_LIMIT)
    result, peak = _peak_bytes(lambda: load_profile(profile))
    _one_line(result, profile, PROFILE_LIMIT)
    assert peak < PROFILE_LIMIT // 16
    code = main(["--profile", str(profile), "run", "--batch"])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip() and not x.startswith("[")]
    assert code == 2 and len(err) == 1, err
    assert f"{profile}: profile cannot be read (larger than {human_bytes(PROFILE_LIMIT)})" in err[0], err


def test_the_demo_replaces_a_fifo_at_its_profile_instead_of_waiting(tmp_path: Path) -> None:
    from kldtui.workflow.demo import _holds

    _fifo(tmp_path / "kldtui.toml")
    assert returns_at_once(lambda: _holds(tmp_path / "kldtui.toml", "x")) == [False]


def test_a_sources_file_over_its_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    from kldtui.stages.prepare import SOURCES_FILE_LIMIT, load_toml

    sources = _sparse(tmp_path / "SOURCES.toml", SOURCES_FILE_LIMIT)
    def load() -> object:
        return load_toml(sources, what="sources file", takes="--sources takes a file")

    result, _ = _peak_bytes(load)
    _one_line(result, sources, SOURCES_FILE_LIMIT)
    _fifo(sources)
    (result,) = returns_at_once(load)
    assert isinstance(result, BadInput) and "FIFO" in str(result), result


# -- a hidden-state suite's JSON records --------------------------------------------------------------
def test_a_hidden_suite_s_json_record_over_the_manifest_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    from kldtui.capture_modes.hidden_suite import created_utc
    from kldtui.formats import fidelity as fid
    from kldtui.formats.suite import MANIFEST_LIMIT
    from kldtui.stages.publish_hidden import QUALIFICATION, _load_json

    record = tmp_path / QUALIFICATION
    record.parent.mkdir(parents=True)
    _sparse(record, MANIFEST_LIMIT)
    result, peak = _peak_bytes(lambda: _load_json(tmp_path, QUALIFICATION))
    _one_line(result, record, MANIFEST_LIMIT)
    assert peak < MANIFEST_LIMIT // 16
    runtime = _sparse(tmp_path / fid.CAPTURE_RUNTIME, MANIFEST_LIMIT)
    result, peak = _peak_bytes(lambda: created_utc(runtime))  # a rewrite keeps no date of such a file
    assert result is None and peak < MANIFEST_LIMIT // 16


def test_finalize_logits_does_not_wait_on_a_fifo_manifest(tmp_path: Path) -> None:
    from kldtui.capture_modes.logits import _known_hashes

    out = tmp_path / "ref"
    shutil.copytree(EXAMPLE_SUITE / "ref", out)
    _fifo(out / "manifest.json")
    assert returns_at_once(lambda: _known_hashes(out)) == [{}]
