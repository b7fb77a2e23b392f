"""Hidden-state suites (the published "distribution-fidelity" layout): names, manifests, hashes,
reading with validation, and writing (docs/FORMATS.md, "Hidden-state suites").

A hidden-state suite stores, per context, the model's final hidden states (BF16, after the final
norm, before the LM head) instead of its logits, plus the LM head once; logits are replayed
(:mod:`kldtui.metrics.replay`).  The layout::

    manifest.json                      top-level identity (TopManifest)
    suite-manifest.json                the contexts (loaded as a Suite: one window per context)
    partitions.json, sources.json, source-registry.json, capture-runtime.json
    tokens/context-NNNN.json           compact JSON token ids + newline
    reference-hidden/manifest.json     a tensor folder (TensorManifest, kind "hidden")
    reference-hidden/hidden_NNNN.safetensors
    lm-head/manifest.json, lm-head/weight.safetensors          (LmHead)
    sentinel-hidden/repeat-NN/...      more hidden runs of the sentinel contexts
    sentinel-live-logits/repeat-NN/logits_NNNN.safetensors     (TensorManifest, kind "logits")
    checksums.txt                      "<sha256>  <relpath>" for every other file

Reading validates what kldtui relies on and refuses impossible values (negative or mismatched
sizes, shapes that disagree with the widths, a total that is not the sum of its records, hashes
that are not SHA-256 hex, paths that leave their folder, absolute runtime paths); every error is
one line naming the file and the field.  Files are read through :mod:`kldtui.formats.safe_io`
(never blocking on a FIFO, never a device).  Everything here works on manifests and headers;
hashing whole files (with the verified-file cache) is the verify stage's.

Writing is for producers (finalize in hidden mode, the LM-head export, prepare, tests): every
JSON file with 2-space indentation, sorted keys and a trailing newline; every tensor file atomic
and never overwritten.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kldtui.errors import BadField, BadInput, remedy
from kldtui.formats.atomic import atomic_open, write_bytes_atomic, write_json_atomic
from kldtui.formats.fidelity_names import CONTEXT_FILTERS, PARTITION_NAMES, parse_context_filter
from kldtui.formats.names import check_name, check_relative_path
from kldtui.formats.safe_io import kind_of, read_failure, read_text
from kldtui.formats.safetensors_io import (
    DTYPES,
    SafetensorsHeader,
    TensorInfo,
    encode_header,
    read_header,
)
from kldtui.formats.suite import (
    LOGITS_DAMAGED,
    LOGITS_REMEDY,
    MANIFEST_LIMIT,
    MAX_ROW_WIDTH,
    SUITE_DAMAGED,
    SUITE_MANIFEST,
    SUITE_REMEDY,
    TOKENS_DIR,
    LogitsEntry,
    LogitsManifest,
    Suite,
    WindowSpec,
    read_versioned,
    require_field,
    require_width,
    suite_token_hash,
    token_ids_hash,
    token_ids_json,
    unit_of,
)

# ---------------------------------------------------------------------------------------- names

TOP_MANIFEST = "manifest.json"
TENSOR_MANIFEST = "manifest.json"
PARTITIONS = "partitions.json"
SOURCES = "sources.json"
SOURCE_REGISTRY = "source-registry.json"
CAPTURE_RUNTIME = "capture-runtime.json"
CHECKSUMS = "checksums.txt"
# bytes of a suite's checksums.txt read: a line of about 100 bytes per file (its SHA-256 and path), so a
# suite of a few thousand files lists well under 1 MB
CHECKSUMS_LIMIT = 64 * 1024 * 1024
HIDDEN_DIR = "reference-hidden"
LM_HEAD_DIR = "lm-head"
HEAD_FILE = "weight.safetensors"
SENTINEL_HIDDEN_DIR = "sentinel-hidden"
SENTINEL_LIVE_DIR = "sentinel-live-logits"
VALIDATION_DIR = "validation"
CACHE_DIR = ".cache"  # never listed in checksums.txt (the Hub client's own folder)
KLDTUI_PREFIX = ".kldtui"  # kldtui's own files in a suite folder (download record, partial files, locks)
# What to do about a damaged file of a complete hidden-state suite (its top-level manifest.json and
# checksums.txt: written when its reference is finalized, or downloaded) and of an LM head
HIDDEN_SUITE_DAMAGED = "download the suite again, or capture and finalize its reference again"
# the top-level manifest's ``status``: the replay check's verdict (docs/FORMATS.md), or none was made
TOP_STATUSES = ("qualified", "not qualified", "replay not checked")
# ``capture-runtime.json``'s ``status``, which the top-level manifest's ``capture_runtime.status`` repeats:
# kldtui writes "captured" (kldtui.capture_modes.hidden_suite), the published suite says "qualified"
RUNTIME_CAPTURED = "captured"
RUNTIME_STATUSES = (RUNTIME_CAPTURED, "qualified")
HEAD_DAMAGED = "export the head again (kldtui export-head) or download it again"

HIDDEN_KEY = "hidden_states"
LIVE_KEY = "logits"
HEAD_KEY = "weight"
HEAD_CHECKPOINT_KEY = "language_model.lm_head.weight"  # Kimi K3's; other models name theirs
SEMANTIC_HIDDEN = "after_final_rmsnorm_before_lm_head"
SEMANTIC_LIVE = "live_lm_head_output_before_sampling"
KIND_HIDDEN_TEXT = "final-normalized pre-LM-head hidden states"
KIND_LIVE_TEXT = "native live prompt logits"
DATASET_SLICE_DOMAIN = "hugging-face-dataset-slice-v1"
DEPTH_BUCKETS: tuple[tuple[int, int], ...] = ((0, 256), (256, 512), (512, 1024), (1024, 1536), (1536, 2047))

TensorKind = Literal["hidden", "logits"]
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def context_token_file(index: int) -> str:
    """A context's token file, relative to the suite folder."""
    return f"{TOKENS_DIR}/context-{index:04d}.json"


@dataclass(frozen=True)
class TensorKindSpec:
    """What differs between the two kinds of tensor folder (hidden states and live logits): one home
    for each, read by the manifest's reader and writer and the context files' writer."""

    file_prefix: str  # hidden_NNNN.safetensors / logits_NNNN.safetensors
    tensor_key: str  # the key inside each file (the manifest's default tensor_key)
    semantic_point: str
    kind_text: str  # the manifest's default "kind" words
    width_field: str  # hidden_width / vocab_size
    dtypes: tuple[str, ...]  # what its files may hold
    extra_rows: bool  # a file may hold rows past the scored ones (hidden states of the whole context)
    needs_head: bool  # its rows become logits only through the LM head (compare and score replay them)

    def file_name(self, index: int) -> str:
        return f"{self.file_prefix}_{index:04d}.safetensors"


TENSOR_KINDS: dict[TensorKind, TensorKindSpec] = {
    "hidden": TensorKindSpec("hidden", HIDDEN_KEY, SEMANTIC_HIDDEN, KIND_HIDDEN_TEXT, "hidden_width",
                             ("BF16",), extra_rows=True, needs_head=True),
    "logits": TensorKindSpec("logits", LIVE_KEY, SEMANTIC_LIVE, KIND_LIVE_TEXT, "vocab_size",
                             ("BF16", "F32"), extra_rows=False, needs_head=False),
}


def hidden_file_name(index: int) -> str:
    return TENSOR_KINDS["hidden"].file_name(index)


def live_logits_file_name(index: int) -> str:
    return TENSOR_KINDS["logits"].file_name(index)


def tensor_file_name(kind: TensorKind, index: int) -> str:
    return TENSOR_KINDS[kind].file_name(index)


def repeat_dir(repeat: int) -> str:
    return f"repeat-{repeat:02d}"


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------- hashes


def domain_hash(salt: str, *values: str) -> str:
    """SHA-256 hex of the salt and the values joined with NUL bytes (UTF-8): selection keys,
    dataset fingerprints, the partition and sentinel orders."""
    return hashlib.sha256("\0".join((salt, *values)).encode("utf-8")).hexdigest()


def dataset_fingerprint(dataset: str, revision: str, config: str | None, split: str) -> str:
    return domain_hash(DATASET_SLICE_DOMAIN, dataset, revision, config or "", split)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and bool(_HEX64.match(value))


def _sha(doc: Mapping[str, Any], key: str, where: str) -> str:
    value: str = require_field(dict(doc), key, str, where)
    if not _HEX64.match(value):
        raise BadField(f"{where}: field {key!r} is not a SHA-256 (64 lower-case hex digits): {value[:80]!r}")
    return value


def _whole(doc: Mapping[str, Any], key: str, where: str, *, minimum: int = 0) -> int:
    value = require_field(dict(doc), key, int, where)
    if value < minimum:
        raise BadField(f"{where}: field {key!r} is {value}, it must be at least {minimum}")
    return int(value)


