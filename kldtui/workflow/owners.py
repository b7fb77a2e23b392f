"""Which profile owns what in a work folder several profiles share (``WORKDIR/profiles.json``).

Profiles may share a work folder (kldtui.workspace), but some of its files are one profile's:

- a single-candidate profile's (``[candidate]``) run: ``comparison.json``, and what it reports,
  ``candidate/``, ``compare/`` and ``capture/RUN``. Another such profile would capture into the same
  folders: one of another suite was refused only after its servers had started (finalize found the
  candidate's logits made from another suite), one of other windows of the same suite (``[run]
  start_window``/``stop_window``, a context filter) silently wrote its report over the first one's;
- a campaign's leaderboard and noise models (``leaderboard.json``, ``noise-model-HASH.json``; named
  after the profile's file, ``Workspace.profile``): two campaigns whose profiles have one file name in
  two folders (``a/kldtui.toml``, ``b/kldtui.toml``) would write over each other's ranking.

Some parts are one suite's, shared by the profiles of that suite (:func:`suite_parts`):

- ``reference-run/`` ([reference] capture): the reference capture of the suite whose ``ref/`` it
  finalizes into; another suite's capture dropped the first one's records
  (``capture/capture-reference.json``) and replaced them, so an unfinished reference of the first
  would be captured again;
- a campaign candidate's run (``comparison-NAME.json``, ``candidates/NAME``, ``compare/NAME``,
  ``capture/NAME``, and its leader's ``repeat/``): two campaigns of other suites naming a candidate
  alike (same server and mode; another server or mode is refused by the capture) would share it.

Two more are one profile's among those that share them:

- the suite folder a profile downloads into (``[reference] repo_id``; ``WORKDIR/reference/`` without
  a ``local_dir``, so every such profile of the work folder names the same one): a profile of another
  repository or revision fetched its suite over the first one's, which fetched its own back on its next
  run. The folder's download record (``.kldtui-reference.json``, kldtui.stages.verify.downloaded_from)
  says what it holds, from before the download's first file (a first download stopped before its suite
  manifest came holds that suite all the same); ``profiles.json`` records the profile that downloaded
  it, and another profile whose download would fetch another suite there is refused before any
  download or server start and asked for a ``local_dir`` of its own: each suite in its own folder,
  which no other profile's download replaces (a folder per repository and revision by default would
  move every suite downloaded so far, gigabytes of reference logits, and still leave two profiles that
  name one ``local_dir`` to collide). A profile of the same suite shares it; the profile that downloaded it
  may change its revision there (another repository is refused by the download itself,
  kldtui.stages.reference.begin_download, for whichever profile asks);
- a campaign candidate's report (``comparison-NAME.json``) covers the windows of one run: two
  campaigns of one suite naming a candidate alike over the same windows share it (one report of one
  server over those windows), but over other windows ([run] start_window, stop_window, context_filter,
  strata) each wrote its report over the other's, a 2-window one over a 32-window one.
  ``profiles.json`` records the profile whose run it covers and the run's windows; another profile of
  other windows is refused, naming both, before any server starts (or, where the suite is only
  downloaded by this run, right after the download), and asked for another candidate name, the same
  windows or a work folder of its own. The profile itself may change its windows (a run extended to
  more windows).

The first profile to run there claims its file (:func:`claim`, holding the work folder's lock): every
writer of a profile's work folder claims before it starts a server or writes there (``kldtui run``,
``kldtui serve``, whose server writes its capture folder and ``server.log`` there, and each stage the
dashboard runs: its server stage, a campaign's reference stage). ``profiles.json`` records the file's
name and the profile's path relative to the work folder (so a project folder moved whole keeps its
owners). Another profile is refused, one line naming both
(:func:`owner_problem`, said before any server starts), and asked for a work folder of its own. A
profile whose recorded file is gone (renamed or deleted) hands its files over, with a notice. With its
file, the profile records its suite's folder (relative to the work folder) for each part it writes that
is one suite's; a profile of another suite folder is refused it the same way (for a candidate: or
asked to name it otherwise), unless the recorded folder holds no suite any more (moved or deleted:
the part changes hands, with a notice). A downloaded folder and a candidate's report over its windows
change hands the same way when the recorded profile's file is gone (and the downloaded folder, silently,
when it holds no suite). A profile's dashboard, opened before any run, reads the record too
(:func:`view_problem`): where the profile's run would be refused it says that line and shows none of
the folder's run as the profile's. Profiles read from no file (built in code) claim nothing. A folder
of earlier versions, which recorded no owners, is claimed by the first profile to run there again.

Views that write nothing read the record too, to say whose run a report is (:func:`whose_reports`: a
run's ``comparison.json`` its owner's, a campaign candidate's ``comparison-NAME.json`` its ``runs``
profile's): the viewer beside the report's name (:func:`report_owner`), and every ranking of saved
reports, where they are the runs of more than one profile, each report's (:func:`with_whose`; the
title of ``kldtui plot``'s charts the same, :func:`board_whose`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui.errors import BadInput, KldError
from kldtui.events import EventSink, Notice, StageName
from kldtui.folder_lock import hold
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.names import name_problem
from kldtui.formats.suite import suite_manifest_path
from kldtui.formats.untrusted_json import one_line_problem, printable_name, read_json
from kldtui.workflow.profile import Profile
from kldtui.workspace import Workspace

if TYPE_CHECKING:
    from kldtui.decide.leaderboard import Leaderboard
    from kldtui.formats.suite import WindowSpec

PROFILES_FORMAT = "kldtui-profiles-v1"
# bytes of profiles.json read: a line of a few hundred bytes per profile sharing the folder
PROFILES_LIMIT = 1024 * 1024
# characters of a recorded profile path (relative to the work folder)
PROFILE_PATH_MAX = 4096
# the maps profiles.json holds (Record); owners is there from the first version on, the others where
# something is recorded in them
RECORD_MAPS = ("owners", "suites", "downloads", "runs")
REMEDY = "delete it (each profile that runs there next records itself again)"


def owned_file(profile: Profile, workspace: Workspace) -> str | None:
    """The file that stands for what ``profile`` keeps as its own in its work folder: a campaign's
    leaderboard, a single candidate's report; None for a profile read from no file or a workspace
    without a work folder."""
    if profile.path is None or workspace.workdir is None:
        return None
    return workspace.leaderboard_path.name if profile.is_campaign else workspace.report.name


def suite_parts(profile: Profile, workspace: Workspace) -> dict[str, tuple[str, str]]:
    """The parts of the work folder ``profile`` would write that are one suite's (see the module
    docstring): the name ``profiles.json`` records each under -> (what it is, what to do instead), as a
    refusal says them. Empty for a profile that claims nothing (:func:`owned_file`)."""
    from kldtui.formats.report_names import CAMPAIGN_FOLDER

    if owned_file(profile, workspace) is None:
        return {}
    parts: dict[str, tuple[str, str]] = {}
    if profile.reference.capture is not None:
        run = workspace.reference_capture().workdir
        assert run is not None
        parts[run.name] = (f"{run.name}/, the reference capture", "give this profile its own [run] workdir")
    for candidate in profile.candidates:
        name, report = candidate.name, profile.member_workspace(candidate.name).report.name
        parts[report] = (f"campaign candidate {name}'s run ({report}, {CAMPAIGN_FOLDER}/{name}/, "
                         f"compare/{name}/, capture/{name}/)",
                         "give the candidate another name or this profile its own [run] workdir")
    return parts


def _shown(path: Path, workdir: Path) -> str:
    """A profile's or a suite's path as ``profiles.json`` records it: relative to the work folder."""
    return os.path.relpath(path.resolve(), workdir.resolve())


def _printed(recorded: str, workdir: Path) -> str:
    """A recorded path as a line shows it: absolute."""
    return printable_name(os.path.normpath(workdir.resolve() / recorded))


@dataclass(frozen=True)
class Run:
    """A campaign candidate's run as ``profiles.json`` records it (``runs``): the profile whose run its
    report covers and the windows (a hidden-state suite's contexts) it covers, as :func:`spans` writes
    them."""

    profile: str
    windows: str


@dataclass(frozen=True)
class Record:
    """What ``profiles.json`` records: the owners (file name -> profile path), the suites (name of a
    part that is one suite's -> the suite folder), the downloads (a suite folder a profile downloads
    into -> that profile) and the campaign candidates' runs (report name -> :class:`Run`), each path
    relative to the work folder."""

    owners: dict[str, str] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)
    downloads: dict[str, str] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)

    def document(self) -> dict[str, object]:
        """The file's content (a map with nothing in it is left out)."""
        return {"format": PROFILES_FORMAT, "owners": self.owners,
                **({"suites": self.suites} if self.suites else {}),
                **({"downloads": self.downloads} if self.downloads else {}),
                **({"runs": {part: {"profile": run.profile, "windows": run.windows}
                             for part, run in self.runs.items()}} if self.runs else {})}


def load_record(path: Path) -> Record:
    """The record ``profiles.json`` at ``path`` holds; empty when there is none. BadInput, one line
    naming the file, for one kldtui did not write (a link, a FIFO, not JSON, too large, another format,
    a name that is not a plain one, a path that is not one line)."""
    if not path.exists() and not path.is_symlink():
        return Record()
    if path.is_symlink():
        raise BadInput(f"{path}: a link holds the profiles record's name; {REMEDY}")
    doc = read_json(path, what="profiles record", remedy=REMEDY, limit=PROFILES_LIMIT)
    maps: list[dict[str, Any]] = []
    if isinstance(doc, dict) and doc.get("format") == PROFILES_FORMAT:
        maps = [m for key in RECORD_MAPS
                if isinstance(m := doc.get(key, {} if key != "owners" else None), dict)]
    if len(maps) != len(RECORD_MAPS):
        raise BadInput(f"{path}: not a kldtui profiles record (format {PROFILES_FORMAT} with its owners); "
                       f"{REMEDY}")
    owners, suites, downloads, runs = maps
    # (the name a value is recorded under, whether that is a plain name, what the value is, the value)
    values: list[tuple[str, bool, str, object]] = [
        *[(name, True, "profile", owner) for name, owner in owners.items()],
        *[(name, True, "suite", suite) for name, suite in suites.items()],
        *[(folder, False, "profile", owner) for folder, owner in downloads.items()]]
    for name, run in runs.items():
        if not isinstance(run, dict) or set(run) != {"profile", "windows"}:
            raise BadInput(f"{path}: the run of {printable_name(name)!r} is not its profile and windows; "
                           f"{REMEDY}")
        values += [(name, True, f"run's {key}", value) for key, value in run.items()]
    for name, plain, what, value in values:
        problem = name_problem(name) if plain else one_line_problem(name, PROFILE_PATH_MAX)
        if problem is None and (found := one_line_problem(value, PROFILE_PATH_MAX)) is not None:
            problem = f"its {what} {found}"
        if problem is not None:
            raise BadInput(f"{path}: the owner of {printable_name(name)!r} {problem}; {REMEDY}")
    return Record(owners, suites, downloads,
                  {part: Run(run["profile"], run["windows"]) for part, run in runs.items()})


def spans(indices: Sequence[int]) -> str:
    """Window indices as runs of consecutive ones: ``0-3,6,8-9``."""
    ordered = sorted(set(indices))
    parts: list[str] = []
    start = 0
    for i, index in enumerate(ordered):
        if i + 1 == len(ordered) or ordered[i + 1] != index + 1:
            first = ordered[start]
            parts.append(str(first) if first == index else f"{first}-{index}")
            start = i + 1
    return ",".join(parts)


def owner_problem(profile: Profile, workspace: Workspace,
                  windows: Sequence[WindowSpec] | None = None) -> str | None:
    """One line when another profile, still there, owns what ``profile`` would write in the work folder,
    or a part of it ``profile`` would write is another suite's, or its download would fetch another suite
    over the one another profile downloaded, or a campaign candidate's report covers another profile's
    windows than ``windows`` (the run's, where the suite is there to say them; see the module
    docstring); None when none is, or the owner's file or the suite is gone."""
    return _check(profile, workspace, windows).problem


def view_problem(profile: Profile) -> str | None:
    """For a view of ``profile``'s work folder that writes nothing (its dashboard as it opens, before
    any run): the line :func:`owner_problem` would refuse its run with (what is there is another
    profile's, or another suite's), or the line saying ``profiles.json`` is not a record kldtui wrote;
    None where what the folder holds for this profile is its own. Then the view shows none of it as
    this profile's run. Reads ``profiles.json`` only."""
    try:
        return owner_problem(profile, profile.workspace())
    except KldError as exc:  # a record no run would accept either: said, and nothing taken as ours
        return str(exc)


@dataclass(frozen=True)
class Whose:
    """Whose run a report is, as the ``profiles.json`` of its folder records it (:func:`whose_reports`):
    for a work folder's ``comparison.json`` the profile recorded as its owner, for a campaign
    candidate's ``comparison-NAME.json`` the profile recorded under ``runs`` as the one whose run it
    covers."""

    profile: str | None = None  # the profile's path, absolute as a line shows it; None: none recorded
    gone: bool = False  # the recorded profile's file is gone (renamed or deleted)
    # the folder's record is not one kldtui wrote (:func:`load_record`'s line): no profile taken from it
    problem: str | None = None

    def words(self) -> str | None:
        """What a view says of the report: "the run of profile PATH, as profiles.json records it" (its
        file gone: said), the record's problem, or None where nothing is recorded."""
        from kldtui.workspace import PROFILES_FILE_NAME

        if self.problem is not None:
            return f"whose run it is is not known: {self.problem}"
        if self.profile is None:
            return None
        return f"the run of profile {self.shown}, as {PROFILES_FILE_NAME} records it"

    @property
    def shown(self) -> str:
        """The profile as a line names it: its path, and "(whose file is gone)" where it is."""
        return f"{self.profile}{' (whose file is gone)' if self.gone else ''}"


def _recorded_run(record: Record, name: str) -> str | None:
    """The profile ``record`` records as the one whose run the report ``name`` of its folder is."""
    from kldtui.formats.report_names import REPORT_FILE_NAME

    if name == REPORT_FILE_NAME:
        return record.owners.get(name)
    run = record.runs.get(name)
    return run.profile if run is not None else None


def whose_reports(reports: Sequence[str | os.PathLike[str] | None]) -> list[Whose]:
    """Whose run each report at ``reports`` is (:class:`Whose`; None: a report read from no file), as
    the ``profiles.json`` of its folder records it, for views that write nothing (``kldtui view``,
    ``kldtui leaderboard``, the viewer's and the dashboard's rankings). Only a run's report
    (``comparison.json``) and a campaign candidate's (``comparison-NAME.json``) are looked up; each
    folder's record is read once. A record kldtui did not write (a link, a FIFO, not JSON:
    :func:`load_record`'s line) is said and names no profile. Reads ``profiles.json`` only."""
    from kldtui.formats.report_names import CAMPAIGN_REPORT_PREFIX, REPORT_FILE_NAME
    from kldtui.workspace import PROFILES_FILE_NAME

    records: dict[str, Record | str] = {}
    out: list[Whose] = []
    for report in reports:
        path = Path(report) if report is not None else None
        if path is None or not (path.name == REPORT_FILE_NAME or (
                path.name.startswith(CAMPAIGN_REPORT_PREFIX) and path.name.endswith(".json"))):
            out.append(Whose())
            continue
        workdir = path.parent
        key = os.path.abspath(workdir)
        if key not in records:
            try:
                records[key] = load_record(workdir / PROFILES_FILE_NAME)
            except KldError as exc:  # broken or planted: said, and no profile taken from it
                records[key] = str(exc)
        record = records[key]
        if isinstance(record, str):
            out.append(Whose(problem=record))
        elif (owner := _recorded_run(record, path.name)) is not None:
            out.append(Whose(_printed(owner, workdir), gone=not (workdir / owner).is_file()))
        else:
            out.append(Whose())
    return out


def report_owner(report: Path) -> str | None:
    """Whose run the report at ``report`` is, in the words a view says it (:meth:`Whose.words`: "the run
    of profile PATH, as profiles.json records it"; a record kldtui did not write is said and names no
    profile); None where nothing is recorded: another file's name, no record, or no owner or run of the
    report in it. Reads ``profiles.json`` only."""
    return whose_reports([report])[0].words()


# a short note above a ranking that names each report's profile is one line at 80 columns; a longer one
# says how many profiles and that the help (?) names each report's
BRIEF_NOTE_MAX = 78


def whose_notes(rows: Sequence[tuple[str, Whose]]) -> list[tuple[str, str]]:
    """The notes (in full, in one short line) a ranking of the reports ``rows`` (each row's name and
    whose run it is) says of their profiles: each record kldtui did not write, said (no profile is taken
    from it); and where the rows are the runs of more than one profile, each row's profile (the short
    line names a profile by its file name, by its path where two share a name). Nothing where they
    are one profile's or none is recorded."""
    from kldtui.workspace import PROFILES_FILE_NAME

    notes = [(f"whose runs these are is not known: {problem}",
              f"whose runs: not known, a {PROFILES_FILE_NAME} is not kldtui's (? says why)")
             for problem in dict.fromkeys(w.problem for _, w in rows if w.problem is not None)]
    profiles = list(dict.fromkeys(w.profile for _, w in rows if w.profile is not None))
    if len(profiles) < 2:
        return notes
    groups: dict[str | None, list[str]] = {}
    shown: dict[str | None, str] = {None: "none recorded"}
    for name, w in rows:
        groups.setdefault(w.profile, []).append(name)
        if w.profile is not None:
            shown[w.profile] = f"profile {w.shown}"
    names = [os.path.basename(p) for p in profiles]
    short: dict[str | None, str] = {p: (n if names.count(n) == 1 else p)
                                    for p, n in zip(profiles, names, strict=True)}
    short[None] = "none recorded"
    full = (f"whose runs these are, as the {PROFILES_FILE_NAME} of each report's folder records it: "
            + "; ".join(f"{', '.join(named)}: {shown[p]}" for p, named in groups.items()))
    brief = f"of {len(profiles)} profiles: " + "; ".join(f"{', '.join(named)}: {short[p]}"
                                                        for p, named in groups.items())
    if len(brief) > BRIEF_NOTE_MAX:
        brief = f"reports of {len(profiles)} profiles ({', '.join(short[p] for p in profiles)}): ? says whose"
    if len(brief) > BRIEF_NOTE_MAX:
        brief = f"reports of {len(profiles)} profiles: ? says whose each is"
    return [*notes, (full, brief)]


def board_whose(board: Leaderboard) -> tuple[list[Whose], list[tuple[str, str]]]:
    """Whose run each row's report of ``board`` is (:func:`whose_reports`, by the row's report path: a
    row read from no file has none) and the notes, in full and in one short line, a ranking of them says
    (:func:`whose_notes`): what :func:`with_whose` adds to a ranking, and ``kldtui plot``'s title says.
    Reads ``profiles.json`` only."""
    whose = whose_reports([row.path for row in board.rows])
    return whose, whose_notes([(row.name, w) for row, w in zip(board.rows, whose, strict=True)])


def with_whose(board: Leaderboard) -> Leaderboard:
    """``board`` with each row's profile and :func:`whose_notes` after its notes (:func:`board_whose`):
    the one way every ranking of saved reports says whose runs they are (``kldtui leaderboard`` and its
    exports, ``kldtui view``, the viewer's and the dashboard's rankings; ``kldtui plot`` says the same
    notes in its title). Reads ``profiles.json`` only."""
    import dataclasses

    whose, notes = board_whose(board)
    rows = [dataclasses.replace(row, profile=w.profile) for row, w in zip(board.rows, whose, strict=True)]
    return dataclasses.replace(
        board, rows=rows,
        notes=[*board.notes, *(full for full, _ in notes)],
        brief_notes=[*board.brief_notes, *(brief for _, brief in notes)])


def claim(profile: Profile, workspace: Workspace, emit: EventSink, stage: StageName,
          windows: Sequence[WindowSpec] | None = None) -> None:
    """Record ``profile`` as the owner of its files in its work folder, its suite as the one of the
    parts it writes that are one suite's, itself as the profile of the suite folder it downloads into
    and of its campaign candidates' runs over ``windows``; BadInput (:func:`owner_problem`'s line) when
    another profile owns them or another suite's are there. A gone owner's files, a gone suite's parts,
    are handed over with a notice.

    The one check-and-claim every writer of a profile's work folder makes before it starts a server
    or writes there (``kldtui run``, ``kldtui serve``, each stage the dashboard runs, a campaign's
    reference stage): it holds the work folder's lock while it reads and records (a caller that holds
    it already keeps it), so no other kldtui claims the folder between the check and the record."""
    if owned_file(profile, workspace) is None:
        return
    assert workspace.workdir is not None
    with hold([workspace.workdir], what="work folder"):
        _claim(profile, workspace, emit, stage, windows)


def _claim(profile: Profile, workspace: Workspace, emit: EventSink, stage: StageName,
           windows: Sequence[WindowSpec] | None) -> None:
    """:func:`claim`, its lock held."""
    checked = _check(profile, workspace, windows)
    if checked.problem is not None:
        raise BadInput(checked.problem)
    record = checked.record
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    me, suite = _shown(profile.path, workdir), _shown(workspace.suite_dir, workdir)
    downloads = dict(record.downloads)
    if checked.download_taken:
        downloads[suite] = me
    runs = dict(record.runs)
    if windows:
        mine = Run(me, spans([w.index for w in windows]))
        for part in _candidate_reports(profile):
            if part not in runs or runs[part].profile == me or part in checked.runs_taken:
                runs[part] = mine
    suites = {**record.suites, **dict.fromkeys(suite_parts(profile, workspace), suite)}
    claimed = Record({**record.owners, name: me}, suites, downloads, runs)
    if claimed == record:
        return
    for line in checked.handed:
        emit(Notice(stage, f"{path}: {line}", level="warning"))
    workdir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, claimed.document())


