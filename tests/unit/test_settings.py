"""kldtui/settings.py is the one reader of the environment: every variable declared once, values
validated (a bad one is one line naming the variable, exit 2), docs/SETTINGS.md lists exactly the
declared ones, and nothing else in the package touches os.environ."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kldtui import settings
from kldtui.errors import BadInput
from tests.paths import REPO as ROOT

DOC = ROOT / "docs" / "SETTINGS.md"


def test_the_doc_lists_exactly_the_declared_settings() -> None:
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    table = text[text.index(begin) + len(begin):text.index(end)]
    assert table == settings.markdown(), "regenerate docs/SETTINGS.md's table: python -m kldtui.settings"
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert listed == set(settings.SETTINGS)
    assert all(s.group in settings.GROUPS and s.doc and s.kind for s in settings.SETTINGS.values())


def _environ_readers(path: Path) -> list[int]:
    """Lines of ``path`` that name ``os.environ``, ``os.getenv`` or ``os.putenv``, as code or inside
    a string that is run as code (the doctor's probe)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "environb"):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "getenv", "putenv") for a in node.names):
            found.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "os.environ" in node.value:
            found.append(node.lineno)
    return found


def test_only_the_settings_module_reads_the_environment() -> None:
    readers = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "kldtui").rglob("*.py"))
               if p.name != "settings.py" and (lines := _environ_readers(p))}
    assert readers == {}, "read environment variables through kldtui.settings (docs/SETTINGS.md)"
    assert _environ_readers(ROOT / "kldtui" / "settings.py")  # the check does see a reader


