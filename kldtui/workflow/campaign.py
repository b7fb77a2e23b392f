"""Campaigns: the candidates of a ``[[candidates]]`` profile, one after another, in one work folder.

API (``kldtui run``, ``kldtui demo`` and the dashboard use it as they use a
:class:`~kldtui.workflow.pipeline.Pipeline`: it is a :class:`~kldtui.workflow.control.PipelineControl`)::

    campaign = Campaign(profile, emit, cancel)
    state = campaign.run_all()      # every candidate not yet compared, then the leader's repeat;
                                    # the RunState of the leader's report
    campaign.leaderboard            # the last ranking (kldtui.decide.leaderboard.Leaderboard)

Each candidate runs as its own pipeline (serve, capture, finalize, compare: its server kind's
capture mode, resumable) with the folders :meth:`kldtui.workspace.Workspace.for_candidate` gives
(``candidates/NAME``, ``capture/NAME``, ``compare/NAME``, ``comparison-NAME.json``); the reference
is shared. A candidate whose report already covers the run's windows is not served again, so a
candidate added to a finished campaign runs alone, and a campaign killed in the middle of a
candidate resumes with that candidate's finished windows. After each candidate the ranking is
made again by the decision rules (:func:`kldtui.decide.leaderboard.build_leaderboard`) and sent as
a :class:`~kldtui.events.LeaderboardUpdated` event; the dashboard's campaign board and the batch
reporter show it. With ``[campaign] repeat_leader`` the leader is captured a second time
(``repeat/NAME``, its server kind's :meth:`~kldtui.servers.base.ServerKind.repeat_config`), and the
two captures give the measured noise model (:func:`kldtui.decide.noise.noise_from_capture_reports`,
``noise-model-HASH.json``, one per reference suite: kldtui.workspace) that the final ranking's
verdicts use; the repeat is ranked beside the candidates as ``NAME.repeat`` (a second capture of one
model, which the verdicts should call tied).
The final ranking is written to ``leaderboard.json``. Both are the profile's own where profiles share
the work folder (another profile's are ``leaderboard-PROFILE.json``, ``noise-model-PROFILE-HASH.json``:
kldtui.workspace); the files earlier versions wrote for every profile are read where they are this
one's (:func:`leaderboard_on_disk`, :meth:`Campaign._earlier_noise`).

A candidate that fails (its server dies, a check refuses its files) is marked failed and the
campaign goes on with the next one; the run then ends failed (exit 1) naming it, with the others
ranked, and the next run retries it alone. A leader's repeat capture that fails (or stops early) leaves
the final ranking written without a measured noise model and ends the run failed (exit 1) saying so.
A candidate stopped by ``[compare] abort_kl_above`` is
shown as stopped early and not ranked. A user's stop (Ctrl-C) stops the campaign; it resumes with
the candidate it was in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.errors import BadInput, Interrupted, KldError, StageFailed
from kldtui.events import (
    Cancel,
    CandidateStarted,
    CandidateStateName,
    EventSink,
    LeaderboardUpdated,
    Notice,
    StageFinished,
    StageStarted,
    Standing,
    null_sink,
)
from kldtui.formats.suite import WINDOW_UNIT
from kldtui.servers.base import server_identity
from kldtui.servers.registry import kind_of
from kldtui.text import TIED_OUTCOMES, plain_number
from kldtui.workflow.control import StageRequest
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import Candidate, Profile
from kldtui.workflow.state import RunState, load_state
from kldtui.workspace import REPEAT_SUFFIX, Workspace

if TYPE_CHECKING:
    from kldtui.formats.suite import WindowSpec


@dataclass
class _Entry:
    """What the campaign knows of one candidate."""

    name: str
    workspace: Workspace
    # the server settings its captures must have been made with (kldtui.servers.base.server_identity)
    identity: dict[str, Any] | None = None
    state: CandidateStateName = "waiting"
    note: str = ""

    @property
    def report(self) -> Path:
        return self.workspace.report


def shown_candidate(profile: Profile) -> tuple[str, bool] | None:
    """The campaign candidate a reopened dashboard shows, and whether it leads the campaign's
    leaderboard.json (its first row, when that names one of the profile's candidates; else the
    first candidate, not ranked yet); None for a single candidate's profile."""
    if not profile.is_campaign:
        return None
    names = [c.name for c in profile.candidates]
    board = leaderboard_on_disk(profile)
    if board is not None and board[1][0] in names:
        return board[1][0], True
    return names[0], False  # no leaderboard yet (or not ours): the first candidate


