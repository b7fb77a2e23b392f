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

The first profile to run there claims its file (:func:`claim`, while the run holds the work folder's
lock): ``profiles.json`` records the file's name and the profile's path relative to the work folder
(so a project folder moved whole keeps its owners). Another profile is refused, one line naming both
(:func:`owner_problem`, said before any server starts), and asked for a work folder of its own. A
profile whose recorded file is gone (renamed or deleted) hands its files over, with a notice. With its
file, the profile records its suite's folder (relative to the work folder) for each part it writes that
is one suite's; a profile of another suite folder is refused it the same way (for a candidate: or
asked to name it otherwise), unless the recorded folder holds no suite any more (moved or deleted:
the part changes hands, with a notice). A profile's dashboard, opened before any run, reads the record
too (:func:`view_problem`): where the profile's run would be refused it says that line and shows none of
the folder's run as the profile's. Profiles read from no file (built in code) claim nothing. A
folder of earlier versions, which recorded no owners, is claimed by the first profile to run there
again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kldtui.errors import BadInput, KldError
from kldtui.events import EventSink, Notice, StageName
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.names import name_problem
from kldtui.formats.suite import suite_manifest_path
from kldtui.formats.untrusted_json import one_line_problem, printable_name, read_json
from kldtui.workflow.profile import Profile
from kldtui.workspace import Workspace

PROFILES_FORMAT = "kldtui-profiles-v1"
# bytes of profiles.json read: a line of a few hundred bytes per profile sharing the folder
PROFILES_LIMIT = 1024 * 1024
# characters of a recorded profile path (relative to the work folder)
PROFILE_PATH_MAX = 4096
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
class Record:
    """What ``profiles.json`` records: the owners (file name -> profile path) and the suites (name of a
    part that is one suite's -> the suite folder), each path relative to the work folder."""

    owners: dict[str, str] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)


def load_record(path: Path) -> Record:
    """The record ``profiles.json`` at ``path`` holds; empty when there is none. BadInput, one line
    naming the file, for one kldtui did not write (a link, a FIFO, not JSON, too large, another format,
    a name that is not a plain one, a path that is not one line)."""
    if not path.exists() and not path.is_symlink():
        return Record()
    if path.is_symlink():
        raise BadInput(f"{path}: a link holds the profiles record's name; {REMEDY}")
    doc = read_json(path, what="profiles record", remedy=REMEDY, limit=PROFILES_LIMIT)
    owners = doc.get("owners") if isinstance(doc, dict) else None
    suites = doc.get("suites", {}) if isinstance(doc, dict) else None
    if (not isinstance(doc, dict) or doc.get("format") != PROFILES_FORMAT or not isinstance(owners, dict)
            or not isinstance(suites, dict)):
        raise BadInput(f"{path}: not a kldtui profiles record (format {PROFILES_FORMAT} with its owners); "
                       f"{REMEDY}")
    for name, owner in [*owners.items(), *suites.items()]:
        problem = name_problem(name)
        if problem is None:
            problem = one_line_problem(owner, PROFILE_PATH_MAX)
            problem = f"its {'profile' if name in owners else 'suite'} {problem}" if problem is not None \
                else None
        if problem is not None:
            raise BadInput(f"{path}: the owner of {printable_name(name)!r} {problem}; {REMEDY}")
    return Record(owners, suites)


def owner_problem(profile: Profile, workspace: Workspace) -> str | None:
    """One line when another profile, still there, owns what ``profile`` would write in the work folder,
    or a part of it ``profile`` would write is another suite's (see the module docstring); None when
    none is, or the owner's file or the suite is gone."""
    return _check(profile, workspace)[0]


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


def claim(profile: Profile, workspace: Workspace, emit: EventSink, stage: StageName) -> None:
    """Record ``profile`` as the owner of its files in its work folder, and its suite as the one of the
    parts it writes that are one suite's (the caller holds the folder's lock); BadInput
    (:func:`owner_problem`'s line) when another profile owns them or another suite's are there. A gone
    owner's files, a gone suite's parts, are handed over with a notice."""
    problem, record, handed = _check(profile, workspace)
    if problem is not None:
        raise BadInput(problem)
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    me, suite = _shown(profile.path, workdir), _shown(workspace.suite_dir, workdir)
    owners = {**record.owners, name: me}
    suites = {**record.suites, **dict.fromkeys(suite_parts(profile, workspace), suite)}
    if owners == record.owners and suites == record.suites:
        return
    for line in handed:
        emit(Notice(stage, f"{path}: {line}", level="warning"))
    workdir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"format": PROFILES_FORMAT, "owners": owners,
                             **({"suites": suites} if suites else {})})


def _check(profile: Profile, workspace: Workspace) -> tuple[str | None, Record, list[str]]:
    """(the refusal or None, the record, what is handed over: a line for each gone owner or suite)."""
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return None, Record(), []
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    record = load_record(path)
    handed: list[str] = []
    owner = record.owners.get(name)
    if owner is not None and owner != _shown(profile.path, workdir):
        shown = _printed(owner, workdir)
        if (workdir / owner).is_file():
            return _refusal(profile, workspace, name, shown), record, []
        handed.append(f"{name} was profile {shown}'s, whose file is gone; it is {profile.where}'s now")
    suite = _shown(workspace.suite_dir, workdir)
    for part, (what, way) in suite_parts(profile, workspace).items():
        recorded = record.suites.get(part)
        if recorded is None or recorded == suite:
            continue
        shown = _printed(recorded, workdir)
        if not suite_manifest_path(workdir / recorded).is_file():
            handed.append(f"{part} was suite {shown}'s, which is gone; it is suite {workspace.suite_dir}'s "
                          "now")
            continue
        return (f"{profile.where}: the work folder {workdir} holds {what} of suite {shown} ({path}), "
                f"which this profile's suite {workspace.suite_dir} would write over; {way}"), record, []
    return None, record, handed


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
