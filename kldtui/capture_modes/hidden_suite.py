"""What a finalized hidden-state folder gets beyond its windows (hidden mode,
:mod:`kldtui.capture_modes.hidden`; docs/PRODUCING.md, "A hidden-state suite").

Where things go depends on one question: is the folder the suite's own ``reference-hidden/``
(:func:`is_suite_reference`)? Then it is a published suite in the making:

- the capture's runtime identity is ``capture-runtime.json`` at the suite root, named by the
  hidden manifest's ``runtime_manifest`` (relative) and ``runtime_manifest_sha256``;
- the replay check's live logits are ``sentinel-live-logits/repeat-00/`` (repeat 00: captured in
  the same requests as ``reference-hidden/``) and the check itself
  ``validation/hidden-replay-qualification.json``;
- the LM head is ``lm-head/`` (``kldtui export-head``);
- once every context is finalized and the head is there, the top-level ``manifest.json`` and
  ``checksums.txt`` are written (a context suite only: a suite of windows has no partitions).

Any other folder (a candidate's hidden states) keeps everything inside itself: the runtime
inline in its manifest (``runtime``), live logits in ``live-logits/``, the head in ``lm-head/``
(the candidate's own: compare never replays a candidate with the reference's head), the check in
``hidden-replay-qualification.json``.

The replay check (:func:`replay_check`) replays each sampled context's hidden states with the head
(:mod:`kldtui.metrics.replay`, NumPy's SGEMM, the chunked arithmetic compare uses) and compares
the result with the live logits the server produced in the same forward pass, row by row with the
compare kernels: KL(live ‖ replay) mean, median, p99, p99.9 and max, top-1 agreement, and the
logit error. It is the measured tolerance of every comparison against this reference.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.errors import BadInput
from kldtui.events import Cancel, EventSink, Notice, StageName, null_sink
from kldtui.formats.suite import MANIFEST_LIMIT, Suite
from kldtui.text import kldtui_command, plain_number, precise_number, shell_arg

if TYPE_CHECKING:
    from kldtui.formats.fidelity import LmHead, TensorManifest

STAGE: StageName = "finalize"
QUALIFICATION_FILE = "hidden-replay-qualification.json"
CHECK_FORMAT = "kldtui-hidden-replay-check-v1"
# a replay qualifies a reference when it is this close to the live logits (docs/REPLAY.md): the
# published Kimi K3 suite's own check gave mean KL 1.2e-6 and top-1 0.99995
QUALIFY_MEAN_KL = 1e-4
QUALIFY_TOP1 = 0.999
CHECK_ROWS = 256  # rows replayed and compared at a time


def is_suite_reference(folder: Path, suite: Suite) -> bool:
    """Whether ``folder`` is the suite's own ``reference-hidden/``."""
    return is_reference_of(folder, suite.root)


def is_reference_of(folder: Path, suite_dir: Path) -> bool:
    """Whether ``folder`` is ``suite_dir``'s ``reference-hidden/`` (asked before the suite is
    loaded: a run's preflight)."""
    from kldtui.formats.fidelity import HIDDEN_DIR

    return Path(folder).resolve() == (Path(suite_dir) / HIDDEN_DIR).resolve()


def live_dir(folder: Path, suite: Suite) -> Path:
    """Where a finalized hidden folder's live sample goes (see the module docstring)."""
    from kldtui.capture_modes.hidden import LIVE_SUBDIR
    from kldtui.formats.fidelity import SENTINEL_LIVE_DIR, repeat_dir

    if is_suite_reference(folder, suite):
        return suite.root / SENTINEL_LIVE_DIR / repeat_dir(0)
    return Path(folder) / LIVE_SUBDIR


def head_dir(folder: Path, suite: Suite) -> Path:
    """The LM head a hidden folder is replayed with: the suite's ``lm-head/`` for its reference,
    the folder's own ``lm-head/`` for a candidate."""
    from kldtui.formats.fidelity import LM_HEAD_DIR

    own = own_head_dir(folder, suite.root)
    return suite.root / LM_HEAD_DIR if own is None else own


