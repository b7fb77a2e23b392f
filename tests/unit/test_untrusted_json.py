"""Text in files from shared folders and the Hub cannot carry terminal escape sequences to the screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.untrusted_json import loads
from tests.fixtures_decide import make_report, write_report

ESC_TITLE = "\x1b]0;owned\x07"  # an escape sequence that retitles the terminal window


@pytest.mark.parametrize("doc", [
    {"candidate_dir": f"/runs/{ESC_TITLE}"},
    {f"key{ESC_TITLE}": 1},
    {"per_window_arrays": {"domain": ["prose", "co\x9bde"]}},  # C1: a one-byte CSI
    {"nested": [["a", "b\x7f"]]},
    [f"top{ESC_TITLE}"],
])
def test_a_control_character_anywhere_is_refused_naming_the_file(doc: object) -> None:
    with pytest.raises(BadInput) as caught:
        loads(json.dumps(doc), where="shared/x.json", what="the report")
    said = str(caught.value)
    assert said.startswith("shared/x.json: the report holds a control character (U+")
    assert "fix or replace it" in said
    assert not any(c in said for c in "\x1b\x07\x9b\x7f")  # the message itself is safe to print


def test_ordinary_text_passes_unchanged() -> None:
    doc = {"name": "q4_K_M — Straße", "command": "vllm serve\t--tp 2\r\n", "list": ["a", ["b"]], "n": 1.5}
    assert loads(json.dumps(doc), where="x", what="y") == doc


def test_a_hostile_report_is_refused_by_the_commands_that_print_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_report(tmp_path / "a.json", make_report([0.01] * 8, candidate_dir="/runs/a"))
    bad = write_report(tmp_path / "b.json", make_report([0.02] * 8, candidate_dir=f"/runs/{ESC_TITLE}b"))
    for argv in (["leaderboard", str(good), str(bad)], ["diff", str(good), str(bad)], ["view", str(bad)]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err
        assert f"{bad}: the comparison report holds a control character (U+001B) in 'candidate_dir'" in err


def test_a_hostile_suite_manifest_and_noise_model_are_refused(tmp_path: Path) -> None:
    from kldtui.decide.noise import load_floor
    from kldtui.formats.suite import load_suite
    from tests.hub_server import make_dataset

    root = make_dataset(tmp_path / "suite", windows=2)
    manifest = root / "suite-manifest.json"
    doc = json.loads(manifest.read_text())
    doc["windows"][0]["domain"] = f"prose{ESC_TITLE}"
    manifest.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="suite-manifest.json: .* control character .* in 'domain'"):
        load_suite(root)
    noise = tmp_path / "noise.json"
    noise.write_text(json.dumps({"format": "kldtui-noise-floor-v1", "source": f"a{ESC_TITLE}"}))
    with pytest.raises(BadInput, match="noise.json: the noise model holds a control character .* 'source'"):
        load_floor(noise)


def test_names_from_file_names_show_control_characters_escaped() -> None:
    """A report's name falls back to its file's name, which no loader checks: shown escaped."""
    from kldtui.formats.report_model import as_report
    from kldtui.formats.report_names import report_name, unique_names

    report = as_report(make_report([0.01] * 8, candidate_dir=""))
    assert report_name(report, f"/shared/q4{ESC_TITLE}.json") == "q4\\x1b]0;owned\\x07"
    twins = unique_names(["q4", "q4"], [f"/shared/a{ESC_TITLE}/comparison.json", "/shared/b/comparison.json"])
    assert twins == ["q4 (a\\x1b]0;owned\\x07)", "q4 (b)"]


def test_error_lines_and_batch_lines_show_control_characters_escaped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file name in a shared folder, or a server's log line, reaches the terminal escaped."""
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.events import Notice

    assert main(["view", str(tmp_path / f"q{ESC_TITLE}.json")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "q\\x1b]0;owned\\x07.json: comparison report not found" in err
    out = io.StringIO()
    with BatchReporter(out) as reporter:
        reporter(Notice("capture", f"skipped {tmp_path / ESC_TITLE}"))
    assert "\x1b" not in out.getvalue() and "skipped" in out.getvalue() and "\\x1b]0;owned" in out.getvalue()


def test_markdown_literal_keeps_text_text() -> None:
    from kldtui.formats.untrusted_json import markdown_literal

    assert markdown_literal("[q4](site) <img src=x> a|b *c* `d` \\e") == \
        "\\[q4\\](site) \\<img src=x> a\\|b \\*c\\* \\`d\\` \\\\e"
    assert markdown_literal("0.9963 < 0.999, q4_k_m") == "0.9963 < 0.999, q4_k_m"  # inert: as written
    assert markdown_literal("two\nlines\x1b[2J") == "two lines\\\\x1b\\[2J"  # renders as two lines\\x1b[2J


def test_markdown_code_fences_any_backticks() -> None:
    from kldtui.formats.untrusted_json import markdown_code

    assert markdown_code("plain") == "`plain`"
    assert markdown_code("a `b` c") == "``a `b` c``"
    assert markdown_code("``x") == "``` ``x ```"
