"""The noise model: how far things move between two captures of one model, stored and loaded.

Two figures (docs/STATISTICS.md): the *repeat variation of the metric* (two captures of one
candidate, each compared with the reference: per-window difference of their mean KL; what verdicts
hold B - A against, ``repeat_variation_for``), and the *repeat KL* between two captures (the seed's
figure, ``threshold``; the published Kimi K3 suite's is 0.004, 0.0035 on window 0). With only a
repeat KL, a named difference smaller than it is marked provisional (kldtui.decide.verdict).
The class keeps its historical name ``NoiseFloor`` and file format for compatibility.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kldtui.decide.reports import ReportLike, window_values
from kldtui.decide.verdict import VerdictInterval, plain_number, verdict_interval
from kldtui.errors import BadInput
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.safe_io import read_text
from kldtui.formats.suite import logits_manifest_path

FLOOR_FORMAT = "kldtui-noise-floor-v1"
PUBLISHED_SUITE_HASH = "a6856e1d0504fd00d13c67a5515c081f349088664d7ea0894dc4d15db2c7d209"
PUBLISHED_REPEAT_KL = 0.0035014991  # KL(run1 || run2), window 0
PUBLISHED_REPEAT_KL_REVERSE = 0.0035850708  # KL(run2 || run1), window 0
PUBLISHED_THRESHOLD = 0.004  # "differences of about 0.004 or less are runtime noise"


@dataclass(frozen=True)
class NoiseFloor:
    """A noise floor. ``per_window`` maps window index to that window's repeat KL."""

    kind: Literal["measured", "published"]
    source: str
    kl_mean: float
    threshold: float
    kl_reverse_mean: float | None = None
    suite_token_hash_sha256: str | None = None
    per_window: dict[int, float] = field(default_factory=dict)
    per_window_reverse: dict[int, float] = field(default_factory=dict)
    run1: str | None = None
    run2: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Repeat variation of the metric: per window, (mean KL of capture 2 against the reference) minus
    # (the same for capture 1). Empty when only the repeat KL between captures is known.
    metric_per_window: dict[int, float] = field(default_factory=dict)
    metric_source: str | None = None

    @property
    def has_metric(self) -> bool:
        return len(self.metric_per_window) >= 2

    def metric_interval(self, window_indices: Iterable[int] | None = None) -> VerdictInterval | None:
        """The paired interval of the metric's repeat difference over the given windows (all when
        None, or when the model does not cover them all)."""
        if not self.has_metric:
            return None
        idx = [int(w) for w in window_indices] if window_indices is not None else []
        if len(idx) < 2 or not all(w in self.metric_per_window for w in idx):
            idx = sorted(self.metric_per_window)
        return verdict_interval([self.metric_per_window[w] for w in idx])

    def repeat_variation_for(self, window_indices: Iterable[int]) -> float | None:
        """How far this metric (a mean KL against the reference) can move between two captures of one
        model over these windows: the larger end, in size, of the 95 % interval of its repeat
        difference. None without a measured metric."""
        iv = self.metric_interval(window_indices)
        if iv is None or iv.ci95_low is None or iv.ci95_high is None:
            return None
        return max(abs(iv.ci95_low), abs(iv.ci95_high))

    def threshold_for(self, window_indices: Iterable[int]) -> float:
        """The threshold for a group of windows.

        A measured floor that covers every window of the group gives the larger of the group's
        mean forward and reverse repeat KL; otherwise the floor's overall ``threshold``.
        """
        idx = [int(w) for w in window_indices]
        if self.kind != "measured" or not idx or not all(w in self.per_window for w in idx):
            return self.threshold
        value = float(np.mean([self.per_window[w] for w in idx]))
        if self.per_window_reverse and all(w in self.per_window_reverse for w in idx):
            value = max(value, float(np.mean([self.per_window_reverse[w] for w in idx])))
        return value

    def describe(self) -> str:
        """One line: which noise model and where it came from, in a quantization engineer's words."""
        if self.has_metric:
            iv = self.metric_interval()
            assert iv is not None
            lo, hi = plain_number(iv.ci95_low or 0.0), plain_number(iv.ci95_high or 0.0)
            return (f"measured repeat variation {plain_number(self.repeat_variation_for([]) or 0.0)}: two "
                    "captures of one candidate moved its mean KL against the reference by "
                    f"{plain_number(iv.estimate)} (95 % interval {lo} to {hi}) over "
                    f"{iv.windows} windows ({self.metric_source or self.source}); repeat KL between the "
                    + (f"captures {self.kl_mean:.4g}" if self.kl_mean > 0 else "captures not measured"))
        if self.kind == "published":
            return (f"published repeat KL {self.threshold:g} for the Kimi K3 suite (two captures of one "
                    f"model differ by KL {self.kl_mean:.4f} on window 0); the repeat variation of the metric "
                    "itself is not measured")
        return (f"repeat KL {self.threshold:.4g} between two captures of one model (measured: "
                f"{self.source}); the repeat variation of the metric itself is not measured")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FLOOR_FORMAT,
            "kind": self.kind,
            "source": self.source,
            "kl_mean": self.kl_mean,
            "kl_reverse_mean": self.kl_reverse_mean,
            "threshold": self.threshold,
            "suite_token_hash_sha256": self.suite_token_hash_sha256,
            "run1": self.run1,
            "run2": self.run2,
            "per_window": [
                {"window_index": w, "kl_mean": v,
                 "kl_reverse_mean": self.per_window_reverse.get(w)}
                for w, v in sorted(self.per_window.items())
            ],
        }
        data.update(self.extra)
        if self.has_metric:
            iv = self.metric_interval()
            assert iv is not None
            data["metric_repeat"] = {
                "definition": "per window: mean KL(reference || capture 2) - mean KL(reference || capture 1)",
                "source": self.metric_source, "interval": iv.to_dict(),
                "repeat_variation": self.repeat_variation_for([]),
                "per_window": [{"window_index": w, "difference": v}
                               for w, v in sorted(self.metric_per_window.items())]}
        return data

    def summary(self) -> dict[str, Any]:
        """What a report records under ``noise_floor`` (REPORT.md): source, kl_mean, threshold."""
        out = {"source": self.describe(), "kind": self.kind, "kl_mean": self.kl_mean,
               "threshold": self.threshold,
               "model": "repeat_variation" if self.has_metric else "repeat_kl"}
        if self.has_metric:
            out["repeat_variation"] = self.repeat_variation_for([])
        return out


