"""``kldtui publish`` of a hidden-state suite (docs/PRODUCING.md, "Publishing a hidden-state suite").

The suite is verified whole before anything goes up: every file ``checksums.txt`` lists must be
here (a suite is published complete, never a downloaded subset), each hashed against it (through
the verified-file cache), the suite and token hashes, the top-level manifest's hashes, every
tensor file's identity, the LM head's file and payload hashes; the replay check's record must
belong to these hidden states and this head. Any failure refuses the publish in one line naming
the file and what to do (exit 2).

What goes up is what the format lists: the files of ``checksums.txt`` and ``checksums.txt``
itself; never a symbolic link (a file, or a folder on its way), never anything else in the
folder (verify already refuses a file ``checksums.txt`` does not list), never a text file holding
a value of a secret's shape, nor a tensor file whose header holds a secret. Unlike a logits
suite's manifests, a hidden-state suite's JSON and tensor files are part of its identity (their
SHA-256 are in ``checksums.txt`` and the manifests), so a secret is not redacted in place: publish
refuses and says how to write the suite again.

The dataset card (README.md) is not written into the suite folder (it is not one of the
format's files, and checksums.txt does not list it): it is uploaded from memory after the files,
in its own commit. Every figure on it is read from the verified folder. A card already in the
folder (a full Hub snapshot holds one) stays local: verify accepts it as the card, and publish
writes its own.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kldtui.errors import BadInput
from kldtui.events import EventSink, Notice, StageName, null_sink
from kldtui.formats import fidelity as fid
from kldtui.formats.safe_io import read_failure, read_text
from kldtui.formats.suite import (
    DATASET_CARD,
    MANIFEST_LIMIT,
    SUITE_MANIFEST,
    Suite,
    card_runtime,
    load_suite,
    sha256_file,
)
from kldtui.formats.untrusted_json import markdown_code, markdown_literal
from kldtui.redact import redact_document, redact_json, redact_text
from kldtui.stages.publish_secrets import scan_upload
from kldtui.text import human_bytes, kldtui_command, precise_number, shell_arg

STAGE: StageName = "publish"
CARD = DATASET_CARD
QUALIFICATION = f"{fid.VALIDATION_DIR}/hidden-replay-qualification.json"


@dataclass(frozen=True)
class HiddenSuiteFacts:
    """What the card says, every value read from the verified folder."""

    suite: Suite
    top: fid.TopManifest
    hidden: fid.TensorManifest
    head: fid.LmHead
    files: tuple[str, ...]  # what goes up: checksums.txt's files and checksums.txt, sorted
    runs: tuple[fid.TensorManifest, ...]  # the sentinel repeat folders
    qualification: dict[str, Any] | None
    runtime: dict[str, Any] | None

    @property
    def contexts(self) -> int:
        return self.suite.window_count

    @property
    def full_f32_bytes(self) -> int:
        return fid.full_logits_bytes(self.contexts, self.suite.context_length, self.head.vocab)

    @property
    def reference_bytes(self) -> int:
        """What a comparison against every context downloads: the hidden states and the head."""
        return self.hidden.total_size_bytes + self.head.size_bytes


def upload_list(root: Path) -> list[str]:
    """The files that go up: those ``checksums.txt`` lists, and itself; each a regular file
    inside ``root`` reached through no symbolic link (BadInput naming the first that is not)."""
    if not (root / fid.CHECKSUMS).exists() and not (root / fid.CHECKSUMS).is_symlink():
        raise BadInput(f"{root / fid.CHECKSUMS}: not found; the suite is not finished: finalize writes "
                       f"{fid.TOP_MANIFEST} and {fid.CHECKSUMS} once every context is captured and the LM "
                       f"head is in {fid.LM_HEAD_DIR}/ ({kldtui_command()} export-head, then "
                       f"{kldtui_command()} finalize --mode hidden)")
    listed = fid.read_checksums(root)
    files = sorted([*listed, fid.CHECKSUMS])
    base = root.resolve()
    for rel in files:
        here = root
        for part in rel.split("/"):
            here = here / part
            try:
                mode = os.lstat(here).st_mode
            except FileNotFoundError:
                raise BadInput(f"{root / rel}: listed in {fid.CHECKSUMS} but missing; a suite is published "
                               f"whole: fetch or capture every file ({kldtui_command()} download REPO "
                               "--local-dir DIR --context-filter all --sentinel-runs), then publish again"
                               ) from None
            if stat.S_ISLNK(mode):
                raise BadInput(f"{here}: a symbolic link; publish uploads only the suite's own regular "
                               "files, replace the link with the file it points to "
                               "(cp --remove-destination) and publish again")
        if not stat.S_ISREG(mode):
            raise BadInput(f"{root / rel}: not a regular file; remove it and put the suite's file there")
        if not (root / rel).resolve().is_relative_to(base):
            raise BadInput(f"{root / rel}: lies outside {root}; publish only the suite's own files")
    return files


def tensor_secret_remedy() -> str:
    """What to do about a secret in a tensor file's header (its hash is part of the suite)."""
    return ("its SHA-256 is part of the suite (checksums.txt, the manifests): write the file again without "
            f"it, then the suite's hashes ({kldtui_command()} finalize --mode hidden for a suite kldtui "
            "captured), and publish again")