def _shape(value: object, key: str, where: str) -> tuple[int, int]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)):
        raise BadField(f"{where}: field {key!r} {str(value)[:80]} must be two whole numbers > 0 "
                       "[rows, width]")
    return int(value[0]), int(value[1])


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class ContextInfo:
    """A context's identity beyond its window: stratum, partition, sentinel, source."""

    index: int
    allocation_stratum: str
    semantic_class: str
    partition: str
    sentinel: bool
    dataset: str | None
    dataset_config: str | None
    dataset_revision: str | None
    dataset_split: str | None
    source_id: str | None
    source_cluster_id: str | None
    source_content_sha256: str | None
    language: str | None
    representation_type: str | None

    @property
    def cluster_key(self) -> str:
        """The source cluster (the published rule): the compact JSON of ``[dataset,
        source_cluster_id]``; without a cluster id, of ``[dataset, source_id]``; without either,
        the context's own index (a cluster of one)."""
        if self.source_cluster_id is not None:
            return compact_json([self.dataset, self.source_cluster_id])
        if self.source_id is not None:
            return compact_json([self.dataset, self.source_id])
        return compact_json(["context", self.index])

    def identity(self) -> dict[str, Any]:
        """The per-context identity fields a receipt carries (paired comparisons key on them)."""
        return {"context_index": self.index, "allocation_stratum": self.allocation_stratum,
                "semantic_class": self.semantic_class, "partition": self.partition,
                "sentinel": self.sentinel, "dataset": self.dataset, "dataset_config": self.dataset_config,
                "dataset_revision": self.dataset_revision, "dataset_split": self.dataset_split,
                "source_id": self.source_id, "source_cluster_id": self.source_cluster_id,
                "source_content_sha256": self.source_content_sha256, "language": self.language,
                "representation_type": self.representation_type}


