"""The two sides of a comparison: what a folder holds and how the engine gets its rows of logits.

A side is one of

* :class:`LogitsSide`: a logits folder (kldtui's ``manifest.json`` with ``windows``, or the
  published live-logits layout with ``contexts``), files F32 or BF16 (widened exactly);
* :class:`HiddenSide`: a hidden-state folder (the published ``reference-hidden/`` layout) and the
  LM head it is replayed with (:mod:`kldtui.metrics.replay`).

:func:`load_side` decides from the folder's manifest, never from a flag.  The engine asks each side
for a :class:`RowSource` per window; a replayed side computes a block of rows at a time
(:meth:`RowSource.stage`), a file side reads rows as the kernel threads ask for them, and either
way the kernels (:mod:`kldtui.metrics.kernels`) receive float32 rows, so every per-row figure is
computed by the one pipeline whatever the sides are.

Which head replays which side: the reference's hidden states with ``--lm-head`` (default: the
``lm-head/`` inside the folder, as a candidate's capture holds one, else beside it, else the
suite's: :func:`kldtui.formats.fidelity.reference_head_places`); a hidden-state candidate only with
its own head (``--candidate-lm-head``, or an ``lm-head/`` inside the candidate folder), never the
reference's silently: a quantized head is part of what is measured. So two captures of one
candidate (a repeat) are both replayed with the candidate's head.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from kldtui.errors import BadInput, remedy
from kldtui.formats import fidelity as fid
from kldtui.formats import finite
from kldtui.formats.identity import check_logits_file
from kldtui.formats.safetensors_io import RowReader, map_tensor
from kldtui.formats.suite import (
    LOGITS_DAMAGED,
    LOGITS_MANIFEST,
    LOGITS_REMEDY,
    OTHER_SUITE,
    LogitsManifest,
    Suite,
    WindowSpec,
    check_manifest_matches_suite,
    load_logits_manifest,
    read_versioned,
)
from kldtui.metrics.replay import (
    DEFAULT_CHUNK,
    WIDENED,
    NumpyReplay,
    bf16_to_f32,
    check_output,
    torch_bf16,
)
from kldtui.stages.compare.rows import RowMap
from kldtui.text import human_bytes, kldtui_command, shell_arg

if TYPE_CHECKING:
    from kldtui.stages.compare.hashing import ListedFile

Role = Literal["reference", "candidate"]
Scratch = Callable[[str, np.dtype], np.ndarray]  # a thread's reusable buffer [row_block, vocab]
LOGITS_DTYPES = ("F32", "BF16")


@dataclass(frozen=True)
class SideInfo:
    """What a report says about a side: the published receipt's ``kind``, ``label``,
    ``manifest_sha256``, plus the head it was replayed with and its size on disk."""

    kind: str  # "logits" or "hidden" (score mode's folders are "scores")
    label: str
    manifest_sha256: str
    lm_head_file_sha256: str | None = None
    file_dtype: str | None = None
    bytes_on_disk: int | None = None  # the files of the compared windows (+ the head)
    full_logits_bytes: int | None = None  # the same windows as F32 logits


class RowSource(Protocol):
    """One window's rows of float32 logits for the engine."""

    replayed: bool

    def stage(self, start: int, stop: int) -> None:
        """Prepare rows ``[start, stop)`` (a replay computes them here; files need nothing)."""

    def rows(self, start: int, stop: int, scratch: Scratch) -> Any:
        """Rows ``[start, stop)`` (within the staged block) as float32 ``[n, vocab]``: a NumPy
        array, or a torch tensor on the replay's device."""

    def release(self, start: int, stop: int) -> None:
        """Rows the kernel is done with."""


