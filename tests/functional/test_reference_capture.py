"""A profile's reference capture (kldtui.stages.reference_capture): into the suite's ref/, with
capture records, a repeat of the first window (repeat-noise-window000.json), a runtime identity
without secrets, and a server the pipeline can stop while it captures."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.serve import ServerProcess
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import profile_from_dict
from tests.fixtures_hostile import plant, then_plant_folder


@contextlib.contextmanager
def _attached_reference(tmp_path: Path, seed: int) -> Iterator[tuple[Path, Path, str]]:
    """A three-window suite and an embedded reference server running beside it, as a user attaches one:
    yields the suite's folder, the folder the server writes its chunks to, and its URL."""
    rng = np.random.default_rng(seed)
    suite_dir = tmp_path / "suite"
    write_suite(suite_dir, [(d, rng.integers(0, 300, 40).tolist()) for d in ("prose", "prose", "code")])
    chunks = tmp_path / "ref-chunks"
    ref_argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "ref",
                "--vocab-size", "300", "--max-num-batched-tokens", "16"]
    with ServerProcess(ref_argv, capture_dir=chunks, served_model_name="ref") as ref_server:
        yield suite_dir, chunks, ref_server.wait_ready(timeout=60)


def test_attached_reference_is_captured_finalized_and_repeated(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with _attached_reference(tmp_path, seed=3) as (suite_dir, chunks, url):
        doc = {"reference": {"local_dir": str(suite_dir), "capture": "attach", "url": url,
                             "served_model_name": "ref", "server_capture_dir": str(chunks)},
               "candidate": {"kind": "embedded", "served_model_name": "cand", "vocab_size": 300,
                             "perturb": 0.2, "max_num_batched_tokens": 16},
               "run": {"workdir": str(tmp_path / "work"), "run_name": "cand"},
               "compare": {"bootstrap_samples": 200}}
        state = Pipeline(profile_from_dict(doc, base_dir=tmp_path)).run_all()
        assert state.report_path is not None
        report = json.loads(state.report_path.read_text())
    assert report["windows"] == 3 and report["kl_reference_to_candidate"]["mean"] > 0
    manifest = json.loads((suite_dir / "ref" / "manifest.json").read_text())
    assert manifest["kind"] == "reference" and manifest["vocab_size"] == 300
    assert manifest["runtime"]["launcher"] == "attached" and manifest["runtime"]["url"] == url
    records = json.loads((suite_dir / "capture-reference.json").read_text())
    assert [r["window_index"] for r in records] == [0, 1, 2]
    noise = json.loads((suite_dir / "repeat-noise-window000.json").read_text())
    # the embedded model is deterministic: the repeat equals the first capture
    assert noise["windows"] == 1 and noise["window_range"] == [0, 1]
    assert noise["kl_reference_to_candidate"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert noise["top1_agreement"] == 1.0
    capsys.readouterr()
    assert main(["verify", str(suite_dir)]) == 0
    assert main(["publish", str(suite_dir), "--repo-id", "me/ref", "--dry-run"]) == 0
    card = capsys.readouterr().out
    assert "capture-reference.json" in card and "- top-1 agreement = 100 %" in card


def test_runtime_identity_is_redacted(tmp_path: Path) -> None:
    """What a launched server records for the manifests (the reference's and the candidates') goes
    through kldtui.redact when the session is made: flag values and environment values by name."""
    from kldtui.servers.base import ServerPlan
    from kldtui.stages.serve import start_serve
    from kldtui.workspace import Workspace

    argv = (sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "ref",
            "--vocab-size", "64", "--api-key", "s3cret-key-1", "--max-num-seqs", "1")
    plan = ServerPlan("embedded", "ref", argv=argv, env={"HF_TOKEN": "hf_abcdefghijkl", "OPENAI_API_KEY": "k",
                                                         "VLLM_TRITON_X": "8"})
    session = start_serve(Workspace(suite_dir=tmp_path, capture_root=tmp_path / "c"), lambda e: None, plan)
    try:
        clean = session.runtime
    finally:
        session.stop()
    i = clean["argv"].index("--api-key")
    assert clean["argv"][i + 1] == "<redacted>"
    assert clean["env"] == {"HF_TOKEN": "<redacted>", "OPENAI_API_KEY": "<redacted>", "VLLM_TRITON_X": "8"}
    assert "s3cret-key-1" not in json.dumps(clean) and "hf_abcdefghijkl" not in json.dumps(clean)
    assert plan.env["HF_TOKEN"] == "hf_abcdefghijkl"  # the plan itself is not changed


def test_the_reference_server_can_be_stopped_while_it_captures(tmp_path: Path) -> None:
    """The reference capture is a driver of its own; the pipeline still reaches its server: the
    dashboard's quit and the batch runner's second signal stop it mid-capture."""
    import threading
    import time

    from kldtui.errors import KldError
    from kldtui.workflow.demo import prepare_demo
    from kldtui.workflow.profile import load_profile

    path = prepare_demo(tmp_path).path
    assert path is not None
    path.write_text(path.read_text().replace(  # slow: the test looks while it captures
        'kind = "embedded"\n', 'kind = "embedded"\nenv = { KLDTUI_EMBEDDED_FAULT = "chunk-delay:0.3" }\n', 1))
    pipeline = Pipeline(load_profile(path))
    failed: list[BaseException] = []

    def reference() -> None:
        try:
            pipeline.reference()
        except KldError as exc:
            failed.append(exc)

    worker = threading.Thread(target=reference)
    worker.start()
    deadline = time.monotonic() + 120
    while not pipeline.server_running and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pipeline.server_running  # the reference server, while the reference is captured
    pipeline.stop_server("stopped by the test")
    worker.join(timeout=120)
    assert not worker.is_alive() and not pipeline.server_running
    assert failed and "server" in str(failed[0]), failed  # "...: the server stopped during the capture..."


def _repeating_profile(tmp_path: Path) -> tuple[Path, Path]:
    """A profile whose reference the embedded server captures, its first window twice (``repeat =
    true``): the repeat's report is SUITE/repeat-noise-window000.json. Returns the profile and that
    name."""
    rng = np.random.default_rng(4)
    suite_dir = tmp_path / "suite"
    write_suite(suite_dir, [(d, rng.integers(0, 300, 40).tolist()) for d in ("prose", "prose", "code")])
    profile = tmp_path / "kldtui.toml"
    profile.write_text('[reference]\nlocal_dir = "suite"\ncapture = "embedded"\nrepeat = true\n\n'
                       '[candidate]\nkind = "embedded"\nserved_model_name = "cand"\nvocab_size = 300\n'
                       'perturb = 0.2\nmax_num_batched_tokens = 16\nport = 0\n\n'
                       '[run]\nworkdir = "work"\nrun_name = "cand"\n\n[compare]\nbootstrap_samples = 200\n')
    return profile, suite_dir / "repeat-noise-window000.json"


def _refused_before_capture(profile: Path, out: Path, writes: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """A folder at ``out``, a name of kldtui's for its ``writes``: ``kldtui run`` is one line saying to move
    it away, exit 2, before the reference server starts or anything is captured."""
    out.mkdir()
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"kldtui: error: {out}: is a folder where kldtui writes its {writes}; move that folder "
                   "away, then run again"], err
    assert not (out.parent / "ref").exists() and not any(out.iterdir())
    assert not list((profile.parent / "work").rglob("*.safetensors"))  # nothing captured


def test_a_folder_at_the_repeat_report_s_name_is_refused_before_any_server_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The repeat's report has a name of kldtui's: a folder there is one line saying to move it away,
    exit 2, before the reference server starts or anything is captured."""
    profile, out = _repeating_profile(tmp_path)
    _refused_before_capture(profile, out, "comparison report", capsys)


def test_a_folder_made_at_the_repeat_report_s_name_during_the_capture_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeat's report is written by the reports' one writer, which applies the output-file rule
    again: a folder made at its name while the repeat was compared is one line and exit 2, not an
    IsADirectoryError."""
    import kldtui.stages.compare as compare_stage

    profile, out = _repeating_profile(tmp_path)
    monkeypatch.setattr(compare_stage, "run_compare", then_plant_folder(compare_stage.run_compare, out))
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"kldtui: error: {out}: is a folder where kldtui writes its comparison report; "
                            "move that folder away, then run again\n"), captured.err
    assert "Traceback" not in captured.out and not any(out.iterdir())


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_a_link_or_fifo_at_the_repeat_report_s_name_is_replaced(tmp_path: Path, planted: str) -> None:
    """A link at the repeat report's name is replaced, never written through (its target is unchanged);
    a FIFO there is replaced, never opened (nothing blocks); the report is the repeat's comparison."""
    from kldtui.workflow.profile import load_profile

    profile, out = _repeating_profile(tmp_path)
    victim = tmp_path / "yours.json"
    victim.write_text("yours\n")
    plant(out, planted, victim)
    Pipeline(load_profile(profile)).reference()
    assert not out.is_symlink() and out.is_file() and victim.read_text() == "yours\n"
    noise = json.loads(out.read_text())
    assert noise["windows"] == 1 and noise["window_range"] == [0, 1]
    assert noise["kl_reference_to_candidate"]["mean"] == pytest.approx(0.0, abs=1e-9)


@contextlib.contextmanager
def _attached_profile(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A profile whose reference is captured from an attached embedded server (not a built-in model's
    demo suite: its capture records are copied to the suite root), without the repeat; yields the
    profile and that copy's name, SUITE/capture-reference.json, while the server runs."""
    with _attached_reference(tmp_path, seed=5) as (suite_dir, chunks, url):
        profile = tmp_path / "kldtui.toml"
        profile.write_text(f'[reference]\nlocal_dir = "suite"\ncapture = "attach"\nurl = "{url}"\n'
                           f'served_model_name = "ref"\nserver_capture_dir = "{chunks}"\nrepeat = false\n\n'
                           '[candidate]\nkind = "embedded"\nserved_model_name = "cand"\nvocab_size = 300\n'
                           'perturb = 0.2\nmax_num_batched_tokens = 16\nport = 0\n\n[run]\nworkdir = "work"\n'
                           'run_name = "cand"\n\n[compare]\nbootstrap_samples = 200\n')
        yield profile, suite_dir / "capture-reference.json"


def test_a_folder_at_the_capture_records_copy_s_name_is_refused_before_any_capture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """capture-reference.json is a name of kldtui's: a folder there is one line saying to move it away,
    exit 2, before anything is captured."""
    with _attached_profile(tmp_path) as (profile, out):
        _refused_before_capture(profile, out, "capture records", capsys)


def test_a_folder_made_at_the_capture_records_copy_s_name_during_the_capture_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy applies the output-file rule again when it writes: a folder made at its name while the
    reference was captured is one line and exit 2, not an IsADirectoryError."""
    import kldtui.stages.finalize as finalize_stage

    with _attached_profile(tmp_path) as (profile, out):
        monkeypatch.setattr(finalize_stage, "run_finalize", then_plant_folder(
            finalize_stage.run_finalize, out, when=lambda kwargs: kwargs.get("kind") == "reference"))
        assert main(["run", "--batch", "--profile", str(profile)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"kldtui: error: {out}: is a folder where kldtui writes its capture records; "
                            "move that folder away, then run again\n"), captured.err
    assert "Traceback" not in captured.out and not any(out.iterdir())
    assert (out.parent / "ref" / "manifest.json").is_file()  # the reference itself was finalized


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_a_link_or_fifo_at_the_capture_records_copy_s_name_is_replaced(tmp_path: Path, planted: str) -> None:
    """A link at capture-reference.json is replaced, never written through (its target is unchanged); a
    FIFO there is replaced, never opened (nothing blocks); the copy is the reference's capture records."""
    from kldtui.workflow.profile import load_profile

    victim = tmp_path / "yours.json"
    victim.write_text("yours\n")
    with _attached_profile(tmp_path) as (profile, out):
        plant(out, planted, victim)
        Pipeline(load_profile(profile)).reference()
    assert not out.is_symlink() and out.is_file() and victim.read_text() == "yours\n"
    assert [r["window_index"] for r in json.loads(out.read_text())] == [0, 1, 2]