def _opt_str(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadField(f"{where}: field {key!r} must be text, found {type(value).__name__}")
    return str(value)


def context_info(window: WindowSpec) -> ContextInfo | None:
    """The context identity of a hidden-state suite's window (None for a logits suite's window)."""
    raw = window.raw
    if not window.context:
        return None
    where = f"context {window.index}"
    return ContextInfo(
        index=window.index, allocation_stratum=window.domain,
        semantic_class=_opt_str(raw, "semantic_class", where) or window.domain,
        partition=str(raw.get("partition", "analysis")), sentinel=bool(raw.get("sentinel", False)),
        dataset=_opt_str(raw, "dataset", where), dataset_config=_opt_str(raw, "dataset_config", where),
        dataset_revision=_opt_str(raw, "dataset_revision", where),
        dataset_split=_opt_str(raw, "dataset_split", where), source_id=_opt_str(raw, "source_id", where),
        source_cluster_id=_opt_str(raw, "source_cluster_id", where),
        source_content_sha256=_opt_str(raw, "source_content_sha256", where),
        language=_opt_str(raw, "language", where),
        representation_type=_opt_str(raw, "representation_type", where))


def is_sentinel(window: WindowSpec) -> bool:
    """Whether a window is a sentinel context of a hidden-state suite."""
    info = context_info(window)
    return info is not None and info.sentinel


def cluster_key(window: WindowSpec) -> str:
    """The resampling unit of a window: its source cluster for a hidden-state suite's context
    (:attr:`ContextInfo.cluster_key`), the window itself for a logits suite's window."""
    info = context_info(window)
    return info.cluster_key if info is not None else compact_json(["window", window.index])


def is_context_suite(suite: Suite) -> bool:
    return bool(suite.windows) and suite.windows[0].context


def suite_from_contexts(p: Path, doc: dict[str, Any]) -> Suite:
    """A hidden-state suite's ``suite-manifest.json`` (already read, format version 1) as a
    :class:`Suite` of one window per context (``domain`` = the allocation stratum); every count
    the manifest states is checked against its contexts."""
    where = str(p)
    context_length = _whole(doc, "context_length", where, minimum=2)
    count = _whole(doc, "context_count", where, minimum=1)
    suite_hash = _sha(doc, "suite_token_hash_sha256", where)
    entries = require_field(doc, "contexts", list, where)
    if len(entries) != count:
        raise BadField(f"{where}: context_count is {count} but {len(entries)} contexts are listed")
    scored = doc.get("scored_positions_per_context", context_length - 1)
    if scored != context_length - 1:
        raise BadField(f"{where}: scored_positions_per_context {scored} must be context_length - 1 "
                       f"({context_length - 1})")
    total = doc.get("total_scored_positions", count * (context_length - 1))
    if total != count * (context_length - 1):
        raise BadField(f"{where}: total_scored_positions {total} differs from {count} contexts x "
                       f"{context_length - 1} positions")
    windows: list[WindowSpec] = []
    by_stratum: dict[str, int] = {}
    partitions: dict[str, int] = {}
    sentinels = 0
    for position, entry in enumerate(entries):
        c_where = f"{where} contexts[{position}]"
        if not isinstance(entry, dict):
            raise BadField(f"{c_where}: expected an object")
        index = _whole(entry, "index", c_where)
        if index != position or entry.get("context_index", index) != index:
            raise BadField(f"{c_where}: index {index} (context_index {entry.get('context_index')}) is out of "
                           f"order (expected {position})")
        num_tokens = _whole(entry, "num_tokens", c_where)
        if num_tokens != context_length:
            raise BadField(f"{c_where}: num_tokens {num_tokens} differs from context_length {context_length}")
        start = entry.get("scored_row_start", 0)
        stop = entry.get("scored_row_end_exclusive", context_length - 1)
        if start != 0 or stop != context_length - 1:
            raise BadField(f"{c_where}: scored rows [{start}, {stop}) must be [0, {context_length - 1}): "
                           "row r predicts token r + 1")
        stratum = check_name(require_field(entry, "allocation_stratum", str, c_where), "allocation_stratum",
                             c_where)
        partition = entry.get("partition", "analysis")
        if partition not in PARTITION_NAMES:
            raise BadField(f"{c_where}: partition {str(partition)[:40]!r} is not one of "
                           f"{', '.join(PARTITION_NAMES)}")
        sentinel = entry.get("sentinel", False)
        if not isinstance(sentinel, bool):
            raise BadField(f"{c_where}: sentinel must be true or false")
        partitions[partition] = partitions.get(partition, 0) + 1
        sentinels += sentinel
        windows.append(WindowSpec(
            index=index, domain=stratum, domain_index=by_stratum.get(stratum, 0), num_tokens=num_tokens,
            token_file=check_relative_path(require_field(entry, "token_file", str, c_where), "token_file",
                                           c_where),
            token_ids_json_sha256=_sha(entry, "token_ids_json_sha256", c_where), raw=entry,
            context=True))
        by_stratum[stratum] = by_stratum.get(stratum, 0) + 1
    for key, counted in (("allocation_counts", by_stratum), ("partition_counts", partitions)):
        stated = doc.get(key)
        if isinstance(stated, dict) and {k: v for k, v in stated.items() if v} != counted:
            raise BadField(f"{where}: {key} {compact_json(stated)[:200]} differs from the contexts "
                           f"({compact_json(counted)[:200]})")
    if "sentinel_count" in doc and doc["sentinel_count"] != sentinels:
        raise BadField(f"{where}: sentinel_count {doc['sentinel_count']} differs from the {sentinels} "
                       "contexts marked sentinel")
    return Suite(root=p.parent, path=p, format_version=1, context_length=context_length,
                 window_count=count, suite_token_hash_sha256=suite_hash, windows=tuple(windows),
                 domain_counts=by_stratum, raw=doc)


@dataclass(frozen=True)
class ContextFilter:
    """A subset of a hidden-state suite's contexts: the published filters (``all``, ``analysis``,
    ``qualification``, ``sentinel``, ``non-sentinel``), allocation strata, an index range.
    ``origin``: the flag or profile key that chose the filter, named by its errors."""

    which: str = "all"
    strata: tuple[str, ...] = ()
    start: int = 0
    stop: int | None = None
    origin: str = field(default="--context-filter", compare=False)

    def __post_init__(self) -> None:
        parse_context_filter(self.which, self.origin)

    @property
    def is_everything(self) -> bool:
        return not self.filters and self.start == 0 and self.stop is None

    @property
    def filters(self) -> bool:
        """Whether it keeps fewer windows than its index range: a partition, sentinels or strata."""
        return self.which != "all" or bool(self.strata)

    def keeps(self, window: WindowSpec) -> bool:
        if not self.start <= window.index < (self.stop if self.stop is not None else window.index + 1):
            return False
        if self.strata and window.domain not in self.strata:
            return False
        if self.which == "all":
            return True
        info = context_info(window)
        if info is None:
            raise BadInput(f"{self.origin} {self.which} needs a hidden-state suite (contexts with "
                           "partitions and sentinels); this suite has windows: leave it out")
        if self.which in PARTITION_NAMES:
            return info.partition == self.which
        return info.sentinel == (self.which == "sentinel")

    def select(self, suite: Suite) -> list[WindowSpec]:
        """The windows (contexts) of the range this filter keeps: the range alone when it filters
        nothing else (any suite), else :meth:`apply`."""
        if not self.filters:
            return suite.select(self.start, self.stop)
        return self.apply(suite)

    def apply(self, suite: Suite) -> list[WindowSpec]:
        """The suite's contexts this filter keeps; BadInput for an unknown stratum, a range outside
        the suite or an empty result."""
        unknown = [s for s in self.strata if s not in suite.domain_counts]
        if unknown:
            raise BadInput(f"{suite.path}: no stratum {unknown[0]!r} (the suite has "
                           f"{', '.join(suite.domain_counts)})")
        selected = [w for w in suite.select(self.start, self.stop) if self.keeps(w)]
        if not selected:
            raise BadInput(f"{suite.path}: no {unit_of(suite.windows)} is left by {self.describe()}; "
                           "widen the selection")
        return selected

    def indices_within(self, suite: Suite, start: int, stop: int) -> list[int]:
        """The indices of ``[start, stop)`` this filter keeps (its partition or sentinel filter and
        strata; every index of the range when it filters nothing else): what a reference stage fetches
        and verifies. BadInput for an unknown stratum, or a filter that keeps none of them, in the
        suite's unit (strata name a logits suite's domains too: ``no window of 0..1 is left``)."""
        if not self.filters:
            return list(range(start, stop))
        kept = [w.index for w in self.apply(suite) if start <= w.index < stop]
        if not kept:
            raise BadInput(f"{suite.path}: no {unit_of(suite.windows)} of {start}..{stop - 1} is left by "
                           f"{self.describe()}; widen the selection")
        return kept

    def describe(self) -> str:
        parts = [] if self.which == "all" else [self.which]
        if self.strata:
            parts.append("strata " + ", ".join(self.strata))
        if self.start or self.stop is not None:
            parts.append(f"indices [{self.start}, {'end' if self.stop is None else self.stop})")
        return "; ".join(parts) or "all contexts"


# ---------------------------------------------------------------------------- tensor folders


@dataclass(frozen=True)
class TensorRecord:
    """One context's file in a tensor folder's manifest."""

    context_index: int
    file: str
    key: str
    dtype: str
    shape: tuple[int, int]
    size_bytes: int
    sha256: str
    token_ids_json_sha256: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class TensorManifest:
    """A tensor folder's ``manifest.json`` (``reference-hidden/``, a sentinel repeat, live logits)."""

    root: Path
    path: Path
    kind: TensorKind
    width: int  # hidden_width (hidden) or vocab_size (logits)
    context_length: int
    suite_token_hash_sha256: str
    tensor_key: str
    semantic_point: str | None
    runtime_manifest: str | None
    runtime_manifest_sha256: str | None
    total_size_bytes: int
    entries: dict[int, TensorRecord]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def scored_rows(self) -> int:
        return self.context_length - 1

    @property
    def holds_hidden(self) -> bool:
        """Final hidden states (``reference-hidden/``, a hidden sentinel run): what needs an LM head."""
        return self.spec.needs_head

    @property
    def holds_logits(self) -> bool:
        """Live logits (a sentinel's full-vocabulary run): logits already, no head needed."""
        return not self.spec.needs_head

    @property
    def spec(self) -> TensorKindSpec:
        """What this kind of tensor folder is (:data:`TENSOR_KINDS`)."""
        return TENSOR_KINDS[self.kind]

    def entry(self, index: int) -> TensorRecord:
        if index not in self.entries:
            have = sorted(self.entries)
            span = f"{have[0]}..{have[-1]}" if have else "none"
            raise BadInput(f"{self.path}: context {index} is missing (this folder has contexts {span}, "
                           f"{len(have)} in all); download or capture it, or narrow the selection")
        return self.entries[index]

    def file_path(self, index: int) -> Path:
        record = self.entry(index)
        target = self.root / record.file
        try:
            resolved = target.resolve()
        except (RuntimeError, OSError) as exc:
            raise BadInput(f"{target}: context {index:04d} cannot be read ({exc})") from None
        if not resolved.is_relative_to(self.root.resolve()):
            raise BadInput(f"{self.path}: context {index} file {record.file!r} points outside {self.root}; "
                           "fix the manifest")
        return resolved

    def as_logits_manifest(self) -> LogitsManifest:
        """A live-logits folder as the compare and verify stages read logits folders."""
        if not self.holds_logits:
            raise BadInput(f"{self.path}: holds hidden states, not logits; compare replays it with an "
                           "LM head")
        have = sorted(self.entries)
        entries = {i: LogitsEntry(window_index=i, domain="", file=r.file, key=r.key, shape=r.shape,
                                  dtype=r.dtype, size_bytes=r.size_bytes, sha256=r.sha256,
                                  token_ids_json_sha256=r.token_ids_json_sha256, raw=r.raw)
                   for i, r in self.entries.items()}
        return LogitsManifest(root=self.root, path=self.path, vocab_size=self.width,
                              context_length=self.context_length, window_count=len(entries),
                              window_range=(have[0], have[-1] + 1) if have else (0, 0),
                              suite_token_hash_sha256=self.suite_token_hash_sha256,
                              tensor_key=self.tensor_key, entries=entries,
                              runtime=self.raw.get("runtime_manifest"), raw=self.raw)

    def as_replayed_manifest(self, vocab: int) -> LogitsManifest:
        """A hidden-state folder as the logits it replays to with a head of ``vocab`` rows: each
        context's scored rows and its hidden file's identity (SHA-256, size), for what checks a
        reference by its manifest (score mode's figures: the states each window was scored
        against)."""
        if not self.holds_hidden:
            raise BadInput(f"{self.path}: holds logits, not hidden states")
        have = sorted(self.entries)
        entries = {i: LogitsEntry(window_index=i, domain="", file=r.file, key=r.key,
                                  shape=(min(r.shape[0], self.scored_rows), vocab), dtype=r.dtype,
                                  size_bytes=r.size_bytes, sha256=r.sha256,
                                  token_ids_json_sha256=r.token_ids_json_sha256, raw=r.raw)
                   for i, r in self.entries.items()}
        return LogitsManifest(root=self.root, path=self.path, vocab_size=vocab,
                              context_length=self.context_length, window_count=len(entries),
                              window_range=(have[0], have[-1] + 1) if have else (0, 0),
                              suite_token_hash_sha256=self.suite_token_hash_sha256,
                              tensor_key=self.tensor_key, entries=entries,
                              runtime=self.raw.get("runtime_manifest"), raw=self.raw)


def is_tensor_manifest(doc: Mapping[str, Any]) -> bool:
    """Whether a ``manifest.json`` document is a published tensor folder's (``contexts`` records)."""
    return isinstance(doc.get("contexts"), list) and "windows" not in doc


def holds_hidden_states(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder``'s ``manifest.json`` is a tensor folder's listing hidden states (a
    ``hidden_width``); False when it is missing or unreadable (the reader that expects logits
    there says what is wrong)."""
    try:
        doc = json.loads(read_text(Path(folder) / TENSOR_MANIFEST, limit=MANIFEST_LIMIT))  # as read_versioned
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and is_tensor_manifest(doc) and "hidden_width" in doc

def tensor_kind(doc: Mapping[str, Any], where: str) -> TensorKind:
    """The kind of tensor folder a manifest describes: the one whose width field it names."""
    named = [kind for kind, spec in TENSOR_KINDS.items() if spec.width_field in doc]
    if len(named) != 1:
        raise BadField(f"{where}: a tensor folder's manifest names exactly one of hidden_width (hidden "
                       "states) and vocab_size (logits)")
    return named[0]


def tensor_manifest_from_doc(p: Path, doc: dict[str, Any]) -> TensorManifest:
    where = str(p)
    kind = tensor_kind(doc, where)
    spec = TENSOR_KINDS[kind]
    width = require_width(doc, spec.width_field, where)
    context_length = _whole(doc, "context_length", where, minimum=2)
    scored = doc.get("scored_rows_per_context", context_length - 1)
    if scored != context_length - 1:
        raise BadField(f"{where}: scored_rows_per_context {scored} must be context_length - 1 "
                       f"({context_length - 1})")
    tensor_key = doc.get("tensor_key", spec.tensor_key)
    if not isinstance(tensor_key, str) or not tensor_key:
        raise BadField(f"{where}: tensor_key must be a name")
    point = doc.get("semantic_point")
    expected_point = spec.semantic_point
    if point is not None and point != expected_point:
        raise BadField(f"{where}: semantic_point {str(point)[:60]!r} does not fit a {kind} folder "
                       f"(expected {expected_point!r})")
    runtime = doc.get("runtime_manifest")
    if runtime is not None:
        if not isinstance(runtime, str) or runtime.startswith("/") or ".." in runtime.split("/"):
            raise BadField(f"{where}: runtime_manifest {str(runtime)[:120]!r} must be a path relative to "
                           "the suite folder (absolute paths are refused)")
    runtime_sha = _sha(doc, "runtime_manifest_sha256", where) if doc.get("runtime_manifest_sha256") else None
    entries: dict[int, TensorRecord] = {}
    for position, entry in enumerate(require_field(doc, "contexts", list, where)):
        r_where = f"{where} contexts[{position}]"
        if not isinstance(entry, dict):
            raise BadField(f"{r_where}: expected an object")
        index = _whole(entry, "context_index", r_where)
        if index in entries:
            raise BadField(f"{r_where}: context {index} is listed twice")
        rows, cols = _shape(require_field(entry, "shape", list, r_where), "shape", r_where)
        dtype = require_field(entry, "dtype", str, r_where)
        allowed = spec.dtypes
        if dtype not in allowed:
            raise BadField(f"{r_where}: dtype {dtype[:20]!r}: a {kind} file is {' or '.join(allowed)}")
        if cols != width:
            raise BadField(f"{r_where}: shape {[rows, cols]} does not match the folder's width {width}")
        if rows < scored if spec.extra_rows else rows != scored:
            need = f"at least {scored}" if spec.extra_rows else f"exactly {scored}"
            raise BadField(f"{r_where}: {rows} rows; a context of {context_length} tokens needs {need}")
        size = _whole(entry, "size_bytes", r_where)
        payload = rows * cols * DTYPES[dtype].itemsize
        if size < payload + 8:
            raise BadField(f"{r_where}: size_bytes {size} is smaller than the tensor's {payload} bytes")
        key = entry.get("key", tensor_key)
        if key != tensor_key:
            raise BadField(f"{r_where}: key {str(key)[:40]!r} differs from the folder's {tensor_key!r}")
        entries[index] = TensorRecord(
            context_index=index, file=check_name(require_field(entry, "file", str, r_where), "file", r_where),
            key=tensor_key, dtype=dtype, shape=(rows, cols), size_bytes=size,
            sha256=_sha(entry, "sha256", r_where),
            token_ids_json_sha256=_sha(entry, "token_ids_json_sha256", r_where), raw=entry)
    total = _whole(doc, "total_size_bytes", where) if "total_size_bytes" in doc else None
    listed = sum(r.size_bytes for r in entries.values())
    if total is not None and total != listed:
        raise BadField(f"{where}: total_size_bytes {total} differs from the sum of the records ({listed})")
    return TensorManifest(root=p.parent, path=p, kind=kind, width=width, context_length=context_length,
                          suite_token_hash_sha256=_sha(doc, "suite_token_hash_sha256", where),
                          tensor_key=tensor_key, semantic_point=point, runtime_manifest=runtime,
                          runtime_manifest_sha256=runtime_sha, total_size_bytes=listed, entries=entries,
                          raw=doc)


def load_tensor_manifest(path: str | os.PathLike[str]) -> TensorManifest:
    """A tensor folder's ``manifest.json`` (a file, or the folder holding it), validated."""
    p, doc = read_versioned(path, TENSOR_MANIFEST, "tensor folder manifest", what_to_do=LOGITS_REMEDY)
    if not is_tensor_manifest(doc):
        raise BadInput(f"{p}: not a hidden-state or live-logits folder's manifest (no contexts records); "
                       f"{LOGITS_REMEDY}")
    with remedy(LOGITS_DAMAGED):
        return tensor_manifest_from_doc(p, doc)


def logits_manifest_from_contexts(p: Path, doc: dict[str, Any]) -> LogitsManifest:
    """The published live-logits layout read as a logits folder (:func:`load_logits_manifest`
    comes here); a hidden-state folder is refused with what to do instead."""
    manifest = tensor_manifest_from_doc(p, doc)
    if manifest.holds_hidden:
        raise BadInput(f"{p}: holds hidden states (hidden_width {manifest.width}), not logits; compare "
                       "replays them with the LM head (--lm-head)")
    return manifest.as_logits_manifest()


def check_tensor_file(manifest: TensorManifest, index: int, suite: Suite | None = None,
                      side: str = "") -> tuple[list[str], SafetensorsHeader | None]:
    """One context's file against its record and the suite, without reading the data: size,
    header, the only key, dtype, shape, and the metadata ``context_index``,
    ``token_ids_json_sha256`` and ``semantic_point`` (each checked when the file carries it).
    Returns the problems (one line each) and the header."""
    record = manifest.entry(index)
    path = manifest.file_path(index)
    label = f"context {index:04d}" + (f" ({side})" if side else "")
    where = f"{path}: {label}"
    problems: list[str] = []
    try:
        st = path.stat()
    except FileNotFoundError:
        return [f"{where}: file is missing; download it again"], None
    except OSError as exc:
        return [f"{where}: cannot be read ({exc.strerror or exc}); make it readable, or delete it and fetch "
                "it again"], None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a folder has no size to compare: say what it is
        return [f"{where}: is {kind_of(st.st_mode)}, not a regular file; delete it and fetch it again"], None
    size = st.st_size
    if size != record.size_bytes:
        problems.append(f"{where}: {size} bytes, the manifest {manifest.path} says {record.size_bytes}; the "
                        "file is truncated or was replaced, delete it and fetch it again")
    try:
        header = read_header(path)
    except BadInput as exc:
        return problems or [f"{exc} ({label})"], None
    if set(header.tensors) != {record.key}:
        found = ", ".join(sorted(header.tensors)) or "none"
        problems.append(f"{where}: holds tensors {found}; the manifest names only {record.key!r}")
        return problems, header
    info = header.tensors[record.key]
    if info.dtype != record.dtype or info.shape != record.shape:
        problems.append(f"{where}: tensor {record.key!r} is {info.dtype} {list(info.shape)}, the manifest "
                        f"says {record.dtype} {list(record.shape)}")
    elif header.file_size != info.end:
        problems.append(f"{where}: {header.file_size - info.end} bytes after the tensor data; the file was "
                        "appended to")
    window = None
    if suite is not None and 0 <= index < suite.window_count:
        window = suite.windows[index]
    token_hash = window.token_ids_json_sha256 if window is not None else record.token_ids_json_sha256
    if record.token_ids_json_sha256 != token_hash:
        problems.append(f"{manifest.path}: {label}: token hash differs from the suite's "
                        f"{suite.path if suite else ''}; this file was made from other tokens")
    meta = header.metadata
    expected = {"context_index": str(index), "token_ids_json_sha256": token_hash,
                "semantic_point": manifest.semantic_point or (SEMANTIC_HIDDEN if manifest.holds_hidden
                                                              else SEMANTIC_LIVE)}
    for key, want in expected.items():
        if key in meta and meta[key] != want:
            shown = meta[key] if len(meta[key]) < 20 else meta[key][:12] + "..."
            problems.append(f"{where}: header metadata {key}={shown!r}, expected {want[:12]!r}; the file "
                            "belongs to another context or suite, fetch it again")
    return problems, header


# -------------------------------------------------------------------------------------- LM head


@dataclass(frozen=True)
class LmHead:
    """The LM head a hidden-state folder is replayed with: ``weight.safetensors`` (one BF16 tensor
    ``[vocab, hidden]``) and, when there is one, its ``manifest.json``."""

    path: Path
    info: TensorInfo
    manifest_path: Path | None
    file_sha256: str | None  # the manifest's (None without a manifest)
    raw_tensor_sha256: str | None  # the manifest's, else the file's metadata, else None
    manifest: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def vocab(self) -> int:
        return int(self.info.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.info.shape[1])

    @property
    def size_bytes(self) -> int:
        return int(self.path.stat().st_size)


def head_bytes(vocab: int, hidden: int) -> int:
    """An LM head's data: ``vocab`` x ``hidden`` BF16 values, 2 bytes each (its header and manifest
    take a few KiB more)."""
    return 2 * int(vocab) * int(hidden)


def load_lm_head(path: str | os.PathLike[str]) -> LmHead:
    """The head at ``path``: a folder (``manifest.json`` naming the file, or ``weight.safetensors``)
    or the weight file itself (a ``manifest.json`` beside it is read and must agree).  Checks the
    header: one tensor, BF16, two dimensions, and every field the manifest states."""
    with remedy(HEAD_DAMAGED):
        return _lm_head(Path(path))


def _lm_head(p: Path) -> LmHead:
    manifest_path: Path | None = None
    doc: dict[str, Any] = {}
    if p.is_dir():
        if (p / TENSOR_MANIFEST).exists():
            manifest_path, doc = read_versioned(p / TENSOR_MANIFEST, TENSOR_MANIFEST, "LM head manifest",
                                                what_to_do=HEAD_DAMAGED)
            weight = p / check_name(doc.get("file", HEAD_FILE), "file", str(manifest_path))
        else:
            weight = p / HEAD_FILE
        try:  # as a hidden or logits folder's files: a link may not lead out of the folder
            inside = weight.resolve().is_relative_to(p.resolve())
        except (RuntimeError, OSError) as exc:
            raise BadInput(f"{weight}: the LM head cannot be read ({exc})") from None
        if not inside:
            raise BadField(f"{weight}: a link leading out of {p}; put the head file itself there")
    else:
        weight = p
        beside = p.parent / TENSOR_MANIFEST
        if beside.exists():
            candidate_path, candidate = read_versioned(beside, TENSOR_MANIFEST, "LM head manifest",
                                                       what_to_do=HEAD_DAMAGED)
            if candidate.get("file") == p.name:  # the head's own manifest (another file's is not)
                manifest_path, doc = candidate_path, candidate
    header = read_header(weight)
    where = str(weight)
    if len(header.tensors) != 1:
        raise BadField(f"{where}: an LM head file holds one tensor, this one holds "
                       f"{', '.join(sorted(header.tensors)) or 'none'}")
    info = next(iter(header.tensors.values()))
    if info.dtype != "BF16" or len(info.shape) != 2 or min(info.shape) < 1:
        raise BadField(f"{where}: the LM head is {info.dtype} {list(info.shape)}; replay needs BF16 "
                       "[vocab, hidden]")
    if max(info.shape) > MAX_ROW_WIDTH:  # a sparse file holds any shape without its data
        raise BadField(f"{where}: the LM head is {list(info.shape)}; a vocabulary or hidden width is at most "
                       f"{MAX_ROW_WIDTH:,}")
    if header.file_size != info.end:
        raise BadField(f"{where}: {header.file_size - info.end} bytes after the tensor data (the file is "
                       "damaged)")
    file_sha = raw_sha = None
    if manifest_path is not None:
        m_where = str(manifest_path)
        key = doc.get("key", info.name)
        if key != info.name:
            raise BadField(f"{m_where}: key {str(key)[:40]!r} but {weight.name} holds {info.name!r}")
        if doc.get("dtype", "BF16") != "BF16":
            raise BadField(f"{m_where}: dtype {str(doc.get('dtype'))[:20]!r}; an LM head is BF16")
        if "shape" in doc and _shape(doc["shape"], "shape", m_where) != tuple(info.shape):
            raise BadField(f"{m_where}: shape {doc['shape']} but {weight.name} is {list(info.shape)}")
        if "size_bytes" in doc and doc["size_bytes"] != header.file_size:
            raise BadField(f"{m_where}: size_bytes {doc['size_bytes']} but {weight.name} has "
                           f"{header.file_size} bytes (the file is truncated or replaced)")
        file_sha = _sha(doc, "file_sha256", m_where) if "file_sha256" in doc else None
        raw_sha = _sha(doc, "raw_tensor_sha256", m_where) if "raw_tensor_sha256" in doc else None
    meta_raw = header.metadata.get("raw_tensor_sha256")
    if meta_raw is not None:
        if raw_sha is not None and meta_raw != raw_sha:
            raise BadField(f"{where}: metadata raw_tensor_sha256 {meta_raw[:12]}... differs from the "
                           f"manifest's {raw_sha[:12]}... (the head and its manifest do not belong together)")
        raw_sha = raw_sha or (meta_raw if is_sha256(meta_raw) else None)
    return LmHead(path=weight, info=info, manifest_path=manifest_path, file_sha256=file_sha,
                  raw_tensor_sha256=raw_sha, manifest=doc)


def head_bits(head: LmHead) -> np.ndarray:
    """The head's BF16 bit patterns as a read-only ``uint16`` memory map ``[vocab, hidden]`` (the
    page cache holds it; nothing is copied until used)."""
    return np.memmap(head.path, dtype="<u2", mode="r", offset=head.info.begin,
                     shape=(head.vocab, head.hidden))


def reference_head_places(hidden_folder: str | os.PathLike[str],
                          suite_root: str | os.PathLike[str] | None) -> list[Path]:
    """Where a hidden-state reference's LM head may be when nobody names it, in the order looked at:
    ``lm-head/`` inside the hidden folder (a candidate's capture keeps its model's own head there, so
    a capture compared as the reference, as the two captures of a repeat are, is replayed with its
    own head and not the suite's), beside it (a suite's ``reference-hidden/``), in the suite."""
    folder = Path(hidden_folder)
    places = [folder / LM_HEAD_DIR, folder.parent / LM_HEAD_DIR]
    if suite_root:
        places.append(Path(suite_root) / LM_HEAD_DIR)
    return list(dict.fromkeys(places))  # the suite's once, when the folder is beside it


def reference_head_dir(hidden_folder: str | os.PathLike[str],
                       suite_root: str | os.PathLike[str] | None) -> Path | None:
    """The first of :func:`reference_head_places` that is a folder; None if none is."""
    return next((p for p in reference_head_places(hidden_folder, suite_root) if p.is_dir()), None)


def replay_output_of(manifest: TensorManifest) -> str:
    """How a hidden folder's states are replayed: the ``replay_output`` kldtui records for a server
    that computed in float32 (``f32``), else ``bf16`` (a BF16 model's head, the published rule);
    another value is a damaged manifest (BadInput naming it)."""
    value = manifest.raw.get("replay_output")
    if value is None:
        return "bf16"
    if value not in ("bf16", "f32"):
        raise BadInput(f"{manifest.path}: replay_output {str(value)[:20]!r} is not bf16 or f32; the "
                       "manifest is damaged, finalize the hidden states again")
    return str(value)


# ------------------------------------------------------------------------------------ checksums


def parse_checksums(text: str, where: str) -> dict[str, str]:
    """``checksums.txt``: ``<sha256>  <relpath>`` per line (``*relpath`` accepted, as sha256sum
    writes binary mode); paths relative, inside the folder, each once; never itself or ``.cache/``."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if match is None:
            raise BadField(f"{where}: line {number} is not '<sha256>  <path>': {line[:120]!r}")
        digest, rel = match.groups()
        check_relative_path(rel, "path", f"{where}: line {number}", max_parts=8)
        if rel == CHECKSUMS or rel.split("/")[0] == CACHE_DIR:
            raise BadField(f"{where}: line {number} lists {rel!r}, which checksums.txt never covers")
        if rel in out:
            raise BadField(f"{where}: line {number}: {rel!r} is listed twice")
        out[rel] = digest
    if not out:
        raise BadField(f"{where}: lists no files")
    return out


def read_checksums(root: str | os.PathLike[str]) -> dict[str, str]:
    path = Path(root) / CHECKSUMS
    try:
        text = read_text(path, limit=CHECKSUMS_LIMIT)
    except FileNotFoundError:
        raise BadInput(f"{path}: not found; a published hidden-state suite lists every file's SHA-256 "
                       f"there; {HIDDEN_SUITE_DAMAGED}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text; {HIDDEN_SUITE_DAMAGED}") from None
    except OSError as exc:
        raise read_failure(path, exc, "checksum list", HIDDEN_SUITE_DAMAGED) from None
    with remedy(HIDDEN_SUITE_DAMAGED):
        return parse_checksums(text, str(path))


def listed_files(root: str | os.PathLike[str]) -> list[str]:
    """Every file of a suite folder that ``checksums.txt`` covers: all regular files except
    itself, ``.cache/`` and kldtui's own ``.kldtui*`` files, relative, sorted."""
    base = Path(root)
    out: list[str] = []
    for folder, dirs, files in os.walk(base):
        rel_folder = Path(folder).relative_to(base)
        dirs[:] = sorted(d for d in dirs if not (rel_folder == Path(".") and d == CACHE_DIR)
                         and not d.startswith(KLDTUI_PREFIX))
        for name in files:
            rel = (rel_folder / name).as_posix()
            if rel == CHECKSUMS or name.startswith(KLDTUI_PREFIX) or name.startswith("."):
                continue
            out.append(rel)
    return sorted(out)


def checksums_text(digests: Mapping[str, str]) -> str:
    return "".join(f"{digests[rel]}  {rel}\n" for rel in sorted(digests))


def write_checksums(root: str | os.PathLike[str], known: Mapping[str, str] | None = None) -> Path:
    """Write ``checksums.txt`` for every file :func:`listed_files` finds but the dataset card
    (``README.md`` at the top: publish uploads a card of its own, which a listed hash would then
    contradict); ``known`` digests are used as they are, the rest hashed."""
    from kldtui.formats.suite import DATASET_CARD, sha256_file

    base = Path(root)
    digests = {rel: (known or {}).get(rel) or sha256_file(base / rel) for rel in listed_files(base)
               if rel != DATASET_CARD}
    path = base / CHECKSUMS
    write_bytes_atomic(path, checksums_text(digests).encode("utf-8"))
    return path


# ------------------------------------------------------------------------------ top-level manifest


@dataclass(frozen=True)
class TopManifest:
    """The suite's top-level ``manifest.json``: which files make the suite and their hashes."""

    path: Path
    suite_manifest: str
    suite_manifest_sha256: str
    suite_token_hash_sha256: str
    hidden_manifest: str
    hidden_manifest_sha256: str
    lm_head_file: str
    lm_head_file_sha256: str
    lm_head_raw_tensor_sha256: str | None
    lm_head_shape: tuple[int, int]
    context_count: int
    context_length: int
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


def is_top_manifest(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("reference_hidden"), dict) and isinstance(doc.get("suite"), dict)


def load_top_manifest(path: str | os.PathLike[str]) -> TopManifest:
    p, doc = read_versioned(path, TOP_MANIFEST, "suite top-level manifest", what_to_do=SUITE_REMEDY)
    if not is_top_manifest(doc):
        raise BadInput(f"{p}: not a hidden-state suite's top-level manifest (no reference_hidden and suite); "
                       f"{SUITE_REMEDY}")
    with remedy(HIDDEN_SUITE_DAMAGED):
        return _top_manifest(p, doc)


def _top_manifest(p: Path, doc: dict[str, Any]) -> TopManifest:
    where = str(p)
    suite = require_field(doc, "suite", dict, where)
    hidden = require_field(doc, "reference_hidden", dict, where)
    head = require_field(doc, "lm_head", dict, where)
    rel = {}
    for name, part, key in (("suite", suite, "manifest"), ("reference_hidden", hidden, "manifest"),
                            ("lm_head", head, "file")):
        part_where = f"{where} {name}"
        rel[name] = check_relative_path(require_field(part, key, str, part_where), key, part_where)
    runtime = doc.get("capture_runtime")
    if runtime is not None:  # verify hashes the file it names: it must be the suite's own
        r_where = f"{where} capture_runtime"
        if not isinstance(runtime, dict):
            raise BadField(f"{r_where}: expected an object (file, sha256, status) or null")
        check_relative_path(require_field(runtime, "file", str, r_where), "file", r_where)
        _sha(runtime, "sha256", r_where)
        _check_status(runtime.get("status"), RUNTIME_STATUSES, r_where)
    _check_status(doc.get("status"), TOP_STATUSES, where)  # shown on the dataset card as it is
    count = _whole(doc, "context_count", where, minimum=1)
    length = _whole(doc, "context_length", where, minimum=2)
    if "shape_per_context" in hidden:
        rows, _ = _shape(hidden["shape_per_context"], "shape_per_context", f"{where} reference_hidden")
        if rows < length - 1:
            raise BadField(f"{where}: reference_hidden.shape_per_context has {rows} rows; contexts of "
                           f"{length} tokens need {length - 1}")
    if "context_count" in hidden and hidden["context_count"] != count:
        raise BadField(f"{where}: reference_hidden.context_count {hidden['context_count']} differs from "
                       f"context_count {count}")
    for key, value in (("scored_positions_per_context", length - 1), ("total_scored_positions",
                                                                      count * (length - 1))):
        if key in doc and doc[key] != value:
            raise BadField(f"{where}: {key} {doc[key]} differs from {value} ({count} contexts of {length} "
                           "tokens)")
    return TopManifest(
        path=p, suite_manifest=rel["suite"],
        suite_manifest_sha256=_sha(suite, "manifest_sha256", f"{where} suite"),
        suite_token_hash_sha256=_sha(suite, "suite_token_hash_sha256", f"{where} suite"),
        hidden_manifest=rel["reference_hidden"],
        hidden_manifest_sha256=_sha(hidden, "manifest_sha256", f"{where} reference_hidden"),
        lm_head_file=rel["lm_head"], lm_head_file_sha256=_sha(head, "file_sha256", f"{where} lm_head"),
        lm_head_raw_tensor_sha256=(_sha(head, "raw_tensor_sha256", f"{where} lm_head")
                                   if "raw_tensor_sha256" in head else None),
        lm_head_shape=_shape(require_field(head, "shape", list, f"{where} lm_head"), "shape",
                             f"{where} lm_head"),
        context_count=count, context_length=length, raw=doc)


def _check_status(status: object, allowed: tuple[str, ...], where: str) -> None:
    """A manifest's ``status``: absent (None) or one of ``allowed``; else BadField naming it."""
    if status is not None and status not in allowed:
        raise BadField(f"{where}: {_status_problem(status, allowed)}")


def _status_problem(status: object, allowed: tuple[str, ...]) -> str:
    """``status 'x' is not one of 'a', 'b'`` (a value that is not text is named by its type)."""
    shown = repr(status)[:80] if isinstance(status, str) else f"of type {type(status).__name__}"
    return f"status {shown} is not one of {', '.join(repr(s) for s in allowed)}"


def read_partitions(root: str | os.PathLike[str]) -> dict[int, tuple[str, bool]]:
    """``partitions.json``: context index -> (partition, sentinel)."""
    p, doc = read_versioned(Path(root) / PARTITIONS, PARTITIONS, "partitions file", what_to_do=SUITE_DAMAGED)
    with remedy(SUITE_DAMAGED):
        return _partitions(p, doc)


def _partitions(p: Path, doc: dict[str, Any]) -> dict[int, tuple[str, bool]]:
    out: dict[int, tuple[str, bool]] = {}
    for n, item in enumerate(require_field(doc, "contexts", list, str(p))):
        where = f"{p} contexts[{n}]"
        if not isinstance(item, dict):
            raise BadField(f"{where}: expected an object")
        index = _whole(item, "context_index", where)
        partition = require_field(item, "partition", str, where)
        sentinel = require_field(item, "sentinel", bool, where)
        if partition not in PARTITION_NAMES:
            raise BadField(f"{where}: partition {partition[:40]!r} is not one of "
                           f"{', '.join(PARTITION_NAMES)}")
        if index in out:
            raise BadField(f"{where}: context {index} is listed twice")
        out[index] = (partition, sentinel)
    return out


def check_partitions(suite: Suite, partitions: Mapping[int, tuple[str, bool]], where: str) -> list[str]:
    """Where ``partitions.json`` and the suite manifest disagree (one line each)."""
    problems = []
    if set(partitions) != {w.index for w in suite.windows}:
        problems.append(f"{where}: lists {len(partitions)} contexts, the suite has {suite.window_count}")
    for w in suite.windows:
        info = context_info(w)
        if info is None or w.index not in partitions:
            continue
        if partitions[w.index] != (info.partition, info.sentinel):
            problems.append(f"{where}: context {w.index} is {partitions[w.index]}, the suite manifest says "
                            f"({info.partition!r}, {info.sentinel})")
    return problems


# ------------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class WrittenTensor:
    """One tensor file as written: what its manifest record needs."""

    path: Path
    key: str
    dtype: str
    shape: tuple[int, int]
    size_bytes: int
    sha256: str  # the whole file, header included
    raw_tensor_sha256: str  # the contiguous payload only


def write_tensor_file(path: str | os.PathLike[str], key: str, array: np.ndarray, metadata: Mapping[str, str],
                      *, dtype: str = "BF16", block_rows: int = 4096) -> WrittenTensor:
    """One 2-D tensor as a safetensors file, streamed in row blocks, hashed while written (file and
    payload), published atomically and never over an existing file (FileExistsError).  ``array``
    holds BF16 bit patterns (``uint16``) for ``dtype="BF16"`` (float arrays are rounded to BF16
    first, :func:`kldtui.metrics.replay.f32_to_bf16`), float32 for ``"F32"``."""
    from kldtui.metrics.replay import f32_to_bf16

    final = Path(path)
    if array.ndim != 2:
        raise ValueError("a tensor file holds a 2-D tensor")
    shape = (int(array.shape[0]), int(array.shape[1]))
    header = encode_header({key: (dtype, shape)}, dict(metadata))
    file_hash = hashlib.sha256(header)
    raw_hash = hashlib.sha256()
    size = len(header)
    with atomic_open(final, "wb", replace=False,
                     size_hint=len(header) + shape[0] * shape[1] * DTYPES[dtype].itemsize) as handle:
        handle.write(header)
        for start in range(0, shape[0], block_rows):
            block = array[start:start + block_rows]
            if dtype == "BF16":
                data = block.astype("<u2", copy=False) if block.dtype == np.uint16 else f32_to_bf16(block)
            else:
                data = np.asarray(block, dtype="<f4")
            view = np.ascontiguousarray(data).data.cast("B")
            file_hash.update(view)
            raw_hash.update(view)
            handle.write(view)
            size += len(view)
    return WrittenTensor(final, key, dtype, shape, size, file_hash.hexdigest(), raw_hash.hexdigest())


def tensor_metadata(kind: TensorKind, window: WindowSpec) -> dict[str, str]:
    """A hidden or live-logits file's safetensors metadata."""
    return {"context_index": str(window.index), "token_ids_json_sha256": window.token_ids_json_sha256,
            "semantic_point": TENSOR_KINDS[kind].semantic_point}


def write_context_tensor(folder: str | os.PathLike[str], kind: TensorKind, window: WindowSpec,
                         array: np.ndarray, *, dtype: str = "BF16") -> WrittenTensor:
    """One context's hidden-state (``[rows >= context_length - 1, hidden]``) or live-logits
    (``[context_length - 1, vocab]``) file in ``folder``, with the published name and metadata."""
    rows = int(array.shape[0])
    spec = TENSOR_KINDS[kind]
    if rows < window.scored_positions or (not spec.extra_rows and rows != window.scored_positions):
        raise BadInput(f"{folder}: {window.label}: {rows} rows; the context needs "
                       f"{window.scored_positions}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    return write_tensor_file(Path(folder) / spec.file_name(window.index), spec.tensor_key, array,
                             tensor_metadata(kind, window), dtype=dtype)


def tensor_record(window: WindowSpec, written: WrittenTensor, *, source_class: str | None = None,
                  request_id: str | None = None, elapsed_seconds: float | None = None,
                  raw_chunks_retained: bool = False, chunk_dir: str | None = None,
                  chunks: Sequence[str] = ()) -> dict[str, Any]:
    """A tensor folder manifest's record for one written context file."""
    record: dict[str, Any] = {
        "context_index": window.index, "dtype": written.dtype, "file": written.path.name, "key": written.key,
        "sha256": written.sha256, "shape": list(written.shape), "size_bytes": written.size_bytes,
        "token_ids_json_sha256": window.token_ids_json_sha256,
        "elapsed_seconds": elapsed_seconds, "request_id": request_id,
        "source_class": source_class if source_class is not None else window.raw.get("semantic_class"),
        "raw_chunks_retained": raw_chunks_retained,
    }
    if raw_chunks_retained:
        record.update(capture_chunk_dir=chunk_dir, capture_chunks=list(chunks))
    return record


def write_tensor_manifest(folder: str | os.PathLike[str], kind: TensorKind, suite: Suite,
                          records: Iterable[Mapping[str, Any]], *, width: int, run_name: str,
                          runtime_manifest: str | None = None, runtime_manifest_sha256: str | None = None,
                          kind_text: str | None = None, created_utc: str | None = None,
                          extra: Mapping[str, Any] | None = None) -> Path:
    """A tensor folder's ``manifest.json`` (validated by reading it back); ``extra`` fields are
    added beside the published ones (a producer's own, e.g. kldtui's inline ``runtime``)."""
    items = sorted((dict(r) for r in records), key=lambda r: int(r["context_index"]))
    if runtime_manifest is not None and (runtime_manifest.startswith("/")
                                         or ".." in runtime_manifest.split("/")):
        raise BadInput(f"runtime manifest {runtime_manifest!r}: give a path relative to the suite folder")
    doc: dict[str, Any] = {
        **dict(extra or {}),
        "context_length": suite.context_length, "created_utc": created_utc or utc_now(), "format_version": 1,
        "kind": kind_text or TENSOR_KINDS[kind].kind_text, "run_name": run_name,
        "runtime_manifest": runtime_manifest, "runtime_manifest_sha256": runtime_manifest_sha256,
        "semantic_point": TENSOR_KINDS[kind].semantic_point,
        "scored_rows_per_context": suite.context_length - 1,
        "suite_token_hash_sha256": suite.suite_token_hash_sha256,
        "tensor_key": TENSOR_KINDS[kind].tensor_key,
        TENSOR_KINDS[kind].width_field: width,
        "contexts": items, "total_size_bytes": sum(int(r["size_bytes"]) for r in items),
    }
    path = Path(folder) / TENSOR_MANIFEST
    tensor_manifest_from_doc(path, doc)  # what is written must read back
    write_json_atomic(path, doc)
    return path


def write_lm_head(folder: str | os.PathLike[str], weight: np.ndarray, *, checkpoint_tensor_key: str,
                  checkpoint_index_sha256: str | None = None, source_shard: str | None = None,
                  kind: str = "LM head exported from the checkpoint",
                  extra: Mapping[str, Any] | None = None) -> LmHead:
    """``weight.safetensors`` (BF16 ``[vocab, hidden]``, metadata ``checkpoint_tensor_key`` and
    ``raw_tensor_sha256``) and its ``manifest.json`` in ``folder``; neither is ever overwritten.
    ``extra`` fields go into the manifest beside the published ones (an exporter's own).
    The payload hash is computed first (metadata precedes the data in the file)."""
    from kldtui.metrics.replay import f32_to_bf16

    base = Path(folder)
    base.mkdir(parents=True, exist_ok=True)
    if (base / HEAD_FILE).exists() or (base / TENSOR_MANIFEST).exists():
        raise BadInput(f"{base}: already holds an LM head; export into an empty folder")
    raw = hashlib.sha256()
    for start in range(0, int(weight.shape[0]), 4096):
        block = weight[start:start + 4096]
        raw.update(np.ascontiguousarray(block if block.dtype == np.uint16 else f32_to_bf16(block)).data)
    written = write_tensor_file(base / HEAD_FILE, HEAD_KEY, weight,
                                {"checkpoint_tensor_key": checkpoint_tensor_key,
                                 "raw_tensor_sha256": raw.hexdigest()})
    if written.raw_tensor_sha256 != raw.hexdigest():
        raise RuntimeError(f"{written.path}: the head changed while it was written")
    doc = {**dict(extra or {}),
           "checkpoint_index_sha256": checkpoint_index_sha256, "checkpoint_tensor_key": checkpoint_tensor_key,
           "dtype": "BF16", "file": HEAD_FILE, "file_sha256": written.sha256, "format_version": 1,
           "key": HEAD_KEY, "kind": kind, "raw_tensor_sha256": written.raw_tensor_sha256,
           "shape": list(written.shape), "size_bytes": written.size_bytes, "source_shard": source_shard}
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    with atomic_open(base / TENSOR_MANIFEST, "w", replace=False) as handle:
        handle.write(text)
    return load_lm_head(base)


@dataclass(frozen=True)
class NewContext:
    """A context to write into a new hidden-state suite: its tokens, stratum and partition, and the
    rest of its record (``dataset``, ``source_id``, ``source_cluster_id``, ... as published)."""

    tokens: Sequence[int]
    allocation_stratum: str
    partition: str = "analysis"
    sentinel: bool = False
    semantic_class: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)


def write_context_suite(root: str | os.PathLike[str], contexts: Sequence[NewContext], *,
                        kind: str = "distribution-fidelity suite", selection_salt: str = "",
                        offset_salt: str = "", partition_salt: str = "", sentinel_salt: str = "",
                        tokenizer: Mapping[str, Any] | None = None,
                        extra: Mapping[str, Any] | None = None) -> Suite:
    """``tokens/context-NNNN.json``, ``suite-manifest.json`` and ``partitions.json`` of a new
    hidden-state suite (contexts in the order given; all of one length)."""
    base = Path(root)
    if not contexts:
        raise ValueError("a suite needs at least one context")
    length = len(contexts[0].tokens)
    if any(len(c.tokens) != length for c in contexts):
        raise ValueError("all contexts of a suite have the same number of tokens")
    (base / TOKENS_DIR).mkdir(parents=True, exist_ok=True)
    records = []
    for index, c in enumerate(contexts):
        if c.partition not in PARTITION_NAMES:
            raise ValueError(f"partition {c.partition!r}")
        rel = context_token_file(index)
        write_bytes_atomic(base / rel, (token_ids_json(c.tokens) + "\n").encode("ascii"))
        record: dict[str, Any] = {
            "chat_template_applied": False, "dataset": None, "dataset_config": None, "dataset_revision": None,
            "dataset_split": None, "language": None, "representation_type": "raw_continuation",
            "source_char_start": None, "source_cluster_id": None, "source_content_sha256": None,
            "source_id": None, **dict(c.fields),
            "index": index, "context_index": index, "allocation_stratum": c.allocation_stratum,
            "semantic_class": c.semantic_class or c.allocation_stratum, "num_tokens": length,
            "scored_row_start": 0, "scored_row_end_exclusive": length - 1, "token_file": rel,
            "token_ids_json_sha256": token_ids_hash(c.tokens), "partition": c.partition,
            "sentinel": c.sentinel,
        }
        records.append(record)

    def counts(key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in records:
            out[str(r[key])] = out.get(str(r[key]), 0) + 1
        return out

    doc: dict[str, Any] = {
        **dict(extra or {}),
        "format_version": 1, "kind": kind, "status": "implemented", "context_length": length,
        "context_count": len(records), "scored_positions_per_context": length - 1,
        "total_scored_positions": len(records) * (length - 1),
        "suite_token_hash_sha256": suite_token_hash([r["token_ids_json_sha256"] for r in records]),
        "selection_salt": selection_salt, "offset_salt": offset_salt,
        "tokenizer": dict(tokenizer or {}), "allocation_counts": counts("allocation_stratum"),
        "language_counts": counts("language"), "partition_counts": counts("partition"),
        "sentinel_count": sum(bool(r["sentinel"]) for r in records), "contexts": records,
    }
    write_json_atomic(base / SUITE_MANIFEST, doc)
    write_json_atomic(base / PARTITIONS, {
        "format_version": 1, "partition_salt": partition_salt, "sentinel_salt": sentinel_salt,
        "contexts": [{"context_index": r["index"], "partition": r["partition"], "sentinel": r["sentinel"]}
                     for r in records]})
    from kldtui.formats.suite import load_suite

    return load_suite(base)


def write_top_manifest(root: str | os.PathLike[str], *, artifact_kind: str, checkpoint: Any = None,
                       status: str = "qualified", created_utc: str | None = None) -> Path:
    """The top-level ``manifest.json`` from the files already in ``root`` (suite manifest, hidden
    manifest, LM head, partitions, capture runtime), with their hashes."""
    from kldtui.formats.suite import load_suite, sha256_file

    if status not in TOP_STATUSES:  # a caller's mistake: never written, then refused on load
        raise ValueError(f"status {status!r} is not one of {TOP_STATUSES}")
    base = Path(root)
    suite = load_suite(base)
    hidden = load_tensor_manifest(base / HIDDEN_DIR)
    head = load_lm_head(base / LM_HEAD_DIR)
    if head.file_sha256 is None:
        raise BadInput(f"{base / LM_HEAD_DIR}: the LM head has no manifest.json; export it with kldtui")
    counts = {name: sum(1 for w in suite.windows if getattr(context_info(w), "partition", None) == name)
              for name in PARTITION_NAMES}
    runtime = base / CAPTURE_RUNTIME
    runtime_doc: dict[str, Any] | None = None
    if runtime.is_file():
        try:
            loaded = json.loads(read_text(runtime, limit=MANIFEST_LIMIT))
        except OSError as exc:  # over the limit, or put in place of the file after the check
            raise read_failure(runtime, exc, "capture runtime", HIDDEN_SUITE_DAMAGED) from None
        except ValueError as exc:
            raise BadInput(f"{runtime}: not valid JSON ({exc}); {HIDDEN_SUITE_DAMAGED}") from None
        runtime_status = loaded.get("status") if isinstance(loaded, dict) else None
        if runtime_status is not None and runtime_status not in RUNTIME_STATUSES:  # refused on load
            raise BadInput(f"{runtime}: {_status_problem(runtime_status, RUNTIME_STATUSES)}; "
                           f"{HIDDEN_SUITE_DAMAGED}")
        runtime_doc = {"file": CAPTURE_RUNTIME, "sha256": sha256_file(runtime), "status": runtime_status}
    rows = min((r.shape[0] for r in hidden.entries.values()), default=suite.context_length - 1)
    doc = {
        "artifact_kind": artifact_kind, "capture_runtime": runtime_doc, "checkpoint": checkpoint,
        "context_count": suite.window_count, "context_length": suite.context_length,
        "created_utc": created_utc or utc_now(), "format_version": 1,
        "lm_head": {"file": f"{LM_HEAD_DIR}/{head.path.name}", "file_sha256": head.file_sha256,
                    "raw_tensor_sha256": head.raw_tensor_sha256, "shape": [head.vocab, head.hidden]},
        "partitions": {"file": PARTITIONS, "sha256": sha256_file(base / PARTITIONS), **counts},
        "reference_hidden": {"context_count": len(hidden.entries),
                             "manifest": f"{HIDDEN_DIR}/{TENSOR_MANIFEST}",
                             "manifest_sha256": sha256_file(hidden.path),
                             "shape_per_context": [rows, hidden.width],
                             "total_size_bytes": hidden.total_size_bytes},
        "scored_positions_per_context": suite.context_length - 1,
        "sentinel_count": sum(1 for w in suite.windows if is_sentinel(w)),
        "status": status,
        "suite": {"manifest": SUITE_MANIFEST, "manifest_sha256": sha256_file(suite.path),
                  "suite_token_hash_sha256": suite.suite_token_hash_sha256},
        "total_scored_positions": suite.window_count * (suite.context_length - 1),
    }
    path = base / TOP_MANIFEST
    write_json_atomic(path, doc)
    load_top_manifest(path)
    return path



# ------------------------------------------------------------------ what a selection needs


# suite-level files a download always takes (those checksums.txt lists): small, and needed to
# check the suite, its hashes and the reference's identity
SUITE_FILES = (TOP_MANIFEST, SUITE_MANIFEST, PARTITIONS, SOURCES, SOURCE_REGISTRY, CAPTURE_RUNTIME,
               f"{HIDDEN_DIR}/{TENSOR_MANIFEST}", f"{LM_HEAD_DIR}/{TENSOR_MANIFEST}")
_RUN_MANIFEST = re.compile(r"(sentinel-hidden|sentinel-live-logits)/repeat-\d{2}/manifest\.json\Z")


def run_manifests(listed: Iterable[str]) -> list[str]:
    """The sentinel repeat folders' manifests among ``listed`` (relative paths), sorted."""
    return sorted(rel for rel in listed if _RUN_MANIFEST.match(rel))


def head_file(root: str | os.PathLike[str]) -> str:
    """The LM head's weight file, relative to the suite folder (its manifest's ``file``)."""
    path = Path(root) / LM_HEAD_DIR / TENSOR_MANIFEST
    if path.is_file():
        _, doc = read_versioned(path, TENSOR_MANIFEST, "LM head manifest", what_to_do=HEAD_DAMAGED)
        with remedy(HEAD_DAMAGED):
            return f"{LM_HEAD_DIR}/{check_name(doc.get('file', HEAD_FILE), 'file', str(path))}"
    return f"{LM_HEAD_DIR}/{HEAD_FILE}"


@dataclass(frozen=True)
class NeededFile:
    """A file a selection of contexts needs: its path in the suite folder, the size and SHA-256
    its manifest lists (None where only ``checksums.txt`` knows it), what it is in messages."""

    rel: str
    size_bytes: int | None
    sha256: str | None
    label: str
    large: bool


def selection_files(suite: Suite, windows: Sequence[WindowSpec], hidden: TensorManifest, head: str,
                    head_size: int | None, head_sha: str | None,
                    runs: Sequence[TensorManifest] = ()) -> list[NeededFile]:
    """Per-selection files: the selected contexts' token files and hidden-state files, the LM
    head, and the selected contexts' files in the sentinel repeat folders ``runs``."""
    base = suite.root.resolve()
    out = [NeededFile(w.token_file, None, None, f"token file of {w.label}", False) for w in windows]
    out.append(NeededFile(head, head_size, head_sha, "the LM head", True))
    for manifest in (hidden, *runs):
        folder = manifest.root.resolve().relative_to(base).as_posix()
        for w in windows:
            record = manifest.entries.get(w.index)
            if record is None:
                if manifest is hidden:
                    raise BadInput(f"{hidden.path}: {w.label} is not listed; the reference has no hidden "
                                   "states for it")
                continue
            out.append(NeededFile(f"{folder}/{record.file}", record.size_bytes, record.sha256,
                                  f"{w.label} in {folder}", True))
    return out


# ---------------------------------------------------------------------- sizes (the dashboard's)


def full_logits_bytes(context_count: int, context_length: int, vocab: int) -> int:
    """What the same contexts would take as F32 logits (the classic reference's layout)."""
    return context_count * (context_length - 1) * vocab * 4


__all__ = [
    "CHECKSUMS", "CONTEXT_FILTERS", "DEPTH_BUCKETS", "HEAD_FILE", "HIDDEN_DIR", "HIDDEN_KEY", "LIVE_KEY",
    "LM_HEAD_DIR", "PARTITIONS", "PARTITION_NAMES", "SEMANTIC_HIDDEN", "SEMANTIC_LIVE", "SUITE_FILES",
    "TOP_MANIFEST", "NeededFile", "head_file", "run_manifests", "selection_files",
    "ContextFilter", "ContextInfo", "LmHead", "NewContext", "TensorManifest", "TensorRecord", "TopManifest",
    "WrittenTensor", "check_partitions", "check_tensor_file", "checksums_text", "cluster_key", "context_info",
    "context_token_file", "dataset_fingerprint", "domain_hash", "full_logits_bytes", "head_bits",
    "hidden_file_name", "holds_hidden_states", "is_context_suite", "is_sentinel", "is_tensor_manifest",
    "is_top_manifest",
    "listed_files",
    "live_logits_file_name", "load_lm_head", "load_tensor_manifest", "load_top_manifest",
    "logits_manifest_from_contexts", "parse_checksums", "read_checksums", "read_partitions",
    "reference_head_dir", "reference_head_places", "repeat_dir", "replay_output_of",
    "suite_from_contexts", "TENSOR_KINDS", "TensorKindSpec",
    "tensor_file_name", "tensor_manifest_from_doc", "tensor_metadata", "tensor_record",
    "write_checksums", "write_context_suite", "write_context_tensor", "write_lm_head", "write_tensor_file",
    "write_tensor_manifest", "write_top_manifest",
]