class Replays:
    """The engine's replay machinery: one replay per LM head, on the engine's device, made at
    first use (a head is mapped, or uploaded to the GPU, once per comparison)."""

    def __init__(self, device: str, *, chunk: int, threads: int | None) -> None:
        self.device = device  # "cpu" or "cuda:N"
        self.chunk = chunk
        self.threads = threads
        self._replays: dict[tuple[Path, str], Any] = {}
        self.outputs: set[str] = set()  # the roundings replayed with

    @property
    def uses_torch(self) -> bool:
        import importlib.util

        return self.device != "cpu" or importlib.util.find_spec("torch") is not None

    def library(self) -> str:
        return "torch" if self.uses_torch else "numpy"

    def get(self, head: fid.LmHead, output: str) -> Any:
        """The replay of ``head`` rounding its products as ``output`` says (``bf16``, ``f32``)."""
        output = check_output(output)
        replay = self._replays.get((head.path, output))
        if replay is None:
            # copy-on-write map: writable for torch (no warning), nothing copied unless written; of the
            # descriptor its header is checked on (a FIFO swapped in after the head was loaded never blocks)
            bits = map_tensor(head.path, head.info.name, "BF16", (head.vocab, head.hidden), mode="c")
            if self.uses_torch:
                from kldtui.metrics.replay import TorchReplay

                replay = TorchReplay(torch_bf16(bits), self.device, chunk=self.chunk, output=output)
            else:
                replay = NumpyReplay(bits, chunk=self.chunk, output=output)
            self._replays[(head.path, output)] = replay
            self.outputs.add(output)
        return replay

    def settings(self) -> dict[str, Any]:
        return {"device": self.device, "library": self.library(), "vocab_chunk": self.chunk,
                "replay_dtype": "/".join(sorted(self.outputs)) or None}

    def gemm_path(self, output: str) -> str:
        """How a replay rounding as ``output`` multiplies here: ``native`` (a BF16 GEMM) or ``widened
        to FP32`` (each chunk widened exactly, an FP32 GEMM: NumPy, ``f32`` output, or torch on a CPU
        without oneDNN's BF16 support)."""
        if not self.uses_torch:
            return WIDENED
        from kldtui.metrics.replay import torch_gemm_path

        return torch_gemm_path(self.device, output)

    def close(self) -> None:
        self._replays.clear()


class _FileRows:
    """Rows read from a logits file: F32 straight from ``mmap`` (or ``pread``), BF16 widened."""

    replayed = False

    def __init__(self, path: Path, key: str, dtype: str, use_mmap: bool) -> None:
        self.dtype = dtype
        self._stack = contextlib.ExitStack()
        self.reader = self._stack.enter_context(RowReader(path, key, dtype))
        self.map = self._stack.enter_context(RowMap(self.reader, use_mmap))

    def stage(self, start: int, stop: int) -> None:
        return None

    def rows(self, start: int, stop: int, scratch: Scratch) -> np.ndarray:
        raw = (self.map.rows(start, stop) if self.map.ok
               else self.reader.pread(start, stop, scratch(f"raw-{self.dtype}", self.reader.np_dtype)))
        if self.dtype == "F32":
            return raw
        return bf16_to_f32(raw, scratch("widened", np.dtype(np.float32))[:stop - start])

    def release(self, start: int, stop: int) -> None:
        self.map.release(start, stop)

    def close(self) -> None:
        self._stack.close()


class _ReplayedRows:
    """Rows replayed from a hidden-state file, a staged block at a time."""

    replayed = True

    def __init__(self, path: Path, key: str, replay: Any, block: int) -> None:
        self.reader = RowReader(path, key, "BF16")
        self.replay = replay
        self._torch = not isinstance(replay, NumpyReplay)
        self._block = block
        self._out: Any = None
        self._start = 0

    def stage(self, start: int, stop: int) -> None:
        hidden = self.reader.pread(start, stop)
        n = stop - start
        if self._out is None:
            self._out = self.replay.new_block(self._block)
        if self._torch:
            self.replay.logits(torch_bf16(hidden), out=self._out[:n])
        else:
            self.replay.logits(hidden, out=self._out[:n])
        self._start = start

    def rows(self, start: int, stop: int, scratch: Scratch) -> Any:
        block = self._out[start - self._start:stop - self._start]
        if self._torch and block.device.type == "cpu":
            return block.numpy()
        return block

    def release(self, start: int, stop: int) -> None:
        return None

    def close(self) -> None:
        self.reader.close()


