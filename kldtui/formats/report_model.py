"""The comparison report as typed dataclasses (schema: docs/REPORT.md).

One model for kldtui's reports and the original comparator's: the original's fields are the
required ones, kldtui's additions are optional (``None`` when a report does not carry them, as
in an original report).  :meth:`ComparisonReport.from_json` validates a parsed JSON document
and names the file and the field of the first problem in a one-line :class:`BadInput`;
:meth:`ComparisonReport.to_json` gives back the JSON object kldtui writes (same fields as
before the model existed; the writer sorts keys, so field order here does not matter).

Absent versus null: an optional field that is ``None`` is left out of the JSON, except the
fields marked ``_KEEP_NULL`` (kldtui writes them as ``null`` when a figure is unknown or not
finite, e.g. the perplexity of a candidate whose probabilities underflow).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NoReturn, cast

from kldtui.errors import BadInput
from kldtui.formats.model_size import ModelSize
from kldtui.formats.suite import unit_name
from kldtui.formats.untrusted_json import one_line_problem
from kldtui.metrics.limits import KL_ROW_MAX
from kldtui.text import plain_number

REPORT_FORMAT = "kldtui-comparison-v1"
STATS_REQUIRED = ("mean", "median", "p95", "p99", "max")
STATS_EXTRA = ("min", "p0_1", "p1", "p5", "p10", "p50", "p90", "p99_9")
_ADVICE = "not a comparison report, or a damaged one (re-run kldtui compare)"
# what to do about a file that is no comparison report at all (missing, a FIFO, not JSON, a list):
# every load error of a report ends with it (kldtui.formats.report.load_report)
REPORT_REMEDY = "give a comparison report that kldtui compare or kldtui run wrote"
# bytes of a comparison report read: a report of the 1,024-context hidden-state suite with every
# per-context and per-window figure is 4.3 MB (about 4 KB a context); a larger file is refused, naming
# it, rather than read into memory
REPORT_LIMIT = 64 * 1024 * 1024
# characters of provenance.backend_reason: one choice's reason is a line of under 300; a compare whose
# windows ran under different choices joins them, the compare stage keeping the text within this
# (kldtui.stages.compare.report); a longer one, or one holding a control character, is refused
BACKEND_REASON_MAX = 2000
_KEEP_NULL = {"keep_null": True}
_FLAT = {"flatten": True}  # a mapping written as fields of its object (registered figures' columns)


# ----------------------------------------------------------------------------- reading helpers


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


class _Obj:
    """A JSON object being read: where it is (file, field path) for one-line errors."""

    def __init__(self, doc: Any, where: str, path: str, advice: str = _ADVICE) -> None:
        self.where, self.path, self.advice = where, path, advice
        if not isinstance(doc, dict):
            self.fail(f"expected an object, found {_kind(doc)}")
        self.doc: dict[str, Any] = doc

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, what: str, key: str | None = None) -> NoReturn:
        at = self.name(key) if key is not None else (self.path or "report")
        raise BadInput(f"{self.where}: {at}: {what}; {self.advice}")

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def _get(self, key: str) -> Any:
        if key not in self.doc:
            self.fail("missing field", key)
        return self.doc[key]

    def num(self, key: str) -> float:
        value = self._get(key)
        if not _finite_number(value):
            self.fail(f"expected a finite number, found {_kind(value)}", key)
        return cast(float, value)  # an int stays an int, so a report round-trips byte for byte

    def opt_num(self, key: str) -> float | None:
        return self.num(key) if self.has(key) else None

    def opt_num_or_inf(self, key: str) -> float | None:
        """A figure written as null when it is infinite: absent -> None, null -> +inf."""
        if key not in self.doc:
            return None
        return math.inf if self.doc[key] is None else self.num(key)

    def int_(self, key: str) -> int:
        value = self._get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(f"expected a whole number >= 0, found {_kind(value)}", key)
        return value

    def opt_int(self, key: str) -> int | None:
        return self.int_(key) if self.has(key) else None

    def str_(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            self.fail(f"expected text, found {_kind(value)}", key)
        return value

    def opt_str(self, key: str) -> str | None:
        return self.str_(key) if self.has(key) else None

    def bool_(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            self.fail(f"expected true or false, found {_kind(value)}", key)
        return value

    def obj(self, key: str) -> _Obj:
        return _Obj(self._get(key), self.where, self.name(key), self.advice)

    def opt_obj(self, key: str) -> _Obj | None:
        return self.obj(key) if self.has(key) else None

    def list_(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list):
            self.fail(f"expected a list, found {_kind(value)}", key)
        return value

    def opt_list(self, key: str) -> list[Any] | None:
        return self.list_(key) if self.has(key) else None

    def items(self, key: str) -> list[_Obj]:
        return [_Obj(v, self.where, f"{self.name(key)}[{n}]", self.advice)
                for n, v in enumerate(self.list_(key))]

    def numbers(self, key: str) -> list[float]:
        values = self.list_(key)
        for n, v in enumerate(values):
            if not _finite_number(v):
                self.fail(f"expected finite numbers, found {_kind(v)} at [{n}]", key)
        return values

    def opt_numbers(self, key: str) -> list[float] | None:
        """An optional column of figures; null entries (a figure kldtui wrote as null because it
        was infinite, e.g. the NLL of a next token the candidate gives probability 0) load as +inf,
        which the writer turns back into null."""
        if not self.has(key):
            return None
        values = self.list_(key)
        out: list[float] = []
        for n, v in enumerate(values):
            if v is not None and not _finite_number(v):
                self.fail(f"expected numbers or null, found {_kind(v)} at [{n}]", key)
            out.append(math.inf if v is None else v)
        return out

    def rest(self, known: set[str]) -> dict[str, Any]:
        """Fields this model does not know: kept as they are, so a newer report round-trips."""
        return {k: v for k, v in self.doc.items() if k not in known}


def _json_value(value: Any) -> Any:
    """JSON has no Inf or NaN: a non-finite float becomes null (as kldtui always wrote it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, _Part | ModelSize):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


class _Part:
    """Serialisation shared by the report's parts: every field under its own name, ``None``
    left out unless the field keeps null, unknown fields (``extra``) written back as read."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.metadata.get("flatten"):
                if value is not None:
                    out.update(_json_value(value))
                continue
            if value is None and not f.metadata.get("keep_null"):
                continue
            out[f.name] = _json_value(value)
        out.update(_json_value(getattr(self, "extra", {})))
        return out


# ----------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class Stats(_Part):
    """Quantile summary of a per-position figure: the original's five keys, kldtui's eight more."""

    mean: float
    median: float
    p95: float
    p99: float
    max: float
    min: float | None = None
    p0_1: float | None = None
    p1: float | None = None
    p5: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99_9: float | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> Stats:
        return cls(*(o.num(k) for k in STATS_REQUIRED), *(o.opt_num(k) for k in STATS_EXTRA))

    @classmethod
    def of(cls, values: Mapping[str, float]) -> Stats:
        """From :func:`kldtui.metrics.stats.stats_object`'s mapping (trusted, not validated)."""
        return cls(*(values[k] for k in STATS_REQUIRED), *(values.get(k) for k in STATS_EXTRA))


