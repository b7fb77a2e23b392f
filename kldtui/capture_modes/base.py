"""What a capture mode is: one strategy object per mode (:class:`CaptureMode`), and the interfaces
it meets on each side (the server process's :class:`ServerIO`, finalize's :class:`FinalizeJob`).

A mode says, in one place:

- what the server is told: :meth:`CaptureMode.server_env` (the environment kldtui gives a
  server it launches, and an attached server must be started with), the embedded server's flags
  (:meth:`CaptureMode.add_server_arguments`);
- what the server writes: :attr:`CaptureMode.chunks` (the chunk files' kind), and what it does
  with each prefill chunk (:meth:`CaptureMode.server_sink`: the vLLM hook and the embedded server
  hand every chunk's rows to it);
- what the capture client checks: the chunk kind's metadata and value checks, and the value of
  the capture records' ``mode`` field (:attr:`CaptureMode.record_value`);
- what finalize produces: :meth:`CaptureMode.file_name`, :attr:`CaptureMode.manifest_name`,
  :meth:`CaptureMode.finalize_window`, :meth:`CaptureMode.write_manifest`,
  :meth:`CaptureMode.read_manifest`;
- what compare reads for the candidate: the figures the server computed
  (:meth:`CaptureMode.server_figures`, score mode), or else the candidate's logits rows, which
  compare scores itself;
- what the disk preflight expects per row (:meth:`CaptureMode.disk_bytes_per_row`);
- how messages and the dashboard name it (:attr:`CaptureMode.label`, :attr:`CaptureMode.badge`).

The registry (:mod:`kldtui.capture_modes`) maps a name to its mode.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, null_sink
from kldtui.formats.suite import Suite, WindowSpec
from kldtui.text import kldtui_command

if TYPE_CHECKING:
    import numpy as np

    from kldtui.formats.chunks import ChunkKind
    from kldtui.formats.suite import LogitsManifest
    from kldtui.metrics.kernels import RowStats

MODE_ENV = settings.CAPTURE_MODE.name  # the server's capture mode (a registered name; default logits)

Verify = Literal["sample", "full", "none"]  # how a finalized file is read back (stages.finalize)


# -- the server side ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkRows:
    """One request's prompt rows as the server computed them (a whole prefill chunk or a slice of
    one): what a mode may save. Device tensors or arrays; vLLM may reuse their memory after the
    call, so a sink copies or consumes them before it returns."""

    logits: Any  # [rows, >= vocab_size]: padded vocabulary columns are never saved
    vocab_size: int
    hidden: Any = None  # [rows, hidden]: the final normalized hidden states (compute_logits' input)


class ServerIO(Protocol):
    """How one server process moves what a mode saves off its engine's thread, for one capture
    folder. The vLLM hook's (:mod:`kldtui.hook.vllm_plugin`) queues work on its bounded background
    writer; the embedded server's does everything at once, on the calling thread."""

    @property
    def folder(self) -> str:
        """The capture folder (``VLLM_KLD_CAPTURE_DIR``)."""
        ...

    @property
    def inline(self) -> bool:
        """Whether submitted work runs at once on the calling thread."""
        ...

    def on_writer_thread(self) -> bool:
        """Whether the caller is the thread that runs submitted work (it may then write at once)."""
        ...

    def stage(self, tensor: Any, cols: int) -> Any:
        """Start moving ``tensor[..., :cols]`` to the host without waiting; a staged part."""
        ...

    def submit_rows(self, request_id: str, row_start: int, parts: Sequence[Any],
                    write: Callable[[Any], None]) -> bool:
        """Call ``write(rows)`` beside the engine once the staged ``parts`` (consecutive rows from
        prompt row ``row_start``) are on the host, joined. False when it failed already (inline)."""
        ...

    def submit_job(self, request_id: str, row_start: int, rows: int, job: Callable[[], None]) -> bool:
        """Run ``job`` beside the engine; the capture client waits for those rows meanwhile.
        False when it failed already (inline)."""
        ...

    def fail(self, request_id: str, message: str) -> None:
        """Log a failure and leave the error marker in the request's folder; never raises."""
        ...

    def log(self, message: str) -> None:
        """One informational line in the server's log."""
        ...

    def device_sync_allowed(self) -> AbstractContextManager[Any]:
        """The server's allowance for a deliberate device synchronisation."""
        ...


