"""The compare stage end to end on small synthetic suites, held against a float64 oracle."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kldtui.errors import Interrupted
from kldtui.events import Cancel, StageFinished, StageStarted, WindowState
from kldtui.metrics import stats as st
from kldtui.stages.compare import BackendRequest, CompareOptions, build_report, compare, compare_window
from kldtui.stages.compare.cache import decode_result, encode_result
from tests.fixtures_compare import make_suite, oracle_rows, rel_err

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)


@pytest.fixture(scope="module")
def suite_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    suite, ref, cand, data = make_suite(root, windows=4, context=300, vocab=700, seed=1,
                                        domains=("prose", "prose", "code", "instruction"))
    return suite, ref, cand, data


def _oracle_all(data, windows):
    per = {w: oracle_rows(*data[w]) for w in windows}
    cat = {k: np.concatenate([per[w][k] for w in windows]) for k in per[windows[0]]}
    return per, cat


def test_report_matches_oracle(suite_dirs) -> None:
    suite, ref, cand, data = suite_dirs
    events = []
    report = compare(suite.path, ref, cand, CompareOptions(reverse=True, bootstrap_samples=2000),
                     events.append).to_json()
    per, cat = _oracle_all(data, [0, 1, 2, 3])
    assert report["direction"] == "KL(reference || candidate)"
    assert report["positions"] == 4 * 299 and report["windows"] == 4 and report["window_range"] == [0, 4]
    for key, field in (("kl_reference_to_candidate", "kl"), ("js", "js"),
                       ("kl_candidate_to_reference", "kl_reverse")):
        want = st.stats_object(cat[field])
        for stat, value in report[key].items():
            assert rel_err(np.array([value]), np.array([want[stat]]))[0] < 1e-6, (key, stat)
    top1 = cat["argmax_ref"] == cat["argmax_cand"]
    assert report["top1_agreement"] == pytest.approx(top1.mean(), abs=0)
    for k in (1, 5, 10):
        assert report["topk_agreement"][str(k)] == (cat["rank_ref_top"] < k).mean()
    assert report["topk_agreement"]["k"] == [1, 5, 10]
    # the compiled kernel's float32 path holds 1e-6 relative per row (not 1e-9): so do the means
    window_kl = [per[w]["kl"].mean() for w in range(4)]
    boot = report["kl_window_cluster_bootstrap"]
    assert boot["estimate"] == pytest.approx(np.mean(window_kl), rel=1e-6)
    assert boot["bootstrap_samples"] == 2000 and boot["cluster_unit"] == "window"
    assert set(report["domains"]) == {"prose", "code", "instruction"}
    assert report["domains"]["prose"]["estimate"] == pytest.approx(np.mean(window_kl[:2]), rel=1e-6)
    # next token
    p_ref, p_cand = np.exp(cat["logp_ref_next"]), np.exp(cat["logp_cand_next"])
    nt = report["next_token"]
    assert nt["p_reference"]["mean"] == pytest.approx(p_ref.mean(), rel=1e-6)
    assert nt["delta_p"]["rms"] == pytest.approx(math.sqrt(np.mean((p_cand - p_ref) ** 2)), rel=1e-6)
    assert nt["perplexity_reference"] == pytest.approx(math.exp(-cat["logp_ref_next"].mean()), rel=1e-6)
    assert nt["perplexity_ratio"] == pytest.approx(
        nt["perplexity_candidate"] / nt["perplexity_reference"], rel=1e-9)
    pb = nt["perplexity_ratio_window_cluster_bootstrap"]
    assert pb["ci95_low"] <= pb["estimate"] <= pb["ci95_high"]
    # buckets
    conf = report["kl_by_reference_confidence"]
    assert [b["low"] for b in conf] == [0.0, 0.25, 0.5, 0.75, 0.95]
    assert sum(b["positions"] for b in conf) == report["positions"]
    pos = report["kl_by_position"]
    assert [(b["start"], b["stop"]) for b in pos] == [(0, 256), (256, 299)]
    assert pos[1]["kl_mean"] == pytest.approx(
        np.concatenate([per[w]["kl"][256:] for w in range(4)]).mean(), rel=1e-6)
    # per window: original entries and the parallel arrays
    arrays = report["per_window_arrays"]
    assert arrays["window_index"] == [0, 1, 2, 3]
    assert arrays["kl_mean"] == pytest.approx(window_kl, rel=1e-6)
    assert len(arrays["kl_reverse_mean"]) == 4 and len(arrays["top10_agreement"]) == 4
    pw = report["per_window"][2]
    assert pw["window_index"] == 2 and pw["domain"] == "code" and pw["positions"] == 299
    assert set(pw["kl_reference_to_candidate"]) >= {"mean", "median", "p95", "p99", "max"}
    assert pw["top1_agreement"] == (per[2]["argmax_ref"] == per[2]["argmax_cand"]).mean()
    prov = report["provenance"]
    assert prov["backend"] in ("c-kernel", "numpy-threads")
    assert prov["bytes_compared"] == 2 * 4 * 299 * 700 * 4
    assert prov["verified"] == {"token_hashes": True, "suite_hash": True, "logits_sha256": "skipped"}
    assert report["suite_token_hash_sha256"] == suite.suite_token_hash_sha256
    assert report["vocab_size"] == 700
    json.dumps(report, allow_nan=False)
    # events
    assert isinstance(events[0], StageStarted) and isinstance(events[-1], StageFinished)
    done = [e for e in events if isinstance(e, WindowState) and e.state == "compared"]
    assert [e.window_index for e in done] == [0, 1, 2, 3]
    assert done[0].figures["kl"] == pytest.approx(window_kl[0], rel=1e-6)


def test_window_by_window_equals_whole_run_and_round_trips(suite_dirs) -> None:
    suite, ref, cand, _ = suite_dirs
    opts = CompareOptions(start_window=1, stop_window=3, bootstrap_samples=500, reverse=True)
    whole = compare(suite.path, ref, cand, opts).to_json()
    results = []
    for i in (2, 1):  # any order
        r = compare_window(suite, suite.window(i), ref, cand, opts, None)
        doc = json.loads(json.dumps(encode_result(r)))
        back = decode_result(doc)
        for f in ("kl", "js", "kl_reverse", "rank_ref_top", "logp_cand_next"):
            np.testing.assert_array_equal(getattr(back.rows, f), getattr(r.rows, f))
        results.append(back)
    built = build_report(results, suite=suite, reference_dir=ref, candidate_dir=cand,
                         options=opts).to_json()
    for key in ("kl_reference_to_candidate", "js", "kl_window_cluster_bootstrap", "domains", "per_window",
                "per_window_arrays", "next_token", "topk_agreement", "kl_by_position", "window_range",
                "kl_candidate_to_reference", "reference_manifest_sha256"):
        assert built[key] == whole[key], key


def test_windows_compared_one_at_a_time_name_their_threads(suite_dirs) -> None:
    """kldtui run compares each window as it is finalized (Comparer.window, options per window): its
    report said "threads": null, though every window's kernel ran with a known count (a null the
    result pane then left out). The count the windows ran with is in the report; windows that ran
    with different counts, or that a cache of an older kldtui holds, leave it null (docs/REPORT.md)."""
    from dataclasses import replace

    from kldtui.stages.compare.driver import Comparer
    from kldtui.workspace import Workspace

    suite, ref, cand, _ = suite_dirs
    opts = CompareOptions(start_window=0, stop_window=2, bootstrap_samples=100, backend=NUMPY)

    def threads_of(results: list) -> object:
        return build_report(results, suite=suite, options=opts).to_json()["provenance"]["threads"]

    comparer = Comparer(Workspace.for_compare(suite.path, ref, cand), suite, opts)
    three = replace(opts, backend=BackendRequest("numpy", 3, server_signs=None))
    results = [comparer.window(suite.window(i), options=three) for i in (0, 1)]
    assert comparer.report(results).to_json()["provenance"]["threads"] == 3
    assert threads_of([decode_result(json.loads(json.dumps(encode_result(r)))) for r in results]) == 3
    two = replace(opts, backend=BackendRequest("numpy", 2, server_signs=None))
    other = compare_window(suite, suite.window(1), ref, cand, two)
    assert other.threads == 2 and threads_of([results[0], other]) is None
    older = encode_result(results[1])
    del older["threads"]  # written before windows kept their thread count
    assert threads_of([results[0], decode_result(older)]) is None


def test_threads_and_row_blocks_do_not_change_results(suite_dirs) -> None:
    suite, ref, cand, _ = suite_dirs
    a = compare(suite.path, ref, cand, CompareOptions(backend=BackendRequest(threads=1, server_signs=None),
                                                      row_block=7, bootstrap_samples=100))
    b = compare(suite.path, ref, cand, CompareOptions(backend=BackendRequest(threads=3, server_signs=None),
                                                      row_block=64, bootstrap_samples=100))
    assert a.per_window_arrays == b.per_window_arrays  # the typed model compares field by field
    a, b = a.to_json(), b.to_json()
    assert a["per_window_arrays"] == b["per_window_arrays"]
    assert a["kl_reference_to_candidate"] == b["kl_reference_to_candidate"]


def test_torch_backend_agrees_with_numpy(suite_dirs) -> None:
    pytest.importorskip("torch")
    suite, ref, cand, _ = suite_dirs
    a = compare(suite.path, ref, cand,
                CompareOptions(backend=NUMPY, bootstrap_samples=100, reverse=True)).to_json()
    b = compare(suite.path, ref, cand, CompareOptions(backend=BackendRequest("torch-cpu", server_signs=None),
                                                      bootstrap_samples=100, reverse=True)).to_json()
    assert b["provenance"]["backend"] == "torch-cpu"
    for key in ("kl_mean", "js_mean", "kl_reverse_mean", "nll_candidate_mean"):
        got, want = np.array(b["per_window_arrays"][key]), np.array(a["per_window_arrays"][key])
        assert rel_err(got, want).max() < 1e-9
    assert a["per_window_arrays"]["top10_agreement"] == b["per_window_arrays"]["top10_agreement"]


def test_cancel_stops_the_stage(suite_dirs) -> None:
    suite, ref, cand, _ = suite_dirs
    cancel = Cancel()
    cancel.set("test")
    with pytest.raises(Interrupted):
        compare(suite.path, ref, cand, CompareOptions(), cancel=cancel)


def test_identical_candidate_gives_exact_zero(tmp_path: Path) -> None:
    suite, ref, cand, _ = make_suite(tmp_path, windows=2, context=40, vocab=300, candidate=lambda rng, x: x)
    report = compare(suite.path, ref, cand,
                     CompareOptions(reverse=True, bootstrap_samples=100)).to_json()
    assert report["kl_reference_to_candidate"]["max"] == 0.0
    assert report["js"]["max"] == 0.0 and report["kl_candidate_to_reference"]["max"] == 0.0
    assert report["top1_agreement"] == 1.0 and report["next_token"]["perplexity_ratio"] == 1.0
    assert report["kl_window_cluster_bootstrap"]["ci95_high"] == 0.0


@pytest.mark.slow  # large windows, measured in a child
def test_memory_is_bounded_by_row_blocks_not_windows(tmp_path: Path) -> None:
    """Peak traced memory while comparing stays far below one window of logits and does not grow
    with the number of windows: it is threads x (two float32 row blocks + the kernel's buffers)."""
    import tracemalloc

    vocab, rows = 32768, 255
    suite, ref, cand, _ = make_suite(tmp_path, windows=3, context=rows + 1, vocab=vocab, seed=4)
    peaks = []
    for stop in (1, 3):
        opts = CompareOptions(stop_window=stop, backend=BackendRequest(threads=2, server_signs=None),
                              row_block=8, bootstrap_samples=100)
        tracemalloc.start()
        compare(suite.path, ref, cand, opts)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    window_bytes = rows * vocab * 4  # one side of one window
    per_thread = 2 * 8 * vocab * 4 + 5 * vocab * 8 + vocab
    assert max(peaks) < window_bytes / 2, peaks
    assert peaks[1] - peaks[0] < per_thread + 1_000_000, peaks  # 2 more windows: no more memory


def test_published_layout_compares_as_it_is(tmp_path: Path) -> None:
    """Files written like the published dataset (safetensors library, hand-written manifests)."""
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.formats.safetensors_io import RowReader
    from kldtui.formats.suite import load_suite
    from tests import published_fixture

    root = tmp_path / "pub"
    published_fixture.build(root)
    same = compare(root / "suite-manifest.json", root / "ref", root / "ref",
                   CompareOptions(verify_sha256=True, bootstrap_samples=100, reverse=True)).to_json()
    assert same["kl_reference_to_candidate"]["max"] == 0.0 and same["top1_agreement"] == 1.0
    assert same["provenance"]["verified"]["logits_sha256"] == "checked"
    again = compare(root / "suite-manifest.json", root / "ref", root / "ref",
                    CompareOptions(verify_sha256=True, bootstrap_samples=100)).to_json()
    assert again["provenance"]["verified"]["logits_sha256"] == "cached"  # kldtui verify's cache
    assert same["domains"].keys() == {"prose", "code", "instruction"}
    suite = load_suite(root)
    rng = np.random.default_rng(9)
    written = []
    for w in suite.windows:
        with RowReader(root / "ref" / f"logits_{w.index:03d}.safetensors") as r:
            x = r.read(0, r.rows)
        written.append(write_logits_array(tmp_path / "cand", w, (x + rng.normal(0, 0.2, x.shape)).astype(
            np.float32), suite.context_length))
    write_logits_manifest(tmp_path / "cand", suite, written, kind="candidate")
    report = compare(root / "suite-manifest.json", root / "ref", tmp_path / "cand",
                     CompareOptions(bootstrap_samples=100)).to_json()
    assert 0 < report["kl_window_cluster_bootstrap"]["estimate"] < 1
    assert report["positions"] == 3 * 7


def test_overflowing_perplexity_is_null_not_an_invalid_report(tmp_path: Path) -> None:
    def broken(rng, x):
        y = x.copy()
        y[:, :] = -1.0e6  # every token but the argmax is impossible for the candidate
        y[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 0.0
        return y

    suite, ref, cand, _ = make_suite(tmp_path, windows=2, context=40, vocab=300, candidate=broken)
    report = compare(suite.path, ref, cand, CompareOptions(bootstrap_samples=100)).to_json()
    assert report["next_token"]["perplexity_candidate"] is None
    assert report["next_token"]["perplexity_ratio"] is None
    # in log space the same figures are finite
    assert 1e5 < report["next_token"]["log_perplexity_candidate"] < 1e7
    assert report["next_token"]["log_perplexity_ratio"] > 1e5
    # e^-1e6 underflows, but a finite logit is not a mask: KL is finite (about 1e6) on every row
    assert report["infinite_kl"]["rows"] == 0 and report["infinite_kl"]["windows"] == []
    assert 1e5 < report["kl_reference_to_candidate"]["mean"] < 1e7 and report["js"]["max"] <= math.log(2)
    json.dumps(report, allow_nan=False)


def test_the_backend_and_why_are_said_once_and_kept_in_the_report(suite_dirs) -> None:
    """The engine chose a backend and dropped the reason: a user never learnt whether the CPU kernel or a
    GPU compared, nor why. The compare says it once (BackendChosen, before the first window) and the
    report keeps it (provenance.backend_reason); a choice its caller made and said (the pipeline's) is
    not said again; windows compared under different choices keep each reason once, in window order;
    a window whose reason is not known (an older cache entry) leaves it out."""
    from dataclasses import replace

    from kldtui.events import BackendChosen
    from kldtui.stages.compare.backends import NOT_TOLD, Backend, BackendChoice

    suite, ref, cand, _ = suite_dirs
    events: list = []
    opts = CompareOptions(start_window=0, stop_window=2, bootstrap_samples=100, backend=NUMPY)
    report = compare(suite.path, ref, cand, opts, events.append).to_json()
    said = [e for e in events if isinstance(e, BackendChosen)]
    assert [(e.stage, e.backend, e.line) for e in said] == [
        ("compare", "numpy-threads", "compare backend: numpy-threads (backend 'numpy' as configured)")]
    first_window = next(i for i, e in enumerate(events) if isinstance(e, WindowState))
    assert events.index(said[0]) < first_window
    assert report["provenance"]["backend_reason"] == "backend 'numpy' as configured"

    # auto without the server kinds' signs: the CPU kernel, and the words say why (no GPU on a CPU host)
    events.clear()
    auto = compare(suite.path, ref, cand, replace(opts, backend=BackendRequest("auto", server_signs=None)),
                   events.append).to_json()
    (chosen,) = [e for e in events if isinstance(e, BackendChosen)]
    assert chosen.reason in ("no GPU seen: the CPU kernel", NOT_TOLD)
    assert auto["provenance"]["backend_reason"] == chosen.reason

    made = BackendChoice(Backend.NUMPY, 2, None, "the candidate server is running on this host: the CPU "
                                                 "kernel with 2 of 4 threads so capture is not starved")
    events.clear()
    one = compare_window(suite, suite.window(0), ref, cand, replace(opts, backend=made), emit=events.append)
    assert not [e for e in events if isinstance(e, BackendChosen)]  # its caller said it
    assert one.backend_reason == made.reason and one.threads == 2
    other = compare_window(suite, suite.window(1), ref, cand, opts)
    both = build_report([one, other], suite=suite, options=opts).to_json()["provenance"]
    assert both["backend_reason"] == f"{made.reason}; then backend 'numpy' as configured"
    back = decode_result(json.loads(json.dumps(encode_result(one))))
    assert back.backend_reason == made.reason
    older = encode_result(other)
    del older["backend_reason"]  # written before windows kept why
    unknown = build_report([one, decode_result(older)], suite=suite, options=opts).to_json()["provenance"]
    assert "backend_reason" not in unknown
