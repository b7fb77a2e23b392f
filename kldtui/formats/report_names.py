"""Display names of comparison reports: short, and unique when several are shown together.

Light on purpose (standard library only): the viewer imports it at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kldtui.formats.untrusted_json import printable_name
from kldtui.metrics.interval_windows import MIN_INTERVAL_WINDOWS
from kldtui.text import plural

if TYPE_CHECKING:
    from kldtui.formats.report_model import Bootstrap, ComparisonReport, HeadlineInterval

# A campaign's candidates are finalized into WORKDIR/candidates/NAME (kldtui.workspace): the
# folder's name is the candidate's, which report_name shows.
CAMPAIGN_FOLDER = "candidates"


# The report every kldtui run writes into its work folder (`kldtui view DIR`, `kldtui leaderboard DIR`
# and `o` find it there: folder_reports).
REPORT_FILE_NAME = "comparison.json"
# The finalized folder every kldtui run writes inside its work folder (kldtui.workspace uses it):
# as a report's name it would call every report "candidate", so the work folder names it instead.
CANDIDATE_FOLDER = "candidate"


def report_name(report: ComparisonReport, path: str | os.PathLike[str] | None = None) -> str:
    """The candidate folder's name (its work folder's, for a run's ``WORKDIR/candidate``), else
    the report file's stem, else ``candidate``."""
    cand = report.candidate_dir
    if cand is not None and cand.strip("/\\"):
        folder = Path(cand.rstrip("/\\"))
        if folder.name == CANDIDATE_FOLDER and folder.parent.name:
            return printable_name(folder.parent.name)
        return printable_name(folder.name)
    if path is not None:
        return printable_name(Path(path).stem)  # a file name in a shared folder: no loader checked it
    return CANDIDATE_FOLDER


# A campaign writes one report per candidate into its work folder: comparison-NAME.json
# (kldtui.workspace), the leader's repeat capture's in repeat/.
CAMPAIGN_REPORT_PREFIX = "comparison-"
CAMPAIGN_REPORT_GLOB = f"{CAMPAIGN_REPORT_PREFIX}*.json"
# A campaign's final ranking, beside its reports (kldtui.workspace): its rows name the candidates the
# campaign ranked, which `kldtui leaderboard DIR` ranks (folder_reports). One per profile, so that
# profiles sharing a work folder (kldtui demo, demo --score, demo --hidden) keep theirs:
# leaderboard_file_name.
LEADERBOARD_PREFIX = "leaderboard"
# the profile kldtui.toml's, and the one file of every profile in folders of earlier versions
LEADERBOARD_FILE_NAME = f"{LEADERBOARD_PREFIX}.json"
LEADERBOARD_GLOB = f"{LEADERBOARD_PREFIX}*.json"
# bytes of a leaderboard.json read: a row of a few KB per candidate ranked; a larger file is refused
# (or, where only the names it ranks are looked for, not used) rather than read into memory
LEADERBOARD_LIMIT = 16 * 1024 * 1024


# A campaign's measured noise model, beside its reports (kldtui.workspace): one file per reference
# suite, named after the suite (noise_model_file_name), so that profiles of other suites in one work
# folder (kldtui demo and kldtui demo --hidden) keep theirs; `kldtui view DIR` and `kldtui leaderboard
# DIR` judge ties with the one of their reports' suite, as the campaign's leaderboard.json does.
NOISE_MODEL_PREFIX = "noise-model"
# the one model of a folder written by earlier versions, whatever its suite: still read where it
# records the reports' suite
NOISE_MODEL_FILE_NAME = f"{NOISE_MODEL_PREFIX}.json"
NOISE_MODEL_GLOB = f"{NOISE_MODEL_PREFIX}*.json"
# hex digits of the suite's token hash in the name: as unique as a suite's hash needs among a
# folder's few suites; the file records the whole hash, which decides (other_suite)
NOISE_MODEL_HASH_DIGITS = 16
# bytes of a noise model read (kldtui.decide.noise; here, for the suite it records): a few rows of
# numbers per window (one per capture), well under 1 MB for 1,024 windows of 10 captures; a larger file
# is refused, naming it, rather than read into memory
NOISE_MODEL_LIMIT = 64 * 1024 * 1024


