"""Export a checkpoint's LM head for replay (``kldtui export-head``; docs/PRODUCING.md): the head
tensor read straight from the checkpoint's safetensors shard, without loading the model, and
written as ``lm-head/weight.safetensors`` (one BF16 tensor ``weight`` ``[vocab, hidden]``) plus
``lm-head/manifest.json`` (:func:`kldtui.formats.fidelity.write_lm_head`: raw and file hashes,
never overwriting), written into a new folder beside the output and renamed into place once whole.

Which tensor: ``--tensor NAME`` when given; else the first of :data:`HEAD_NAMES` the checkpoint
holds (``lm_head.weight``, ``language_model.lm_head.weight`` as Kimi K3 names it, ...). A model
whose config ties its word embeddings (``tie_word_embeddings``, also under ``text_config``) and
whose checkpoint holds no head multiplies by its input embedding: that tensor
(:data:`EMBEDDING_NAMES`) is exported, and the manifest and the command say so. Where the tensor
is comes from ``model.safetensors.index.json`` (its ``weight_map``), or the one
``model.safetensors`` file, or a ``.safetensors`` file given directly.

The head is written exactly as stored when it is BF16 (verbatim, unpadded: every row, reserved
ids included); an F32 or F16 head is rounded to BF16 (nearest, ties to even) and the manifest's
``source_dtype`` says so (the replay check then measures what that costs). Quantized heads (int
or 8-bit float storage with scales) are refused: replay needs the values. Memory: one block of
rows at a time (the shard is mapped, not read whole).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.events import (
    EventSink,
    Notice,
    StageFinished,
    StageName,
    StageStarted,
    failure_reported,
    null_sink,
)
from kldtui.formats.atomic import write_new_folder
from kldtui.formats.model_size import CHECKPOINT_INDEX_LIMIT, MODEL_CONFIG_LIMIT
from kldtui.formats.model_size import INDEX as INDEX_FILE  # one name for the checkpoint's index
from kldtui.formats.safe_io import is_present, kind_of, read_failure, read_text

STAGE: StageName = "export-head"
SINGLE_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
# the LM head's name in the checkpoints kldtui knows, in the order they are looked for
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight",
              "language_model.model.lm_head.weight", "output.weight")
# the input embedding a model with tied word embeddings multiplies by instead
EMBEDDING_NAMES = ("model.embed_tokens.weight", "language_model.model.embed_tokens.weight",
                   "model.language_model.embed_tokens.weight", "transformer.wte.weight",
                   "tok_embeddings.weight", "embed_tokens.weight")
EXPORTABLE = ("BF16", "F32", "F16")


@dataclass(frozen=True)
class HeadSource:
    """Where the head is in a checkpoint."""

    shard: Path  # the safetensors file holding it
    tensor: str  # its name there
    index: Path | None  # model.safetensors.index.json, when the checkpoint has one
    tied: bool  # the input embedding, exported because the model ties its word embeddings
    dtype: str
    shape: tuple[int, ...]


class CheckpointIncomplete(BadInput):
    """The checkpoint lacks the weights file that holds the head, or holds no safetensors weights
    at all: a download not finished (in a Hugging Face cache: only its config fetched so far)."""


# What to do about a checkpoint's JSON file (config, index) that cannot be used
CHECKPOINT = "give the checkpoint folder of a safetensors model, or download the checkpoint again"


def _json(path: Path, limit: int) -> dict[str, Any]:
    try:
        doc = json.loads(read_text(path, limit=limit))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"{path}: not valid JSON ({exc}); {CHECKPOINT}") from None
    except OSError as exc:  # a FIFO, a folder, no permission, over the size limit
        raise read_failure(path, exc, "checkpoint file", CHECKPOINT) from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: expected a JSON object; {CHECKPOINT}")
    return doc


def tied_embeddings(config: dict[str, Any]) -> bool | None:
    """The config's ``tie_word_embeddings`` (top level, else ``text_config``'s); None when unsaid."""
    for part in (config, config.get("text_config")):
        if isinstance(part, dict) and isinstance(part.get("tie_word_embeddings"), bool):
            return bool(part["tie_word_embeddings"])
    return None


def _present(path: Path) -> bool:
    """Whether the checkpoint has ``path`` (a regular file); a FIFO, a folder or a dangling link at
    the name is refused in one line naming it (not taken for an absent file)."""
    try:
        return is_present(path)
    except OSError as exc:
        raise read_failure(path, exc, "checkpoint file", CHECKPOINT) from None


def _weight_map(checkpoint: Path) -> tuple[dict[str, Path], Path | None]:
    """Tensor name -> shard, and the index file (None for a single file)."""
    from kldtui.formats.names import check_name
    from kldtui.formats.safetensors_io import read_header

    if checkpoint.is_file():
        return {name: checkpoint for name in read_header(checkpoint).tensors}, None
    if not checkpoint.is_dir():
        try:
            what = f"is {kind_of(checkpoint.stat().st_mode)}, not a file or folder"
        except OSError:
            what = "not found"
        raise BadInput(f"{checkpoint}: {what}; give the checkpoint folder (with {INDEX_FILE} or "
                       f"{SINGLE_FILE}) or a .safetensors file")
    index = checkpoint / INDEX_FILE
    if _present(index):
        doc = _json(index, CHECKPOINT_INDEX_LIMIT)
        weight_map = doc.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise BadInput(f"{index}: no weight_map; the index is damaged: download the checkpoint again")
        out = {}
        for name, shard in weight_map.items():
            if not isinstance(shard, str):
                raise BadInput(f"{index}: weight_map[{name!r}] is not a file name; the index is damaged: "
                               "download the checkpoint again")
            out[str(name)] = checkpoint / check_name(shard, "weight_map file", str(index))
        return out, index
    single = checkpoint / SINGLE_FILE
    if _present(single):
        return {name: single for name in read_header(single).tensors}, None
    found = sorted(p.name for p in checkpoint.glob("*.safetensors"))
    no_weights = BadInput if found else CheckpointIncomplete
    raise no_weights(f"{checkpoint}: neither {INDEX_FILE} nor {SINGLE_FILE}"
                     + (f" (found {', '.join(found[:3])}: give that file)" if found else "")
                     + "; give the checkpoint folder of a safetensors model")


def find_head(checkpoint: str | os.PathLike[str], tensor: str | None = None) -> HeadSource:
    """Where the LM head of ``checkpoint`` is (see the module docstring); BadInput, naming what the
    checkpoint holds, when it cannot be told."""
    from kldtui.formats.safetensors_io import read_header

    path = Path(checkpoint)
    weights, index = _weight_map(path)
    config_path = (path if path.is_dir() else path.parent) / CONFIG_FILE
    tied = tied_embeddings(_json(config_path, MODEL_CONFIG_LIMIT)) if _present(config_path) else None
    is_tied = False
    if tensor is not None:
        if tensor not in weights:
            raise BadInput(f"{index or path}: holds no tensor {tensor!r}; "
                           f"{_names_hint(weights)}")
        name = tensor
    else:
        heads = [n for n in HEAD_NAMES if n in weights]
        if heads:
            name = heads[0]
        else:
            embeddings = [n for n in EMBEDDING_NAMES if n in weights]
            if tied is not True or not embeddings:
                said = ("and its config says tie_word_embeddings = false" if tied is False else
                        f"and no {CONFIG_FILE} says its word embeddings are tied" if tied is None else
                        "and no input embedding kldtui knows")
                raise BadInput(f"{index or path}: holds no LM head kldtui knows "
                               f"({', '.join(HEAD_NAMES[:2])}, ...) {said}; name it with --tensor "
                               f"({_names_hint(weights)})")
            name, is_tied = embeddings[0], True
    shard = weights[name]
    if index is not None and not shard.exists():  # a dangling link too: its blob is gone
        raise CheckpointIncomplete(f"{shard}: not there, though {index.name} names it for {name}; the "
                                   "checkpoint is incomplete: download it again")
    header = read_header(shard)
    if name not in header.tensors:
        raise BadInput(f"{shard}: the index says it holds {name!r} but it does not; the checkpoint is "
                       "incomplete, download it again")
    info = header.tensors[name]
    if info.dtype not in EXPORTABLE or len(info.shape) != 2 or min(info.shape) < 1:
        scales = [n for n in weights if n.startswith(name.rsplit(".", 1)[0] + ".") and n != name]
        raise BadInput(f"{shard}: {name} is {info.dtype} {list(info.shape)}"
                       + (f" with {', '.join(scales[:3])}" if scales else "")
                       + "; replay needs an unquantized 2-D head (BF16, F32 or F16 [vocab, hidden]): export "
                       "it from the unquantized checkpoint")
    return HeadSource(shard, name, index, is_tied, info.dtype, tuple(info.shape))


def _names_hint(weights: dict[str, Path]) -> str:
    last = sorted(n for n in weights if n.endswith(".weight") and ("head" in n or "embed" in n or "wte" in n))
    return ("its head-like tensors: " + ", ".join(last[:6])) if last else f"it holds {len(weights)} tensors"


def export_head(checkpoint: str | os.PathLike[str], output: str | os.PathLike[str], *,
                tensor: str | None = None, expect_raw_sha256: str | None = None,
                emit: EventSink = null_sink) -> Any:
    """Export the head of ``checkpoint`` into ``output`` (a new or empty folder); the written
    :class:`kldtui.formats.fidelity.LmHead`."""
    from kldtui.formats import fidelity as fid
    from kldtui.formats.safetensors_io import map_tensor
    from kldtui.formats.suite import sha256_file

    with failure_reported(emit, STAGE):
        out = Path(output)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise BadInput(f"{out}: exists and is not an empty folder; export the head into a new folder "
                           "(an exported head is never overwritten)")
        source = find_head(checkpoint, tensor)
        emit(StageStarted(STAGE, detail=f"LM head {source.tensor} ({source.dtype} {list(source.shape)}) from "
                                        f"{source.shard} -> {out}"))
        if source.tied:
            emit(Notice(STAGE, f"{checkpoint}: the model ties its word embeddings and stores no LM head: "
                               f"its input embedding {source.tensor} is exported as the head"))
        if source.dtype != "BF16":
            emit(Notice(STAGE, f"{source.tensor} is {source.dtype}: rounded to BF16 (nearest, ties to even); "
                               "the replay check measures what that costs", level="warning"))
        # mapped from the descriptor its header is checked on: a FIFO swapped in after find_head never blocks
        weight = map_tensor(source.shard, source.tensor, source.dtype, source.shape)
        rows, cols = (int(d) for d in weight.shape)
        kind = ("input embedding exported as the LM head (tied word embeddings)" if source.tied
                else "LM head exported from the checkpoint")

        def write(staging: Path) -> None:
            index_sha256 = sha256_file(source.index) if source.index else None
            staged = fid.write_lm_head(staging, weight, checkpoint_tensor_key=source.tensor,
                                       checkpoint_index_sha256=index_sha256, source_shard=source.shard.name,
                                       kind=kind, extra={"source_dtype": source.dtype,
                                                         "tied_word_embeddings": source.tied})
            if expect_raw_sha256 is not None and staged.raw_tensor_sha256 != expect_raw_sha256:
                raise BadInput(f"{source.shard}: {source.tensor} hashes to {staged.raw_tensor_sha256} (raw "
                               f"BF16), not the expected {expect_raw_sha256}; wrong checkpoint or revision "
                               "(nothing kept)")

        # written beside the output and renamed into place once whole (onto nothing, or onto the empty
        # folder checked above): a stopped export leaves no half head that a later run (which exports
        # only a missing head) would take for one
        write_new_folder(out, write)
        head = fid.load_lm_head(out)
    emit(StageFinished(STAGE, summary=f"LM head [{rows}, {cols}] -> {head.path}", figures={
        "vocab": rows, "hidden": cols, "bytes": head.size_bytes, "raw_tensor_sha256": head.raw_tensor_sha256,
        "file_sha256": head.file_sha256, "tied": source.tied, "source_dtype": source.dtype}))
    return head


__all__ = ["CheckpointIncomplete", "EMBEDDING_NAMES", "HEAD_NAMES", "HeadSource", "export_head", "find_head",
           "tied_embeddings"]