@dataclass(frozen=True)
class _Checked:
    """What :func:`_check` found: the refusal (None: none), the record, a line for each gone owner, suite,
    downloading profile or run's profile whose part is handed over, and the parts taken over so."""

    problem: str | None
    record: Record
    handed: list[str] = field(default_factory=list)
    download_taken: bool = False
    runs_taken: set[str] = field(default_factory=set)


def _candidate_reports(profile: Profile) -> list[str]:
    """The report names of the profile's campaign candidates (``comparison-NAME.json``): the parts
    ``runs`` records."""
    return [profile.member_workspace(c.name).report.name for c in profile.candidates]


def _check(profile: Profile, workspace: Workspace, windows: Sequence[WindowSpec] | None) -> _Checked:
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return _Checked(None, Record())
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    record = load_record(path)
    handed: list[str] = []
    me = _shown(profile.path, workdir)
    owner = record.owners.get(name)
    if owner is not None and owner != me:
        shown = _printed(owner, workdir)
        if (workdir / owner).is_file():
            return _Checked(_refusal(profile, workspace, name, shown), record)
        handed.append(f"{name} was profile {shown}'s, whose file is gone; it is {profile.where}'s now")
    suite = _shown(workspace.suite_dir, workdir)
    gone_suite: set[str] = set()
    for part, (what, way) in suite_parts(profile, workspace).items():
        recorded = record.suites.get(part)
        if recorded is None or recorded == suite:
            continue
        shown = _printed(recorded, workdir)
        if not suite_manifest_path(workdir / recorded).is_file():
            handed.append(f"{part} was suite {shown}'s, which is gone; it is suite {workspace.suite_dir}'s "
                          "now")
            gone_suite.add(part)
            continue
        return _Checked(f"{profile.where}: the work folder {workdir} holds {what} of suite {shown} ({path}), "
                        f"which this profile's suite {workspace.suite_dir} would write over; {way}", record)
    refused, gone, download_taken = _download_check(profile, workspace, record, me)
    if refused is not None:
        return _Checked(refused, record)
    handed += [gone] if gone is not None else []
    runs_taken = set(gone_suite)
    if windows and suite_manifest_path(workspace.suite_dir).is_file():
        mine, unit = spans([w.index for w in windows]), windows[0].unit
        for candidate, part in zip(profile.candidates, _candidate_reports(profile), strict=True):
            run = record.runs.get(part)
            if run is None or run.profile == me or run.windows == mine or part in gone_suite:
                continue
            shown = _printed(run.profile, workdir)
            if not (workdir / run.profile).is_file():
                handed.append(f"{part} covered the {unit}s {run.windows} of profile {shown}, whose file is "
                              f"gone; it covers {profile.where}'s, {unit}s {mine}, now")
                runs_taken.add(part)
                continue
            return _Checked(
                f"{profile.where}: the work folder {workdir} holds campaign candidate {candidate.name}'s "
                f"report ({part}) over the {unit}s {run.windows} of profile {shown} ({path}), which this "
                f"profile's run over {unit}s {mine} would write over; give the candidate another name, the "
                "two profiles the same [run] windows, or this profile its own [run] workdir", record)
    return _Checked(None, record, handed, download_taken, runs_taken)


