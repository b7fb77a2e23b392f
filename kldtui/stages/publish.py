"""``kldtui publish``: verify a dataset root, write its dataset card, upload it to the Hub.

A dataset root is a suite folder with the reference logits in ``ref/`` (the published layout,
docs/FORMATS.md). The card (README.md) follows the structure of the published Kimi K3 card:
what the source model and runtime were, the contents with their figures, the layout, how to
capture a candidate and compare (kldtui commands and the plain steps), and the repeat noise.
Every figure on the card is computed from the folder's manifests, so the card cannot drift
from the files it describes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui import settings
from kldtui.errors import BadInput, StageFailed
from kldtui.events import EventSink, Notice, StageFinished, StageName, StageStarted, null_sink
from kldtui.formats.atomic import write_bytes_atomic, write_json_atomic
from kldtui.formats.report_model import REPORT_LIMIT
from kldtui.formats.safe_io import read_failure, read_text
from kldtui.formats.suite import (
    DATASET_CARD,
    DATASET_CARD_LIMIT,
    LOGITS_MANIFEST,
    SUITE_MANIFEST,
    LogitsManifest,
    Suite,
    card_runtime,
    load_logits_manifest,
    load_suite,
)
from kldtui.formats.untrusted_json import markdown_code, markdown_literal
from kldtui.redact import redact_document, redact_json, redact_text
from kldtui.stages.publish_secrets import scan_upload
from kldtui.text import human_bytes, precise_number, shell_arg
from kldtui.workspace import Workspace

STAGE: StageName = "publish"
CARD = DATASET_CARD
REF_DIR = "ref"


@dataclass(frozen=True)
class CardFigures:
    """The numbers the card states, all read from the folder."""

    windows: int
    context_length: int
    scored_per_window: int
    scored_positions: int
    vocab_size: int
    tensor_key: str
    dtype: str
    payload_bytes: int
    suite_token_hash: str


def figures(suite: Suite, ref: LogitsManifest) -> CardFigures:
    entries = [ref.entries[i] for i in sorted(ref.entries)]
    dtypes = {e.dtype for e in entries} or {"F32"}
    return CardFigures(
        windows=len(entries),
        context_length=suite.context_length,
        scored_per_window=suite.scored_positions_per_window,
        scored_positions=sum(e.shape[0] for e in entries),
        vocab_size=ref.vocab_size,
        tensor_key=ref.tensor_key,
        dtype="/".join(sorted(dtypes)),
        payload_bytes=sum(e.size_bytes for e in entries),
        suite_token_hash=suite.suite_token_hash_sha256,
    )


REPEAT_AGAIN = "remove it or capture the repeat again"


def _load_repeat_noise(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        doc = json.loads(read_text(path, limit=REPORT_LIMIT))  # a comparison report
    except OSError as exc:  # a FIFO, no permission, over the size limit
        raise read_failure(path, exc, "repeat capture's report", REPEAT_AGAIN) from None
    except ValueError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc}); {REPEAT_AGAIN}") from None
    return doc if isinstance(doc, dict) else None


def _num(doc: Any, *keys: str) -> float | None:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return float(doc) if isinstance(doc, int | float) and not isinstance(doc, bool) else None


def _runtime_lines(runtime: Any) -> list[str]:
    if not isinstance(runtime, dict) or not runtime:
        return ["The capture did not record its runtime (ref/manifest.json `runtime` is empty)."]
    lines = []
    for key in sorted(runtime):
        value = runtime[key]
        if isinstance(value, list | dict):
            value = json.dumps(value)
        lines.append(f"- {markdown_literal(str(key))}: {markdown_code(str(value))}")
    return lines


def _model_name(ref: LogitsManifest) -> str:
    """The reference model's name for the card. A reference kldtui captured (its runtime names the
    server's ``kind``) is named by the model it served: its served name defaults to the first
    candidate's plus "-reference" (``q4_k_m-reference`` for a float16 model's logits)."""
    runtime = ref.runtime if isinstance(ref.runtime, dict) else {}
    keys = ("served_model_name", "model_name", "model", "checkpoint")
    if isinstance(runtime.get("kind"), str):
        keys = ("model", "checkpoint", "served_model_name", "model_name")
    for key in keys:
        value = runtime.get(key)
        if isinstance(value, str) and value:
            return Path(value).name or value
    return "the reference model"


def render_card(root: Path, repo_id: str, suite: Suite, ref: LogitsManifest) -> str:
    """The dataset card (Markdown with a small YAML header) for the folder at ``root``. Secrets in
    what it quotes (the runtime, any text of a secret's shape) are redacted again here: the
    manifests may come from another tool (docs/SAFETY.md). The runtime is shown without kldtui's
    own token of the server start (``card_runtime``)."""
    ref = dataclasses.replace(ref, runtime=redact_json(card_runtime(ref.runtime)))
    f = figures(suite, ref)
    model = " ".join(_model_name(ref).split())  # one line, whatever a manifest holds
    shown_model = markdown_literal(model)  # a manifest from another tool: its text is text in the card
    n = f.windows
    first, last = min(ref.entries), max(ref.entries)
    # the reference capture's repeat of its first window (Workspace.repeat_noise_path): window 000's
    # only when the reference starts there (a card of windows 2.. said "no repeat capture is stored")
    repeat_noise = Workspace.for_suite(root).repeat_noise_path(first)
    runtime = ref.runtime if isinstance(ref.runtime, dict) else {}
    served = str(runtime.get("served_model_name") or model)
    server_kind = runtime.get("kind")
    # kldtui's reference manifests say kind "reference" (what the folder is), not what served it
    captured_by = (f"by kldtui from a {markdown_code(server_kind)} server" if isinstance(server_kind, str)
                   else f"with kind {markdown_code(str(ref.raw.get('kind', 'reference')))}")
    captures = sorted(p.name for p in root.glob("capture-*.json"))
    datasets = [d for d in suite.raw.get("datasets", []) if isinstance(d, dict)]
    w_first = f"window-{first:03d}-{suite.window(first).domain}.json"
    w_last = f"window-{last:03d}-{suite.window(last).domain}.json"
    out: list[str] = [
        "---",
        f"pretty_name: {json.dumps(f'{model} KLD reference logits')}",  # quoted: the name is the folder's
        "tags:",
        "- kld",
        "- logits",
        "- quantization",
        "---",
        "",
        f"# {shown_model} KLD reference logits",
        "",
        f"`{repo_id}` holds full-vocabulary reference logits of {shown_model} for measuring how far a "
        "quantized (or otherwise changed) build of the same model moves its next-token distribution: "
        "capture the candidate's logits on the same token windows and compare, KL(reference || candidate).",
        "",
        "## Source model and runtime",
        "",
        f"The reference was captured {captured_by} on "
        f"{markdown_literal(str(ref.raw.get('created_utc', 'an unrecorded date')))}. Runtime identity "
        "(from ref/manifest.json):",
        "",
        *_runtime_lines(ref.runtime),
        "",
        "## Contents",
        "",
        f"- {n} independent {f.context_length}-token windows",
        f"- {f.scored_positions:,} scored next-token positions ({n} * {f.scored_per_window})",
        f"- vocabulary size {f.vocab_size:,}",
        f"- one [{f.scored_per_window}, {f.vocab_size}] {f.dtype} safetensors tensor per window",
        f"- tensor key: {f.tensor_key}",
        f"- total logit payload: {f.payload_bytes:,} bytes ({human_bytes(f.payload_bytes)})",
        f"- suite token hash: {f.suite_token_hash}",
        "",
        "The windows do not overlap; each source's windows are evenly spaced over its token stream "
        f"({markdown_literal(str(suite.raw.get('selection', 'see suite-manifest.json')))}). Sources:",
        "",
        "| domain | dataset | config | split | revision | windows |",
        "|---|---|---|---|---|---|",
    ]
    for d in datasets:
        cells = [d.get("domain", ""), d.get("dataset", ""), d.get("config") or "", d.get("split", ""),
                 str(d.get("revision", ""))[:12], d.get("windows", "")]
        out.append("| " + " | ".join(markdown_literal(str(c)) for c in cells) + " |")
    if not datasets:
        out.append("| (not recorded) | | | | | |")
    tokenizer = suite.raw.get("model_tokenizer")
    klass = suite.raw.get("tokenizer_class", "class not recorded")
    if tokenizer and suite.raw.get("tokenizer_source") == "local folder":
        # the producer's own folder: its name says little to a reader, and it is no Hub id
        said = (f"Tokenizer: a local tokenizer folder ({markdown_code(str(tokenizer))}, "
                f"{markdown_literal(str(klass))}), not a Hub id; ")
    else:
        said = (f"Tokenizer: {markdown_code(str(tokenizer))} ({markdown_literal(str(klass))}), "
                if tokenizer else "")
    out += [
        "",
        said
        + f"add_special_tokens={str(suite.raw.get('add_special_tokens', False)).lower()}. Exact source "
        "revisions, text construction, window starts, token ids and per-window hashes are in "
        "suite-manifest.json and tokens/. Send the stored token ids to /v1/completions as they are: "
        "never re-tokenize them and never apply a chat template.",
        "",
        "## Layout",
        "",
        "```",
        f"{REF_DIR}/logits_{first:03d}.safetensors ... {REF_DIR}/logits_{last:03d}.safetensors",
        f"{REF_DIR}/{LOGITS_MANIFEST}",
        f"tokens/{w_first} ... tokens/{w_last}",
        SUITE_MANIFEST,
        *captures,
        *([repeat_noise.name] if repeat_noise.is_file() else []),
        "```",
        "",
        f"{REF_DIR}/{LOGITS_MANIFEST} is authoritative for every file's SHA-256, tensor shape, and the "
        "runtime identity.",
        "",
        "## Capture a candidate and compare",
        "",
        "With kldtui (installed from its repository: `pip install -e .` in a checkout; its vLLM hook "
        "captures the logits):",
        "",
        "```bash",  # a card read on other machines: the documented name, not kldtui_command()'s
        f"kldtui download {shell_arg(repo_id, path=False)} --local-dir reference      # fetches and verifies "
        "every hash",
        "kldtui serve --profile candidate.toml --capture-dir capture-chunks   # vLLM with the hook",
        f"kldtui capture --suite-dir reference --capture-dir capture-chunks --run-name candidate "
        f"--served-model-name {shell_arg(served, path=False)} --base-url http://127.0.0.1:8000",
        "kldtui finalize --suite-dir reference --capture-dir capture-chunks --run-name candidate "
        f"--output-dir candidate --expected-vocab {f.vocab_size}",
        "kldtui compare --reference-dir reference/ref --candidate-dir candidate "
        "--suite-manifest reference/suite-manifest.json --output kld.json",
        "```",
        "",
        "or the whole pipeline from a profile: `kldtui run --batch --profile candidate.toml`.",
        "",
        "The plain steps, without kldtui:",
        "",
        "1. Serve the candidate with vLLM and a capture hook that writes the raw, pre-softmax "
        "full-vocabulary prompt logits of each prefill chunk (set `VLLM_KLD_CAPTURE_DIR` to a fresh "
        "folder), with `--max-num-seqs 1`, `--max-num-batched-tokens 256` and "
        "`--no-enable-prefix-caching` (a cached prefix is never recomputed, so its logits are lost).",
        "2. For each window, POST the token ids of tokens/window-NNN-DOMAIN.json to /v1/completions: "
        + markdown_code(f'{{"model": {json.dumps(served)}, "prompt": [ids], "max_tokens": 1, '
                      '"temperature": 0, "seed": 1, "prompt_logprobs": 1}') + ".",
        f"3. Join the window's chunks into one [{f.scored_per_window}, {f.vocab_size}] float32 tensor "
        f"`{f.tensor_key}` (row i predicts token i + 1), saved as logits_NNN.safetensors.",
        "4. For every row, compute KL(reference || candidate) over the full vocabulary from the "
        "log-softmax of both rows; report per-token mean, median, P95, P99, max, Jensen-Shannon "
        "divergence, top-1 agreement, and a 95% bootstrap interval that resamples whole windows (the "
        "window is the sampling unit; tokens of a window are not independent).",
        "",
        "For quick iteration capture and compare the first windows only (`--stop-window 8`); use all "
        f"{n} windows to choose between candidates.",
        "",
        "## Repeat noise",
        "",
    ]
    noise = _load_repeat_noise(repeat_noise)
    kl = _num(noise, "kl_reference_to_candidate", "mean")
    if noise is not None and kl is not None:
        js = _num(noise, "js", "mean")
        top1 = _num(noise, "top1_agreement")
        out += [
            f"A second capture of window {first:03d} with the same model and runtime, compared with the "
            f"first ({repeat_noise.name}):",
            "",
            f"- KL(first || repeat) = {kl:.8g}",
            *([f"- JS = {js:.8g}"] if js is not None else []),
            # six significant digits, as the text summary's: a tiny agreement is not 0.0000%
            *([f"- top-1 agreement = {precise_number(top1 * 100)} %"] if top1 is not None else []),
            "",
            "This is the KL between two captures of one model (the runtime's own nondeterminism). It is "
            "not how far a candidate's mean KL against this reference moves between two captures, which "
            "is usually far smaller: measure that with `kldtui noise` (two captures of one candidate, "
            "each compared with this reference) before calling a difference between candidates noise.",
        ]
    else:
        out.append("No repeat capture is stored with this reference; measure how far a candidate's mean KL "
                   "moves between two captures (`kldtui noise`) before reading small differences as real.")
    out += [
        "",
        f"Every file was hashed after writing; `kldtui verify` re-checks the suite hash, the token "
        f"hashes, and every logits file against {REF_DIR}/{LOGITS_MANIFEST}.",
        "",
    ]
    return redact_text("\n".join(out))


def upload_files(root: Path) -> list[str]:
    """The files that go to the Hub, relative to ``root`` (hidden files and folders stay local);
    a symbolic link in what would go up (the upload would follow it out of the folder) is refused."""
    files = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in [*dirs, *sorted(names)]:
            path = here / name
            if name.startswith("."):
                continue
            if path.is_symlink():
                raise BadInput(f"{path}: a symbolic link; publish uploads only the folder's own regular "
                               "files, replace the link with the file it points to (cp --remove-destination) "
                               "and publish again")
            if name in names and path.is_file():
                files.append(path.relative_to(root).as_posix())
    return sorted(files)


_REPO_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?$")
REPO_PART_MAX = 96


def repo_id_problem(repo_id: str) -> str | None:
    """Why ``repo_id`` is not a Hub repository id ``ORG/NAME``, or None (the Hub's rules: letters,
    digits, ``_``, ``.`` and ``-``; starting with a letter or digit; no ``--`` or ``..``; at most
    96 characters a part). ``../x`` or ``me/..`` would name another place, ``me/x y`` nothing."""
    parts = repo_id.split("/")
    if len(parts) != 2:
        return "needs exactly one '/'"
    for part in parts:
        if not part:
            return "has an empty part"
        if len(part) > REPO_PART_MAX:
            return f"has a part of {len(part)} characters (at most {REPO_PART_MAX})"
        if not _REPO_PART.match(part) or not part.isascii():
            return (f"part {part!r} may hold only letters, digits, '_', '.' and '-', start with a "
                    "letter or digit and not end with '.' or '-'")
        if "--" in part or ".." in part:
            return f"part {part!r} holds '--' or '..'"
    return None


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` when it is a valid ``ORG/NAME``; BadInput (one line) otherwise."""
    problem = repo_id_problem(repo_id)
    if problem is not None:
        raise BadInput(f"--repo-id {repo_id!r}: not a repository id ({problem}); expected ORG/NAME, "
                       "e.g. my-org/qwen3-8b-kld-reference")
    return repo_id


@dataclass(frozen=True)
class PublishResult:
    card: str
    files: list[str]
    url: str | None


def publish(root: str | os.PathLike[str], repo_id: str, *, dry_run: bool = False, private: bool = False,
            revision: str | None = None, workers: int | None = None,
            emit: EventSink = null_sink) -> PublishResult:
    """Verify ``root``, write its card, and (unless ``dry_run``) upload it as a dataset repository."""
    from kldtui.formats.fidelity import HIDDEN_DIR
    from kldtui.stages.verify import verify_path
    from kldtui.stages.verify_hidden import is_hidden_suite

    p = Path(root)
    check_repo_id(repo_id)
    hidden = p.is_dir() and is_hidden_suite(p)  # verify's own test of what the folder holds
    if not hidden and (p / HIDDEN_DIR).is_dir() and not (p / REF_DIR / LOGITS_MANIFEST).is_file():
        raise BadInput(f"{p / HIDDEN_DIR}: hidden states of a suite of windows; the published hidden-state "
                       "layout (manifest.json, checksums.txt, partitions) needs a suite of contexts: capture "
                       "the hidden states into a context suite's reference-hidden/, or publish the logits "
                       "(ref/)")
    if not hidden and (not (p / SUITE_MANIFEST).is_file() or not (p / REF_DIR / LOGITS_MANIFEST).is_file()):
        raise BadInput(f"{p}: a dataset root needs {SUITE_MANIFEST} and {REF_DIR}/{LOGITS_MANIFEST} (a "
                       "logits suite), or a hidden-state suite's manifest.json, reference-hidden/ and "
                       "lm-head/; prepare the suite and capture its reference first")
    if not dry_run:  # before hashing every file: an offline host hears it at once, in one line
        from kldtui.stages.hub import hub_unreachable, unreachable_line

        reason = hub_unreachable()
        if reason is not None:
            raise BadInput(unreachable_line(f"publish {repo_id}", reason, "run it where the Hub is reachable "
                                            "(HF_ENDPOINT names a mirror), or check it first with --dry-run"))
    emit(StageStarted(STAGE, detail=f"{p} -> {repo_id}{' (dry run)' if dry_run else ''}"))
    if hidden:
        return _publish_hidden(p, repo_id, dry_run=dry_run, private=private, revision=revision,
                               workers=workers, emit=emit)
    verify_path(p, workers=workers, emit=emit).refuse(STAGE)
    suite = load_suite(p)
    ref = load_logits_manifest(p / REF_DIR)
    missing = [w.index for w in suite.windows if w.index not in ref.entries]
    if missing:
        emit(Notice(STAGE, f"ref/ lacks windows {missing}; the card describes the {len(ref.entries)} "
                    "windows it has", level="warning"))
    files = upload_files(p)
    _redact_uploads(p, files, dry_run=dry_run, emit=emit)
    card = render_card(p, repo_id, suite, ref)
    if CARD not in files:
        files = sorted([*files, CARD])
    if dry_run:
        emit(StageFinished(STAGE, summary=f"dry run: {len(files)} files would go to {repo_id}"))
        return PublishResult(card, files, None)
    write_bytes_atomic(p / CARD, card.encode("utf-8"))
    url = _upload(p, repo_id, private=private, revision=revision)
    emit(StageFinished(STAGE, summary=f"{len(files)} files -> {url}"))
    return PublishResult(card, files, url)


def _publish_hidden(p: Path, repo_id: str, *, dry_run: bool, private: bool, revision: str | None,
                    workers: int | None, emit: EventSink) -> PublishResult:
    """A hidden-state suite: verified whole, only the files its checksums.txt lists go up, the card
    from memory after them (:mod:`kldtui.stages.publish_hidden`)."""
    from kldtui.stages import publish_hidden

    facts = publish_hidden.gather(p, workers=workers, emit=emit)
    publish_hidden.notices(facts, emit)
    files = sorted({*facts.files, CARD})
    # another tool's checksums.txt may list its card: a card of kldtui's would contradict that line
    listed_card = CARD in facts.files
    if listed_card:
        try:
            card = read_text(p / CARD, limit=DATASET_CARD_LIMIT)
        except OSError as exc:  # over the limit, or put in place of the file after its hash was checked
            raise read_failure(p / CARD, exc, "dataset card", "fetch the suite again") from None
        except UnicodeDecodeError:
            raise BadInput(f"{p / CARD}: the dataset card is not UTF-8 text; fetch the suite again") from None
        emit(Notice(STAGE, f"{p / CARD}: listed in checksums.txt, so it is the suite's own card and goes up "
                           "as it is; kldtui writes no card over it", level="warning"))
    else:
        card = publish_hidden.render_card(p, repo_id, facts)
    if dry_run:
        emit(StageFinished(STAGE, summary=f"dry run: {len(files)} files would go to {repo_id}"))
        return PublishResult(card, files, None)
    total = sum((p / rel).stat().st_size for rel in facts.files)
    and_card = "" if listed_card else " and the card"
    emit(Notice(STAGE, f"uploading {len(facts.files)} files ({human_bytes(total)}){and_card} to "
                       f"{repo_id}; if it is interrupted, run the same command again: what is already there "
                       "is not sent again"))
    url = _upload(p, repo_id, private=private, revision=revision, only=facts.files,
                  card=None if listed_card else card)
    emit(StageFinished(STAGE, summary=f"{len(files)} files -> {url}"))
    return PublishResult(card, files, url)


TENSOR_SECRET_REMEDY = ("write the file again without it (and its size and SHA-256 where a manifest "
                        "lists them), or move it out of the folder if no manifest lists it, then publish "
                        "again")


def _redact_uploads(root: Path, files: Sequence[str], *, dry_run: bool, emit: EventSink) -> None:
    """Redaction applied again to everything that goes up: a JSON file holding a secret (a
    manifest's runtime written by another tool) is rewritten in the folder with it redacted (a dry
    run only says so); any other file holding a value of a secret's shape is refused. Large files
    are read in parts (:mod:`kldtui.stages.publish_secrets`); of a tensor file, only the header is
    read, and a secret there is refused (a tensor file cannot be redacted); the card (written from
    redacted values) is not read."""
    for rel in files:
        path = root / rel
        scan = None if rel == CARD else scan_upload(path, tensor_remedy=TENSOR_SECRET_REMEDY)
        if scan is None:
            continue
        doc = scan.document
        if doc is not None:
            clean = redact_document(doc)
            if clean != doc:
                if dry_run:
                    emit(Notice(STAGE, f"{path}: holds what looks like a secret (in its runtime or a value "
                                       "of a secret's shape); publish redacts it in this file before the "
                                       "upload", level="warning"))
                else:
                    write_json_atomic(path, clean, sort_keys=False)
                    emit(Notice(STAGE, f"{path}: held what looks like a secret; redacted in place before "
                                       "the upload", level="warning"))
                continue
        if scan.by_value:
            raise BadInput(f"{path}: holds a value shaped like a secret (a token, a password in a URL); "
                           "remove it, or move the file out of the folder, and publish again")


def _upload(root: Path, repo_id: str, *, private: bool, revision: str | None,
            only: Sequence[str] | None = None, card: str | None = None) -> str:
    """Upload ``root`` (hidden files stay local), or only the files ``only`` names (relative
    paths), then ``card`` as README.md from memory when given."""
    import glob

    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=settings.HF_ENDPOINT.get())
    ignore = [".*", "**/.*"]  # verify caches, download records, upload state
    allow = [glob.escape(rel) for rel in only] if only is not None else None
    try:
        repo = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        large = getattr(api, "upload_large_folder", None)
        if large is not None:  # huggingface_hub 0.24-1.x: the resumable multi-commit upload
            large(repo_id=repo_id, folder_path=root, repo_type="dataset", revision=revision,
                  ignore_patterns=ignore, allow_patterns=allow)
        else:  # 2.x: upload_folder is the resumable pipeline (hf_xet), or one commit without it
            api.upload_folder(repo_id=repo_id, folder_path=root, repo_type="dataset", revision=revision,
                              ignore_patterns=ignore, allow_patterns=allow, commit_message="kldtui publish")
        if card is not None:  # after the files: a card never describes files that are not there
            api.upload_file(path_or_fileobj=card.encode("utf-8"), path_in_repo=CARD, repo_id=repo_id,
                            repo_type="dataset", revision=revision,
                            commit_message="kldtui publish: dataset card")
    except HfHubHTTPError as exc:
        raise StageFailed(f"upload to {repo_id} failed: {' '.join(str(exc).split())[:300]}; run the same "
                          "command again to resume (files already uploaded are skipped)") from None
    except Exception as exc:  # noqa: BLE001 - the connection lost, or no token: one line each
        from kldtui.stages.hub import connection_reason, is_connection_error, unreachable_line

        if is_connection_error(exc):
            raise StageFailed(unreachable_line(f"upload to {repo_id}", connection_reason(exc),
                                               "run the same command again to resume (files already "
                                               "uploaded are skipped)")) from None
        if type(exc).__name__ == "LocalTokenNotFoundError":
            raise BadInput(f"upload to {repo_id}: no Hub token; run `hf auth login` or set HF_TOKEN, then "
                           "run the same command again") from None
        raise
    return str(getattr(repo, "url", f"datasets/{repo_id}"))


def format_file_list(root: Path, files: Sequence[str], card: str | None = None) -> str:
    """One line per file: its size and path (the card's size from ``card`` when it is not written)."""
    lines = []
    for rel in files:
        path = root / rel
        if rel == CARD and card is not None:
            size = len(card.encode("utf-8"))
        else:
            size = path.lstat().st_size if path.is_file() else 0
        lines.append(f"{size:>16,}  {rel}")
    return "\n".join(lines)
