"""The candidate's size reaches the report: compare's flags, and a profile's [candidate] keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.report import load_report
from kldtui.workflow.preflight import preflight
from kldtui.workflow.profile import load_profile
from tests.paths import EXAMPLE_SUITE


def _compare(tmp_path: Path, *flags: str) -> Path:
    out = tmp_path / "r.json"
    code = main(["compare", "--suite-manifest", str(EXAMPLE_SUITE / "suite-manifest.json"),
                 "--reference-dir", str(EXAMPLE_SUITE / "ref"), "--candidate-dir",
                 str(EXAMPLE_SUITE / "candidate"), "--output", str(out), "--bootstrap-samples", "200",
                 *flags])
    assert code == 0
    return out


def test_compare_measures_the_candidates_weights(tmp_path: Path) -> None:
    weights = tmp_path / "model"
    weights.mkdir()
    save_file({"w": np.zeros((64, 32), np.float16)}, str(weights / "model.safetensors"))
    report = load_report(_compare(tmp_path, "--candidate-model", str(weights)))
    size = report.candidate_size
    assert size is not None and size.source == "safetensors"
    assert size.parameters == 64 * 32 and size.bits_per_weight == 16.0


def test_compare_takes_given_figures_and_leaves_the_field_out_without_them(tmp_path: Path) -> None:
    report = load_report(_compare(tmp_path, "--candidate-parameters", "1000",
                                  "--candidate-size-bytes", "600"))
    assert report.candidate_size is not None and report.candidate_size.bits_per_weight == 4.8
    plain = load_report(_compare(tmp_path))
    assert plain.candidate_size is None
    assert "candidate_size" not in (tmp_path / "r.json").read_text()


def _profile(tmp_path: Path, candidate: str) -> Path:
    p = tmp_path / "kldtui.toml"
    p.write_text(f"[reference]\nlocal_dir = \"{EXAMPLE_SUITE}\"\n\n[candidate]\n{candidate}\n")
    return p


def test_profile_gives_or_measures_the_size(tmp_path: Path) -> None:
    prof = load_profile(_profile(tmp_path, 'kind = "embedded"\nparameters = 2000\nsize_bytes = 1000\n'))
    size = prof.candidate.model_size()
    assert size is not None and size.bits_per_weight == 4.0 and size.source == "given"
    assert load_profile(_profile(tmp_path, 'kind = "embedded"\n')).candidate.model_size() is None
    (tmp_path / "ckpt").mkdir()
    save_file({"w": np.zeros((10, 10), np.float32)}, str(tmp_path / "ckpt" / "model.safetensors"))
    # vLLM's model, a local checkpoint, is measured
    prof = load_profile(_profile(tmp_path, 'kind = "vllm"\nmodel = "ckpt"\n'))
    size = prof.candidate.model_size()
    assert size is not None and size.parameters == 100 and size.bits_per_weight == 32.0
    # a Hub model id is not a file: no size unless given
    hub = load_profile(_profile(tmp_path, 'kind = "vllm"\nmodel = "org/model"\n'))
    assert hub.candidate.model_size() is None


def test_profile_size_problems_are_said_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="bits_per_weight must be"):
        load_profile(_profile(tmp_path, 'kind = "embedded"\nparameters = 10\nbits_per_weight = 99.0\n')
                     ).candidate.model_size()
    prof = load_profile(_profile(tmp_path, f'kind = "embedded"\nweights = "{tmp_path / "nothing"}"\n'))
    problems = preflight(prof, prof.workspace())
    assert any(str(tmp_path / "nothing") in p and "not found" in p for p in problems)


def test_the_summary_says_the_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    _compare(tmp_path, "--candidate-parameters", "1000", "--candidate-size-bytes", "600")
    assert "(600 B, 1 K parameters, 4.800 bits per weight (given))" in capsys.readouterr().out
