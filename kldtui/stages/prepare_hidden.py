"""``kldtui prepare --layout hidden``: a stratified, clustered context suite (the published
hidden-state suite's layout: docs/FORMATS.md, "Hidden-state suites"; docs/PRODUCING.md).

A plan (PLAN.toml) names allocation strata with fixed context counts and the pinned sources that
feed them. Each source's rows are grouped into source documents (one row, ``rows_per_source``
consecutive rows, the rows sharing ``source_id_field``, or the rows from one matching
``document_start`` to the next); a document belongs to a source
cluster (``cluster_field``'s value, else the document itself), the unit a cluster bootstrap
resamples. The rule, deterministic for a seed (every salt derives from it and is recorded):

1. documents whose text repeats an earlier one's (same SHA-256) are dropped;
2. per stratum, documents are taken in the order of their selection key, the domain hash of
   (selection salt, stratum, source key, source id, content SHA-256); each gives
   ``min(contexts_per_source, tokens // context_length)`` contexts, the last only what the
   stratum still needs, until the stratum's count is met exactly (too few: refused); a document
   whose token 5-grams are ``near_duplicate_threshold`` similar or more (MinHash estimate of the
   Jaccard index) to a document already drawn from, in any stratum, is passed over;
3. a document's k contexts lie in its k equal segments, each at an offset inside its segment
   given by the offset salt's domain hash: they never overlap;
4. per stratum, source clusters are ordered by the partition salt's domain hash of (stratum,
   cluster key); walking that order, a cluster becomes ``qualification`` when the clusters after
   it can still complete the stratum's qualification count exactly (the earliest exact choice; no
   exact choice: refused, naming the counts that are possible); the rest is ``analysis``: a
   cluster never straddles the partitions (the published rule orders contexts, not clusters);
5. per stratum, the analysis contexts ordered by the sentinel salt's domain hash of (stratum,
   content SHA-256, token hash) give the first ``sentinels`` as sentinel contexts (the
   published rule).

Contexts are numbered by stratum (in the plan's order), then selection key, then position.
The allocation (:func:`allocate`) is pure: it sees documents' token counts and identities, and
asks for a document's tokens only when it takes contexts from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    Throttle,
    null_sink,
)
from kldtui.formats import fidelity as fid
from kldtui.formats.fidelity import domain_hash
from kldtui.formats.model_size import MODEL_CONFIG_LIMIT
from kldtui.formats.safe_io import read_bytes, read_failure, read_text
from kldtui.formats.suite import token_ids_hash
from kldtui.stages.prepare import (
    BUILDERS,
    Source,
    build_new_folder,
    check_hub,
    check_local_inputs,
    check_new_folder,
    is_local_dataset,
    is_local_tokenizer,
    load_source,
    load_tokenizer,
    load_toml,
    tokenizer_id,
)

STAGE: StageName = "prepare"
KIND = "distribution-fidelity suite"
SALT_PREFIX = "kldtui-prepare-hidden-v1"
DEFAULT_CONTEXTS_PER_SOURCE = 2
DEFAULT_NEAR_DUPLICATE = 0.85  # the published suite's rejection threshold
SHINGLE = 5  # tokens per shingle of the near-duplicate check
PERMUTATIONS = 128  # MinHash hash functions
REPRESENTATIONS = ("raw_continuation", "source_file", "source_document")
SELECTION_RULE = (
    "per allocation stratum, source documents in selection-key order (domain hash of selection salt, "
    "stratum, source key, source id, content sha256), each giving min(contexts_per_source, tokens // "
    "context_length) contexts, one per equal segment at an offset-salt offset, until the stratum's "
    "count is met; exact duplicate documents dropped, near-duplicates of a document already drawn from "
    "(MinHash Jaccard of token 5-grams at or above the plan's threshold) passed over")
PARTITION_RULE = (
    "per stratum, whole source clusters in partition-salt order (domain hash of partition salt, stratum, "
    "cluster key): the earliest choice in that order whose sizes make the stratum's qualification count "
    "exactly becomes qualification, the rest analysis; sentinels: the "
    "first analysis contexts in sentinel-salt order (domain hash of sentinel salt, stratum, content "
    "sha256, token hash)")


# --- the plan -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StratumPlan:
    name: str
    contexts: int
    qualification: int = 0
    sentinels: int = 0


@dataclass(frozen=True)
class PlanSource:
    """A ``[[source]]`` of a hidden plan: a pinned dataset feeding one stratum."""

    key: str
    dataset: str
    split: str
    stratum: str
    config: str | None = None
    revision: str | None = None
    builder: str | None = None
    text_field: str | None = None
    source_id_field: str | None = None
    cluster_field: str | None = None
    rows_per_source: int = 1
    document_start: str | None = None  # a regular expression: a row whose text matches starts a document
    scan_limit: int | None = None
    semantic_class: str | None = None
    language: str | None = None
    license: str | None = None
    representation: str = "source_document"

    def loader(self) -> Source:
        """The logits layout's source of the same dataset, for loading its rows."""
        return Source(domain=self.key, dataset=self.dataset, split=self.split, windows=1, config=self.config,
                      revision=self.revision, builder=self.builder, text_field=self.text_field)

    @property
    def extra_columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.source_id_field, self.cluster_field) if c)

    @property
    def start_field(self) -> str:
        """The column ``document_start`` is matched against: the text field, else the builder's first."""
        return self.text_field if self.text_field is not None else BUILDERS[str(self.builder)].columns[0]


