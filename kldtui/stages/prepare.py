"""``kldtui prepare``: build a suite folder (suite-manifest.json + tokens/) from pinned text sources.

The rule is the published Kimi K3 suite's (docs/FORMATS.md, "How a suite is prepared"): each
source's rows become one text, the text is tokenized once with the model's tokenizer
(``add_special_tokens=False``), and ``count`` non-overlapping windows of ``context_length``
tokens are taken at evenly spaced starts. Windows are numbered across sources in order.

``datasets``, ``huggingface_hub`` and ``transformers`` (the ``kldtui[prepare]`` extra) are
imported inside the functions that need them, so the rest of kldtui never loads them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.events import (
    Cancel,
    EventSink,
    Notice,
    Progress,
    StageFinished,
    StageName,
    StageStarted,
    null_sink,
)
from kldtui.formats.atomic import write_bytes_atomic, write_json_atomic, write_new_folder
from kldtui.formats.model_size import MODEL_CONFIG_LIMIT
from kldtui.formats.safe_io import open_regular, read_failure, read_text
from kldtui.formats.suite import (
    SUITE_MANIFEST,
    TOKENS_DIR,
    Suite,
    load_suite,
    suite_token_hash,
    token_file_name,
    token_ids_hash,
    token_ids_json,
)

STAGE: StageName = "prepare"
SELECTION = "evenly spaced, non-overlapping windows over each domain token stream"
LOCAL_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
# How to get the prepare extra while kldtui is installed from its repository (no package index
# serves it yet): one text for every message that names it.
PREPARE_INSTALL = "pip install -e '.[prepare]' in a clone of the kldtui repository"


# --- text construction -------------------------------------------------------------------------

def _text_rows(rows: Iterable[Mapping[str, Any]], text_field: str) -> str:
    """Non-blank values of one field, stripped, joined by two newlines (the wikitext rule)."""
    parts = []
    for row in rows:
        value = row.get(text_field)
        if isinstance(value, str) and value.strip():
            parts.append(value.strip())
    return "\n\n".join(parts)


def build_wikitext(rows: Iterable[Mapping[str, Any]]) -> str:
    return _text_rows(rows, "text")


def build_humaneval(rows: Iterable[Mapping[str, Any]]) -> str:
    """Per task: ``# task_id``, the prompt with its canonical solution, then ``# Tests`` and the tests."""
    parts = [f"# {row['task_id']}\n{row['prompt']}{row['canonical_solution']}\n\n# Tests\n{row['test']}"
             for row in rows]
    return "\n\n\n".join(parts)


def build_dolly(rows: Iterable[Mapping[str, Any]]) -> str:
    """Per record: Category / Instruction / Context (only when not blank) / Response sections."""
    records = []
    for row in rows:
        sections = [f"### Category\n{row['category']}", f"### Instruction\n{row['instruction']}"]
        context = row.get("context")
        if isinstance(context, str) and context.strip():
            sections.append(f"### Context\n{context}")
        sections.append(f"### Response\n{row['response']}")
        records.append("\n\n".join(sections))
    return "\n\n\n".join(records)


@dataclass(frozen=True)
class Builder:
    build: Callable[[Iterable[Mapping[str, Any]]], str]
    columns: tuple[str, ...]
    construction: str


BUILDERS: dict[str, Builder] = {
    "wikitext": Builder(build_wikitext, ("text",),
                        "non-empty 'text' rows (stripped) joined by two newlines"),
    "humaneval": Builder(build_humaneval, ("task_id", "prompt", "canonical_solution", "test"),
                         "per row: '# ' + task_id, newline, prompt + canonical_solution, two newlines, "
                         "'# Tests', newline, test; rows joined by three newlines"),
    "dolly": Builder(build_dolly, ("category", "instruction", "context", "response"),
                     "per row: '### Category', '### Instruction', '### Context' (only when non-blank), "
                     "'### Response' sections, each header on its own line followed by the value, "
                     "sections joined by two newlines, rows by three"),
}