def test_values_are_typed_and_blank_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLDTUI_SCORE_ROWS", " 100 ")
    monkeypatch.setenv("KLDTUI_CAPTURE_MODE", "Score")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/hub/")
    monkeypatch.setenv("KLDTUI_NO_MMAP", "off")
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", "  ")
    assert settings.SCORE_ROWS.get() == 100
    assert settings.CAPTURE_MODE.get() == "score"
    assert settings.HF_ENDPOINT.get() == "http://127.0.0.1:9/hub"
    assert settings.NO_MMAP.get() is False
    assert settings.CAPTURE_DIR.get() is None and not settings.CAPTURE_DIR.is_set()
    monkeypatch.delenv("KLDTUI_SCORE_ROWS")
    assert settings.SCORE_ROWS.get() == 32
    # where blank means something, it is kept: no GPU visible
    assert settings.CUDA_VISIBLE_DEVICES.get({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert settings.CUDA_VISIBLE_DEVICES.get({}) is None
    assert settings.CUDA_VISIBLE_DEVICES.get({"CUDA_VISIBLE_DEVICES": "2, GPU-ab"}) == ("2", "GPU-ab")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert settings.XDG_CACHE_HOME.get() == Path.home() / ".cache"


@pytest.mark.parametrize(("name", "value", "accepts"), [
    ("KLDTUI_SCORE_ROWS", "many", "a whole number >= 1"),
    ("KLDTUI_CAPTURE_QUEUE", "0", "a whole number >= 1"),
    ("KLDTUI_CAPTURE_MODE", "score mode", "a name (letters, digits"),
    ("KLDTUI_NO_C_KERNEL", "maybe", "1/true/yes/on or 0/false/no/off"),
    ("HF_ENDPOINT", "huggingface.co", "an http(s) URL"),
    ("KLDTUI_FASTKL_MARCH", "-O0 -march=x", "a compiler -march name"),
])
def test_a_bad_value_is_one_line_naming_the_variable(name: str, value: str, accepts: str) -> None:
    with pytest.raises(settings.SettingError) as err:
        settings.SETTINGS[name].get({name: value})
    message = str(err.value)
    assert isinstance(err.value, BadInput) and err.value.exit_code == 2
    assert f"{name}={value!r}" in message and accepts in message and "\n" not in message


def test_a_secret_is_never_echoed() -> None:
    secret = settings.Setting("X_TOKEN", settings.HUB, "a number", "unset", "test", int, lambda: None,
                              secret=True)
    with pytest.raises(settings.SettingError) as err:
        secret.get({"X_TOKEN": "hf_sekrit"})
    assert "hf_sekrit" not in str(err.value) and "X_TOKEN" in str(err.value)


def test_entries_for_a_child_are_checked() -> None:
    assert settings.CAPTURE_MODE.entry("score") == {"KLDTUI_CAPTURE_MODE": "score"}
    with pytest.raises(ValueError):
        settings.CAPTURE_MODE.entry("--score")
    env = settings.child_environment({"KLDTUI_SCORE_ROWS": "7"})
    assert env["KLDTUI_SCORE_ROWS"] == "7" and env.get("PATH") == settings.named_variable("PATH")


def test_a_server_is_not_launched_with_a_bad_value(tmp_path: Path) -> None:
    from kldtui.stages.serve import ServerProcess

    server = ServerProcess([sys.executable, "-c", "raise SystemExit(0)"], capture_dir=tmp_path / "cap",
                           served_model_name="x", env={"KLDTUI_CAPTURE_QUEUE": "lots"}, ensure_flags=False)
    with pytest.raises(settings.SettingError, match="KLDTUI_CAPTURE_QUEUE='lots'"):
        server.start()
    assert server.proc is None and not (tmp_path / "cap").exists()


def test_the_embedded_server_refuses_a_bad_value(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.embedded.__main__ import main as embedded_main

    monkeypatch.setenv("KLDTUI_SCORE_ROWS", "-3")
    assert embedded_main(["--port", "0"]) == 2
    assert "KLDTUI_SCORE_ROWS='-3'" in capsys.readouterr().err


def test_the_vllm_plugin_refuses_a_bad_value_when_vllm_loads_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kldtui.hook import vllm_plugin

    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    monkeypatch.setenv("KLDTUI_CAPTURE_WRITER", "fast")
    with pytest.raises(settings.SettingError, match="KLDTUI_CAPTURE_WRITER='fast'"):
        vllm_plugin.register()
    assert vllm_plugin.installed() == {}


def test_in_effect_lists_what_is_set_and_what_is_wrong() -> None:
    shown, problems = settings.in_effect({"KLDTUI_SCORE_ROWS": "8", "HF_TOKEN": "hf_x", "KLDTUI_DEBUG": " ",
                                          "CUDA_VISIBLE_DEVICES": "", "KLDTUI_CAPTURE_MODE": "log its"})
    assert shown == ["KLDTUI_SCORE_ROWS=8", "HF_TOKEN=(set)", "CUDA_VISIBLE_DEVICES="]
    assert len(problems) == 1 and problems[0].startswith("environment variable KLDTUI_CAPTURE_MODE='log its'")


@pytest.mark.parametrize("names", [
    ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"),
    ("HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"),
    ("HF_HOME", "XDG_CACHE_HOME"),
    ("XDG_CACHE_HOME",),
    (),
])
def test_the_hugging_face_cache_is_the_one_huggingface_hub_finds(tmp_path: Path, names: tuple[str, ...],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """hf_hub_cache follows huggingface_hub's own precedence (read from the installed package in a
    fresh process), the older HUGGINGFACE_HUB_CACHE included: vLLM downloads where it says."""
    import os
    import subprocess

    pytest.importorskip("huggingface_hub")
    hub_names = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME",
                 "HUGGINGFACE_CO_STAGING")
    env = {k: v for k, v in os.environ.items() if k not in hub_names}
    env.update({name: str(tmp_path / name.lower()) for name in names})
    env["HOME"] = str(tmp_path / "home")
    monkeypatch.setenv("HOME", env["HOME"])  # the defaults' home folder (Path.home)
    code = "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"
    theirs = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert settings.hf_hub_cache(env) == Path(theirs)


@pytest.mark.parametrize("set_here", [
    {"HF_HUB_CACHE": "$KLD_ROOT/new", "HUGGINGFACE_HUB_CACHE": "/not/this"},
    {"HUGGINGFACE_HUB_CACHE": "${KLD_ROOT}/old/$KLD_NOT_SET"},  # a variable not set stays as written
    {"HF_HOME": "~/hf/$KLD_ROOT"},
    {"HF_HOME": "$KLD_TILDE"},  # a "~" a variable brings is expanded with the cache path, as theirs is
    {"XDG_CACHE_HOME": "${KLD_ROOT}/xdg"},
])
def test_the_hugging_face_cache_expands_variables_as_huggingface_hub_does(
        tmp_path: Path, set_here: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub expands ``$VARS`` in its cache paths as well as ``~``; hf_hub_cache expanded
    only ``~``, so HF_HOME=$SCRATCH/hf was looked up in a folder literally named ``$SCRATCH``."""
    import os
    import subprocess

    pytest.importorskip("huggingface_hub")
    hub_names = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME",
                 "HUGGINGFACE_CO_STAGING", "KLD_NOT_SET")
    env = {k: v for k, v in os.environ.items() if k not in hub_names}
    env.update({"KLD_ROOT": str(tmp_path / "root"), "KLD_TILDE": "~/tilde", **set_here})
    env["HOME"] = str(tmp_path / "home")
    monkeypatch.setenv("HOME", env["HOME"])  # the defaults' home folder (Path.home)
    code = "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"
    theirs = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert "$KLD_ROOT" not in theirs and "{KLD_ROOT}" not in theirs  # they do expand it
    assert settings.hf_hub_cache(env) == Path(theirs)