@dataclass(frozen=True)
class DeltaP(_Part):
    """Stats of p_candidate - p_reference of the actual next token, plus its root mean square.
    Every key optional: readers show what is there."""

    mean: float | None = None
    median: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    min: float | None = None
    p0_1: float | None = None
    p1: float | None = None
    p5: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99_9: float | None = None
    rms: float | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> DeltaP:
        return cls(**{f.name: o.opt_num(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Bootstrap(_Part):
    """Window-cluster bootstrap of a mean over window means (the original's object)."""

    estimate: float
    standard_error: float
    ci95_low: float
    ci95_high: float
    bootstrap_samples: int | None = None
    cluster_unit: str | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> Bootstrap:
        return cls(o.num("estimate"), o.num("standard_error"), o.num("ci95_low"), o.num("ci95_high"),
                   o.opt_int("bootstrap_samples"), o.opt_str("cluster_unit"))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Bootstrap:
        """From :mod:`kldtui.metrics.stats`'s bootstrap mapping (trusted)."""
        return cls(values["estimate"], values["standard_error"], values["ci95_low"], values["ci95_high"],
                   values.get("bootstrap_samples"), values.get("cluster_unit"))


@dataclass(frozen=True)
class Interval(_Part):
    """A bootstrap whose figures may be unknown (null): the perplexity ratio overflows for a
    candidate whose next-token probabilities underflow."""

    estimate: float | None = field(default=None, metadata=_KEEP_NULL)
    standard_error: float | None = field(default=None, metadata=_KEEP_NULL)
    ci95_low: float | None = field(default=None, metadata=_KEEP_NULL)
    ci95_high: float | None = field(default=None, metadata=_KEEP_NULL)
    bootstrap_samples: int | None = None
    cluster_unit: str | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> Interval:
        return cls(o.opt_num("estimate"), o.opt_num("standard_error"), o.opt_num("ci95_low"),
                   o.opt_num("ci95_high"), o.opt_int("bootstrap_samples"), o.opt_str("cluster_unit"))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Interval:
        return cls(values["estimate"], values["standard_error"], values["ci95_low"], values["ci95_high"],
                   values.get("bootstrap_samples"), values.get("cluster_unit"))


@dataclass(frozen=True)
class HeadlineInterval(_Part):
    """The headline 95 % interval of a mean over windows (docs/STATISTICS.md): the method the
    simulation chose (Hall's skewness-corrected t, or Cox's log-normal interval where the window
    values spread widely), its measured coverage at this window count (the lowest over the
    simulated window-mean distributions), and whether it rests on too few windows to be trusted
    (then views mark it instead of headlining it)."""

    estimate: float | None = field(default=None, metadata=_KEEP_NULL)
    ci95_low: float | None = field(default=None, metadata=_KEEP_NULL)
    ci95_high: float | None = field(default=None, metadata=_KEEP_NULL)
    method: str = ""
    windows: int = 0
    rests_on_too_few_windows: bool = False
    measured_coverage: float | None = field(default=None, metadata=_KEEP_NULL)

    @classmethod
    def from_json(cls, o: _Obj) -> HeadlineInterval:
        few = o.doc.get("rests_on_too_few_windows")
        if not isinstance(few, bool):
            o.fail(f"expected true or false, found {_kind(few)}", "rests_on_too_few_windows")
        return cls(o.opt_num("estimate"), o.opt_num("ci95_low"), o.opt_num("ci95_high"), o.str_("method"),
                   o.int_("windows"), few, o.opt_num("measured_coverage"))


@dataclass(frozen=True)
class FigureSummary(_Part):
    """One entry of the report's ``figures`` object: a per-row figure declared in kldtui's figure
    registry (kldtui.metrics.figures) over the whole comparison, described by the report itself
    (label, unit, definition) so any reader can show it.  Its per-window values are in
    ``per_window_arrays`` and the ``per_window`` entries under the same name."""

    label: str
    definition: str
    value: float | None = field(default=None, metadata=_KEEP_NULL)  # over every position; null: not finite
    window_cluster_bootstrap: Interval | None = None  # over the window values
    unit: str | None = None
    better: str | None = None  # "lower" or "higher"
    interval: HeadlineInterval | None = None  # the headline interval over the window values
    # the uncertainty llama.cpp's perplexity tool prints beside such a figure (positions taken as
    # independent: too small for positions that share a window), for comparison
    per_token_uncertainty: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> FigureSummary:
        better = o.opt_str("better")
        if better not in (None, "lower", "higher"):
            o.fail(f"expected \"lower\" or \"higher\", found {_kind(better)}", "better")
        boot = o.opt_obj("window_cluster_bootstrap")
        headline = o.opt_obj("interval")
        known = {f.name for f in fields(cls)}
        return cls(o.str_("label"), o.str_("definition"), o.opt_num("value"),
                   Interval.from_json(boot) if boot is not None else None, o.opt_str("unit"), better,
                   HeadlineInterval.from_json(headline) if headline is not None else None,
                   o.opt_num("per_token_uncertainty"), extra=o.rest(known))


# per-window figures kldtui adds, in per_window entries and per_window_arrays alike
WINDOW_FIGURES = ("kl_mean", "kl_median", "kl_p99", "kl_max", "js_mean", "top5_agreement",
                  "top10_agreement", "p_reference_mean", "p_candidate_mean", "delta_p_mean", "delta_p_rms",
                  "nll_reference_mean", "nll_candidate_mean", "kl_reverse_mean", "infinite_kl_rows")


@dataclass(frozen=True)
class WindowEntry(_Part):
    """One entry of ``per_window``: the original's fields, then kldtui's per-window figures."""

    window_index: int
    domain: str
    positions: int
    kl_reference_to_candidate: Stats
    js: Stats | None = None
    top1_agreement: float | None = None
    kl_candidate_to_reference: Stats | None = None
    kl_mean: float | None = None
    kl_median: float | None = None
    kl_p99: float | None = None
    kl_max: float | None = None
    js_mean: float | None = None
    top5_agreement: float | None = None
    top10_agreement: float | None = None
    p_reference_mean: float | None = None
    p_candidate_mean: float | None = None
    delta_p_mean: float | None = None
    delta_p_rms: float | None = None
    nll_reference_mean: float | None = None
    nll_candidate_mean: float | None = None
    kl_reverse_mean: float | None = None
    infinite_kl_rows: int | None = None  # positions with infinite KL (masked tokens), see InfiniteKL
    # the report's registered figures (its ``figures`` object) for this window, under their names
    figures: dict[str, float | None] = field(default_factory=dict, metadata=_FLAT)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj, figure_names: Sequence[str] = ()) -> WindowEntry:
        js, rev = o.opt_obj("js"), o.opt_obj("kl_candidate_to_reference")
        # a figure written as null was infinite (masked tokens): +inf here, null again when written
        columns: dict[str, Any] = {k: o.opt_num_or_inf(k) for k in WINDOW_FIGURES
                                   if k != "infinite_kl_rows"}
        columns["infinite_kl_rows"] = o.opt_int("infinite_kl_rows")
        registered = {k: o.opt_num_or_inf(k) for k in figure_names if k in o.doc}
        known = {f.name for f in fields(cls) if f.name != "figures"} | set(registered)
        return cls(o.int_("window_index"), o.str_("domain"), o.int_("positions"),
                   Stats.from_json(o.obj("kl_reference_to_candidate")),
                   Stats.from_json(js) if js else None, o.opt_num("top1_agreement"),
                   Stats.from_json(rev) if rev else None, **columns, figures=registered,
                   extra=o.rest(known))

    @property
    def reverse_mean(self) -> float | None:
        """Mean KL(candidate || reference) of this window, where the report has it."""
        if self.kl_reverse_mean is not None:
            return self.kl_reverse_mean
        return self.kl_candidate_to_reference.mean if self.kl_candidate_to_reference else None


def _counts(o: _Obj, key: str) -> list[int]:
    """A list of whole numbers >= 0 (window indices, positions, counts)."""
    values = o.list_(key)
    for n, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            o.fail(f"expected whole numbers >= 0, found {_kind(v)} at [{n}]", key)
    return values


@dataclass(frozen=True)
class WindowTable(_Part):
    """``per_window_arrays``: parallel lists, one entry per compared window, in window order."""

    window_index: list[int]
    domain: list[str]
    positions: list[int]
    kl_mean: list[float]
    kl_median: list[float] | None = None
    kl_p99: list[float] | None = None
    kl_max: list[float] | None = None
    js_mean: list[float] | None = None
    top1_agreement: list[float] | None = None
    top5_agreement: list[float] | None = None
    top10_agreement: list[float] | None = None
    p_reference_mean: list[float] | None = None
    p_candidate_mean: list[float] | None = None
    delta_p_mean: list[float] | None = None
    delta_p_rms: list[float] | None = None
    nll_reference_mean: list[float] | None = None
    nll_candidate_mean: list[float] | None = None
    kl_reverse_mean: list[float] | None = None
    infinite_kl_rows: list[int] | None = None
    # the report's registered figures (its ``figures`` object), one column each under its name
    figures: dict[str, list[float]] = field(default_factory=dict, metadata=_FLAT)
    extra: dict[str, Any] = field(default_factory=dict)  # columns this version does not know

    @classmethod
    def from_json(cls, o: _Obj, windows: int, figure_names: Sequence[str] = ()) -> WindowTable:
        index = _counts(o, "window_index")
        domain = o.list_("domain")
        positions = _counts(o, "positions")
        for n, d in enumerate(domain):
            if not isinstance(d, str):
                o.fail(f"expected text, found {_kind(d)} at [{n}]", "domain")
        infinite = _counts(o, "infinite_kl_rows") if o.has("infinite_kl_rows") else None
        ints = ("window_index", "domain", "positions", "infinite_kl_rows", "figures", "extra")
        lists = {f.name: (o.numbers(f.name) if f.name == "kl_mean" else o.opt_numbers(f.name))
                 for f in fields(cls) if f.name not in ints}
        registered = {k: v for k in figure_names if (v := o.opt_numbers(k)) is not None}
        for key, values in {"window_index": index, "domain": domain, "positions": positions,
                            "infinite_kl_rows": infinite, **lists, **registered}.items():
            if values is not None and len(values) != windows:
                o.fail(f"has {len(values)} entries but per_window has {windows}", key)
        known = {f.name for f in fields(cls) if f.name != "figures"} | set(registered)
        return cls(index, domain, positions, **lists, infinite_kl_rows=infinite,  # type: ignore[arg-type]
                   figures=registered, extra=o.rest(known))

    @classmethod
    def from_entries(cls, entries: list[WindowEntry]) -> WindowTable:
        """The table an original report implies: its per_window entries' figures."""
        def column(get: Any) -> list[Any] | None:
            values = [get(e) for e in entries]
            return None if any(v is None for v in values) else values

        return cls(
            window_index=[e.window_index for e in entries], domain=[e.domain for e in entries],
            positions=[e.positions for e in entries],
            kl_mean=[e.kl_reference_to_candidate.mean for e in entries],
            kl_median=[e.kl_reference_to_candidate.median for e in entries],
            kl_p99=[e.kl_reference_to_candidate.p99 for e in entries],
            kl_max=[e.kl_reference_to_candidate.max for e in entries],
            js_mean=column(lambda e: e.js.mean if e.js else None),
            top1_agreement=column(lambda e: e.top1_agreement),
            kl_reverse_mean=column(lambda e: e.reverse_mean),
            infinite_kl_rows=column(lambda e: e.infinite_kl_rows),
        )


@dataclass(frozen=True)
class TopK(_Part):
    """``topk_agreement``: the fraction for each k, under the key ``str(k)``."""

    definition: str
    k: list[int]
    fractions: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"definition": self.definition, "k": list(self.k), **_json_value(self.fractions)}

    @classmethod
    def from_json(cls, o: _Obj) -> TopK:
        ks = o.list_("k")
        if not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in ks):
            o.fail("expected a list of whole numbers > 0", "k")
        return cls(o.str_("definition"), ks, {str(k): o.num(str(k)) for k in ks})

    def at(self, k: int) -> float | None:
        return self.fractions.get(str(k))


