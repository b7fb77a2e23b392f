"""Issue 27 item 7: a FIFO (or a device, or a folder) where kldtui expects a file is one line, exit 2,
at once: manifests, token files, logits files, capture chunks and records, profiles, reports. Each
test would block forever on the code before the fix (pytest-timeout ends it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kldtui.cli.main import main
from tests.fixtures_hostile import capture_run, finalize_args, returns_at_once
from tests.paths import EXAMPLE_SUITE as EXAMPLE

pytestmark = pytest.mark.timeout(60)


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("[")]
    assert code == 2, captured.err + captured.out
    assert len(lines) == 1 and "internal error" not in lines[0], captured.err
    assert needle in lines[0] and "FIFO" in lines[0], lines[0]
    return lines[0]


def _suite_with_fifo(tmp_path: Path, rel: str) -> Path:
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLE, suite)
    target = suite / rel
    target.unlink()
    os.mkfifo(target)
    return suite


def _compare(suite: Path, out: Path) -> list[str]:
    return ["compare", "--suite-manifest", str(suite / "suite-manifest.json"), "--reference-dir",
            str(suite / "ref"), "--candidate-dir", str(suite / "candidate"), "--output", str(out),
            "--bootstrap-samples", "50"]


@pytest.mark.parametrize("rel", ["suite-manifest.json", "ref/manifest.json", "candidate/manifest.json",
                                 "tokens/window-001-prose.json", "candidate/logits_002.safetensors",
                                 "ref/logits_000.safetensors"])
def test_compare_refuses_a_fifo_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str) -> None:
    suite = _suite_with_fifo(tmp_path, rel)
    out = tmp_path / "out.json"
    _one_line_exit_2(_compare(suite, out), capsys, rel.split("/")[-1])
    assert not out.exists()


@pytest.mark.parametrize("rel", ["suite-manifest.json", "ref/manifest.json", "tokens/window-001-prose.json",
                                 "ref/logits_003.safetensors"])
def test_verify_refuses_a_fifo_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str) -> None:
    suite = _suite_with_fifo(tmp_path, rel)
    code = main(["verify", str(suite)])
    captured = capsys.readouterr()
    assert code in (1, 2) and "FIFO" in captured.err, captured.err + captured.out


def test_profile_and_report_fifos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "profile.toml"
    os.mkfifo(fifo)
    _one_line_exit_2(["--profile", str(fifo), "run", "--batch"], capsys, str(fifo))
    report = tmp_path / "report.json"
    os.mkfifo(report)
    _one_line_exit_2(["diff", str(report), str(report)], capsys, str(report))
    _one_line_exit_2(["leaderboard", str(report)], capsys, str(report))


def test_character_device_is_not_read_forever(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLE, suite)
    (suite / "ref" / "manifest.json").unlink()
    (suite / "ref" / "manifest.json").symlink_to("/dev/zero")
    code = main(_compare(suite, tmp_path / "out.json"))
    err = capsys.readouterr().err
    assert code == 2 and "character device" in err, err


def test_finalize_refuses_a_fifo_chunk_and_leaves_no_lock(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.folder_lock import LOCK_NAME

    _, chunk_dir = capture_run(tmp_path)
    chunk = sorted(chunk_dir.iterdir())[-1]
    chunk.unlink()
    os.mkfifo(chunk)
    _one_line_exit_2(finalize_args(tmp_path), capsys, chunk.name)
    assert not (tmp_path / "out" / LOCK_NAME).exists()


def test_capture_records_fifo_is_bad_input(tmp_path: Path) -> None:
    from kldtui.errors import BadInput
    from kldtui.stages.capture import load_records

    records, _ = capture_run(tmp_path)
    records.unlink()
    os.mkfifo(records)
    with pytest.raises(BadInput, match="FIFO"):
        load_records(records, unit="window")


def test_the_report_hashes_a_manifest_without_blocking_on_a_fifo(tmp_path: Path) -> None:
    """The report's reference_manifest_sha256 read the manifest with Path.read_bytes: a FIFO put there
    after the manifest was loaded blocked compare; now it is an OSError, which leaves the hash out."""
    from kldtui.stages.compare.hashing import manifest_sha256

    os.mkfifo(tmp_path / "manifest.json")
    (result,) = returns_at_once(lambda: manifest_sha256(tmp_path / "manifest.json"))
    assert isinstance(result, OSError) and "FIFO" in str(result), result


def test_prepare_names_a_local_tokenizer_without_blocking_on_a_fifo_config(tmp_path: Path) -> None:
    """tokenizer_id read a local tokenizer folder's config.json with Path.read_text: a FIFO there (a
    shared model folder) blocked prepare. It is passed over, as an unreadable file is."""
    import json

    from kldtui.stages.prepare import tokenizer_id

    folder = tmp_path / "tok"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"name_or_path": "org/model"}))
    assert returns_at_once(lambda: tokenizer_id(str(folder), None)) == ["org/model"]


def _swap_for_fifo(path: Path) -> None:
    """Put a FIFO at ``path`` by rename, as a hostile writer would: an open of the old file keeps it."""
    fifo = path.with_name(path.name + ".fifo")
    os.mkfifo(fifo)
    os.replace(fifo, path)


def test_the_replay_maps_the_lm_head_without_blocking_on_a_fifo_swapped_in(tmp_path: Path) -> None:
    """Compare's replay mapped the head with np.memmap(path) after load_lm_head had checked it through
    safe_io: a FIFO put at the name in between blocked the comparison. The head is mapped from the
    descriptor its header is checked on, which refuses the FIFO at once, naming it."""
    import numpy as np

    from kldtui.errors import BadInput
    from kldtui.formats import fidelity as fid
    from kldtui.stages.compare.sides import Replays

    weight = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    head = fid.write_lm_head(tmp_path / "head", weight, checkpoint_tensor_key="lm_head.weight")
    _swap_for_fifo(head.path)
    (result,) = returns_at_once(lambda: Replays("cpu", chunk=16, threads=1).get(head, "bf16"))
    assert isinstance(result, BadInput), result
    assert str(result).startswith(f"{head.path}: ") and "FIFO" in str(result) and "\n" not in str(result)


def test_export_head_maps_the_descriptor_whose_header_it_checked(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """export-head read the shard's header through safe_io, then np.memmap(path) opened the name again:
    a FIFO renamed over the shard between the two blocked the export. The shard is swapped for a FIFO
    right after its last header read here; the export maps the file it checked and writes its head."""
    import numpy as np

    from kldtui.formats import fidelity as fid
    from kldtui.formats import safetensors_io
    from kldtui.stages import export_head as stage

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    bits = np.random.default_rng(1).integers(0, 1 << 15, (48, 16), dtype=np.uint16)  # BF16 patterns
    shard = checkpoint / "model.safetensors"
    shard.write_bytes(safetensors_io.encode_header({"lm_head.weight": ("BF16", bits.shape)}) + bits.tobytes())
    (checkpoint / "config.json").write_text('{"tie_word_embeddings": false}')

    armed = []  # set once find_head has done its own reads: the next header read is the export's
    real_find, real_read = stage.find_head, safetensors_io.read_header

    def find_head(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = real_find(*args, **kwargs)
        armed.append(True)
        return found

    def read_header(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        header = real_read(path, *args, **kwargs)
        if armed and Path(path) == shard and shard.is_file():
            _swap_for_fifo(shard)
        return header

    monkeypatch.setattr(stage, "find_head", find_head)
    monkeypatch.setattr(safetensors_io, "read_header", read_header)
    (result,) = returns_at_once(lambda: stage.export_head(checkpoint, tmp_path / "head"))
    assert not shard.is_file(), "the shard was not swapped: the test checks nothing"
    assert isinstance(result, fid.LmHead), result
    assert np.array_equal(np.asarray(fid.head_bits(result)), bits)


class _Tokenizer:
    """What the suite's tokenizer record asks of a tokenizer: its vocabulary size."""

    def __len__(self) -> int:
        return 100