# --- sources -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """One pinned text source; exactly one of ``builder`` / ``text_field`` is set."""

    domain: str
    dataset: str
    split: str
    windows: int
    config: str | None = None
    revision: str | None = None
    builder: str | None = None
    text_field: str | None = None

    @property
    def construction(self) -> str:
        if self.builder is not None:
            return BUILDERS[self.builder].construction
        return f"non-empty {self.text_field!r} rows (stripped) joined by two newlines"

    def text(self, rows: Sequence[Mapping[str, Any]]) -> str:
        if self.builder is not None:
            return BUILDERS[self.builder].build(rows)
        assert self.text_field is not None
        return _text_rows(rows, self.text_field)


DEFAULT_SOURCES: tuple[Source, ...] = (
    Source("prose", "Salesforce/wikitext", "test", 16, config="wikitext-2-raw-v1", builder="wikitext"),
    Source("code", "openai/openai_humaneval", "test", 8, builder="humaneval"),
    Source("instruction", "databricks/databricks-dolly-15k", "train", 8, builder="dolly"),
)

_SOURCE_KEYS = {"domain", "dataset", "config", "split", "revision", "windows", "builder", "text_field"}


def _domain_ok(domain: str) -> bool:
    # The domain is part of token file names (tokens/window-000-DOMAIN.json).
    return bool(domain) and all(c.isalnum() or c in "-_" for c in domain)


def parse_sources(doc: Mapping[str, Any], where: str) -> list[Source]:
    """The ``[[source]]`` tables of a SOURCES.toml document, validated."""
    unknown_top = set(doc) - {"source"}
    if unknown_top:
        raise BadInput(f"{where}: unknown top-level keys {sorted(unknown_top)}; only [[source]] tables")
    tables = doc.get("source")
    if not isinstance(tables, list) or not tables:
        raise BadInput(f"{where}: no [[source]] tables; list at least one source")
    sources = []
    for n, table in enumerate(tables, 1):
        here = f"{where}: source {n}"
        unknown = set(table) - _SOURCE_KEYS
        if unknown:
            raise BadInput(f"{here}: unknown keys {sorted(unknown)}; allowed: {sorted(_SOURCE_KEYS)}")
        for key in ("domain", "dataset", "split"):
            if not isinstance(table.get(key), str) or not table[key]:
                raise BadInput(f"{here}: {key!r} is required (a non-empty string)")
        for key in ("config", "revision", "builder", "text_field"):
            if key in table and not isinstance(table[key], str):
                raise BadInput(f"{here}: {key!r} must be a string")
        windows = table.get("windows")
        if not isinstance(windows, int) or isinstance(windows, bool) or windows < 1:
            raise BadInput(f"{here}: 'windows' must be a whole number of at least 1")
        if not _domain_ok(table["domain"]):
            raise BadInput(f"{here}: domain {table['domain']!r} may hold only letters, digits, '-' and '_'")
        builder, text_field = table.get("builder"), table.get("text_field")
        if (builder is None) == (text_field is None):
            raise BadInput(f"{here}: give exactly one of 'builder' ({', '.join(BUILDERS)}) or 'text_field'")
        if builder is not None and builder not in BUILDERS:
            raise BadInput(f"{here}: unknown builder {builder!r}; one of {', '.join(BUILDERS)}")
        sources.append(Source(domain=table["domain"], dataset=table["dataset"], split=table["split"],
                              windows=windows, config=table.get("config"),
                              revision=table.get("revision"), builder=builder, text_field=text_field))
    return sources


# bytes of a sources or plan file read (--sources): written by hand, a few KB
SOURCES_FILE_LIMIT = 16 * 1024 * 1024


def load_toml(p: Path, *, what: str, takes: str) -> dict[str, Any]:
    """The TOML document at ``p``; BadInput (one line naming ``p``) when it cannot be read or parsed.
    ``what``: "sources file"; ``takes``: "--sources takes a SOURCES.toml file"."""
    try:
        return tomllib.loads(read_text(p, limit=SOURCES_FILE_LIMIT))
    except UnicodeDecodeError:
        raise BadInput(f"{p}: not UTF-8 text; {takes}") from None
    except OSError as exc:  # missing, a folder, a FIFO, no permission
        raise read_failure(p, exc, what, takes) from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{p}: not valid TOML ({exc}); fix the {what} at the line it names") from None


