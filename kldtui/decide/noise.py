"""The noise model: how far things move between two captures of one model, stored and loaded.

Two figures (docs/STATISTICS.md): the *repeat variation of the metric* (two captures of one
candidate, each compared with the reference: per-window difference of their mean KL; what verdicts
hold B - A against, ``repeat_variation_for``), and the *repeat KL* between two captures (the seed's
figure, ``threshold``; the published Kimi K3 suite's is 0.004, 0.0035 on window 0). With only a
repeat KL, a named difference smaller than it is marked provisional (kldtui.decide.verdict).
The class keeps its historical name ``NoiseFloor`` and file format for compatibility.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np

from kldtui.decide.reports import ReportLike, window_values
from kldtui.errors import BadInput
from kldtui.folder_lock import check_output_file
from kldtui.formats import untrusted_json
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.report import write_report
from kldtui.formats.report_model import ComparisonReport, as_report
from kldtui.formats.report_names import NOISE_MODEL_LIMIT, other_suite
from kldtui.formats.suite import WINDOW_UNIT, logits_manifest_path, manifest_object, server_start_of
from kldtui.metrics.limits import KL_ROW_MAX
from kldtui.metrics.stats import student_t_interval, t_quantile
from kldtui.text import kldtui_command, plain_number, plural
from kldtui.this_host import ServerSign

FLOOR_FORMAT = "kldtui-noise-floor-v1"
# what to do about a noise model that cannot be read (load_floor): a file that is none at all, and one
# that is damaged
NOISE_REMEDY = "give a noise model that kldtui noise wrote"
REWRITE_NOISE = "write the file again with kldtui noise"
# what a repeat KL the file holds can be: a mean over rows of float32 logits (a masked token's +inf is
# not one a repeat can measure), so finite and no larger than a row's KL can be
REPEAT_KL_RULE = f"a repeat KL is a finite number from 0 to {KL_ROW_MAX:g}, the largest float32 logits give"


def _repeat_kl(value: Any) -> TypeGuard[int | float]:
    """Whether ``value`` is a repeat KL :data:`REPEAT_KL_RULE` allows."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= KL_ROW_MAX)
PUBLISHED_SUITE_HASH = "a6856e1d0504fd00d13c67a5515c081f349088664d7ea0894dc4d15db2c7d209"
PUBLISHED_REPEAT_KL = 0.0035014991  # KL(run1 || run2), window 0
PUBLISHED_REPEAT_KL_REVERSE = 0.0035850708  # KL(run2 || run1), window 0
PUBLISHED_THRESHOLD = 0.004  # "differences of about 0.004 or less are runtime noise"


def identical_captures(kl: np.ndarray) -> tuple[int, int] | None:
    """The first two rows of ``kl`` (captures x windows) with the same mean KL in every window, or None:
    ``kldtui noise`` refuses two such reports as one capture given twice, so a stored model holding such
    rows was not written by it (one added by hand would count as a measured repeat)."""
    for i in range(len(kl)):
        for j in range(i + 1, len(kl)):
            if np.array_equal(kl[i], kl[j]):
                return i, j
    return None