def published_floor() -> NoiseFloor:
    """The published default for the Kimi K3 suite (docs/FORMATS.md, published reference figures)."""
    return NoiseFloor(
        kind="published",
        source="docs/FORMATS.md published reference figures (two captures of one model, window 0)",
        kl_mean=PUBLISHED_REPEAT_KL,
        kl_reverse_mean=PUBLISHED_REPEAT_KL_REVERSE,
        threshold=PUBLISHED_THRESHOLD,
        suite_token_hash_sha256=PUBLISHED_SUITE_HASH,
        per_window={0: PUBLISHED_REPEAT_KL},
        per_window_reverse={0: PUBLISHED_REPEAT_KL_REVERSE},
    )


def floor_from_reports(forward_doc: ReportLike, reverse_doc: ReportLike | None = None, *,
                       source: str, where: str = "report", where_reverse: str = "reverse report",
                       ) -> NoiseFloor:
    """A measured floor from the comparison of two captures of one model.

    ``forward`` compares RUN1 (as reference) with RUN2; its reverse KL (``--reverse``) is used
    when present. ``reverse`` optionally compares RUN2 with RUN1 and must cover the same windows.
    """
    forward = as_report(forward_doc, where)
    reverse = as_report(reverse_doc, where_reverse) if reverse_doc is not None else None
    fwd = window_values(forward, where)
    per_window = {int(w): float(v) for w, v in zip(fwd.window_index, fwd.kl_mean, strict=True)}
    per_rev: dict[int, float] = {}
    if fwd.kl_reverse_mean is not None:
        per_rev = {int(w): float(v) for w, v in zip(fwd.window_index, fwd.kl_reverse_mean, strict=True)}
    if reverse is not None:
        rev = window_values(reverse, where_reverse)
        if not np.array_equal(rev.window_index, fwd.window_index):
            raise BadInput(f"{where} and {where_reverse} cover different windows; give two comparisons of "
                           "the same two runs over the same windows")
        rf, rr = forward.reference_dir, reverse.candidate_dir
        cf, cr = forward.candidate_dir, reverse.reference_dir
        if rf and rr and cf and cr and (os.path.normpath(rf), os.path.normpath(cf)) != (
                os.path.normpath(rr), os.path.normpath(cr)):
            raise BadInput(f"{where_reverse} is not the reverse of {where} (its reference/candidate are "
                           f"{cr}/{rr}, expected {cf}/{rf}); give RUN2-vs-RUN1 as the second report")
        per_rev = {int(w): float(v) for w, v in zip(rev.window_index, rev.kl_mean, strict=True)}
    kl_mean = float(np.mean(fwd.kl_mean))
    kl_rev = float(np.mean(list(per_rev.values()))) if per_rev else None
    threshold = max(kl_mean, kl_rev) if kl_rev is not None else kl_mean
    extra: dict[str, Any] = {"created_utc": datetime.datetime.now(datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "windows": fwd.n}
    if forward.js is not None:
        extra["js"] = forward.js.to_json()
    if forward.top1_agreement is not None:
        extra["top1_agreement"] = forward.top1_agreement
    return NoiseFloor(
        kind="measured", source=source, kl_mean=kl_mean, kl_reverse_mean=kl_rev, threshold=threshold,
        suite_token_hash_sha256=forward.suite_token_hash_sha256,
        per_window=per_window, per_window_reverse=per_rev,
        run1=forward.reference_dir, run2=forward.candidate_dir, extra=extra,
    )


def save_floor(path: str | os.PathLike[str], floor: NoiseFloor) -> None:
    """Write the floor as JSON, atomically."""
    write_json_atomic(path, floor.to_dict())


def _num(doc: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
        raise BadInput(f"{where}: field {key!r} must be a non-negative number (got {value!r}); "
                       "write the floor again with kldtui noise")
    return float(value)


def load_floor(path: str | os.PathLike[str]) -> NoiseFloor:
    """Read a floor written by :func:`save_floor`; BadInput (one line) when it is not one."""
    p = Path(path)
    try:
        doc = json.loads(read_text(p))
    except FileNotFoundError:
        raise BadInput(f"{p}: noise floor file not found; create it with kldtui noise") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a folder, expected a noise floor file from kldtui noise") from None
    except OSError as exc:  # a FIFO, a device, no permission
        raise BadInput(f"{p}: the noise floor file cannot be read ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{p}: not a JSON noise floor file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FLOOR_FORMAT:
        raise BadInput(f"{p}: not a kldtui noise floor (format is not {FLOOR_FORMAT!r}); "
                       "create it with kldtui noise")
    kind = doc.get("kind", "measured")
    if kind not in ("measured", "published"):
        raise BadInput(f"{p}: unknown noise floor kind {kind!r}")
    per_window: dict[int, float] = {}
    per_rev: dict[int, float] = {}
    entries = doc.get("per_window") or []
    if not isinstance(entries, list):
        raise BadInput(f"{p}: per_window must be a list; write the floor again with kldtui noise")
    for entry in entries:
        if not isinstance(entry, dict) or isinstance(entry.get("window_index"), bool) or not isinstance(
                entry.get("window_index"), int):
            raise BadInput(f"{p}: per_window entry {entry!r} has no integer window_index")
        w = entry["window_index"]
        per_window[w] = _num(entry, "kl_mean", f"{p}: window {w}")  # type: ignore[assignment]
        rev = _num(entry, "kl_reverse_mean", f"{p}: window {w}", optional=True)
        if rev is not None:
            per_rev[w] = rev
    known = {"format", "kind", "source", "kl_mean", "kl_reverse_mean", "threshold",
             "suite_token_hash_sha256", "run1", "run2", "per_window", "metric_repeat"}
    metric: dict[int, float] = {}
    metric_doc = doc.get("metric_repeat")
    if metric_doc is not None:
        rows = metric_doc.get("per_window") if isinstance(metric_doc, dict) else None
        if not isinstance(rows, list):
            raise BadInput(f"{p}: metric_repeat has no per_window list; write the file again with "
                           "kldtui noise")
        for entry in rows:
            w = entry.get("window_index") if isinstance(entry, dict) else None
            v = entry.get("difference") if isinstance(entry, dict) else None
            if isinstance(w, bool) or not isinstance(w, int) or isinstance(v, bool) or not isinstance(
                    v, int | float) or not np.isfinite(v):
                raise BadInput(f"{p}: metric_repeat entry {entry!r} needs an integer window_index and a "
                               "finite difference; write the file again with kldtui noise")
            metric[w] = float(v)
    return NoiseFloor(
        kind=kind,
        source=str(doc.get("source") or p),
        kl_mean=_num(doc, "kl_mean", str(p)),  # type: ignore[arg-type]
        kl_reverse_mean=_num(doc, "kl_reverse_mean", str(p), optional=True),
        threshold=_num(doc, "threshold", str(p)),  # type: ignore[arg-type]
        suite_token_hash_sha256=doc.get("suite_token_hash_sha256"),
        per_window=per_window,
        per_window_reverse=per_rev,
        run1=doc.get("run1"),
        run2=doc.get("run2"),
        extra={k: v for k, v in doc.items() if k not in known},
        metric_per_window=metric,
        metric_source=metric_doc.get("source") if isinstance(metric_doc, dict) else None,
    )


# Default of a ``noise`` argument: the floor resolve_floor gives for the reports' suite (None is "no
# floor"); a sentinel typed Any so it fits ``NoiseFloor | None``.
AUTO_FLOOR: Any = object()


def resolve_floor(noise_path: str | os.PathLike[str] | None, suite_hash: str | None) -> NoiseFloor | None:
    """The floor to use: the stored one (``--noise``), else the published default when the reports
    come from the published suite, else None. A stored floor from another suite is refused."""
    if noise_path is not None:
        floor = load_floor(noise_path)
        fh = floor.suite_token_hash_sha256
        if fh and suite_hash and fh != suite_hash:
            raise BadInput(f"{noise_path}: the noise floor was measured on suite {fh[:12]}..., the reports "
                           f"come from suite {suite_hash[:12]}...; measure the floor on this suite")
        return floor
    if suite_hash == PUBLISHED_SUITE_HASH:
        return published_floor()
    return None



def measure_floor(suite_manifest: str | os.PathLike[str], run1: str | os.PathLike[str],
                  run2: str | os.PathLike[str], *, start_window: int = 0, stop_window: int | None = None,
                  reverse: bool = True, report_path: str | os.PathLike[str] | None = None,
                  emit: Any = None, cancel: Any = None) -> tuple[NoiseFloor, ComparisonReport]:
    """Run the compare stage on two captures of one model (RUN1 as the reference) and return the
    floor and the comparison report (also written to ``report_path`` when given)."""
    from kldtui.events import null_sink
    from kldtui.stages.compare import CompareOptions, compare

    options = CompareOptions(start_window=start_window, stop_window=stop_window, reverse=reverse)
    report = compare(suite_manifest, run1, run2, options, emit or null_sink, cancel)
    if report_path is not None:
        write_json_atomic(report_path, report.to_json())
    source = f"two captures {run1} and {run2}"
    return floor_from_reports(report, None, source=source, where=f"comparison of {run1} and {run2}"), report


# ---------------------------------------------------------------------------- same-model checks
def _manifest(folder: Any) -> dict[str, Any] | None:
    """A capture folder's manifest.json, or None when the folder is gone or has none."""
    if not isinstance(folder, str) or not folder:
        return None
    try:
        doc = json.loads(read_text(logits_manifest_path(folder)))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _model_of(manifest: dict[str, Any]) -> tuple[str, str] | None:
    """What model a capture served (``runtime.model`` or ``runtime.served_model_name``), when recorded."""
    rt = manifest.get("runtime")
    if not isinstance(rt, dict):
        return None
    model, served = rt.get("model"), rt.get("served_model_name")
    if not model and not served:
        return None
    return str(model or ""), str(served or "")


def different_models(dir1: Any, dir2: Any) -> str | None:
    """Why two capture folders are not two captures of one model, or None when they may be (also when
    their manifests cannot be read: the check needs them)."""
    m1, m2 = _manifest(dir1), _manifest(dir2)
    if m1 is None or m2 is None:
        return None
    kinds = {m1.get("kind"), m2.get("kind")}
    if "reference" in kinds and kinds != {"reference"}:
        ref = dir1 if m1.get("kind") == "reference" else dir2
        return f"{ref} is a reference capture and the other a candidate"
    id1, id2 = _model_of(m1), _model_of(m2)
    if id1 and id2 and id1 != id2:
        return f"{dir1} served {id1[0] or id1[1]!r} and {dir2} served {id2[0] or id2[1]!r}"
    return None


def check_repeat_capture(document: ReportLike, where: str, allow_different_models: bool) -> None:
    """Refuse a comparison report as 'two captures of one model' when its two sides are different
    models (e.g. the reference against a quantized candidate), unless told otherwise."""
    if allow_different_models:
        return
    report = as_report(document, where)
    why = different_models(report.reference_dir, report.candidate_dir)
    if why:
        raise BadInput(f"{where}: not two captures of one model ({why}); give a report of two captures of "
                       "the same model, or add --allow-different-models if that is really meant")


def noise_from_capture_reports(first_doc: ReportLike, second_doc: ReportLike, *, where1: str, where2: str,
                               repeat: ReportLike | None = None, where_repeat: str = "repeat report",
                               allow_different_models: bool = False) -> NoiseFloor:
    """The measured noise model from two captures of one candidate, each compared with the reference:
    the repeat variation of the metric (per-window difference of their mean KL against the reference),
    and, when ``repeat`` (capture 2 compared with capture 1) is given, the repeat KL between them."""
    from kldtui.decide.reports import check_same_suite

    first, second = as_report(first_doc, where1), as_report(second_doc, where2)
    checked = check_same_suite(first, second, where1, where2)
    c1, c2 = first.candidate_dir, second.candidate_dir
    if c1 and c2 and os.path.normpath(str(c1)) == os.path.normpath(str(c2)):
        raise BadInput(f"{where1} and {where2} compare the same capture ({c1}); capture the candidate a "
                       "second time, compare it, and give both reports")
    v1, v2 = window_values(first, where1), window_values(second, where2)
    if np.array_equal(v1.kl_mean, v2.kl_mean):
        raise BadInput(f"{where1} and {where2} have identical per-window KL: they are one capture twice; "
                       "capture the candidate a second time")
    if not allow_different_models:
        why = different_models(c1, c2)
        if why:
            raise BadInput(f"{where1} and {where2} are not two captures of one model ({why}); add "
                           "--allow-different-models if that is really meant")
    metric = {int(w): float(b - a) for w, a, b in zip(v1.window_index, v1.kl_mean, v2.kl_mean, strict=True)}
    base: NoiseFloor | None = None
    if repeat is not None:
        check_repeat_capture(repeat, where_repeat, allow_different_models)
        base = floor_from_reports(repeat, None, source=f"report {where_repeat}", where=where_repeat)
    source = f"{where1} and {where2}"
    del checked  # pairing is checked above; the source stays short
    return NoiseFloor(
        kind="measured", source=source, kl_mean=base.kl_mean if base else 0.0,
        threshold=base.threshold if base else 0.0,
        kl_reverse_mean=base.kl_reverse_mean if base else None,
        suite_token_hash_sha256=first.suite_token_hash_sha256,
        per_window=base.per_window if base else {},
        per_window_reverse=base.per_window_reverse if base else {},
        run1=str(c1) if c1 else None, run2=str(c2) if c2 else None,
        extra={"created_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "windows": v1.n, "reference_dir": first.reference_dir},
        metric_per_window=metric, metric_source=source)