def load_sources(path: str | os.PathLike[str]) -> list[Source]:
    p = Path(path)
    doc = load_toml(p, what="sources file", takes="--sources takes a SOURCES.toml file")
    sources = parse_sources(doc, str(p))
    # A relative local dataset path means "relative to the sources file".
    out = []
    for s in sources:
        candidate = p.parent / s.dataset
        missing_local = is_local_dataset(s.dataset) and not Path(s.dataset).expanduser().exists()
        if not Path(s.dataset).expanduser().is_absolute() and (candidate.exists() or missing_local):
            s = Source(**{**s.__dict__, "dataset": str(candidate)})  # a missing one is named there
        out.append(s)
    return out


# --- loading rows ------------------------------------------------------------------------------

@dataclass
class LoadedSource:
    source: Source
    rows: list[dict[str, Any]]
    revision: str
    fingerprint: str | None
    dataset_label: str  # what the manifest records as ``dataset`` (a local one: local_dataset_label)
    extra: dict[str, Any] = field(default_factory=dict)


def is_local_dataset(dataset: str) -> bool:
    """A local file or folder (it exists, or it is written as a path or a data file name: a
    missing one is then "not found", never a Hub request); else a Hub dataset id ``ORG/NAME``."""
    return (Path(dataset).expanduser().exists() or dataset.startswith(("/", "./", "../", "~"))
            or Path(dataset).suffix in LOCAL_SUFFIXES or dataset.count("/") > 1 or "\\" in dataset)


def is_local_tokenizer(name: str) -> bool:
    """A tokenizer given as a local folder (it exists, or it is written as a path)."""
    return Path(name).expanduser().exists() or name.startswith(("/", "./", "../", "~")) \
        or name.count("/") > 1 or "\\" in name


class _NoTorchAdvice:
    """Drops transformers' "PyTorch was not found" advice (a logging filter)."""

    def filter(self, record: Any) -> bool:
        return "PyTorch was not found" not in record.getMessage()


def require_packages() -> None:
    """transformers (and tokenizers) are there; BadInput naming the install otherwise. Imported
    without its "PyTorch was not found" advice: prepare only tokenizes, it needs no torch."""
    import logging

    logging.getLogger("transformers").addFilter(_NoTorchAdvice())  # the logger its import warns on
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise BadInput(f"kldtui prepare needs {exc.name}: {PREPARE_INSTALL}") from None


def check_local_inputs(tokenizer: str, sources: Sequence[Source]) -> None:
    """The local tokenizer folder and local source files exist; BadInput naming the first that does not."""
    if is_local_tokenizer(tokenizer) and not Path(tokenizer).expanduser().is_dir():
        raise BadInput(f"{tokenizer}: tokenizer folder not found; give the folder that holds tokenizer.json "
                       "(or tokenizer_config.json), or a Hub model id such as Qwen/Qwen3-8B")
    for n, source in enumerate(sources, 1):
        path = Path(source.dataset).expanduser()
        if is_local_dataset(source.dataset) and not path.exists():
            raise BadInput(f"source {n} ({source.domain}): local dataset {path} does not exist; fix its "
                           "'dataset' path (relative paths are read from the SOURCES.toml's folder)")


def check_hub(tokenizer: str, sources: Sequence[Source]) -> None:
    """Before any work: when the tokenizer or a source comes from the Hub, the Hub answers;
    BadInput (one line, at once) naming what needed it otherwise."""
    needs = [] if is_local_tokenizer(tokenizer) else [f"tokenizer {tokenizer} (no folder of that name here)"]
    needs += [f"dataset {s.dataset}" for s in sources if not is_local_dataset(s.dataset)]
    if not needs:
        return
    from kldtui.stages.hub import hub_unreachable, unreachable_line

    reason = hub_unreachable()
    if reason is not None:
        what = ", ".join(needs[:2]) + (f" and {len(needs) - 2} more" if len(needs) > 2 else "")
        raise BadInput(unreachable_line(
            what, reason, "give local inputs (--tokenizer DIR, --sources SOURCES.toml naming local files) "
            "or run where the Hub is reachable (HF_ENDPOINT names a mirror)"))


