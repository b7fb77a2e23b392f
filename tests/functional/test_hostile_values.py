"""Issue 27 item 8: every bad value is one line naming where it came from, exit 2, before any work:
bootstrap resamples that would fill the memory, negative seeds, timeouts that are NaN, negative or
0, a base URL that is not one, the embedded server's impossible model settings (which relayed the
server's traceback, or gave a KL of 0), prepare on a non-UTF-8 JSON Lines file or a folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.text import human_bytes
from tests.paths import EXAMPLE_SUITE


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("[")]
    assert code == 2, (code, captured.err[-2000:], captured.out[-2000:])
    assert len(lines) == 1 and "internal error" not in lines[0] and "Traceback" not in captured.err, lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("r") / "r.json"
    assert main(["compare", "--suite-manifest", str(EXAMPLE_SUITE), "--reference-dir",
                 str(EXAMPLE_SUITE / "ref"), "--candidate-dir", str(EXAMPLE_SUITE / "candidate"), "--output",
                 str(out), "--bootstrap-samples", "50"]) == 0
    return out


def _compare(tmp_path: Path, *extra: str) -> list[str]:
    return ["compare", "--suite-manifest", str(EXAMPLE_SUITE), "--reference-dir", str(EXAMPLE_SUITE / "ref"),
            "--candidate-dir", str(EXAMPLE_SUITE / "candidate"), "--output", str(tmp_path / "o.json"), *extra]


@pytest.mark.parametrize(("flag", "value"), [("--bootstrap-samples", "10000000000"),
                                             ("--bootstrap-samples", "1"), ("--bootstrap-seed", "-1")])
def test_compare_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    _one_line_exit_2(_compare(tmp_path, flag, value), capsys, flag)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("command", ["diff", "leaderboard"])
@pytest.mark.parametrize(("flag", "value"), [("--bootstrap-samples", "10000000000"), ("--seed", "-1")])
def test_decide_flags(report: Path, capsys: pytest.CaptureFixture[str], command: str, flag: str,
                      value: str) -> None:
    reports = [str(report), str(report)]
    _one_line_exit_2([command, *reports, flag, value], capsys, flag)


@pytest.mark.parametrize(("flag", "value"), [("--request-timeout", "-1"), ("--request-timeout", "nan"),
                                             ("--request-timeout", "0"), ("--request-timeout", "inf"),
                                             ("--base-url", "::::"), ("--base-url", "ftp://x"),
                                             ("--base-url", "http://"), ("--base-url", "http://h:99999")])
def test_capture_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    server = tmp_path / "server"
    server.mkdir()
    _one_line_exit_2(["capture", "--suite-dir", str(EXAMPLE_SUITE), "--capture-dir", str(tmp_path / "cap"),
                      "--run-name", "r", "--server-capture-dir", str(server), flag, value], capsys, flag)


PROFILE = """
[reference]
local_dir = "suite"
[candidate]
kind = "embedded"
{candidate}
[compare]
{compare}
"""


@pytest.mark.parametrize(("section", "line", "key"), [
    ("compare", "bootstrap_samples = 10000000000", "bootstrap_samples"),
    ("compare", "bootstrap_seed = -1", "bootstrap_seed"),
    ("candidate", "request_timeout = nan", "request_timeout"),
    ("candidate", "request_timeout = 0", "request_timeout"),
    ("candidate", "startup_timeout = -1.0", "startup_timeout"),
    ("candidate", "model_seed = -1", "model_seed"),
    ("candidate", "vocab_size = 1000000000000", "vocab_size"),
    ("candidate", "vocab_size = 1", "vocab_size"),
    ("candidate", "perturb = nan", "perturb"),
    ("candidate", "perturb = -1.0", "perturb"),
    ("candidate", "max_num_batched_tokens = 0", "max_num_batched_tokens"),
])
def test_profile_values(tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, line: str,
                        key: str) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(candidate=line if section == "candidate" else "",
                                      compare=line if section == "compare" else ""))
    _one_line_exit_2(["--profile", str(profile), "run", "--batch"], capsys, str(profile), key)


def test_prepare_on_non_utf8_jsonl_and_on_a_folder(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from tests.fixtures_prepare import build_tokenizer

    tok = build_tokenizer(tmp_path / "tok")
    data = tmp_path / "data.jsonl"
    data.write_bytes(json.dumps({"text": "caf\u00e9 " * 50}, ensure_ascii=False).encode("latin-1") + b"\n")
    sources = tmp_path / "sources.toml"
    sources.write_text(f'[[source]]\ndomain = "prose"\ndataset = "{data}"\nsplit = "train"\nwindows = 1\n'
                       'text_field = "text"\n')
    _one_line_exit_2(["prepare", "--tokenizer", str(tok), "--output-dir", str(tmp_path / "out"),
                      "--sources", str(sources), "--context-length", "8"], capsys, "data.jsonl", "UTF-8")
    _one_line_exit_2(["prepare", "--tokenizer", str(tok), "--output-dir", str(tmp_path / "out"),
                      "--sources", str(tmp_path)], capsys, str(tmp_path), "folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("manifest", ["suite-manifest.json", "candidate/manifest.json"])
def test_a_manifest_over_the_size_limit_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          manifest: str) -> None:
    """Manifests were read whole whatever their size (read_versioned passed no limit), where download
    records and model configs are bounded: a manifest padded past MANIFEST_LIMIT (valid JSON still) is
    refused, one line naming it, exit 2."""
    import shutil

    from kldtui.formats.suite import MANIFEST_LIMIT

    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLE_SUITE, suite)
    path = suite / manifest
    with path.open("ab") as handle:
        handle.write(b" " * (MANIFEST_LIMIT + 1 - path.stat().st_size))
    argv = ["compare", "--suite-manifest", str(suite / "suite-manifest.json"), "--reference-dir",
            str(suite / "ref"), "--candidate-dir", str(suite / "candidate"), "--output",
            str(tmp_path / "r.json"), "--bootstrap-samples", "50"]
    line = _one_line_exit_2(argv, capsys, str(path), f"larger than {human_bytes(MANIFEST_LIMIT)}")
    assert line.startswith(f"kldtui: error: {path}: "), line


def _pad_past(path: Path, limit: int) -> None:
    """``path`` grown to ``limit + 1`` bytes by a hole (sparse: nothing but its last byte is written)."""
    with path.open("r+b") as handle:
        handle.seek(limit)
        handle.write(b" ")


@pytest.mark.parametrize("kind", ["report", "noise model", "token file"])
def test_a_file_over_its_kind_s_size_limit_is_refused_in_one_line(
        report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Comparison reports, noise models and token files were read whole whatever their size (read_json
    took no limit): each kind is refused past its own limit, one line naming the file, exit 2."""
    import shutil

    from kldtui.decide.noise import NOISE_MODEL_LIMIT
    from kldtui.formats.report_model import REPORT_LIMIT
    from kldtui.formats.suite import TOKEN_FILE_LIMIT

    other = tmp_path / "b.json"
    shutil.copy(report, other)
    if kind == "report":
        padded, limit, argv = other, REPORT_LIMIT, ["diff", str(report), str(other), "--no-noise-floor"]
    elif kind == "noise model":
        padded, limit = tmp_path / "noise.json", NOISE_MODEL_LIMIT
        padded.write_text("{}")
        argv = ["diff", str(report), str(other), "--noise", str(padded)]
    else:
        suite = tmp_path / "suite"
        shutil.copytree(EXAMPLE_SUITE, suite)
        padded, limit = sorted((suite / "tokens").iterdir())[0], TOKEN_FILE_LIMIT
        argv = _compare(tmp_path, "--bootstrap-samples", "50")
        argv[argv.index("--suite-manifest") + 1] = str(suite / "suite-manifest.json")
    _pad_past(padded, limit)
    line = _one_line_exit_2(argv, capsys, f"larger than {human_bytes(limit)}")
    assert line.startswith(f"kldtui: error: {padded}: "), line
    assert not (tmp_path / "o.json").exists()
