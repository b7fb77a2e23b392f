"""Is this logits file the window its manifest says it is? One check for verify and compare.

A manifest maps a window to a file name, and a manifest may have been edited (or a file copied
over another and the manifest's size and SHA-256 fixed): a SHA-256 that matches the manifest
proves nothing about *which* window the file holds. The file's own header does: its tensor shape
and dtype, and its metadata ``window_index``, ``token_ids_json_sha256``, ``vocab_size``,
``domain`` and ``context_length`` (FORMATS.md, "ref/logits_NNN.safetensors"). Each is compared
with the suite when the suite is known (else with the manifest), and every message says where the
expected value came from. A metadata key a file does not carry is not checked (files of other
tools may carry less); one it carries must agree.

The ``format`` tag is not checked: it names the producer, it does not protect integrity, and
suites of other models and tools carry other tags. A tag other than kldtui's is reported as a note.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.formats.safe_io import kind_of
from kldtui.formats.safetensors_io import SafetensorsHeader, read_header
from kldtui.formats.suite import LOGITS_FORMAT, LogitsManifest, Suite

IDENTITY_KEYS = ("window_index", "token_ids_json_sha256")


@dataclass
class FileIdentity:
    """What :func:`check_logits_file` found: ``problems`` (one line each) and ``notes``."""

    path: Path
    header: SafetensorsHeader | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the header names neither window_index nor token_ids_json_sha256: which window the file holds
    # could not be checked (a file swapped with another window's passes); callers say so
    window_unchecked: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_first(self, advice: str = "") -> None:
        if self.problems:
            more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
            raise BadInput(f"{self.problems[0]}{more}{advice}")


def unchecked_windows(manifest: LogitsManifest, indices: list[int], side: str) -> list[str]:
    """``"<side> <file> (window NNN)"`` for each listed file whose header cannot say which window it
    holds (no window_index, no token hash); unreadable files are left to the other checks."""
    out = []
    for index in indices:
        if index not in manifest.entries:
            continue
        try:
            meta = read_header(manifest.file_path(index)).metadata
        except BadInput:
            continue
        if not any(k in meta for k in IDENTITY_KEYS):
            out.append(f"{side} {manifest.entry(index).file} (window {index:03d})")
    return out


def check_logits_file(manifest: LogitsManifest, index: int, *, suite: Suite | None = None,
                      side: str = "") -> FileIdentity:
    """Check window ``index``'s file of ``manifest`` against the manifest and the suite.

    Size, safetensors header, tensor key, dtype and shape, then the header metadata. Nothing of
    the tensor data is read. ``side`` ("reference", "candidate") is added to every message.
    """
    entry = manifest.entry(index)
    path = manifest.file_path(index)
    window = suite.window(index) if suite is not None else None
    label = f"window {index:03d}" + (f" ({side})" if side else "")
    result = FileIdentity(path)
    where = f"{path}: {label}"
    by_manifest = f"the manifest {manifest.path}"
    by_suite = f"the suite {suite.path}" if suite is not None else by_manifest
    try:
        st = path.stat()
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            result.problems.append(f"{where}: is {kind_of(st.st_mode)}, not a regular file; delete it and "
                                   "fetch or finalize the window again")
            return result
    except FileNotFoundError:
        result.problems.append(f"{where}: file is missing; download or finalize it again")
        return result
    except OSError as exc:
        result.problems.append(f"{where}: cannot be read ({exc.strerror or exc}); make it readable, or "
                               "delete it and fetch or finalize the window again")
        return result
    size_problem = (f"{where}: {size} bytes, {by_manifest} says {entry.size_bytes}; the file is "
                    "truncated or was replaced, delete it and fetch or finalize it again"
                    if size != entry.size_bytes else None)
    try:
        header = read_header(path)
    except BadInput as exc:
        result.problems.append(size_problem or f"{exc} ({label})")
        return result
    result.header = header
    if entry.key not in header.tensors:
        found = ", ".join(sorted(header.tensors)) or "none"
        result.problems.append(f"{where}: no tensor {entry.key!r} (found: {found}), {by_manifest} "
                               "names that key")
        return result
    info = header.tensors[entry.key]
    if info.dtype != entry.dtype:
        result.problems.append(f"{where}: tensor {entry.key!r} is {info.dtype}, {by_manifest} says "
                               f"{entry.dtype}")
    if info.shape != entry.shape:
        result.problems.append(f"{where}: tensor shape {list(info.shape)}, {by_manifest} says "
                               f"{list(entry.shape)}")
    elif window is not None and info.shape[0] != window.scored_positions:
        result.problems.append(f"{where}: {info.shape[0]} rows, {by_suite} needs "
                               f"{window.scored_positions} ({window.num_tokens} tokens)")
    if size_problem is not None:
        result.problems.append(size_problem)
    elif header.file_size != info.end:
        result.problems.append(f"{where}: {header.file_size - info.end} bytes after the tensor data; "
                               "the file was appended to or is not a logits file")
    meta = header.metadata
    token_hash = window.token_ids_json_sha256 if window is not None else entry.token_ids_json_sha256
    domain = window.domain if window is not None else entry.domain
    expected: list[tuple[str, str, str]] = [
        ("window_index", str(index), f"{by_manifest} lists it as window {index}"),
        # the published live-logits layout names its files' contexts so
        ("context_index", str(index), f"{by_manifest} lists it as context {index}"),
        ("token_ids_json_sha256", token_hash, f"{by_suite} has {token_hash[:12]}... for window {index}"),
        ("vocab_size", str(manifest.vocab_size), f"{by_manifest} says {manifest.vocab_size}"),
        ("domain", domain, f"{by_suite} says {domain!r}"),
    ]
    if suite is not None:
        expected.append(("context_length", str(suite.context_length),
                         f"{by_suite} says {suite.context_length}"))
    for key, want, source in expected:
        if key in meta and meta[key] != want:
            shown = meta[key] if len(meta[key]) < 20 else meta[key][:12] + "..."
            result.problems.append(f"{where}: header metadata {key}={shown!r}, but {source}; the "
                                   "file belongs to another window or suite, fetch or finalize it again")
    if not any(k in meta for k in IDENTITY_KEYS):
        result.window_unchecked = True
        result.notes.append(f"{path}: {label}: the header carries no window_index or "
                            "token_ids_json_sha256, so which window it holds is NOT checked (a file "
                            "swapped with another window's would pass); only its shape, size and hash are")
    tag = meta.get("format")
    if tag is not None and tag != LOGITS_FORMAT:
        result.notes.append(f"{path}: header format tag {tag!r} (kldtui writes {LOGITS_FORMAT!r}); "
                            "accepted, the window, tokens, shape and hashes are what is checked")
    return result
