"""Every script in benchmarks/ says the machine it ran on and how loaded it was: it prints
``measure.cpu_summary()`` (CPU model, vector features) and ``measure.loadavg()`` (the 1, 5 and
15-minute load averages) before and after its timings, and none reads the load by itself (a
1-minute figure alone hid how loaded a run was)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if p.name not in ("measure.py", "__init__.py"))


def _calls(path: Path) -> list[str]:
    """The names called in ``path``: ``f()`` as ``f``, ``m.f()`` as ``m.f``."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                names.append(node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                names.append(f"{node.func.value.id}.{node.func.attr}")
    return names


def test_there_are_benchmarks_to_check() -> None:
    assert {"compare_bench.py", "finalize_bench.py", "pipeline_bench.py", "verify_bench.py",
            "tui_latency.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_prints_the_cpu_and_the_load_before_and_after(script: Path) -> None:
    calls = _calls(script)
    assert "cpu_summary" in calls, f"{script.name}: print measure.cpu_summary()"
    assert calls.count("loadavg") >= 2, f"{script.name}: print measure.loadavg() before and after"
    assert "os.getloadavg" not in calls, f"{script.name}: the load through measure.loadavg() (1, 5, 15 min)"