@dataclass(frozen=True)
class NextToken(_Part):
    """Figures of each position's actual next token (docs/REPORT.md, ``next_token``)."""

    p_reference: Stats | None = None
    p_candidate: Stats | None = None
    delta_p: DeltaP | None = None
    perplexity_reference: float | None = field(default=None, metadata=_KEEP_NULL)
    perplexity_candidate: float | None = field(default=None, metadata=_KEEP_NULL)
    perplexity_ratio: float | None = field(default=None, metadata=_KEEP_NULL)
    perplexity_ratio_window_cluster_bootstrap: Interval | None = None
    # log space (mean NLL; never overflows): absent in reports before they were added (None); +inf
    # (null in the JSON) when a side gives the actual next token probability 0
    log_perplexity_reference: float | None = None
    log_perplexity_candidate: float | None = None
    log_perplexity_ratio: float | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> NextToken:
        pr, pc, dp, pb = (o.opt_obj(k) for k in ("p_reference", "p_candidate", "delta_p",
                                                "perplexity_ratio_window_cluster_bootstrap"))
        return cls(Stats.from_json(pr) if pr else None, Stats.from_json(pc) if pc else None,
                   DeltaP.from_json(dp) if dp else None, o.opt_num("perplexity_reference"),
                   o.opt_num("perplexity_candidate"), o.opt_num("perplexity_ratio"),
                   Interval.from_json(pb) if pb else None, o.opt_num_or_inf("log_perplexity_reference"),
                   o.opt_num_or_inf("log_perplexity_candidate"), o.opt_num_or_inf("log_perplexity_ratio"))


@dataclass(frozen=True)
class InfiniteKL(_Part):
    """``infinite_kl``: positions where the candidate gives probability 0 to a token the
    reference gives a positive probability (docs/REPORT.md, "Masked tokens")."""

    definition: str
    rows: int
    windows: list[int]
    reverse_rows: int | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> InfiniteKL:
        windows = o.list_("windows")
        if not all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in windows):
            o.fail("expected a list of window indices", "windows")
        return cls(o.str_("definition"), o.int_("rows"), windows, o.opt_int("reverse_rows"))


