"""Masked tokens (-inf logits) through the compare stage: probability 0, infinite KL counted and
named in the report, NaN and +inf still refused with a one-line error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.errors import BadInput
from kldtui.formats.report import load_report
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from tests.fixtures_compare import make_suite


def _masked(cols: np.ndarray, value: float, both: bool):
    """A candidate function for make_suite that masks ``cols`` (and the same in the reference
    when ``both``: make_suite writes the reference after calling it, from the same array)."""
    def cand(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        y = (x + rng.standard_normal(x.shape) * 0.1).astype(np.float32)
        y[:, cols] = value
        if both:
            x[:, cols] = value
        return y
    return cand


def _opts() -> CompareOptions:
    return CompareOptions(bootstrap_samples=100, reverse=True)


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_same_mask_on_both_sides_is_well_defined(tmp_path: Path, backend: str) -> None:
    from kldtui.metrics import ckernel

    if backend == "c" and not ckernel.available():
        pytest.skip("no C kernel")
    cols = np.arange(0, 300, 7)
    got = {}
    for name, value in (("inf", -np.inf), ("finite", -1e30)):
        suite, ref, cand, _ = make_suite(tmp_path / name, windows=2, context=30, vocab=300,
                                         candidate=_masked(cols, value, both=True))
        opts = _opts()
        opts.backend = BackendRequest(backend, server_signs=None)
        got[name] = compare(suite.path, ref, cand, opts).to_json()
    a, b = got["inf"], got["finite"]
    assert a["infinite_kl"]["rows"] == 0 and a["infinite_kl"]["windows"] == []
    assert a["kl_reference_to_candidate"]["mean"] == pytest.approx(b["kl_reference_to_candidate"]["mean"],
                                                                   rel=1e-12)
    assert a["js"]["mean"] == pytest.approx(b["js"]["mean"], rel=1e-12)
    assert 0 < a["kl_reference_to_candidate"]["mean"] < 1


def test_candidate_zero_where_reference_predicts_gives_counted_infinite_kl(tmp_path: Path) -> None:
    def cand(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        y = (x + rng.standard_normal(x.shape) * 0.1).astype(np.float32)
        if not hasattr(cand, "calls"):
            cand.calls = 0  # type: ignore[attr-defined]
        if cand.calls == 1:  # type: ignore[attr-defined]  # window 1: rows 3 and 4 mask a token
            y[3, 10] = -np.inf
            y[4, :5] = -np.inf
        cand.calls += 1  # type: ignore[attr-defined]
        return y

    suite, ref, cand_dir, _ = make_suite(tmp_path / "s", windows=3, context=20, vocab=200, candidate=cand)
    out = tmp_path / "r.json"
    code = main(["compare", "--suite-manifest", str(suite.path), "--reference-dir", str(ref),
                 "--candidate-dir", str(cand_dir), "--output", str(out), "--bootstrap-samples", "100"])
    assert code == 0
    report = load_report(out).to_json()
    json.loads(out.read_text())  # strict JSON: no Infinity
    assert report["infinite_kl"]["rows"] == 2 and report["infinite_kl"]["windows"] == [1]
    assert [w["infinite_kl_rows"] for w in report["per_window"]] == [0, 2, 0]
    assert report["per_window_arrays"]["infinite_kl_rows"] == [0, 2, 0]
    # the KL statistics cover the positions with finite KL; the infinite ones are counted above
    assert 0 < report["per_window"][1]["kl_reference_to_candidate"]["mean"] < 1
    assert report["kl_reference_to_candidate"]["max"] < 1
    assert math.isfinite(report["js"]["mean"]) and math.isfinite(report["js"]["max"])
    assert math.isfinite(report["next_token"]["log_perplexity_ratio"])
    # the typed model knows the new fields and writes the report back unchanged
    from kldtui.formats.report_model import ComparisonReport

    doc = json.loads(out.read_text())
    model = ComparisonReport.from_json(doc, str(out))
    assert model.infinite_kl is not None and model.infinite_kl.rows == 2 and model.extra == {}
    assert model.per_window[1].infinite_kl_rows == 2
    assert json.dumps(model.to_json(), sort_keys=True) == json.dumps(doc, sort_keys=True)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_plus_inf_are_still_refused(tmp_path: Path, bad: float) -> None:
    def cand(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        y = x.copy()
        y[2, 7] = bad
        return y

    suite, ref, cand_dir, _ = make_suite(tmp_path, windows=1, context=10, vocab=100, candidate=cand)
    with pytest.raises(BadInput, match=r"candidate.*window 000.*NaN or Inf.*rows 2") as err:
        compare(suite.path, ref, cand_dir, _opts())
    assert "\n" not in str(err.value)


def _chunk_folder(tmp_path: Path, suite, logits: np.ndarray) -> Path:
    """The window's logits as a server's chunks (two of them), in a capture run's window folder."""
    from kldtui.formats.chunks import write_chunk

    (w,) = suite.windows
    for start, end in ((0, 4), (4, len(logits))):
        write_chunk(tmp_path / "server", "cmpl-w0-0-abcdef01", start, logits[start:end], logits.shape[1])
    folder = tmp_path / "capture" / "run1" / w.chunk_dir_name
    folder.parent.mkdir(parents=True)
    (tmp_path / "server" / "cmpl-w0-0-abcdef01").rename(folder)
    return folder