def test_prepare_hashes_a_tokenizer_folder_without_blocking_on_a_fifo_swapped_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hidden-state suite's tokenizer record checked is_file() and then read the file with
    Path.read_bytes: a FIFO renamed over tokenizer.json in between blocked prepare. It is read
    through safe_io: refused at once, one line naming it."""
    from kldtui.errors import BadInput
    from kldtui.stages import prepare_hidden

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    real_is_file = Path.is_file

    def is_file(self: Path) -> bool:
        found = real_is_file(self)
        if found and self.name == "tokenizer.json":
            _swap_for_fifo(self)  # after the check, before the read
        return found

    monkeypatch.setattr(Path, "is_file", is_file)
    (result,) = returns_at_once(lambda: prepare_hidden._tokenizer_record(str(folder), _Tokenizer()))
    assert isinstance(result, BadInput), result
    said = str(result)
    assert said.startswith(f"{folder / 'tokenizer.json'}: ") and "FIFO" in said and "\n" not in said, said


def test_prepare_refuses_a_tokenizer_file_over_the_limit_rather_than_reading_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tokenizer file was read whole, whatever its size; one over TOKENIZER_FILE_LIMIT (here made
    small) is refused, one line naming it, and the ones under it are hashed."""
    import hashlib

    from kldtui.errors import BadInput
    from kldtui.stages import prepare_hidden

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{}")
    assert prepare_hidden._tokenizer_record(str(folder), _Tokenizer())["files"] == {
        "tokenizer_config.json": hashlib.sha256(b"{}").hexdigest()}
    (folder / "tokenizer.json").write_bytes(b"x" * 4097)
    monkeypatch.setattr(prepare_hidden, "TOKENIZER_FILE_LIMIT", 4096)
    with pytest.raises(BadInput) as info:
        prepare_hidden._tokenizer_record(str(folder), _Tokenizer())
    said = str(info.value)
    assert said.startswith(f"{folder / 'tokenizer.json'}: ") and "larger than 4.00 KiB" in said, said
    assert "\n" not in said
