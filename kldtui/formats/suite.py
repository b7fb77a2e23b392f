"""The suite model: ``suite-manifest.json``, token files, hashes and logits-folder manifests.

Everything here follows docs/FORMATS.md field for field. Loading validates what kldtui
relies on and keeps every other field (``raw``) so a document can be copied unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui.errors import BadField, BadInput, remedy
from kldtui.formats import untrusted_json
from kldtui.formats.names import check_name, check_relative_path
from kldtui.formats.safe_io import open_regular_raw, read_text

SUITE_MANIFEST = "suite-manifest.json"
LOGITS_MANIFEST = "manifest.json"
LOGITS_FORMAT = "kimi-k3-kld-reference-v1"
TENSOR_KEY = "logits"
TOKENS_DIR = "tokens"
# What to do about a suite or logits folder kldtui cannot read: one that is not there or is no such
# folder at all (the path is wrong), and one whose files are damaged (every field error of its
# manifests, through kldtui.errors.remedy)
SUITE_REMEDY = "give a suite folder that kldtui download or kldtui prepare made"
SUITE_DAMAGED = "download or prepare the suite again"
LOGITS_REMEDY = ("give a reference or candidate folder that kldtui download, kldtui finalize or kldtui run "
                 "wrote")
LOGITS_DAMAGED = "download or capture that folder again"
# ... and about a folder made from another suite (or other tokens) than the one given
OTHER_SUITE = "give the folder made from this suite, or the suite it was made from"

# The Hub's dataset card, at the top of a published suite (either kind): the Hub shows it, no
# stage reads it, no manifest or checksums.txt of kldtui's lists it. Never part of the suite's data.
DATASET_CARD = "README.md"
DATASET_CARD_LIMIT = 16 * 1024 * 1024  # bytes of a suite's own card read (kldtui's are a few KB)


def suite_manifest_path(folder: str | os.PathLike[str]) -> Path:
    """A suite folder's ``suite-manifest.json``."""
    return Path(folder) / SUITE_MANIFEST


def logits_manifest_path(folder: str | os.PathLike[str]) -> Path:
    """A logits folder's ``manifest.json`` (``ref/`` or a finalized candidate folder)."""
    return Path(folder) / LOGITS_MANIFEST


