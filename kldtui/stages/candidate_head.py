"""Where a hidden-state candidate's LM head comes from (hidden mode; docs/PRODUCING.md, "A candidate
in hidden mode").

Finalize's replay check and compare replay a candidate's hidden states with the candidate's own
head, ``lm-head/`` in its folder (:func:`kldtui.capture_modes.hidden_suite.head_dir`; never the
reference's: a quantized head is part of what is measured). The rule, in one place:

- ``lm-head/`` is already there: it is used as it is (placed by hand, or exported by an earlier run);
- else a campaign's repeat capture (``repeat/NAME``, :attr:`kldtui.workspace.Workspace.same_model_as`)
  reuses its leader's head, the same model's: the leader's weight file hardlinked where the file
  system allows (else copied), once it is shown to be a regular file whose hash is the one its
  manifest states (:func:`export_candidate_head`; a head that is not is exported again instead);
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
- a kind that holds its model itself (the embedded built-in model, which has no checkpoint) writes the
  head with the command it gives (:meth:`~kldtui.servers.base.ServerKind.head_command`), as the
  export-head stage, at the same point of the run.

The suite's own ``reference-hidden/`` is not a candidate: its head is the suite's ``lm-head/``,
exported from the reference checkpoint (docs/PRODUCING.md, "A hidden-state suite").
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput
from kldtui.events import EventSink, Notice, StageFinished, StageStarted, failure_reported, null_sink
from kldtui.formats.atomic import write_new_folder
from kldtui.formats.fidelity import head_bytes, load_lm_head
from kldtui.servers.base import HubModel, ServerConfig
from kldtui.servers.registry import kind_of
from kldtui.stages.export_head import STAGE, CheckpointIncomplete, HeadSource, export_head, find_head
from kldtui.text import human_bytes, kldtui_command, shell_arg
from kldtui.workspace import Workspace


@dataclass(frozen=True)
class CandidateHead:
    """What a hidden-state candidate's folder needs for its head: ``same_as`` to reuse, or
    ``checkpoint`` and ``source`` to export it from, or ``problem`` (one line) when it cannot be."""

    folder: Path  # the candidate's lm-head/
    same_as: Path | None = None  # the same model's exported head (a repeat capture's leader's)
    checkpoint: Path | None = None
    source: HeadSource | None = None
    problem: str | None = None
    command: tuple[str, ...] = ()  # the kind writes its own model's head (its head_command)

    @property
    def size_bytes(self) -> int:
        """The most putting the head in place writes: the export's head in BF16 (2 bytes a value),
        its header and manifest aside; a reused head's whole file, as a copy. A hardlink writes
        nothing, but whether one is made is known only once it is tried (a file system that refuses
        links, a file that fails its hash check and is exported instead), so a disk plan says the
        copy, "0 if hardlinked" (:attr:`reused`)."""
        if self.same_as is not None:
            from kldtui.formats.fidelity import HEAD_FILE

            return _size(self.same_as / HEAD_FILE)
        if self.source is None:
            return 0
        rows, cols = self.source.shape
        return head_bytes(rows, cols)

    @property
    def reused(self) -> bool:
        """The head is the same model's, hardlinked or copied, not exported."""
        return self.same_as is not None


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def candidate_head(mode: CaptureMode, config: ServerConfig, workspace: Workspace, *,
                   reuse: bool = True) -> CandidateHead | None:
    """Where the head of the candidate that ``config`` serves into ``workspace``'s candidate folder
    comes from (see the module docstring); None when the folder needs no head of its own here
    (another capture mode, no candidate folder, the suite's ``reference-hidden/``, or the head is
    already there). ``reuse`` False: not the same model's head, even where there is one."""
    from kldtui.capture_modes.hidden_suite import own_head_dir

    if not mode.replays_own_head or workspace.candidate_dir is None:
        return None
    folder = own_head_dir(workspace.candidate_dir, workspace.suite_dir)
    if folder is None or folder.exists():  # there (a damaged one is said, with its fix, where it is read)
        return None
    leader = workspace.same_model_as
    same_as = own_head_dir(leader, workspace.suite_dir) if reuse and leader is not None else None
    if same_as is not None and same_as.is_dir():
        return CandidateHead(folder, same_as=same_as)
    kind = kind_of(config)
    own = kind.head_command(config, folder)
    if own is not None:
        return CandidateHead(folder, command=tuple(own))
    model = config.served_model()
    missing = (f"{folder}: hidden mode replays the candidate's hidden states with its own LM head, which is "
               "not there")
    command = f"{kldtui_command()} export-head --checkpoint CHECKPOINT --output {shell_arg(folder)}"
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
    fetch = " ".join(["hf download", shell_arg(hub.repo_id, path=False)]
                     + (["--revision", shell_arg(hub.revision, path=False)] if hub.revision else [])
                     + ["--cache-dir", shell_arg(hub.cache_dir)])
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