@pytest.mark.parametrize("bad", ["nan", "+inf", "all -inf"])
def test_capture_finalize_and_compare_refuse_the_same_rows_in_the_same_words(tmp_path: Path,
                                                                             bad: str) -> None:
    """Capture and finalize refused any -inf ("the server computed garbage") while compare took it
    as a masked token; one rule now (kldtui.formats.finite): all three refuse a NaN, a +Inf or a row
    without a finite logit, in one line of the same shape naming the file, and take a -inf entry."""
    from kldtui.formats.chunks import check_chunk_dir
    from kldtui.stages.finalize import finalize_window

    def cand(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        y = (x + rng.standard_normal(x.shape) * 0.1).astype(np.float32)
        y[5, 3] = -np.inf  # a masked token elsewhere: never the reason
        if bad == "all -inf":
            y[2, :] = -np.inf
        else:
            y[2, 7] = np.nan if bad == "nan" else np.inf
        return y

    suite, ref, cand_dir, data = make_suite(tmp_path / "s", windows=1, context=10, vocab=100, candidate=cand)
    (w,) = suite.windows
    folder = _chunk_folder(tmp_path, suite, data[0][1])
    tail = ("window 000 (prose): NaN or Inf in the {} logits at rows 2 (NaN, +Inf or no finite logit in a "
            "row); capture and finalize this window again")
    with pytest.raises(BadInput) as compared:
        compare(suite.path, ref, cand_dir, _opts())
    assert str(compared.value) == f"{cand_dir / 'logits_000.safetensors'}: {tail.format('candidate')}"
    chunk = folder / "logits.rows-000000-000004.safetensors"
    with pytest.raises(BadInput) as captured:  # the capture client's check of the chunks it collects
        check_chunk_dir(folder, w, check_values=True)
    assert str(captured.value) == f"{chunk}: {tail.format('captured')}"
    with pytest.raises(BadInput) as finalized:
        finalize_window(suite, w, folder, tmp_path / "final", expected_vocab=None)
    assert str(finalized.value) == f"{chunk}: {tail.format('captured')}"
    assert not (tmp_path / "final" / "logits_000.safetensors").exists()


def test_a_masked_token_passes_capture_and_finalize_and_compares_as_written(tmp_path: Path) -> None:
    """-inf entries (the candidate's only, and one both sides mask) pass the capture client's check
    and finalize, and the finalized folder compares to the figures compare gives the same logits."""
    from kldtui.formats.chunks import check_chunk_dir
    from kldtui.formats.logits_writer import write_logits_manifest
    from kldtui.stages.finalize import finalize_window

    def cand(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        y = (x + rng.standard_normal(x.shape) * 0.1).astype(np.float32)
        y[3, 10] = -np.inf  # the reference gives it a probability: infinite KL, counted
        y[:, 50:60] = -np.inf  # masked on both sides
        x[:, 50:60] = -np.inf
        return y

    suite, ref, cand_dir, data = make_suite(tmp_path / "s", windows=1, context=10, vocab=100, candidate=cand)
    (w,) = suite.windows
    folder = _chunk_folder(tmp_path, suite, data[0][1])
    check_chunk_dir(folder, w, check_values=True)
    entry = finalize_window(suite, w, folder, tmp_path / "final", expected_vocab=None)
    write_logits_manifest(tmp_path / "final", suite, [entry], kind="candidate")
    got = compare(suite.path, ref, tmp_path / "final", _opts()).to_json()
    direct = compare(suite.path, ref, cand_dir, _opts()).to_json()
    assert got["infinite_kl"]["rows"] == 1 and got["infinite_kl"]["windows"] == [0]
    for key in ("kl_reference_to_candidate", "kl_candidate_to_reference", "js", "next_token",
                "topk_agreement", "infinite_kl", "per_window"):
        assert got[key] == direct[key], key
