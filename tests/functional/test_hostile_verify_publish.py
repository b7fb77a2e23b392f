"""Issue 27 item 10 (verify and publish): publish refuses repository ids the Hub would refuse (or
that name other places), verify exits 2 on a malformed manifest as compare does, and verify on a
suite folder without ref/ says that no logits were checked instead of "suite OK"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.cli.main import main
from tests import fidelity_fixture as fx
from tests.hub_server import make_dataset


def _last_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("repo_id", ["../x", "me/..", "me/x y", "me/.", "./x", "me/x/y", "me//x", "/x",
                                     "me/-x", "me/x-", "me/a--b", "me/a..b", "me/" + "x" * 97, "me/x\ty",
                                     "m\u00e9/x", "me/x.git/", " me/x"])
def test_publish_dry_run_refuses_bad_repository_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    repo_id: str) -> None:
    root = make_dataset(tmp_path / "ds", windows=1, context_length=9, vocab=16)
    assert main(["publish", str(root), "--repo-id", repo_id, "--dry-run"]) == 2
    line = _last_error(capsys)
    assert "--repo-id" in line and "ORG/NAME" in line


@pytest.mark.parametrize("repo_id", ["me/x", "my-org/qwen3-8b-kld-reference", "a_b/c.d-e_1", "me/X" * 1])
def test_publish_dry_run_accepts_good_repository_ids(tmp_path: Path, repo_id: str) -> None:
    root = make_dataset(tmp_path / "ds", windows=1, context_length=9, vocab=16)
    assert main(["publish", str(root), "--repo-id", repo_id, "--dry-run"]) == 0


@pytest.mark.parametrize("rel", ["ref/manifest.json", "suite-manifest.json"])
def test_verify_exits_2_on_a_malformed_manifest_like_compare(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], rel: str) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=16)
    (root / rel).write_text('{"format_version": 1, "windows": "not a list"')
    assert main(["verify", str(root)]) == 2
    out = capsys.readouterr()
    assert rel.split("/")[-1] in out.err and "OK" not in out.out
    code = main(["compare", "--suite-manifest", str(root), "--reference-dir", str(root / "ref"),
                 "--candidate-dir", str(root / "ref"), "--output", str(tmp_path / "o.json")])
    assert code == 2


def test_verify_on_a_root_without_ref_does_not_say_suite_ok(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=16)
    for f in (root / "ref").iterdir():
        f.unlink()
    (root / "ref").rmdir()
    assert main(["verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "suite OK" not in out.replace(f"suite {root}: OK", "suite OK")
    assert "no reference logits" in out and "ref/manifest.json" in out
    doc = json.loads((root / "suite-manifest.json").read_text())
    assert doc["window_count"] == 2


def test_verify_exits_2_on_a_top_manifest_status_it_does_not_know(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fx.build(tmp_path / "suite", contexts=4).root
    top = root / "manifest.json"
    doc = json.loads(top.read_text())
    doc["status"] = "verified by us"
    top.write_text(json.dumps(doc))
    assert main(["verify", str(root)]) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if "status" in line]
    assert len(said) == 1 and said[0].startswith("FAIL ") and (
        f"{top}: status 'verified by us' is not one of 'qualified', 'not qualified', 'replay not checked'; "
        in said[0]), said


def test_verify_exits_2_on_a_capture_runtime_status_it_does_not_know(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fx.build(tmp_path / "suite", contexts=4).root
    top = root / "manifest.json"
    doc = json.loads(top.read_text())
    doc["capture_runtime"]["status"] = "approved by us"
    top.write_text(json.dumps(doc))
    assert main(["verify", str(root)]) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if "status" in line]
    assert len(said) == 1 and said[0].startswith("FAIL ") and (
        f"{top} capture_runtime: status 'approved by us' is not one of 'captured', 'qualified'; "
        in said[0]), said