# What to do about a local dataset's file that cannot be read, and about rows without the columns
# a source reads
UNREADABLE_ROWS = "make it a readable regular file, or move it out of the dataset"
# bytes of a local JSON or JSON Lines file read whole when the datasets package is missing (with it,
# datasets reads the file)
JSON_ROWS_FILE_LIMIT = 1024 * 1024 * 1024
COLUMNS = "name columns it has in the source's *_field keys, or pick another builder"


def _local_files(path: Path, where: str) -> list[Path]:
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
    else:
        raise BadInput(f"{where}: local dataset {path} does not exist; fix its 'dataset' path")
    if not files:
        raise BadInput(f"{where}: {path} holds no .parquet, .jsonl or .json files; point 'dataset' at a file "
                       "or folder of them")
    kinds = {LOCAL_SUFFIXES.get(f.suffix) for f in files}
    if None in kinds or len(kinds) != 1:
        raise BadInput(f"{where}: {path}: use files of one kind (.parquet, or .jsonl/.json)")
    return files


def local_content_hash(files: Sequence[Path], root: Path) -> str:
    """The local dataset's revision: SHA-256 over (relative name, file SHA-256) of every file."""
    from kldtui.formats.suite import sha256_file

    digest = hashlib.sha256()
    for f in files:
        rel = f.name if root.is_file() else f.relative_to(root).as_posix()
        digest.update(f"{rel}\0{sha256_file(f)}\n".encode())
    return digest.hexdigest()


def _rows_of(ds: Any, columns: Sequence[str], where: str) -> list[dict[str, Any]]:
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise BadInput(f"{where}: the dataset has no column(s) {missing} (it has {ds.column_names}); "
                       f"{COLUMNS}")
    return [dict(r) for r in ds.select_columns(list(columns))]


