"""Check a profile's inputs before anything is launched: a missing suite must not cost a server start.

:func:`preflight` looks at the suite, the reference logits, the candidate server's inputs (its
kind's checks, kldtui.servers: the model path, the port; the reference server's too while
``[reference] capture`` has windows to capture) and the disk space the run needs, and
returns one line per problem, each saying how to get what is missing.
:meth:`kldtui.workflow.pipeline.Pipeline.run_all` calls it first and stops with
:class:`~kldtui.errors.BadInput` when anything is wrong.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kldtui.errors import BadInput, KldError
from kldtui.events import EventSink, Notice, StageName
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.servers.registry import kind_of
from kldtui.text import human_bytes, plural
from kldtui.workflow.diskplan import DiskNeed
from kldtui.workflow.profile import Profile
from kldtui.workspace import Workspace

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
                        + HOW_TO_GET_A_SUITE.format(dir=workspace.suite_dir))
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
    if not problems and not fetched and (missing := _missing_tokens_problem(profile, workspace)):
        problems.append(missing)
    if not problems and (vocab := _vocab_problem(profile, workspace)):
        problems.append(vocab)
    if not problems and (context := _context_problem(profile, workspace)):
        problems.append(context)
    if not problems and (changed := _changed_server_problem(profile, workspace)):
        problems.append(changed)
    if not problems and disk and (short := _disk_problem(profile, workspace)):
        problems.append(short)
    return problems


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
    """Windows of this run captured or finalized from a server with other settings (said before a
    server is launched: the capture would refuse them after it loaded)."""
    from kldtui.servers.base import server_identity
    from kldtui.stages.capture import changed_server

    if workspace.capture_root is None:
        return None
    changed = changed_server(workspace, server_identity(profile.candidate), profile.capture.mode)
    ref = profile.reference.server
    if changed is None and ref is not None and workspace.workdir is not None:
        # the reference's own capture ([reference] capture) resumes only while the reference is not
        # complete: a finished reference stays as it is whatever the settings say now
        from kldtui.formats.suite import load_suite
        from kldtui.stages.reference_capture import REFERENCE_MODE, reference_complete

        try:
            windows = profile.windows(load_suite(workspace.suite_dir))
        except (KldError, OSError, ValueError):
            return None
        if not reference_complete(workspace, windows):
            changed = changed_server(workspace.reference_capture(), server_identity(ref), REFERENCE_MODE)
    return changed


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
            f"(kldtui download REPO --local-dir {suite.root} --start-{unit} A --stop-{unit} B), or set "
            "[run] start_window/stop_window (or context_filter/strata) to the ones here")


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
    from kldtui.formats.suite import load_suite

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
    return (f"{label} {kind.describe(profile.candidate)}: the suite's windows have up "
            f"to {longest:,} tokens, its context takes {limit:,}; set n_ctx = {longest + 1} (or more) in "
            f"{table}")


def _disk_problem(profile: Profile, workspace: Workspace) -> str | None:
    """The disk the run's windows need at peak, when the free space is short of it."""
    from kldtui.formats.suite import load_logits_manifest, load_suite
    from kldtui.workflow.diskplan import GIB, disk_need

    mode = profile.capture.mode
    try:
        vocab = load_logits_manifest(workspace.reference).vocab_size
        suite = load_suite(workspace.suite_dir)
        windows = profile.windows(suite)
    except (KldError, OSError, ValueError):
        return None  # not there yet (downloaded or captured by the run): said when the run gets there
    row_bytes = mode.disk_bytes_per_row(vocab)
    if row_bytes is None:
        return None  # a few dozen bytes per position (score mode: docs/SCORE_MODE.md)
    done: set[int] = set()
    manifest = mode.manifest_path(workspace.candidate) if workspace.candidate_dir is not None else None
    if manifest is not None and manifest.is_file():
        try:
            done = set(mode.read_manifest(manifest).entries)
        except (KldError, OSError, ValueError):
            done = set()
    need = disk_need([w.num_tokens for w in windows if w.index not in done],
                     keep_chunks=profile.run.keep_chunks, row_bytes=row_bytes)
    probe = workspace.workdir or workspace.candidate
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free >= need.total:
        return None
    return (f"{profile.where}: disk: the run needs {need.describe()} in {workspace.workdir}, "
            f"{free / GIB:.1f} GiB are free; free space, or set [run] workdir on a larger disk "
            "(or [run] stop_window for fewer windows)")


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
        total = sum(n.finalized for _, n in self.parts) + self.chunks
        parts = ", ".join(f"{what} {plural(n.windows, self.unit)} {human_bytes(n.finalized)}"
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
    from kldtui.formats.suite import load_suite, unit_of
    from kldtui.stages.reference_capture import reference_complete
    from kldtui.workflow.diskplan import disk_need

    first = members[0][2] if members else None
    if first is None or first.workdir is None:
        return None
    vocab = _known_vocab(profile, first, [m for _, m, _ in members])
    try:
        windows = profile.windows(load_suite(first.suite_dir))
    except (KldError, OSError, ValueError):
        return None
    if not windows:
        return None
    if vocab is None:
        return ("disk: not reckoned before the reference's logits are there (their vocabulary sets the size "
                "of a row); each candidate's need is said before its capture")
    keep = profile.run.keep_chunks
    parts: list[tuple[str, DiskNeed]] = []
    workdir = first.workdir
    folders = {os.stat(_existing(workdir)).st_dev: workdir}  # one folder named per file system
    need: dict[int, int] = {}

    def add(what: str, part: DiskNeed, where: Path) -> None:
        parts.append((what, part))
        device = os.stat(_existing(where)).st_dev
        folders.setdefault(device, where)
        need[device] = need.get(device, 0) + part.finalized

    if profile.reference.server is not None and not reference_complete(first, windows):
        done = _finalized(first.reference_manifest, None)
        todo = [w.num_tokens for w in windows if w.index not in done]
        todo.append(windows[0].num_tokens)  # the repeat of its first window
        add("the reference", disk_need(todo, vocab, keep_chunks=keep), first.reference_dir or first.suite_dir)
    row_bytes = profile.capture.mode.disk_bytes_per_row(vocab)
    if row_bytes is not None:  # score mode writes a few dozen bytes a row
        for name, member, ws in members:
            mode = member.capture.mode
            manifest = mode.manifest_path(ws.candidate) if ws.candidate_dir is not None else None
            done = _finalized(manifest, mode)
            todo = [w.num_tokens for w in windows if w.index not in done]
            if todo:
                add(name, disk_need(todo, keep_chunks=keep, row_bytes=row_bytes), workdir)
        if repeat:
            add("the leader's repeat",
                disk_need([w.num_tokens for w in windows], keep_chunks=keep, row_bytes=row_bytes), workdir)
    if not parts:
        scores = row_bytes is None and bool(members)
        return "disk: score mode writes no candidate logits, a few dozen bytes a position" if scores else None
    chunks = max(n.chunks for _, n in parts)  # in the work folder's capture folders
    device = os.stat(_existing(workdir)).st_dev
    need[device] = need.get(device, 0) + chunks
    return CampaignDisk(parts, chunks, {folders[d]: n for d, n in need.items()},
                        {folders[d]: shutil.disk_usage(_existing(folders[d])).free for d in need},
                        unit_of(windows))


def _known_vocab(profile: Profile, workspace: Workspace, members: list[Profile]) -> int | None:
    """The reference's vocabulary: its logits' when they are there, else what a server's model
    says before launching (a GGUF's token list; the candidates' must equal it)."""
    from kldtui.formats.suite import load_logits_manifest

    try:
        return load_logits_manifest(workspace.reference).vocab_size
    except (KldError, OSError, ValueError):
        pass
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


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (whose file system it will be written on)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
