"""A candidate's size and bits per weight, from its weight files' headers or as given.

``measure(path)`` reads a safetensors file, a folder of them (a checkpoint's shards), or a GGUF
file, from their headers only: no tensor is loaded. ``given(...)`` takes the figures a profile or
a flag states. Either way the result is a :class:`ModelSize`, the report's ``candidate_size``
(docs/REPORT.md), which the leaderboard, its exports and plots show.

What the figures mean (the ones model cards quote):

- ``parameters``: the model's weights, counted from the tensors' shapes. Quantized safetensors
  checkpoints store some weights packed several to an integer (GPTQ/AWQ ``qweight``,
  compressed-tensors ``weight_packed``): those count ``32 / bits`` weights per 32-bit element,
  ``bits`` from the checkpoint's ``config.json`` (``quantization_config``); their scales, zero
  points and group indices are not weights (they count in the bytes).
- ``tensor_bytes``: the bytes of every tensor's data (headers left out).
- ``file_bytes``: the files' sizes on disk.
- ``bits_per_weight``: ``8 x tensor_bytes / parameters`` (as ``llama-quantize`` and exllamav3
  report it: embeddings, norms and quantization scales included).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.text import human_bytes, human_count

SOURCES = ("safetensors", "gguf", "given")
# tensor-name endings that hold weights packed into 32-bit integers, several per element
_PACKED = (".qweight", ".weight_packed")
# tensor-name endings that are not weights: quantization scales, zero points, group indices...
_AUXILIARY = (".scales", ".qzeros", ".g_idx", ".weight_shape", ".weight_scale", ".weight_zero_point",
              ".input_scale", ".weight_global_scale", ".input_global_scale", ".zeros", ".scale",
              ".k_scale", ".v_scale", ".weight_scale_inv")
MAX_BITS_PER_WEIGHT = 64.0  # an F64 checkpoint; above it the figures contradict each other
MAX_FILES = 10_000  # shards in one checkpoint folder
MODEL_CONFIG_LIMIT = 16 * 1024 * 1024  # bytes of a model folder's config.json read
# bytes of a checkpoint's model.safetensors.index.json read: a line of about 100 bytes per tensor, so
# the largest checkpoints' (a few hundred thousand tensors) are some tens of MB
CHECKPOINT_INDEX_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class ModelSize:
    """The report's ``candidate_size``: what was measured (or given) and from where."""

    source: str  # "safetensors", "gguf" or "given" (SOURCES)
    parameters: int | None = None
    tensor_bytes: int | None = None
    file_bytes: int | None = None
    bits_per_weight: float | None = None
    files: int | None = None  # weight files read
    quantization: str | None = None  # GGUF file type (Q4_K_M...), or the safetensors dtypes by share

    @property
    def size_bytes(self) -> int | None:
        """The size a table shows: the files on disk, else the tensors' bytes."""
        return self.file_bytes if self.file_bytes is not None else self.tensor_bytes

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ModelSize:
        """Validated as everything else a report carries: one line naming the file and field."""
        at = f"{where}: candidate_size"
        advice = "not a comparison report, or a damaged one (re-run kldtui compare)"
        if not isinstance(doc, dict):
            raise BadInput(f"{at}: expected an object; {advice}")
        unknown = sorted(set(doc) - {f for f in cls.__dataclass_fields__})
        if unknown:
            raise BadInput(f"{at}: unknown field {unknown[0]!r}; {advice}")
        source = doc.get("source")
        if source not in SOURCES:
            raise BadInput(f"{at}.source: {source!r} is not one of {', '.join(SOURCES)}; {advice}")
        values: dict[str, Any] = {"source": source}
        for key in ("parameters", "tensor_bytes", "file_bytes", "files"):
            v = doc.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise BadInput(f"{at}.{key}: expected a whole number >= 0, found {v!r}; {advice}")
            values[key] = v
        q = doc.get("quantization")
        if q is not None and (not isinstance(q, str) or len(q) > 200):
            raise BadInput(f"{at}.quantization: expected a short text; {advice}")
        values["quantization"] = q
        bpw = doc.get("bits_per_weight")
        if bpw is not None:
            if (not isinstance(bpw, int | float) or isinstance(bpw, bool) or not math.isfinite(bpw)
                    or not 0 < bpw <= MAX_BITS_PER_WEIGHT):
                raise BadInput(f"{at}.bits_per_weight: {bpw!r} is impossible (between 0 and "
                               f"{MAX_BITS_PER_WEIGHT:g}); {advice}")
            values["bits_per_weight"] = bpw
        size = cls(**values)
        problem = size.problem()
        if problem:
            raise BadInput(f"{at}: {problem}; {advice}")
        return size

    def problem(self) -> str | None:
        """Figures that contradict each other (a size that vouches for a bpw it cannot have)."""
        p, b, bpw = self.parameters, self.tensor_bytes, self.bits_per_weight
        if p == 0 and (b or bpw):
            return "parameters is 0"
        if p and b is not None and bpw is not None and not math.isclose(bpw, 8.0 * b / p, rel_tol=1e-3):
            return f"bits_per_weight {bpw!r} is not 8 x tensor_bytes / parameters ({8.0 * b / p:.4g})"
        if b is not None and self.file_bytes is not None and self.source != "given" and b > self.file_bytes:
            return f"tensor_bytes {b} exceed file_bytes {self.file_bytes}"
        return None

    def describe(self) -> str:
        """One line: ``4.37 GiB, 8.03 B parameters, 4.68 bits per weight (Q4_K_M, gguf)``."""
        parts = []
        if self.size_bytes is not None:
            parts.append(human_bytes(self.size_bytes))
        if self.parameters is not None:
            parts.append(f"{human_count(self.parameters)} parameters")
        if self.bits_per_weight is not None:
            parts.append(f"{self.bits_per_weight:.3f} bits per weight")
        where = ", ".join(x for x in (self.quantization, self.source) if x)
        return ", ".join(parts) + (f" ({where})" if where else "")