def _download_check(profile: Profile, workspace: Workspace, record: Record,
                    me: str) -> tuple[str | None, str | None, bool]:
    """(the refusal, the line handing the folder over, whether ``profile`` is recorded as the folder's
    downloader now) for a profile that downloads its suite ([reference] repo_id): refused when the folder
    holds another suite that another profile, still there, downloaded (the folder's own download record
    says what from: kldtui.stages.verify.downloaded_from); handed over, with the line, when that
    profile's file is gone; the folder is this profile's where no profile or no suite is there yet, and
    stays the other one's where this profile downloads the same suite."""
    from kldtui.stages.verify import download_under_way, downloaded_from, read_record

    ref, workdir = profile.reference, workspace.workdir
    assert workdir is not None
    claimer = record.downloads.get(_shown(workspace.suite_dir, workdir))
    if ref.repo_id is None or claimer == me:
        return None, None, False
    held = read_record(workspace.suite_dir)
    # a download stopped before its suite manifest came holds that suite all the same (it resumes there)
    if claimer is None or held is None or (not suite_manifest_path(workspace.suite_dir).is_file()
                                           and not download_under_way(held)):
        return None, None, True
    if downloaded_from(held, ref.repo_id, ref.revision):
        return None, None, False
    shown = _printed(claimer, workdir)
    commit = held.get("commit")
    source = printable_name(str(held.get("repo_id"))[:PROFILE_PATH_MAX]) + (
        f" (commit {printable_name(commit[:12])})" if isinstance(commit, str) else "")
    asked = ref.repo_id + (f" (revision {ref.revision})" if ref.revision is not None else "")
    did = "began to download (not finished)" if download_under_way(held) else "downloaded"
    if not (workdir / claimer).is_file():
        return None, (f"{workspace.suite_dir} held the suite profile {shown} {did} from {source}, whose "
                      f"file is gone; {profile.where} downloads {asked} there now"), True
    return (f"{profile.where}: {workspace.suite_dir} in the work folder {workdir} holds the suite profile "
            f"{shown} {did} from {source} ({workspace.owners_path}), which this profile's [reference] "
            f"repo_id {asked} would download over; set [reference] local_dir to a folder of its own for "
            "this suite (or give this profile its own [run] workdir)"), None, False


def _refusal(profile: Profile, workspace: Workspace, name: str, shown: str) -> str:
    """The line refusing ``profile`` the work folder whose ``name`` is profile ``shown``'s."""
    workdir, path = workspace.workdir, workspace.owners_path
    if profile.is_campaign:
        what = (f"the leaderboard and noise models of profile {shown} ({name}, named after the profile's "
                "file name, which is this one's too)")
        way = "its own [run] workdir or another file name"
    else:
        what = (f"the run of profile {shown} ({name}, candidate/, compare/, capture/), which this "
                "profile's would mix with or write over")
        way = "its own [run] workdir"
    return f"{profile.where}: the work folder {workdir} holds {what} ({path}); give this profile {way}"