def own_head_dir(folder: Path, suite_dir: Path) -> Path | None:
    """A candidate's own ``lm-head/`` (inside ``folder``); None for the suite's ``reference-hidden/``,
    whose head is the suite's."""
    from kldtui.formats.fidelity import LM_HEAD_DIR

    return None if is_reference_of(folder, suite_dir) else Path(folder) / LM_HEAD_DIR


def check_path(folder: Path, suite: Suite) -> Path:
    from kldtui.formats.fidelity import VALIDATION_DIR

    if is_suite_reference(folder, suite):
        return suite.root / VALIDATION_DIR / QUALIFICATION_FILE
    return Path(folder) / QUALIFICATION_FILE


def replay_output(source_dtype: str | None) -> str:
    """How the replay rounds its logits for states a server of ``source_dtype`` produced: a BF16
    model's head returns BF16 logits, a float32 model's float32 (docs/REPLAY.md)."""
    return "f32" if source_dtype == "F32" else "bf16"


def _width(entries: Sequence[Any]) -> int:
    widths = {int(e.record["shape"][1]) for e in entries}
    if len(widths) != 1:
        raise BadInput(f"finalized contexts of widths {sorted(widths)}; finalize into a fresh folder")
    return widths.pop()


def _source_dtype(entries: Sequence[Any]) -> str | None:
    found = {e.record.get("kldtui_source_dtype") for e in entries} - {None}
    return found.pop() if len(found) == 1 else None


def _runtime_file(suite: Suite, runtime: Any) -> tuple[str | None, str | None]:
    """``capture-runtime.json`` at the suite root (written when ``runtime`` is given and differs);
    its relative name and SHA-256 (None, None when there is none)."""
    from kldtui.formats.atomic import write_json_atomic
    from kldtui.formats.fidelity import CAPTURE_RUNTIME, RUNTIME_CAPTURED
    from kldtui.formats.safe_io import read_text
    from kldtui.formats.suite import sha256_file

    path = suite.root / CAPTURE_RUNTIME
    if runtime is not None:
        doc = {"format_version": 1, "status": RUNTIME_CAPTURED, "checkpoint": (runtime or {}).get("model"),
               "tool": "kldtui", "runtime": runtime}
        try:
            same = json.loads(read_text(path, limit=MANIFEST_LIMIT)) == doc
        except (OSError, ValueError):
            same = False
        if not same:
            write_json_atomic(path, doc)
    if not path.is_file():
        return None, None
    return CAPTURE_RUNTIME, sha256_file(path)


def created_utc(path: Path) -> str | None:
    """The ``created_utc`` a JSON file already states (kept when it is written again, so a rerun
    that changes nothing leaves the same bytes and checksums)."""
    from kldtui.formats.safe_io import read_text

    try:
        doc = json.loads(read_text(path, limit=MANIFEST_LIMIT))
    except (OSError, ValueError):
        return None
    value = doc.get("created_utc") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def _existing_runtime(folder: Path) -> Any:
    from kldtui.capture_modes.hidden import HIDDEN_MANIFEST
    from kldtui.formats.safe_io import read_text

    try:
        doc = json.loads(read_text(Path(folder) / HIDDEN_MANIFEST, limit=MANIFEST_LIMIT))
    except (OSError, ValueError):
        return None
    return doc.get("runtime") if isinstance(doc, dict) else None


