"""Check a profile's inputs before anything is launched: a missing suite must not cost a server start.

:func:`preflight` looks at the suite, the reference logits, the candidate server's inputs (its
kind's checks, kldtui.servers: the model path, the port; the reference server's too while
``[reference] capture`` has windows to capture) and the disk space the run needs, and
returns one line per problem, each saying how to get what is missing. In hidden mode it also
refuses a candidate whose own LM head is neither in its folder nor exportable from its checkpoint
(:mod:`kldtui.stages.candidate_head`).
:meth:`kldtui.workflow.pipeline.Pipeline.run_all` calls it first and stops with
:class:`~kldtui.errors.BadInput` when anything is wrong.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kldtui.errors import BadInput, KldError
from kldtui.events import EventSink, Notice, StageName
from kldtui.formats.safe_io import nearest_existing
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.servers.registry import kind_of
from kldtui.text import human_bytes, kldtui_command, plural, shell_arg
from kldtui.workflow.diskplan import DiskNeed
from kldtui.workflow.profile import Profile
from kldtui.workspace import Workspace

if TYPE_CHECKING:
    from kldtui.capture_modes.base import CaptureMode
    from kldtui.formats.suite import Suite, WindowSpec

HOW_TO_GET_A_SUITE = ("download a published suite with `kldtui download REPO --local-dir {dir}`, or build "
                      "one from your own text with `kldtui prepare` (see `kldtui prepare --help`)")


def refuse(problems: list[str], emit: EventSink, stage: StageName) -> None:
    """Nothing when ``problems`` is empty; else the run stops before anything is launched: the first
    problem is the error (one line, exit 2), the others are said just before it as error notices,
    so that each is said once (the error names how many more there are)."""
    if not problems:
        return
    for problem in problems[1:]:
        emit(Notice(stage, problem, level="error"))
    more = f" (and {len(problems) - 1} more problem(s), listed above)" if len(problems) > 1 else ""
    raise BadInput(problems[0] + more)


def preflight(profile: Profile, workspace: Workspace, *, disk: bool = True) -> list[str]:
    """One line per problem with the profile's inputs (empty: everything is there). ``disk``
    False: the disk is reckoned by the caller (a campaign: all its candidates together)."""
    problems: list[str] = []
    ref = profile.reference
    fetched = ref.repo_id is not None  # the reference stage downloads what is missing
    # (with [reference] capture set, the reference stage captures the logits itself)
    where = profile.where
    if not fetched and not workspace.suite_manifest.is_file():
        problems.append(f"{where}: [reference] suite manifest not found at {workspace.suite_manifest}; "
                        + HOW_TO_GET_A_SUITE.format(dir=shell_arg(workspace.suite_dir)))
    elif workspace.suite_manifest.is_file() and (problem := _range_problem(profile, workspace)):
        problems.append(problem)
    elif not fetched and not ref.capture and not workspace.reference_manifest.is_file():
        problems.append(f"{where}: [reference] reference logits not found ({workspace.reference_manifest} "
                        f"is missing); fetch them with `kldtui download REPO --local-dir "
                        f"{workspace.suite_dir}`, or set [reference] logits_dir to the folder holding them")
    elif workspace.reference_dir is not None:  # what the capture mode's server needs of the reference
        problems += profile.capture.mode.reference_problems(workspace.suite_dir, workspace.reference_dir,
                                                            getattr(profile.candidate, "env", {}))
    problems += _reference_server_problems(profile, workspace)
    server = kind_of(profile.candidate).problems(profile.candidate)
    problems += server
    try:  # the size is measured again at compare; a file that cannot say is said now, not then
        if not server:  # a model the kind refused (missing, a folder) is said once, by the kind
            profile.candidate.model_size()
    except KldError as exc:
        problems.append(str(exc))
    if not server and (head := _head_problem(profile, workspace)):
        problems.append(head)
    if not problems and not fetched and (missing := _missing_tokens_problem(profile, workspace)):
        problems.append(missing)
    if not problems and (vocab := _vocab_problem(profile, workspace)):
        problems.append(vocab)
    if not problems and (context := _context_problem(profile, workspace)):
        problems.append(context)
    if not problems and (other := _other_suite_problem(profile, workspace)):
        problems.append(other)
    if not problems and (changed := _changed_server_problem(profile, workspace)):
        problems.append(changed)
    if not problems and disk and (short := _disk_problem(profile, workspace)):
        problems.append(short)
    return problems


def _head_problem(profile: Profile, workspace: Workspace) -> str | None:
    """A hidden-state candidate without its own LM head, and no checkpoint here to export it from
    (kldtui.stages.candidate_head): said now, not by compare after the capture."""
    from kldtui.stages.candidate_head import candidate_head_problem

    return candidate_head_problem(profile.capture.mode, profile.candidate, workspace)


def _reference_server_problems(profile: Profile, workspace: Workspace) -> list[str]:
    """The reference server's inputs ([reference] capture: its model file, its interpreter, its
    port) while the reference still has windows to capture: a missing reference GGUF is said before
    anything is launched, as a candidate's is (it started the server, which exited with exit 1)."""
    ref = profile.reference.server
    if ref is None or workspace.workdir is None:
        return []
    from kldtui.formats.suite import load_suite
    from kldtui.stages.reference_capture import reference_complete

    try:
        windows = profile.windows(load_suite(workspace.suite_dir))
    except (KldError, OSError, ValueError):
        windows = None  # no suite yet: the reference is captured whole
    if windows is not None and reference_complete(workspace, windows):
        return []  # a finished reference stays as it is: its server is not started again
    return kind_of(ref).problems(ref)


