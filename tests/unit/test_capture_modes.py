"""The capture mode is a type (kldtui.capture_modes): the profile, the CLI and the server's
environment parse into one registered strategy object; what it tells the server, what it writes
and what finalize produces come from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kldtui import capture_modes, settings
from kldtui.capture_modes import HIDDEN, LOGITS, MODE_ENV, SCORE, CaptureMode, ChunkRows
from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.chunks import ERROR_MARKER, LOGITS_CHUNKS, check_chunk_dir
from kldtui.formats.scores import SCORE_CHUNKS
from kldtui.formats.suite_writer import write_suite
from kldtui.servers.base import capture_env
from kldtui.workflow.profile import profile_from_dict
from tests.fixtures_capture_io import InlineIO


def test_the_registry_holds_logits_score_and_hidden() -> None:
    assert capture_modes.names() == ("logits", "score", "hidden")
    assert capture_modes.DEFAULT is LOGITS
    for mode in capture_modes.modes():
        assert isinstance(mode, CaptureMode) and capture_modes.get(mode.name) is mode
        assert mode.label.startswith(mode.name)
    assert LOGITS.chunks is LOGITS_CHUNKS and SCORE.chunks is SCORE_CHUNKS
    assert (LOGITS.file_name(3), SCORE.file_name(3)) == ("logits_003.safetensors", "scores_003.safetensors")
    assert (LOGITS.manifest_name, SCORE.manifest_name) == ("manifest.json", "scores-manifest.json")
    # the registry stays light (no NumPy): score mode spells its names, the file format owns them
    from kldtui.formats.scores import SCORES_MANIFEST, score_file_name

    assert SCORE.manifest_name == SCORES_MANIFEST and SCORE.file_name(7) == score_file_name(7)
    assert LOGITS.disk_bytes_per_row(1000) == 4000 and SCORE.disk_bytes_per_row(1000) is None
    assert HIDDEN.file_name(3) == "hidden_0003.safetensors" and HIDDEN.manifest_name == "manifest.json"
    assert HIDDEN.saves_live_sample and not LOGITS.saves_live_sample and not SCORE.saves_live_sample


def test_user_input_parses_into_the_mode_or_one_line() -> None:
    assert capture_modes.parse("score") is SCORE and capture_modes.parse(SCORE) is SCORE
    with pytest.raises(BadInput, match=r"^--mode 'scores' is not one of logits, score, hidden; did you mean "
                       r"'score'\?$"):
        capture_modes.flag("scores")
    with pytest.raises(BadInput, match=r"^\[capture\] mode 'states' is not one of logits, score, hidden$"):
        capture_modes.parse("states", "[capture] mode")


def test_the_cli_mode_flag_refuses_an_unknown_mode_in_one_line(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    for command in ("capture", "finalize"):
        code = main([command, "--suite-dir", str(tmp_path), "--capture-dir", str(tmp_path), "--run-name", "r",
                     "--mode", "logit"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err == ["kldtui: error: --mode 'logit' is not one of logits, score, hidden; "
                                     "did you mean 'logits'?"], err


def test_the_profile_parses_into_the_mode_and_tells_the_server(tmp_path: Path) -> None:
    score = profile_from_dict({"candidate": {"kind": "embedded"}, "capture": {"mode": "score"}},
                              base_dir=tmp_path)
    assert score.capture.mode is SCORE
    env = capture_env(score.capture_target())
    assert env[MODE_ENV] == "score" and Path(env[settings.SCORE_SUITE.name]).is_absolute()
    assert env[settings.SCORE_REFERENCE.name] == str(Path(env[settings.SCORE_SUITE.name]) / "ref")
    logits = profile_from_dict({"candidate": {"kind": "embedded"}}, base_dir=tmp_path)
    assert logits.capture.mode is LOGITS and capture_env(logits.capture_target()) == {}


def test_the_server_reads_its_mode_from_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert capture_modes.server_mode({}) is LOGITS
    assert capture_modes.server_mode({MODE_ENV: " Score "}) is SCORE
    assert capture_modes.server_mode({MODE_ENV: "hidden"}) is HIDDEN
    with pytest.raises(settings.SettingError, match=r"^environment variable KLDTUI_CAPTURE_MODE='states': "
                       r"not a capture mode; it takes one of logits, score, hidden \(default: logits\)"):
        capture_modes.server_mode({MODE_ENV: "states"})
    # a server refuses a mode no one registered when it starts
    from kldtui.embedded.__main__ import main as embedded_main
    from kldtui.hook import vllm_plugin

    monkeypatch.setenv(MODE_ENV, "states")
    assert embedded_main(["--port", "0"]) == 2
    assert "KLDTUI_CAPTURE_MODE='states': not a capture mode" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    with pytest.raises(settings.SettingError, match="KLDTUI_CAPTURE_MODE='states'"):
        vllm_plugin.register()
    assert vllm_plugin.installed() == {}


def test_capture_records_name_the_mode_only_when_not_the_default() -> None:
    assert LOGITS.record_value is None and SCORE.record_value == "score"
    assert capture_modes.from_record(None) is LOGITS and capture_modes.from_record("score") is SCORE
    assert capture_modes.from_record("hidden") is HIDDEN and capture_modes.from_record("states") is None


def test_the_embedded_servers_flags_come_from_the_modes() -> None:
    from kldtui.embedded.__main__ import build_parser

    parser = build_parser()
    args = parser.parse_args(["--capture-mode", "score", "--score-suite", "/s", "--score-reference", "/r"])
    assert args.capture_mode == "score"
    assert SCORE.server_env_from_args(args) == {settings.SCORE_SUITE.name: "/s",
                                                settings.SCORE_REFERENCE.name: "/r"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--capture-mode", "scores"])


def test_each_mode_writes_its_own_chunk_kind_through_its_sink(tmp_path: Path) -> None:
    """Slices taken one by one and put as one chunk give one logits chunk; score mode without a
    suite fails the request with its reason (the server goes on)."""
    rng = np.random.default_rng(0)
    suite = write_suite(tmp_path / "suite", [("prose", rng.integers(0, 50, 9).tolist())])
    window = suite.windows[0]
    logits = rng.normal(size=(8, 53)).astype(np.float32)  # 3 padded vocabulary columns
    io = InlineIO(tmp_path / "cap")
    sink = LOGITS.server_sink(io, {})
    pieces = [sink.take("kldtui-a", 0, ChunkRows(logits[:5], 50)),
              sink.take("kldtui-a", 5, ChunkRows(logits[5:], 50))]
    assert sink.put("kldtui-a", 0, pieces, 50)
    checked = check_chunk_dir(tmp_path / "cap" / "kldtui-a", window, check_values=True, kind=LOGITS.chunks)
    assert [c.path.name for c in checked.chunks] == ["logits.rows-000000-000008.safetensors"]
    assert checked.vocab_size == 50
    with pytest.raises(BadInput, match=r"holds logits\.rows-\* chunks, not the scores\.rows-\* chunks"):
        check_chunk_dir(tmp_path / "cap" / "kldtui-a", window, kind=SCORE.chunks)

    score = SCORE.server_sink(io, {})  # no KLDTUI_SCORE_SUITE: the request fails, nothing is written
    assert score.save("kldtui-b", 0, ChunkRows(logits, 50)) is False
    assert io.failed and f"needs {settings.SCORE_SUITE.name}" in io.failed[-1]
    assert [p.name for p in (tmp_path / "cap" / "kldtui-b").iterdir()] == [ERROR_MARKER]


def test_the_demo_title_names_a_mode_that_is_not_the_default(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kldtui.tui import app as app_module

    titles: list[str] = []

    class _App:
        main = None

        def run(self) -> int:
            return 0

    def create_app(**kwargs: object) -> _App:
        titles.append(str(kwargs["title"]))
        return _App()

    monkeypatch.setattr(app_module, "create_app", create_app)
    for score in (False, True):
        assert app_module.run_dashboard(demo_workdir=tmp_path / "demo", demo_score=score) == 0
    assert app_module.run_dashboard(demo_workdir=tmp_path / "demo", demo_hidden=True) == 0
    assert titles == ["kldtui demo", "kldtui demo (score mode)", "kldtui demo (hidden states)"]