def write_hidden_manifest(folder: Path, suite: Suite, entries: Sequence[Any], *, kind: str,
                          runtime: Any) -> Path:
    """The hidden folder's ``manifest.json`` (the published tensor-folder manifest, validated by
    reading it back) listing ``entries``; kldtui's own fields: ``kldtui_kind`` (reference or
    candidate), ``replay_output`` (how its logits are replayed), ``runtime`` (outside a suite)."""
    from kldtui.formats.fidelity import TENSOR_MANIFEST, write_tensor_manifest

    runtime_manifest = runtime_sha = None
    extra: dict[str, Any] = {"kldtui_kind": kind, "replay_output": replay_output(_source_dtype(entries))}
    if is_suite_reference(folder, suite):
        runtime_manifest, runtime_sha = _runtime_file(suite, runtime)
    else:
        kept = runtime if runtime is not None else _existing_runtime(folder)
        if kept is not None:
            extra["runtime"] = kept
    return write_tensor_manifest(folder, "hidden", suite, [e.record for e in entries], width=_width(entries),
                                 run_name=f"{kind}-hidden", runtime_manifest=runtime_manifest,
                                 runtime_manifest_sha256=runtime_sha, extra=extra,
                                 created_utc=created_utc(Path(folder) / TENSOR_MANIFEST))


def finish_hidden_folder(folder: Path, suite: Suite, entries: Sequence[Any], *, runtime: Any,
                         emit: EventSink = null_sink, cancel: Cancel | None = None) -> None:
    """The live sample's manifest, the replay check (when the head is there) and, for the suite's
    reference, its top-level manifest and checksums (when every context is in). Says what is
    still missing and how to get it."""
    from kldtui.formats import fidelity as fid

    folder = Path(folder)
    if not entries:
        return
    in_suite = is_suite_reference(folder, suite)
    live_records = [e.live for e in entries if e.live]
    live_manifest = None
    if live_records:
        runtime_manifest, runtime_sha = _runtime_file(suite, None) if in_suite else (None, None)
        vocab = {int(r["shape"][1]) for r in live_records}
        if len(vocab) != 1:
            raise BadInput(f"{live_dir(folder, suite)}: live logits of vocabularies {sorted(vocab)}")
        target = live_dir(folder, suite)
        path = fid.write_tensor_manifest(target, "logits", suite, live_records,
                                         width=vocab.pop(), run_name="replay-check-live",
                                         runtime_manifest=runtime_manifest,
                                         runtime_manifest_sha256=runtime_sha,
                                         extra={"kldtui_kind": "replay-check-live"},
                                         created_utc=created_utc(target / fid.TENSOR_MANIFEST))
        live_manifest = fid.load_tensor_manifest(path)
    head_folder = head_dir(folder, suite)
    head = None
    if head_folder.is_dir():
        head = fid.load_lm_head(head_folder)
        if head.hidden != _width(entries):
            raise BadInput(f"{head.path}: the LM head is [{head.vocab}, {head.hidden}] but the hidden states "
                           f"are {_width(entries)} wide; export the head of the model that was served")
    else:
        emit(Notice(STAGE, f"{head_folder}: no LM head yet; export it ({kldtui_command()} export-head "
                           f"--checkpoint MODEL --output {shell_arg(head_folder)}) and run finalize again: "
                           "it checks the replay against the live logits"
                           + (" and finishes the suite" if in_suite else ""),
                    level="warning"))
    check: dict[str, Any] | None = None
    if head is not None and live_manifest is not None:
        hidden = fid.load_tensor_manifest(folder / fid.TENSOR_MANIFEST)
        check = replay_check(suite, hidden, live_manifest, head, cancel=cancel)
        from kldtui.formats.atomic import write_json_atomic

        target = check_path(folder, suite)
        target.parent.mkdir(parents=True, exist_ok=True)
        check["created_utc"] = created_utc(target) or check["created_utc"]
        write_json_atomic(target, check)
        kl = check["kl_live_to_replay"]
        emit(Notice(STAGE, f"replay check ({check['contexts']} contexts, {check['positions']} positions): "
                           f"KL(live || replay) mean {plain_number(kl['mean'])}, p99.9 "
                           f"{plain_number(kl['p99_9'])}, max {plain_number(kl['max'])}, top-1 "
                           f"{precise_number(check['top1_agreement'])}: {check['status']} "
                           f"({target})", level="info" if check["status"] == "qualified" else "warning"))
    elif head is not None:
        emit(Notice(STAGE, f"{folder}: no live logits were captured beside the hidden states, so the replay "
                           "is not checked; capture with a replay-check sample ([capture] replay_check, "
                           "--replay-check)", level="warning"))
    if in_suite:
        _finish_suite(suite, entries, head, check, runtime, emit)