def leaderboard_on_disk(profile: Profile) -> tuple[Path, list[str]] | None:
    """The campaign's last ranking on disk and the names it ranks, best first: its own file
    (kldtui.workspace: ``leaderboard.json``, another profile's ``leaderboard-PROFILE.json``), else the
    ``leaderboard.json`` that earlier versions wrote for every profile sharing the folder, where it
    ranks only this profile's candidates; None when there is neither. Each file is read once."""
    from kldtui.formats.report_names import leaderboard_names

    ws = profile.workspace()
    if (ranked := leaderboard_names(ws.leaderboard_path)) is not None:
        return ws.leaderboard_path, ranked
    earlier = ws.earlier_leaderboard_path
    ranked = leaderboard_names(earlier) if earlier is not None else None
    if earlier is not None and ranked and set(ranked) <= {c.name for c in profile.candidates}:
        return earlier, ranked
    return None


def shown_workspace(profile: Profile) -> Workspace:
    """The folders a reopened dashboard shows: a campaign's :func:`shown_candidate`'s, a single
    candidate's own."""
    shown = shown_candidate(profile)
    return profile.workspace() if shown is None else profile.member_workspace(shown[0])


def control_for(profile: Profile, emit: EventSink = null_sink, cancel: Cancel | None = None) -> Any:
    """What runs a profile: a :class:`Campaign` for ``[[candidates]]``, else a
    :class:`~kldtui.workflow.pipeline.Pipeline` (both are a PipelineControl)."""
    if profile.is_campaign:
        return Campaign(profile, emit, cancel)
    return Pipeline(profile, emit, cancel)