def _changed_server_problem(profile: Profile, workspace: Workspace) -> str | None:
    """Windows of this run captured in another capture mode, or captured or finalized from a server
    with other settings (said before a server is launched or reached: the capture would refuse them
    after it loaded)."""
    from kldtui.formats.suite import load_suite
    from kldtui.servers.base import server_identity
    from kldtui.stages.capture import changed_server

    if workspace.capture_root is None:
        return None
    suite: Suite | None
    try:
        suite = load_suite(workspace.suite_dir)
    except (KldError, OSError, ValueError):
        suite = None  # no suite to read yet: a record is named in window words
    # a record is named in the suite's words (a hidden-state suite's: context 0003 (chinese))
    units = suite.windows if suite is not None else []
    changed = changed_server(workspace, server_identity(profile.candidate), profile.capture.mode,
                             windows=units)
    ref = profile.reference.server
    if changed is None and ref is not None and workspace.workdir is not None and suite is not None:
        # the reference's own capture ([reference] capture) resumes only while the reference is not
        # complete: a finished reference stays as it is whatever the settings say now
        from kldtui.stages.reference_capture import REFERENCE_MODE, reference_complete

        try:
            windows = profile.windows(suite)
        except (KldError, OSError, ValueError):
            return None
        if not reference_complete(workspace, windows):
            changed = changed_server(workspace.reference_capture(), server_identity(ref), REFERENCE_MODE,
                                     windows=units)
    return changed


def _other_suite_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The run's finalized folder made from another suite than the profile's (its [reference]
    local_dir changed): said before a server is launched, as finalize would after the capture."""
    from kldtui.formats.suite import load_suite, manifest_object
    from kldtui.stages.finalize import other_suite

    if workspace.candidate_dir is None:
        return None
    manifest = profile.capture.mode.manifest_path(workspace.candidate)
    recorded = (manifest_object(manifest) or {}).get("suite_token_hash_sha256")
    if not isinstance(recorded, str):
        return None  # none yet, or unreadable: finalize says so
    try:
        suite = load_suite(workspace.suite_dir)
    except (KldError, OSError, ValueError):
        return None  # said by the other checks
    return other_suite(manifest) if recorded != suite.suite_token_hash_sha256 else None


def _range_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The profile's window range against the suite (a range outside it is said first)."""
    from kldtui.formats.suite import load_suite

    try:
        profile.windows(load_suite(workspace.suite_dir))
    except KldError as exc:
        return str(exc)
    except (OSError, ValueError):
        return None
    return None


def _missing_tokens_problem(profile: Profile, workspace: Workspace) -> str | None:
    """Token files of the run's range that the suite folder lacks: a download of part of a suite
    (a partition, a stratum) holds only those contexts, and capture would stop at the first
    missing one after the server was launched."""
    from kldtui.formats.suite import load_suite

    try:
        suite = load_suite(workspace.suite_dir)
        windows = profile.windows(suite)
    except (KldError, OSError, ValueError):
        return None  # said by the range check or the reference stage
    missing = [w for w in windows if not (suite.root / w.token_file).is_file()]
    if not missing:
        return None
    unit = windows[0].unit
    here = len(windows) - len(missing)
    return (f"{suite.root / missing[0].token_file}: missing, with {len(missing) - 1} more of the run's "
            f"{len(windows)} {unit}s ({here} here: a download of part of the suite); fetch the run's range "
            f"({kldtui_command()} download REPO --local-dir {shell_arg(suite.root)} --start-{unit} A "
            f"--stop-{unit} B), "
            "or set [run] start_window/stop_window (or context_filter/strata) to the ones here")