@dataclass(frozen=True)
class ReferenceEncoding(_Part):
    """``reference_encoding``: the reference was decoded from a lossy file (llama.cpp's
    KL-divergence base file, imported by ``kldtui convert FILE --to suite``), not captured as
    float32 logits; what that encoding can have moved (docs/REPORT.md, ``reference_encoding``)."""

    RUNTIME_KEY: ClassVar[str] = "reference_encoding"  # where a logits manifest's runtime records it

    format: str
    max_entry_error: float   # nats: every kept reference log-probability is this close to the original
    floored_entries: int     # entries below the encoding's floor, read as probability 0 ...
    entries: int             # ... of this many
    max_mass_gap: float      # the largest |1 - sum of a decoded row's probabilities|
    floor_nats: float | None = None  # how far below a row's top the floor lies
    source_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> ReferenceEncoding:
        known = {f.name for f in fields(cls)}
        out = cls(o.str_("format"), o.num("max_entry_error"), o.int_("floored_entries"), o.int_("entries"),
                  o.num("max_mass_gap"), o.opt_num("floor_nats"), o.opt_str("source_file"),
                  extra=o.rest(known))
        for key in ("max_entry_error", "max_mass_gap", "floor_nats"):
            value = getattr(out, key)
            if value is not None and value < 0:
                o.fail(f"expected a number >= 0, found {value!r}", key)
        if out.floored_entries > out.entries:
            o.fail(f"{out.floored_entries} floored entries of only {out.entries}", "floored_entries")
        return out

    @classmethod
    def from_manifest(cls, doc: Any, where: str) -> ReferenceEncoding:
        """``runtime.reference_encoding`` of a reference's logits manifest (``where``), which
        ``kldtui convert FILE --to suite`` writes; validated like a report's part."""
        return cls.from_json(_Obj(doc, where, f"runtime.{cls.RUNTIME_KEY}",
                                  "a damaged reference manifest (import the file again with kldtui convert)"))

    def line(self) -> str:
        """What it means for the figures, in one line."""
        share = self.floored_entries / self.entries if self.entries else 0.0
        floor = f"{self.floor_nats:g} nats" if self.floor_nats is not None else "the floor"
        return (f"reference decoded from {self.format}: each reference log-probability is within "
                f"{plain_number(self.max_entry_error, 2)} nats of the original, and {share:.0%} of its "
                f"entries (those more than {floor} below their row's top) count as probability 0 (rows "
                f"lose at most {plain_number(self.max_mass_gap, 2)} of their probability)")


@dataclass(frozen=True)
class ConfidenceBucket(_Part):
    """KL and top-1 agreement where the reference's top probability is in [low, high)."""

    low: float
    high: float
    positions: int
    kl_mean: float | None = field(default=None, metadata=_KEEP_NULL)  # null: no position here
    top1_agreement: float | None = field(default=None, metadata=_KEEP_NULL)
    # window-clustered 95 % interval of kl_mean (docs/STATISTICS.md); absent in older reports
    ci95_low: float | None = None
    ci95_high: float | None = None
    windows: int | None = None  # windows with positions in the bucket

    @classmethod
    def from_json(cls, o: _Obj) -> ConfidenceBucket:
        return cls(o.num("low"), o.num("high"), o.int_("positions"), o.opt_num("kl_mean"),
                   o.opt_num("top1_agreement"), o.opt_num("ci95_low"), o.opt_num("ci95_high"),
                   o.opt_int("windows"))


@dataclass(frozen=True)
class PositionBucket(_Part):
    """Mean KL over positions [start, stop) of the windows."""

    start: int
    stop: int
    positions: int
    kl_mean: float
    # window-clustered 95 % interval of kl_mean (docs/STATISTICS.md); absent in older reports
    ci95_low: float | None = None
    ci95_high: float | None = None
    windows: int | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> PositionBucket:
        return cls(o.int_("start"), o.int_("stop"), o.int_("positions"), o.num("kl_mean"),
                   o.opt_num("ci95_low"), o.opt_num("ci95_high"), o.opt_int("windows"))


@dataclass(frozen=True)
class Verified(_Part):
    """What was checked before comparing: token hashes, suite hash, logits SHA-256."""

    token_hashes: bool
    suite_hash: bool
    logits_sha256: str  # "checked", "cached" or "skipped"
    # files whose header cannot say which window they hold (no window_index, no token hash): the
    # window identity of these was NOT checked (absent: every file's was)
    window_identity_unchecked: list[str] | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> Verified:
        unchecked = o.opt_list("window_identity_unchecked")
        if unchecked is not None and not all(isinstance(u, str) for u in unchecked):
            o.fail("expected a list of file names", "window_identity_unchecked")
        return cls(o.bool_("token_hashes"), o.bool_("suite_hash"), o.str_("logits_sha256"), unchecked)


@dataclass(frozen=True)
class Provenance(_Part):
    """How and when the report was made."""

    kldtui_version: str
    backend: str
    elapsed_seconds: float
    bytes_compared: int
    created_utc: str
    verified: Verified
    threads: int | None = field(default=None, metadata=_KEEP_NULL)
    throughput_gb_per_s: float | None = field(default=None, metadata=_KEEP_NULL)
    positions_per_second: float | None = field(default=None, metadata=_KEEP_NULL)
    command: str | None = field(default=None, metadata=_KEEP_NULL)
    # why that backend ran, as the compare said it (absent: not known)
    backend_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> Provenance:
        known = {f.name for f in fields(cls)}
        reason = o.opt_str("backend_reason")
        problem = one_line_problem(reason, BACKEND_REASON_MAX) if reason is not None else None
        if problem is not None:
            o.fail(problem, "backend_reason")
        return cls(o.str_("kldtui_version"), o.str_("backend"), o.num("elapsed_seconds"),
                   o.int_("bytes_compared"), o.str_("created_utc"), Verified.from_json(o.obj("verified")),
                   o.opt_int("threads"), o.opt_num("throughput_gb_per_s"), o.opt_num("positions_per_second"),
                   o.opt_str("command"), reason, extra=o.rest(known))


@dataclass(frozen=True)
class NoiseFloorNote(_Part):
    """``noise_floor``, added by tools that know the run-to-run noise of the suite."""

    source: str | None = None
    kl_mean: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> NoiseFloorNote:
        return cls(o.opt_str("source"), o.opt_num("kl_mean"), extra=o.rest({"source", "kl_mean"}))


# ----------------------------------------------------------------------------- suites of contexts
# Hidden-state suites (docs/FORMATS.md, "Hidden-state suites"): what each side was, how logits were
# replayed, and the statistics of a suite whose contexts are clustered by source and stratified.
# Their JSON names are the published comparator's, so its paired tool reads kldtui's reports.


@dataclass(frozen=True)
class SideDescription(_Part):
    """``reference`` / ``candidate``: what a side of the comparison was."""

    kind: str  # "logits", "hidden" (replayed with an LM head) or "scores"
    label: str
    manifest_sha256: str | None = field(default=None, metadata=_KEEP_NULL)
    lm_head_file_sha256: str | None = None
    file_dtype: str | None = None
    bytes_on_disk: int | None = None  # the compared windows' files (and the head of a hidden side)
    full_logits_bytes: int | None = None  # the same windows as F32 logits
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> SideDescription:
        known = {f.name for f in fields(cls)}
        return cls(o.str_("kind"), o.str_("label"), o.opt_str("manifest_sha256"),
                   o.opt_str("lm_head_file_sha256"),
                   o.opt_str("file_dtype"), o.opt_int("bytes_on_disk"), o.opt_int("full_logits_bytes"),
                   extra=o.rest(known))