def _finish_suite(suite: Suite, entries: Sequence[Any], head: LmHead | None, check: dict[str, Any] | None,
                  runtime: Any, emit: EventSink) -> None:
    """The suite's top-level ``manifest.json`` and ``checksums.txt``, once they can be true."""
    from kldtui.formats import fidelity as fid
    from kldtui.formats.safe_io import read_text

    missing = suite.window_count - len({e.window_index for e in entries})
    if not fid.is_context_suite(suite):
        emit(Notice(STAGE, f"{suite.root}: a suite of windows: the hidden states are in {fid.HIDDEN_DIR}/; "
                           "the published top-level manifest and checksums need a suite of contexts (kldtui "
                           "prepare --stratified)"))
        return
    if missing or head is None or head.file_sha256 is None:
        why = (f"{missing} of {suite.window_count} contexts are not finalized yet" if missing else
               "the LM head is missing" if head is None else "the LM head has no manifest (export it with "
               "kldtui export-head)")
        emit(Notice(STAGE, f"{suite.root}: the top-level manifest.json and checksums.txt are written once "
                           f"the suite is complete ({why})"))
        return
    checkpoint = None
    if runtime is not None:
        checkpoint = runtime.get("model")
    else:
        try:
            checkpoint = json.loads(read_text(suite.root / fid.CAPTURE_RUNTIME,
                                              limit=MANIFEST_LIMIT)).get("checkpoint")
        except (OSError, ValueError, AttributeError):
            checkpoint = None
    status = check["status"] if check is not None else "replay not checked"
    fid.write_top_manifest(suite.root, artifact_kind="distribution-fidelity hidden-state suite (kldtui)",
                           checkpoint=checkpoint, status=status,
                           created_utc=created_utc(suite.root / fid.TOP_MANIFEST))
    known = {f"{fid.HIDDEN_DIR}/{e.file}": e.sha256 for e in entries}
    known.update({f"{live_dir(suite.root / fid.HIDDEN_DIR, suite).relative_to(suite.root).as_posix()}/"
                  f"{e.live['file']}": e.live["sha256"] for e in entries if e.live})
    known[f"{fid.LM_HEAD_DIR}/{head.path.name}"] = head.file_sha256
    path = fid.write_checksums(suite.root, known)
    emit(Notice(STAGE, f"{suite.root}: the suite is complete: {fid.TOP_MANIFEST} (status {status!r}) and "
                       f"{path.name} written"))