@dataclass(frozen=True)
class Plan:
    strata: tuple[StratumPlan, ...]
    sources: tuple[PlanSource, ...]
    contexts_per_source: int = DEFAULT_CONTEXTS_PER_SOURCE
    where: str = "plan"
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE  # 0: no near-duplicate check

    @property
    def contexts(self) -> int:
        return sum(s.contexts for s in self.strata)


_PLAN_KEYS = {"contexts_per_source", "near_duplicate_threshold"}
_STRATUM_KEYS = {"name", "contexts", "qualification", "sentinels"}
_SOURCE_KEYS = {"key", "domain", "dataset", "config", "split", "revision", "stratum", "builder", "text_field",
                "source_id_field", "cluster_field", "rows_per_source", "document_start", "scan_limit",
                "semantic_class",
                "language", "license", "representation"}


def _name_ok(value: str) -> bool:
    return bool(value) and all(c.isalnum() or c in "-_." for c in value)


def _count(table: Mapping[str, Any], key: str, here: str, *, minimum: int, default: int | None = None) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadInput(f"{here}: {key!r} must be a whole number of at least {minimum}")
    return value


def _text(table: Mapping[str, Any], key: str, here: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise BadInput(f"{here}: {key!r} must be a non-empty string")
    return value


def parse_plan(doc: Mapping[str, Any], where: str) -> Plan:
    """A PLAN.toml document (``[plan]``, ``[[stratum]]``, ``[[source]]``), validated; every error
    one line naming the file, the table and what to do."""
    unknown_top = set(doc) - {"plan", "stratum", "source"}
    if unknown_top:
        raise BadInput(f"{where}: unknown top-level keys {sorted(unknown_top)}; a hidden plan has [plan], "
                       "[[stratum]] and [[source]] tables")
    plan_table = doc.get("plan", {})
    if not isinstance(plan_table, dict) or set(plan_table) - _PLAN_KEYS:
        raise BadInput(f"{where}: [plan] takes only {sorted(_PLAN_KEYS)}")
    per_source = _count(plan_table, "contexts_per_source", f"{where}: [plan]", minimum=1,
                        default=DEFAULT_CONTEXTS_PER_SOURCE)
    near = plan_table.get("near_duplicate_threshold", DEFAULT_NEAR_DUPLICATE)
    if isinstance(near, bool) or not isinstance(near, int | float) or not 0 <= near <= 1:
        raise BadInput(f"{where}: [plan] near_duplicate_threshold {near!r} must be a number from 0 (no "
                       "near-duplicate check) to 1")
    strata_tables, source_tables = doc.get("stratum"), doc.get("source")
    if not isinstance(strata_tables, list) or not strata_tables:
        raise BadInput(f"{where}: no [[stratum]] tables; a hidden plan lists its allocation strata with "
                       "their context counts (docs/PRODUCING.md)")
    if not isinstance(source_tables, list) or not source_tables:
        raise BadInput(f"{where}: no [[source]] tables; list at least one source per stratum")
    strata: list[StratumPlan] = []
    for n, table in enumerate(strata_tables, 1):
        here = f"{where}: stratum {n}"
        unknown = set(table) - _STRATUM_KEYS
        if unknown:
            raise BadInput(f"{here}: unknown keys {sorted(unknown)}; allowed: {sorted(_STRATUM_KEYS)}")
        name = table.get("name")
        if not isinstance(name, str) or not _name_ok(name):
            raise BadInput(f"{here}: 'name' is required: letters, digits, '-', '_' and '.'")
        here = f"{where}: stratum {name!r}"
        stratum = StratumPlan(name, _count(table, "contexts", here, minimum=1),
                              _count(table, "qualification", here, minimum=0, default=0),
                              _count(table, "sentinels", here, minimum=0, default=0))
        if stratum.qualification > stratum.contexts:
            raise BadInput(f"{here}: qualification {stratum.qualification} is more than its "
                           f"{stratum.contexts} contexts; lower 'qualification'")
        if stratum.sentinels > stratum.contexts - stratum.qualification:
            raise BadInput(f"{here}: {stratum.sentinels} sentinels but only "
                           f"{stratum.contexts - stratum.qualification} analysis contexts (sentinels are "
                           "analysis contexts); lower 'sentinels' or 'qualification'")
        strata.append(stratum)
    names = [s.name for s in strata]
    if len(set(names)) != len(names):
        raise BadInput(f"{where}: stratum names must be distinct (got {names})")
    sources: list[PlanSource] = []
    for n, table in enumerate(source_tables, 1):
        here = f"{where}: source {n}"
        unknown = set(table) - _SOURCE_KEYS
        if "windows" in table:
            raise BadInput(f"{here}: 'windows' is the logits layout's; in a hidden plan the stratum's "
                           "'contexts' count decides (remove 'windows')")
        if unknown:
            raise BadInput(f"{here}: unknown keys {sorted(unknown)}; allowed: {sorted(_SOURCE_KEYS)}")
        key = table.get("key", table.get("domain"))
        for name, value in (("key", key), ("dataset", table.get("dataset")), ("split", table.get("split")),
                            ("stratum", table.get("stratum"))):
            if not isinstance(value, str) or not value:
                raise BadInput(f"{here}: {name!r} is required (a non-empty string)")
        assert isinstance(key, str)
        if not _name_ok(key):
            raise BadInput(f"{here}: key {key!r} may hold only letters, digits, '-', '_' and '.'")
        if table["stratum"] not in names:
            raise BadInput(f"{here}: stratum {table['stratum']!r} is not a [[stratum]] of the plan "
                           f"({', '.join(names)})")
        texts = {k: _text(table, k, here) for k in ("config", "revision", "builder", "text_field",
                                                   "source_id_field", "cluster_field", "semantic_class",
                                                   "language", "license", "document_start")}
        if (texts["builder"] is None) == (texts["text_field"] is None):
            raise BadInput(f"{here}: give exactly one of 'builder' ({', '.join(BUILDERS)}) or 'text_field'")
        if texts["builder"] is not None and texts["builder"] not in BUILDERS:
            raise BadInput(f"{here}: unknown builder {texts['builder']!r}; one of {', '.join(BUILDERS)}")
        representation = table.get("representation", "source_document")
        if representation not in REPRESENTATIONS:
            raise BadInput(f"{here}: representation {representation!r} is not one of "
                           f"{', '.join(REPRESENTATIONS)} (prepare renders no chat template)")
        rows_per_source = _count(table, "rows_per_source", here, minimum=1, default=1)
        grouping = [k for k, given in (("source_id_field", texts["source_id_field"] is not None),
                                       ("rows_per_source", rows_per_source != 1),
                                       ("document_start", texts["document_start"] is not None)) if given]
        if len(grouping) > 1:
            raise BadInput(f"{here}: give one of {', '.join(grouping)} (how rows become documents), not "
                           f"{len(grouping)}")
        if texts["document_start"] is not None:
            try:
                re.compile(texts["document_start"])
            except re.error as exc:
                raise BadInput(f"{here}: document_start {texts['document_start']!r} is not a regular "
                               f"expression ({exc}); fix it (Python re syntax)") from None
        scan_limit = table.get("scan_limit")
        if scan_limit is not None:
            scan_limit = _count(table, "scan_limit", here, minimum=1)
        sources.append(PlanSource(
            key=key, dataset=table["dataset"], split=table["split"], stratum=table["stratum"],
            config=texts["config"], revision=texts["revision"], builder=texts["builder"],
            text_field=texts["text_field"], source_id_field=texts["source_id_field"],
            cluster_field=texts["cluster_field"], rows_per_source=rows_per_source,
            document_start=texts["document_start"], scan_limit=scan_limit,
            semantic_class=texts["semantic_class"], language=texts["language"], license=texts["license"],
            representation=representation))
    keys = [s.key for s in sources]
    if len(set(keys)) != len(keys):
        raise BadInput(f"{where}: source keys must be distinct (got {keys})")
    fed = {s.stratum for s in sources}
    for stratum in strata:
        if stratum.name not in fed:
            raise BadInput(f"{where}: stratum {stratum.name!r} has no [[source]]; add one with "
                           f"stratum = {stratum.name!r} or remove the stratum")
    return Plan(tuple(strata), tuple(sources), per_source, where, float(near))


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """PLAN.toml: relative local dataset paths are relative to its folder."""
    p = Path(path)
    doc = load_toml(p, what="plan file", takes="--sources takes a PLAN.toml file (docs/PRODUCING.md)")
    plan = parse_plan(doc, str(p))
    sources = []
    for s in plan.sources:
        beside = p.parent / s.dataset
        missing_local = is_local_dataset(s.dataset) and not Path(s.dataset).expanduser().exists()
        if not Path(s.dataset).expanduser().is_absolute() and (beside.exists() or missing_local):
            s = replace(s, dataset=str(beside))
        sources.append(s)
    return replace(plan, sources=tuple(sources))


# --- the allocation (pure) ---------------------------------------------------------------------

@dataclass(frozen=True)
class Salts:
    """Every salt of a plan, derived from one seed (recorded in the suite)."""

    seed: int

    def _salt(self, what: str) -> str:
        return f"{SALT_PREFIX}:{self.seed}:{what}"

    @property
    def selection(self) -> str:
        return self._salt("selection")

    @property
    def offset(self) -> str:
        return self._salt("offset")

    @property
    def partition(self) -> str:
        return self._salt("partition")

    @property
    def sentinel(self) -> str:
        return self._salt("sentinel")


@dataclass(frozen=True)
class Document:
    """A source document: what the allocation needs to know of it (its tokens come on demand)."""

    source_key: str
    stratum: str
    dataset: str
    source_id: str
    source_cluster_id: str
    content_sha256: str
    tokens: int

    @property
    def cluster(self) -> str:
        """The published cluster key (:attr:`kldtui.formats.fidelity.ContextInfo.cluster_key`)."""
        return fid.compact_json([self.dataset, self.source_cluster_id])


@dataclass(frozen=True)
class Placed:
    """A context the allocation drew: its document, its token span and its place in the suite."""

    document: Document
    start: int
    stop: int
    selection_key: str
    tokens: tuple[int, ...]
    token_hash: str
    partition: str = "analysis"
    sentinel: bool = False


def selection_key(salts: Salts, doc: Document) -> str:
    return domain_hash(salts.selection, doc.stratum, doc.source_key, doc.source_id, doc.content_sha256)


def context_starts(salts: Salts, doc: Document, count: int, length: int) -> list[int]:
    """``count`` non-overlapping starts in ``doc``: one per equal segment, at an offset-salt offset."""
    segment = doc.tokens // count
    if segment < length:
        raise ValueError(f"{doc.tokens} tokens hold fewer than {count} contexts of {length}")
    starts = []
    for i in range(count):
        room = segment - length + 1
        offset = int(domain_hash(salts.offset, doc.stratum, doc.source_key, doc.source_id, doc.content_sha256,
                                 str(i)), 16) % room
        starts.append(i * segment + offset)
    return starts


class NearDuplicates:
    """Approximate deduplication: a document whose token 5-gram set is at least ``threshold``
    similar (Jaccard, estimated by MinHash) to a document already drawn from is passed over. The
    hash functions derive from a salt, so the choice is deterministic for a seed."""

    method = (f"MinHash Jaccard estimate over token {SHINGLE}-gram shingles, {PERMUTATIONS} multiply-shift "
              "hash functions from the selection salt; a document at or above the threshold against one "
              "already drawn from is passed over")

    def __init__(self, threshold: float, salt: str) -> None:
        import numpy as np

        self.threshold = threshold
        rng = np.random.default_rng(int(domain_hash(salt, "near-duplicates")[:16], 16))
        self._xor = rng.integers(0, 2**63, PERMUTATIONS, dtype=np.uint64) * np.uint64(2)
        self._mul = rng.integers(0, 2**62, PERMUTATIONS, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self._kept = np.zeros((0, PERMUTATIONS), dtype=np.uint64)
        self.rejected: list[str] = []  # "source key/source id" of the documents passed over

    def signature(self, ids: Sequence[int]) -> Any:
        """The MinHash signature of a token sequence (None when it is shorter than a shingle)."""
        import numpy as np

        tokens = np.asarray(ids, dtype=np.uint64)
        if tokens.size < SHINGLE:
            return None
        n = tokens.size - SHINGLE + 1
        shingles = np.zeros(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for j in range(SHINGLE):  # a polynomial hash of the 5 ids, modulo 2**64
                shingles = shingles * np.uint64(1_000_003) + tokens[j:j + n]
            shingles = np.unique(shingles)
            out = np.full(PERMUTATIONS, np.iinfo(np.uint64).max, dtype=np.uint64)
            for start in range(0, shingles.size, 4096):
                block = (shingles[start:start + 4096, None] ^ self._xor) * self._mul
                out = np.minimum(out, block.min(axis=0))
        return out

    def admit(self, doc: Document, ids: Sequence[int]) -> bool:
        """Whether ``doc`` may give contexts (and if so, remember it)."""
        import numpy as np

        if self.threshold <= 0:
            return True
        sig = self.signature(ids)
        if sig is None:
            return True
        if self._kept.shape[0] and float((self._kept == sig).mean(axis=1).max()) >= self.threshold:
            self.rejected.append(f"{doc.source_key}/{doc.source_id}")
            return False
        self._kept = np.vstack([self._kept, sig])
        return True


def allocate(plan: Plan, documents: Sequence[Document], tokens_of: Callable[[Document], Sequence[int]], *,
             length: int, salts: Salts, cancel: Cancel | None = None,
             near: NearDuplicates | None = None) -> list[Placed]:
    """The suite's contexts in order, with partitions and sentinels (module docstring); BadInput
    (one line naming the plan, the stratum and what to do) when a count cannot be met exactly.
    ``near`` passes over near-duplicate documents (by default the plan's threshold)."""
    near = NearDuplicates(plan.near_duplicate_threshold, salts.selection) if near is None else near
    seen: set[str] = set()
    unique: list[Document] = []
    for doc in documents:  # exact content deduplication, first occurrence kept
        if doc.content_sha256 not in seen:
            seen.add(doc.content_sha256)
            unique.append(doc)
    out: list[Placed] = []
    partition_of: dict[str, tuple[str, str]] = {}  # cluster -> (partition, stratum that decided it)
    for stratum in plan.strata:
        if cancel is not None:
            cancel.check()
        mine = sorted((d for d in unique if d.stratum == stratum.name), key=lambda d: selection_key(salts, d))
        usable = [d for d in mine if d.tokens >= length]
        capacity = sum(min(plan.contexts_per_source, d.tokens // length) for d in usable)
        if capacity < stratum.contexts:
            raise BadInput(
                f"{plan.where}: stratum {stratum.name!r}: {stratum.contexts} contexts asked, its sources "
                f"give only {capacity} ({len(usable)} of {len(mine)} distinct documents hold {length} "
                f"tokens, at most {plan.contexts_per_source} contexts each); lower its 'contexts', raise "
                "[plan] contexts_per_source, lower --context-length or add sources")
        placed: list[Placed] = []
        passed_over = 0
        for doc in usable:
            need = stratum.contexts - len(placed)
            if need == 0:
                break
            take = min(plan.contexts_per_source, doc.tokens // length, need)
            ids = tokens_of(doc)
            if len(ids) != doc.tokens:
                raise ValueError(f"document {doc.source_id}: {len(ids)} tokens, {doc.tokens} expected")
            if not near.admit(doc, ids):
                passed_over += 1
                continue
            key = selection_key(salts, doc)
            for start in context_starts(salts, doc, take, length):
                window = tuple(int(t) for t in ids[start:start + length])
                placed.append(Placed(doc, start, start + length, key, window, token_ids_hash(window)))
        if len(placed) < stratum.contexts:
            raise BadInput(
                f"{plan.where}: stratum {stratum.name!r}: {stratum.contexts} contexts asked, its sources "
                f"give only {len(placed)} once {passed_over} near-duplicate documents are passed over "
                f"(near_duplicate_threshold {near.threshold}); lower its 'contexts', add sources, or raise "
                "[plan] near_duplicate_threshold")
        placed.sort(key=lambda c: (c.selection_key, c.start))
        out.extend(_partition(plan, stratum, placed, salts, partition_of))
    return out


def _reachable(sizes: Sequence[int]) -> int:
    """The sums some subset of ``sizes`` makes, as the bits of an integer (bit n: sum n)."""
    reach = 1
    for size in sizes:
        reach |= reach << size
    return reach


def _whole_clusters(order: Sequence[str], sizes: Mapping[str, int], target: int) -> set[str] | None:
    """The clusters, taken in ``order`` wherever the rest can still complete the sum, whose sizes
    add up to ``target`` exactly (the earliest such choice in that order); None when none does."""
    suffix = [1] * (len(order) + 1)  # suffix[i]: the sums clusters order[i:] can make
    for i in range(len(order) - 1, -1, -1):
        suffix[i] = suffix[i + 1] | (suffix[i + 1] << sizes[order[i]])
    if not (suffix[0] >> target) & 1:
        return None
    chosen, left = set(), target
    for i, cluster in enumerate(order):
        size = sizes[cluster]
        if size <= left and (suffix[i + 1] >> (left - size)) & 1:
            chosen.add(cluster)
            left -= size
    return chosen


def _partition(plan: Plan, stratum: StratumPlan, placed: list[Placed], salts: Salts,
               partition_of: dict[str, tuple[str, str]]) -> list[Placed]:
    here = f"{plan.where}: stratum {stratum.name!r}"
    sizes: dict[str, int] = {}
    for c in placed:
        sizes[c.document.cluster] = sizes.get(c.document.cluster, 0) + 1
    for cluster in sizes:
        if cluster in partition_of:
            raise BadInput(f"{here}: source cluster {cluster} also feeds stratum "
                           f"{partition_of[cluster][1]!r}; a cluster belongs to one stratum: give those "
                           "sources different datasets or cluster fields")
    order = sorted(sizes, key=lambda k: domain_hash(salts.partition, stratum.name, k))
    qualification = _whole_clusters(order, sizes, stratum.qualification)
    if qualification is None:
        reach = _reachable([sizes[k] for k in order])
        near = [n for n in range(stratum.contexts + 1) if (reach >> n) & 1]
        below = max((n for n in near if n < stratum.qualification), default=0)
        above = min((n for n in near if n > stratum.qualification), default=None)
        options = f"{below}" + (f" or {above}" if above is not None else "")
        raise BadInput(f"{here}: qualification = {stratum.qualification} cannot be made of whole source "
                       f"clusters (cluster sizes {sorted(sizes.values(), reverse=True)}); set qualification "
                       f"= {options}, or lower [plan] contexts_per_source")
    for cluster in sizes:
        partition_of[cluster] = ("qualification" if cluster in qualification else "analysis", stratum.name)
    marked = [replace(c, partition="qualification" if c.document.cluster in qualification else "analysis")
              for c in placed]

    def sentinel_key(i: int) -> str:
        context = marked[i]
        return domain_hash(salts.sentinel, stratum.name, context.document.content_sha256, context.token_hash)

    analysis = sorted((i for i, c in enumerate(marked) if c.partition == "analysis"), key=sentinel_key)
    for i in analysis[:stratum.sentinels]:
        marked[i] = replace(marked[i], sentinel=True)
    return marked


# --- documents from loaded rows -----------------------------------------------------------------

@dataclass
class SourceDocuments:
    """A loaded source's documents with their texts (tokenized when the allocation asks)."""

    source: PlanSource
    dataset_label: str
    revision: str
    rows: int
    documents: list[Document] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # source_id -> text
    rows_of: dict[str, int] = field(default_factory=dict)  # source_id -> rows in the document


def _field_value(row: Mapping[str, Any], name: str, where: str, n: int) -> str:
    value = row.get(name)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise BadInput(f"{where}: row {n} has no usable {name!r} (text or a whole number); fix the data or "
                       "choose another field")
    return str(value)


def documents_of(source: PlanSource, rows: Sequence[Mapping[str, Any]], *, dataset_label: str, revision: str,
                 where: str) -> SourceDocuments:
    """Group a source's rows into documents (one row, ``rows_per_source`` rows, the rows sharing
    ``source_id_field`` in first-appearance order, or the rows from one that matches
    ``document_start`` to the next: ``row-N`` after the first), each in the cluster
    ``cluster_field`` names."""
    if source.scan_limit is not None:
        rows = rows[:source.scan_limit]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    start = re.compile(source.document_start) if source.document_start is not None else None
    current = "row-0"
    for n, row in enumerate(rows):
        if source.source_id_field is not None:
            doc_id = _field_value(row, source.source_id_field, where, n)
        elif start is not None:
            value = row.get(source.start_field)
            if isinstance(value, str) and start.search(value):
                current = f"row-{n}"
            doc_id = current
        else:
            per = source.rows_per_source
            doc_id = f"rows-{n // per * per}" if per > 1 else f"row-{n}"
        groups.setdefault(doc_id, []).append(row)
    out = SourceDocuments(source, dataset_label, revision, len(rows))
    loader = source.loader()
    for doc_id, members in groups.items():
        text = loader.text(members)
        if not text:
            continue
        clusters = {_field_value(r, source.cluster_field, where, 0) for r in members} \
            if source.cluster_field is not None else {doc_id}
        if len(clusters) != 1:
            raise BadInput(f"{where}: document {doc_id!r} has rows in clusters {sorted(clusters)[:4]}; a "
                           f"document belongs to one cluster: group rows by {source.cluster_field!r} too")
        out.texts[doc_id] = text
        out.rows_of[doc_id] = len(members)
        out.documents.append(Document(source.key, source.stratum, dataset_label, doc_id, clusters.pop(),
                                      hashlib.sha256(text.encode("utf-8")).hexdigest(), tokens=-1))
    return out


# --- the stage ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HiddenPrepareResult:
    suite: Any  # kldtui.formats.suite.Suite
    output_dir: Path
    contexts: int


# bytes of one tokenizer file hashed into the suite's record (the largest vocabularies' tokenizer.json
# are tens of MiB); a larger file in a tokenizer folder is refused rather than read into memory
TOKENIZER_FILE_LIMIT = 256 * 1024 * 1024


def _tokenizer_record(name: str, tok: Any) -> dict[str, Any]:
    files: dict[str, str] = {}
    if is_local_tokenizer(name):
        folder = Path(name).expanduser()
        for f in sorted(folder.iterdir()):
            if f.is_file() and (f.name.startswith("tokeni") or f.suffix in (".model", ".txt", ".py")
                                or f.name in ("special_tokens_map.json", "vocab.json", "merges.txt")):
                try:  # through safe_io: a FIFO put there after is_file() is refused, never waited on
                    data = read_bytes(f, limit=TOKENIZER_FILE_LIMIT)
                except OSError as exc:
                    raise read_failure(f, exc, "tokenizer file", "remove it from the tokenizer folder or "
                                       "give another tokenizer") from None
                files[f.name] = hashlib.sha256(data).hexdigest()
    return {"checkpoint_revision": tokenizer_id(name, tok), "class": type(tok).__name__, "files": files,
            "vocabulary_size": len(tok), "source": "local folder" if is_local_tokenizer(name) else "hub"}


def hidden_width_of(tokenizer: str) -> int | None:
    """The model's hidden width when the tokenizer folder is a checkpoint's (its config.json)."""
    if not is_local_tokenizer(tokenizer):
        return None
    try:
        doc = json.loads(read_text(Path(tokenizer).expanduser() / "config.json", limit=MODEL_CONFIG_LIMIT))
    except (OSError, ValueError):
        return None
    for holder in (doc, doc.get("text_config") if isinstance(doc, dict) else None):
        if isinstance(holder, dict) and isinstance(holder.get("hidden_size"), int):
            return int(holder["hidden_size"])
    return None


def footprint_line(plan: Plan, tokenizer: str, length: int) -> str:
    """What prepare and the capture after it will take, said before anything is loaded."""
    from kldtui.text import human_bytes

    contexts = plan.contexts
    token_bytes = contexts * length * 7  # compact JSON: at most 6 digits and a comma per id
    local = sum(p.stat().st_size for s in plan.sources if is_local_dataset(s.dataset)
                for p in ([Path(s.dataset)] if Path(s.dataset).is_file() else Path(s.dataset).rglob("*"))
                if p.is_file())
    width = hidden_width_of(tokenizer)
    per_context = (length - 1) * 2
    later = (f"{human_bytes(contexts * per_context * width)} of BF16 hidden states at hidden width {width}"
             if width else f"{human_bytes(per_context * 1000)} per context per 1,000 of the model's hidden "
             f"width ({human_bytes(per_context * 7168)} at 7,168)")
    memory = f"{human_bytes(local)} of local rows" if local else "the sources' rows"
    return (f"disk: at most {human_bytes(token_bytes)} of token files here; the hidden capture will add "
            f"{later}; memory: {memory} as text at once, plus the token ids of the documents the "
            f"{contexts} contexts are drawn from")


def prepare_hidden_suite(output_dir: str | os.PathLike[str], tokenizer: str, plan: Plan, *,
                         context_length: int = 2048, seed: int = 1, trust_remote_code: bool = False,
                         kind: str = KIND, emit: EventSink = null_sink,
                         cancel: Cancel | None = None) -> HiddenPrepareResult:
    """Write a new context suite (suite-manifest.json, tokens/, partitions.json, sources.json,
    source-registry.json) at ``output_dir``, drawn from ``plan`` with ``seed``."""
    out = Path(output_dir)
    check_new_folder(out)
    if context_length < 2:
        raise BadInput(f"--context-length {context_length}: a context needs at least 2 tokens")
    if seed < 0 or seed > 2**63:
        raise BadInput(f"--seed {seed}: give a whole number from 0 to 2**63")
    loaders = [s.loader() for s in plan.sources]
    check_local_inputs(tokenizer, loaders)
    check_hub(tokenizer, loaders)
    emit(StageStarted(STAGE, detail=f"{len(plan.strata)} strata, {plan.contexts} contexts of "
                      f"{context_length} tokens from {len(plan.sources)} sources, seed {seed} -> {out}"))
    emit(Notice(STAGE, footprint_line(plan, tokenizer, context_length)))
    tok = load_tokenizer(tokenizer, trust_remote_code=trust_remote_code)
    salts = Salts(seed)

    loaded: list[SourceDocuments] = []
    for n, source in enumerate(plan.sources, 1):
        if cancel is not None:
            cancel.check()
        where = f"{plan.where}: source {n} ({source.key}: {source.dataset})"
        emit(Notice(STAGE, f"loading {where}"))
        rows = load_source(source.loader(), where, source.extra_columns)
        # a local dataset comes labelled by its file or folder name (prepare.local_dataset_label)
        loaded.append(documents_of(source, rows.rows, dataset_label=rows.dataset_label,
                                   revision=rows.revision, where=where))
        emit(Progress(STAGE, "sources", n, len(plan.sources), "sources"))

    # every document is tokenized for its count (which decides what it can give); only those the
    # allocation draws from keep their token ids (and character offsets) in memory
    fast = bool(getattr(tok, "is_fast", False))
    texts = {(g.source.key, d.source_id): g.texts[d.source_id] for g in loaded for d in g.documents}
    encoded: dict[tuple[str, str], tuple[list[int], list[int] | None]] = {}

    def encode_document(key: tuple[str, str]) -> tuple[list[int], list[int] | None]:
        enc = tok(texts[key], add_special_tokens=False, return_offsets_mapping=fast)
        chars = [int(a) for a, _ in enc["offset_mapping"]] if fast else None
        return [int(i) for i in enc["input_ids"]], chars

    def tokens_of(doc: Document) -> list[int]:
        key = (doc.source_key, doc.source_id)
        if key not in encoded:
            encoded[key] = encode_document(key)
        return encoded[key][0]

    documents: list[Document] = []
    total, throttle = len(texts), Throttle()
    for group in loaded:
        for doc in group.documents:
            if cancel is not None:
                cancel.check()
            count = len(tok(texts[(doc.source_key, doc.source_id)], add_special_tokens=False)["input_ids"])
            documents.append(replace(doc, tokens=count))
            if throttle.ready(final=len(documents) == total):
                emit(Progress(STAGE, "documents", len(documents), total, "documents"))
    near = NearDuplicates(plan.near_duplicate_threshold, salts.selection)
    contexts = allocate(plan, documents, tokens_of, length=context_length, salts=salts, cancel=cancel,
                        near=near)
    by_key = {g.source.key: g for g in loaded}

    def write(root: Path) -> None:
        new, source_items = [], []
        for index, c in enumerate(contexts):
            doc, group = c.document, by_key[c.document.source_key]
            chars = encoded[(doc.source_key, doc.source_id)][1]
            new.append(fid.NewContext(list(c.tokens), doc.stratum, partition=c.partition, sentinel=c.sentinel,
                                      semantic_class=group.source.semantic_class or group.source.key, fields={
                                          "dataset": group.dataset_label,
                                          "dataset_config": group.source.config,
                                          "dataset_revision": group.revision,
                                          "dataset_split": group.source.split, "source_id": doc.source_id,
                                          "source_cluster_id": doc.source_cluster_id,
                                          "source_content_sha256": doc.content_sha256,
                                          "source_char_start": chars[c.start] if chars else None,
                                          "source_token_start": c.start, "source_token_end": c.stop,
                                          "source_key": doc.source_key, "selection_key": c.selection_key,
                                          "language": group.source.language,
                                          "representation_type": group.source.representation,
                                          "chat_template_applied": False}))
            source_items.append({
                "context_index": index, "source_key": doc.source_key, "source_id": doc.source_id,
                "source_cluster_id": doc.source_cluster_id, "source_content_sha256": doc.content_sha256,
                "source_license": group.source.license,
                "extraction": (BUILDERS[group.source.builder].construction if group.source.builder
                               else f"non-empty {group.source.text_field!r} rows (stripped) joined by two "
                               "newlines"),
                "metadata": {"source_tokens": doc.tokens, "rows": group.rows_of[doc.source_id],
                             "source_token_start": c.start, "source_token_end": c.stop}})
        registry = [{"key": g.source.key, "dataset": g.dataset_label, "config": g.source.config,
                     "split": g.source.split, "revision": g.revision, "stratum": g.source.stratum,
                     "dataset_fingerprint": fid.dataset_fingerprint(g.dataset_label, g.revision,
                                                                    g.source.config, g.source.split),
                     "license": g.source.license, "scan_limit": g.source.scan_limit, "rows": g.rows,
                     "documents": len(g.documents)} for g in loaded]
        extra = {
            "add_special_tokens": False, "exact_content_deduplication": True,
            "approximate_deduplication": ({"method": near.method, "rejection_threshold": near.threshold,
                                           "rejected_documents": near.rejected} if near.threshold > 0 else
                                          {"method": None, "rejection_threshold": None}),
            "chat_rendering": {"implementation": None, "add_generation_prompt": False, "thinking": False,
                               "jinja_template": None},
            "selection": SELECTION_RULE, "partition_rule": PARTITION_RULE,
            "plan": {"seed": seed, "contexts_per_source": plan.contexts_per_source,
                     "near_duplicate_threshold": plan.near_duplicate_threshold,
                     "strata": [{"name": s.name, "contexts": s.contexts, "qualification": s.qualification,
                                 "sentinels": s.sentinels} for s in plan.strata]},
        }
        fid.write_context_suite(root, new, kind=kind, selection_salt=salts.selection,
                                offset_salt=salts.offset, partition_salt=salts.partition,
                                sentinel_salt=salts.sentinel,
                                tokenizer=_tokenizer_record(tokenizer, tok), extra=extra)
        from kldtui.formats.atomic import write_json_atomic

        write_json_atomic(root / fid.SOURCES, source_items)
        write_json_atomic(root / fid.SOURCE_REGISTRY, {"format_version": 1, "sources": registry})

    build_new_folder(out, write)
    from kldtui.formats.suite import load_suite

    suite = load_suite(out)
    clusters = len({c.document.cluster for c in contexts})
    emit(StageFinished(STAGE, summary=f"{suite.window_count} contexts in {len(plan.strata)} strata from "
                       f"{clusters} source clusters, suite hash {suite.suite_token_hash_sha256[:12]}... -> "
                       f"{out}",
                       figures={
                           "contexts": suite.window_count, "context_length": context_length,
                           "source_clusters": clusters, "seed": seed,
                           "suite_token_hash_sha256": suite.suite_token_hash_sha256}))
    return HiddenPrepareResult(suite, out, len(contexts))


__all__ = ["Document", "Placed", "Plan", "PlanSource", "Salts", "StratumPlan", "allocate", "context_starts",
           "documents_of", "load_plan", "parse_plan", "prepare_hidden_suite"]