@dataclass(frozen=True)
class Comparator(_Part):
    """``comparator``: how logits were obtained (docs/REPLAY.md) when a side was replayed."""

    two_pass_full_vocabulary: bool
    lm_head_file_sha256: str | None = field(default=None, metadata=_KEEP_NULL)  # the reference's head
    candidate_lm_head_file_sha256: str | None = None
    replay_dtype: str | None = None
    vocab_chunk: int | None = None
    replay_rows: int | None = None
    position_block: int | None = None
    device: str | None = None
    library: str | None = None
    tf32: bool | None = None
    bf16_reduced_precision_reduction: bool | None = None
    source_file_hashes_verified: bool | None = None
    bf16_gemm: str | None = None  # the CPU's path (docs/REPLAY.md): "native", "widened to FP32"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> Comparator:
        known = {f.name for f in fields(cls)}

        def opt_bool(key: str) -> bool | None:
            return o.bool_(key) if o.has(key) else None

        return cls(o.bool_("two_pass_full_vocabulary"), o.opt_str("lm_head_file_sha256"),
                   o.opt_str("candidate_lm_head_file_sha256"), o.opt_str("replay_dtype"),
                   o.opt_int("vocab_chunk"),
                   o.opt_int("replay_rows"), o.opt_int("position_block"), o.opt_str("device"),
                   o.opt_str("library"), opt_bool("tf32"), opt_bool("bf16_reduced_precision_reduction"),
                   opt_bool("source_file_hashes_verified"), o.opt_str("bf16_gemm"), extra=o.rest(known))


@dataclass(frozen=True)
class ClusterBootstrap(_Part):
    """A bootstrap over contexts or source clusters (kldtui.metrics.clusters)."""

    estimate: float
    standard_error: float
    ci95_low: float
    ci95_high: float
    bootstrap_samples: int
    cluster_unit: str
    cluster_count: int | None = None
    context_count: int | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> ClusterBootstrap:
        return cls(o.num("estimate"), o.num("standard_error"), o.num("ci95_low"), o.num("ci95_high"),
                   o.int_("bootstrap_samples"), o.str_("cluster_unit"), o.opt_int("cluster_count"),
                   o.opt_int("context_count"))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> ClusterBootstrap:
        return cls(values["estimate"], values["standard_error"], values["ci95_low"], values["ci95_high"],
                   values["bootstrap_samples"], values["cluster_unit"], values.get("cluster_count"),
                   values.get("context_count"))


@dataclass(frozen=True)
class StratifiedBootstrap(_Part):
    """Source clusters resampled within allocation strata: ``micro`` (strata weighted by their
    context counts) and ``macro`` (strata alike)."""

    micro: ClusterBootstrap
    macro: ClusterBootstrap
    stratum_sizes: dict[str, int]
    stratum_cluster_counts: dict[str, int]
    bootstrap_samples: int
    cluster_unit: str

    @classmethod
    def from_json(cls, o: _Obj) -> StratifiedBootstrap:
        sizes, clusters = o.obj("stratum_sizes"), o.obj("stratum_cluster_counts")
        return cls(ClusterBootstrap.from_json(o.obj("micro")), ClusterBootstrap.from_json(o.obj("macro")),
                   {k: sizes.int_(k) for k in sizes.doc}, {k: clusters.int_(k) for k in clusters.doc},
                   o.int_("bootstrap_samples"), o.str_("cluster_unit"))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> StratifiedBootstrap:
        return cls(ClusterBootstrap.of(values["micro"]), ClusterBootstrap.of(values["macro"]),
                   dict(values["stratum_sizes"]), dict(values["stratum_cluster_counts"]),
                   values["bootstrap_samples"], values["cluster_unit"])


@dataclass(frozen=True)
class DepthBucket(_Part):
    """KL over the rows ``[start, stop)`` of every context (``rows``: "0000-0255")."""

    rows: str
    start: int
    stop: int
    positions: int
    kl_reference_to_candidate: Stats

    @classmethod
    def from_json(cls, o: _Obj) -> DepthBucket:
        return cls(o.str_("rows"), o.int_("start"), o.int_("stop"), o.int_("positions"),
                   Stats.from_json(o.obj("kl_reference_to_candidate")))


@dataclass(frozen=True)
class ContextRank(_Part):
    """A context in ``high_kld_contexts`` or ``top1_discordant_contexts``."""

    context_index: int
    allocation_stratum: str
    source_cluster: str
    partition: str
    kl_mean: float | None = field(default=None, metadata=_KEEP_NULL)
    top1_agreement: float | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> ContextRank:
        return cls(o.int_("context_index"), o.str_("allocation_stratum"), o.str_("source_cluster"),
                   o.str_("partition"), o.opt_num("kl_mean"), o.opt_num("top1_agreement"))


@dataclass(frozen=True)
class ContextEntry(_Part):
    """One entry of ``per_context``: the context's identity (the suite's fields, kept as they are
    in ``extra``), its source cluster and its figures."""

    context_index: int
    allocation_stratum: str
    partition: str
    sentinel: bool
    source_cluster: str
    positions: int
    kl_reference_to_candidate: Stats
    js: Stats
    top1_agreement: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, o: _Obj) -> ContextEntry:
        known = {f.name for f in fields(cls)}
        return cls(o.int_("context_index"), o.str_("allocation_stratum"), o.str_("partition"),
                   o.bool_("sentinel"), o.str_("source_cluster"), o.int_("positions"),
                   Stats.from_json(o.obj("kl_reference_to_candidate")),
                   Stats.from_json(o.obj("js")), o.num("top1_agreement"), extra=o.rest(known))


@dataclass(frozen=True)
class ContextSelection(_Part):
    """Which contexts a comparison covered: the filter asked for and the partitions they are in.
    ``partition`` is "analysis" or "qualification" when every context is in one, else "mixed"."""

    filter: str
    partition: str
    analysis: int
    qualification: int
    sentinels: int
    strata: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, o: _Obj) -> ContextSelection:
        strata = o.opt_list("strata") or []
        if not all(isinstance(s, str) for s in strata):
            o.fail("expected a list of names", "strata")
        return cls(o.str_("filter"), o.str_("partition"), o.int_("analysis"), o.int_("qualification"),
                   o.int_("sentinels"), list(strata))


SUITE_STATISTICS_KEYS = ("contexts", "context_selection", "kl_micro_token_mean",
                         "kl_macro_allocation_stratum_mean",
                         "context_depth_buckets", "kl_context_bootstrap", "kl_source_cluster_bootstrap",
                         "kl_stratified_source_cluster_bootstrap", "allocation_strata", "semantic_classes",
                         "high_kld_contexts", "top1_discordant_contexts", "per_context",
                         "suite_manifest_sha256")