def leaderboard_file_name(profile: str | None = None) -> str:
    """The name of the leaderboard of the campaign of profile ``profile`` (kldtui.workspace.profile_key:
    None for kldtui.toml's, ``leaderboard.json``; else ``leaderboard-PROFILE.json``)."""
    return f"{LEADERBOARD_PREFIX}-{profile}.json" if profile else LEADERBOARD_FILE_NAME


def noise_model_file_name(suite_hash: str | None, profile: str | None = None) -> str:
    """The name of the noise model of the suite whose token hash is ``suite_hash`` that the campaign of
    profile ``profile`` measures (kldtui.workspace.profile_key): ``noise-model-HASH.json`` for
    kldtui.toml's, ``noise-model-PROFILE-HASH.json`` for another's; without a suite (a report that
    records none), ``noise-model.json`` (``noise-model-PROFILE.json``), as earlier versions named it."""
    parts = [NOISE_MODEL_PREFIX]
    if profile:
        parts.append(profile)
    if suite_hash:
        parts.append(suite_hash[:NOISE_MODEL_HASH_DIGITS])
    return "-".join(parts) + ".json"


def _named_for_suite(model: Path, suite_hash: str | None) -> bool:
    """Whether ``model``'s name is that of a noise model of the suite ``suite_hash``, whichever
    profile's (:func:`noise_model_file_name`)."""
    if not suite_hash:
        return False
    name = model.name
    tail = f"-{suite_hash[:NOISE_MODEL_HASH_DIGITS]}.json"
    return name.startswith(f"{NOISE_MODEL_PREFIX}-") and name.endswith(tail)


def other_suite(recorded: str | None, suite_hash: str | None) -> bool:
    """Whether a noise model that records the suite hash ``recorded`` was measured on another suite
    than reports of ``suite_hash``: the one rule for every reader (``--noise``, a folder's model, a
    campaign's earlier one). Unknown on either side is not another suite (the reports' own check
    decides what they can be compared with)."""
    return bool(recorded and suite_hash and recorded != suite_hash)


def recorded_suite(model: Path) -> str | None:
    """The suite token hash the noise model file ``model`` records; None when it records none or
    cannot be read (its loader then says what is wrong with it)."""
    from kldtui.errors import BadInput
    from kldtui.formats.untrusted_json import read_json

    try:
        doc = read_json(model, what="noise model", remedy="", limit=NOISE_MODEL_LIMIT)
    except BadInput:
        return None
    value = doc.get("suite_token_hash_sha256") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def regular_files(folder: Path, pattern: str) -> list[Path]:
    """The files of ``folder`` matching ``pattern``, sorted: regular files only, not links (a link or a
    FIFO another tool left in a shared folder is none of kldtui's files)."""
    return sorted(f for f in folder.glob(pattern) if f.is_file() and not f.is_symlink())


def campaign_noise_model(path: str | os.PathLike[str], suite_hash: str | None) -> FolderNoise:
    """The noise models of the campaign work folder ``path`` for reports of the suite ``suite_hash``:
    its models named for that suite (``noise-model-HASH.json``, ``noise-model-PROFILE-HASH.json``: one
    per profile, :func:`noise_model_file_name`), else (a folder of earlier versions) its
    ``noise-model.json``, each only where the file does not record another suite (:func:`other_suite`);
    when none is, the folder's models of other suites, which are never used (said:
    :meth:`FolderNoise.words`). Two profiles' models of one suite are two models: which of them ranks
    the folder's reports would be a guess (:attr:`FolderNoise.model`). Regular files only, not links.
    Nothing for a report file, a run's folder, or a campaign without a model."""
    p = Path(path).expanduser()
    if not p.is_dir() or (p / REPORT_FILE_NAME).is_file() or not any(p.glob(CAMPAIGN_REPORT_GLOB)):
        return FolderNoise()
    held = regular_files(p, NOISE_MODEL_GLOB)
    elsewhere = {m: other_suite(recorded_suite(m), suite_hash) for m in held}  # each file read once
    for named in ([m for m in held if _named_for_suite(m, suite_hash)],
                  [m for m in held if m.name == NOISE_MODEL_FILE_NAME]):
        ours = tuple(m for m in named if not elsewhere[m])
        if ours:
            return FolderNoise(ours)
    return FolderNoise(other_suites=tuple(m for m in held if elsewhere[m]))


