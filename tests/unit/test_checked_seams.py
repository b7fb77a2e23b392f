"""The seams are checked by the README's test command (plain ``pytest``): import-linter keeps the
layers (pyproject [tool.importlinter]: a lower layer never imports a higher one, nothing outside
kldtui/tui imports Textual), mypy checks the type hints of kldtui/ (pyproject [tool.mypy]:
untyped functions and implicit Any returns fail) and ruff the code (pyproject [tool.ruff]; with
BLE, every broad except says why it is broad).

Those three run as child processes from the start of the session, beside the other tests
(tests/seam_checks.py, started by tests/conftest.py); the tests here collect their results.

What varies has one home (issue 20): no server kind, capture mode or conversion target is told
apart by comparing strings outside its registry (kldtui/servers/ for server kinds,
kldtui/capture_modes/ for capture modes, kldtui/cli/convert_targets/ for what ``kldtui convert
--to`` takes). That the environment is read only in kldtui/settings.py is checked beside the
settings (tests/unit/test_settings.py)."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator

import pytest

from tests.paths import REPO
from tests.seam_checks import SeamChecks

PACKAGE = REPO / "kldtui"
SERVER_KINDS = frozenset({"attach", "embedded", "vllm", "llama.cpp", "llamacpp", "llama_cpp"})
CAPTURE_MODES = frozenset({"logits", "score", "hidden"})
CONVERT_TARGETS = frozenset({"llama-cpp", "suite"})


@pytest.mark.slow  # a whole-tree check
@pytest.mark.seam_check("lint-imports")
def test_import_contracts_are_kept(seam_checks: SeamChecks) -> None:
    out = seam_checks.result("lint-imports")
    assert out.returncode == 0, out.tail(6000)
    assert "broken" in out.output and " 0 broken" in out.output


@pytest.mark.slow  # a whole-tree check
@pytest.mark.seam_check("mypy")
def test_mypy_reports_nothing_on_kldtui_and_benchmarks(seam_checks: SeamChecks) -> None:
    out = seam_checks.result("mypy")
    assert out.returncode == 0, out.tail(8000)
    assert "Success: no issues found" in out.output


@pytest.mark.slow  # a whole-tree check
@pytest.mark.seam_check("ruff")
def test_ruff_reports_nothing(seam_checks: SeamChecks) -> None:
    out = seam_checks.result("ruff")
    assert out.returncode == 0, out.tail(8000)


# -- nothing leaves CI silently -------------------------------------------------------------------

def test_the_readme_test_command_is_what_ci_runs_and_it_leaves_out_only_the_vllm_step() -> None:
    """The README's test command (what .ci/run runs) runs every test, slow ones included, over the
    cores (pytest-xdist, a module per worker: the seam checks start once, tests/conftest.py); only
    the real-engine tests are left to their own steps, which look for them in tests/vllm and
    tests/llama_cpp."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^## Tests\n+```bash\n(.+?)\n```", readme, re.M | re.S)
    assert found, "README.md: a '## Tests' section opening with a bash block"
    command = found.group(1).strip()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert command in ci.splitlines(), command
    # the whole default run, spread over the cores (no -m, -k or paths that would leave tests out)
    assert command.endswith(".venv/bin/pytest -n auto --dist loadfile"), command
    options = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    assert options["ini_options"]["addopts"] == "-m 'not vllm and not llama_cpp'"
    assert "bash scripts/run_vllm_tests.sh" in ci and "bash scripts/run_llama_cpp_tests.sh" in ci
    assert '"${KLDTUI_VLLM_TESTS:-tests/vllm}"' in (REPO / "scripts" / "run_vllm_tests.sh").read_text()
    assert '"${KLDTUI_LLAMA_CPP_TESTS:-tests/llama_cpp}"' in (
        REPO / "scripts" / "run_llama_cpp_tests.sh").read_text()
    for marker in ("vllm", "llama_cpp"):
        mark = re.compile(rf"^\s*(?:@pytest\.mark\.{marker}\b|pytestmark\s*=.*\bpytest\.mark\.{marker}\b)",
                          re.M)
        elsewhere = [p.relative_to(REPO).as_posix() for p in sorted((REPO / "tests").rglob("test_*.py"))
                     if p.parent.name != marker and mark.search(p.read_text(encoding="utf-8"))]
        assert elsewhere == [], f"tests marked {marker} outside tests/{marker} run in neither step"


