"""``[[candidates]]`` profiles (issue 23 item 1): each table a name plus the keys a [candidate]
takes, any kind; one shared reference; a single [candidate] keeps working."""

from __future__ import annotations

from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.servers.registry import kind_of
from kldtui.workflow.profile import profile_from_dict


def _load(tmp_path: Path, doc: dict[str, object]):  # type: ignore[no-untyped-def]
    return profile_from_dict({"run": {"workdir": "w"}, **doc}, base_dir=tmp_path, path=tmp_path / "p.toml")


def test_candidates_of_different_kinds_share_one_reference_and_get_their_own_folders(tmp_path: Path) -> None:
    profile = _load(tmp_path, {
        "reference": {"local_dir": "suite", "capture": "embedded"},
        "candidates": [{"name": "q8", "kind": "embedded", "perturb": 0.05},
                       {"name": "remote", "url": "http://127.0.0.1:9", "server_capture_dir": "cap"},
                       {"name": "fp8", "kind": "vllm", "model": "m", "vllm_args": ["--dtype", "half"]}],
        "campaign": {"repeat_leader": True}})
    assert profile.is_campaign and profile.campaign.repeat_leader
    assert [c.name for c in profile.candidates] == ["q8", "remote", "fp8"]
    assert [kind_of(c.server).name for c in profile.candidates] == ["embedded", "attach", "vllm"]
    assert profile.candidate is profile.candidates[0].server  # the reference capture takes its settings
    assert profile.reference.server is not None and kind_of(profile.reference.server).name == "embedded"
    member = profile.member(profile.candidates[2])
    assert member.candidate is profile.candidates[2].server and member.run.run_name == "fp8"
    assert not member.is_campaign
    ws = profile.member_workspace("fp8")
    work = tmp_path / "w"
    assert ws.candidate == work / "candidates" / "fp8" and ws.report == work / "comparison-fp8.json"
    assert ws.run_dir == work / "capture" / "fp8" and ws.compare_dir == work / "compare" / "fp8"
    assert ws.suite_dir == profile.workspace().suite_dir  # one shared reference
    assert ws.report in [ws.report] and ws.report.name.startswith("comparison")  # the leaderboard's glob
    repeat = profile.workspace().repeat_of("q8")
    assert repeat.candidate == work / "repeat" / "q8" and repeat.report.parent == work / "repeat"


def test_a_single_candidate_profile_is_not_a_campaign(tmp_path: Path) -> None:
    profile = _load(tmp_path, {"candidate": {"kind": "embedded"}})
    assert not profile.is_campaign and profile.candidates == ()
    assert profile.workspace().candidate == tmp_path / "w" / "candidate"


@pytest.mark.parametrize(("doc", "message"), [
    ({"candidate": {"kind": "embedded"}, "candidates": [{"name": "a", "kind": "embedded"}]},
     "has both [candidate] and [[candidates]]"),
    ({"candidates": [{"kind": "embedded"}]}, "[[candidates]] table 1 has no name"),
    ({"candidates": [{"name": "a", "kind": "embedded"}, {"name": "a", "kind": "embedded"}]},
     "name 'a' is given twice"),
    # the leader's repeat capture is run NAME.repeat: a candidate so named shared its folder and records
    ({"candidates": [{"name": "a", "kind": "embedded"}, {"name": "a.repeat", "kind": "embedded"}]},
     "name 'a.repeat' ends in '.repeat', which names the leader's repeat capture (its folder and records); "
     "give it another name"),
    ({"candidates": [{"name": "../x", "kind": "embedded"}]}, "it becomes part of a file or folder name"),
    ({"candidates": [{"name": "a", "kind": "embedded"},
                     {"name": "b", "kind": "embedded", "launcher": ["x"]}]},
     "[[candidates]] 'b' launcher is only for kind = 'vllm'"),
    ({"candidates": [{"name": "a", "kind": "embedded"}, {"name": "b", "kind": "embedded", "pertrub": 1.0}]},
     "unknown key 'pertrub' in [[candidates]]; did you mean 'perturb'?"),
    ({"candidates": [{"name": "a", "kind": "embedded", "perturb": "x"}]},
     "[[candidates]] 'a': perturb must be float"),
    ({"candidates": []}, "[[candidates]] is empty"),
    ({"candidates": [{"name": "a", "kind": "embedded"}], "run": {"run_name": "x"}},
     "[run] run_name is not used with [[candidates]]"),
    ({"candidates": {"name": "a"}}, "candidates must be [[candidates]] tables"),
    ({"candidate": {"kind": "embedded"}, "campaign": {"repeat_leader": True}},
     "[campaign] needs [[candidates]]"),
    ({"candidates": [{"name": "a", "kind": "embedded"}], "campaign": {"repeat": True}},
     "unknown key 'repeat' in [campaign]"),
])
def test_bad_candidates_tables_are_one_line(tmp_path: Path, doc: dict[str, object], message: str) -> None:
    with pytest.raises(BadInput) as info:
        _load(tmp_path, doc)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_embedded_kind_repeats_with_another_runtime_seed(tmp_path: Path) -> None:
    profile = _load(tmp_path, {"candidates": [{"name": "a", "kind": "embedded", "runtime_noise": 0.02},
                                              {"name": "b", "kind": "vllm", "model": "m"}]})
    a, b = (c.server for c in profile.candidates)
    again = kind_of(a).repeat_config(a)
    assert again.runtime_seed == a.runtime_seed + 1 and again.runtime_noise == 0.02  # type: ignore[attr-defined]
    assert "--runtime-seed" in kind_of(a).argv(again) and kind_of(b).repeat_config(b) == b
    with pytest.raises(BadInput, match="runtime_noise"):
        _load(tmp_path, {"candidates": [{"name": "a", "kind": "embedded", "runtime_noise": -1.0}]})