class Side(Protocol):
    """One side of a comparison (see the module docstring)."""

    role: Role
    kind: str
    manifest_path: Path
    vocab: int

    def check(self, suite: Suite, windows: list[WindowSpec]) -> None:
        """The manifest against the suite (suite hash, token hashes, rows)."""

    def check_files(self, suite: Suite, windows: list[WindowSpec]) -> None:
        """Each window's file: header, key, dtype, shape, size and metadata (no data read)."""

    def listed(self, windows: list[WindowSpec]) -> list[ListedFile]: ...
    def identity(self, index: int) -> dict[str, Any]: ...
    def file_path(self, index: int) -> Path: ...
    def bytes_read(self, rows: int) -> int: ...
    def open(self, window: WindowSpec, replays: Replays, block: int, use_mmap: bool) -> Any: ...
    def nonfinite(self, window: WindowSpec, rows: np.ndarray) -> str | None: ...
    def info(self, windows: list[WindowSpec]) -> SideInfo: ...


def _manifest_sha(path: Path) -> str:
    from kldtui.stages.compare.hashing import manifest_sha256

    return manifest_sha256(path)


def _label(path: Path) -> str:
    return path.parent.name or str(path.parent)


class LogitsSide:
    """A logits folder (kldtui's layout or the published live-logits layout; F32 or BF16)."""

    kind = "logits"

    def __init__(self, manifest: LogitsManifest, role: Role) -> None:
        self.manifest = manifest
        self.role = role
        self.manifest_path = manifest.path
        self.root = manifest.root
        self.vocab = manifest.vocab_size

    def check(self, suite: Suite, windows: list[WindowSpec]) -> None:
        check_manifest_matches_suite(self.manifest, suite, windows)

    def check_files(self, suite: Suite, windows: list[WindowSpec]) -> None:
        for w in windows:
            entry = self.manifest.entry(w.index)
            if entry.dtype not in LOGITS_DTYPES:
                raise BadInput(f"{self.manifest.path}: {w.label} dtype {entry.dtype!r}; logits files are F32 "
                               f"or BF16; {LOGITS_DAMAGED}")
            identity = check_logits_file(self.manifest, w.index, suite=suite, side=self.role)
            identity.raise_first("" if any("again" in p for p in identity.problems[:1])
                                 else "; download or finalize this window again")

    def listed(self, windows: list[WindowSpec]) -> list[ListedFile]:
        return [(self.manifest.file_path(w.index), self.manifest.entry(w.index).sha256, w, self.root)
                for w in windows]

    def identity(self, index: int) -> dict[str, Any]:
        return {"sha256": self.manifest.entry(index).sha256}

    def file_path(self, index: int) -> Path:
        """The window's logits file."""
        return self.manifest.file_path(index)

    def bytes_read(self, rows: int) -> int:
        return rows * self.vocab * 4

    def open(self, window: WindowSpec, replays: Replays, block: int, use_mmap: bool) -> _FileRows:
        entry = self.manifest.entry(window.index)
        return _FileRows(self.manifest.file_path(window.index), entry.key, entry.dtype, use_mmap)

    def nonfinite(self, window: WindowSpec, rows: np.ndarray) -> str | None:
        entry = self.manifest.entry(window.index)
        path = self.manifest.file_path(window.index)
        with RowReader(path, entry.key, entry.dtype) as reader:
            hit = []
            for r in rows[:64]:
                block = reader.pread(int(r), int(r) + 1)
                if finite.unscorable_logit_rows(bf16_to_f32(block) if entry.dtype == "BF16" else block).size:
                    hit.append(int(r))
        return finite.logits_problem(path, window.label, self.role, hit) if hit else None

    def info(self, windows: list[WindowSpec]) -> SideInfo:
        sizes = [self.manifest.entry(w.index).size_bytes for w in windows]
        dtypes = sorted({self.manifest.entry(w.index).dtype for w in windows})
        return SideInfo(kind=self.kind, label=_label(self.manifest_path),
                        manifest_sha256=_manifest_sha(self.manifest_path), file_dtype="/".join(dtypes),
                        bytes_on_disk=sum(sizes),
                        full_logits_bytes=sum(w.scored_positions for w in windows) * self.vocab * 4)


