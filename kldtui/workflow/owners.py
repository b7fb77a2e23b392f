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

The first profile to run there claims its file (:func:`claim`, while the run holds the work folder's
lock): ``profiles.json`` records the file's name and the profile's path relative to the work folder
(so a project folder moved whole keeps its owners). Another profile is refused, one line naming both
(:func:`owner_problem`, said before any server starts), and asked for a work folder of its own. A
profile whose recorded file is gone (renamed or deleted) hands its files over, with a notice. Profiles
read from no file (built in code) claim nothing. A folder of earlier versions, which recorded no
owners, is claimed by the first profile to run there again.
"""

from __future__ import annotations

import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.events import EventSink, Notice, StageName
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.names import name_problem
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


def _shown(profile_path: Path, workdir: Path) -> str:
    """The profile's path as ``profiles.json`` records it: relative to the work folder."""
    return os.path.relpath(profile_path.resolve(), workdir.resolve())


def load_owners(path: Path) -> dict[str, str]:
    """The owners ``profiles.json`` at ``path`` records (file name -> profile path relative to the
    folder); empty when there is none. BadInput, one line naming the file, for one kldtui did not write
    (a link, a FIFO, not JSON, too large, another format, a name that is not a plain one, a path that
    is not one line)."""
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_symlink():
        raise BadInput(f"{path}: a link holds the profiles record's name; {REMEDY}")
    doc = read_json(path, what="profiles record", remedy=REMEDY, limit=PROFILES_LIMIT)
    owners = doc.get("owners") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != PROFILES_FORMAT or not isinstance(owners, dict):
        raise BadInput(f"{path}: not a kldtui profiles record (format {PROFILES_FORMAT} with its owners); "
                       f"{REMEDY}")
    for name, owner in owners.items():
        problem = name_problem(name)
        if problem is None:
            problem = one_line_problem(owner, PROFILE_PATH_MAX)
            problem = f"its profile {problem}" if problem is not None else None
        if problem is not None:
            raise BadInput(f"{path}: the owner of {printable_name(name)!r} {problem}; {REMEDY}")
    return owners


def owner_problem(profile: Profile, workspace: Workspace) -> str | None:
    """One line when another profile, still there, owns what ``profile`` would write in the work folder
    (see the module docstring); None when no profile does, this one does, or the owner's file is gone."""
    return _check(profile, workspace)[0]


def claim(profile: Profile, workspace: Workspace, emit: EventSink, stage: StageName) -> None:
    """Record ``profile`` as the owner of its files in its work folder (the caller holds the folder's
    lock); BadInput (:func:`owner_problem`'s line) when another profile owns them. A gone owner's files
    are handed over with a notice."""
    problem, owners, gone = _check(profile, workspace)
    if problem is not None:
        raise BadInput(problem)
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    me = _shown(profile.path, workdir)
    if owners.get(name) == me:
        return
    if gone is not None:
        shown = printable_name(os.path.normpath(workdir.resolve() / gone))
        emit(Notice(stage, f"{path}: {name} was profile {shown}'s, whose file is gone; it is "
                           f"{profile.where}'s now", level="warning"))
    workdir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"format": PROFILES_FORMAT, "owners": {**owners, name: me}})


def _check(profile: Profile, workspace: Workspace) -> tuple[str | None, dict[str, str], str | None]:
    """(the refusal or None, the recorded owners, the recorded owner whose file is gone or None)."""
    name = owned_file(profile, workspace)
    if name is None or profile.path is None:
        return None, {}, None
    workdir, path = workspace.workdir, workspace.owners_path
    assert workdir is not None
    owners = load_owners(path)
    owner = owners.get(name)
    if owner is None or owner == _shown(profile.path, workdir):
        return None, owners, None
    if not (workdir / owner).is_file():
        return None, owners, owner
    shown = printable_name(os.path.normpath(workdir.resolve() / owner))
    if profile.is_campaign:
        what = (f"the leaderboard and noise models of profile {shown} ({name}, named after the profile's "
                "file name, which is this one's too)")
        way = "its own [run] workdir or another file name"
    else:
        what = (f"the run of profile {shown} ({name}, candidate/, compare/, capture/), which this "
                "profile's would mix with or write over")
        way = "its own [run] workdir"
    return (f"{profile.where}: the work folder {workdir} holds {what} ({path}); give this profile {way}"
            ), owners, None
