"""kldtui.stages.verify and ``kldtui verify``: suite, logits folder and dataset root, every failure named."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput, Interrupted
from kldtui.events import Cancel, Event, Progress
from kldtui.formats.fidelity import ContextFilter
from kldtui.formats.verified_cache import LEGACY_NAME, VerifiedCache
from kldtui.stages.verify import (
    PUBLISHED_SUITE_HASH,
    hash_files,
    verify_path,
    verify_reference,
)
from tests.hub_server import make_dataset


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return make_dataset(tmp_path / "ds", windows=4)


def _flip_byte(path: Path, offset: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    st = path.stat()
    path.write_bytes(bytes(data))
    # same size; make sure the modification time moves even on coarse clocks
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_clean_dataset_verifies_then_uses_the_cache(dataset: Path) -> None:
    events: list = []
    first = verify_path(dataset, emit=events.append)
    assert first.ok, first.failures
    assert first.kind == "dataset"
    assert sorted(p.name for p in first.checked) == [f"logits_{i:03d}.safetensors" for i in range(4)]
    assert first.cached == []
    assert first.bytes_hashed == sum(p.stat().st_size for p in (dataset / "ref").glob("*.safetensors"))
    assert any(isinstance(e, Progress) and e.task == "hash" and e.unit == "B" for e in events)
    f = dataset / "ref" / "logits_002.safetensors"
    st = f.stat()
    entry = json.loads((VerifiedCache().path / f"{st.st_dev:x}-{st.st_ino:x}.json").read_text())
    assert entry["size"] == st.st_size and entry["mtime_ns"] == st.st_mtime_ns
    assert entry["ctime_ns"] == st.st_ctime_ns
    assert entry["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert not (dataset / "ref" / LEGACY_NAME).exists()

    second = verify_path(dataset)
    assert second.ok and second.checked == [] and len(second.cached) == 4

    forced = verify_path(dataset, reverify=True)
    assert forced.ok and len(forced.checked) == 4 and forced.cached == []


def test_changed_file_is_hashed_again_and_fails(dataset: Path) -> None:
    assert verify_path(dataset).ok
    target = dataset / "ref" / "logits_001.safetensors"
    _flip_byte(target)
    result = verify_path(dataset)
    assert [p.name for p in result.checked] == ["logits_001.safetensors"]
    assert len(result.failures) == 1
    assert "logits_001.safetensors" in result.failures[0] and "SHA-256" in result.failures[0]
    assert "window 001" in result.failures[0]


def test_every_failure_is_reported(dataset: Path) -> None:
    ref = dataset / "ref"
    _flip_byte(ref / "logits_000.safetensors")  # hash
    with open(ref / "logits_003.safetensors", "r+b") as fh:  # truncated
        fh.truncate(100)
    (dataset / "tokens" / "window-001-prose.json").write_text("[1,2,3]\n")  # token count
    doc = json.loads((dataset / "suite-manifest.json").read_text())
    (dataset / "tokens" / "link.json").symlink_to(dataset.parent / "outside.json")
    doc["windows"][2]["token_file"] = "tokens/link.json"  # a symlink escaping the suite folder
    (dataset / "suite-manifest.json").write_text(json.dumps(doc))
    result = verify_path(dataset)
    assert not result.ok
    text = "\n".join(result.failures)
    assert "logits_000.safetensors" in text and "SHA-256" in text
    assert "logits_003.safetensors" in text and "100 bytes" in text
    assert "window-001-prose.json" in text
    assert "outside the suite folder" in text
    assert len(result.failures) == 4


def test_header_metadata_and_suite_mismatches(dataset: Path) -> None:
    ref = dataset / "ref"
    # window 0's file replaced by window 1's (valid file, wrong window): manifest updated to match
    shutil.copyfile(ref / "logits_001.safetensors", ref / "logits_000.safetensors")
    doc = json.loads((ref / "manifest.json").read_text())
    data = (ref / "logits_000.safetensors").read_bytes()
    doc["windows"][0]["size_bytes"] = len(data)
    doc["windows"][0]["sha256"] = hashlib.sha256(data).hexdigest()
    doc["total_size_bytes"] = sum(w["size_bytes"] for w in doc["windows"])
    doc["suite_token_hash_sha256"] = "0" * 64
    (ref / "manifest.json").write_text(json.dumps(doc))
    result = verify_path(dataset)
    text = "\n".join(result.failures)
    assert "window_index='1'" in text  # header metadata names the wrong window
    assert "suite hash" in text and "another suite" in text


def test_logits_folder_alone_and_with_suite(dataset: Path, tmp_path: Path) -> None:
    inside = verify_path(dataset / "ref")  # finds ../suite-manifest.json
    assert inside.ok and inside.kind == "logits" and inside.suite_hash is not None
    alone = tmp_path / "cand"
    shutil.copytree(dataset / "ref", alone)
    result = verify_path(alone)
    assert result.ok and result.suite_hash is None
    assert any("without the suite" in n for n in result.notes)
    with_suite = verify_path(alone, suite=dataset)
    assert with_suite.ok and with_suite.suite_hash is not None
    ranged = verify_path(alone, start_window=1, stop_window=3)
    assert ranged.windows == [1, 2]
    missing = verify_path(alone, start_window=2, stop_window=6)
    assert any("window 4 is not listed" in f for f in missing.failures)


def test_suite_only_and_hashes(dataset: Path) -> None:
    # a suite without ref/ (ref/ holding logits but no manifest is a failure:
    # tests/functional/test_clear_errors.py)
    shutil.rmtree(dataset / "ref")
    ok = verify_path(dataset)
    assert ok.kind == "suite" and ok.ok
    published = verify_path(dataset, expected_suite_hash=PUBLISHED_SUITE_HASH)
    assert any("published" in f for f in published.failures)
    doc = json.loads((dataset / "suite-manifest.json").read_text())
    doc["suite_token_hash_sha256"] = "f" * 64
    (dataset / "suite-manifest.json").write_text(json.dumps(doc))
    bad = verify_path(dataset / "suite-manifest.json")
    assert any("does not match the windows' token hashes" in f for f in bad.failures)


def test_missing_logits_file_and_bad_paths(dataset: Path, tmp_path: Path) -> None:
    (dataset / "ref" / "logits_002.safetensors").unlink()
    result = verify_reference(dataset)
    assert any("logits_002.safetensors" in f and "missing" in f for f in result.failures)
    assert verify_reference(dataset, stop_window=2).ok
    # a domain whose windows are all here verifies (make_dataset, 4 windows: 0-1 prose, 2 code)
    assert verify_reference(dataset, selection=ContextFilter(strata=("prose",))).ok
    code = verify_reference(dataset, selection=ContextFilter(strata=("code",)))
    assert code.windows == [2] and any("logits_002.safetensors" in f for f in code.failures)
    assert main(["verify", str(dataset), "--stratum", "prose"]) == 0
    assert main(["verify", str(dataset), "--stratum", "code"]) == 1
    with pytest.raises(BadInput):
        verify_path(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="neither"):
        verify_path(tmp_path / "empty")


def test_parallel_hashing_matches_hashlib(tmp_path: Path) -> None:
    files = []
    for i in range(6):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(os.urandom(100_000 + i * 12345))
        files.append(p)
    expect = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert hash_files(files, workers=1) == expect
    assert hash_files(files, workers=4) == expect
    cancel = Cancel()
    cancel.set()
    with pytest.raises(Interrupted):
        hash_files(files, workers=2, cancel=cancel)


def test_a_hash_reports_its_end_once(tmp_path: Path) -> None:
    """A file hashed in one chunk: that chunk's update is the end, and the final report repeated it
    ("verify LM head 260/260 KiB (100%)" twice for each head in a compare)."""
    head = tmp_path / "weight.safetensors"
    head.write_bytes(os.urandom(266_444))
    events: list[Event] = []
    hash_files([head], emit=events.append, task="verify LM head")
    ends = [e for e in events if isinstance(e, Progress) and e.task == "verify LM head" and e.done == e.total]
    assert len(ends) == 1, events


def test_cache_ignores_a_corrupt_cache_file(dataset: Path) -> None:
    f = dataset / "ref" / "logits_000.safetensors"
    cache = VerifiedCache(dataset / "ref")
    (cache.path / f"{f.stat().st_dev:x}-{f.stat().st_ino:x}.json").write_text("{not json")
    assert cache.lookup(f) is None
    assert verify_path(dataset).ok


def test_cli_exit_codes_and_failure_lines(dataset: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(dataset)]) == 0
    out = capsys.readouterr()
    assert "OK" in out.out
    _flip_byte(dataset / "ref" / "logits_000.safetensors")
    _flip_byte(dataset / "ref" / "logits_002.safetensors")
    assert main(["verify", str(dataset)]) == 1
    err = capsys.readouterr().err
    fails = [line for line in err.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 2
    assert "logits_000" in fails[0] + fails[1] and "logits_002" in fails[0] + fails[1]
    assert main(["verify", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_on_a_terminal_the_result_line_is_printed_once(dataset: Path, tmp_path: Path) -> None:
    """stdout and stderr on one terminal (as a user sees them): the progress bar on stderr, the result
    line once (earlier versions printed it on both streams)."""
    import pty
    import subprocess
    import sys

    primary, secondary = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "KLDTUI_VERIFIED_CACHE": str(tmp_path / "vc")}
    proc = subprocess.run([sys.executable, "-m", "kldtui", "verify", str(dataset)], stdin=subprocess.DEVNULL,
                          stdout=secondary, stderr=secondary, env=env, timeout=120, check=False)
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    text = out.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert text.count("4 logits files hashed") == 1, text