@dataclass(frozen=True)
class FolderNoise:
    """The noise model that campaign folders bring to a leaderboard they are ranked on (``models``: the
    distinct ones of the reports' suite they hold, in the order they came; ``other_suites``: the ones
    they hold of another suite only, never used). The one rule, for ``kldtui view``/``leaderboard``/
    ``plot DIR`` and for the dashboard and viewer (a folder opened with ``o``, the dashboard's own
    campaign): unless the user chose one (``--noise FILE``, ``--no-noise-floor``), the folders' model
    when they hold one, and none when they hold different ones (which of them would be a guess)."""

    models: tuple[Path, ...] = ()
    other_suites: tuple[Path, ...] = ()

    @property
    def model(self) -> Path | None:
        return self.models[0] if len(self.models) == 1 else None

    def adding(self, models: Iterable[str | os.PathLike[str]],
               other_suites: Iterable[str | os.PathLike[str]] = ()) -> FolderNoise:
        """These and ``models`` (the same file, however its path is written, counts once), and the
        models of other suites ``other_suites``."""
        return FolderNoise(_distinct(self.models, models), _distinct(self.other_suites, other_suites))

    def joined(self, other: FolderNoise) -> FolderNoise:
        """These and what ``other`` (another folder's) brought."""
        return self.adding(other.models, other.other_suites)

    def words(self, shown: Callable[[Path], object] = str) -> str | None:
        """The line that says which model the folders chose, or that they chose none (None: they hold
        none). ``shown``: how a path is written (the viewer: relative to the current folder). The
        names come from a shared folder (any ``noise-model-*-HASH.json`` counts): each on one line,
        control characters escaped (:func:`printable_name`)."""
        def named(models: Iterable[Path]) -> str:
            return ", ".join(printable_name(str(shown(m))) for m in models)

        if self.model is not None:
            return f"noise model: {named([self.model])}, the campaign's"
        if self.models:
            return f"noise model: none; the folders hold {len(self.models)} ({named(self.models)})"
        if self.other_suites:
            return (f"noise model: none; {named(self.other_suites)} measured on another suite than the "
                    "reports', not used")
        return None


