"""``provenance.backend_reason`` (why that compare backend ran) is free text kldtui keeps in each
compare-cache entry and in the report, and reads back: from an entry into the next report, from a
report into whatever shows it. One rule for both (kldtui.formats.untrusted_json.one_line_problem,
printable_name's): text, one line, no control character (a line break or a tab neither, an escape
sequence never), at most BACKEND_REASON_MAX characters. A cache entry that breaks it is not used (the
window is compared again); a report that breaks it is refused in one line naming the file (exit 2);
and the compare stage never writes a reason the loader would refuse, however many choices it joins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kldtui.cli.main import main
from kldtui.formats.report import load_report
from kldtui.formats.report_model import BACKEND_REASON_MAX
from kldtui.formats.verified_cache import sign
from kldtui.stages.compare import BackendRequest, CompareOptions, build_report, compare_window
from kldtui.stages.compare.cache import WindowCache, decode_result, encode_result
from kldtui.stages.compare.report import joined_reasons
from kldtui.workspace import Workspace
from tests.fixtures_compare import make_suite

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)

HOSTILE = {
    "an escape sequence": "the CPU kernel\x1b]0;owned\x07\x1b[2J",
    "a second line": "no GPU seen: the CPU kernel\nMean KLD: 0.000001",
    "a tab": "no GPU seen:\tthe CPU kernel",
    "a C1 control": "no GPU seen\x9b2J",
    "too long": "x" * (BACKEND_REASON_MAX + 1),
    "not text": 7,
}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("suite")
    suite, ref, cand, _ = make_suite(root, windows=2, context=40, vocab=64, seed=3, domains=("prose",))
    opts = CompareOptions(start_window=0, stop_window=2, bootstrap_samples=100, backend=NUMPY)
    results = [compare_window(suite, suite.window(i), ref, cand, opts) for i in (0, 1)]
    return suite, ref, cand, opts, results


@pytest.mark.parametrize("why", sorted(HOSTILE))
def test_a_cache_entry_with_a_bad_reason_is_not_used(compared: Any, tmp_path: Path, why: str) -> None:
    """Signed with this user's key (an entry only kldtui of this user could have written): the reason is
    checked all the same, and the window computed again rather than the text carried into a report."""
    suite, ref, cand, opts, results = compared
    doc = encode_result(results[0])
    doc["backend_reason"] = HOSTILE[why]
    with pytest.raises(ValueError, match="backend_reason"):
        decode_result(json.loads(json.dumps(doc)))
    ws = Workspace(suite_dir=suite.path.parent, reference_dir=ref, candidate_dir=cand,
                   compare_dir=tmp_path / "compare")
    cache = WindowCache(ws, opts)
    window = suite.window(0)
    cache.put(window, results[0])
    assert cache.get(window) is not None  # the honest entry is used
    path = ws.compare_cache(0)
    assert path is not None
    body = {"key": json.loads(path.read_text())["key"], "result": doc}
    path.write_text(json.dumps({**body, "signature": sign(body)}))
    assert cache.get(window) is None


@pytest.mark.parametrize("why", sorted(HOSTILE))
def test_a_report_with_a_bad_reason_is_one_line_exit_2(compared: Any, tmp_path: Path, why: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    suite, _, _, opts, results = compared
    doc = build_report(results, suite=suite, options=opts).to_json()
    doc["provenance"]["backend_reason"] = HOSTILE[why]
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(doc))
    assert main(["view", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "backend_reason" in err
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err and "\x9b" not in err


def test_many_choices_are_joined_within_the_bound_and_the_report_loads(compared: Any, tmp_path: Path) -> None:
    """Windows compared under hundreds of different choices (the free memory of a GPU changes the
    words of each): each reason once, in window order, while they fit; the rest counted."""
    suite, _, _, opts, results = compared
    many = [f"no server is running on this host: CUDA (cuda:0, {i} GiB free)" for i in range(300)]
    reason = joined_reasons([many[i // 2] for i in range(600)])  # two windows under each choice
    assert reason is not None and len(reason) <= BACKEND_REASON_MAX
    assert reason.startswith(f"{many[0]}; then {many[1]}; then ")
    kept = reason.count("; then ")
    assert reason.endswith(f"; then {many[kept - 1]}; then {300 - kept} other choices")
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(build_report(results, suite=suite, options=opts).to_json()))
    doc = json.loads(path.read_text())
    doc["provenance"]["backend_reason"] = reason
    path.write_text(json.dumps(doc))
    loaded = load_report(path).provenance
    assert loaded is not None and loaded.backend_reason == reason
