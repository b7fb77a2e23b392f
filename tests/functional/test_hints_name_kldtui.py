"""Every hint that tells the user a kldtui command to run names kldtui as it was started
(kldtui.text.kldtui_command), as the "next:" lines do: started as ``<tmp>/my venv/bin/kldtui`` (not on
PATH, as after the README's quick start), each names that path, quoted for the shell, never a
``kldtui`` the shell may not find; a verdict's "confirm:" command runs as copied in bash. Started any
other way that is ``kldtui`` on PATH, the same hints say ``kldtui`` (the other tests' expectations)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kldtui.capture_modes import HIDDEN, SCORE
from kldtui.capture_modes.hidden_suite import finish_hidden_folder
from kldtui.cli.main import main
from kldtui.decide.noise import load_floor
from kldtui.decide.paired import confirm_command
from kldtui.errors import BadInput
from kldtui.events import Event, Notice
from kldtui.formats import fidelity as fid
from kldtui.formats.suite import load_suite
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from kldtui.stages.convert import export_llama_cpp
from kldtui.stages.publish_hidden import tensor_secret_remedy, upload_list
from kldtui.stages.reference import _replayed_or_logits
from kldtui.stages.verify import VerifyResult, unfinished_download, verify_path
from tests import fidelity_fixture as fx
from tests.fixtures_commands import runnable_venv_kldtui, started_from_a_venv
from tests.hub_server import make_dataset


def _in_backticks(said: str) -> str:
    return said.split("`")[1]


def test_a_verdicts_confirm_command_names_kldtui_as_started_and_runs_in_bash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kldtui = runnable_venv_kldtui(tmp_path, monkeypatch)
    program = shlex.split(kldtui)[0]
    better = str(tmp_path / "runs" / "comparison-q8.json")
    one = _in_backticks(confirm_command("q8", better))
    assert shlex.split(one) == [program, "noise", better, "AGAIN.json", "--output", "noise.json"], one
    # a noise model of two captures already: a third, and the model of all three
    two = SimpleNamespace(kind="measured", repeat=SimpleNamespace(sources=["c0.json", "my c1.json"]))
    three = _in_backticks(confirm_command("q8", better, two))  # type: ignore[arg-type]
    assert shlex.split(three) == [program, "noise", "c0.json", "my c1.json", "AGAIN.json", "--output",
                                  "noise.json"], three
    # as copied into bash, up to the subcommand: the program at that path runs kldtui noise
    bash = shutil.which("bash")
    assert bash is not None
    for command in (one, three):
        head = command.split(" noise ")[0]
        ran = subprocess.run([bash, "-c", f"{head} noise --help"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert "usage: kldtui noise" in ran.stdout, ran.stdout
    # where kldtui on PATH is that program (the venv activated): the plain name
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(program).parent), os.environ.get("PATH", "")]))
    assert _in_backticks(confirm_command("q8", better)).startswith(f"kldtui noise {better} "), program


def test_verify_names_kldtui_as_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    folder = tmp_path / "my suite"
    cached = VerifyResult(folder, "suite", cached=[folder / "ref" / "logits_000.safetensors"])
    assert f"(not hashed again; {kldtui} verify --reverify hashes them)" in cached.summary()
    failing = VerifyResult(folder, "suite", failures=["first", "second"])
    with pytest.raises(BadInput) as refused:
        failing.refuse("publish")
    listed = str(refused.value).split("more problem: ")[1].split(" lists them")[0]
    assert shlex.split(listed) == [*shlex.split(kldtui), "verify", str(folder)], listed
    line = unfinished_download(folder, {"state": "downloading", "repo_id": "org/suite"})
    assert line is not None
    assert shlex.split(line.split("resume it: ")[1]) == [*shlex.split(kldtui), "download", "org/suite",
                                                        "--local-dir", str(folder)], line
    root = make_dataset(tmp_path / "ds", windows=2)
    (root / "ref" / "manifest.json").unlink()
    assert verify_path(root).failures == [f"{root / 'ref'}: holds logits files but no manifest.json; the "
                                          f"download is incomplete, run {kldtui} download again"]


def test_a_missing_lm_head_names_the_export_command_as_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each place a hidden-state folder lacks its head says how to export it, kldtui named as started:
    a candidate's own head in compare, then (the suite's head gone too) score mode's preflight, the
    reference's replay and finalize."""
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    export = f"{kldtui} export-head --checkpoint"
    hidden_suite = fx.build(tmp_path / "suite", contexts=4).root
    reference = hidden_suite / fid.HIDDEN_DIR
    options = CompareOptions(bootstrap_samples=20, backend=BackendRequest("numpy", server_signs=None))
    with pytest.raises(BadInput, match="--candidate-lm-head") as compared:
        compare(hidden_suite, reference, reference, options)
    assert f"export it there ({export} CANDIDATE --output {reference / fid.LM_HEAD_DIR})" \
        in str(compared.value)
    shutil.rmtree(hidden_suite / fid.LM_HEAD_DIR)
    problems = SCORE.reference_problems(hidden_suite, reference, {})
    assert len(problems) == 1 and f"export it ({export} MODEL --output " in problems[0], problems
    workspace = SimpleNamespace(reference=reference, suite_dir=hidden_suite)
    with pytest.raises(BadInput, match="no LM head was found") as replayed:
        _replayed_or_logits(workspace)  # type: ignore[arg-type]
    assert f"export it ({export} MODEL --output {hidden_suite / fid.LM_HEAD_DIR})" in str(replayed.value)
    events: list[Event] = []
    candidate = tmp_path / "candidate"
    finish_hidden_folder(candidate, load_suite(hidden_suite), [SimpleNamespace(live=None)], runtime=None,
                         emit=events.append)
    said = [e.text for e in events if isinstance(e, Notice)]
    assert said == [f"{candidate / fid.LM_HEAD_DIR}: no LM head yet; export it ({export} MODEL --output "
                    f"{candidate / fid.LM_HEAD_DIR}) and run finalize again: it checks the replay against "
                    "the live logits"], said