def _distinct(held: Iterable[Path], more: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    out = list(held)
    seen = {os.path.abspath(m) for m in out}
    for m in more:
        if os.path.abspath(m) not in seen:
            seen.add(os.path.abspath(m))
            out.append(Path(m))
    return tuple(out)


def folder_noise(paths: Iterable[str | os.PathLike[str]], suite_hash: str | None) -> FolderNoise:
    """:class:`FolderNoise` of the campaign folders among ``paths`` for reports of the suite
    ``suite_hash`` (:func:`campaign_noise_model`)."""
    found = FolderNoise()
    for p in paths:
        found = found.joined(campaign_noise_model(p, suite_hash))
    return found


@dataclass(frozen=True)
class FolderReports:
    """The reports a path names (:func:`folder_reports`), and the ``comparison-*.json`` of a campaign's
    folder that are not its candidates' (``left_out``, with the one reason, ``why``, for them all)."""

    reports: list[Path]
    left_out: list[Path] = field(default_factory=list)
    why: str = ""

    def left_out_words(self) -> str | None:
        """Which files were left out and why (``left out NAMES: WHY``); None: none."""
        if not self.left_out:
            return None
        names = ", ".join(printable_name(f.name) for f in self.left_out)
        return f"left out {names}: {self.why}"

    def left_out_line(self, path: str | os.PathLike[str]) -> str | None:
        """One line saying which files of the folder ``path`` were left out and why; None: none."""
        words = self.left_out_words()
        if words is None:
            return None
        return f"{path}: {words} (give a report's file by name to rank it anyway)"


def folder_reports(path: str | os.PathLike[str]) -> FolderReports:
    """The reports ``path`` names: a report file itself; a work folder's ``comparison.json``; a
    campaign's work folder: its candidates' ``comparison-NAME.json`` (by name). BadInput (one line)
    for a folder without any. Only regular files count (a link or a FIFO in a shared folder is not a
    report: kldtui.formats.report refuses to read one anyway).

    A campaign's folder is shared: another tool or person may leave a ``comparison-*.json`` there.
    Its candidates are the ones its state names: the rows of its ``leaderboard.json`` (the last
    ranking) and those with a folder in ``candidates/`` (:func:`_campaign_candidates`); the others are
    left out and
    named (:meth:`FolderReports.left_out_line`: every command and the dashboard's ``o`` that take a
    folder for its reports say it). A folder with neither is a plain folder of reports:
    every ``comparison-*.json``."""
    from kldtui.errors import BadInput

    p = Path(path).expanduser()
    if not p.is_dir():
        return FolderReports([p])
    inside = p / REPORT_FILE_NAME
    if inside.is_file() and not inside.is_symlink():
        return FolderReports([inside])
    found = regular_files(p, CAMPAIGN_REPORT_GLOB)
    if not found:
        raise BadInput(f"{path}: is a folder without a {REPORT_FILE_NAME} (a run's) or "
                       f"{CAMPAIGN_REPORT_GLOB} (a campaign's); give the path of a report JSON or of a work "
                       "folder that holds one")
    state = _campaign_candidates(p)
    if state is None:
        return FolderReports(found)
    names, why = state
    ours = [f for f in found if _candidate_of(f) in names]
    others = [f for f in found if f not in ours]
    if not ours:
        shown = ", ".join(printable_name(f.name) for f in others)
        raise BadInput(f"{path}: no report of the campaign's candidates is there ({shown}: {why}); give the "
                       "report files by name to rank them")
    return FolderReports(ours, others, why)


# hex digits of a suite's token hash that name it to the user: enough to tell a folder's few suites apart
SUITE_HASH_SHOWN = 12


def suite_groups(paths: Sequence[Path], suites: Sequence[str | None]) -> list[tuple[str, list[Path]]]:
    """The reports ``paths`` grouped by the suite token hash each records (``suites``, in the same
    order): one group per suite, in order of first appearance. The one rule for which reports rank
    together (a leaderboard pairs reports of one suite only), which every front end follows: ``kldtui
    view/leaderboard/plot DIR``, the viewer's ``o`` and the dashboard's ranking.

    A report that records no suite (the original comparator's, for one) joins no group: unknown is
    not another suite (:func:`other_suite`). It ranks beside the reports of the one suite the others
    record, and the pairing checks (reference, windows, positions) decide whether it can; beside
    several suites it is named apart (:func:`suite_groups_words`) and ranked with none of them."""
    groups: dict[str, list[Path]] = {}
    for path, suite in zip(paths, suites, strict=True):
        if suite:
            groups.setdefault(suite, []).append(path)
    return list(groups.items())


def unrecorded_suite(paths: Sequence[Path], suites: Sequence[str | None]) -> list[Path]:
    """The reports among ``paths`` that record no suite (``suites``, in the same order): the ones
    :func:`suite_groups` puts in no group."""
    return [path for path, suite in zip(paths, suites, strict=True) if not suite]


def suite_groups_words(groups: Sequence[tuple[str, Sequence[Path]]], unrecorded: Sequence[Path] = ()) -> str:
    """Each suite's reports in a few words (``suite 637ccebfffea: comparison-a.json, comparison-b.json;
    suite ...``), then those that record no suite (``unrecorded``: ``suite not recorded: old.json``),
    so that every report is named: the file names when all sit in one folder, else their paths."""
    everyone = [*(p for _, paths in groups for p in paths), *unrecorded]
    one_folder = len({os.path.abspath(p.parent) for p in everyone}) == 1

    def shown(p: Path) -> str:
        return printable_name(p.name if one_folder else str(p))

    named = [(f"suite {suite[:SUITE_HASH_SHOWN]}", paths) for suite, paths in groups]
    if unrecorded:
        named.append(("suite not recorded", unrecorded))
    return "; ".join(f"{what}: {', '.join(shown(p) for p in paths)}" for what, paths in named)


def rank_command(subcommand: str, paths: Sequence[Path]) -> str:
    """kldtui's ``subcommand`` (``view``, ``leaderboard``, ``plot -o chart.svg``: its words already
    written for the shell) given the reports ``paths``, to copy: kldtui named as it was started
    (:func:`kldtui.text.kldtui_command`: ``.venv/bin/kldtui`` where ``kldtui`` is not on PATH), each
    path quoted for a shell (:func:`kldtui.text.shell_arg`: a control character in ``$'...'``, which
    keeps it one line)."""
    from kldtui.text import kldtui_command, shell_arg

    return " ".join([kldtui_command(), subcommand, *(shell_arg(p) for p in paths)])


def _suites_line(where: str, paths: Sequence[Path], suites: Sequence[str | None],
                 subcommand: str) -> str | None:
    """``where`` (``DIR holds``) reports of several suites, each suite's named, and kldtui's
    ``subcommand`` given the first suite's (:func:`rank_command`); None when they record one suite or
    none."""
    groups = suite_groups(paths, suites)
    if len(groups) < 2:
        return None
    return (f"{where} reports of {len(groups)} suites, which no leaderboard ranks together "
            f"({suite_groups_words(groups, unrecorded_suite(paths, suites))}); rank one suite's: "
            f"{rank_command(subcommand, groups[0][1])}")


def mixed_suites_line(given: Sequence[str | os.PathLike[str]], paths: Sequence[Path],
                      suites: Sequence[str | None], subcommand: str) -> str | None:
    """One line for folders among ``given`` (a command's arguments) that bring reports (``paths``, of
    the suites ``suites``) of more than one suite, which no leaderboard ranks together (one work folder
    holds ``kldtui demo`` and ``kldtui demo --hidden``): each suite's reports (and those that record
    none) and kldtui's ``subcommand`` (``leaderboard``) given the first suite's, to copy
    (:func:`rank_command`). None when they are of one suite, or when no folder is among ``given``:
    files the user named are refused by the leaderboard itself, which says which belong together
    (:func:`kldtui.decide.reports.check_one_suite`)."""
    if not any(Path(g).expanduser().is_dir() for g in given):
        return None
    where = ", ".join(printable_name(str(g)) for g in given)
    return _suites_line(f"{where} {'holds' if len(given) == 1 else 'hold'}", paths, suites, subcommand)


def beside_board_line(opened: str | os.PathLike[str], paths: Sequence[Path], suites: Sequence[str | None],
                      board: Sequence[Path], board_suites: Sequence[str | None],
                      subcommand: str) -> str | None:
    """One line refusing the reports ``paths`` (of ``suites``) that ``o`` on ``opened`` brings beside a
    leaderboard of the reports ``board`` (of ``board_suites``), where they bring a suite none of the
    board's records: each suite's reports, the opened ones first, and kldtui's ``subcommand`` given
    theirs, as :func:`mixed_suites_line` says it of a folder. None when they may join it
    (:func:`suite_groups`: a board or reports that record no suite refuse nothing; a board already of
    several suites, which ranks untied, takes more reports of those)."""
    on_board = {suite for suite, _ in suite_groups(board, board_suites)}
    if not on_board or all(suite in on_board for suite, _ in suite_groups(paths, suites)):
        return None
    return _suites_line(f"{printable_name(str(opened))} and the leaderboard hold", [*paths, *board],
                        [*suites, *board_suites], subcommand)


def other_suites_note(groups: Sequence[tuple[str, Sequence[Path]]],
                      subcommand: str) -> tuple[str, str] | None:
    """The note above a ranking of one suite's reports (the dashboard's: its run's suite) saying that
    the reports of the other suites ``groups`` (:func:`suite_groups`) are left out: in full (how many,
    each suite's, and kldtui's ``subcommand`` given the first suite's, which ranks them) and in one
    short line (how many; the help has it in full). None when none is left out."""
    if not groups:
        return None
    count = plural(sum(len(paths) for _, paths in groups), "report")
    suites = "another suite" if len(groups) == 1 else f"{len(groups)} other suites"
    rank = "rank them" if len(groups) == 1 else "rank one suite's"
    return (f"left out: {count} of {suites} than this run's ({suite_groups_words(groups)}); "
            f"{rank}: {rank_command(subcommand, groups[0][1])}",
            f"{count} of {suites} left out: ? names them and how to rank them")


def _candidate_of(report: Path) -> str:
    return report.name.removeprefix(CAMPAIGN_REPORT_PREFIX).removesuffix(".json")


def _campaign_candidates(folder: Path) -> tuple[set[str], str] | None:
    """The candidates the campaign in ``folder`` names, and why a report of another name is not one;
    None when ``folder`` holds no campaign's state. Its state is what the campaign itself writes: the
    rows of its rankings (``leaderboard.json``, and ``leaderboard-PROFILE.json`` of each other profile
    sharing the folder: :func:`leaderboard_file_name`; written when a run ends) and its candidates'
    folders (``candidates/NAME``, made as each is captured), both: a run stopped before it ranked has
    compared candidates its last ranking does not hold yet."""
    names: set[str] = set()
    found = False
    for board in sorted(folder.glob(LEADERBOARD_GLOB)):  # each profile's (leaderboard_file_name)
        ranked = leaderboard_names(board)
        if ranked is not None:
            found = True
            names |= set(ranked)
    candidates = folder / CAMPAIGN_FOLDER
    if candidates.is_dir() and not candidates.is_symlink():
        found = True
        names |= {c.name for c in candidates.iterdir() if c.is_dir() and not c.is_symlink()}
    if not found:
        return None
    return names, (f"not a candidate of the campaign there (neither ranked in a {folder / LEADERBOARD_GLOB} "
                   f"nor with a {candidates}/NAME folder)")


def leaderboard_names(board: Path) -> list[str] | None:
    """The names a campaign's leaderboard file ``board`` ranks (its rows', best first); None when it is not a
    regular file or not a leaderboard (unreadable, too large, not JSON kldtui reads, without rows, or
    with a row that is not an object naming a candidate in text: a campaign writes none such, so such
    a file vouches for no report)."""
    from kldtui.errors import BadInput
    from kldtui.formats.untrusted_json import read_json

    if not board.is_file() or board.is_symlink():
        return None
    try:
        doc = read_json(board, what="leaderboard", remedy="run the campaign again", limit=LEADERBOARD_LIMIT)
    except BadInput:
        return None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    names = [r.get("name") if isinstance(r, dict) else None for r in rows]
    return [n for n in names if isinstance(n, str)] if all(isinstance(n, str) for n in names) else None


def unique_names(names: Sequence[str], paths: Sequence[str | os.PathLike[str] | None]) -> list[str]:
    """Names made unique by the shortest part of the report path that tells equal names apart.

    Three reports all named ``candidate`` in ``runs/a/comparison.json``, ``runs/b/...`` become
    ``candidate (a)``, ``candidate (b)``: the file name alone would not tell them apart.
    """
    out = list(names)
    for name in set(names):
        same = [i for i, n in enumerate(names) if n == name]
        if len(same) < 2:
            continue
        parts: dict[int, tuple[str, ...]] = {}
        for i in same:
            where = paths[i]
            parts[i] = Path(where).resolve().parts if where is not None else ()
        for level in range(1, max((len(p) for p in parts.values()), default=0) + 1):
            tags = {i: _tag(p, level) for i, p in parts.items()}
            if len(set(tags.values())) == len(same) and all(tags.values()):
                for i in same:
                    out[i] = f"{name} ({tags[i]})"
                break
    if len(set(out)) != len(out):
        out = [f"{n} #{i + 1}" for i, n in enumerate(out)]
    return out


def _tag(parts: tuple[str, ...], level: int) -> str:
    """Level 1: the report's folder; 2: its file stem; then the last ``level - 1`` folders."""
    if not parts:
        return ""
    stem = printable_name(Path(parts[-1]).stem)
    if level == 1:
        return printable_name(parts[-2]) if len(parts) > 1 else stem
    if level == 2:
        return stem
    return printable_name("/".join(parts[-level:-1]))


def report_interval(report: ComparisonReport) -> Bootstrap:
    """The one mean-KL interval of a report that every view shows (viewer, dashboard, leaderboard,
    diff): the report's own ``kl_window_cluster_bootstrap`` (estimate, ci95_low, ci95_high,
    standard_error, bootstrap_samples), exactly as the comparison wrote it. Recomputing it elsewhere
    with other resample counts is what made the viewer and the leaderboard disagree. Every report
    has one: loading checks it (kldtui.formats.report_model). (Verdicts use their own paired
    interval: kldtui.decide.verdict.)"""
    return report.kl_window_cluster_bootstrap


# -- intervals that rest on too few windows ------------------------------------------------------
# A window-clustered "95 %" interval from a handful of windows covers far less than 95 % of the
# time, and one window gives a zero-width interval: below MIN_INTERVAL_WINDOWS (the statistics' own
# count, kldtui.metrics.interval_windows) every view shows the estimate and says why there is no
# interval; this one helper is where every view asks.


def interval_rests_on_too_few(windows: int | None) -> bool:
    """True when an interval over ``windows`` windows is not to be shown as a 95 % interval
    (``None``: the count is not known, the interval is shown as the report gives it)."""
    return windows is not None and windows < MIN_INTERVAL_WINDOWS


def too_few_text(windows: int, short: bool = False, *, unit: str) -> str:
    """What a view shows instead of the interval: ``6 windows: too few for a 95 % interval, which
    needs 8``;
    ``short``: ``too few windows (6)`` for a table cell. ``unit``: what the windows are called
    (``window``, a hidden-state suite's ``context``: ``ComparisonReport.unit``)."""
    if short:
        return f"too few {unit}s ({windows})"
    return f"{plural(windows, unit)}: too few for a 95 % interval, which needs {MIN_INTERVAL_WINDOWS}"


def kl_headline_interval(report: ComparisonReport) -> HeadlineInterval:
    """The headline mean-KL interval of a report (docs/STATISTICS.md: the method chosen by simulation,
    with honest coverage; ``rests_on_too_few_windows`` when it should be marked, not headlined),
    computed from the report's own per-window mean KL (closed form, no resampling: every view gets the
    same figures). The copy a report stores (``kl_mean_interval``) is for other readers: a report from
    a shared folder does not vouch for its own interval (one edited to "[-5, 0.008]" was shown so), and
    one written by an earlier version gets today's method. :func:`report_interval` stays the original
    comparator's percentile bootstrap."""
    interval = headline_of(report.window_table().kl_mean, "kl_mean")
    assert interval is not None  # kl_mean is every report's
    return interval


def figure_headline_interval(report: ComparisonReport, name: str) -> HeadlineInterval | None:
    """The headline interval of figure ``name`` (the report's ``figures`` object), computed from its
    per-window values as :func:`kl_headline_interval` is; None when the report has no per-window values
    for it (then views fall back to its window bootstrap)."""
    values = report.window_table().figures.get(name)
    return None if values is None else headline_of(values, name)


def headline_of(values: Sequence[float | int | None], name: str) -> HeadlineInterval:
    """The headline interval of figure ``name`` over its per-window ``values``
    (:func:`kldtui.metrics.figures.window_headline`: held to the bounds the registry gives ``name``;
    none for a figure this version does not register); an end that overflowed stays infinite, which
    the views say in words (the compare stage writes it as null)."""
    from kldtui.formats.report_model import HeadlineInterval
    from kldtui.metrics.figures import get, window_headline  # here: the viewer starts without NumPy

    h = window_headline(values, get(name))
    return HeadlineInterval(h.estimate, h.low, h.high, h.method, h.windows, h.rests_on_too_few_windows,
                            h.measured_coverage)