def refuse_secrets(root: Path, files: Sequence[str]) -> None:
    """A file that holds a secret (by the shape of a value, a JSON ``runtime`` field named like one,
    or in a tensor file's header a metadata key named like one) is refused: its hash is part of the
    suite, so it cannot be redacted in place. Large files are read in parts
    (:mod:`kldtui.stages.publish_secrets`); of a tensor file, only the header is read."""
    remedy = tensor_secret_remedy()
    for rel in files:
        path = root / rel
        scan = scan_upload(path, tensor_remedy=remedy, follow=False)
        if scan is None:
            continue
        if scan.by_value or (scan.document is not None and redact_document(scan.document) != scan.document):
            raise BadInput(f"{path}: holds what looks like a secret (a token, a password in a URL, a runtime "
                           "field named like one); its SHA-256 is part of the suite (checksums.txt, the "
                           "manifests), so publish does not rewrite it: remove the value and write the "
                           f"suite's hashes again ({kldtui_command()} finalize --mode hidden for a suite "
                           "kldtui captured), then publish again")


def _load_json(root: Path, rel: str) -> dict[str, Any] | None:
    path = root / rel
    if not path.is_file():
        return None
    try:
        doc = json.loads(read_text(path, limit=MANIFEST_LIMIT))
    except OSError as exc:  # over the limit, or put in place of the file after the check
        raise read_failure(path, exc, "JSON record", "fetch or write it again") from None
    except ValueError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc}); fetch or write it again") from None
    return doc if isinstance(doc, dict) else None


def check_qualification(root: Path, doc: Mapping[str, Any] | None, hidden: fid.TensorManifest,
                        head: fid.LmHead, suite: Suite) -> None:
    """A replay check kldtui recorded names what it checked: it must be these hidden states, this
    head and this suite, or its figures would be told of another reference."""
    if doc is None:
        return
    path = root / QUALIFICATION
    wants = (("hidden_manifest_sha256", sha256_file(hidden.path), hidden.path),
             ("lm_head_file_sha256", head.file_sha256, head.manifest_path or head.path),
             ("suite_token_hash_sha256", suite.suite_token_hash_sha256, suite.path))
    for key, have, of in wants:
        stated = doc.get(key)
        if stated is not None and have is not None and stated != have:
            raise BadInput(f"{path}: {key} {str(stated)[:12]}... is not {of}'s {have[:12]}...; the replay "
                           "was checked against other files: finalize again "
                           f"({kldtui_command()} finalize --mode hidden) to check this reference's replay, "
                           "then publish")


