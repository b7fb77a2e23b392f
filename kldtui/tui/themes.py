"""Theme data files and the remembered settings of the dashboard.

Themes are TOML files whose keys are the fields of :class:`textual.theme.Theme` (``name``,
``primary``, ... ``dark``, ``[variables]``). The built-in ones live in ``kldtui/themes/``;
a user may add more in ``$XDG_CONFIG_HOME/kldtui/themes/`` (default ``~/.config``). A file that
cannot be read or does not describe a theme is skipped with a one-line problem, which the app
shows as a notification. The chosen theme is remembered in ``settings.json`` in the same
config folder.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from kldtui import settings
from kldtui.formats.atomic import write_json_atomic

DEFAULT_THEME = "kldtui-dark"
BUILTIN_THEME_DIR = Path(__file__).resolve().parent.parent / "themes"

_THEME_FIELDS = {f.name: f for f in dataclasses.fields(Theme)}
_COLOR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground",
                 "background", "surface", "panel", "boost")


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/kldtui`` (``~/.config/kldtui`` when unset)."""
    return settings.XDG_CONFIG_HOME.get() / "kldtui"


def theme_dirs(config: Path | None = None) -> list[Path]:
    return [BUILTIN_THEME_DIR, (config or config_dir()) / "themes"]


def theme_from_mapping(data: dict[str, Any], source: str) -> Theme:
    """Build a :class:`Theme` from a parsed TOML table; ValueError names what is wrong."""
    unknown = sorted(set(data) - set(_THEME_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("'name' (a non-empty string) is missing")
    if "primary" not in data:
        raise ValueError("'primary' colour is missing")
    for key in _COLOR_FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"'{key}' must be a colour string")
        try:
            Color.parse(value)
        except ColorParseError:
            raise ValueError(f"'{key}' = {value!r} is not a colour") from None
    if "dark" in data and not isinstance(data["dark"], bool):
        raise ValueError("'dark' must be true or false")
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError("[variables] must be a table of strings")
    return Theme(**data)


def load_theme_file(path: Path) -> Theme:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(" ".join(str(exc).split())) from None
    return theme_from_mapping(data, str(path))


def load_themes(dirs: list[Path]) -> tuple[list[Theme], list[str]]:
    """All themes in ``dirs`` (later folders override earlier ones) and one line per bad file."""
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                theme = load_theme_file(path)
            except (ValueError, TypeError) as exc:
                problems.append(f"theme file {path}: {exc}; skipped it (fix or remove the file)")
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems


def settings_path(config: Path | None = None) -> Path:
    return (config or config_dir()) / "settings.json"


def load_settings(config: Path | None = None) -> dict[str, Any]:
    """The remembered settings, ``{}`` when there are none or the file is unreadable."""
    try:
        data = json.loads(settings_path(config).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_settings(update: dict[str, Any], config: Path | None = None) -> None:
    """Merge ``update`` into the settings file (atomically); failures are silent."""
    path = settings_path(config)
    data = load_settings(config)
    data.update(update)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
    except OSError:
        pass