def manifest_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A manifest's JSON object for a glance at what it records (``kind``, ``runtime``), or None when
    it is missing, not a regular file or not a JSON object: for checks that only need to know, never
    for loading the folder (:func:`load_logits_manifest` and its kind's loaders validate it)."""
    try:
        doc = json.loads(read_text(path, limit=MANIFEST_LIMIT))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


# A manifest's ``runtime.server_start``: a token made fresh at each start of a server kldtui launches
# (kldtui.stages.serve.start_serve), so two captures each from its own server start record two tokens and
# a copied folder its original's: what tells a deterministic server's two captures from one capture
# copied (kldtui.decide.noise.one_capture). A file's word: it can only change what is said, never make a
# verdict final (docs/STATISTICS.md, "The noise model").
SERVER_START = "server_start"


def new_server_start() -> str:
    """A fresh ``runtime.server_start`` token: when, and 16 random hex digits."""
    import datetime
    import secrets

    return f"{datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')} {secrets.token_hex(8)}"


def server_start_of(manifest: dict[str, Any]) -> str | None:
    """The ``runtime.server_start`` a manifest object records (:func:`manifest_object`), or None."""
    runtime = manifest.get("runtime")
    token = runtime.get(SERVER_START) if isinstance(runtime, dict) else None
    return token if isinstance(token, str) and token else None


def card_runtime(runtime: Any) -> Any:
    """A manifest's ``runtime`` as a dataset card shows it: without ``server_start``, kldtui's own
    token telling one server start from another, which says nothing of the model or the server."""
    if not isinstance(runtime, dict):
        return runtime
    return {key: value for key, value in runtime.items() if key != SERVER_START}


def dataset_card(root: str | os.PathLike[str]) -> Path | None:
    """The dataset card at the top of a suite folder when it is there as a regular file; None
    otherwise (a link, a folder or a FIFO under that name is not taken for a card). Known by its
    name and place alone: nothing in the file is read, so it vouches for nothing."""
    path = Path(root) / DATASET_CARD
    try:
        return path if stat.S_ISREG(os.lstat(path).st_mode) else None
    except OSError:
        return None


def token_file_name(index: int, domain: str) -> str:
    """A window's token file, relative to the suite folder (the published naming)."""
    return f"{TOKENS_DIR}/window-{index:03d}-{domain}.json"


def token_ids_json(ids: Sequence[int]) -> str:
    """The compact JSON text of a token list, as hashed and stored (no trailing newline)."""
    return json.dumps([int(i) for i in ids], separators=(",", ":"))


def token_ids_hash(ids: Sequence[int]) -> str:
    return hashlib.sha256(token_ids_json(ids).encode("ascii")).hexdigest()


def suite_token_hash(window_hashes: Sequence[str]) -> str:
    """SHA-256 of the windows' token hashes joined with newlines, in window order."""
    return hashlib.sha256("\n".join(window_hashes).encode("ascii")).hexdigest()


def logits_file_name(window_index: int) -> str:
    return f"logits_{window_index:03d}.safetensors"


def require_field(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``doc[key]``, checked to be a ``kind``: BadInput naming ``where`` and the field otherwise."""
    if key not in doc:
        raise BadField(f"{where}: missing field {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadField(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


# bytes of a manifest read (suite, logits, scores, tensor folder, LM head, partitions, and a hidden-state
# suite's capture runtime and replay-qualification record): the largest suites' list a few MiB; a larger
# file is refused, naming it, rather than read into memory
MANIFEST_LIMIT = 64 * 1024 * 1024
# bytes of one window's token file read: a token id is at most 8 digits and a separator, so a window of a
# million tokens is about 10 MB; a larger file is refused, naming it, rather than read into memory
TOKEN_FILE_LIMIT = 64 * 1024 * 1024


def _read_json(path: Path, what: str, what_to_do: str, limit: int) -> Any:
    return untrusted_json.read_json(path, what=what, remedy=what_to_do, limit=limit)  # never blocks on a FIFO


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def require_count(doc: dict[str, Any], key: str, where: str) -> int:
    """A whole number >= 0 (a window index, a size, a row count); BadInput naming the field."""
    value = require_field(doc, key, int, where)
    if value < 0:
        raise BadField(f"{where}: field {key!r} is {value}; it cannot be negative")
    return int(value)


# values in one row of logits or hidden states: the largest vocabularies hold a few hundred thousand
# tokens, hidden widths tens of thousands; a manifest stating more is damaged or forged (the disk plan
# would ask for exabytes of it)
MAX_ROW_WIDTH = 1 << 24


def require_width(doc: dict[str, Any], key: str, where: str) -> int:
    """A row's width (``vocab_size``, ``hidden_width``): a whole number from 1 to :data:`MAX_ROW_WIDTH`;
    BadInput naming the field."""
    value = require_field(doc, key, int, where)
    if not 1 <= value <= MAX_ROW_WIDTH:
        shown = str(value) if abs(value) < 10**15 else f"{str(value)[:8]}... ({len(str(value))} digits)"
        raise BadField(f"{where}: field {key!r} is {shown}; a vocabulary or hidden width is a whole number "
                       f"from 1 to {MAX_ROW_WIDTH:,}")
    return int(value)


def require_sha256(doc: dict[str, Any], key: str, where: str) -> str:
    """A SHA-256 as 64 lower-case hex digits; BadInput naming the field."""
    value = require_field(doc, key, str, where)
    if not _SHA256.match(value):
        raise BadField(f"{where}: field {key!r} {value[:20]!r} is not a SHA-256 (64 hex digits)")
    return str(value)


def read_versioned(path: str | os.PathLike[str], file_name: str, what: str, *,
                   what_to_do: str) -> tuple[Path, dict[str, Any]]:
    """Read a format-version-1 JSON object (a file, or the folder holding ``file_name``); BadInput
    naming the file and ending with ``what_to_do`` when it is not one."""
    p = Path(path)
    if p.is_dir():
        p = p / file_name
    doc = _read_json(p, what, what_to_do, MANIFEST_LIMIT)
    if not isinstance(doc, dict):
        raise BadInput(f"{p}: expected a JSON object; {what_to_do}")
    with remedy(what_to_do):
        version = require_field(doc, "format_version", int, str(p))
    if version != 1:
        raise BadInput(f"{p}: format_version {version} is not supported (expected 1); {what_to_do}")
    return p, doc


@dataclass(frozen=True)
class WindowSpec:
    index: int
    domain: str
    domain_index: int
    num_tokens: int
    token_file: str
    token_ids_json_sha256: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # a hidden-state suite's context (kldtui.formats.fidelity), which the compare, verify and download
    # stages treat as a window; only its name in messages differs (:attr:`unit`, :attr:`digits`)
    context: bool = field(default=False, compare=False)
    # the first scored position: 0, or where a llama.cpp base file's scoring starts (n_ctx / 2);
    # the server still computes rows 0 .. num_tokens - 2, the reference holds rows from here on
    scored_row_start: int = 0

    @property
    def scored_positions(self) -> int:
        """Rows of the window's reference (and finalized candidate) files."""
        return self.num_tokens - 1 - self.scored_row_start

    @property
    def captured_rows(self) -> int:
        """Rows a server computes for the window: every prompt position but the last."""
        return self.num_tokens - 1

    @property
    def unit(self) -> str:
        """``window``, or ``context`` (:func:`unit_name`)."""
        return unit_name(contexts=self.context)

    @property
    def digits(self) -> int:
        """The index's width in names: ``window 003``, ``context 0003``."""
        return index_digits(self.context)

    @property
    def name(self) -> str:
        """``window 003``, or a hidden-state suite's ``context 0003``: how messages, progress tasks and
        events name it (the one rule, :func:`index_name`; front ends read it back from an event,
        ``WindowState.name``)."""
        return index_name(self.index, self.context)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.domain})"

    @property
    def chunk_dir_name(self) -> str:
        return f"window-{self.index:03d}-{self.domain}-chunks"


