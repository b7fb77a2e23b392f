"""Every whole-file read through safe_io is bounded by a named limit that docs/SAFETY.md lists
("Files that are not files"): a ``limit=`` argument of ``read_text``, ``read_bytes`` or
``read_json`` is a ``*_LIMIT`` constant defined in one module, and the table names it as
``module.NAME``; every constant the table names is a positive whole number there. Before, the
finalized marker, the hook's error marker, a lock file and a verified-hash record were read with
literal limits (``64 * 1024``, ``4096``) the table did not list."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from tests.paths import REPO

PACKAGE = REPO / "kldtui"
SAFETY = REPO / "docs" / "SAFETY.md"
READS = frozenset({"read_text", "read_bytes", "read_json"})
LIMIT_NAME = re.compile(r"^[A-Z][A-Z0-9_]*_LIMIT$")


def _module(path: Path) -> str:
    """``stages/capture`` for kldtui/stages/capture.py: how the table names a module."""
    return path.relative_to(PACKAGE).with_suffix("").as_posix()


def _trees() -> dict[str, ast.Module]:
    return {_module(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def _limits_passed(trees: dict[str, ast.Module]) -> tuple[set[str], list[str]]:
    """The names given as ``limit=`` to a safe_io read, and the reads given anything else."""
    names: set[str] = set()
    unnamed: list[str] = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = (func.id if isinstance(func, ast.Name)
                      else func.attr if isinstance(func, ast.Attribute) else "")
            if called not in READS:
                continue
            for kw in node.keywords:
                if kw.arg != "limit":
                    continue
                value = kw.value
                name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(
                    value, ast.Attribute) else None
                if name == "limit":
                    continue  # a helper's parameter: its callers pass the constant
                if name is None or not LIMIT_NAME.match(name):
                    unnamed.append(f"kldtui/{module}.py:{node.lineno}: limit={ast.unparse(value)}")
                else:
                    names.add(name)
    return names, unnamed


def _defined(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Each module-level ``*_LIMIT`` constant and the modules that assign it."""
    out: dict[str, list[str]] = {}
    for module, tree in trees.items():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and LIMIT_NAME.match(target.id):
                    out.setdefault(target.id, []).append(module)
    return out


def _table() -> set[tuple[str, str]]:
    """The ``(module, NAME)`` pairs of the size-limit table."""
    text = SAFETY.read_text(encoding="utf-8")
    section = text.split("## Files that are not files", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return {(m.group(1), m.group(2)) for row in rows
            for m in re.finditer(r"`([a-z_/]+)\.([A-Z][A-Z0-9_]*_LIMIT)`", row.rsplit("|", 2)[-2])}


def test_every_read_limit_is_a_named_constant_the_safety_table_lists() -> None:
    trees = _trees()
    names, unnamed = _limits_passed(trees)
    assert not unnamed, "a read's limit is not a named *_LIMIT constant:\n" + "\n".join(unnamed)
    defined = _defined(trees)
    table = _table()
    for name in sorted(names):
        homes = defined.get(name, [])
        assert len(homes) == 1, f"{name} is defined in {homes or 'no module'}: a limit has one home"
        assert (homes[0], name) in table, f"docs/SAFETY.md's limit table lacks `{homes[0]}.{name}`"


def test_every_limit_the_safety_table_lists_is_in_its_module() -> None:
    table = _table()
    assert len(table) >= 20, table
    for module, name in sorted(table):
        value = getattr(importlib.import_module("kldtui." + module.replace("/", ".")), name, None)
        assert isinstance(value, int) and value > 0, f"docs/SAFETY.md lists `{module}.{name}`: no such limit"