def _columns(source: Source, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns a source's rows are read with: its builder's (or its text field) and ``extra``
    (the hidden layout's document and cluster fields)."""
    own = BUILDERS[source.builder].columns if source.builder is not None else (str(source.text_field),)
    return own + tuple(c for c in extra if c not in own)


def _read_json_rows(files: Sequence[Path], columns: Sequence[str], where: str) -> list[dict[str, Any]]:
    """Rows of JSON / JSON Lines files with the standard library (when ``datasets`` is missing)."""
    import json

    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            text = read_text(f, limit=JSON_ROWS_FILE_LIMIT)
        except UnicodeDecodeError as exc:
            raise BadInput(f"{where}: {f} is not UTF-8 text (byte {exc.start}); JSON and JSON Lines files "
                           "are UTF-8, convert it (e.g. iconv -t UTF-8)") from None
        except OSError as exc:  # a FIFO, a device, no permission, over the limit
            remedy = (f"split it into smaller files, or {PREPARE_INSTALL} (the datasets package reads it)"
                      if exc.errno == errno.EFBIG else UNREADABLE_ROWS)
            raise BadInput(f"{where}: {read_failure(f, exc, 'dataset file', remedy)}") from None
        try:
            doc = json.loads(text)
            items = doc if isinstance(doc, list) else [doc]
        except ValueError:
            try:
                items = [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError as exc:
                raise BadInput(f"{where}: {f} is neither JSON nor JSON Lines ({exc}); fix it, or move it out "
                               "of the dataset") from None
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise BadInput(f"{where}: {f}: row {n} is not a JSON object; each row is an object of "
                               "columns: fix the file")
            missing = [c for c in columns if c not in item]
            if missing:
                raise BadInput(f"{where}: the dataset has no column(s) {missing} ({f} row {n} has "
                               f"{sorted(item)}); {COLUMNS}")
            rows.append({c: item[c] for c in columns})
    return rows


def _check_utf8(path: Path, where: str) -> None:
    """JSON and JSON Lines are UTF-8: a file that is not is one line naming it and the byte."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open_regular(path) as handle:
            while block := handle.read(8 * 1024 * 1024):
                decoder.decode(block)
                offset += len(block)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: {path} is not UTF-8 text (byte {offset + exc.start}); JSON and JSON "
                       "Lines files are UTF-8, convert it (e.g. iconv -t UTF-8)") from None
    except OSError as exc:  # a FIFO, a device, no permission
        raise BadInput(f"{where}: {read_failure(path, exc, 'dataset file', UNREADABLE_ROWS)}") from None


def local_dataset_label(path: Path) -> str:
    """What a suite records as a local dataset (either layout): its file or folder name alone.
    The producer's path would leak into the published suite (user names, mount points) and make a
    hidden-state suite's cluster keys ([dataset, cluster]) machine-specific."""
    return Path(os.path.abspath(path)).name


def load_local(source: Source, where: str, extra_columns: Sequence[str] = ()) -> LoadedSource:
    path = Path(source.dataset).expanduser()
    label = local_dataset_label(path)
    files = _local_files(path, where)
    revision = local_content_hash(files, path)
    if source.revision is not None and source.revision != revision:
        raise BadInput(f"{where}: {path} has content hash {revision}, not the pinned revision "
                       f"{source.revision}; the files changed (remove 'revision' to accept them)")
    kind = LOCAL_SUFFIXES[files[0].suffix]
    if kind == "json":
        for f in files:
            _check_utf8(f, where)
    try:
        import datasets
    except ImportError:
        # JSON needs no library (the vLLM venv of the tiny example has no ``datasets``); the
        # rows, text and tokens are the same, only the datasets fingerprint is not known.
        if kind != "json":
            raise BadInput(f"{where}: reading {files[0].suffix} files needs the datasets package: "
                           f"{PREPARE_INSTALL}") from None
        rows = _read_json_rows(files, _columns(source, extra_columns), where)
        return LoadedSource(source, rows, revision, None, label)
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(kind, data_files={source.split: [str(f) for f in files]},
                                   split=source.split)
    except Exception as exc:  # noqa: BLE001 - the library's parse errors (pyarrow, datasets): one line
        cause = " ".join(str(exc.__cause__ or exc).split())[:300]
        raise BadInput(f"{where}: {path} cannot be read as {kind} files ({type(exc).__name__}: {cause}); "
                       "fix or replace the files") from None
    return LoadedSource(source, _rows_of(ds, _columns(source, extra_columns), where), revision,
                        getattr(ds, "_fingerprint", None), label)


def load_hub(source: Source, where: str, extra_columns: Sequence[str] = ()) -> LoadedSource:
    import datasets
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        api = HfApi(endpoint=settings.HF_ENDPOINT.get())
        info = api.dataset_info(source.dataset, revision=source.revision)
    except RevisionNotFoundError:
        raise BadInput(f"{where}: {source.dataset} has no revision {source.revision!r}; fix or remove "
                       "'revision'") from None
    except RepositoryNotFoundError:
        raise BadInput(f"{where}: dataset {source.dataset} not found on the Hub (or it is private: "
                       "log in with `hf auth login`)") from None
    except HfHubHTTPError as exc:
        raise BadInput(f"{where}: cannot reach the Hub for {source.dataset}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a connection failure is one line, anything else re-raised
        _raise_if_unreachable(exc, where)
        raise
    sha = info.sha
    if not sha:
        raise BadInput(f"{where}: the Hub gave no commit sha for {source.dataset}")
    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(source.dataset, source.config, split=source.split, revision=sha)
    except Exception as exc:  # noqa: BLE001 - as above
        _raise_if_unreachable(exc, where)
        raise
    return LoadedSource(source, _rows_of(ds, _columns(source, extra_columns), where), sha,
                        getattr(ds, "_fingerprint", None), source.dataset)


def _raise_if_unreachable(exc: BaseException, where: str) -> None:
    from kldtui.stages.hub import connection_reason, is_connection_error, unreachable_line

    if is_connection_error(exc):
        raise BadInput(unreachable_line(where, connection_reason(exc), "check the network and HF_ENDPOINT, "
                                        "or name a local copy of the dataset in --sources")) from None


def load_source(source: Source, where: str, extra_columns: Sequence[str] = ()) -> LoadedSource:
    """A source's rows (its builder's columns and ``extra_columns``), pinned."""
    load = load_local if is_local_dataset(source.dataset) else load_hub
    return load(source, where, extra_columns)


# --- tokenizer and windows ---------------------------------------------------------------------

def load_tokenizer(name: str, *, trust_remote_code: bool = False) -> Any:
    check_local_inputs(name, ())
    require_packages()
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # Tokenizing a whole source at once trips the "longer than model_max_length" warning, which
    # does not apply: the text is cut into windows afterwards.
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise BadInput(f"{name}: cannot load a tokenizer ({' '.join(str(exc).split())[:300]}); give a "
                       "local tokenizer folder or a Hub model id") from None
    except ValueError as exc:
        hint = "; add --trust-remote-code if you trust its code" if "trust_remote_code" in str(exc) else ""
        raise BadInput(f"{name}: cannot load a tokenizer ({' '.join(str(exc).split())[:300]}){hint}") \
            from None


def encode(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [int(i) for i in ids]


def window_starts(total: int, length: int, count: int) -> list[int]:
    """Evenly spaced starts: ``floor(i * (total - length) / (count - 1))``; one window is centred."""
    if count < 1 or length < 2:
        raise ValueError("need at least one window of at least two tokens")
    if total < count * length:
        raise ValueError(f"{total} tokens are fewer than {count} windows x {length} tokens")
    if count == 1:
        return [(total - length) // 2]
    return [i * (total - length) // (count - 1) for i in range(count)]


# --- the stage ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrepareResult:
    suite: Suite
    output_dir: Path


def prepare_suite(output_dir: str | os.PathLike[str], tokenizer: str, *,
                  sources: Sequence[Source] = DEFAULT_SOURCES, context_length: int = 2048,
                  trust_remote_code: bool = False, kind: str = "KLD corpus suite",
                  emit: EventSink = null_sink, cancel: Cancel | None = None) -> PrepareResult:
    """Write a new suite folder at ``output_dir`` (refused if it exists); returns the loaded suite.

    The folder is built under a temporary name beside ``output_dir`` and renamed at the end, so an
    interrupted prepare leaves no half-made suite under the final name.
    """
    out = Path(output_dir)
    check_new_folder(out)
    if context_length < 2:
        raise BadInput(f"--context-length {context_length}: a window needs at least 2 tokens")
    if not sources:
        raise BadInput("no sources to prepare from")
    domains = [s.domain for s in sources]
    if len(set(domains)) != len(domains):
        raise BadInput(f"sources: domains must be distinct (got {domains})")
    check_local_inputs(tokenizer, sources)  # a mistyped folder is named before anything else
    check_hub(tokenizer, sources)  # an unreachable Hub: one line now, not after minutes of retries
    emit(StageStarted(STAGE, detail=f"{len(sources)} sources, {sum(s.windows for s in sources)} windows "
                      f"of {context_length} tokens -> {out}"))
    tok = load_tokenizer(tokenizer, trust_remote_code=trust_remote_code)

    windows: list[tuple[str, list[int], dict[str, Any]]] = []  # domain, ids, window fields
    dataset_docs: list[dict[str, Any]] = []
    for n, source in enumerate(sources, 1):
        if cancel is not None:
            cancel.check()
        where = f"source {n} ({source.domain}: {source.dataset})"
        emit(Notice(STAGE, f"loading {where}"))
        loaded = load_source(source, where)
        text = source.text(loaded.rows)
        ids = encode(tok, text)
        try:
            starts = window_starts(len(ids), context_length, source.windows)
        except ValueError:
            raise BadInput(f"{where}: its text has {len(ids)} tokens, fewer than {source.windows} windows "
                           f"x {context_length} tokens = {source.windows * context_length}; lower "
                           "'windows' or --context-length, or use a larger split") from None
        first_index = len(windows)
        for domain_index, start in enumerate(starts):
            windows.append((source.domain, ids[start:start + context_length], {
                "domain_index": domain_index,
                "dataset": loaded.dataset_label,
                "dataset_revision": loaded.revision,
                "source_token_start": start,
                "source_token_end": start + context_length,
            }))
        dataset_docs.append({
            "domain": source.domain,
            "dataset": loaded.dataset_label,
            "config": source.config,
            "split": source.split,
            "revision": loaded.revision,
            "dataset_fingerprint": loaded.fingerprint,
            "rows": len(loaded.rows),
            "construction": source.construction,
            "source_utf8_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "source_tokens": len(ids),
            "window_starts": starts,
            "windows": source.windows,
            "window_indices": [first_index, first_index + source.windows],
        })
        emit(Progress(STAGE, "sources", n, len(sources), "sources"))

    build_new_folder(out, lambda tmp: _write(
        tmp, windows, dataset_docs, context_length=context_length, kind=kind,
        tokenizer=tokenizer_id(tokenizer, tok), tokenizer_class=type(tok).__name__,
        tokenizer_source="local folder" if is_local_tokenizer(tokenizer) else "hub"))
    suite = load_suite(out)
    emit(StageFinished(STAGE, summary=f"{suite.window_count} windows, suite hash "
                       f"{suite.suite_token_hash_sha256[:12]}... -> {out}", figures={
                           "windows": suite.window_count, "context_length": context_length,
                           "suite_token_hash_sha256": suite.suite_token_hash_sha256}))
    return PrepareResult(suite, out)


def check_new_folder(out: Path) -> None:
    if out.exists():
        raise BadInput(f"{out}: already exists; prepare writes a new suite folder (choose another "
                       "--output-dir or remove this one)")


def build_new_folder(out: Path, write: Callable[[Path], None]) -> None:
    """``write`` the folder under a temporary name beside ``out``, then rename it to ``out``: an
    interrupted prepare leaves no half-made suite under the final name."""
    try:
        write_new_folder(out, write)
    except FileExistsError:  # out appeared meanwhile (a folder that holds anything)
        raise BadInput(f"{out}: appeared while preparing; nothing was replaced") from None


def tokenizer_id(name: str, tok: Any) -> str:
    """What the manifest (and the dataset card) records as the tokenizer: the Hub id given, or for
    a local folder the model id its config.json names (``_name_or_path``, written by
    ``save_pretrained``), else the folder's name (never the producer's full local path)."""
    if not is_local_tokenizer(name):
        return name
    folder = Path(name).expanduser()
    import json

    for config in ("config.json", "tokenizer_config.json"):
        try:
            doc = json.loads(read_text(folder / config, limit=MODEL_CONFIG_LIMIT))  # never blocks on a FIFO
        except (OSError, ValueError):
            continue
        origin = doc.get("_name_or_path") or doc.get("name_or_path") if isinstance(doc, dict) else None
        if isinstance(origin, str) and origin and not is_local_tokenizer(origin):
            return origin
    return folder.resolve().name or str(getattr(tok, "name_or_path", name))


def _write(root: Path, windows: Sequence[tuple[str, list[int], dict[str, Any]]],
           dataset_docs: list[dict[str, Any]], *, context_length: int, kind: str, tokenizer: str,
           tokenizer_class: str, tokenizer_source: str = "hub") -> None:
    (root / TOKENS_DIR).mkdir()
    entries = []
    counts: dict[str, int] = {}
    for index, (domain, ids, fields) in enumerate(windows):
        counts[domain] = counts.get(domain, 0) + 1
        rel = token_file_name(index, domain)
        write_bytes_atomic(root / rel, (token_ids_json(ids) + "\n").encode("ascii"))
        entries.append({
            "index": index,
            "domain": domain,
            **fields,
            "num_tokens": len(ids),
            "token_file": rel,
            "token_ids_json_sha256": token_ids_hash(ids),
            "token_ids_first16": ids[:16],
            "token_ids_last16": ids[-16:],
        })
    doc = {
        "format_version": 1,
        "kind": kind,
        "context_length": context_length,
        "add_special_tokens": False,
        "selection": SELECTION,
        "window_count": len(entries),
        "scored_positions_per_window": context_length - 1,
        "total_scored_positions": (context_length - 1) * len(entries),
        "domain_counts": counts,
        "model_tokenizer": tokenizer,
        "tokenizer_class": tokenizer_class,
        "tokenizer_source": tokenizer_source,
        "suite_token_hash_sha256": suite_token_hash([e["token_ids_json_sha256"] for e in entries]),
        "datasets": dataset_docs,
        "windows": entries,
    }
    write_json_atomic(root / SUITE_MANIFEST, doc)
