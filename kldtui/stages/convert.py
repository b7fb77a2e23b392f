"""``kldtui convert``: a suite's reference to llama.cpp's KL-divergence base file and back
(docs/FORMATS.md, "llama.cpp's KL-divergence base file").

:func:`export_llama_cpp` writes the file ``llama-perplexity --kl-divergence-base`` writes, from a
suite's windows and reference logits, so ``llama-perplexity --kl-divergence`` measures a GGUF
against the same reference kldtui uses. Each window becomes a chunk (``n_ctx`` = the suite's
context length); llama.cpp scores the second half of each chunk, so rows ``n_ctx/2 .. n_ctx-2``
of each window's reference are encoded. The uint16 encoding's loss is measured while writing
(every row decoded again and set against the float64 log-softmax of the float32 logits) and
returned (:class:`PrecisionLoss`).

:func:`import_llama_cpp` makes a kldtui suite of such a file: its chunks become windows, the
decoded log-probabilities of the positions llama.cpp scores become the reference.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Progress, Throttle, null_sink
from kldtui.folder_lock import check_output_file
from kldtui.formats import finite
from kldtui.formats import llamacpp_kld as kld
from kldtui.formats.logits_writer import pid_alive
from kldtui.formats.report_model import ReferenceEncoding
from kldtui.formats.safe_io import check_output
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import check_manifest_matches_suite, load_logits_manifest, load_suite, units_of
from kldtui.text import human_bytes, kldtui_command, plain_number

ROW_BLOCK = 64


@dataclass
class PrecisionLoss:
    """What the uint16 encoding lost, over every encoded row (log-probabilities in nats)."""

    rows: int = 0
    entries: int = 0
    max_step: float = 0.0          # the largest row scale (half of it bounds a kept entry's error)
    max_abs_error: float = 0.0     # largest |decoded - exact| log-probability of a kept entry
    mean_abs_error: float = 0.0
    floored_entries: int = 0       # entries more than 16 nats below their row's top: read as p = 0
    max_floored_mass: float = 0.0  # the largest probability mass one row lost to the floor
    mean_floored_mass: float = 0.0
    max_row_kl: float = 0.0        # largest KL(file || exact) of a row (the file renormalised)
    mean_row_kl: float = 0.0
    _abs_sum: float = field(default=0.0, repr=False)
    _mass_sum: float = field(default=0.0, repr=False)
    _kl_sum: float = field(default=0.0, repr=False)

    def add(self, logits: np.ndarray, encoded: np.ndarray) -> None:
        vocab = logits.shape[1]
        x = logits.astype(np.float64)
        exact = x - x.max(axis=1, keepdims=True)
        exact -= np.log(np.exp(exact).sum(axis=1, keepdims=True))
        decoded = kld.decode_rows(encoded, vocab).astype(np.float64)
        kept = np.isfinite(decoded)
        err = np.abs(np.where(kept, decoded - exact, 0.0))
        p = np.exp(exact)
        mass = np.where(kept, 0.0, p).sum(axis=1)
        # KL(file || exact): the decoded rows renormalised against the exact ones (finite: the file
        # gives probability 0 where it floors, and nothing where the exact row has none)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            masked = np.where(kept, decoded, -np.inf)
            renorm = masked - np.log(np.exp(masked).sum(axis=1, keepdims=True))
            row_kl = np.where(kept, np.exp(renorm) * (renorm - exact), 0.0).sum(axis=1)
        scale, _ = kld.row_header(encoded)
        self.rows += x.shape[0]
        self.entries += int(kept.sum())
        self.max_step = max(self.max_step, float(scale.max(initial=0.0)))
        self.max_abs_error = max(self.max_abs_error, float(err.max(initial=0.0)))
        self._abs_sum += float(err.sum())
        self.floored_entries += int((~kept).sum())
        self.max_floored_mass = max(self.max_floored_mass, float(mass.max(initial=0.0)))
        self._mass_sum += float(mass.sum())
        self.max_row_kl = max(self.max_row_kl, float(row_kl.max(initial=0.0)))
        self._kl_sum += float(row_kl.sum())
        self.mean_abs_error = self._abs_sum / self.entries if self.entries else 0.0
        self.mean_floored_mass = self._mass_sum / self.rows if self.rows else 0.0
        self.mean_row_kl = self._kl_sum / self.rows if self.rows else 0.0

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def lines(self) -> list[str]:
        return [
            f"uint16 encoding: largest step {plain_number(self.max_step)} nats (bound "
            f"{plain_number(kld.MAX_STEP)}); kept entries off by at most {plain_number(self.max_abs_error)} "
            f"nats (mean {plain_number(self.mean_abs_error, 2)})",
            f"16-nat floor: {self.floored_entries:,} of {self.entries + self.floored_entries:,} entries "
            "read as "
            f"probability 0, losing at most {plain_number(self.max_floored_mass)} of a row's mass "
            f"(mean {plain_number(self.mean_floored_mass, 2)})",
            f"KL(file || exact) per row: max {plain_number(self.max_row_kl)}, mean "
            f"{plain_number(self.mean_row_kl)} nats",
        ]


@dataclass(frozen=True)
class ExportResult:
    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    rows_per_chunk: int
    size_bytes: int
    precision: PrecisionLoss
    seconds: float

    def lines(self) -> list[str]:
        first = kld.first_scored(self.n_ctx)
        return [f"wrote {self.path}: {self.n_chunk} chunks of {self.n_ctx} tokens, "
                f"vocabulary {self.n_vocab:,}, "
                f"positions {first}..{self.n_ctx - 2} of each ({self.rows_per_chunk} rows per chunk, "
                f"{human_bytes(self.size_bytes)}) in {self.seconds:.1f} s",
                *self.precision.lines()]


def export_llama_cpp(suite_dir: str | os.PathLike[str], output: str | os.PathLike[str], *,
                     reference_dir: str | os.PathLike[str] | None = None, start_window: int = 0,
                     stop_window: int | None = None, force: bool = False, emit: EventSink = null_sink,
                     cancel: Cancel | None = None) -> ExportResult:
    """Write the suite's reference (windows ``[start_window, stop_window)``) as a llama.cpp base
    file at ``output``."""
    t0 = time.perf_counter()
    out = Path(output)
    # the output first: a folder, one in a missing folder, one already there, before the suite is read
    check_output_file(out)
    if out.exists() and not force:
        raise BadInput(f"{out}: already exists; pass --force to replace it")
    suite = load_suite(suite_dir)
    ref = Path(reference_dir) if reference_dir is not None else suite.root / "ref"
    manifest = load_logits_manifest(ref)
    windows = suite.select(start_window, stop_window)
    check_manifest_matches_suite(manifest, suite, windows)
    check_output(out, [suite.path, manifest.path, *(manifest.file_path(w.index) for w in windows)],
                 flag="FILE")
    n_ctx = suite.context_length
    if n_ctx < 4:
        raise BadInput(f"{suite.path}: windows of {n_ctx} tokens are too short for llama.cpp (4 or more); "
                       f"prepare one of longer windows ({kldtui_command()} prepare --context-length)")
    first, rows = kld.first_scored(n_ctx), kld.rows_per_chunk(n_ctx)
    tokens = np.array([suite.load_tokens(w) for w in windows], dtype=np.int64)
    if tokens.min() < 0 or tokens.max() >= 2**31:
        raise BadInput(f"{suite.path}: token ids must fit llama.cpp's int32")
    loss = PrecisionLoss()
    throttle = Throttle(0.2)
    with kld.KldBaseWriter(out, tokens.astype(np.int32), manifest.vocab_size) as writer:
        for done, w in enumerate(windows):
            path = manifest.file_path(w.index)
            with RowReader(path) as reader:
                if reader.rows != w.scored_positions or reader.cols != manifest.vocab_size:
                    raise BadInput(f"{path}: {w.label} holds [{reader.rows}, {reader.cols}], expected "
                                   f"[{w.scored_positions}, {manifest.vocab_size}]; verify the suite")
                parts = []
                for start in range(first, first + rows, ROW_BLOCK):
                    if cancel is not None:
                        cancel.check()
                    block = reader.pread(start, min(start + ROW_BLOCK, first + rows))
                    # compare's rule and words: a masked token (-inf) is kept, at llama.cpp's floor
                    problem = finite.logits_block_problem(block, path, w.label, "reference", start)
                    if problem is not None:
                        raise BadInput(problem)
                    encoded = kld.encode_rows(block)
                    loss.add(block, encoded)
                    parts.append(encoded)
                writer.add_encoded(np.concatenate(parts))
            if throttle.ready(final=done + 1 == len(windows)):
                emit(Progress("convert", task="export", done=done + 1, total=len(windows),
                              unit=units_of(windows)))
    return ExportResult(out, n_ctx, manifest.vocab_size, len(windows), rows, out.stat().st_size, loss,
                        time.perf_counter() - t0)


@dataclass(frozen=True)
class BosChoice:
    """What llama.cpp put at each chunk's first position when it made the file: ``token`` (a
    BOS id) or None (the stored token); ``why`` says where that came from."""

    token: int | None
    why: str


def bos_choice(*, model: str | os.PathLike[str] | None, bos: int | None, no_bos: bool) -> BosChoice:
    """The importer's BOS from ``--model GGUF`` (its ``tokenizer.ggml.add_bos_token`` and BOS id),
    ``--bos ID`` or ``--no-bos``; one of them is required: the file does not record it."""
    if bos is not None:
        if bos < 0:
            raise BadInput(f"--bos {bos}: a token id is 0 or more")
        return BosChoice(bos, f"--bos {bos}")
    if no_bos:
        return BosChoice(None, "--no-bos")
    if model is None:
        raise BadInput("--to suite needs --model GGUF, --bos ID or --no-bos: llama-perplexity replaces each "
                       "chunk's first token by BOS when the model adds one, and the base file does not say "
                       "whether it did")
    from kldtui.formats.gguf import read_gguf

    info = read_gguf(model)
    add = info.add_bos_token
    if add is None:
        raise BadInput(f"{model}: the GGUF does not record tokenizer.ggml.add_bos_token, so llama.cpp "
                       "decides "
                       "by its tokenizer type; say it with --bos ID or --no-bos")
    if not add:
        return BosChoice(None, f"{Path(model).name} adds no BOS")
    if info.bos_token_id is None:
        raise BadInput(f"{model}: adds BOS but records no tokenizer.ggml.bos_token_id; give --bos ID")
    return BosChoice(info.bos_token_id, f"{Path(model).name} adds BOS {info.bos_token_id}")


@dataclass
class FileLoss:
    """What an imported file's rows show of the encoding's loss (the exact logits are gone)."""

    rows: int = 0
    max_step: float = 0.0
    floored_entries: int = 0
    entries: int = 0
    max_mass_gap: float = 0.0  # largest |1 - sum of a decoded row's probabilities|
    _gap_sum: float = field(default=0.0, repr=False)

    def add(self, encoded: np.ndarray, decoded: np.ndarray) -> None:
        scale, _ = kld.row_header(encoded)
        kept = np.isfinite(decoded)
        with np.errstate(over="ignore"):
            gap = np.abs(1.0 - np.exp(decoded.astype(np.float64)).sum(axis=1))
        self.rows += decoded.shape[0]
        self.max_step = max(self.max_step, float(scale.max(initial=0.0)))
        self.floored_entries += int((~kept).sum())
        self.entries += int(kept.size)
        self.max_mass_gap = max(self.max_mass_gap, float(gap.max(initial=0.0)))
        self._gap_sum += float(gap.sum())

    @property
    def mean_mass_gap(self) -> float:
        return self._gap_sum / self.rows if self.rows else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "max_step": self.max_step, "max_entry_error": self.max_step / 2,
                "floored_entries": self.floored_entries, "entries": self.entries,
                "max_mass_gap": self.max_mass_gap, "mean_mass_gap": self.mean_mass_gap}

    def lines(self) -> list[str]:
        return [f"uint16 encoding: largest step {plain_number(self.max_step)} nats, so each kept "
                "log-probability is within "
                f"{plain_number(self.max_step / 2)} of what llama.cpp computed; {self.floored_entries:,} of "
                f"{self.entries:,} entries were more than 16 nats below their row's top and read as "
                "probability 0",
                f"decoded rows sum to 1 within {plain_number(self.max_mass_gap)} (mean "
                f"{plain_number(self.mean_mass_gap, 2)}); kldtui renormalises them"]


@dataclass(frozen=True)
class ImportResult:
    suite_dir: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    first: int
    bos: BosChoice
    loss: FileLoss
    seconds: float

    def lines(self) -> list[str]:
        return [f"wrote {self.suite_dir}: {self.n_chunk} windows of {self.n_ctx} tokens, vocabulary "
                f"{self.n_vocab:,}; positions {self.first}..{self.n_ctx - 2} of each are scored (the ones "
                f"llama.cpp scored); first token: {self.bos.why}", *self.loss.lines()]


IMPORT_DOMAIN = "llamacpp"
ENCODING_NAME = "llama.cpp's KL-divergence base file (uint16)"


def check_suite_destination(suite_dir: str | os.PathLike[str], *, force: bool = False) -> Path:
    """BadInput (one line) unless an imported suite may be written at ``suite_dir``: a new or empty
    folder, or (``force``) one holding only an imported suite. Said before anything is read (the base
    file, a ``--model`` GGUF): ``kldtui convert`` asks it first, :func:`import_llama_cpp` again."""
    final = Path(suite_dir)
    if final.exists() and not final.is_dir():
        raise BadInput(f"{final}: is not a folder; give a new folder")
    if final.is_dir() and any(final.iterdir()):
        if not (final / "suite-manifest.json").is_file():
            raise BadInput(f"{final}: exists and is not a kldtui suite; give a new folder")
        if not force:
            raise BadInput(f"{final}: already holds a suite; pass --force to replace it, or give a new "
                           "folder")
        ours = ("suite-manifest.json", "tokens", "ref")
        other = sorted(n.name for n in final.iterdir()
                       if n.name not in ours and not n.name.startswith(".kldtui"))
        if other:  # --force replaces an imported suite, never what else is kept beside it
            raise BadInput(f"{final}: holds more than an imported suite ({', '.join(other[:3])}); "
                           "give a new folder")
    return final


def import_llama_cpp(base_file: str | os.PathLike[str], suite_dir: str | os.PathLike[str], *,
                     bos: BosChoice, force: bool = False, emit: EventSink = null_sink,
                     cancel: Cancel | None = None) -> ImportResult:
    """Write the base file as a suite folder: one window per chunk (its first token BOS when
    ``bos`` says llama.cpp put it there), and ``ref/`` holding the decoded log-probabilities of the
    positions llama.cpp scored (``scored_row_start`` = n_ctx/2 in each window's entry)."""
    t0 = time.perf_counter()
    final = check_suite_destination(suite_dir, force=force)
    base = kld.read_base(base_file)
    # written beside its final name and renamed into place once complete: an interrupted import
    # leaves no half suite under the name (its leftover .importing folder is removed next time)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.importing-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    root = final.parent / f".{final.name}.importing-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    try:
        result = _import_into(base, root, bos, emit, cancel)
        if final.exists():
            old = final.parent / f".{final.name}.replaced-{os.getpid()}"
            os.rename(final, old)
            os.rename(root, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(root, final)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return ImportResult(final, base.n_ctx, base.n_vocab, base.n_chunk, base.first, bos, result,
                        time.perf_counter() - t0)



def _import_into(base: kld.KldBase, root: Path, bos: BosChoice, emit: EventSink,
                 cancel: Cancel | None) -> FileLoss:
    from kldtui.formats.logits_writer import LogitsFileWriter, write_logits_manifest
    from kldtui.formats.suite_writer import write_suite

    tokens = base.tokens().astype(np.int64)
    if bos.token is not None:
        tokens[:, 0] = bos.token
    if tokens.min() < 0 or tokens.max() >= base.n_vocab:
        bad = int(tokens.max()) if tokens.max() >= base.n_vocab else int(tokens.min())
        fix = (f"the file is damaged or --bos is wrong: fix --bos, or {kld.BASE_AGAIN}"
               if bos.token is not None else f"the file is damaged: {kld.BASE_AGAIN}")
        raise BadInput(f"{base.path}: token id {bad} is outside the vocabulary of {base.n_vocab:,}; {fix}")
    windows = [(IMPORT_DOMAIN, [int(t) for t in row]) for row in tokens]
    suite = write_suite(root, windows, dataset=f"llama.cpp:{base.path.name}", scored_row_start=base.first,
                        datasets=[{"dataset": f"llama.cpp:{base.path.name}", "revision": "0",
                                   "construction": "imported from a llama-perplexity --kl-divergence-base "
                                   f"file; first token: {bos.why}"}])
    loss = FileLoss()
    written = []
    throttle = Throttle(0.2)
    for (chunk, encoded), window in zip(base.iter_chunks(), suite.windows, strict=True):
        if cancel is not None:
            cancel.check()
        decoded = kld.decode_rows(encoded, base.n_vocab)
        unscorable = finite.unscorable_logit_rows(decoded)
        if unscorable.size:
            raise BadInput(f"{base.path}: chunk {chunk}: rows {finite.shown_rows(unscorable)} cannot be "
                           f"scored ({finite.LOGITS_RULE}); the file is damaged: {kld.BASE_AGAIN}")
        loss.add(encoded, decoded)
        writer = LogitsFileWriter(root / "ref", window, base.n_vocab, suite.context_length)
        writer.write_rows(decoded)
        written.append(writer.commit())
        if throttle.ready(final=chunk + 1 == base.n_chunk):
            emit(Progress("convert", task="import", done=chunk + 1, total=base.n_chunk, unit="windows"))
    runtime = {"source": "llama.cpp KL-divergence base file (llama-perplexity --kl-divergence-base)",
               "file": str(base.path), "n_ctx": base.n_ctx, "n_vocab": base.n_vocab, "n_chunk": base.n_chunk,
               "scored_positions": [base.first, base.n_ctx - 1], "first_token": bos.why,
               "logits": "log-probabilities decoded from uint16 (scale * q + min_log_prob); entries at the "
                         "16-nat floor are -inf",
               # compare copies it into each report against this reference (report_model.ReferenceEncoding)
               ReferenceEncoding.RUNTIME_KEY: {"format": ENCODING_NAME, "source_file": base.path.name,
                                               "floor_nats": kld.LOGIT_RANGE, **loss.to_json()}}
    write_logits_manifest(root / "ref", suite, written, kind="reference", runtime=runtime)
    return loss
