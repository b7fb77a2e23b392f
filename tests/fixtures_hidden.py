"""Candidates of a hidden-state suite (:mod:`tests.fidelity_fixture`): logits folders whose head is the
reference's plus noise, written through kldtui's writers, for the tests that compare them against the
suite's hidden-state reference and read the reports (whose units are contexts)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.formats import fidelity as fid
from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
from kldtui.formats.report import write_report
from kldtui.formats.suite import load_suite
from kldtui.metrics.clusters import cluster_units
from kldtui.metrics.replay import bf16_to_f32, f32_to_bf16
from kldtui.stages.compare import BackendRequest, CompareOptions, compare
from tests import fidelity_fixture as fx

# the NumPy backend, asked for as such (no GPU is taken, so the servers' signs are not needed)
NUMPY = BackendRequest("numpy", server_signs=None)


def noisy_candidates(f: fx.Fixture, base: Path, scales: dict[str, float], seed: int = 11) -> dict[str, Path]:
    """One logits folder per name under ``base`` (``base / name``): the suite's contexts through the
    reference's head plus Gaussian noise of that scale (BF16-rounded logits), drawn in the order given."""
    suite = load_suite(f.root)
    rng = np.random.default_rng(seed)
    out: dict[str, Path] = {}
    for name, scale in scales.items():
        head = f.head + rng.standard_normal(f.head.shape).astype(np.float32) * scale
        folder = base / name
        written = [write_logits_array(folder, w, bf16_to_f32(f32_to_bf16(
            (f.hidden[w.index].astype(np.float64) @ head.astype(np.float64).T).astype(np.float32))),
            suite.context_length) for w in suite.windows]
        write_logits_manifest(folder, suite, written, kind=name)
        out[name] = folder
    return out


def with_context_kl(doc: dict[str, Any], kl: np.ndarray, name: str) -> dict[str, Any]:
    """``doc`` with each context's mean KL set to ``kl`` (context order), every KL figure of that context
    scaled alike, and the report-wide KL figures by the mean's ratio; its candidate named ``name``."""
    out = copy.deepcopy(doc)
    contexts = sorted(out["per_context"], key=lambda e: e["context_index"])
    scale = {e["context_index"]: kl[i] / e["kl_reference_to_candidate"]["mean"]
             for i, e in enumerate(contexts)}
    for e in contexts:
        e["kl_reference_to_candidate"] = {k: v * scale[e["context_index"]]
                                          for k, v in e["kl_reference_to_candidate"].items()}
    for w in out["per_window"]:
        f = scale[w["window_index"]]
        w["kl_reference_to_candidate"] = {k: v * f for k, v in w["kl_reference_to_candidate"].items()}
        for key in ("kl_mean", "kl_max", "kl_median", "kl_p99"):
            w[key] *= f
    arrays = out["per_window_arrays"]
    for key in ("kl_mean", "kl_max", "kl_median", "kl_p99"):
        arrays[key] = [v * scale[i] for v, i in zip(arrays[key], arrays["window_index"], strict=True)]
    ratio = float(np.mean(kl)) / doc["kl_reference_to_candidate"]["mean"]
    figures = ("estimate", "ci95_low", "ci95_high", "standard_error", "mean", "max", "median", "min")
    for key in ("kl_reference_to_candidate", "kl_window_cluster_bootstrap", "kl_mean_interval"):
        out[key] = {k: v * ratio if k in figures or k.startswith("p") else v for k, v in out[key].items()}
    out["candidate_dir"] = f"/candidates/{name}"
    out["candidate"] = {**out["candidate"], "label": name}
    return out


# each source cluster's B / A - 1 for the candidate a little worse than the best, in sorted key order
# (17 clusters: 16 hosts of two contexts, one split by its dataset): mostly worse, sometimes better
CLOSE = np.array([0.03, -0.02] * 6 + [0.03] * 4 + [-0.02])


def clustered_candidates(base: Path) -> dict[str, Path]:
    """Reports of three candidates under ``base`` over a 32-context suite in 17 source clusters, whose
    two contexts of each source are near duplicates (their KL within 0.1 % of each other): ``best``;
    ``close``, worse by 1 % on average, cluster by cluster as :data:`CLOSE` says; ``far``, half as far
    again; ``keys``: the measured report they are made from."""
    f = fx.build(base / "suite", contexts=32)
    (folder,) = noisy_candidates(f, base, {"best": 0.03}).values()
    report = compare(f.root, f.root / fid.HIDDEN_DIR, folder, CompareOptions(backend=NUMPY,
                                                                             bootstrap_samples=100))
    path = write_report(base / "measured.json", report)
    doc = json.loads(path.read_text())
    contexts = sorted(doc["per_context"], key=lambda e: e["context_index"])
    keys = [e["source_cluster"] for e in contexts]
    measured = np.array([e["kl_reference_to_candidate"]["mean"] for e in contexts])
    number = {k: n for n, k in enumerate(sorted(set(keys)))}
    of = np.array([number[k] for k in keys])
    assert len(number) == len(CLOSE) < len(keys)
    units, _ = cluster_units(measured, keys)
    best = units[of] * np.where(np.arange(len(keys)) % 2 == 0, 1.0005, 0.9995)  # near duplicates
    kl = {"best": best, "close": best * (1 + CLOSE[of]), "far": best * (1.5 + CLOSE[of])}
    out = {}
    for name, values in kl.items():
        out[name] = base / f"{name}.json"
        out[name].write_text(json.dumps(with_context_kl(doc, values, name)))
    out["keys"] = path  # the measured report, for the refusals
    return out


def hidden_state_bits(path: Path) -> np.ndarray:
    """The BF16 bits of a hidden-state chunk's rows, as saved."""
    from kldtui.formats.safetensors_io import RowReader

    with RowReader(path, "hidden_states", "BF16") as reader:
        return reader.read(0, reader.rows)