def gather(root: Path, *, workers: int | None = None, emit: EventSink = null_sink) -> HiddenSuiteFacts:
    """Verify the suite whole (see the module docstring) and read what the card says."""
    from kldtui.stages.verify_hidden import payload_sha256, verify_hidden_suite

    files = upload_list(root)
    result = verify_hidden_suite(root, selection=fid.ContextFilter("all"), sentinel_runs=None,
                                 workers=workers, emit=emit)
    result.refuse(STAGE)
    suite = load_suite(root)
    top = fid.load_top_manifest(root / fid.TOP_MANIFEST)
    hidden = fid.load_tensor_manifest(root / fid.HIDDEN_DIR)
    head = fid.load_lm_head(root / fid.LM_HEAD_DIR)
    if head.manifest_path is None or head.file_sha256 is None:
        raise BadInput(f"{root / fid.LM_HEAD_DIR}: the LM head has no manifest.json with its file_sha256; "
                       "export it with kldtui export-head")
    if head.path not in result.checked and head.raw_tensor_sha256 is not None:
        # verify checks the payload hash when it hashes the file; the cache vouched for the file
        # this time, and publish states the payload hash on the card: check it again
        raw = payload_sha256(head.path, head.info.begin, head.info.end)
        if raw != head.raw_tensor_sha256:
            raise BadInput(f"{head.path}: the tensor payload's SHA-256 {raw[:12]}... differs from "
                           f"raw_tensor_sha256 {head.raw_tensor_sha256[:12]}...; export the head again")
    if sorted(hidden.entries) != [w.index for w in suite.windows]:
        raise BadInput(f"{hidden.path}: lists {len(hidden.entries)} of the suite's {suite.window_count} "
                       "contexts; a suite is published whole: capture and finalize the rest")
    refuse_secrets(root, files)
    runs = tuple(fid.load_tensor_manifest((root / rel).parent) for rel in fid.run_manifests(files))
    qualification = _load_json(root, QUALIFICATION)
    check_qualification(root, qualification, hidden, head, suite)
    runtime = _load_json(root, fid.CAPTURE_RUNTIME)
    return HiddenSuiteFacts(suite=suite, top=top, hidden=hidden, head=head, files=tuple(files), runs=runs,
                            qualification=qualification, runtime=runtime)


# -- the card ------------------------------------------------------------------------------------------
def _num(doc: Any, *keys: str) -> float | None:
    for key in keys:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return float(doc) if isinstance(doc, int | float) and not isinstance(doc, bool) else None


def _one_line(value: Any) -> str:
    """A value from the folder on one line, at most 80 characters."""
    text = "" if value is None else str(value)
    return " ".join(text.split())[:80]


def _cell(value: Any) -> str:
    """A value from the folder as Markdown text (a table cell, a sentence): no link, HTML or new cell."""
    return markdown_literal(_one_line(value))


def _model(facts: HiddenSuiteFacts) -> str:
    for value in (facts.top.raw.get("checkpoint"), (facts.runtime or {}).get("checkpoint")):
        if isinstance(value, str) and value:
            return Path(value).name or value
        if isinstance(value, Mapping) and isinstance(value.get("repo"), str):
            return str(value["repo"]).rsplit("/", 1)[-1]
    return "the reference model"


def _strata_rows(suite: Suite) -> tuple[list[str], int]:
    rows: dict[str, dict[str, Any]] = {}
    clusters: set[str] = set()
    for w in suite.windows:
        info = fid.context_info(w)
        if info is None:
            continue
        row = rows.setdefault(info.allocation_stratum, {"contexts": 0, "analysis": 0, "qualification": 0,
                                                        "sentinels": 0, "clusters": set()})
        row["contexts"] += 1
        row[info.partition] = row.get(info.partition, 0) + 1
        row["sentinels"] += info.sentinel
        row["clusters"].add(info.cluster_key)
        clusters.add(info.cluster_key)
    lines = ["| allocation stratum | contexts | analysis | qualification | sentinels | source clusters |",
             "|---|---|---|---|---|---|"]
    for name in sorted(rows, key=lambda n: min(w.index for w in suite.windows if w.domain == n)):
        r = rows[name]
        lines.append(f"| {_cell(name)} | {r['contexts']} | {r['analysis']} | {r['qualification']} | "
                     f"{r['sentinels']} | {len(r['clusters'])} |")
    return lines, len(clusters)