# -- the replay check --------------------------------------------------------------------------------
def replay_check(suite: Suite, hidden: TensorManifest, live: TensorManifest, head: LmHead, *,
                 cancel: Cancel | None = None, rows_at_once: int = CHECK_ROWS) -> dict[str, Any]:
    """Each context of ``live`` replayed from ``hidden`` with ``head`` and compared with its live
    logits (see the module docstring); the check's JSON document."""
    import numpy as np

    from kldtui.formats import fidelity as fid
    from kldtui.formats.safetensors_io import RowReader
    from kldtui.formats.suite import sha256_file
    from kldtui.metrics import ckernel
    from kldtui.metrics.kernels import NumpyRowKernel, RowKernel
    from kldtui.metrics.replay import DEFAULT_CHUNK, NumpyReplay, bf16_to_f32

    output = fid.replay_output_of(hidden)
    replay = NumpyReplay(fid.head_bits(head), chunk=DEFAULT_CHUNK, output=output)
    if live.width != head.vocab:
        raise BadInput(f"{live.path}: live logits of vocabulary {live.width}, the head {head.path} has "
                       f"{head.vocab} rows; export the head of the model that was served")
    kernel: RowKernel = ckernel.CRowKernel(head.vocab) if ckernel.available() else NumpyRowKernel(head.vocab)
    kls: list[np.ndarray] = []
    agree = 0
    abs_sum = 0.0
    abs_max = 0.0
    contexts: list[int] = []
    for index in sorted(live.entries):
        window = suite.window(index)
        record = live.entry(index)
        for manifest, side in ((hidden, "hidden"), (live, "live")):
            problems, _ = fid.check_tensor_file(manifest, index, suite, side=side)
            if problems:
                raise BadInput(problems[0])
        tokens = np.asarray(suite.load_tokens(window, check_hash=True)[1:], dtype=np.int64)
        with RowReader(hidden.file_path(index), hidden.tensor_key, "BF16") as h_reader, \
                RowReader(live.file_path(index), live.tensor_key, record.dtype) as l_reader:
            for start in range(0, window.scored_positions, rows_at_once):
                if cancel is not None:
                    cancel.check()
                stop = min(start + rows_at_once, window.scored_positions)
                x = l_reader.read(start, stop)
                x = bf16_to_f32(x) if record.dtype == "BF16" else np.asarray(x, dtype=np.float32)
                y = replay.logits(h_reader.read(start, stop))
                stats = kernel.block(x, y, tokens[start:stop], reverse=False)
                kls.append(np.asarray(stats.kl, dtype=np.float64))
                agree += int(np.count_nonzero(stats.argmax_ref == stats.argmax_cand))
                diff = np.abs(x - y)
                abs_sum += float(diff.sum(dtype=np.float64))
                abs_max = max(abs_max, float(diff.max()))
        contexts.append(index)
    kl = np.concatenate(kls) if kls else np.zeros(0)
    positions = int(kl.size)
    if not positions:
        raise BadInput(f"{live.path}: lists no contexts; nothing to check the replay against")
    figures = {name: float(np.quantile(kl, q, method="linear")) for name, q in
               (("median", 0.5), ("p95", 0.95), ("p99", 0.99), ("p99_9", 0.999))}
    kl_doc = {"mean": float(kl.mean()), **figures, "max": float(kl.max())}
    top1 = agree / positions
    reasons = []
    if not kl_doc["mean"] <= QUALIFY_MEAN_KL:
        reasons.append(f"mean KL {plain_number(kl_doc['mean'])} > {QUALIFY_MEAN_KL:g}")
    if not top1 >= QUALIFY_TOP1:
        reasons.append(f"top-1 agreement {precise_number(top1)} < {QUALIFY_TOP1}")
    return {
        "format": CHECK_FORMAT, "format_version": 1, "created_utc": fid.utc_now(),
        "status": "qualified" if not reasons else "not qualified",
        "reasons": reasons,
        "thresholds": {"kl_mean_at_most": QUALIFY_MEAN_KL, "top1_at_least": QUALIFY_TOP1},
        "direction": "KL(live || replay)", "contexts": len(contexts), "context_indices": contexts,
        "positions": positions, "kl_live_to_replay": kl_doc, "top1_agreement": top1,
        "logit_absolute_error_mean": abs_sum / (positions * head.vocab), "logit_absolute_error_max": abs_max,
        "replay": {"library": replay.name, "device": "cpu", "vocab_chunk": replay.chunk, "output": output,
                   "kernel": kernel.name},
        "hidden_manifest_sha256": sha256_file(hidden.path), "live_manifest_sha256": sha256_file(live.path),
        "lm_head_file_sha256": head.file_sha256, "lm_head_raw_tensor_sha256": head.raw_tensor_sha256,
        "suite_token_hash_sha256": suite.suite_token_hash_sha256,
    }


__all__ = ["QUALIFICATION_FILE", "QUALIFY_MEAN_KL", "QUALIFY_TOP1", "check_path", "finish_hidden_folder",
           "head_dir", "is_reference_of", "is_suite_reference", "live_dir", "own_head_dir", "replay_check",
           "replay_output", "write_hidden_manifest"]