@dataclass(frozen=True)
class SuiteStatistics(_Part):
    """The statistics of a hidden-state suite's comparison, written as top-level fields of the
    report (the published comparator's names)."""

    contexts: int
    context_selection: ContextSelection
    kl_micro_token_mean: float
    kl_macro_allocation_stratum_mean: float
    context_depth_buckets: list[DepthBucket]
    kl_context_bootstrap: ClusterBootstrap
    kl_source_cluster_bootstrap: ClusterBootstrap
    kl_stratified_source_cluster_bootstrap: StratifiedBootstrap
    allocation_strata: dict[str, ClusterBootstrap]
    semantic_classes: dict[str, ClusterBootstrap]
    high_kld_contexts: list[ContextRank]
    top1_discordant_contexts: list[ContextRank]
    per_context: list[ContextEntry]
    suite_manifest_sha256: str | None = None

    @classmethod
    def from_json(cls, o: _Obj) -> SuiteStatistics:
        strata, classes = o.obj("allocation_strata"), o.obj("semantic_classes")
        return cls(
            o.int_("contexts"), ContextSelection.from_json(o.obj("context_selection")),
            o.num("kl_micro_token_mean"),
            o.num("kl_macro_allocation_stratum_mean"),
            [DepthBucket.from_json(b) for b in o.items("context_depth_buckets")],
            ClusterBootstrap.from_json(o.obj("kl_context_bootstrap")),
            ClusterBootstrap.from_json(o.obj("kl_source_cluster_bootstrap")),
            StratifiedBootstrap.from_json(o.obj("kl_stratified_source_cluster_bootstrap")),
            {k: ClusterBootstrap.from_json(strata.obj(k)) for k in strata.doc},
            {k: ClusterBootstrap.from_json(classes.obj(k)) for k in classes.doc},
            [ContextRank.from_json(r) for r in o.items("high_kld_contexts")],
            [ContextRank.from_json(r) for r in o.items("top1_discordant_contexts")],
            [ContextEntry.from_json(e) for e in o.items("per_context")], o.opt_str("suite_manifest_sha256"))


# ----------------------------------------------------------------------------- the report


def _window_order(names: Iterable[str], window_domains: Sequence[str]) -> list[str]:
    """Domain names in the order their first window comes (the order compare builds them in;
    files keep keys sorted), then any the windows do not name."""
    given = list(names)
    first = [d for d in dict.fromkeys(window_domains) if d in given]
    return first + [d for d in given if d not in first]


@dataclass(frozen=True)
class ComparisonReport(_Part):
    """A comparison report: the original comparator's fields first (required where the original
    always wrote them), then kldtui's (``None`` in an original report)."""

    direction: str
    positions: int
    windows: int
    kl_reference_to_candidate: Stats
    kl_window_cluster_bootstrap: Bootstrap
    per_window: list[WindowEntry]
    domains: dict[str, Bootstrap] = field(default_factory=dict)
    reference_dir: str | None = None
    candidate_dir: str | None = None
    window_range: tuple[int, int] | None = None
    js: Stats | None = None
    top1_agreement: float | None = None
    # kldtui's fields
    report_format: str | None = None  # REPORT_FORMAT; None: the original comparator's report
    suite_token_hash_sha256: str | None = field(default=None, metadata=_KEEP_NULL)
    reference_manifest_sha256: str | None = field(default=None, metadata=_KEEP_NULL)
    # the reference's content over the compared windows (kldtui.formats.reference_identity): what
    # pairs two reports, whatever time or server port the reference manifest records
    reference_identity_sha256: str | None = None
    # set when the reference was decoded from a lossy file (an imported llama.cpp base file)
    reference_encoding: ReferenceEncoding | None = None
    vocab_size: int | None = None
    js_window_cluster_bootstrap: Bootstrap | None = None
    kl_candidate_to_reference: Stats | None = None
    kl_reverse_window_cluster_bootstrap: Bootstrap | None = None
    topk_agreement: TopK | None = None
    next_token: NextToken | None = None
    kl_by_reference_confidence: list[ConfidenceBucket] | None = None
    kl_by_position: list[PositionBucket] | None = None
    per_window_arrays: WindowTable | None = None
    provenance: Provenance | None = None
    noise_floor: NoiseFloorNote | None = None
    infinite_kl: InfiniteKL | None = None
    figures: dict[str, FigureSummary] | None = None  # registered per-row figures (kldtui.metrics.figures)
    # the candidate's size and bits per weight (kldtui.formats.model_size), when known
    candidate_size: ModelSize | None = None
    kl_mean_interval: HeadlineInterval | None = None  # the headline interval of mean KL (docs/STATISTICS.md)
    # hidden-state suites and replayed sides (the published comparator's names)
    reference: SideDescription | None = None
    candidate: SideDescription | None = None
    comparator: Comparator | None = None
    suite_statistics: SuiteStatistics | None = field(default=None, metadata=_FLAT)  # top-level fields
    extra: dict[str, Any] = field(default_factory=dict)  # fields this version does not know

    @property
    def unit(self) -> str:
        """What its windows are called: ``context`` for a hidden-state suite's (its statistics are
        there), else ``window`` (:func:`kldtui.formats.suite.unit_name`)."""
        return unit_name(contexts=self.suite_statistics is not None)

    @property
    def original(self) -> bool:
        """True for the original comparator's report (no kldtui fields)."""
        return self.report_format is None

    def window_table(self) -> WindowTable:
        """Per-window figures: ``per_window_arrays``, or for an original report the table its
        ``per_window`` entries imply."""
        if self.per_window_arrays is not None:
            return self.per_window_arrays
        return WindowTable.from_entries(self.per_window)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.original:  # an original report has none of kldtui's null-able fields
            out = {k: v for k, v in out.items() if v is not None}
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str = "report") -> ComparisonReport:
        """Validate a parsed JSON document; BadInput (one line: file, field, problem) otherwise."""
        if not isinstance(doc, dict):
            raise BadInput(f"{where}: not a comparison report (expected a JSON object, found {_kind(doc)}); "
                           f"{REPORT_REMEDY}")
        o = _Obj(doc, where, "")
        fmt = o.opt_str("report_format")
        if fmt is not None and fmt != REPORT_FORMAT:
            o.fail(f"{fmt!r} is not supported (expected {REPORT_FORMAT!r})", "report_format")
        figs = o.opt_obj("figures")
        figures = None if figs is None else {name: FigureSummary.from_json(figs.obj(name))
                                             for name in figs.doc}
        names = tuple(figures or ())
        per_window = [WindowEntry.from_json(e, names) for e in o.items("per_window")]
        wr = o.opt_list("window_range")
        if wr is not None and (len(wr) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                      for v in wr)):
            o.fail("expected [start, stop], two whole numbers", "window_range")
        domains = o.obj("domains") if "domains" in doc else None
        buckets = o.items("kl_by_reference_confidence") if o.has("kl_by_reference_confidence") else None
        positions = o.items("kl_by_position") if o.has("kl_by_position") else None

        def opt(key: str, make: Any) -> Any:
            sub = o.opt_obj(key)
            return make(sub) if sub is not None else None

        arrays = o.opt_obj("per_window_arrays")
        contexts = o.has("kl_stratified_source_cluster_bootstrap")  # a hidden-state suite's report
        known = {f.name for f in fields(cls)} | (set(SUITE_STATISTICS_KEYS) if contexts else set())
        report = cls(
            direction=o.str_("direction"), positions=o.int_("positions"), windows=o.int_("windows"),
            kl_reference_to_candidate=Stats.from_json(o.obj("kl_reference_to_candidate")),
            kl_window_cluster_bootstrap=Bootstrap.from_json(o.obj("kl_window_cluster_bootstrap")),
            per_window=per_window,
            domains={} if domains is None else {
                name: Bootstrap.from_json(domains.obj(name))
                for name in _window_order(domains.doc, [e.domain for e in per_window])},
            reference_dir=o.opt_str("reference_dir"), candidate_dir=o.opt_str("candidate_dir"),
            window_range=(wr[0], wr[1]) if wr is not None else None,
            js=opt("js", Stats.from_json), top1_agreement=o.opt_num("top1_agreement"),
            report_format=fmt,
            suite_token_hash_sha256=o.opt_str("suite_token_hash_sha256"),
            reference_manifest_sha256=o.opt_str("reference_manifest_sha256"),
            reference_identity_sha256=o.opt_str("reference_identity_sha256"),
            reference_encoding=opt("reference_encoding", ReferenceEncoding.from_json),
            vocab_size=o.opt_int("vocab_size"),
            js_window_cluster_bootstrap=opt("js_window_cluster_bootstrap", Bootstrap.from_json),
            kl_candidate_to_reference=opt("kl_candidate_to_reference", Stats.from_json),
            kl_reverse_window_cluster_bootstrap=opt("kl_reverse_window_cluster_bootstrap",
                                                    Bootstrap.from_json),
            topk_agreement=opt("topk_agreement", TopK.from_json),
            next_token=opt("next_token", NextToken.from_json),
            kl_by_reference_confidence=None if buckets is None else [
                ConfidenceBucket.from_json(b) for b in buckets],
            kl_by_position=None if positions is None else [PositionBucket.from_json(b) for b in positions],
            per_window_arrays=(None if arrays is None
                               else WindowTable.from_json(arrays, len(per_window), names)),
            provenance=opt("provenance", Provenance.from_json),
            noise_floor=opt("noise_floor", NoiseFloorNote.from_json),
            infinite_kl=opt("infinite_kl", InfiniteKL.from_json),
            figures=figures,
            candidate_size=(ModelSize.from_json(doc["candidate_size"], where)
                            if doc.get("candidate_size") is not None else None),
            kl_mean_interval=opt("kl_mean_interval", HeadlineInterval.from_json),
            reference=opt("reference", SideDescription.from_json),
            candidate=opt("candidate", SideDescription.from_json),
            comparator=opt("comparator", Comparator.from_json),
            suite_statistics=SuiteStatistics.from_json(o) if contexts else None,
            extra=o.rest(known),
        )
        check_figures(report, where)
        return report


