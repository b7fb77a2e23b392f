"""Names from files and flags that become paths (issue 11 item 1) and malformed manifests
(issue 11, "clear errors"): every one is refused where it is loaded, with one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.chunks import sanitize_request_id, write_chunk
from kldtui.formats.names import NAME_MAX, check_name, name_problem
from kldtui.formats.suite import load_logits_manifest, load_suite
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE


@pytest.fixture
def suite_copy(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".kldtui-*"))
    return root


def edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("bad", ["..", ".", "a/b", "x/../../../../ESC", "", "a\\b", "a b", "ä",
                                 "x" * (NAME_MAX + 1), "a..b", "/abs"])
def test_one_rule_refuses_unsafe_names(bad: str) -> None:
    assert name_problem(bad) is not None
    with pytest.raises(BadInput, match="plain name"):
        check_name(bad, "domain", "here")


@pytest.mark.parametrize("good", ["prose", "code", "long_context-2", "v1.2", "x" * NAME_MAX])
def test_one_rule_keeps_plain_names(good: str) -> None:
    assert check_name(good, "domain", "here") == good


@pytest.mark.parametrize("rid", ["..", ".", "", "a/../..", "../../etc", "x" * 400, "cmpl-a..b-0-1"])
def test_sanitized_request_ids_are_safe_names(rid: str) -> None:
    name = sanitize_request_id(rid)
    assert name_problem(name) is None, (rid, name)


def test_sanitized_request_ids_stay_distinct_and_unchanged_when_plain() -> None:
    plain = "cmpl-kldtui-run-w000-abcd-0-1234abcd"
    assert sanitize_request_id(plain) == plain
    assert sanitize_request_id("x" * 300 + "a") != sanitize_request_id("x" * 300 + "b")


def test_chunk_writer_stays_inside_the_capture_folder(tmp_path: Path) -> None:
    import numpy as np

    capture = tmp_path / "a" / "capture"
    capture.mkdir(parents=True)
    path = write_chunk(capture, "..", 0, np.zeros((2, 4), np.float32), 4)
    assert path is not None and path.parent.parent == capture


@pytest.mark.parametrize("domain", ["x/../../../../ESC", "..", "a/b"])
def test_suite_domain_that_would_escape_is_refused_at_load(suite_copy: Path, domain: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][0]["domain"] = domain

    edit(suite_copy / "suite-manifest.json", change)
    with pytest.raises(BadInput, match=r"suite-manifest\.json windows\[0\]: domain"):
        load_suite(suite_copy)


@pytest.mark.parametrize("token_file", ["../../secret.json", "/etc/passwd", "tokens/../../x.json",
                                        "tokens\\..\\x.json"])
def test_suite_token_file_outside_is_refused_at_load(suite_copy: Path, token_file: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][1]["token_file"] = token_file

    edit(suite_copy / "suite-manifest.json", change)
    with pytest.raises(BadInput, match=r"windows\[1\]: token_file"):
        load_suite(suite_copy)


@pytest.mark.parametrize(("field", "value"), [("file", "../candidate/logits_001.safetensors"),
                                              ("file", "/tmp/x.safetensors"), ("domain", "../x")])
def test_logits_manifest_names_are_refused_at_load(suite_copy: Path, field: str, value: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][0][field] = value

    edit(suite_copy / "ref" / "manifest.json", change)
    with pytest.raises(BadInput, match=rf"manifest\.json windows\[0\]: {field}"):
        load_logits_manifest(suite_copy / "ref")


@pytest.mark.parametrize("run_name", ["..", "a/b", "../x", "."])
def test_capture_refuses_an_unsafe_run_name_up_front(tmp_path: Path, run_name: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    code = main(["capture", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"),
                 "--run-name", run_name, "--server-capture-dir", str(server_dir),
                 "--base-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "run name" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("run_name", ["..", "a/b"])
def test_finalize_refuses_an_unsafe_run_name(tmp_path: Path, run_name: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cap" / "a" / "b").mkdir(parents=True)
    code = main(["finalize", "--suite-dir", str(EXAMPLE), "--capture-dir", str(tmp_path / "cap"),
                 "--run-name", run_name, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--run-name" in err
    assert not (tmp_path / "out").exists()


# -- malformed content: one BadInput naming the file, never an internal error ----------------------

@pytest.mark.parametrize("shape", [[64, "x"], [64, None], [64.7, 256], [True, 256], [-1, 256]])
def test_malformed_manifest_shape_is_refused(suite_copy: Path, shape: list[Any]) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][0]["shape"] = shape

    edit(suite_copy / "ref" / "manifest.json", change)
    with pytest.raises(BadInput, match=r"windows\[0\]: shape"):
        load_logits_manifest(suite_copy / "ref")


def test_malformed_window_count_is_refused(suite_copy: Path) -> None:
    edit(suite_copy / "ref" / "manifest.json", lambda d: d.__setitem__("window_count", "six"))
    with pytest.raises(BadInput, match="window_count"):
        load_logits_manifest(suite_copy / "ref")


def test_malformed_domain_index_is_refused(suite_copy: Path) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["windows"][2]["domain_index"] = "a"

    edit(suite_copy / "suite-manifest.json", change)
    with pytest.raises(BadInput, match="domain_index"):
        load_suite(suite_copy)


def test_non_utf8_and_deeply_nested_manifests_are_refused(suite_copy: Path) -> None:
    path = suite_copy / "ref" / "manifest.json"
    path.write_bytes(b'{"format_version": 1, "x": "\xff\xfe"}')
    with pytest.raises(BadInput, match="not UTF-8"):
        load_logits_manifest(path)
    path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(BadInput, match=str(path)):
        load_logits_manifest(path)


def test_manifest_symlink_loop_is_refused(tmp_path: Path) -> None:
    loop = tmp_path / "manifest.json"
    loop.symlink_to(loop)
    with pytest.raises(BadInput, match="cannot be read"):
        load_logits_manifest(loop)