def _source_rows(suite: Suite) -> list[str]:
    counts: dict[tuple[str, str, str, str], int] = {}
    for w in suite.windows:
        info = fid.context_info(w)
        if info is None:
            continue
        key = (info.dataset or "(not recorded)", info.dataset_config or "", info.dataset_split or "",
               (info.dataset_revision or "")[:12])
        counts[key] = counts.get(key, 0) + 1
    lines = ["| dataset | config | split | revision | contexts |", "|---|---|---|---|---|"]
    for (dataset, config, split, revision), n in sorted(counts.items()):
        lines.append(f"| {_cell(dataset)} | {_cell(config)} | {_cell(split)} | {_cell(revision)} | {n} |")
    return lines


def _qualification_lines(facts: HiddenSuiteFacts) -> list[str]:
    doc = facts.qualification
    if doc is None:
        return [f"No replay check is stored ({QUALIFICATION} is absent): how close the replayed logits are "
                "to the model's live logits was not measured for this suite."]
    status = _cell(doc.get("status", "not recorded"))
    kl_mean = _num(doc, "kl_live_to_replay", "mean")
    out = [f"{QUALIFICATION} records status **{status}**."]
    if kl_mean is None:
        out.append("It records no figures (the published format's check keeps only its status).")
        return out
    contexts = _num(doc, "contexts")
    positions = _num(doc, "positions")
    top1 = _num(doc, "top1_agreement")
    out += [
        "",
        f"The hidden states of {int(contexts or 0)} contexts ({int(positions or 0):,} positions) were "
        "replayed with the LM head and compared with the live logits the server produced in the same "
        "forward pass, "
        f"{_cell(doc.get('direction', 'KL(live || replay)'))}:",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for name, key in (("mean KL", "mean"), ("median KL", "median"), ("p99 KL", "p99"), ("p99.9 KL", "p99_9"),
                      ("max KL", "max")):
        value = _num(doc, "kl_live_to_replay", key)
        if value is not None:
            out.append(f"| {name} | {value:.6g} |")
    if top1 is not None:
        out.append(f"| top-1 agreement | {precise_number(top1)} |")
    for name, key in (("mean absolute logit error", "logit_absolute_error_mean"),
                      ("largest absolute logit error", "logit_absolute_error_max")):
        value = _num(doc, key)
        if value is not None:
            out.append(f"| {name} | {value:.6g} |")
    limit_kl = _num(doc, "thresholds", "kl_mean_at_most")
    limit_top1 = _num(doc, "thresholds", "top1_at_least")
    if limit_kl is not None and limit_top1 is not None:
        out += ["", f"`qualified` means mean KL at most {limit_kl:g} and top-1 agreement at least "
                f"{limit_top1:g}."]
    reasons = [_cell(r) for r in doc.get("reasons", []) if isinstance(r, str)] if isinstance(
        doc.get("reasons"), list) else []
    if reasons:
        out.append(f"Not met: {'; '.join(reasons)}.")
    out += ["", "These figures are the replay's own error: differences between candidates smaller than "
            "them are not resolved by this reference."]
    return out


def _card_capture_runtime(doc: dict[str, Any]) -> dict[str, Any]:
    """capture-runtime.json as the card quotes it: its ``runtime`` without kldtui's own token of the
    server start (``card_runtime``), which says nothing of the model or the server."""
    return {**doc, "runtime": card_runtime(doc["runtime"])} if "runtime" in doc else doc


def render_card(root: Path, repo_id: str, facts: HiddenSuiteFacts) -> str:
    """The dataset card of a verified hidden-state suite (Markdown with a small YAML header);
    everything it quotes from the folder is redacted again."""
    suite, hidden, head = facts.suite, facts.hidden, facts.head
    n, length = facts.contexts, suite.context_length
    rows = length - 1
    model = _one_line(_model(facts))  # one line, whatever a manifest holds
    shown_model = markdown_literal(model)
    top_status = facts.top.raw.get("status", "not recorded")
    strata, cluster_count = _strata_rows(suite)
    infos = [fid.context_info(w) for w in suite.windows]
    partitions = {name: sum(1 for i in infos if i is not None and i.partition == name)
                  for name in fid.PARTITION_NAMES}
    sentinels = sum(1 for i in infos if i is not None and i.sentinel)
    per_context_hidden = hidden.total_size_bytes // max(len(hidden.entries), 1)
    per_context_f32 = rows * head.vocab * 4
    ratio = facts.full_f32_bytes / facts.reference_bytes
    live_bytes = sum(r.total_size_bytes for r in facts.runs if r.holds_logits)
    runtime = redact_json(_card_capture_runtime(facts.runtime)) if facts.runtime is not None else None
    first, last = suite.windows[0].index, suite.windows[-1].index
    out: list[str] = [
        "---",
        f"pretty_name: {json.dumps(f'{model} hidden-state reference')}",  # quoted: the name is the folder's
        "tags:",
        "- kld",
        "- hidden-states",
        "- quantization",
        "---",
        "",
        f"# {shown_model} hidden-state reference",
        "",
        f"`{repo_id}` holds the final normalized hidden states of {shown_model} (after the final norm, "
        "before the LM head) on fixed token contexts, and its LM head: the full-vocabulary reference "
        "logits are replayed from them (logits = h · Wᵀ) when a candidate is compared, "
        "KL(reference || candidate).",
        "",
        "## Contents",
        "",
        f"- {n:,} contexts of {length:,} tokens; {rows:,} scored positions each, {n * rows:,} in all "
        "(row r predicts token r + 1)",
        f"- hidden size {hidden.width:,}; vocabulary {head.vocab:,} (the LM head's rows, all of them in the "
        "softmax)",
        f"- hidden states: {human_bytes(hidden.total_size_bytes)} ({hidden.total_size_bytes:,} bytes, "
        f"{human_bytes(per_context_hidden)} a context, BF16 `{hidden.tensor_key}`)",
        f"- LM head: {human_bytes(head.size_bytes)} ({head.size_bytes:,} bytes, BF16 [{head.vocab}, "
        f"{head.hidden}], raw tensor SHA-256 {head.raw_tensor_sha256 or 'not recorded'})",
        f"- the same contexts as full F32 logits: {human_bytes(facts.full_f32_bytes)} "
        f"({facts.full_f32_bytes:,} bytes, {human_bytes(per_context_f32)} a context): hidden states and head "
        f"are {ratio:.1f}x smaller",
        f"- {partitions.get('analysis', 0):,} analysis and {partitions.get('qualification', 0):,} "
        f"qualification contexts; {sentinels:,} sentinel contexts; {cluster_count:,} source clusters",
        f"- suite token hash: {suite.suite_token_hash_sha256}",
    ]
    if facts.runs:
        names = ", ".join(r.root.relative_to(root).as_posix() for r in facts.runs)
        out.append(f"- sentinel repeat runs: {names}"
                   + (f" (live logits: {human_bytes(live_bytes)})" if live_bytes else ""))
    out += ["", "Allocation strata (contexts are resampled by source cluster within a stratum):", "", *strata,
            "", "Sources:", "", *_source_rows(suite), ""]
    out += [
        "Freeze every choice (candidates, settings, thresholds) on the analysis partition before reading "
        "the qualification partition; `--context-filter` selects either, and reports name the partition "
        "they used.",
        "",
        "## Replay qualification",
        "",
        *_qualification_lines(facts),
        "",
        "## Source model and runtime",
        "",
        f"Top-level manifest status: {markdown_code(_one_line(top_status))}; "
        f"checkpoint: {markdown_code(_one_line(json.dumps(redact_json(facts.top.raw.get('checkpoint')))))}.",
    ]
    if runtime is not None:
        out += ["", f"{fid.CAPTURE_RUNTIME}:", "", "```json",
                json.dumps(runtime, indent=2, sort_keys=True)[:4000], "```"]
    out += [
        "",
        "## Layout",
        "",
        "```",
        f"{fid.TOP_MANIFEST}  {SUITE_MANIFEST}  {fid.PARTITIONS}  {fid.CHECKSUMS}",
        f"tokens/context-{first:04d}.json ... tokens/context-{last:04d}.json",
        f"{fid.HIDDEN_DIR}/{fid.TENSOR_MANIFEST}",
        f"{fid.HIDDEN_DIR}/{fid.hidden_file_name(first)} ... {fid.HIDDEN_DIR}/{fid.hidden_file_name(last)}",
        f"{fid.LM_HEAD_DIR}/{fid.TENSOR_MANIFEST}  {fid.LM_HEAD_DIR}/{head.path.name}",
        *sorted({r.root.relative_to(root).as_posix() + "/" for r in facts.runs}),
        *sorted({rel for rel in facts.files if rel.count("/") == 0 and rel not in (
            fid.TOP_MANIFEST, SUITE_MANIFEST, fid.PARTITIONS, fid.CHECKSUMS)}),
        *sorted({rel for rel in facts.files if rel.startswith(f"{fid.VALIDATION_DIR}/")}),
        "```",
        "",
        f"{fid.CHECKSUMS} lists every file's SHA-256 (`<sha256>  <path>`); {fid.TOP_MANIFEST} names the "
        "suite manifest, the hidden-state manifest, the LM head and the capture runtime with their hashes.",
        "",
        "## Compare a candidate against it",
        "",
        "With kldtui (installed from its repository: `pip install -e .` in a checkout):",
        "",
        "```bash",  # a card read on other machines: the documented name, not kldtui_command()'s
        f"kldtui download {shell_arg(repo_id, path=False)} --local-dir reference   "
        f"# {human_bytes(facts.reference_bytes)} of hidden "
        "states and head; every hash verified",
        "kldtui run --batch --profile candidate.toml   # its [reference]: local_dir = \"reference\", "
        "logits_dir = \"reference-hidden\"",
        "kldtui compare --suite-manifest reference/suite-manifest.json "
        "--reference-dir reference/reference-hidden --candidate-dir WORKDIR/candidate "
        "--context-filter analysis --output kld.json",
        "```",
        "",
        "`kldtui run` captures the candidate's logits of the contexts in its `[run]` range (`start_window`, "
        "`stop_window`; default all) into `WORKDIR/candidate/` and compares them, so the download must hold "
        "those contexts (`--start-context`/`--stop-context`). `kldtui compare` then reads that capture for "
        "one partition (`--context-filter analysis` or `qualification`, `--stratum`). A download by "
        "partition or stratum (`kldtui download ... --context-filter qualification --stratum NAME`) fetches "
        "only those contexts' files and the head, for comparing candidates captured elsewhere. "
        "The reference is replayed with `reference/lm-head/` (`--lm-head` names another), in vocabulary "
        "chunks with a two-pass log-sum-exp, on the GPU (torch) or the CPU (BLAS). A candidate may be "
        "finalized logits, score-mode scores, live logits in this layout, or its own hidden states with its "
        "own head (`--candidate-lm-head`): a quantized head is part of what is measured, so the reference's "
        "head never stands in for it.",
        "",
        "The plain steps: send each context's stored token ids (tokens/context-NNNN.json) to the "
        "candidate as they are (never re-tokenized, no chat template), keep its logits of rows 0.."
        f"{rows - 1}; replay the reference's rows as BF16 h · Wᵀ (FP32 accumulation, BF16 output, widened to "
        "FP32); compute log-softmax over the whole vocabulary for both and KL per row; resample whole source "
        "clusters within each allocation stratum for the interval.",
        "",
        f"`kldtui verify reference` re-checks {fid.CHECKSUMS}, the suite and token hashes, the top-level "
        "manifest, every tensor file's identity and the LM head's hashes.",
        "",
    ]
    return redact_text("\n".join(out))


def notices(facts: HiddenSuiteFacts, emit: EventSink) -> None:
    """What the person publishing should hear before it goes up."""
    doc = facts.qualification
    if doc is None:
        emit(Notice(STAGE, f"{facts.suite.root / QUALIFICATION}: no replay check is stored; the card "
                           "says the replay was not measured", level="warning"))
    elif doc.get("status") != "qualified":
        emit(Notice(STAGE, f"{facts.suite.root / QUALIFICATION}: status {_one_line(doc.get('status'))!r}; "
                           "the card says so with the figures as recorded", level="warning"))


__all__ = ["CARD", "QUALIFICATION", "HiddenSuiteFacts", "check_qualification", "gather", "notices",
           "refuse_secrets", "render_card", "upload_list"]