class ServerSink(ABC):
    """What one server process does with each prefill chunk's rows in a mode (made once per
    capture folder by :meth:`CaptureMode.server_sink`). Never raises: a failure fails the request
    (its error marker), never the server.

    A chunk is :meth:`take`-n on the engine's thread, slice by slice where the runner computes it
    in slices (vLLM's V2 runner), then :meth:`put` once all its rows were taken; :meth:`save` does
    both for a whole chunk."""

    def __init__(self, io: ServerIO) -> None:
        self.io = io

    @abstractmethod
    def take(self, request_id: str, row_start: int, rows: ChunkRows,
             prompt: Sequence[int] | None = None) -> Any:
        """Rows from prompt row ``row_start`` of a request (``prompt``: its token ids when the
        runner exposes them): copy or consume them now. A piece for :meth:`put`, or None when
        the request failed (already reported)."""

    @abstractmethod
    def put(self, request_id: str, row_start: int, pieces: Sequence[Any], vocab_size: int) -> bool:
        """Save the chunk from prompt row ``row_start`` whose rows were taken as ``pieces`` (in
        row order). False when it failed (already reported)."""

    def save(self, request_id: str, row_start: int, rows: ChunkRows,
             prompt: Sequence[int] | None = None) -> bool:
        """Take and put one whole chunk."""
        piece = self.take(request_id, row_start, rows, prompt)
        return piece is not None and self.put(request_id, row_start, [piece], rows.vocab_size)


# -- finalize ----------------------------------------------------------------------------------------
class FinalizedEntry(Protocol):
    """One finalized window file as its folder's manifest lists it."""

    @property
    def window_index(self) -> int: ...

    @property
    def domain(self) -> str: ...

    @property
    def file(self) -> str: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def sha256(self) -> str: ...


class FinalizedManifest(Protocol):
    """A finalized folder's manifest as a mode reads it."""

    @property
    def path(self) -> Path: ...

    @property
    def suite_token_hash_sha256(self) -> str: ...

    @property
    def entries(self) -> Mapping[int, Any]: ...


@dataclass(frozen=True)
class FinalizeJob:
    """What finalizing a window needs besides the window and its chunk folder."""

    suite: Suite
    output_dir: Path
    vocab: int | None = None  # the run's vocabulary so far (expected, or of earlier windows)
    others: Mapping[int, Any] = field(default_factory=dict)  # other windows listed in the folder
    force: bool = False  # write a window's file again even if one matches
    verify: Verify = "sample"
    emit: EventSink = null_sink
    cancel: Cancel | None = None
    remember_hash: Callable[[Path, str], None] | None = None  # a file's SHA-256, computed while written
    keep_chunks: bool = False  # the chunks stay once the window is finalized (manifests may say so)


@dataclass(frozen=True)
class Finalized:
    """A finalized window: the entry its manifest lists, and the vocabulary it was computed with."""

    entry: Any  # a FinalizedEntry of the mode's own type
    vocab_size: int | None  # None: not known (nothing says it)


# -- compare -----------------------------------------------------------------------------------------
class ServerFigures(ABC):
    """Per-row figures a server computed (score mode), read for compare instead of computing them
    from the candidate's logits. Made by :meth:`CaptureMode.server_figures` once the inputs were
    checked (the suite, the reference manifest, the candidate folder's manifest)."""

    backend: ClassVar[str]  # the report's provenance backend ("server-scores")

    def __init__(self, reference: LogitsManifest) -> None:
        self.reference = reference  # the reference manifest the figures were checked against

    @abstractmethod
    def window(self, window: WindowSpec, reverse: bool) -> tuple[RowStats, int]:
        """One window's figures (checked first: BadInput names the file and what to do) and the
        bytes read for them."""