def unit_name(contexts: bool) -> str:
    """What one of a suite's units is called: ``context`` for a hidden-state suite's contexts, else
    ``window``. The one rule, for a window (:attr:`WindowSpec.unit`: ``contexts`` is
    :attr:`WindowSpec.context`), windows together (:func:`units_of`) and a report's
    (:attr:`~kldtui.formats.report_model.ComparisonReport.unit`: ``contexts`` is whether it has a
    hidden-state suite's statistics)."""
    return CONTEXT_UNIT if contexts else WINDOW_UNIT


WINDOW_UNIT, CONTEXT_UNIT = "window", "context"


def index_digits(contexts: bool) -> int:
    """The width of a unit's index in its name: 3 for a window (``window 003``), 4 for a hidden-state
    suite's context (``context 0003``)."""
    return 4 if contexts else 3


def index_name(index: int, contexts: bool) -> str:
    """``window 003``, or a hidden-state suite's ``context 0003`` (``contexts``): the one rule for a
    unit's name by its index (:attr:`WindowSpec.name`; :func:`name_among` where no spec is at hand)."""
    return f"{unit_name(contexts)} {index:0{index_digits(contexts)}d}"


def name_among(windows: Sequence[WindowSpec], index: int, domain: str | None = None) -> str:
    """How messages name the unit ``index`` (of ``domain``) of the suite whose units are ``windows``,
    where no spec of it is at hand (a capture record's, read back from disk): its spec's label
    (``context 0003 (chinese)``) when ``windows`` hold it, else by the same rule in the suite's unit
    words (a record of a window the suite no longer lists); ``window`` words when ``windows`` is empty
    (no suite to say otherwise)."""
    spec = next((w for w in windows if w.index == index), None)
    if spec is not None:
        return spec.label
    name = index_name(index, bool(windows) and windows[0].context)
    return f"{name} ({domain})" if domain else name


# the names of a stage's count task (its Progress task and unit): a suite's units, plural
COUNT_TASKS = tuple(f"{unit_name(contexts)}s" for contexts in (False, True))


def unit_of(windows: Sequence[WindowSpec]) -> str:
    """What one of ``windows`` is called: ``window``, or a hidden-state suite's ``context``
    (:attr:`WindowSpec.unit`; ``window`` when there are none)."""
    return windows[0].unit if windows else unit_name(contexts=False)