def candidate_head_problem(mode: CaptureMode, config: ServerConfig, workspace: Workspace) -> str | None:
    """The line that refuses a run whose hidden-state candidate has no head and none can be exported
    (None: nothing to refuse)."""
    plan = candidate_head(mode, config, workspace)
    return plan.problem if plan is not None else None


def export_candidate_head(mode: CaptureMode, config: ServerConfig, workspace: Workspace,
                          emit: EventSink = null_sink) -> Path | None:
    """Put the candidate's head in its folder when it is not there: the same model's reused, else
    exported from its checkpoint (the export-head stage; its size said first); the folder written,
    else None. A head that cannot be exported is left to the preflight (before a run) and to
    finalize, which says it is missing."""
    plan = candidate_head(mode, config, workspace)
    if plan is not None and plan.same_as is not None:
        why = _reuse(plan.same_as, plan.folder, emit)
        if why is None:
            return plan.folder
        same_as, plan = plan.same_as, candidate_head(mode, config, workspace, reuse=False)
        instead = ("the head is exported from the checkpoint instead" if plan is not None and plan.source
                   else "and there is no checkpoint to export it from: place the head there by hand")
        emit(Notice(STAGE, f"{same_as}: not reused for its repeat ({why}); {instead}", level="warning"))
    if plan is not None and plan.command:
        return write_own_head(plan.folder, plan.command, kind_of(config).describe(config), emit)
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


def _reuse(source: Path, out: Path, emit: EventSink) -> str | None:
    """Put the exported head in ``source`` (the same model's) at ``out``: its weight file hardlinked
    where the file system allows, else copied, and its manifest copied, into a new folder beside
    ``out`` renamed into place once checked (as an export is). None when done; else why not
    (nothing written): the weight is not a regular file, or not the file its manifest hashes."""
    from kldtui.formats import fidelity as fid
    from kldtui.formats.safe_io import open_regular, read_bytes
    from kldtui.formats.suite import MANIFEST_LIMIT, sha256_file

    try:
        head = fid.load_lm_head(source)
        if head.manifest_path is None or head.file_sha256 is None:
            return "it has no manifest stating its hash"
        if not stat.S_ISREG(os.lstat(head.path).st_mode):  # never through a link kldtui did not make
            return f"{head.path.name} is not a regular file"
        manifest = read_bytes(head.manifest_path, limit=MANIFEST_LIMIT, follow=False)
    except (BadInput, OSError) as exc:
        return _clause(str(exc))
    manifest_name, sha = head.manifest_path.name, head.file_sha256

    def write(staging: Path) -> str:
        weight = staging / head.path.name
        try:
            os.link(head.path, weight, follow_symlinks=False)
            how = "hardlinked: no new space on disk"
        except OSError:  # another file system, or one without hardlinks
            with open_regular(head.path, follow=False) as src, open(weight, "xb") as dst:
                shutil.copyfileobj(src, dst, 16 * 1024 * 1024)
            how = f"copied: {human_bytes(head.size_bytes)} on disk"
        if not stat.S_ISREG(os.lstat(weight).st_mode) or sha256_file(weight) != sha:
            raise BadInput(f"{head.path.name} does not hash to the file_sha256 its manifest states")
        with open(staging / manifest_name, "xb") as dst:
            dst.write(manifest)
        fid.load_lm_head(staging)  # the pair is whole (its header and manifest agree)
        return how

    try:
        how = write_new_folder(out, write)  # onto nothing: out was checked missing, and is locked by the run
    except (BadInput, OSError) as exc:
        return _clause(str(exc))
    emit(Notice(STAGE, f"{out}: the candidate's LM head is the same model's, exported in {source} "
                       f"(file_sha256 {head.file_sha256[:12]}... checked), {how}; not exported again"))
    return None


def write_own_head(folder: Path, command: Sequence[str], served: str, emit: EventSink = null_sink) -> Path:
    """The export-head stage for a model without a checkpoint: ``command`` (its kind's
    ``head_command``) writes the head into ``folder``; a failure is one line with its last words."""
    import subprocess

    with failure_reported(emit, STAGE):
        emit(StageStarted(STAGE, detail=f"the LM head of the model {served} serves -> {folder}"))
        done = subprocess.run(list(command), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise BadInput(f"{folder}: the LM head of the model {served} serves was not written ({said})")
        head = load_lm_head(folder)
    emit(StageFinished(STAGE, summary=f"LM head [{head.vocab}, {head.hidden}] -> {head.path}", figures={
        "vocab": head.vocab, "hidden": head.hidden, "bytes": head.size_bytes,
        "raw_tensor_sha256": head.raw_tensor_sha256, "file_sha256": head.file_sha256}))
    return folder


__all__ = ["CandidateHead", "candidate_head", "candidate_head_problem", "export_candidate_head",
           "write_own_head"]