# -- the strategy ------------------------------------------------------------------------------------
class CaptureMode(ABC):
    """One capture mode (see the module doc). Instances are singletons in the registry; compare
    them by identity or by :attr:`name`."""

    name: ClassVar[str]  # [capture] mode, --mode, KLDTUI_CAPTURE_MODE
    label: ClassVar[str]  # how messages name it: "logits mode"
    badge: ClassVar[str | None] = None  # shown beside titles on the dashboard (None: unmarked)
    summary: ClassVar[str]  # one line for --help and the docs
    record_value: ClassVar[str | None] = None  # capture records' "mode" field (None: not written,
    # as in the original tools' records)
    manifest_name: ClassVar[str]  # the finalized folder's manifest
    # whether the server also saves the live logits of the requests the client marks (the replay
    # check's sample, :meth:`live_sample`; kldtui.formats.chunks.request_tag(live=True))
    saves_live_sample: ClassVar[bool] = False
    # whether a candidate's folder is replayed with its own LM head (lm-head/ in it), which the run
    # exports from its checkpoint or refuses without (kldtui.stages.candidate_head)
    replays_own_head: ClassVar[bool] = False
    # whether the server saves each chunk's final hidden states (ChunkRows.hidden) rather than its
    # logits: the embedded server's run-to-run noise then goes on those states
    saves_hidden_states: ClassVar[bool] = False

    @property
    @abstractmethod
    def chunks(self) -> ChunkKind:
        """The chunk files the server writes per prefill chunk (their kind: name, tensor, checks)."""

    def __repr__(self) -> str:
        return f"<capture mode {self.name}>"

    # -- kldtui doctor --smoke ----------------------------------------------------------------------
    # Whether the smoke request must be one of the suite's windows (the server scores against the
    # reference, so an arbitrary prompt names nothing it could score).
    smoke_needs_window: ClassVar[bool] = False

    def smoke_logprobs(self, chunk: Path, next_tokens: np.ndarray) -> np.ndarray:
        """The candidate's log-probability of each row's next token (``next_tokens``, one per row of
        the chunk file), from what the server saved: what ``doctor --smoke`` compares with the
        prompt logprobs the server returned. BadInput when this mode cannot be smoke-tested."""
        raise BadInput(f"kldtui doctor --smoke cannot check {self.label} yet: run one window with "
                       f"{kldtui_command()} run instead")

    # -- what the server is told -----------------------------------------------------------------
    @abstractmethod
    def server_env(self, suite_dir: Path | None, reference_dir: Path | None) -> dict[str, str]:
        """The environment a server needs for this mode besides its capture folder
        (:data:`MODE_ENV` and the mode's own; paths as the server's host sees them; ValueError
        when the mode needs a folder that is not given)."""

    def add_server_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The embedded server's flags for this mode (none by default)."""
        return None

    def server_env_from_args(self, args: argparse.Namespace) -> dict[str, str]:
        """The environment the embedded server's flags of this mode stand for."""
        return {}

    # -- what the server does ----------------------------------------------------------------------
    @abstractmethod
    def server_sink(self, io: ServerIO, env: Mapping[str, str] | None) -> ServerSink:
        """What a server process does with each prefill chunk (``env``: the environment the mode
        reads its settings from, :mod:`kldtui.settings`; None: this process's)."""

    # -- finalize ----------------------------------------------------------------------------------
    @abstractmethod
    def file_name(self, window_index: int) -> str:
        """A finalized window's file name."""

    def manifest_path(self, folder: Path) -> Path:
        return Path(folder) / self.manifest_name

    def holds(self, folder: Path) -> bool:
        """Whether ``folder`` is a finalized folder of this mode (its manifest is there; a mode
        whose manifest shares its name with another's looks inside)."""
        return self.manifest_path(folder).is_file()

    @abstractmethod
    def finalize_window(self, job: FinalizeJob, window: WindowSpec, chunk_dir: Path) -> Finalized:
        """Join ``chunk_dir``'s chunks into ``job.output_dir``'s file for ``window`` (a file that
        already matches is kept unless ``job.force``), read it back, and return its entry;
        BadInput/StageFailed name the problem."""

    @abstractmethod
    def write_manifest(self, folder: Path, suite: Suite, entries: Sequence[Any], *, vocab_size: int,
                       kind: str, runtime: Any, window_range: tuple[int, int]) -> Path:
        """Write the finalized folder's manifest listing ``entries``; its path."""

    @abstractmethod
    def read_manifest(self, path: Path) -> FinalizedManifest:
        """The finalized folder's manifest (BadInput when it does not parse)."""

    @abstractmethod
    def listed(self, manifest: Any, suite: Suite | None) -> dict[int, Any]:
        """The finalized entries (as :meth:`finalize_window` returns them) a manifest lists;
        ``suite``: the folder's suite, which names a window's domain where its manifest does not
        (None: it did not load; such a window's domain is then unknown, "")."""

    def finish(self, folder: Path, suite: Suite, entries: Sequence[Any], *, runtime: Any,
               emit: EventSink = null_sink, cancel: Cancel | None = None) -> None:
        """What a finalized folder gets once its windows are in (after its manifest): nothing by
        default (hidden mode: its live sample's manifest, the replay check, a suite's top-level
        files)."""
        return None

    # -- the capture client ------------------------------------------------------------------------
    def live_sample(self, suite: Suite, windows: Sequence[WindowSpec], count: int | None) -> frozenset[int]:
        """The windows whose live logits the server saves too (:attr:`saves_live_sample`); none by
        default."""
        return frozenset()

    # -- before a run -----------------------------------------------------------------------------------
    def reference_problems(self, suite_dir: Path, reference_dir: Path,
                           server_env: Mapping[str, str]) -> list[str]:
        """What the server of this mode would lack to use the reference (one line each), said
        before it is launched (``kldtui run``'s preflight); ``server_env`` is the environment the
        profile gives the server. Nothing by default."""
        return []

    # -- compare ---------------------------------------------------------------------------------------
    def server_figures(self, suite: Suite, reference_dir: Path, candidate_dir: Path,
                       windows: Sequence[WindowSpec]) -> ServerFigures | None:
        """The figures the server computed for ``windows``, checked (BadInput), or None: compare
        computes them from the reference's and the candidate's logits rows (the default)."""
        return None

    # -- the disk ----------------------------------------------------------------------------------
    @abstractmethod
    def disk_bytes_per_row(self, vocab_size: int, hidden_width: int | None = None) -> int | None:
        """Bytes a captured row takes in a chunk and again in the finalized file; None when it is
        a few dozen bytes (no disk preflight) or not known yet. ``hidden_width``: the served
        model's hidden width where the reference says it (a hidden-state reference, its LM head)."""
