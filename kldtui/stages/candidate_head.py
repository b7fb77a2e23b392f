"""Where a hidden-state candidate's LM head comes from (hidden mode; docs/PRODUCING.md, "A candidate
in hidden mode").

Finalize's replay check and compare replay a candidate's hidden states with the candidate's own
head, ``lm-head/`` in its folder (:func:`kldtui.capture_modes.hidden_suite.head_dir`; never the
reference's: a quantized head is part of what is measured). The rule, in one place:

- ``lm-head/`` is already there: it is used as it is (placed by hand, or exported by an earlier run);
- else the served model is a safetensors checkpoint on this disk whose head ``kldtui export-head``
  can read: the run exports it (:func:`export_candidate_head`, the export-head stage and its
  events, its size said first), after its server is started and before anything is finalized. A
  vLLM ``model`` that is a Hugging Face model id (``org/Model-AWQ``) is the snapshot the server
  downloads it into (:meth:`~kldtui.servers.base.ServerKind.hub_model`: its ``--revision``, its
  ``--download-dir`` or the cache its environment names), looked up in that cache only: kldtui
  never downloads it;
- else (a GGUF file, a quantized head, a Hub model id not in that cache or only partly, an attached
  server, whose model kldtui does not know) the run is refused before any server starts
  (:func:`candidate_head_problem`, asked by :func:`kldtui.workflow.preflight.preflight`), in one
  line naming the folder and the command that fills it (``hf download`` into the cache for a Hub
  model, else ``kldtui export-head``);
- a built-in model (the embedded demo server) has no checkpoint to export from and is not refused:
  its head is placed by hand, or finalize says it is missing (as before).

The suite's own ``reference-hidden/`` is not a candidate: its head is the suite's ``lm-head/``,
exported from the reference checkpoint (docs/PRODUCING.md, "A hidden-state suite").
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput
from kldtui.events import EventSink, Notice, null_sink
from kldtui.servers.base import HubModel, ServerConfig
from kldtui.servers.registry import kind_of
from kldtui.stages.export_head import STAGE, CheckpointIncomplete, HeadSource, export_head, find_head
from kldtui.text import human_bytes


@dataclass(frozen=True)
class CandidateHead:
    """What a hidden-state candidate's folder needs for its head: ``checkpoint`` and ``source`` to
    export it from, or ``problem`` (one line) when it cannot be; neither when it is there."""

    folder: Path  # the candidate's lm-head/
    checkpoint: Path | None = None
    source: HeadSource | None = None
    problem: str | None = None

    @property
    def size_bytes(self) -> int:
        """What the export writes: the head in BF16 (2 bytes a value), its header and manifest aside."""
        if self.source is None:
            return 0
        rows, cols = self.source.shape
        return 2 * int(rows) * int(cols)


def candidate_head(mode: CaptureMode, config: ServerConfig, candidate_dir: Path,
                   suite_dir: Path) -> CandidateHead | None:
    """Where the head of the candidate that ``config`` serves into ``candidate_dir`` comes from (see
    the module docstring); None when the folder needs no head of its own here (another capture
    mode, the suite's ``reference-hidden/``, or the head is already there)."""
    from kldtui.capture_modes.hidden_suite import own_head_dir

    if not mode.replays_own_head:
        return None
    folder = own_head_dir(candidate_dir, suite_dir)
    if folder is None or folder.exists():  # there (a damaged one is said, with its fix, where it is read)
        return None
    kind = kind_of(config)
    if kind.builtin:
        return None  # nothing to export it from; finalize says it is missing
    model = config.served_model()
    missing = (f"{folder}: hidden mode replays the candidate's hidden states with its own LM head, which is "
               "not there")
    command = f"kldtui export-head --checkpoint CHECKPOINT --output {folder}"
    if model is None:
        return CandidateHead(folder, problem=f"{missing}, and {config.label} ({kind.describe(config)}) names "
                                             "no checkpoint to export it from; before the run, export the "
                                             f"served model's head: {command}")
    hub = kind.hub_model(config)
    if hub is not None:
        return _from_hub(folder, config, hub, missing, command)
    path = Path(model).expanduser()
    if not path.exists():
        return CandidateHead(folder, problem=f"{missing}, and {config.label} model = {model!r} is not on "
                                             "this disk; before the run, download the checkpoint and export "
                                             f"its head: {command} (CHECKPOINT: the downloaded folder)")
    try:
        if path.is_file() and path.suffix != ".safetensors":
            raise BadInput(f"a {path.suffix or 'plain'} file, not the safetensors checkpoint kldtui "
                           "export-head reads")
        source = find_head(path)
    except BadInput as exc:
        return CandidateHead(folder, problem=_unexportable(missing, config, model, exc, command))
    return CandidateHead(folder, checkpoint=path, source=source)


def _from_hub(folder: Path, config: ServerConfig, hub: HubModel, missing: str, command: str) -> CandidateHead:
    """The head of a model the server downloads from the Hub: exported from its snapshot in the
    Hugging Face cache (looked up on this disk only, never downloaded here), else the refusal says
    how to fetch it into that cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, IncompleteSnapshotError, LocalEntryNotFoundError

    model = f"{config.label} model = {hub.repo_id!r}"
    if hub.revision:
        model += f" at revision {hub.revision!r}"
    fetch = " ".join(["hf download", shlex.quote(hub.repo_id)]
                     + (["--revision", shlex.quote(hub.revision)] if hub.revision else [])
                     + ["--cache-dir", shlex.quote(str(hub.cache_dir))])
    partly = (f"{missing}, and {model} is only partly in the Hugging Face cache ({{why}}); before the run, "
              f"finish its download: {fetch} (the run then exports its head from the cached checkpoint)")
    try:
        snapshot = Path(snapshot_download(hub.repo_id, revision=hub.revision, cache_dir=hub.cache_dir,
                                          local_files_only=True))
    except IncompleteSnapshotError as exc:
        return CandidateHead(folder, problem=partly.format(why=_clause(str(exc).split(". ", 1)[0])))
    except (LocalEntryNotFoundError, HFValidationError):
        return CandidateHead(folder, problem=f"{missing}, and {model} is not in the Hugging Face cache "
                                             f"{hub.cache_dir}; before the run, download it there: {fetch} "
                                             "(the run then exports its head from the cached checkpoint)")
    try:
        source = find_head(snapshot)
    except CheckpointIncomplete as exc:
        return CandidateHead(folder, problem=partly.format(why=_clause(str(exc))))
    except BadInput as exc:
        return CandidateHead(folder, problem=_unexportable(missing, config, hub.repo_id, exc, command))
    return CandidateHead(folder, checkpoint=snapshot, source=source)


def _unexportable(missing: str, config: ServerConfig, model: str, exc: BadInput, command: str) -> str:
    """The refusal of a checkpoint that is there but whose head cannot be exported (a GGUF, a
    quantized head)."""
    return (f"{missing}, and it cannot be exported from {config.label} model = {model!r} "
            f"({_clause(str(exc))}); before the run, export the head its server uses from a safetensors "
            f"checkpoint holding it unquantized ({command}), or capture in logits mode "
            '([capture] mode = "logits")')


def _clause(message: str) -> str:
    """A one-line error as a parenthesis of another: its fact, without its own remedy."""
    return message.split("; ", 1)[0]


def candidate_head_problem(mode: CaptureMode, config: ServerConfig, candidate_dir: Path,
                           suite_dir: Path) -> str | None:
    """The line that refuses a run whose hidden-state candidate has no head and none can be exported
    (None: nothing to refuse)."""
    plan = candidate_head(mode, config, candidate_dir, suite_dir)
    return plan.problem if plan is not None else None


def export_candidate_head(mode: CaptureMode, config: ServerConfig, candidate_dir: Path, suite_dir: Path,
                          emit: EventSink = null_sink) -> Path | None:
    """Export the candidate's head into its folder when it is not there and its checkpoint has one
    (the export-head stage; its size said first); the folder written, else None. A head that cannot be
    exported is left to the preflight (before a run) and to finalize, which says it is missing."""
    plan = candidate_head(mode, config, candidate_dir, suite_dir)
    if plan is None or plan.checkpoint is None or plan.source is None:
        return None
    parent = plan.folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(parent).free
    emit(Notice(STAGE, f"{plan.folder}: the candidate's LM head is exported from {plan.checkpoint} "
                       f"({plan.source.tensor}, {plan.source.dtype} {list(plan.source.shape)}): "
                       f"{human_bytes(plan.size_bytes)} on disk, {human_bytes(free)} free there"))
    export_head(plan.checkpoint, plan.folder, emit=emit)
    return plan.folder


__all__ = ["CandidateHead", "candidate_head", "candidate_head_problem", "export_candidate_head"]
