"""``kldtui publish`` reads every file it uploads for secrets, whatever its size (docs/SAFETY.md,
"Secrets"): a large file is searched in parts, never read whole, and a secret near its end or cut
by a part's end stops the publish as in a small file; a large JSON file is checked by field name
too, or refused when it is too large to be. Before, a text file over 16 MiB (a logits suite) or
64 MiB (a hidden-state suite) went up unread."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.events import Notice
from kldtui.stages.publish_secrets import JSON_SCAN_LIMIT, SCAN_CHUNK
from kldtui.text import human_bytes
from tests.hub_server import make_dataset

pytestmark = pytest.mark.timeout(180)
OLD_LOGITS_LIMIT = 16 * 1024 * 1024  # what publish read of a logits suite's file before
OLD_HIDDEN_LIMIT = 64 * 1024 * 1024  # and of a hidden-state suite's
HF = "hf_" + "Kd8sLq2Wm4Xz7Pv1Rt9Yb3Nc6Gh5Jf0Ua"
FILLER = b"step 1200: loss 2.3125, lr 3.0e-4, tokens/s 18400\n"


def _large_text(path: Path, size: int, secret_at: int) -> Path:
    """A text file of ``size`` bytes, ``HF`` written at byte ``secret_at`` (a word of its own)."""
    body = bytearray((FILLER * (size // len(FILLER) + 1))[:size])
    body[secret_at - 1:secret_at + len(HF) + 1] = f" {HF} ".encode()
    path.write_bytes(bytes(body))
    return path


def _sparse(path: Path, size: int, text: bytes = b"", at: int | None = None) -> Path:
    """A file of ``size`` bytes that is all hole but ``text`` at ``at`` (its end by default)."""
    with path.open("wb") as handle:
        handle.truncate(size)
        handle.seek(size - len(text) if at is None else at)
        handle.write(text)
    return path


def _publish_error(root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    assert len(err) == 1, err
    return err[0]


# -- a logits suite: by value ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["cut by a part's end", "near the end"])
def test_a_secret_in_a_large_text_file_stops_the_publish(tmp_path: Path, where: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    size = OLD_LOGITS_LIMIT + SCAN_CHUNK // 2
    at = 3 * SCAN_CHUNK - len(HF) // 2 if where == "cut by a part's end" else size - len(HF) - 10
    log = _large_text(root / "train.log", size, at)
    err = _publish_error(root, capsys)
    assert f"{log}: holds a value shaped like a secret" in err and HF not in err, err
    log.write_bytes(log.read_bytes().replace(HF.encode(), b"x" * len(HF)))  # the same file, no secret
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 0


# -- a logits suite: by name, in a JSON file over the old limit ---------------------------------------
def test_a_large_json_file_s_runtime_is_redacted_as_a_small_one_s(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.stages.publish import _redact_uploads

    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    secret = "opaque-auth-1234"  # no secret's shape: only its name tells
    rows = [FILLER.decode()] * (OLD_LOGITS_LIMIT // len(FILLER) + 1000)
    path = root / "capture-runtime.json"
    path.write_text(json.dumps({"rows": rows, "runtime": {"env": {"HF_AUTH": secret}}}))
    assert path.stat().st_size > OLD_LOGITS_LIMIT
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert f"{path}: holds what looks like a secret" in err and secret not in err, err
    said: list[object] = []
    _redact_uploads(root, ["capture-runtime.json"], dry_run=False, emit=said.append)
    assert secret not in path.read_text()
    assert json.loads(path.read_text())["runtime"]["env"]["HF_AUTH"] == "<redacted>"
    assert [e.text for e in said if isinstance(e, Notice)] == [
        f"{path}: held what looks like a secret; redacted in place before the upload"]


def test_a_json_file_too_large_to_check_by_name_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    big = _sparse(root / "runtime.json", JSON_SCAN_LIMIT + 1, b'{"runtime": {"HF_AUTH": "opaque"}}')
    err = _publish_error(root, capsys)
    assert f"{big}: a JSON file larger than {human_bytes(JSON_SCAN_LIMIT)}" in err, err
    assert "move it out of the folder or split it" in err, err


# -- a hidden-state suite: refused, by value and by name, without reading the file whole ------------
@pytest.mark.parametrize("where", ["cut by a part's end", "near the end"])
def test_a_hidden_suite_s_large_file_holding_a_secret_is_refused_unread_whole(tmp_path: Path,
                                                                              where: str) -> None:
    from kldtui.stages.publish_hidden import refuse_secrets

    size = OLD_HIDDEN_LIMIT + SCAN_CHUNK // 2
    at = 5 * SCAN_CHUNK - 7 if where == "cut by a part's end" else None
    _sparse(tmp_path / "notes.txt", size, f"token {HF}\n".encode(), at)
    tracemalloc.start()
    try:
        with pytest.raises(BadInput) as caught:
            refuse_secrets(tmp_path, ["notes.txt"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    line = str(caught.value)
    assert line.startswith(f"{tmp_path / 'notes.txt'}: holds what looks like a secret") and HF not in line
    assert peak < 5 * SCAN_CHUNK < size // 3, f"held {peak} bytes of a {size}-byte file"
    _sparse(tmp_path / "clean.txt", size, b"nothing to see\n", at)
    refuse_secrets(tmp_path, ["clean.txt"])


def test_a_hidden_suite_s_json_file_too_large_to_check_by_name_is_refused(tmp_path: Path) -> None:
    from kldtui.stages.publish_hidden import refuse_secrets

    _sparse(tmp_path / "sources.json", OLD_HIDDEN_LIMIT + 1, b'{"runtime": {"HF_AUTH": "opaque"}}')
    with pytest.raises(BadInput, match=r"sources\.json: a JSON file larger than"):
        refuse_secrets(tmp_path, ["sources.json"])