def units_of(windows: Sequence[WindowSpec]) -> str:
    """What ``windows`` are called together: ``windows``, or a hidden-state suite's ``contexts``
    (:func:`unit_of`); the count tasks and stage lines say it, so ``--batch`` and the
    dashboard name a suite's units as its messages do."""
    return f"{unit_of(windows)}s"


@dataclass(frozen=True)
class Suite:
    """A loaded ``suite-manifest.json``; ``root`` is the folder token files are relative to."""

    root: Path
    path: Path
    format_version: int
    context_length: int
    window_count: int
    suite_token_hash_sha256: str
    windows: tuple[WindowSpec, ...]
    domain_counts: dict[str, int]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def scored_positions_per_window(self) -> int:
        return self.context_length - 1

    def window(self, index: int) -> WindowSpec:
        for w in self.windows:
            if w.index == index:
                return w
        raise BadInput(f"{self.path}: the suite has no window {index} "
                       f"(it has 0..{self.window_count - 1})")

    def select(self, start: int = 0, stop: int | None = None) -> list[WindowSpec]:
        """Windows with ``start <= index < stop``; a bad range raises BadInput."""
        stop = self.window_count if stop is None else stop
        if not 0 <= start < stop <= self.window_count:
            unit = unit_of(self.windows)  # a hidden-state suite's: context
            raise BadInput(f"{unit} range [{start}, {stop}) is outside the suite ({unit}s "
                           f"0-{self.window_count - 1}, {self.path}); fix the start/stop window"
                           + ("" if unit == WINDOW_UNIT else f" (a {unit}'s index)"))
        return [w for w in self.windows if start <= w.index < stop]

    def token_path(self, window: WindowSpec) -> Path:
        """Absolute path of a window's token file; refuses paths that leave the suite folder."""
        rel = Path(window.token_file)
        root = self.root.resolve()
        try:
            target = (root / rel).resolve()
        except (RuntimeError, OSError) as exc:  # a symlink loop
            raise BadInput(f"{self.path}: {window.label} token_file {window.token_file!r}: {exc}") from None
        if rel.is_absolute() or not target.is_relative_to(root):
            raise BadInput(f"{self.path}: {window.label} token_file {window.token_file!r} points "
                           f"outside the suite folder {root}; fix the manifest")
        return target

    def load_tokens(self, window: WindowSpec, *, check_hash: bool = True) -> list[int]:
        """The window's token ids, checked against the manifest's count and hash."""
        path = self.token_path(window)
        ids = _read_json(path, f"token file of {window.label}", SUITE_DAMAGED, TOKEN_FILE_LIMIT)
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise BadInput(f"{path}: {window.label}: expected a JSON list of token ids; {SUITE_DAMAGED}")
        if len(ids) != window.num_tokens:
            raise BadInput(f"{path}: {window.label} has {len(ids)} tokens, the manifest says "
                           f"{window.num_tokens}; {SUITE_DAMAGED}")
        if check_hash:
            got = token_ids_hash(ids)
            if got != window.token_ids_json_sha256:
                raise BadInput(f"{path}: {window.label} token hash {got[:12]}... does not match "
                               f"the manifest's {window.token_ids_json_sha256[:12]}...; the token "
                               f"file was changed or belongs to another suite; {SUITE_DAMAGED}")
        return ids

    def check_suite_hash(self) -> str:
        """Recompute the suite hash from the windows' token hashes; raise on mismatch."""
        got = suite_token_hash([w.token_ids_json_sha256 for w in self.windows])
        if got != self.suite_token_hash_sha256:
            raise BadInput(f"{self.path}: suite_token_hash_sha256 {self.suite_token_hash_sha256[:12]}"
                           f"... does not match the windows' token hashes ({got[:12]}...); {SUITE_DAMAGED}")
        return got


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """Load ``suite-manifest.json`` (a file, or a folder holding it) and validate its structure."""
    p, doc = read_versioned(path, SUITE_MANIFEST, "suite manifest", what_to_do=SUITE_REMEDY)
    with remedy(SUITE_DAMAGED):
        return _suite_from_doc(p, doc)