@dataclass(frozen=True)
class RepeatModel:
    """How far one capture's window means (mean KL against the reference) move between captures of
    one model, from ``captures`` >= 2 captures of it over the same windows.

    Window mean of capture c at window i: ``mu_i + o_c + e_ci``: ``o_c`` shifts every window of a
    capture together (*capture-wide* variation, a kernel or batching choice of that run), ``e_ci``
    is each window's own (*per-window* variation). The per-window variance comes from the residuals
    of that additive fit ((n - 1)(C - 1) degrees of freedom); the variance of the captures' mean KL
    from the spread of their means (C - 1 degrees of freedom), so the capture-wide part needs at
    least three captures (two repeats): with one repeat the single offset seen cannot be told from
    a real difference, and the model says so (:meth:`provisional_reason`).
    """

    window_index: tuple[int, ...]
    captures: int
    per_window_var: float  # sigma_e^2
    capture_means_var: float  # variance of one capture's mean KL over all windows (C - 1 df)
    # per capture, the window means (C x n), when the captures were given; None for a model kept as
    # the per-window differences of two captures (older files)
    kl: tuple[tuple[float, ...], ...] | None = None
    sources: tuple[str, ...] = ()
    differences: tuple[float, ...] | None = None  # capture 2 - capture 1 per window (two captures)

    @classmethod
    def from_captures(cls, kl: np.ndarray, window_index: Sequence[int],
                      sources: Sequence[str]) -> RepeatModel:
        """From window means ``kl`` (captures x windows) of captures of one model."""
        k = np.asarray(kl, dtype=np.float64)
        c, n = k.shape
        if c < 2 or n < 2:
            raise ValueError("a repeat model needs at least 2 captures of at least 2 windows")
        means = k.mean(axis=1)
        resid = k - means[:, None] - k.mean(axis=0)[None, :] + k.mean()
        return cls(tuple(int(w) for w in window_index), c,
                   float((resid ** 2).sum() / ((c - 1) * (n - 1))), float(means.var(ddof=1)),
                   tuple(tuple(float(v) for v in row) for row in k), tuple(sources),
                   tuple(float(v) for v in k[1] - k[0]) if c == 2 else None)

    @classmethod
    def from_differences(cls, differences: dict[int, float], source: str | None) -> RepeatModel:
        """The model of two captures kept as their per-window differences (files before repeat models)."""
        idx = sorted(differences)
        r = np.array([differences[w] for w in idx], dtype=np.float64)
        return cls(tuple(idx), 2, float(r.var(ddof=1) / 2.0), float(r.mean() ** 2 / 2.0), None,
                   (source,) if source else (), tuple(float(v) for v in r))

    @property
    def windows(self) -> int:
        return len(self.window_index)

    @property
    def capture_wide_measured(self) -> bool:
        return self.captures >= 3

    @property
    def per_window_sd(self) -> float:
        return math.sqrt(max(self.per_window_var, 0.0))

    @property
    def capture_wide_sd(self) -> float | None:
        """The capture-wide offset's standard deviation (None with one repeat: not measurable)."""
        if not self.capture_wide_measured:
            return None
        return math.sqrt(max(self.capture_means_var - self.per_window_var / self.windows, 0.0))

    def _group(self, window_indices: Iterable[int]) -> list[int]:
        idx = [int(w) for w in window_indices]
        have = set(self.window_index)
        return idx if len(idx) >= 2 and all(w in have for w in idx) else list(self.window_index)

    def variation_for(self, window_indices: Iterable[int]) -> float:
        """What verdicts hold B - A (two single captures) against over these windows.

        Two repeats or more: the 95 % prediction bound of the difference between two new captures'
        mean KL over the group, ``t(C - 1) sqrt(2) tau``, with ``tau^2`` the variance of the captures'
        means over the group's own windows (capture-wide plus per-window / group size, whatever the
        windows' own noise; C - 1 degrees of freedom). One repeat: the larger end, in
        size, of the 95 % interval of the one observed repeat difference over the group (what earlier
        versions used; it cannot see capture-wide offsets, see :meth:`provisional_reason`)."""
        group = self._group(window_indices)
        if self.capture_wide_measured and self.kl is not None:
            pos = {w: i for i, w in enumerate(self.window_index)}
            cols = [pos[w] for w in group]
            means = np.asarray(self.kl, dtype=np.float64)[:, cols].mean(axis=1)  # each capture's group mean
            return t_quantile(0.975, self.captures - 1) * math.sqrt(2.0 * float(means.var(ddof=1)))
        r = self.repeat_differences(group)
        _, _, lo, hi, _ = student_t_interval(r, 0.95)
        return max(abs(lo), abs(hi))

    def repeat_differences(self, group: Sequence[int]) -> np.ndarray:
        """Capture 2 - capture 1 per window of ``group`` (two-capture models)."""
        pos = {w: i for i, w in enumerate(self.window_index)}
        if self.differences is not None:
            return np.array([self.differences[pos[w]] for w in group], dtype=np.float64)
        assert self.kl is not None
        return np.array([self.kl[1][pos[w]] - self.kl[0][pos[w]] for w in group], dtype=np.float64)

    def provisional_reason(self, unit: str = WINDOW_UNIT) -> str | None:
        """Why a named difference stays provisional with this model (None: it does not), its windows
        called ``unit`` (:meth:`describe`)."""
        if self.capture_wide_measured:
            return None
        return (f"the noise model has one repeat capture, which cannot tell an offset shared by every {unit} "
                "of a capture from a real difference (capture once more and give all captures to "
                "kldtui noise)")

    def brief(self) -> str:
        """:meth:`describe` in one short line."""
        clear = f"B - A must clear {plain_number(self.variation_for([]))}"
        if self.capture_wide_measured:
            return f"{self.captures} captures of one candidate; {clear}"
        return f"2 captures (one repeat); {clear}"  # the rows say "provisional"

    def describe(self, unit: str = WINDOW_UNIT) -> str:
        """The model in a quantization engineer's words, its windows called ``unit`` (the stored model
        does not record it: the reports it is shown with, or read from, do; a hidden-state suite's
        are contexts)."""
        overall = self.variation_for([])
        if self.capture_wide_measured:
            return (f"measured repeat variation {plain_number(overall)} from {self.captures} captures of one "
                    f"candidate over {plural(self.windows, unit)}: a capture's mean KL moves by sd "
                    f"{plain_number(math.sqrt(max(self.capture_means_var, 0.0)))} between captures "
                    f"(capture-wide sd {plain_number(self.capture_wide_sd or 0.0)}, per-{unit} sd "
                    f"{plain_number(self.per_window_sd)}); B - A must clear {plain_number(overall)}")
        r = self.repeat_differences(list(self.window_index))
        return (f"measured repeat variation {plain_number(overall)} from 2 captures of one candidate over "
                f"{plural(self.windows, unit)} (per-{unit} sd {plain_number(self.per_window_sd)}; the repeat "
                f"moved the mean KL by {plain_number(float(r.mean()))}); an offset shared by every {unit} of "
                "a capture is not measured with one repeat, so named differences stay provisional")

    def to_dict(self) -> dict[str, Any]:
        return {"definition": ("window mean of capture c at window i = mu_i + o_c + e_ci: o_c capture-wide, "
                               "e_ci per-window; each capture compared with the same reference"),
                "captures": self.captures, "windows": self.windows, "window_index": list(self.window_index),
                "per_window_sd": self.per_window_sd,
                "per_window_df": (self.captures - 1) * (self.windows - 1),
                "capture_means_sd": math.sqrt(max(self.capture_means_var, 0.0)),
                "capture_wide_sd": self.capture_wide_sd, "capture_wide_df": self.captures - 1,
                "capture_wide_measured": self.capture_wide_measured,
                "repeat_variation": self.variation_for([]),
                "sources": list(self.sources),
                "kl_mean": [list(row) for row in self.kl] if self.kl is not None else None}

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> RepeatModel:
        """Read :meth:`to_dict`'s output back, checking every value (one line on a problem)."""
        def bad(what: str) -> BadInput:
            return BadInput(f"{where}: repeat_model {what}; {REWRITE_NOISE}")

        if not isinstance(doc, dict):
            raise bad("is not an object")
        idx, kl = doc.get("window_index"), doc.get("kl_mean")
        if not isinstance(idx, list) or len(idx) < 2 or not all(isinstance(w, int) and not isinstance(w, bool)
                                                                for w in idx) or len(set(idx)) != len(idx):
            raise bad("has no list of at least 2 distinct window indices")
        if not isinstance(kl, list) or len(kl) < 2 or not all(isinstance(row, list) and len(row) == len(idx)
                                                              for row in kl):
            raise bad("needs kl_mean: one list per capture (at least 2), one value per window")
        for row, values in enumerate(kl):
            for window, value in zip(idx, values, strict=True):
                if not _repeat_kl(value):
                    raise bad(f"kl_mean[{row}] (capture {row + 1}) holds {value!r} for window {window}; "
                              f"{REPEAT_KL_RULE}")
        # what a reader sees beside the rows must be what the rows give (kldtui noise writes both)
        for key, want in (("captures", len(kl)), ("windows", len(idx))):
            if key in doc and (isinstance(doc[key], bool) or doc[key] != want):
                raise bad(f"says {key} {doc[key]!r} but kl_mean holds {want}")
        sources = doc.get("sources") or []
        if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
            raise bad("sources is not a list of report names")
        if sources and len(sources) != len(kl):
            raise bad(f"names {len(sources)} capture reports for {len(kl)} rows of kl_mean")
        if len(set(sources)) != len(sources):
            raise bad("names one capture report twice")
        grid = np.array(kl, dtype=np.float64)
        same = identical_captures(grid)
        if same is not None:
            raise bad(f"rows {same[0] + 1} and {same[1] + 1} of kl_mean are identical: one capture counted "
                      "twice")
        return cls.from_captures(grid, idx, sources)