def given(*, parameters: int | None = None, size_bytes: int | None = None,
          bits_per_weight: float | None = None, where: str = "given") -> ModelSize:
    """Figures a user states (profile keys, flags): any two give the third."""
    for name, v in (("parameters", parameters), ("size_bytes", size_bytes)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise BadInput(f"{where}: {name} must be a whole number above 0, not {v!r}")
    if bits_per_weight is not None and not (math.isfinite(bits_per_weight)
                                            and 0 < bits_per_weight <= MAX_BITS_PER_WEIGHT):
        raise BadInput(f"{where}: bits_per_weight must be above 0 and at most {MAX_BITS_PER_WEIGHT:g}, "
                       f"not {bits_per_weight!r}")
    if parameters is None and size_bytes is None and bits_per_weight is None:
        raise BadInput(f"{where}: give at least one of parameters, size_bytes, bits_per_weight")
    if bits_per_weight is None and parameters and size_bytes:
        bits_per_weight = 8.0 * size_bytes / parameters
    elif size_bytes is None and parameters and bits_per_weight:
        size_bytes = round(parameters * bits_per_weight / 8.0)
    elif parameters is None and size_bytes and bits_per_weight:
        parameters = round(8.0 * size_bytes / bits_per_weight)
    elif parameters and size_bytes and bits_per_weight and not math.isclose(
            bits_per_weight, 8.0 * size_bytes / parameters, rel_tol=1e-2):
        raise BadInput(f"{where}: bits_per_weight {bits_per_weight:g} is not 8 x size_bytes / parameters "
                       f"({8.0 * size_bytes / parameters:.4g}); give two of the three")
    return ModelSize("given", parameters=parameters, tensor_bytes=size_bytes, file_bytes=None,
                     bits_per_weight=bits_per_weight)


def measure(path: str | os.PathLike[str]) -> ModelSize:
    """The size of the weights at ``path``: a ``.safetensors`` or ``.gguf`` file, or a folder of
    ``*.safetensors`` shards (a Hugging Face checkpoint) or holding one GGUF model (split GGUF
    files ``-00001-of-0000N.gguf`` count together). Headers only; BadInput naming the path."""
    p = Path(path)
    files = weight_files(p)
    return _gguf(files) if files[0].suffix == ".gguf" else _safetensors(files, p if p.is_dir() else p.parent)


def weight_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files that hold the weights at ``path`` (as :func:`measure` reads them): the file itself, a
    folder's checkpoint shards or its one GGUF model's files. BadInput naming the path."""
    p = Path(path)
    if p.is_dir():
        shards = sorted(x for x in p.glob("*.safetensors") if not x.name.startswith("."))
        ggufs = sorted(x for x in p.glob("*.gguf") if not x.name.startswith("."))
        if shards:
            return _checkpoint_files(p, shards)
        if ggufs:
            return _one_gguf_model(ggufs, p)
        raise BadInput(f"{p}: no *.safetensors or *.gguf weights in this folder; give the model's file "
                       "or folder, or its size (parameters, size_bytes) in the profile")
    if p.suffix in (".gguf", ".safetensors"):
        return [p]
    if not p.exists():
        raise BadInput(f"{p}: not found; give the model's weights (a .safetensors or .gguf file or their "
                       "folder) or its size (parameters, size_bytes)")
    raise BadInput(f"{p}: not a .safetensors or .gguf file; give the model's weights or their folder")


INDEX = "model.safetensors.index.json"


def _checkpoint_files(folder: Path, files: list[Path]) -> list[Path]:
    """The checkpoint's own shards: those its ``model.safetensors.index.json`` maps weights to, else
    the ``-NNNNN-of-NNNNN`` shards when other files lie beside them (a ``consolidated.safetensors``
    copy, an adapter), else every file."""
    import re

    from kldtui.formats.safe_io import read_text

    index = folder / INDEX
    if index.exists():
        try:
            doc = json.loads(read_text(index, limit=CHECKPOINT_INDEX_LIMIT))
            names = set(doc["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"{index}: not a safetensors index ({exc}); fix or remove it") from None
        if not all(isinstance(n, str) and n and "/" not in n and "\\" not in n and not n.startswith(".")
                   for n in names):
            raise BadInput(f"{index}: weight_map names a file outside the folder; fix or remove it")
        missing = sorted(n for n in names if not (folder / n).is_file())
        if missing:
            raise BadInput(f"{index}: names {missing[0]}, which is not in {folder}; the checkpoint is "
                           "incomplete, download the rest")
        return sorted(folder / n for n in names)
    sharded = [f for f in files if re.search(r"-\d{5}-of-\d{5}\.safetensors$", f.name)]
    return sharded if sharded and len(sharded) < len(files) else files


def _one_gguf_model(files: list[Path], folder: Path) -> list[Path]:
    import re

    split = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
    stems = {(m.group("stem") if (m := split.match(f.name)) else f.name) for f in files}
    if len(stems) != 1:
        names = ", ".join(sorted(stems)[:4])
        raise BadInput(f"{folder}: {len(stems)} GGUF models in this folder ({names}); give the file of "
                       "the candidate's")
    return files


def _safetensors(files: list[Path], folder: Path) -> ModelSize:
    from kldtui.formats.safetensors_io import read_header

    if len(files) > MAX_FILES:
        raise BadInput(f"{folder}: {len(files)} safetensors files; more than {MAX_FILES} is not a checkpoint")
    bits = _packed_bits(folder)
    parameters = tensor_bytes = file_bytes = 0
    by_dtype: dict[str, int] = {}
    for f in files:
        header = read_header(f)
        file_bytes += header.file_size
        for name, t in header.tensors.items():
            tensor_bytes += t.nbytes
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
            if name.endswith(_AUXILIARY):
                continue
            elements = math.prod(t.shape)
            if name.endswith(_PACKED) and t.dtype in ("I32", "U32"):
                if bits is None:
                    raise BadInput(f"{f}: tensor {name!r} holds packed weights but {folder / 'config.json'} "
                                   "gives no quantization_config bits; give parameters in the profile "
                                   "(or --candidate-parameters)")
                elements = elements * 32 // bits
            parameters += elements
    if parameters == 0:
        raise BadInput(f"{folder}: the safetensors files hold no weights; give the model's size instead")
    total = sum(by_dtype.values()) or 1
    mix = ", ".join(f"{d} {100 * b / total:.0f}%" for d, b in sorted(by_dtype.items(), key=lambda x: -x[1])
                    if b / total >= 0.01)
    return ModelSize("safetensors", parameters=parameters, tensor_bytes=tensor_bytes, file_bytes=file_bytes,
                     bits_per_weight=8.0 * tensor_bytes / parameters, files=len(files), quantization=mix)


def _packed_bits(folder: Path) -> int | None:
    """``quantization_config.bits`` (GPTQ, AWQ) or compressed-tensors' ``num_bits`` of the weights,
    from the checkpoint's config.json; None when it has none."""
    from kldtui.formats.safe_io import read_text

    try:
        doc = json.loads(read_text(folder / "config.json", limit=MODEL_CONFIG_LIMIT))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{folder / 'config.json'}: cannot be read as JSON ({exc}); "
                       "fix or remove it") from None
    q = doc.get("quantization_config") if isinstance(doc, dict) else None
    if not isinstance(q, dict):
        return None
    candidates: list[Any] = [q.get("bits"), q.get("w_bit")]
    groups = q.get("config_groups")
    if isinstance(groups, dict):
        for g in groups.values():
            if isinstance(g, dict) and isinstance(g.get("weights"), dict):
                candidates.append(g["weights"].get("num_bits"))
    for b in candidates:
        if isinstance(b, int) and not isinstance(b, bool) and b in (1, 2, 3, 4, 8, 16):
            return b
    return None


def _gguf(files: list[Path]) -> ModelSize:
    """One GGUF model (its split files together), from the headers kldtui.formats.gguf reads:
    every tensor's type and shape give its elements and bytes (llama-quantize's bits per weight)."""
    from kldtui.formats.gguf import read_gguf

    infos = [read_gguf(f) for f in files]
    parameters = sum(i.parameters for i in infos)
    tensor_bytes = sum(i.tensor_bytes for i in infos)
    if not parameters:
        raise BadInput(f"{files[0]}: the GGUF holds no tensors; give the model's weights")
    return ModelSize("gguf", parameters=parameters, tensor_bytes=tensor_bytes,
                     file_bytes=sum(i.file_size for i in infos),
                     bits_per_weight=8.0 * tensor_bytes / parameters, files=len(files),
                     quantization=next((i.file_type for i in infos if i.file_type), None))


__all__ = ["SOURCES", "ModelSize", "given", "measure"]
