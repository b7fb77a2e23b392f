"""Comparison reports: atomic writing, loading (kldtui's and the original comparator's) and the
human-readable summary.  The schema is docs/REPORT.md."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.formats.atomic import write_json_atomic

REPORT_FORMAT = "kldtui-comparison-v1"
ORIGINAL_FORMAT = "original"
STATS_KEYS = ("mean", "median", "p95", "p99", "max")
BOOTSTRAP_KEYS = ("estimate", "standard_error", "ci95_low", "ci95_high")
# per_window_arrays keys derivable from an original report's per_window entries
_FROM_ORIGINAL = {"kl_mean": ("kl_reference_to_candidate", "mean"),
                  "kl_median": ("kl_reference_to_candidate", "median"),
                  "kl_p99": ("kl_reference_to_candidate", "p99"),
                  "kl_max": ("kl_reference_to_candidate", "max"),
                  "js_mean": ("js", "mean")}


def write_report(path: str | os.PathLike[str] | dict[str, Any],
                 report: dict[str, Any] | str | os.PathLike[str]) -> Path:
    """Write ``report`` to ``path`` atomically (keys sorted, 2-space indent); nothing appears under
    ``path`` unless the whole document was written.  Accepts ``(path, report)`` or ``(report, path)``."""
    if isinstance(path, dict):
        path, report = report, path
    assert isinstance(report, dict) and not isinstance(path, dict)
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"{target}: is a folder; give --output a file name such as comparison.json")
    if not target.parent.exists():
        raise BadInput(f"{target}: folder {target.parent} does not exist; create it first")
    write_json_atomic(target, report)
    return target


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_stats(doc: Any, where: str, what: str) -> None:
    if not isinstance(doc, dict) or not all(_number(doc.get(k)) for k in STATS_KEYS):
        raise BadInput(f"{where}: {what} must be an object with numbers {', '.join(STATS_KEYS)}; "
                       "not a comparison report, or a damaged one")


def _check_bootstrap(doc: Any, where: str, what: str) -> None:
    if not isinstance(doc, dict) or not all(_number(doc.get(k)) for k in BOOTSTRAP_KEYS):
        raise BadInput(f"{where}: {what} must be an object with numbers {', '.join(BOOTSTRAP_KEYS)}; "
                       "not a comparison report, or a damaged one")


def normalise_report(doc: Any, where: str = "report") -> dict[str, Any]:
    """Validate a report's structure and fill what readers rely on.

    Both kldtui's reports and the original comparator's are accepted. The result keeps every
    field and adds ``report_format`` ("original" when absent) and, for original reports,
    ``per_window_arrays`` built from ``per_window``.  BadInput (one line) on anything else.
    """
    if not isinstance(doc, dict):
        raise BadInput(f"{where}: not a comparison report (expected a JSON object)")
    for key in ("direction", "positions", "windows", "kl_reference_to_candidate",
                "kl_window_cluster_bootstrap", "per_window"):
        if key not in doc:
            raise BadInput(f"{where}: missing field {key!r}; not a comparison report")
    if not _number(doc["positions"]) or not _number(doc["windows"]):
        raise BadInput(f"{where}: positions and windows must be numbers")
    _check_stats(doc["kl_reference_to_candidate"], where, "kl_reference_to_candidate")
    if "js" in doc:
        _check_stats(doc["js"], where, "js")
    _check_bootstrap(doc["kl_window_cluster_bootstrap"], where, "kl_window_cluster_bootstrap")
    domains = doc.get("domains", {})
    if not isinstance(domains, dict):
        raise BadInput(f"{where}: domains must be an object")
    for name, boot in domains.items():
        _check_bootstrap(boot, where, f"domains.{name}")
    per_window = doc["per_window"]
    if not isinstance(per_window, list):
        raise BadInput(f"{where}: per_window must be a list")
    for n, entry in enumerate(per_window):
        if not isinstance(entry, dict) or not isinstance(entry.get("window_index"), int):
            raise BadInput(f"{where}: per_window[{n}] has no window_index")
        _check_stats(entry.get("kl_reference_to_candidate"), where,
                     f"per_window[{n}] (window {entry['window_index']}) kl_reference_to_candidate")
    out = dict(doc)
    fmt = out.get("report_format")
    if fmt is None:
        out["report_format"] = ORIGINAL_FORMAT
    elif fmt != REPORT_FORMAT:
        raise BadInput(f"{where}: report_format {fmt!r} is not supported (expected {REPORT_FORMAT!r})")
    arrays = out.get("per_window_arrays")
    if arrays is None:
        arrays = {"window_index": [e["window_index"] for e in per_window],
                  "domain": [str(e.get("domain", "")) for e in per_window],
                  "positions": [int(e.get("positions", 0)) for e in per_window]}
        for key, (group, stat) in _FROM_ORIGINAL.items():
            if all(isinstance(e.get(group), dict) and _number(e[group].get(stat)) for e in per_window):
                arrays[key] = [float(e[group][stat]) for e in per_window]
        if all(_number(e.get("top1_agreement")) for e in per_window):
            arrays["top1_agreement"] = [float(e["top1_agreement"]) for e in per_window]
        out["per_window_arrays"] = arrays
    elif not isinstance(arrays, dict) or not isinstance(arrays.get("kl_mean"), list):
        raise BadInput(f"{where}: per_window_arrays must be an object of lists with kl_mean")
    else:
        lengths = {len(v) for v in arrays.values() if isinstance(v, list)}
        if len(lengths) != 1 or lengths != {len(per_window)}:
            raise BadInput(f"{where}: per_window_arrays lists differ in length from per_window")
    return out


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and normalise a comparison report file (kldtui's or the original comparator's)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{p}: comparison report not found") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a folder, expected a comparison report (JSON)") from None
    except UnicodeDecodeError:
        raise BadInput(f"{p}: not a JSON comparison report (not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{p}: not a JSON comparison report ({exc})") from None
    except RecursionError:
        raise BadInput(f"{p}: not a comparison report (JSON nested too deeply)") from None
    return normalise_report(doc, str(p))


def _f(value: Any, digits: int = 6) -> str:
    return f"{value:.{digits}g}" if _number(value) else "n/a"


def _pct(value: Any) -> str:
    return f"{100.0 * value:.4f} %" if _number(value) else "n/a"


def summary_text(report: dict[str, Any]) -> str:
    """A human-readable multi-line summary; the first line is the headline."""
    boot = report.get("kl_window_cluster_bootstrap", {})
    kl = report.get("kl_reference_to_candidate", {})
    js = report.get("js", {})
    lines = [
        f"KL(reference || candidate) = {_f(boot.get('estimate'))}  95% CI [{_f(boot.get('ci95_low'))}, "
        f"{_f(boot.get('ci95_high'))}]  (window-cluster bootstrap, {report.get('windows')} windows, "
        f"{report.get('positions')} positions)",
        f"  candidate {report.get('candidate_dir', '?')}  vs reference {report.get('reference_dir', '?')}",
        f"  per-token KL: mean {_f(kl.get('mean'))}  median {_f(kl.get('median'))}  p95 {_f(kl.get('p95'))}"
        f"  p99 {_f(kl.get('p99'))}  max {_f(kl.get('max'))}",
    ]
    if js:
        lines.append(f"  JS: mean {_f(js.get('mean'))}  median {_f(js.get('median'))}  "
                     f"p99 {_f(js.get('p99'))}")
    topk = report.get("topk_agreement")
    if isinstance(topk, dict):
        lines.append("  top-k agreement: " + "  ".join(f"top{k} {_pct(topk.get(str(k)))}"
                                                      for k in topk.get("k", [1, 5, 10])))
    else:
        lines.append(f"  top-1 agreement: {_pct(report.get('top1_agreement'))}")
    rev = report.get("kl_candidate_to_reference")
    if isinstance(rev, dict):
        rb = report.get("kl_reverse_window_cluster_bootstrap", {})
        lines.append(f"  KL(candidate || reference) = {_f(rb.get('estimate', rev.get('mean')))}  "
                     f"95% CI [{_f(rb.get('ci95_low'))}, {_f(rb.get('ci95_high'))}]")
    nt = report.get("next_token")
    if isinstance(nt, dict):
        pb = nt.get("perplexity_ratio_window_cluster_bootstrap", {})
        dp = nt.get("delta_p", {})
        lines.append(f"  next token: perplexity ref {_f(nt.get('perplexity_reference'))}  cand "
                     f"{_f(nt.get('perplexity_candidate'))}  ratio {_f(nt.get('perplexity_ratio'))} "
                     f"[{_f(pb.get('ci95_low'))}, {_f(pb.get('ci95_high'))}]  "
                     f"Δp mean {_f(dp.get('mean'))} rms {_f(dp.get('rms'))}")
    domains = report.get("domains")
    if isinstance(domains, dict) and domains:
        lines.append("  by domain: " + "  ".join(
            f"{name} {_f(b.get('estimate'))} [{_f(b.get('ci95_low'))}, {_f(b.get('ci95_high'))}]"
            for name, b in domains.items() if isinstance(b, dict)))
    buckets = report.get("kl_by_reference_confidence")
    if isinstance(buckets, list) and buckets:
        lines.append("  KL by reference confidence: " + "  ".join(
            f"[{b.get('low')},{b.get('high')}{']' if b.get('high') == 1.0 else ')'} {_f(b.get('kl_mean'), 4)}"
            f" (n={b.get('positions')})" for b in buckets))
    prov = report.get("provenance")
    if isinstance(prov, dict):
        lines.append(f"  {prov.get('backend', '?')} backend, {_f(prov.get('elapsed_seconds'), 4)} s, "
                     f"{_f(prov.get('throughput_gb_per_s'), 3)} GB/s compared; kldtui "
                     f"{prov.get('kldtui_version', '?')}")
    elif report.get("report_format") == ORIGINAL_FORMAT:
        lines.append("  (original comparator report)")
    return "\n".join(lines)


__all__ = ["load_report", "normalise_report", "summary_text", "write_report"]