class HiddenSide:
    """A hidden-state folder and the LM head that replays it."""

    kind = "hidden"

    def __init__(self, manifest: fid.TensorManifest, head: fid.LmHead, role: Role,
                 output: str | None = None) -> None:
        self.manifest = manifest
        self.head = head
        self.role = role
        # how the products are rounded: as asked (--replay-dtype), else as the folder records its
        # model computed (kldtui's replay_output: f32 for a float32 server), else BF16 (the published rule)
        self.output = check_output(output) if output is not None else fid.replay_output_of(manifest)
        self.manifest_path = manifest.path
        self.root = manifest.root
        self.vocab = head.vocab
        if head.hidden != manifest.width:
            raise BadInput(f"{head.path}: the LM head is [{head.vocab}, {head.hidden}] but {manifest.path} "
                           "holds "
                           f"hidden states of width {manifest.width}; give the head of the model that made "
                           "them")

    def check(self, suite: Suite, windows: list[WindowSpec]) -> None:
        if self.manifest.suite_token_hash_sha256 != suite.suite_token_hash_sha256:
            raise BadInput(f"{self.manifest.path}: suite hash "
                           f"{self.manifest.suite_token_hash_sha256[:12]}... "
                           f"differs from the suite's {suite.suite_token_hash_sha256[:12]}... "
                           f"({suite.path}); it was made from another suite; {OTHER_SUITE}")
        if self.manifest.context_length != suite.context_length:
            raise BadInput(f"{self.manifest.path}: context_length {self.manifest.context_length} differs "
                           f"from the suite's {suite.context_length} ({suite.path}); {OTHER_SUITE}")
        for w in windows:
            record = self.manifest.entry(w.index)
            if record.token_ids_json_sha256 != w.token_ids_json_sha256:
                raise BadInput(f"{self.manifest.path}: {w.label} token hash differs from the suite's; these "
                               f"hidden states were made from other tokens; {OTHER_SUITE}")

    def check_files(self, suite: Suite, windows: list[WindowSpec]) -> None:
        for w in windows:
            problems, _ = fid.check_tensor_file(self.manifest, w.index, suite, side=self.role)
            if problems:
                more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
                raise BadInput(problems[0] + more)

    def listed(self, windows: list[WindowSpec]) -> list[ListedFile]:
        return [(self.manifest.file_path(w.index), self.manifest.entry(w.index).sha256, w, self.root)
                for w in windows]

    def identity(self, index: int) -> dict[str, Any]:
        return {"sha256": self.manifest.entry(index).sha256, "lm_head_sha256": self.head.file_sha256,
                "lm_head_path": str(self.head.path), "replay_dtype": self.output}

    def file_path(self, index: int) -> Path:
        """The context's hidden-state file."""
        return self.manifest.file_path(index)

    def bytes_read(self, rows: int) -> int:
        return rows * self.manifest.width * 2

    def open(self, window: WindowSpec, replays: Replays, block: int, use_mmap: bool) -> _ReplayedRows:
        return _ReplayedRows(self.manifest.file_path(window.index), self.manifest.tensor_key,
                             replays.get(self.head, self.output), block)

    def nonfinite(self, window: WindowSpec, rows: np.ndarray) -> str | None:
        path = self.manifest.file_path(window.index)
        with RowReader(path, self.manifest.tensor_key, "BF16") as reader:
            hit = [int(r) for r in rows[:64]
                   if finite.nonfinite_state_rows(reader.pread(int(r), int(r) + 1)).size]
        if hit:
            return finite.states_problem(path, window.label, self.role, hit)
        return finite.replay_problem(self.head.path, path, window.label, rows)

    def info(self, windows: list[WindowSpec]) -> SideInfo:
        sizes = [self.manifest.entry(w.index).size_bytes for w in windows]
        return SideInfo(kind=self.kind, label=_label(self.manifest_path),
                        manifest_sha256=_manifest_sha(self.manifest_path),
                        lm_head_file_sha256=self.head.file_sha256, file_dtype="BF16",
                        bytes_on_disk=sum(sizes) + self.head.size_bytes,
                        full_logits_bytes=sum(w.scored_positions for w in windows) * self.vocab * 4)


def _read_manifest_doc(folder: Path) -> tuple[Path, dict[str, Any]]:
    return read_versioned(folder, LOGITS_MANIFEST, "manifest", what_to_do=LOGITS_REMEDY)


