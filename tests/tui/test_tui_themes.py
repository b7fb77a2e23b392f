"""Themes as data files: the shipped ones load, a broken one falls back with a notification, the
choice is remembered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.tui import themes
from kldtui.tui.app import create_app
from tests.fixtures_tui import make_report, sync, write_report


def test_shipped_themes_are_valid_and_include_a_light_one() -> None:
    found, problems = themes.load_themes([themes.BUILTIN_THEME_DIR])
    assert problems == []
    names = {t.name for t in found}
    assert len(found) >= 3 and themes.DEFAULT_THEME in names
    assert any(not t.dark for t in found)


@pytest.mark.parametrize("text, problem", [
    ('name = "x"\nprimary = "not-a-colour"\n', "is not a colour"),
    ('primary = "#112233"\n', "'name'"),
    ('name = "x"\nprimary = "#112233"\nshade = 3\n', "unknown field"),
    ('name = "x"\nprimary = "#112233"\ndark = "yes"\n', "'dark'"),
    ('name = "x" primary', "skipped"),
])
def test_bad_theme_file_is_skipped_with_one_line(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "bad.toml").write_text(text)
    (tmp_path / "good.toml").write_text('name = "good"\nprimary = "#336699"\ndark = false\n')
    found, problems = themes.load_themes([tmp_path])
    assert [t.name for t in found] == ["good"]
    assert len(problems) == 1 and problem in problems[0] and "bad.toml" in problems[0]
    assert "\n" not in problems[0]


@sync
async def test_broken_theme_file_falls_back_with_notification(tmp_path: Path) -> None:
    (tmp_path / "themes").mkdir()
    (tmp_path / "themes" / "mine.toml").write_text('name = "mine"\nprimary = "#zzzzzz"\n')
    report = write_report(tmp_path / "r.json", make_report("c", 0.01, seed=1))
    app = create_app(reports=[report], theme="mine", config_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == themes.DEFAULT_THEME
        texts = [n.message for n in app._notifications]
        assert any("mine.toml" in t and "skipped" in t for t in texts)
        assert any("'mine' is not available" in t for t in texts)


@sync
async def test_theme_choice_is_remembered(tmp_path: Path) -> None:
    report = write_report(tmp_path / "r.json", make_report("c", 0.01, seed=1))
    app = create_app(reports=[report], theme="kldtui-light", config_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "kldtui-light" and not app.current_theme.dark
        app.theme = "kldtui-high-contrast"  # what the theme picker (t) does
        await pilot.pause()
    assert json.loads((tmp_path / "settings.json").read_text())["theme"] == "kldtui-high-contrast"
    app2 = create_app(reports=[report], config_dir=tmp_path)  # no --theme: the remembered one
    async with app2.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app2.theme == "kldtui-high-contrast"


@sync
async def test_user_theme_folder_is_registered(tmp_path: Path) -> None:
    (tmp_path / "themes").mkdir()
    (tmp_path / "themes" / "mine.toml").write_text('name = "mine"\nprimary = "#336699"\ndark = false\n')
    report = write_report(tmp_path / "r.json", make_report("c", 0.01, seed=1))
    app = create_app(reports=[report], theme="mine", config_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "mine" and "kldtui-dark" in app.available_themes


def test_styles_use_theme_variables_only() -> None:
    import re

    css = (Path(themes.__file__).parent / "app.tcss").read_text()
    # no literal colours: every colour is a $variable (names, hex, rgb() are refused)
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b|rgba?\(|hsla?\(", css)
    for m in re.finditer(r"^\s*(color|background|border[-a-z]*|tint):\s*([^;]+);", css, re.M):
        assert "$" in m.group(2) or m.group(2).strip() in ("none", "transparent"), m.group(0)