def _vocab_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The candidate's vocabulary, when its kind can tell before launching (a GGUF file), against
    the reference logits': a padded or trimmed vocabulary cannot be compared."""
    from kldtui.formats.suite import load_logits_manifest

    kind = kind_of(profile.candidate)
    ref = profile.reference.server
    try:
        theirs = kind.model_vocab(profile.candidate)
        if theirs is None:
            return None
        try:
            ours = load_logits_manifest(workspace.reference).vocab_size
            source = str(workspace.reference_manifest)
        except (KldError, OSError, ValueError):
            # no reference yet: the run captures it ([reference] capture), from a model that may say
            if ref is None or (known := kind_of(ref).model_vocab(ref)) is None:
                return None  # downloaded, or served by a kind that cannot say: the chunks are checked then
            ours, source = known, f"[reference] {kind_of(ref).describe(ref)}"
    except (KldError, OSError, ValueError):
        return None
    if theirs == ours:
        return None
    fix = kind.vocabulary_fix(profile.candidate, ours)
    return (f"{profile.candidate.label} {kind.describe(profile.candidate)}: its vocabulary has {theirs:,} "
            f"tokens, the reference's {ours:,} ({source}); the logits cannot be "
            f"compared; {fix}")


def _context_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The suite's longest window in the run's range against the longest prompt the candidate's
    server takes, when its kind can tell before launching (llama.cpp's n_ctx)."""
    from kldtui.formats.suite import load_suite, units_of

    kind = kind_of(profile.candidate)
    limit = kind.max_prompt_tokens(profile.candidate)
    if limit is None:
        return None
    try:
        windows = profile.windows(load_suite(workspace.suite_dir))
    except (KldError, OSError, ValueError):
        return None  # no suite yet (downloaded by the run): the server refuses a window it cannot take
    longest = max((w.num_tokens for w in windows), default=0)
    if longest <= limit:
        return None
    label = profile.candidate.label
    table = label.rsplit(": ", 1)[-1]  # "[candidate]", or a campaign's "[[candidates]] 'q4'"
    return (f"{label} {kind.describe(profile.candidate)}: the suite's {units_of(windows)} have up "
            f"to {longest:,} tokens, its context takes {limit:,}; set n_ctx = {longest + 1} (or more) in "
            f"{table}")


def _disk_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The disk the run's windows need at peak, when the free space is short of it."""
    from kldtui.formats.suite import load_suite, units_of

    mode = profile.capture.mode
    vocab, hidden = reference_widths(workspace)
    try:
        suite = load_suite(workspace.suite_dir)
        windows = profile.windows(suite)
    except (KldError, OSError, ValueError):
        return None  # not there yet (downloaded or captured by the run): said when the run gets there
    if vocab is None:
        return None  # the reference is not there yet (downloaded or captured by the run)
    manifest = mode.manifest_path(workspace.candidate) if workspace.candidate_dir is not None else None
    done = _finalized(manifest, mode)
    need = capture_need(profile, suite, windows, [w for w in windows if w.index not in done], vocab, hidden,
                        workspace=workspace)
    if need is None:
        return None  # a few dozen bytes per position (score mode: docs/SCORE_MODE.md)
    probe = workspace.workdir or workspace.candidate
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free >= need.total:
        return None
    return (f"{profile.where}: disk: the run needs {need.describe()} in {workspace.workdir}, "
            f"{human_bytes(free)} are free; free space, or set [run] workdir on a larger disk "
            f"(or [run] stop_window for fewer {units_of(windows)})")


def capture_need(profile: Profile, suite: Suite, windows: Sequence[WindowSpec], todo: Sequence[WindowSpec],
                 vocab: int, hidden: int | None, *, workspace: Workspace | None = None) -> DiskNeed | None:
    """What capturing and finalizing ``todo`` (of the run's ``windows``) in the profile's capture
    mode writes at peak: logits mode F32 logits; hidden mode each context's BF16 hidden states
    (``hidden`` wide), the replay check's live logits (F32) of its sample, and the candidate's own
    LM head when the run exports it into ``workspace``'s candidate folder (None: no head counted);
    None when it is a few dozen bytes a position (score mode) or hidden mode's width is not known yet."""
    from kldtui.formats.suite import unit_of
    from kldtui.stages.candidate_head import candidate_head
    from kldtui.workflow.diskplan import disk_need, with_live_logits

    mode = profile.capture.mode
    keep = profile.run.keep_chunks
    row_bytes = mode.disk_bytes_per_row(vocab, hidden)
    if row_bytes is None:
        return None
    need = disk_need([w.num_tokens for w in todo], keep_chunks=keep, row_bytes=row_bytes,
                     unit=unit_of(windows))
    if mode.saves_live_sample:
        live = mode.live_sample(suite, windows, profile.capture.replay_check)
        sample = [w.num_tokens for w in todo if w.index in live]
        if sample:
            need = with_live_logits(need, disk_need(sample, vocab, keep_chunks=keep))
    if workspace is not None and (head := candidate_head(mode, profile.candidate, workspace)) is not None:
        need = dataclasses.replace(need, head=head.size_bytes, head_reused=head.reused)
    return need


def reference_widths(workspace: Workspace) -> tuple[int | None, int | None]:
    """The reference's vocabulary and, where it says it, the model's hidden width: a logits
    reference's vocabulary; a hidden-state reference's width (its ``manifest.json``) and its LM
    head's vocabulary and width (``lm-head/``, in it, beside it or in the suite). None for what is not
    there yet."""
    from kldtui.formats.fidelity import load_lm_head, load_tensor_manifest, reference_head_dir
    from kldtui.formats.suite import load_logits_manifest

    vocab: int | None = None
    hidden: int | None = None
    try:
        vocab = load_logits_manifest(workspace.reference).vocab_size
    except (KldError, OSError, ValueError):
        try:
            manifest = load_tensor_manifest(workspace.reference)
            hidden = manifest.width if manifest.holds_hidden else None
        except (KldError, OSError, ValueError):
            pass
    head_dir = reference_head_dir(workspace.reference, workspace.suite_dir)
    if head_dir is not None:
        try:
            head = load_lm_head(head_dir)
            vocab, hidden = vocab or head.vocab, hidden or head.hidden
        except (KldError, OSError, ValueError):
            pass
    return vocab, hidden


@dataclass(frozen=True)
class CampaignDisk:
    """What a campaign still writes at peak, part by part (the reference it captures, each
    candidate still to capture, the leader's repeat), against the free space where it goes."""

    parts: list[tuple[str, DiskNeed]]
    chunks: int  # one capture runs at a time: the largest part's chunks
    need: dict[Path, int]  # a folder on each file system written to -> the bytes written there at peak
    free: dict[Path, int]  # the same folder -> its free bytes
    unit: str = WINDOW_UNIT  # what the suite's windows are called (a hidden-state suite's: context)

    def describe(self) -> str:
        from kldtui.workflow.diskplan import head_words

        total = sum(n.kept for _, n in self.parts) + self.chunks
        parts = ", ".join(f"{what} {plural(n.windows, self.unit)} {human_bytes(n.finalized)}"
                          + (f" + {head_words(n.head, n.head_reused)}" if n.head else "")
                          for what, n in self.parts)
        free = "; ".join(f"{human_bytes(self.free[at])} free in {at}" for at in self.need)
        return f"{human_bytes(total)} at peak ({parts}, capture chunks {human_bytes(self.chunks)}); {free}"

    @property
    def short(self) -> bool:
        return any(self.need[at] > self.free[at] for at in self.need)


def campaign_disk(profile: Profile, members: list[tuple[str, Profile, Workspace]], *,
                  repeat: bool) -> CampaignDisk | str | None:
    """The disk a campaign needs at peak; a line saying why it cannot be reckoned yet (the
    vocabulary, hence the size of a row of logits, is not known before the reference is captured);
    None when nothing is left to write or no suite is there yet. Every candidate keeps its finalized logits in
    the work folder, so the candidates still to capture add up (each one's check alone passed a
    campaign that filled the disk at its third candidate); ``repeat``: the leader's repeat capture
    is still to come (its windows, as many as a candidate's)."""
    from kldtui.formats.fidelity import head_bytes
    from kldtui.formats.suite import load_suite, unit_of
    from kldtui.stages.reference_capture import reference_complete
    from kldtui.workflow.diskplan import disk_need

    first = members[0][2] if members else None
    if first is None or first.workdir is None:
        return None
    vocab = _known_vocab(profile, first, [m for _, m, _ in members])
    try:
        suite = load_suite(first.suite_dir)
        windows = profile.windows(suite)
    except (KldError, OSError, ValueError):
        return None
    if not windows:
        return None
    if vocab is None:
        return ("disk: not reckoned before the reference's logits are there (their vocabulary sets the size "
                "of a row); each candidate's need is said before its capture")
    hidden = reference_widths(first)[1]
    mode = profile.capture.mode
    keep = profile.run.keep_chunks
    parts: list[tuple[str, DiskNeed]] = []
    workdir = first.workdir
    folders = {os.stat(nearest_existing(workdir)).st_dev: workdir}  # one folder named per file system
    need: dict[int, int] = {}

    def add(what: str, part: DiskNeed, where: Path) -> None:
        parts.append((what, part))
        device = os.stat(nearest_existing(where)).st_dev
        folders.setdefault(device, where)
        need[device] = need.get(device, 0) + part.kept

    if profile.reference.server is not None and not reference_complete(first, windows):
        done = _finalized(first.reference_manifest, None)
        todo = [w.num_tokens for w in windows if w.index not in done]
        todo.append(windows[0].num_tokens)  # the repeat of its first window
        add("the reference", disk_need(todo, vocab, keep_chunks=keep), first.reference_dir or first.suite_dir)
    planned = mode.disk_bytes_per_row(vocab, hidden) is not None  # score mode: a few dozen bytes a row
    if planned:
        for name, member, ws in members:
            own = member.capture.mode
            manifest = own.manifest_path(ws.candidate) if ws.candidate_dir is not None else None
            done = _finalized(manifest, own)
            left = [w for w in windows if w.index not in done]
            if left and (part := capture_need(member, suite, windows, left, vocab, hidden,
                                              workspace=ws)) is not None:
                add(name, part, workdir)
        if repeat and (part := capture_need(profile, suite, windows, windows, vocab, hidden)) is not None:
            if mode.replays_own_head and hidden is not None:
                # the leader's head, reused (kldtui.stages.candidate_head): counted as a copy, as the
                # file system may refuse the link; the leader is not known yet: the largest head
                # planned, or one of the reference's shape
                head = max([head_bytes(vocab, hidden), *(n.head for _, n in parts)])
                part = dataclasses.replace(part, head=head, head_reused=True)
            add("the leader's repeat", part, workdir)
    if not parts:
        return _unplanned(mode, windows) if not planned and members else None
    chunks = max(n.chunks for _, n in parts)  # in the work folder's capture folders
    device = os.stat(nearest_existing(workdir)).st_dev
    need[device] = need.get(device, 0) + chunks
    return CampaignDisk(parts, chunks, {folders[d]: n for d, n in need.items()},
                        {folders[d]: shutil.disk_usage(nearest_existing(folders[d])).free for d in need},
                        unit_of(windows))


def _unplanned(mode: CaptureMode, windows: Sequence[WindowSpec]) -> str:
    """Why a campaign's candidates' disk is not planned, in the words true of its capture mode."""
    from kldtui.formats.suite import unit_of

    if mode.saves_live_sample:  # hidden mode, with no hidden width known before its server serves
        unit = unit_of(windows)
        return (f"disk: hidden mode writes each {unit}'s hidden states (BF16, 2 bytes x the model's hidden "
                "width a position) and the replay check's live logits; not reckoned before the width is "
                "known (a hidden-state reference or its LM head says it)")
    return "disk: score mode writes no candidate logits, a few dozen bytes a position"


def _known_vocab(profile: Profile, workspace: Workspace, members: list[Profile]) -> int | None:
    """The reference's vocabulary: its logits' (or a hidden-state reference's LM head's) when they
    are there, else what a server's model says before launching (a GGUF's token list; the
    candidates' must equal it)."""
    vocab = reference_widths(workspace)[0]
    if vocab is not None:
        return vocab
    for config in [profile.reference.server, *(m.candidate for m in members)]:
        if config is None:
            continue
        try:
            vocab = kind_of(config).model_vocab(config)
        except (KldError, OSError, ValueError):
            vocab = None
        if vocab:
            return vocab
    return None


def _finalized(manifest: Path | None, mode: object | None) -> set[int]:
    """The windows a finalized manifest lists (``mode``: the capture mode that reads it; None: a
    logits manifest)."""
    from kldtui.formats.suite import load_logits_manifest

    if manifest is None or not manifest.is_file():
        return set()
    try:
        read = getattr(mode, "read_manifest", None) or load_logits_manifest
        return set(read(manifest).entries)
    except (KldError, OSError, ValueError):
        return set()