def test_publishing_an_unfinished_hidden_suite_names_kldtui_as_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    root = tmp_path / "suite"
    root.mkdir()
    with pytest.raises(BadInput) as unfinished:
        upload_list(root)
    assert f"({kldtui} export-head, then {kldtui} finalize --mode hidden)" in str(unfinished.value)
    (root / fid.CHECKSUMS).write_text(f"{'0' * 64}  tokens/context-0000.json\n")
    with pytest.raises(BadInput) as missing:
        upload_list(root)
    assert f"({kldtui} download REPO --local-dir DIR --context-filter all" in str(missing.value)
    assert f"({kldtui} finalize --mode hidden for a suite kldtui captured)" in tensor_secret_remedy()


def test_other_hints_name_kldtui_as_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """kldtui plan without reports, doctor --smoke of a mode it cannot check, a noise model that
    measures nothing, a llama.cpp export of windows too short for it."""
    kldtui = started_from_a_venv(tmp_path, monkeypatch)
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert f"give two pilot reports ({kldtui} plan A.json B.json)" in err, err
    with pytest.raises(BadInput, match="cannot check") as smoke:
        HIDDEN.smoke_logprobs(tmp_path / "chunk", np.zeros(1, dtype=np.int64))
    assert str(smoke.value).endswith(f"run one window with {kldtui} run instead"), smoke.value
    old = {"format": "kldtui-noise-floor-v1", "kind": "measured", "source": "c1.json and c2.json",
           "kl_mean": 0.0, "threshold": 0.0, "per_window": [],
           "metric_repeat": {"per_window": [{"window_index": 0, "difference": 0.001}]}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(BadInput, match="measures nothing") as nothing:
        load_floor(path)
    assert str(nothing.value).endswith(f"measure it again with {kldtui} noise from captures of at least "
                                       "2 windows"), nothing.value
    short = make_dataset(tmp_path / "short", windows=1, context_length=3)
    with pytest.raises(BadInput, match="too short for llama.cpp") as exported:
        export_llama_cpp(short, tmp_path / "base.kld")
    assert str(exported.value).endswith(f"({kldtui} prepare --context-length)"), exported.value