def _suite_from_doc(p: Path, doc: dict[str, Any]) -> Suite:
    if "contexts" in doc and "windows" not in doc:  # a hidden-state suite (docs/FORMATS.md)
        from kldtui.formats.fidelity import suite_from_contexts

        return suite_from_contexts(p, doc)
    where = str(p)
    version = int(doc["format_version"])
    context_length = require_field(doc, "context_length", int, where)
    window_count = require_field(doc, "window_count", int, where)
    suite_hash = require_field(doc, "suite_token_hash_sha256", str, where)
    entries = require_field(doc, "windows", list, where)
    if len(entries) != window_count:
        raise BadField(f"{where}: window_count is {window_count} but {len(entries)} windows "
                       "are listed")
    windows = []
    for position, entry in enumerate(entries):
        w_where = f"{where} windows[{position}]"
        if not isinstance(entry, dict):
            raise BadField(f"{w_where}: expected an object")
        index = require_field(entry, "index", int, w_where)
        if index != position:
            raise BadField(f"{w_where}: index {index} is out of order (expected {position})")
        num_tokens = require_field(entry, "num_tokens", int, w_where)
        if num_tokens != context_length:
            raise BadField(f"{w_where}: num_tokens {num_tokens} differs from context_length "
                           f"{context_length}")
        start = entry.get("scored_row_start", 0)
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < num_tokens - 1:
            raise BadField(f"{w_where}: scored_row_start {start!r} must be a whole number in "
                           f"[0, {num_tokens - 1})")
        windows.append(WindowSpec(
            scored_row_start=start,
            index=index,
            domain=check_name(require_field(entry, "domain", str, w_where), "domain", w_where),
            domain_index=require_field(entry, "domain_index", int, w_where) if "domain_index" in entry else 0,
            num_tokens=num_tokens,
            token_file=check_relative_path(require_field(entry, "token_file", str, w_where),
                                           "token_file", w_where),
            token_ids_json_sha256=require_field(entry, "token_ids_json_sha256", str, w_where),
            raw=entry,
        ))
    counts: dict[str, int] = {}
    for w in windows:
        counts[w.domain] = counts.get(w.domain, 0) + 1
    return Suite(root=p.parent, path=p, format_version=version, context_length=context_length,
                 window_count=window_count, suite_token_hash_sha256=suite_hash,
                 windows=tuple(windows), domain_counts=counts, raw=doc)


@dataclass(frozen=True)
class LogitsEntry:
    window_index: int
    domain: str  # "" when the manifest does not say (the published live-logits layout)
    file: str
    key: str
    shape: tuple[int, int]
    dtype: str
    size_bytes: int
    sha256: str
    token_ids_json_sha256: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class LogitsManifest:
    """A logits folder's ``manifest.json`` (the reference's ``ref/`` or a finalized candidate)."""

    root: Path
    path: Path
    vocab_size: int
    context_length: int
    window_count: int
    window_range: tuple[int, int]
    suite_token_hash_sha256: str
    tensor_key: str
    entries: dict[int, LogitsEntry]
    runtime: Any
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def entry(self, window_index: int) -> LogitsEntry:
        if window_index not in self.entries:
            have = sorted(self.entries)
            span = f"{have[0]}..{have[-1]}" if have else "none"
            raise BadInput(f"{self.path}: window {window_index} is missing (this folder has "
                           f"windows {span}); capture and finalize it, or narrow the window range")
        return self.entries[window_index]

    def file_path(self, window_index: int) -> Path:
        entry = self.entry(window_index)
        rel = Path(entry.file)
        try:
            target = (self.root / rel).resolve()
        except (RuntimeError, OSError) as exc:  # a symlink loop
            raise BadInput(f"{self.root / rel}: window {window_index:03d} cannot be read ({exc})") from None
        if rel.is_absolute() or not target.is_relative_to(self.root.resolve()):
            raise BadInput(f"{self.path}: window {window_index} file {entry.file!r} points outside "
                           f"{self.root}; fix the manifest")
        return target


def load_logits_manifest(path: str | os.PathLike[str]) -> LogitsManifest:
    """Load a logits folder's ``manifest.json`` (a file, or the folder holding it)."""
    p, doc = read_versioned(path, LOGITS_MANIFEST, "logits manifest", what_to_do=LOGITS_REMEDY)
    with remedy(LOGITS_DAMAGED):
        return _logits_manifest_from_doc(p, doc)