@dataclass(frozen=True)
class NoiseFloor:
    """A noise model. ``per_window`` maps window index to that window's repeat KL (between captures);
    ``repeat`` is the repeat variation of the metric (captures each compared with the reference)."""

    # "deterministic": captures of one model, each from a server start of its own, were identical
    # (deterministic_floor): nothing moves between captures, so nothing to measure (no threshold, no
    # repeat model)
    kind: Literal["measured", "published", "deterministic"]
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
    repeat: RepeatModel | None = None

    def __post_init__(self) -> None:
        if self.repeat is None and len(self.metric_per_window) >= 2:
            object.__setattr__(self, "repeat", RepeatModel.from_differences(self.metric_per_window,
                                                                            self.metric_source))

    @property
    def has_metric(self) -> bool:
        return self.repeat is not None

    def metric_interval(self, window_indices: Iterable[int] | None = None,
                        ) -> tuple[float, float, float, int] | None:
        """Two-capture models: the 95 % t interval of the repeat difference over the given windows (all
        when None, or when the model does not cover them all): ``(estimate, low, high, windows)``."""
        if self.repeat is None or self.repeat.capture_wide_measured:
            return None
        group = self.repeat._group(window_indices or [])
        r = self.repeat.repeat_differences(group)
        est, _, lo, hi, _ = student_t_interval(r, 0.95)
        return est, lo, hi, len(group)

    def repeat_variation_for(self, window_indices: Iterable[int]) -> float | None:
        """How far this metric (a mean KL against the reference) can move between captures of one model
        over these windows (:meth:`RepeatModel.variation_for`). None without a measured metric."""
        return self.repeat.variation_for(window_indices) if self.repeat is not None else None

    def provisional_reason(self, unit: str = WINDOW_UNIT) -> str | None:
        """Why a difference that clears this model's repeat variation is still provisional (None: it is
        not); a deterministic server's: why no capture can settle it. The windows called ``unit``."""
        if self.kind == "deterministic":
            return DETERMINISTIC_REASON
        return self.repeat.provisional_reason(unit) if self.repeat is not None else None

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

    def brief(self) -> str:
        """:meth:`describe` in one short line: what a difference must clear (the views above a ranking;
        the full line is in their help)."""
        if self.repeat is not None:
            return self.repeat.brief()
        if self.kind == "deterministic":
            return "none: a deterministic server (two captures alike)"
        if self.kind == "published":
            return f"the published repeat KL {self.threshold:g} of the Kimi K3 suite"
        return f"repeat KL {plain_number(self.threshold)} between two captures of one model"

    def describe(self, unit: str = WINDOW_UNIT) -> str:
        """One line: which noise model and where it came from, in a quantization engineer's words; the
        windows called ``unit`` (:meth:`RepeatModel.describe`). The published figures are the Kimi K3
        suite's, whose units are windows whatever ``unit``."""
        if self.repeat is not None:
            between = (f"; repeat KL between captures {plain_number(self.kl_mean)}" if self.threshold > 0
                       else "")
            return f"{self.repeat.describe(unit)} ({self.metric_source or self.source}){between}"
        if self.kind == "deterministic":
            return (f"none: the server is deterministic (captures of one model, each from a server start of "
                    f"its own, came out identical: {self.source}), so nothing moves between captures to "
                    f"measure; differences rest on the {unit}s alone")
        if self.kind == "published":
            return (f"published repeat KL {self.threshold:g} for the Kimi K3 suite (two captures of one "
                    f"model differ by KL {plain_number(self.kl_mean)} on window 0); the repeat variation of "
                    "the metric itself is not measured")
        return (f"repeat KL {plain_number(self.threshold)} between two captures of one model (measured: "
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
        rep = self.repeat
        if rep is not None:
            data["repeat_model"] = rep.to_dict()
            if rep.captures == 2:  # the two-capture form earlier versions read
                interval = self.metric_interval()
                assert interval is not None
                est, lo, hi, windows = interval
                data["metric_repeat"] = {
                    "definition": ("per window: mean KL(reference || capture 2) - mean KL(reference || "
                                   "capture 1)"),
                    "source": self.metric_source,
                    "interval": {"method": "paired Student-t over windows", "level": 0.95, "estimate": est,
                                 "ci95_low": lo, "ci95_high": hi, "windows": windows},
                    "repeat_variation": self.repeat_variation_for([]),
                    "per_window": [{"window_index": w, "difference": float(v)} for w, v in
                                   zip(rep.window_index, rep.repeat_differences(list(rep.window_index)),
                                       strict=True)]}
        return data

    def summary(self, unit: str = WINDOW_UNIT) -> dict[str, Any]:
        """What ``diff`` and ``leaderboard`` record under ``noise_floor``: source (:meth:`describe`, the
        reports' units called ``unit``), kl_mean, threshold, and the repeat model's figures when
        measured."""
        out: dict[str, Any] = {"source": self.describe(unit), "kind": self.kind, "kl_mean": self.kl_mean,
                               "threshold": self.threshold,
                               "model": "repeat_variation" if self.has_metric else "repeat_kl"}
        if self.repeat is not None:
            out["repeat_variation"] = self.repeat_variation_for([])
            out["captures"] = self.repeat.captures
            out["per_window_sd"] = self.repeat.per_window_sd
            out["capture_wide_sd"] = self.repeat.capture_wide_sd
            out["capture_wide_measured"] = self.repeat.capture_wide_measured
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
            unit = forward.unit  # a hidden-state suite's: context
            raise BadInput(f"{where} and {where_reverse} cover different {unit}s; give two comparisons of "
                           f"the same two runs over the same {unit}s")
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


def save_floor(path: str | os.PathLike[str], floor: NoiseFloor) -> Path:
    """Write the floor as JSON, atomically, where the output-file rule allows
    (:func:`kldtui.folder_lock.check_output_file`, in the words of a name that can no longer change: its
    callers checked it before their work, in theirs, so this check speaks only when a folder took the
    name since, or its folder went). A link or FIFO at the name is replaced, never written through or
    opened. Returns the path written."""
    target = check_output_file(path, what="noise model", fixed_name=True)
    write_json_atomic(target, floor.to_dict())
    return target


def _num(doc: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if not _repeat_kl(value):
        raise BadInput(f"{where}: field {key!r} is {value!r}; {REPEAT_KL_RULE}; {REWRITE_NOISE}")
    return float(value)


def load_floor(path: str | os.PathLike[str]) -> NoiseFloor:
    """Read a floor written by :func:`save_floor`; BadInput (one line) when it is not one."""
    p = Path(path)
    doc = untrusted_json.read_json(p, what="noise model", remedy=NOISE_REMEDY, limit=NOISE_MODEL_LIMIT)
    if not isinstance(doc, dict) or doc.get("format") != FLOOR_FORMAT:
        raise BadInput(f"{p}: not a kldtui noise floor (format is not {FLOOR_FORMAT!r}); {NOISE_REMEDY}")
    kind = doc.get("kind", "measured")
    if kind not in ("measured", "published", "deterministic"):
        raise BadInput(f"{p}: unknown noise floor kind {kind!r}; {REWRITE_NOISE}")
    per_window: dict[int, float] = {}
    per_rev: dict[int, float] = {}
    entries = doc.get("per_window") or []
    if not isinstance(entries, list):
        raise BadInput(f"{p}: per_window must be a list; {REWRITE_NOISE}")
    for entry in entries:
        if not isinstance(entry, dict) or isinstance(entry.get("window_index"), bool) or not isinstance(
                entry.get("window_index"), int):
            raise BadInput(f"{p}: per_window entry {entry!r} has no integer window_index; {REWRITE_NOISE}")
        w = entry["window_index"]
        per_window[w] = _num(entry, "kl_mean", f"{p}: window {w}")  # type: ignore[assignment]
        rev = _num(entry, "kl_reverse_mean", f"{p}: window {w}", optional=True)
        if rev is not None:
            per_rev[w] = rev
    known = {"format", "kind", "source", "kl_mean", "kl_reverse_mean", "threshold",
             "suite_token_hash_sha256", "run1", "run2", "per_window", "metric_repeat", "repeat_model"}
    repeat = (RepeatModel.from_dict(doc["repeat_model"], str(p)) if doc.get("repeat_model") is not None
              else None)
    metric: dict[int, float] = {}
    metric_doc = doc.get("metric_repeat")
    if metric_doc is not None:
        rows = metric_doc.get("per_window") if isinstance(metric_doc, dict) else None
        if not isinstance(rows, list):
            raise BadInput(f"{p}: metric_repeat has no per_window list; {REWRITE_NOISE}")
        for entry in rows:
            w = entry.get("window_index") if isinstance(entry, dict) else None
            v = entry.get("difference") if isinstance(entry, dict) else None
            if isinstance(w, bool) or not isinstance(w, int) or isinstance(v, bool) or not isinstance(
                    v, int | float) or not np.isfinite(v) or abs(v) > KL_ROW_MAX:
                raise BadInput(f"{p}: metric_repeat entry {entry!r} needs an integer window_index and a "
                               f"difference of two mean KL from -{KL_ROW_MAX:g} to {KL_ROW_MAX:g}; "
                               f"{REWRITE_NOISE}")
            metric[w] = float(v)
    floor = NoiseFloor(
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
        repeat=repeat,
    )
    if floor.kind == "deterministic" and (floor.threshold > 0 or floor.has_metric or floor.per_window):
        # a deterministic server's model measures nothing (deterministic_floor); one holding figures would
        # make verdicts final on its word that nothing moves
        raise BadInput(f"{p}: a noise model of kind 'deterministic' holds measured figures (a threshold "
                       "above 0, repeat rows or per-window repeat KL), which that kind never has; "
                       f"{REWRITE_NOISE}")
    if not floor.has_metric and floor.threshold <= 0 and floor.kind != "deterministic":
        raise BadInput(f"{p}: the noise model measures nothing (no repeat variation of the metric and a "
                       "repeat KL of 0, as earlier versions wrote for one-window reports); measure it again "
                       f"with {kldtui_command()} noise from captures of at least 2 windows")
    return floor


# Default of a ``noise`` argument: the floor resolve_floor gives for the reports' suite (None is "no
# floor"); a sentinel typed Any so it fits ``NoiseFloor | None``.
AUTO_FLOOR: Any = object()


def resolve_floor(noise_path: str | os.PathLike[str] | None, suite_hash: str | None) -> NoiseFloor | None:
    """The floor to use: the stored one (``--noise``), else the published default when the reports
    come from the published suite, else None. A stored floor from another suite is refused."""
    if noise_path is not None:
        floor = load_floor(noise_path)
        fh = floor.suite_token_hash_sha256
        if other_suite(fh, suite_hash):
            assert fh is not None and suite_hash is not None
            raise BadInput(f"{noise_path}: the noise floor was measured on suite {fh[:12]}..., the reports "
                           f"come from suite {suite_hash[:12]}...; measure the floor on this suite")
        return floor
    if suite_hash == PUBLISHED_SUITE_HASH:
        return published_floor()
    return None



def measure_floor(suite_manifest: str | os.PathLike[str], run1: str | os.PathLike[str],
                  run2: str | os.PathLike[str], *, start_window: int = 0, stop_window: int | None = None,
                  context_filter: str = "all", strata: tuple[str, ...] = (),
                  reverse: bool = True, report_path: str | os.PathLike[str] | None = None,
                  emit: Any = None, cancel: Any = None,
                  server_signs: Sequence[ServerSign] | None) -> tuple[NoiseFloor, ComparisonReport]:
    """Run the compare stage on two captures of one model (RUN1 as the reference) and return the
    floor and the comparison report (also written to ``report_path`` when given, by the one writer of
    reports, :func:`kldtui.formats.report.write_report`: the output-file rule's one-line refusals, and a
    link or FIFO at the name replaced, never written through or opened). ``context_filter``
    and ``strata``: a hidden-state suite's contexts the captures hold, as compare takes them;
    ``server_signs``: how the model servers on this host show, whose GPUs the compare leaves alone
    (the caller's server kinds, ``kldtui.servers.registry.process_signs()``: this module names none),
    always said, as :class:`BackendRequest` takes them (None, on purpose: not known, so the compare
    takes no GPU)."""
    from kldtui.events import null_sink
    from kldtui.stages.compare import BackendRequest, CompareOptions, compare

    signs = None if server_signs is None else tuple(server_signs)
    options = CompareOptions(start_window=start_window, stop_window=stop_window, reverse=reverse,
                             context_filter=context_filter, strata=strata,
                             backend=BackendRequest(server_signs=signs))
    report = compare(suite_manifest, run1, run2, options, emit or null_sink, cancel)
    if report_path is not None:
        write_report(report_path, report)
    source = f"two captures {run1} and {run2}"
    return floor_from_reports(report, None, source=source, where=f"comparison of {run1} and {run2}"), report


# ---------------------------------------------------------------------------- same-model checks
def _manifest(folder: Any) -> dict[str, Any] | None:
    """A capture folder's manifest (its capture mode's: ``manifest.json``, score mode's
    ``scores-manifest.json``), or None when the folder is gone or has none."""
    from kldtui.capture_modes import finalized_in

    if not isinstance(folder, str) or not folder:
        return None
    mode = finalized_in(Path(folder))
    return manifest_object(mode.manifest_path(Path(folder)) if mode is not None
                           else logits_manifest_path(folder))


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
    """Why two capture folders are not two captures of one model, or None when they may be. A folder
    whose manifest cannot be read is a reason too: the check needs both manifests (earlier versions
    accepted two unreadable folders as a repeat)."""
    m1, m2 = _manifest(dir1), _manifest(dir2)
    for folder, manifest in ((dir1, m1), (dir2, m2)):
        if manifest is None:
            shown = folder if isinstance(folder, str) and folder else "(no capture folder recorded)"
            return (f"cannot check that they are captures of one model: the capture folder {shown} has no "
                    "readable manifest.json")
    assert m1 is not None and m2 is not None
    kinds = {m1.get("kind"), m2.get("kind")}
    if "reference" in kinds and kinds != {"reference"}:
        ref = dir1 if m1.get("kind") == "reference" else dir2
        return f"{ref} is a reference capture and the other a candidate"
    id1, id2 = _model_of(m1), _model_of(m2)
    if id1 and id2 and id1 != id2:
        return f"{dir1} served {id1[0] or id1[1]!r} and {dir2} served {id2[0] or id2[1]!r}"
    return None


def different_heads(report: ComparisonReport) -> str | None:
    """Why a report of two hidden-state captures was not replayed alike, or None: its two sides record
    different LM heads (each side's ``lm_head_file_sha256``, else the comparator's). Two captures of one
    model replayed alike share their head; earlier versions replayed a capture compared as the reference
    with the suite's head, so their repeat KL held the two heads' difference too (the campaign compares
    such a stored repeat again)."""
    sides, comparator = (report.reference, report.candidate), report.comparator
    heads = tuple(s.lm_head_file_sha256 if s is not None else None for s in sides)
    if not all(heads) and comparator is not None:
        heads = (comparator.lm_head_file_sha256, comparator.candidate_lm_head_file_sha256)
    ref, cand = heads
    if not ref or not cand or ref == cand:
        return None
    return (f"its two sides were replayed with different LM heads (the reference side with {ref[:12]}..., "
            f"the candidate side with {cand[:12]}...)")


def check_repeat_capture(document: ReportLike, where: str, allow_different_models: bool) -> None:
    """Refuse a comparison report as 'two captures of one model' when its two sides are different
    models (e.g. the reference against a quantized candidate), or cannot be checked, or were replayed
    with different LM heads (:func:`different_heads`), unless told otherwise: two different models'
    captures, each replayed with its own head, are what ``--allow-different-models`` admits."""
    if allow_different_models:
        return
    report = as_report(document, where)
    heads = different_heads(report)
    if heads:
        raise BadInput(f"{where}: {heads}, so it is not two captures of one model replayed alike; compare "
                       "the two captures again with kldtui compare, which replays a capture compared as the "
                       "reference with its own lm-head/ (earlier versions used the suite's), or add "
                       "--allow-different-models if they really are different models")
    why = different_models(report.reference_dir, report.candidate_dir)
    if why:
        raise BadInput(f"{where}: not shown to be two captures of one model ({why}); give a report of two "
                       "captures of the same model, or add --allow-different-models if that is really meant")


# Why a difference named on a deterministic server's captures stays provisional: the provisional words
# of every verdict ranked with a deterministic floor (no "capture again": it would give the same).
DETERMINISTIC_REASON = ("the server answered two captures of one model identically (deterministic), so "
                        "there is no variation between captures to hold it against, and capturing again "
                        "gives the same")


def one_capture(dir1: Any, dir2: Any) -> str | None:
    """The one rule that tells a deterministic server's two captures from one capture given twice or
    copied, for two capture folders whose captures came out identical (``kldtui noise`` and the
    campaign's leader and repeat both ask it): None when each folder's manifest records its own server
    start (``runtime.server_start``, made fresh at every start of a server kldtui launches), else why
    they cannot be shown to be two captures: the same folder, the same server start (a copy), or a
    folder that records none. The token is the folder's own word, which is enough here: a deterministic
    model never makes a verdict final, it only words why it stays provisional."""
    if not isinstance(dir1, str) or not isinstance(dir2, str) or not dir1 or not dir2:
        return "no capture folder recorded"
    with contextlib.suppress(OSError):
        if os.path.normpath(dir1) == os.path.normpath(dir2) or os.path.samefile(dir1, dir2):
            return f"{dir1} and {dir2} are the same folder"
    starts = []
    for folder in (dir1, dir2):
        manifest = _manifest(folder)
        if manifest is None:
            return f"{folder} has no readable manifest.json"
        start = server_start_of(manifest)
        if start is None:
            runtime = manifest.get("runtime")
            if isinstance(runtime, dict) and runtime.get("launcher") == "attached":
                return f"{folder} was captured from a server kldtui attached to, whose starts it cannot see"
            return f"{folder} records no server start (not captured by kldtui run, or by an earlier version)"
        starts.append(start)
    if starts[0] == starts[1]:
        return "both record the same server start, so one folder is a copy of the other"
    return None


def deterministic_floor(wheres: Sequence[str], dirs: Sequence[str | None], *,
                        suite_token_hash_sha256: str | None, reference_dir: str | None) -> NoiseFloor:
    """The noise model of a deterministic server: captures of one model (``dirs``), each from its own
    server start (:func:`one_capture`), that came out identical (``wheres``: the reports or comparison
    that show it). Nothing is measured (threshold 0, no repeat model); verdicts ranked with it stay
    provisional, with words that say why (:data:`DETERMINISTIC_REASON`) and no capture to make."""
    return NoiseFloor(
        kind="deterministic", source=" and ".join(wheres) if len(wheres) == 2 else ", ".join(wheres),
        kl_mean=0.0, threshold=0.0, suite_token_hash_sha256=suite_token_hash_sha256,
        run1=dirs[0], run2=dirs[1],
        extra={"created_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "reference_dir": reference_dir})


def alike_captures_floor(wheres: Sequence[str], dirs: Sequence[str | None], *,
                         suite_token_hash_sha256: str | None, reference_dir: str | None,
                         alike: str = "have identical per-window KL") -> NoiseFloor:
    """Captures (two or more) that came out identical (``alike`` says how it shows, in the reports'
    units: a hidden-state suite's ``per-context``): the deterministic model when :func:`one_capture`
    finds a server start of its own in each, else one line saying why not and what to do."""
    for i in range(len(wheres)):
        for j in range(i + 1, len(wheres)):
            di, dj = dirs[i], dirs[j]
            if not di or not dj:
                raise BadInput(f"{wheres[i]} and {wheres[j]} {alike}: they are one capture twice; capture "
                               "the candidate again")
            why = one_capture(di, dj)
            if why is not None:
                raise BadInput(f"{wheres[i]} and {wheres[j]} {alike} and cannot be shown to be two "
                               f"captures ({why}): capture the candidate again with kldtui run, "
                               "from a server start of its own, compare it, and give every capture's report "
                               "once (a deterministic server then gives a noise model that says so)")
    return deterministic_floor(wheres, dirs, suite_token_hash_sha256=suite_token_hash_sha256,
                               reference_dir=reference_dir)


def noise_from_capture_reports(first_doc: ReportLike, second_doc: ReportLike, *more_docs: ReportLike,
                               where1: str, where2: str, where_more: Sequence[str] = (),
                               repeat: ReportLike | None = None, where_repeat: str = "repeat report",
                               allow_different_models: bool = False) -> NoiseFloor:
    """The measured noise model from captures of one candidate, each compared with the same reference
    (two at least; three or more also measure the capture-wide variation, see :class:`RepeatModel`),
    and, when ``repeat`` (capture 2 compared with capture 1) is given, the repeat KL between them.
    Its refusals name the reports' units (:attr:`ComparisonReport.unit`: a hidden-state suite's
    contexts)."""
    from kldtui.decide.reports import check_same_suite

    docs = [first_doc, second_doc, *more_docs]
    wheres = [where1, where2, *where_more]
    if len(wheres) != len(docs):
        raise ValueError("one name per report")
    reports = [as_report(d, w) for d, w in zip(docs, wheres, strict=True)]
    for r, w in zip(reports[1:], wheres[1:], strict=True):
        check_same_suite(reports[0], r, wheres[0], w)
    values = [window_values(r, w) for r, w in zip(reports, wheres, strict=True)]
    unit = reports[0].unit  # the same suite's (check_same_suite): a hidden-state suite's contexts
    alike = f"have identical per-{unit} KL"
    dirs = [r.candidate_dir for r in reports]
    for i in range(len(reports)):
        for j in range(i + 1, len(reports)):
            ci, cj = dirs[i], dirs[j]
            if ci and cj and os.path.normpath(str(ci)) == os.path.normpath(str(cj)):
                raise BadInput(f"{wheres[i]} and {wheres[j]} compare the same capture ({ci}); capture the "
                               "candidate again, compare it, and give every capture's report once")
            if identical_captures(np.stack([values[i].kl_mean, values[j].kl_mean])) is not None:
                other = next((wheres[k] for k in range(len(values)) if not np.array_equal(
                    values[k].kl_mean, values[i].kl_mean)), None)
                if other is not None:
                    raise BadInput(f"{wheres[i]} and {wheres[j]} {alike} but {other} "
                                   "does not: the server answered two captures alike and not a third; give "
                                   f"only one of {wheres[i]} and {wheres[j]}")
                # every capture alike, each from a server start of its own: a deterministic server
                floor = alike_captures_floor(wheres, dirs,
                                             suite_token_hash_sha256=reports[0].suite_token_hash_sha256,
                                             reference_dir=reports[0].reference_dir, alike=alike)
                if not allow_different_models:
                    for a, b in itertools.combinations(range(len(dirs)), 2):
                        if why := different_models(dirs[a], dirs[b]):
                            raise BadInput(f"{wheres[a]} and {wheres[b]}: not shown to be captures of one "
                                           f"model ({why}); add --allow-different-models if they really are")
                return floor
            if not allow_different_models:
                why = different_models(ci, cj)
                if why:
                    raise BadInput(f"{wheres[i]} and {wheres[j]}: not shown to be captures of one model "
                                   f"({why}); add --allow-different-models if they really are")
    n = values[0].n
    base: NoiseFloor | None = None
    if repeat is not None:
        check_repeat_capture(repeat, where_repeat, allow_different_models)
        base = floor_from_reports(repeat, None, source=f"report {where_repeat}", where=where_repeat)
    if n < 2:
        if base is None:
            raise BadInput(f"{where1}: one {unit} only: the repeat variation of the metric needs at least 2 "
                           f"{unit}s; compare the captures over more {unit}s (or give --repeat-report for "
                           "the repeat KL alone)")
        return base
    source = " and ".join(wheres) if len(wheres) == 2 else f"{len(wheres)} captures ({', '.join(wheres)})"
    model = RepeatModel.from_captures(np.stack([v.kl_mean for v in values]), values[0].window_index.tolist(),
                                      wheres)
    return NoiseFloor(
        kind="measured", source=source, kl_mean=base.kl_mean if base else 0.0,
        threshold=base.threshold if base else 0.0,
        kl_reverse_mean=base.kl_reverse_mean if base else None,
        suite_token_hash_sha256=reports[0].suite_token_hash_sha256,
        per_window=base.per_window if base else {},
        per_window_reverse=base.per_window_reverse if base else {},
        run1=str(dirs[0]) if dirs[0] else None, run2=str(dirs[1]) if dirs[1] else None,
        extra={"created_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "windows": n, "reference_dir": reports[0].reference_dir},
        metric_source=source, repeat=model)