# ----------------------------------------------------------------------------- impossible values

LN2 = math.log(2.0)
TOLERANCE = 1e-6  # rounding of figures computed in float32 by other tools (the original comparator)


class _Range:
    """A figure's possible values: ``low <= x <= high`` (with :data:`TOLERANCE`); +inf passes where
    ``high`` is infinite or ``infinite`` is set (a KL or NLL with masked tokens)."""

    def __init__(self, low: float, high: float, what: str, *, infinite: bool = False) -> None:
        self.low, self.high, self.what = low, high, what
        self.infinite = infinite or high == math.inf

    def problem(self, value: float | None) -> str | None:
        if value is None or (value == math.inf and self.infinite):
            return None
        if not (self.low - TOLERANCE <= value <= self.high + TOLERANCE):
            return f"{value!r} is impossible ({self.what})"
        return None


# a finite KL above KL_ROW_MAX cannot come from float32 logits; the statistics over such figures would
# overflow and leave a verdict without an interval
KL = _Range(0.0, KL_ROW_MAX, f"a KL divergence is >= 0 and, unless infinite, at most {KL_ROW_MAX:g}, the "
           "largest float32 logits give", infinite=True)
JS = _Range(0.0, LN2, "a Jensen-Shannon divergence is between 0 and ln 2")
FRACTION = _Range(0.0, 1.0, "a fraction is between 0 and 1")
PROBABILITY = _Range(0.0, 1.0, "a probability is between 0 and 1")
DELTA_P = _Range(-1.0, 1.0, "a difference of probabilities is between -1 and 1")
RMS_P = _Range(0.0, 1.0, "an RMS of probability differences is between 0 and 1")
NLL = _Range(0.0, math.inf, "a negative log-probability is >= 0 (a probability is at most 1)")
PERPLEXITY = _Range(1.0, math.inf, "a perplexity is >= 1")
RATIO = _Range(0.0, math.inf, "a ratio of perplexities is > 0")
# per-window figures by name (WindowEntry fields and per_window_arrays columns)
WINDOW_RANGES = {"kl_mean": KL, "kl_median": KL, "kl_p99": KL, "kl_max": KL, "kl_reverse_mean": KL,
                 "js_mean": JS, "top1_agreement": FRACTION, "top5_agreement": FRACTION,
                 "top10_agreement": FRACTION, "p_reference_mean": PROBABILITY,
                 "p_candidate_mean": PROBABILITY, "delta_p_mean": DELTA_P, "delta_p_rms": RMS_P,
                 "nll_reference_mean": NLL, "nll_candidate_mean": NLL}
_ORDER = ("min", "p0_1", "p1", "p5", "p10", "median", "p90", "p95", "p99", "p99_9", "max")


def _fail(where: str, at: str, what: str) -> NoReturn:
    raise BadInput(f"{where}: {at}: {what}; {_ADVICE}")


def _check(where: str, at: str, value: float | None, rng: _Range) -> None:
    problem = rng.problem(value)
    if problem is not None:
        _fail(where, at, problem)


def _slack(value: float) -> float:
    return TOLERANCE * max(1.0, abs(value)) if math.isfinite(value) else 0.0


def _check_stats(where: str, at: str, stats: Stats | DeltaP | None, rng: _Range) -> None:
    """Every figure in range, quantiles in order, the mean between the smallest and the largest."""
    if stats is None:
        return
    for f in fields(stats):
        value = getattr(stats, f.name)
        if isinstance(value, float | int):
            _check(where, f"{at}.{f.name}", value, RMS_P if f.name == "rms" else rng)
    known = [(k, getattr(stats, k)) for k in _ORDER if getattr(stats, k) is not None]
    for (k1, v1), (k2, v2) in zip(known, known[1:], strict=False):
        if v1 > v2 + _slack(v2):
            _fail(where, at, f"{k1} {v1!r} is above {k2} {v2!r}; quantiles are in order")
    lo = stats.min if stats.min is not None else -math.inf
    hi = stats.max if stats.max is not None else math.inf
    if stats.mean is not None and not (lo - _slack(lo) <= stats.mean <= hi + _slack(hi)):
        _fail(where, at, f"mean {stats.mean!r} is outside [min, max]")


def _check_bootstrap(where: str, at: str, boot: Bootstrap | Interval | None, rng: _Range) -> None:
    if boot is None:
        return
    _check(where, f"{at}.estimate", boot.estimate, rng)
    if boot.standard_error is not None and boot.standard_error < 0:
        _fail(where, at, f"standard_error {boot.standard_error!r} is negative")
    if (boot.ci95_low is not None and boot.ci95_high is not None
            and boot.ci95_low > boot.ci95_high + _slack(boot.ci95_high)):
        _fail(where, at, f"ci95_low {boot.ci95_low!r} is above ci95_high {boot.ci95_high!r}")
    if boot.bootstrap_samples is not None and boot.bootstrap_samples < 1:
        _fail(where, at, "bootstrap_samples is 0")


def _check_domain(where: str, at: str, name: str) -> None:
    from kldtui.formats.names import name_problem

    problem = name_problem(name)
    if problem is not None:
        _fail(where, at, f"domain {name[:40]!r} {problem}")