class Campaign:
    """The candidates of a ``[[candidates]]`` profile; see the module docstring."""

    def __init__(self, profile: Profile, emit: EventSink = null_sink, cancel: Cancel | None = None,
                 *, pipeline_type: Callable[..., Pipeline] = Pipeline) -> None:
        if not profile.is_campaign:
            raise ValueError("a campaign needs a profile with [[candidates]]")
        self.profile = profile
        self.emit = emit
        self.cancel = cancel
        self.pipeline_type = pipeline_type
        self._workspace = profile.workspace()
        self.entries = [_Entry(c.name, profile.member_workspace(c.name), server_identity(c.server))
                        for c in profile.candidates]
        self.repeat: _Entry | None = None
        self.noise: Any = None  # kldtui.decide.noise.NoiseFloor once measured
        self.noise_path: Path | None = None  # the file it was read from or written to
        self.leaderboard: Any = None  # kldtui.decide.leaderboard.Leaderboard
        self._current: Pipeline | None = None
        self._reports: dict[str, Any] = {}  # name -> its report (ComparisonReport), as last ranked
        self._noise_warned: tuple[int, int] | None = None  # (size, mtime_ns) of a noise model said unreadable
        self._repeat_kl_warned: tuple[int, int] | None = None  # the same of a stale repeat report said
        # (a candidate's or repeat's name, the run's windows) -> whether its report is finished there
        # (_finished), for one run or one look at the disk: each report is read once
        self._finished_seen: dict[tuple[str, tuple[int, ...]], bool] = {}

    # -- PipelineControl -------------------------------------------------------------------------
    @property
    def workspace(self) -> Workspace:
        return self._workspace

    def run_stage(self, stage: StageRequest) -> object:
        if stage == "all":
            return self.run_all()
        if stage == "reference":  # shared by every candidate
            from kldtui.workflow.owners import claim

            # what the campaign writes there another profile's (its leaderboard, another suite's reference
            # capture, the folder it downloads into): refused before the download or any server; else
            # recorded as this profile's, as its whole run records it
            claim(self.profile, self._workspace, self.emit, "reference")
            pipeline = self._pipeline(self.profile.candidates[0], self.entries[0].workspace)
            try:
                return pipeline.reference()
            finally:
                pipeline.release_folders()
        raise BadInput(f"{self.profile.where}: a campaign runs its stages candidate by candidate; run "
                       "everything (r in the dashboard, kldtui run --batch)")

    def stop_server(self, reason: str = "done") -> None:
        current = self._current
        if current is not None:
            current.stop_server(reason)

    @property
    def server_running(self) -> bool:
        current = self._current
        return current is not None and current.server_running

    @property
    def server_url(self) -> str | None:
        current = self._current
        return current.server_url if current is not None else None

    def window_list(self) -> list[tuple[int, str]]:
        return self._pipeline(self.profile.candidates[0], self.entries[0].workspace).window_list()

    # -- the run -----------------------------------------------------------------------------------
    def run_all(self) -> RunState:
        """Every candidate not compared yet, one after another; then the leader's repeat capture
        (``[campaign] repeat_leader``); the ranking after each. Returns the leader's run state."""
        from kldtui.folder_lock import hold
        from kldtui.workflow.owners import claim

        names = ", ".join(e.name for e in self.entries)
        ws = self._workspace
        # the work folder and every report the campaign writes there, held from its first event (the
        # noise model's name comes with the suite: held while it is written, _repeat_leader)
        outputs = [e.report for e in self.entries] + [ws.leaderboard_path]
        with hold([ws.workdir] if ws.workdir else [], files=outputs, what="work folder", fixed_names=True):
            self.emit(StageStarted("campaign", detail=f"{len(self.entries)} candidates: {names}"))
            self._finished_seen = {}
            try:
                known: list[WindowSpec] | None = self._window_specs()
            except KldError:
                known = None  # no suite yet: the reference stage fetches it
            self._preflight(self._reference_ready(known), known)
            specs = self._reference()
            if known is None:  # the run's windows are known now: its candidates' runs are recorded over them
                claim(self.profile, ws, self.emit, "campaign", specs)
            # a report not finished against the reference before its stage may be now (one finished then
            # still is: a reference complete for the run's windows is only verified)
            self._finished_seen = {key: done for key, done in self._finished_seen.items() if done}
            windows = [w.index for w in specs]
            for entry in self.entries:
                if self._finished(entry, windows):
                    entry.state = "compared"
            if self.profile.campaign.repeat_leader:  # the standings so far use an earlier noise model
                self._rank(emit=False)
                self._earlier_noise(windows)
            if self._captures_to_come(0, windows):
                self._rank()
            total = len(self.entries)
            for number, (candidate, entry) in enumerate(zip(self.profile.candidates, self.entries,
                                                            strict=True), start=1):
                if entry.state == "compared":
                    self.emit(Notice("campaign", f"{entry.name}: compared earlier ({entry.report}); "
                                     "not captured again"))
                    continue
                self._run_candidate(candidate, entry, number, total)
                if self._captures_to_come(number, windows):
                    self._rank()
            if self.profile.campaign.repeat_leader:
                self._repeat_leader(windows)
            board = self._rank(final=True)
        failed = [e for e in self.entries if e.state == "failed"]
        leader = next((e for e in self.entries if board is not None and board.rows
                       and e.name == board.rows[0].name), None)
        repeat = self._repeat_failure()
        ranked = board is not None and bool(board.rows)
        summary = self._summary(board) + (f"; {repeat}" if repeat and ranked else "")
        self.emit(StageFinished("campaign", summary=summary,
                                figures={"candidates": len(self.entries),
                                         "ranked": len(board.rows) if board is not None else 0}))
        if failed:
            names = ", ".join(e.name for e in failed)
            raise StageFailed(f"{len(failed)} of {len(self.entries)} candidates failed ({names}; "
                              f"{failed[0].name}: {failed[0].note}); the others are ranked in "
                              f"{self._workspace.leaderboard_path}"
                              + (f"; and {repeat}" if repeat else "")
                              + "; run again to retry (finished candidates are kept)")
        if leader is None:
            raise StageFailed(f"{self.profile.where}: no candidate was compared over the whole run")
        if repeat and self.repeat is not None:
            # the ranking is written, but not with the noise model the profile asked for: a failed run
            raise StageFailed(f"{repeat} ({self.repeat.note}); the candidates are ranked in "
                              f"{self._workspace.leaderboard_path} without it (named differences stay "
                              "provisional); run again to capture the repeat (finished candidates are kept)")
        return load_state(leader.workspace)

    def _captures_to_come(self, done: int, windows: list[int]) -> bool:
        """Whether a capture runs after the first ``done`` candidates: a later one not compared yet,
        or the leader's repeat (not captured earlier, or the leader may change before it). Else the
        standings now are the final leaderboard's, sent next: a board "so far" said them twice, the
        first without the noise model that an earlier repeat capture is measured again into."""
        if any(e.state != "compared" for e in self.entries[done:]):
            return True
        if not self.profile.campaign.repeat_leader:
            return False
        if done > 0:
            return True
        if self.noise is not None:
            return False
        board = self.leaderboard
        leader = board.rows[0].name if board is not None and board.rows else None
        return leader is None or not self._finished(self._repeat_entry(leader), windows)

    def _repeat_failure(self) -> str:
        """What went wrong with the leader's repeat capture (``[campaign] repeat_leader``): it failed or
        stopped early, so no noise model was measured; "" when it did not (or none was asked for)."""
        repeat = self.repeat
        if repeat is None or repeat.state not in ("failed", "stopped early"):
            return ""
        return f"the leader's repeat capture ({repeat.name}) {repeat.state}: no measured noise model"

    def _reference(self) -> list[WindowSpec]:
        """The shared reference stage, once (fetched, captured where missing, verified): a
        finished candidate is only finished against the reference as it is now. Returns the
        run's windows."""
        first = self._pipeline(self.profile.candidates[0], self.entries[0].workspace)
        try:
            first.reference()
            return first.windows()
        finally:
            first.release_folders()

    def _reference_ready(self, specs: list[WindowSpec] | None) -> set[str]:
        """The candidates whose report covers the run (``specs``: its windows, None while there is no
        suite) against the reference on disk now (their problems, e.g. a model folder moved away after
        its run, do not stop the others)."""
        if specs is None:
            return set()
        windows = [w.index for w in specs]
        return {e.name for e in self.entries if self._finished(e, windows)}

    def _preflight(self, finished: set[str], specs: list[WindowSpec] | None) -> None:
        """Every candidate still to run is checked before the first server starts: a missing
        model of the third candidate is said now, not after hours of capturing the first two."""
        from kldtui.workflow.owners import claim, owner_problem
        from kldtui.workflow.preflight import campaign_disk, preflight, refuse

        # another profile's leaderboard under this one's name first (its other problems would not matter)
        refuse([owned] if (owned := owner_problem(self.profile, self._workspace, specs)) else [], self.emit,
               "campaign")
        problems: list[str] = []
        todo: list[tuple[str, Profile, Workspace]] = []
        for candidate, entry in zip(self.profile.candidates, self.entries, strict=True):
            if entry.name in finished:
                continue
            member = self.profile.member(candidate)
            todo.append((entry.name, member, entry.workspace))
            problems += [p for p in preflight(member, entry.workspace, disk=False) if p not in problems]
        # the disk of all of them together: each keeps its finalized logits in the work folder
        windows = [w.index for w in specs] if specs is not None else []
        disk = None if problems else campaign_disk(self.profile, todo,
                                                   repeat=self._repeat_pending(finished, windows))
        if disk is not None and not isinstance(disk, str) and disk.short:
            problems.append(f"{self.profile.where}: disk: the campaign needs {disk.describe()}; free space, "
                            "or set [run] workdir on a larger disk (or [run] stop_window for fewer "
                            f"{disk.unit}s, or fewer candidates)")
        refuse(problems, self.emit, "campaign")
        claim(self.profile, self._workspace, self.emit, "campaign", specs)  # the work folder's lock is held
        if disk is not None:
            said = disk if isinstance(disk, str) else f"disk: the campaign needs {disk.describe()}"
            self.emit(Notice("campaign", said))
        servers = [(name, member.candidate) for name, member, _ in todo]
        if self.profile.reference.server is not None and not self._reference_complete():
            servers.insert(0, ("the reference", self.profile.reference.server))
        for name, server in servers:  # what each server will hold, where its kind can say
            if (memory := kind_of(server).memory_line(server)) is not None:
                self.emit(Notice("campaign", f"memory: {name}: {memory}"))

    def _reference_complete(self) -> bool:
        from kldtui.formats.suite import load_suite
        from kldtui.stages.reference_capture import reference_complete

        try:
            windows = self.profile.windows(load_suite(self._workspace.suite_dir))
            return reference_complete(self._workspace, windows)
        except (KldError, OSError, ValueError):
            return False

    def _repeat_pending(self, finished: set[str], windows: list[int]) -> bool:
        """The leader's repeat capture is still to come (``[campaign] repeat_leader``, and no finished
        candidate has one yet over the run's ``windows``)."""
        if not self.profile.campaign.repeat_leader:
            return False
        for name in finished:
            if self._finished(self._repeat_entry(name), windows):
                return False  # a repeat is there: the noise model is measured from it again
        return True

    def announce_disk_state(self) -> None:
        """The standings of the reports on disk, as a LeaderboardUpdated event (what a reopened
        dashboard shows); nothing is run or written."""
        self._finished_seen = {}  # the disk as it is now
        try:
            windows = [w.index for w in self._window_specs()]
        except KldError:
            return  # no suite yet: nothing to rank
        for entry in self.entries:
            if entry.state == "waiting" and self._finished(entry, windows):
                entry.state = "compared"
        if not any(e.state == "compared" for e in self.entries):
            return
        self._rank(emit=False)
        self._earlier_noise(windows, stop=False)
        self._rank(write=False)

    def _noise_model_path(self) -> Path:
        """Where this campaign's noise model is written: the file of its reference suite (that of the
        last ranking's leader's report; kldtui.workspace), which a profile of another suite in this
        work folder does not write."""
        leader = self.leaderboard.rows[0].name
        return self._workspace.noise_model_path(self._reports[leader].suite_token_hash_sha256)

    def _earlier_noise(self, windows: list[int], *, stop: bool = True) -> None:
        """The repeat capture and noise model an earlier run measured, when they are of the current
        leader's captures (the noise model names the two capture folders): this profile's file of its
        suite, else the files earlier versions wrote there
        (kldtui.workspace.Workspace.earlier_noise_model_paths), the first that holds these two captures
        of this suite. Another profile sharing the work folder measures its own leader's captures: its
        model is never this campaign's. A folder at this profile's file's name is BadInput (the output
        rule's line, before the repeat is captured), or with ``stop=False`` (nothing is run) a warning
        in the same words."""
        from kldtui.folder_lock import check_output_file
        from kldtui.formats.report_names import other_suite
        from kldtui.formats.safe_io import regular_size

        board = self.leaderboard
        if board is None or not board.rows:
            return
        path = self._noise_model_path()
        suite = self._reports[board.rows[0].name].suite_token_hash_sha256
        paths = [path]
        if not os.path.lexists(path):
            # a folder of earlier versions: the model they named by suite only, for every profile sharing
            # the folder, then their one model; each read only where it holds this campaign's captures
            paths = [p for p in self._workspace.earlier_noise_model_paths(suite)
                     if regular_size(p) is not None]
        elif regular_size(path) is None:
            # not a file this campaign wrote, so it cannot stand for its repeat. A folder there (a link to
            # one) is in the way of the model's writer: the output rule's line, before any capture (a run
            # stops on it: move it away; a dashboard opened on the folder is told so); a link or a FIFO is
            # replaced by the writer: measured again, and the file written in its place
            try:
                check_output_file(path, what="noise model", fixed_name=True)
                problem = (f"{path}: not a regular file this campaign wrote (a link or a FIFO); not read, "
                           "the noise model is measured again and written in its place")
            except BadInput as exc:
                if stop:
                    raise
                problem = str(exc)
            with contextlib.suppress(OSError):
                seen = (-1, os.lstat(path).st_mtime_ns)
                if seen != self._noise_warned:
                    self._noise_warned = seen
                    self.emit(Notice("campaign", problem, level="warning"))
            return
        if not paths:
            return
        leader = next(e for e in self.entries if e.name == board.rows[0].name)
        entry = self._repeat_entry(leader.name)
        if not self._finished(entry, windows):
            return
        captures = {os.path.normpath(str(c)) for c in (leader.workspace.candidate, entry.workspace.candidate)}
        for path in paths:
            noise = self._read_noise(path)
            if noise is None:
                continue
            runs = {os.path.normpath(str(r)) for r in (noise.run1, noise.run2) if r}
            if runs != captures or other_suite(noise.suite_token_hash_sha256, suite):
                continue  # of another leader's (another profile's) captures, or another suite's
            if self._stale_repeat_kl(entry.workspace):
                return  # its repeat KL held the two heads' difference: compared again, measured again
            entry.state = "compared"
            self.noise, self.repeat, self.noise_path = noise, entry, path
            return
        # none of them: measured again into this campaign's own file

    def _read_noise(self, path: Path) -> Any:
        """The noise model in ``path`` (kldtui.decide.noise.NoiseFloor); None, said, when it cannot be
        read."""
        from kldtui.decide.noise import NOISE_REMEDY, load_floor

        try:
            return load_floor(path)
        except BadInput as exc:
            # said once per state of the file (this runs before the first ranking and again for the
            # repeat), with the campaign's own remedy rather than the loader's
            with contextlib.suppress(OSError):
                st = path.stat()
                seen = (st.st_size, st.st_mtime_ns)
                if seen != self._noise_warned:
                    self._noise_warned = seen
                    problem = str(exc).removesuffix(f"; {NOISE_REMEDY}")
                    self.emit(Notice("campaign", f"{problem}; measured again", level="warning"))
            return None

    def _run_candidate(self, candidate: Candidate, entry: _Entry, number: int, total: int,
                       repeat: bool = False) -> None:
        self.emit(CandidateStarted("campaign", name=entry.name, number=number, total=total, repeat=repeat))
        entry.state = "running"
        self._rank(announce_only=True)
        # run_all checked the shared reference (_reference) before any candidate
        pipeline = self._pipeline(candidate, entry.workspace, reference_checked=True)
        self._current = pipeline
        try:
            pipeline.run_all()
            entry.state = "compared"
        except Interrupted:
            entry.state = "waiting"  # resumes with this candidate
            raise
        except KldError as exc:
            if pipeline.stopped_early:  # [compare] abort_kl_above: a verdict on this candidate
                entry.state, entry.note = "stopped early", str(exc)
                self.emit(Notice("campaign", f"{entry.name}: stopped early; not ranked ({exc})",
                                 level="warning"))
            else:  # one broken candidate does not cost the others' night
                entry.state, entry.note = "failed", str(exc)
                self.emit(Notice("campaign", f"{entry.name}: failed ({exc}); going on with the next "
                                 "candidate", level="error"))
        except BaseException:
            entry.state = "waiting"
            raise
        finally:
            self._current = None
            # its report, its captures: read again when next asked
            self._finished_seen = {k: v for k, v in self._finished_seen.items() if k[0] != entry.name}

    def _repeat_entry(self, leader: str) -> _Entry:
        """The leader's repeat capture: its folders and the settings it is captured with."""
        server = next(c.server for c in self.profile.candidates if c.name == leader)
        return _Entry(leader + REPEAT_SUFFIX, self._workspace.repeat_of(leader),
                      server_identity(kind_of(server).repeat_config(server)))

    def _repeat_leader(self, windows: list[int]) -> None:
        """Capture the leader again (its kind's repeat config) and measure the noise model."""
        from kldtui.decide.noise import noise_from_capture_reports, save_floor
        from kldtui.folder_lock import hold
        from kldtui.formats.report import load_report

        board = self.leaderboard
        if board is None or not board.rows:
            return
        leader = board.rows[0].name
        index = next(i for i, e in enumerate(self.entries) if e.name == leader)
        candidate = self.profile.candidates[index]
        self.noise, self.repeat, self.noise_path = None, None, None
        self._earlier_noise(windows)
        if self.noise is not None:
            return  # this leader's repeat, measured earlier
        entry = self._repeat_entry(leader)
        ws = entry.workspace
        self.repeat = entry
        model_path = self._noise_model_path()
        if self._finished(entry, windows):
            entry.state = "compared"  # captured earlier; the noise model is measured again
        else:
            repeat = Candidate(entry.name, kind_of(candidate.server).repeat_config(candidate.server))
            self._run_candidate(repeat, entry, len(self.entries) + 1, len(self.entries) + 1, repeat=True)
        if entry.state != "compared":
            return  # the repeat failed (said above)
        first, second = self.entries[index].report, ws.report
        try:
            repeat = self._repeat_kl(self.entries[index].workspace, ws)
            captured = load_report(first)
            noise = noise_from_capture_reports(captured, load_report(second), where1=str(first),
                                               where2=str(second), repeat=repeat,
                                               where_repeat=str(self._repeat_kl_path(ws)))
        except BadInput as exc:
            self.emit(Notice("campaign", f"no measured noise model: {exc}", level="warning"))
            return
        # a name of kldtui's: a folder made there during the repeat is told to be moved away
        with hold(files=[model_path], fixed_names=True):
            save_floor(model_path, noise)
        self.noise, self.noise_path = noise, model_path
        # a deterministic server's (its two captures alike, each from a server start of its own): nothing
        # measured, which the ranking's provisional verdicts say (kldtui.decide.noise.one_capture)
        # in the reports' units (a hidden-state suite's contexts): the stored model does not record them
        if noise.kind == "deterministic":  # a warning says why
            self.emit(Notice("campaign", f"noise model: {noise.describe(captured.unit)} "
                             f"(saved in {model_path})", level="warning"))
        else:  # the final leaderboard, next, gives the model itself (the same words twice in a row)
            self.emit(Notice("campaign", f"noise model saved in {model_path}; the final leaderboard "
                             "gives it"))

    def _stale_repeat_kl(self, repeat: Workspace) -> bool:
        """Whether the stored comparison of the leader's two captures with each other replayed its two
        sides with different LM heads (kldtui.decide.noise.different_heads: an earlier version's, which
        replayed the first capture with the suite's head), so the noise model measured from it is not
        to be reused; said once per state of the file."""
        from kldtui.decide.noise import different_heads
        from kldtui.formats.report import load_report

        path = self._repeat_kl_path(repeat)
        try:
            if not path.is_file():
                return False
            why = different_heads(load_report(path))
            seen = (path.stat().st_size, path.stat().st_mtime_ns)
        except (KldError, OSError):
            return False  # unreadable: not this check's to judge; the model stands on its own file
        if why is None:
            return False
        if seen != self._repeat_kl_warned:
            self._repeat_kl_warned = seen
            self.emit(Notice("campaign", f"{path}: {why}, as earlier versions replayed the first capture; "
                             "the two captures are compared again and the noise model measured again",
                             level="warning"))
        return True

    @staticmethod
    def _repeat_kl_path(repeat: Workspace) -> Path:
        return repeat.report.parent / f"repeat-kl-{repeat.candidate.name}.json"

    def _repeat_kl(self, first: Workspace, repeat: Workspace) -> Any:
        """The two captures compared with each other (the repeat KL between them, the noise
        model's second figure), where both kept their logits (logits mode); None otherwise."""
        from kldtui.decide.noise import measure_floor
        from kldtui.formats.suite import logits_manifest_path
        from kldtui.servers.registry import process_signs

        if not (logits_manifest_path(first.candidate).is_file()
                and logits_manifest_path(repeat.candidate).is_file()):
            return None  # e.g. score mode: no candidate logits on disk
        run = self.profile.run
        self.emit(Notice("campaign", f"comparing the two captures of {first.candidate.name} with each other "
                         "(the repeat KL between them)"))
        # its window events stay out of the dashboard's grid, which shows the captures against the reference
        _, report = measure_floor(self._workspace.suite_manifest, first.candidate, repeat.candidate,
                                  start_window=run.start_window, stop_window=run.stop_window,
                                  context_filter=run.context_filter, strata=run.strata, reverse=True,
                                  report_path=self._repeat_kl_path(repeat), emit=null_sink,
                                  cancel=self.cancel, server_signs=process_signs())
        return report

    # -- ranking -----------------------------------------------------------------------------------
    def _rank(self, final: bool = False, announce_only: bool = False, write: bool = True,
              emit: bool = True) -> Any:
        """Rank the compared candidates (the decision rules'), send the standings; the final
        ranking is also written to leaderboard.json (``write``: False when only showing)."""
        from kldtui.decide.leaderboard import build_leaderboard
        from kldtui.decide.noise import AUTO_FLOOR
        from kldtui.formats.report import load_report
        from kldtui.workflow.owners import with_whose

        ranked = [e for e in self.entries if e.state == "compared"]
        board = self.leaderboard
        if not announce_only:
            board = None
            if ranked:
                reports = [load_report(e.report) for e in ranked]
                self._reports = {e.name: r for e, r in zip(ranked, reports, strict=True)}
                # whose run each report is, as profiles.json records it: as kldtui leaderboard DIR says
                noise = self.noise if self.noise is not None else AUTO_FLOOR
                board = with_whose(build_leaderboard(reports, names=[e.name for e in ranked],
                                                     paths=[str(e.report) for e in ranked], noise=noise))
            self.leaderboard = board
        path: str | None = None
        if not write and (on_disk := leaderboard_on_disk(self.profile)) is not None:
            path = str(on_disk[0])
        if final and write and board is not None:
            from kldtui.decide.exports import export_table, leaderboard_document
            from kldtui.decide.noise import resolve_floor
            from kldtui.decide.paired import suite_hash_of
            from kldtui.formats.atomic import write_json_atomic

            # the file `kldtui leaderboard REPORTS --noise noise-model-HASH.json --json` writes
            names = [row.name for row in board.rows]
            reports = [self._reports[name] for name in names]
            floor = self.noise if self.noise is not None else resolve_floor(None, suite_hash_of(*reports))
            table = export_table(board, reports, names=names, noise=floor)
            target = self._workspace.leaderboard_path
            write_json_atomic(target, leaderboard_document(board, table))
            path = str(target)
        if not emit:
            return board
        rows = self._standings(board)
        self.emit(LeaderboardUpdated(
            "campaign", rows=tuple(rows), windows=board.windows if board is not None else 0,
            unit=board.unit if board is not None else WINDOW_UNIT,
            tie_unit=board.tie_unit if board is not None else "",
            noise_model=self.noise.describe(board.unit if board is not None else WINDOW_UNIT)
            if self.noise is not None else (
                board.noise_source if board is not None else ""),
            notes=tuple(board.notes) if board is not None else (),
            noise_brief=self.noise.brief() if self.noise is not None else (
                board.noise_brief if board is not None else ""),
            brief_notes=tuple(board.brief_notes) if board is not None else (), path=path, final=final,
            ranked=not announce_only,
            noise_path=str(self.noise_path) if self.noise_path is not None else None))
        return board

    def _standings(self, board: Any) -> list[Standing]:
        """The ranked candidates, then the leader's repeat (its own paired verdict against the
        leader: a second capture of one model, which should read as tied), then the rest."""
        rows: list[Standing] = []
        ranked_names = set()
        if board is not None:
            for row in board.rows:
                ranked_names.add(row.name)
                size = self._reports[row.name].candidate_size  # the report's (kldtui.formats.model_size)
                rows.append(Standing(
                    name=row.name, state="compared", rank=row.rank, mean=row.mean, ci_low=row.ci_low,
                    ci_high=row.ci_high, mark=row.mark, verdict=row.verdict_vs_best,
                    outcome=row.outcome_vs_best, report_path=row.path, provisional=row.provisional,
                    size_bytes=size.size_bytes if size is not None else None,
                    bits_per_weight=size.bits_per_weight if size is not None else None))
        repeat = self.repeat
        if repeat is not None and repeat.state == "compared" and board is not None:
            rows.append(self._repeat_standing(repeat, board))
            ranked_names.add(repeat.name)
        for entry in [*self.entries, *([repeat] if repeat is not None else [])]:
            if entry.name not in ranked_names:
                rows.append(Standing(name=entry.name, state=entry.state, note=entry.note))
        return rows

    def _repeat_standing(self, repeat: _Entry, board: Any) -> Standing:
        from kldtui.decide.paired import paired_diff
        from kldtui.formats.report import load_report
        from kldtui.formats.report_names import kl_headline_interval

        leader = board.rows[0]
        report = load_report(repeat.report)
        diff = paired_diff(load_report(leader.path), report, noise=self.noise, name_a=leader.name,
                           name_b=repeat.name, path_a=leader.path, path_b=str(repeat.report))
        # the verdict over source clusters where contexts share sources, as the ranked rows' ties count
        stats = diff.clustered if diff.clustered is not None else diff.overall
        tied = stats.outcome in TIED_OUTCOMES
        iv = kl_headline_interval(report)  # the interval the ranked rows show (the leaderboard's)
        return Standing(name=repeat.name, state="compared",
                        mean=float(iv.estimate) if iv.estimate is not None else None,
                        ci_low=iv.ci95_low, ci_high=iv.ci95_high,
                        mark="tied" if tied else "", verdict=stats.verdict, outcome=stats.outcome,
                        provisional=stats.provisional,
                        report_path=str(repeat.report), repeat_of=leader.name,
                        note=f"a second capture of {leader.name} (the noise model); not ranked")

    def leader_state(self) -> RunState | None:
        """The run state of the last ranking's leader (None: nothing ranked): what the dashboard
        shows when a campaign ended failed, with the others ranked (``run_all`` returns it when
        the campaign ends well)."""
        board = self.leaderboard
        if board is None or not board.rows:
            return None
        entry = next((e for e in self.entries if e.name == board.rows[0].name), None)
        return load_state(entry.workspace) if entry is not None else None

    @staticmethod
    def _summary(board: Any) -> str:
        if board is None or not board.rows:
            return "no candidate ranked"
        best = board.rows[0]
        tied = [r.name for r in board.rows if r.tied_with_best]
        return f"best: {best.name} (mean KL {plain_number(best.mean)})" + (
            f"; tied with it: {', '.join(tied)}" if tied else "")

    # -- internals ---------------------------------------------------------------------------------
    def _pipeline(self, candidate: Candidate, workspace: Workspace, *,
                  reference_checked: bool = False) -> Pipeline:
        return self.pipeline_type(self.profile.member(candidate), self.emit, self.cancel,
                                  workspace=workspace, reference_checked=reference_checked)

    def _window_specs(self) -> list[WindowSpec]:
        """The windows every candidate covers (KldError while there is no suite yet)."""
        return self._pipeline(self.profile.candidates[0], self.entries[0].workspace).windows()

    def _finished(self, entry: _Entry, windows: list[int]) -> bool:
        """The candidate's report (read and checked, not trusted by its name) covers every window of
        the run, against the reference's content as it is now (kldtui.formats.reference_identity),
        and its captures were made with the candidate's settings as the profile has them now (a
        changed candidate is not finished: the preflight then says what changed and what to do). Read
        once per run (:attr:`_finished_seen`), and again after the candidate runs."""
        key = (entry.name, tuple(windows))
        if key not in self._finished_seen:
            self._finished_seen[key] = self._finished_now(entry, windows)
        return self._finished_seen[key]

    def _finished_now(self, entry: _Entry, windows: list[int]) -> bool:
        """:meth:`_finished`, read from the disk."""
        from kldtui.stages.capture import changed_server
        from kldtui.stages.compare.driver import current_reference_identity

        mode = self.profile.capture.mode
        # whether its server changed, not the words that say so: no suite's windows to name units by
        if not windows or changed_server(entry.workspace, entry.identity, mode, windows=()) is not None:
            return False
        if not mode.manifest_path(entry.workspace.candidate).is_file():
            return False  # its capture is gone: the report cannot be shown to be this candidate's
        report = load_state(entry.workspace).report
        if report is None or sorted(int(i) for i in report.window_table().window_index) != sorted(windows):
            return False
        now = current_reference_identity(self._workspace.reference, self._workspace.suite_dir, windows)
        return now is not None and report.reference_identity_sha256 == now
