"""A download killed at any moment (``kill -9`` of ``kldtui download``, with the real huggingface_hub
client against a loopback Hub that holds its answers after N files) resumes to the same folder an
uninterrupted download makes, and is never another repository's to take over: the folder's download
record names the repository, revision and commit from before the first file. A download that moves a
folder to another commit, killed at any moment, resumes to the folder an uninterrupted move makes: one
commit's files, the other commit's set aside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.stages.reference import PARTIAL_DIR
from kldtui.stages.verify import RECORD_NAME, verify_path
from tests.hub_server import HubServer, make_dataset

REPO = "kldtui-test/tiny-reference"
OTHER = "kldtui-test/another-reference"
WINDOWS = 5
# the files a download of the whole suite fetches: 2 manifests, a token file and a logits file a window
FILES = 2 + 2 * WINDOWS


def _contents(root: Path) -> dict[str, bytes]:
    """What a download left in the folder: every file but the client's own metadata (``.cache/``) and
    the record's time."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".cache/"):
            continue
        data = path.read_bytes()
        if rel == RECORD_NAME:
            doc = json.loads(data)
            doc.pop("updated_utc")
            data = json.dumps(doc, sort_keys=True).encode()
        found[rel] = data
    return found


@pytest.mark.slow
def test_a_download_killed_at_any_moment_resumes_to_the_same_folder_and_is_refused_to_another_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with HubServer() as hub:
        served = make_dataset(tmp_path / "server", windows=WINDOWS)
        commit = hub.add_dataset(REPO, served)
        hub.add_dataset(OTHER, make_dataset(tmp_path / "other", windows=WINDOWS, seed=5))
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        whole = tmp_path / "whole"
        assert main(["download", REPO, "--local-dir", str(whole)]) == 0
        expected = _contents(whole)
        assert json.loads(expected[RECORD_NAME])["state"] == "finished"
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint}
        # killed before the first file, after the suite manifest, after both manifests, among the token
        # files, among the logits files and before the last one
        for files in (0, 1, 2, 5, 8, FILES - 1):
            out = tmp_path / f"killed-after-{files}"
            _killed_after(hub, files, [sys.executable, "-m", "kldtui", "download", REPO, "--local-dir",
                                       str(out)], env)
            record = json.loads((out / RECORD_NAME).read_text())
            assert (record["repo_id"], record["revision"], record["commit"], record["state"]) == (
                REPO, None, commit, "downloading"), files
            # another repository is refused the folder, before any request
            asked = len(hub.log)
            capsys.readouterr()
            assert main(["download", OTHER, "--local-dir", str(out)]) == 2, files
            last = capsys.readouterr().err.splitlines()[-1]
            assert last.startswith(f"kldtui: error: {out}: holds a download, not finished, of {REPO} "
                                   f"(commit {commit[:12]})"), last
            # (the killed download's held request may still be logged once released: only OTHER's count)
            assert not [r for r in hub.log[asked:] if OTHER in r.url], hub.log[asked:]
            # the same one resumes it, to the same folder
            assert main(["download", REPO, "--local-dir", str(out)]) == 0, files
            assert _contents(out) == expected, files
            assert not list((out / PARTIAL_DIR).glob("*.part"))
            assert verify_path(out).ok


def _killed_after(hub: HubServer, files: int, command: list[str], env: dict[str, str]) -> None:
    """Run ``command`` until the Hub holds its file downloads after ``files`` files, then kill it."""
    hub.hold_files_after(files)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        held = hub.wait_held(120)
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=60)
        hub.release()
    assert held, f"after {files} file(s): the download never reached the Hub's hold; {err[-2000:]}"


@pytest.mark.slow
def test_a_revision_move_killed_at_any_moment_resumes_to_the_folder_an_uninterrupted_move_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with HubServer() as hub:
        first = hub.add_dataset(REPO, make_dataset(tmp_path / "server", windows=WINDOWS))
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        held = tmp_path / "held"  # the folder at the first commit, copied for each move
        assert main(["download", REPO, "--local-dir", str(held)]) == 0
        # main moves to a commit of 3 windows whose token files (but one) have other names
        served = make_dataset(tmp_path / "server-v2", windows=3, seed=7)
        newer = hub.add_dataset(REPO, served, keep_older=True)
        move = ["download", REPO, "--revision", "main"]
        whole = tmp_path / "whole"
        shutil.copytree(held, whole, symlinks=True)
        assert main([*move, "--local-dir", str(whole)]) == 0
        expected = _contents(whole)
        aside = f".kldtui-previous/{first}/"
        assert sorted(rel for rel in expected if rel.startswith(aside)) == [
            aside + rel for rel in ("ref/logits_003.safetensors", "ref/logits_004.safetensors",
                                    "tokens/window-001-prose.json", "tokens/window-002-code.json",
                                    "tokens/window-003-code.json", "tokens/window-004-instruction.json")]
        record = json.loads(expected[RECORD_NAME])
        assert (record["commit"], record["windows"], record["state"]) == (newer, [0, 1, 2], "finished")
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint}
        # the new commit's 8 files: killed before the first, after the suite manifest, after both
        # manifests, among the token files, among the logits files and before the last one
        for files in (0, 1, 2, 4, 6, 7):
            out = tmp_path / f"moved-killed-after-{files}"
            shutil.copytree(held, out, symlinks=True)
            _killed_after(hub, files, [sys.executable, "-m", "kldtui", *move, "--local-dir", str(out)], env)
            record = json.loads((out / RECORD_NAME).read_text())
            assert (record["commit"], record["state"], record["moving_from"]["commit"]) == (
                newer, "downloading", first), files
            assert main([*move, "--local-dir", str(out)]) == 0, files
            assert _contents(out) == expected, files
            assert not list((out / PARTIAL_DIR).glob("*.part"))
            assert verify_path(out).ok
