"""The engine never imports Textual: only kldtui/tui does."""

from __future__ import annotations

import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import kldtui

ROOT = Path(kldtui.__file__).parent


def engine_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(ROOT)], prefix="kldtui."):
        if info.name == "kldtui.tui" or info.name.startswith("kldtui.tui."):
            continue
        if info.name in ("kldtui.__main__",):  # runs the CLI when imported
            continue
        names.append(info.name)
    return sorted(names)


def test_no_engine_module_imports_textual() -> None:
    modules = engine_modules()
    assert "kldtui.events" in modules and "kldtui.cli.main" in modules and len(modules) > 10
    code = (
        "import importlib, json, sys\n"
        f"mods = {modules!r}\n"
        "bad, failed = {}, {}\n"
        "for m in mods:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception as exc:\n"
        "        failed[m] = repr(exc)\n"
        "    if any(k == 'textual' or k.startswith('textual.') for k in sys.modules):\n"
        "        bad[m] = True\n"
        "        break\n"
        "print(json.dumps({'bad': bad, 'failed': failed}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bad"] == {}, f"textual imported by {result['bad']}"


def test_no_engine_source_mentions_textual_imports() -> None:
    pattern = re.compile(r"^\s*(from\s+textual\b|import\s+textual\b)", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                 if "tui" not in p.relative_to(ROOT).parts and pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_check_itself_sees_textual_in_the_tui() -> None:
    code = "import sys, kldtui.tui.app; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "True"