def test_test_modules_live_in_a_kind_folder_and_import_only_helpers() -> None:
    """tests/ holds helpers at its top and test modules in unit/, functional/, tui/ and vllm/; a
    test module imports helpers, never another test module or a conftest (docs/DEVELOPING.md)."""
    tests = REPO / "tests"
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    kinds = {p.parent.name for p in tests.rglob("test_*.py")}
    assert kinds <= {"unit", "functional", "tui", "vllm", "llama_cpp"}, kinds
    wrong: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" if node.module == "tests" else node.module or ""
                         for a in node.names]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                last = name.rsplit(".", 1)[-1]
                if name.startswith("tests.") and (last.startswith("test_") or last == "conftest"
                                                  or name.count(".") > 1):
                    wrong.setdefault(path.relative_to(REPO).as_posix(), []).append(name)
    assert wrong == {}, "import helpers from the top of tests/ (tests.fixtures_*, tests.paths, ...)"


# -- string branches on what has a registry -------------------------------------------------------

def _named(node: ast.expr, suffix: str) -> bool:
    """``kind``, ``c.kind``, ``plan.server_kind``, ``kind.value``: an expression naming a ``suffix``."""
    if isinstance(node, ast.Attribute) and node.attr in ("name", "value"):
        node = node.value
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == suffix or name.endswith("_" + suffix)


def _strings(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def string_branches(source: str, suffix: str, values: frozenset[str]) -> Iterator[int]:
    """Lines that compare something named ``*suffix`` with one of ``values`` as a string
    (``==``, ``!=``, ``in``, ``not in``, either side) or ``match`` it against such a string."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for (left, right), op in zip(zip(operands, operands[1:], strict=False), node.ops, strict=True):
                if not isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                    continue
                if (_named(left, suffix) and _strings(right) & values) or \
                        (_named(right, suffix) and _strings(left) & values):
                    yield node.lineno
        elif isinstance(node, ast.Match) and _named(node.subject, suffix):
            for case in node.cases:
                if any(isinstance(p, ast.MatchValue) and _strings(p.value) & values
                       for p in ast.walk(case.pattern)):
                    yield case.pattern.lineno


def branches_outside(registry: str, suffix: str, values: frozenset[str]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(registry):
            continue
        lines = sorted(set(string_branches(path.read_text(encoding="utf-8"), suffix, values)))
        if lines:
            found[rel] = lines
    return found


def test_the_branch_finder_sees_every_form() -> None:
    """The two checks below are only as good as this finder: each form is seen, other kinds of
    'kind' and 'mode' are not."""
    source = '''
if c.kind == "attach": pass
if "vllm" != plan.server_kind: pass
if kind in ("embedded", "vllm"): pass
ok = mode.value == "score"
match profile.candidate.kind:
    case "vllm": pass
if kind == "suite": pass           # verify's target kinds are not server kinds
if noise.kind == "published": pass
if mode == "xb": pass              # a file mode
if c.kind is Kind.VLLM: pass       # no string
'''
    assert sorted(string_branches(source, "kind", SERVER_KINDS)) == [2, 3, 4, 7]
    assert sorted(string_branches(source, "mode", CAPTURE_MODES)) == [5]


def test_no_server_kind_string_branches_outside_the_servers_registry() -> None:
    assert branches_outside("kldtui/servers/", "kind", SERVER_KINDS) == {}, \
        "ask the server kind (kldtui/servers/) instead of comparing its name"


def test_no_capture_mode_string_branches_outside_the_capture_modes() -> None:
    assert branches_outside("kldtui/capture_modes/", "mode", CAPTURE_MODES) == {}, \
        "ask the capture mode's strategy (kldtui/capture_modes/) instead of comparing its name"


def test_no_convert_target_string_branches_outside_the_convert_targets() -> None:
    """``kldtui convert`` ran its conversions under ``if args.to == "llama-cpp":``."""
    assert branches_outside("kldtui/cli/convert_targets/", "to", CONVERT_TARGETS) == {}, \
        "ask the target (kldtui/cli/convert_targets/) instead of comparing its name"


def test_the_registries_are_where_the_checks_look() -> None:
    """A renamed registry would make the checks above pass vacuously."""
    assert (PACKAGE / "settings.py").is_file()
    for registry in ("servers", "capture_modes", "cli/convert_targets"):
        assert (PACKAGE / registry / "__init__.py").is_file(), f"kldtui/{registry}/ moved: update the checks"




def test_every_broad_except_says_why() -> None:
    """ruff's BLE flags a broad except that neither re-raises nor logs; its noqa must carry the
    reason (``# noqa: BLE001 - <why>``), so a reader sees why catching everything is right there."""
    bare = re.compile("noqa: " + r"BLE001(?!\s*-\s*\S)")  # split: this line is not one
    found: dict[str, list[int]] = {}
    for path in sorted(p for d in ("kldtui", "tests", "benchmarks") for p in (REPO / d).rglob("*.py")):
        lines = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if bare.search(line)]
        if lines:
            found[path.relative_to(REPO).as_posix()] = lines
    assert found == {}