def _head_for(role: Role, manifest: fid.TensorManifest, given: str | os.PathLike[str] | None,
              suite_dir: Path | None) -> fid.LmHead:
    if given is not None:
        return fid.load_lm_head(given)
    if role == "reference":
        found = fid.reference_head_dir(manifest.root, suite_dir)
        if found is not None:
            return fid.load_lm_head(found)
        places = " or ".join(str(p) for p in fid.reference_head_places(manifest.root, suite_dir))
        raise BadInput(f"{manifest.path}: holds hidden states and no LM head was found in {places}; give "
                       "the head with --lm-head FILE_OR_FOLDER")
    own = manifest.root / fid.LM_HEAD_DIR
    if own.is_dir():
        return fid.load_lm_head(own)
    raise BadInput(f"{manifest.path}: the candidate holds hidden states and its own LM head is not in "
                   f"{own}; export it there ({kldtui_command()} export-head --checkpoint CANDIDATE --output "
                   f"{shell_arg(own)}), or "
                   "give it with --candidate-lm-head (a quantized head is part of what is measured, so the "
                   "reference's is never used silently; pass the reference's head there if the candidate "
                   "really shares it)")


def load_side(folder: str | os.PathLike[str], role: Role, *, lm_head: str | os.PathLike[str] | None = None,
              suite_dir: Path | None = None, replay_dtype: str | None = None) -> Side:
    """The side a folder holds, decided by its manifest: a logits folder (either layout), a
    hidden-state folder (with its head), or a suite folder whose top-level ``manifest.json``
    names its hidden-state reference."""
    path = Path(folder)
    manifest_path, doc = _read_manifest_doc(path)
    if fid.is_top_manifest(doc):
        top = fid.load_top_manifest(manifest_path)
        manifest_path, doc = _read_manifest_doc(manifest_path.parent / top.hidden_manifest)
        suite_dir = suite_dir or top.path.parent
    with remedy(LOGITS_DAMAGED):
        # a folder of hidden states becomes logits through a head (fidelity.TENSOR_KINDS)
        hidden = (fid.is_tensor_manifest(doc)
                  and fid.TENSOR_KINDS[fid.tensor_kind(doc, str(manifest_path))].needs_head)
        manifest = fid.tensor_manifest_from_doc(manifest_path, doc) if hidden else None
    if manifest is not None:
        return HiddenSide(manifest, _head_for(role, manifest, lm_head, suite_dir), role, replay_dtype)
    if lm_head is not None:
        flag = "--lm-head" if role == "reference" else "--candidate-lm-head"
        raise BadInput(f"{manifest_path}: holds logits, so {flag} {lm_head} has nothing to replay; leave it "
                       "out")
    return LogitsSide(load_logits_manifest(manifest_path), role)


def same_head(a: Side, b: Side) -> bool:
    """Both sides are replayed with one head (the same file, or files with one SHA-256)."""
    if not isinstance(a, HiddenSide) or not isinstance(b, HiddenSide):
        return False
    if a.head.path.resolve() == b.head.path.resolve():
        return True
    return a.head.file_sha256 is not None and a.head.file_sha256 == b.head.file_sha256


def heads(*sides: Side) -> Iterator[fid.LmHead]:
    seen: set[Path] = set()
    for side in sides:
        if isinstance(side, HiddenSide) and side.head.path.resolve() not in seen:
            seen.add(side.head.path.resolve())
            yield side.head


def memory_text(sides: tuple[Side, Side], rows: int, vocab: int, replays: Replays | None = None) -> str:
    """What a replay block costs, said before a run: the FP32 blocks, and the replay's buffers per
    vocabulary chunk (the product, and on the widened path the chunk of the head in FP32)."""
    hidden = [s for s in sides if isinstance(s, HiddenSide)]
    block = len(hidden) * rows * vocab * 4
    chunk = replays.chunk if replays is not None else DEFAULT_CHUNK
    widened = replays is None or any(replays.gemm_path(s.output) == WIDENED for s in hidden)
    width = max((h.hidden for h in heads(*sides)), default=0)
    buffers = rows * chunk * 2 + (rows * chunk * 4 + width * chunk * 4 if widened else 0)
    path = "each chunk of the head widened to FP32" if widened else "a BF16 GEMM"
    return (f"replaying {len(hidden)} side(s) {rows} rows at a time: {human_bytes(block)} of replayed "
            f"logits, {human_bytes(buffers)} of buffers per vocabulary chunk ({path}); the head itself is "
            "mapped from the page cache")


__all__ = ["HiddenSide", "LogitsSide", "Replays", "RowSource", "Side", "SideInfo", "heads", "load_side",
           "memory_text", "same_head"]