def _check_windows(report: ComparisonReport, where: str) -> None:
    if report.windows != len(report.per_window):
        _fail(where, "windows", f"{report.windows} but per_window lists {len(report.per_window)}")
    seen: set[int] = set()
    for n, w in enumerate(report.per_window):
        at = f"per_window[{n}]"
        if w.window_index in seen:
            _fail(where, "per_window", f"window {w.window_index} is listed twice")
        seen.add(w.window_index)
        rng = report.window_range
        if rng is not None and not rng[0] <= w.window_index < rng[1]:
            _fail(where, "window_range", f"{list(rng)} does not hold window {w.window_index} of {at}")
        _check_domain(where, f"{at}.domain", w.domain)
        _check_stats(where, f"{at}.kl_reference_to_candidate", w.kl_reference_to_candidate, KL)
        _check_stats(where, f"{at}.kl_candidate_to_reference", w.kl_candidate_to_reference, KL)
        _check_stats(where, f"{at}.js", w.js, JS)
        for key, krange in WINDOW_RANGES.items():
            _check(where, f"{at}.{key}", getattr(w, key), krange)
    table = report.per_window_arrays
    if table is not None:
        for n, d in enumerate(table.domain):
            _check_domain(where, f"per_window_arrays.domain[{n}]", d)
        if len(set(table.window_index)) != len(table.window_index):
            _fail(where, "per_window_arrays.window_index", "a window is listed twice")
        for key, krange in WINDOW_RANGES.items():
            for n, value in enumerate(getattr(table, key) or ()):
                _check(where, f"per_window_arrays.{key}[{n}]", value, krange)


def _check_contexts(stats: SuiteStatistics | None, where: str) -> None:
    """A hidden-state suite's ``per_context``, which the clustered verdicts are made from, as
    :func:`_check_windows` checks ``per_window``: as many entries as ``contexts``, none twice, figures
    in range."""
    if stats is None:
        return
    if stats.contexts != len(stats.per_context):
        _fail(where, "contexts", f"{stats.contexts} but per_context lists {len(stats.per_context)}")
    seen: set[int] = set()
    for n, e in enumerate(stats.per_context):
        at = f"per_context[{n}]"
        if e.context_index in seen:
            _fail(where, "per_context", f"context {e.context_index} is listed twice")
        seen.add(e.context_index)
        _check_stats(where, f"{at}.kl_reference_to_candidate", e.kl_reference_to_candidate, KL)
        _check_stats(where, f"{at}.js", e.js, JS)
        _check(where, f"{at}.top1_agreement", e.top1_agreement, FRACTION)


def check_figures(report: ComparisonReport, where: str = "report") -> None:
    """BadInput (one line: file, field, why) at the first impossible value of ``report``: a
    negative KL, a fraction or probability outside [0, 1], a JS above ln 2, quantiles out of order,
    a perplexity below 1, a bad domain name, windows (or a hidden-state suite's contexts) listed twice
    or outside ``window_range``, a window (context) count that is not the list's. Diff, leaderboard,
    noise and the viewer then never show a damaged figure (a top-1 agreement of 700 %)."""
    _check_stats(where, "kl_reference_to_candidate", report.kl_reference_to_candidate, KL)
    _check_stats(where, "kl_candidate_to_reference", report.kl_candidate_to_reference, KL)
    _check_stats(where, "js", report.js, JS)
    _check(where, "top1_agreement", report.top1_agreement, FRACTION)
    _check_bootstrap(where, "kl_window_cluster_bootstrap", report.kl_window_cluster_bootstrap, KL)
    _check_bootstrap(where, "kl_reverse_window_cluster_bootstrap", report.kl_reverse_window_cluster_bootstrap,
                     KL)
    _check_bootstrap(where, "js_window_cluster_bootstrap", report.js_window_cluster_bootstrap, JS)
    for name, boot in report.domains.items():
        _check_domain(where, f"domains.{name[:40]}", name)
        _check_bootstrap(where, f"domains.{name}", boot, KL)
    _check_windows(report, where)
    _check_contexts(report.suite_statistics, where)
    topk = report.topk_agreement
    if topk is not None:
        last = 0.0
        for k in sorted(topk.k):
            value = topk.at(k)
            _check(where, f"topk_agreement.{k}", value, FRACTION)
            if value is not None:
                if value < last - TOLERANCE:
                    _fail(where, "topk_agreement", f"top-{k} {value!r} is below a smaller k's {last!r}; "
                                                   "agreement grows with k")
                last = value
    nt = report.next_token
    if nt is not None:
        _check_stats(where, "next_token.p_reference", nt.p_reference, PROBABILITY)
        _check_stats(where, "next_token.p_candidate", nt.p_candidate, PROBABILITY)
        _check_stats(where, "next_token.delta_p", nt.delta_p, DELTA_P)
        _check(where, "next_token.perplexity_reference", nt.perplexity_reference, PERPLEXITY)
        _check(where, "next_token.perplexity_candidate", nt.perplexity_candidate, PERPLEXITY)
        _check(where, "next_token.perplexity_ratio", nt.perplexity_ratio, RATIO)
        _check(where, "next_token.log_perplexity_reference", nt.log_perplexity_reference, NLL)
        _check(where, "next_token.log_perplexity_candidate", nt.log_perplexity_candidate, NLL)
        _check_bootstrap(where, "next_token.perplexity_ratio_window_cluster_bootstrap",
                         nt.perplexity_ratio_window_cluster_bootstrap, RATIO)
    for n, b in enumerate(report.kl_by_reference_confidence or ()):
        at = f"kl_by_reference_confidence[{n}]"
        _check(where, f"{at}.low", b.low, PROBABILITY)
        _check(where, f"{at}.high", b.high, PROBABILITY)
        if b.low > b.high:
            _fail(where, at, f"low {b.low!r} is above high {b.high!r}")
        _check(where, f"{at}.kl_mean", b.kl_mean, KL)
        _check(where, f"{at}.top1_agreement", b.top1_agreement, FRACTION)
    for n, pb in enumerate(report.kl_by_position or ()):
        at = f"kl_by_position[{n}]"
        if pb.start > pb.stop:
            _fail(where, at, f"start {pb.start} is after stop {pb.stop}")
        _check(where, f"{at}.kl_mean", pb.kl_mean, KL)


def as_report(report: ComparisonReport | Mapping[str, Any], where: str = "report") -> ComparisonReport:
    """A report as the model: a parsed JSON document is validated first."""
    if isinstance(report, ComparisonReport):
        return report
    return ComparisonReport.from_json(dict(report), where)


__all__ = ["Bootstrap", "ClusterBootstrap", "Comparator", "ComparisonReport", "ConfidenceBucket",
           "ContextEntry", "ContextRank", "ContextSelection", "DeltaP", "DepthBucket", "FigureSummary",
           "InfiniteKL", "Interval", "NextToken", "NoiseFloorNote", "PositionBucket", "Provenance",
           "REPORT_FORMAT", "ReferenceEncoding", "SUITE_STATISTICS_KEYS", "SideDescription", "Stats",
           "StratifiedBootstrap", "SuiteStatistics", "TopK", "Verified", "WindowEntry", "WindowTable",
           "as_report", "check_figures"]