def _logits_manifest_from_doc(p: Path, doc: dict[str, Any]) -> LogitsManifest:
    if "contexts" in doc and "windows" not in doc:  # the published tensor-folder layout
        from kldtui.formats.fidelity import logits_manifest_from_contexts

        return logits_manifest_from_contexts(p, doc)
    where = str(p)
    vocab = require_width(doc, "vocab_size", where)
    context_length = require_field(doc, "context_length", int, where)
    rng = require_field(doc, "window_range", list, where)
    if len(rng) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in rng):
        raise BadField(f"{where}: window_range must be [start, stop)")
    entries: dict[int, LogitsEntry] = {}
    for position, entry in enumerate(require_field(doc, "windows", list, where)):
        w_where = f"{where} windows[{position}]"
        if not isinstance(entry, dict):
            raise BadField(f"{w_where}: expected an object")
        shape = require_field(entry, "shape", list, w_where)
        if len(shape) != 2 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                      for d in shape):
            raise BadField(f"{w_where}: shape {shape} must be 2 whole numbers [rows, vocab]")
        e = LogitsEntry(
            window_index=require_count(entry, "window_index", w_where),
            domain=check_name(require_field(entry, "domain", str, w_where), "domain", w_where),
            file=check_name(require_field(entry, "file", str, w_where), "file", w_where),
            key=str(entry.get("key", doc.get("tensor_key", TENSOR_KEY))),
            shape=(int(shape[0]), int(shape[1])),
            dtype=require_field(entry, "dtype", str, w_where),
            size_bytes=require_count(entry, "size_bytes", w_where),
            sha256=require_sha256(entry, "sha256", w_where),
            token_ids_json_sha256=require_sha256(entry, "token_ids_json_sha256", w_where),
            raw=entry,
        )
        if e.shape[1] != vocab:
            raise BadField(f"{w_where}: shape {list(e.shape)} does not match vocab_size {vocab}")
        if e.window_index in entries:
            raise BadField(f"{w_where}: window {e.window_index} is listed twice")
        entries[e.window_index] = e
    return LogitsManifest(
        root=p.parent, path=p, vocab_size=vocab, context_length=context_length,
        window_count=(require_field(doc, "window_count", int, where) if "window_count" in doc
                      else len(entries)),
        window_range=(int(rng[0]), int(rng[1])),
        suite_token_hash_sha256=require_field(doc, "suite_token_hash_sha256", str, where),
        tensor_key=str(doc.get("tensor_key", TENSOR_KEY)), entries=entries,
        runtime=doc.get("runtime"), raw=doc,
    )


def check_manifest_matches_suite(manifest: LogitsManifest, suite: Suite,
                                 windows: Sequence[WindowSpec]) -> None:
    """A logits folder belongs to the suite: same suite hash, window token hashes and rows."""
    if manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
        raise BadInput(f"{manifest.path}: suite hash {manifest.suite_token_hash_sha256[:12]}... "
                       f"differs from the suite's {suite.suite_token_hash_sha256[:12]}... "
                       f"({suite.path}); it was made from another suite; {OTHER_SUITE}")
    for w in windows:
        e = manifest.entry(w.index)
        if e.token_ids_json_sha256 != w.token_ids_json_sha256:
            raise BadInput(f"{manifest.path}: {w.label} token hash differs from the suite's; "
                           f"these logits were made from other tokens; {OTHER_SUITE}")
        if e.shape[0] != w.scored_positions:
            raise BadInput(f"{manifest.path}: {w.label} has {e.shape[0]} rows, expected "
                           f"{w.scored_positions}; {LOGITS_DAMAGED}")


def sha256_file(path: str | os.PathLike[str], progress: Any = None,
                block: int = 8 * 1024 * 1024) -> str:
    """Streamed SHA-256 of a file; ``progress(nbytes)`` is called after each block."""
    digest = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    with open_regular_raw(path) as handle:
        while True:
            n = handle.readinto(buf)
            if not n:
                break
            digest.update(view[:n])  # hashlib releases the GIL on large buffers
            if progress is not None:
                progress(n)
    return digest.hexdigest()
