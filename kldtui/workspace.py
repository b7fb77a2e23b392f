"""Every path of a run, in one place.

A :class:`Workspace` is built once (from a profile: ``Profile.workspace()``, or from the flags of
a single-stage command) and handed to the stage drivers, the pipeline and the dashboard; nothing
else joins work-folder paths. Layout of a profile's work folder (``[run] workdir``)::

    workdir/
      .kldtui.lock                  held while a run writes into the folder
      server.log                    the server's output, appended across starts
      reference/                    the suite when the profile names no [reference] local_dir
        suite-manifest.json, tokens/, ref/ (the reference logits, ``[reference] logits_dir``)
      capture/
        server-NNN/                 VLLM_KLD_CAPTURE_DIR of one server start (fresh each time)
        <run_name>/window-NNN-DOMAIN-chunks/    captured chunks, one folder per window
        capture-<run_name>.json     capture records (docs/FORMATS.md), the resume point of capture
      candidate/                    finalized logits_NNN.safetensors + manifest.json
                                    (score mode: scores_NNN.safetensors + scores-manifest.json)
      compare/window-NNN.json       per-window compare results (reused when inputs match)
      comparison.json               the report (docs/REPORT.md)
      candidates/NAME/              a campaign's candidate NAME ([[candidates]]): its finalized
                                    folder; its capture run is capture/NAME/, its compare cache
                                    compare/NAME/, its report comparison-NAME.json
      repeat/NAME/                  the repeat capture of the campaign's leader NAME, its cache in
                                    repeat/NAME-compare/ and its report repeat/comparison-NAME.json
      noise-model-HASH.json         the noise model measured from that repeat (kldtui noise's format),
                                    one per reference suite (HASH: the start of its token hash) and
                                    profile: kldtui.toml's; another profile PROFILE.toml sharing the
                                    folder writes noise-model-PROFILE-HASH.json, so each keeps its
                                    own; earlier versions wrote noise-model-HASH.json for every
                                    profile, and before that one noise-model.json, both still read
                                    where they hold the profile's own two captures of the suite
      leaderboard.json              the campaign's leaderboard (kldtui leaderboard --json's format):
                                    kldtui.toml's; another profile's is leaderboard-PROFILE.json
                                    (earlier versions wrote leaderboard.json for every profile, still
                                    read where it ranks the profile's own candidates)
      reference-run/                the reference capture ([reference] capture: a workspace of its
                                    own whose finalized folder is the suite's ref/)
      profiles.json                 which profile owns the single-candidate run (comparison.json, with
                                    candidate/, compare/, capture/<run_name>) and which each leaderboard
                                    file (with its noise models); which suite reference-run/ and each
                                    campaign candidate's run are; which profile downloaded into
                                    reference/ (or another suite folder) and whose windows each
                                    candidate's report covers: kldtui.workflow.owners

Several profiles may share one work folder (``kldtui demo``, ``demo --score`` and ``demo --hidden``
do): a suite they name alike, server.log (each server start's lines, appended), capture/server-NNN (a
fresh one per start) and the lock are shared; the leaderboard and noise model are each profile's own
(above); a campaign candidate's folders and report are named after the candidate, so profiles that
share a folder give their candidates names of their own (the demos do: ``fine``, ``fine-score``,
``fine-hidden``; a capture of another mode or server under the same name is refused, not overwritten,
and so is a campaign of another suite naming a candidate alike, before any work, or of the same suite
over other windows: one report covers one run's windows). ``reference-run/`` is one suite's: the
profiles of that suite share it, one of another suite that captures its reference is refused before any
work. ``reference/`` is one download's: every profile that downloads its suite without a ``local_dir``
names it, and one that would download another repository or revision there than the profile that did is
refused before any download (it sets a ``local_dir`` of its own).
A single-candidate profile's run (``comparison.json``, ``candidate/``, ``compare/``, ``capture/<run_name>``)
is one profile's: another single-candidate profile (another suite, other windows, another run name) is
refused before any work, as is a campaign whose profile's file name is another's there (``a/kldtui.toml``,
``b/kldtui.toml``: one ``leaderboard.json``); ``profiles.json`` records the owners.

A workspace built from flags has only the paths its command needs; asking for another one is a
programming error (:class:`ValueError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from kldtui.folder_lock import lock_path_for_folder
from kldtui.formats.report_names import (
    CAMPAIGN_REPORT_PREFIX,
    LEADERBOARD_FILE_NAME,
    NOISE_MODEL_FILE_NAME,
    REPORT_FILE_NAME,
    leaderboard_file_name,
    noise_model_file_name,
    regular_files,
)
from kldtui.formats.suite import SUITE_MANIFEST, logits_manifest_path, suite_manifest_path

StrPath = str | os.PathLike[str]
DEFAULT_PROFILE = "kldtui.toml"  # the profile a command reads when --profile is not given
DEMO_SCORE_PROFILE = "kldtui-score.toml"  # kldtui demo --score: the score-mode demo's profile
DEMO_HIDDEN_PROFILE = "kldtui-hidden.toml"  # kldtui demo --hidden: the hidden-state demo's profile
DEMO_HIDDEN_SUITE = "suite-hidden"  # and its suite of contexts (hidden states and LM head, no logits)
# the leader's repeat capture is the run NAME + this (its capture folder and records, its row in the
# ranking): no candidate may be named so
REPEAT_SUFFIX = ".repeat"
# a profile's key made of a name that is not a plain one (profile_key): its safe form, cut to these
# characters, and these hex digits of the name's SHA-256
PROFILE_KEY_MAX = 64
PROFILE_KEY_HASH_DIGITS = 8
# which profile owns a profile's own files in a work folder profiles share (kldtui.workflow.owners)
PROFILES_FILE_NAME = "profiles.json"


def profile_key(profile_path: StrPath | None) -> str | None:
    """What names a profile's own files in a work folder it may share with other profiles (its
    leaderboard and noise model): its file name without ``.toml``; None for ``kldtui.toml`` (whose
    files keep the plain names, ``leaderboard.json``) and for a profile read from no file.

    The key becomes part of file names in a shared folder, which the views print: a file name that is
    not a plain name (:func:`kldtui.formats.names.name_problem`: a space, a control character, a
    letter outside ASCII, ``..``, empty as in ``.toml``, or over-long) gives the plain name
    :func:`~kldtui.formats.names.safe_name` makes of it and the start of the name's SHA-256, so that
    two such profiles (``ü.toml``, ``é.toml``) still keep files of their own."""
    import hashlib

    from kldtui.formats.names import name_problem, safe_name

    if profile_path is None:
        return None
    name = Path(profile_path).name
    if name == DEFAULT_PROFILE:
        return None
    key = name.removesuffix(".toml")
    if name_problem(key) is None:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:PROFILE_KEY_HASH_DIGITS]
    return f"{safe_name(key)[:PROFILE_KEY_MAX]}-{digest}"


@dataclass(frozen=True)
class Workspace:
    """The paths of one run (see the module docstring for the layout)."""

    suite_dir: Path
    reference_dir: Path | None = None  # the reference logits (ref/ with manifest.json)
    capture_root: Path | None = None  # holds the run folder and its capture records
    run_name: str = "candidate"
    candidate_dir: Path | None = None  # the finalized folder this run writes
    compare_dir: Path | None = None  # per-window compare cache; None: no cache
    report_path: Path | None = None
    workdir: Path | None = None  # None for single-stage commands (no work folder)
    # a campaign's repeat capture: the leader's finalized folder (the same model served again; its
    # exported LM head is reused, kldtui.stages.candidate_head)
    same_model_as: Path | None = None
    # the profile whose campaign this is (profile_key): names its leaderboard and noise model
    profile: str | None = None

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def for_suite(cls, suite_dir: StrPath, logits_dir: str = "ref") -> Workspace:
        """``kldtui download``/``verify``: a suite folder and its reference logits."""
        suite = Path(suite_dir)
        return cls(suite_dir=suite, reference_dir=suite / logits_dir)

    @classmethod
    def for_capture(cls, suite_dir: StrPath, capture_dir: StrPath, run_name: str,
                    candidate_dir: StrPath | None = None) -> Workspace:
        """``kldtui capture`` / ``kldtui finalize``: ``--capture-dir/--run-name`` (+ ``--output-dir``).
        The run name becomes a folder name: BadInput unless it is a plain name."""
        from kldtui.formats.names import check_name

        check_name(run_name, "run name (--run-name)", str(capture_dir))
        return cls(suite_dir=Path(suite_dir), capture_root=Path(capture_dir), run_name=run_name,
                   candidate_dir=Path(candidate_dir) if candidate_dir is not None else None)

    @classmethod
    def for_compare(cls, suite_manifest: StrPath, reference_dir: StrPath,
                    candidate_dir: StrPath, report_path: StrPath | None = None) -> Workspace:
        """``kldtui compare``: ``--suite-manifest`` (the file or its folder), the two logits folders
        and ``--output`` (None: the report is only returned)."""
        suite = Path(suite_manifest)
        suite_dir = suite.parent if suite.name == SUITE_MANIFEST or suite.is_file() else suite
        return cls(suite_dir=suite_dir, reference_dir=Path(reference_dir), candidate_dir=Path(candidate_dir),
                   report_path=Path(report_path) if report_path is not None else None)

    def reference_capture(self) -> Workspace:
        """The reference capture's own work folder (``[reference] capture``); it finalizes into the
        suite's ref/."""
        root = self._need(self.workdir, "workdir") / "reference-run"
        return Workspace(suite_dir=self.suite_dir, reference_dir=self.reference_dir,
                         capture_root=root / "capture", run_name="reference",
                         candidate_dir=self.reference_dir, compare_dir=root / "compare",
                         report_path=root / REPORT_FILE_NAME, workdir=root)

    def for_candidate(self, name: str) -> Workspace:
        """Campaign candidate ``name``'s folders in this work folder (see the layout above): the
        finalized folder is named after the candidate, so its report shows that name."""
        from kldtui.formats.names import check_name
        from kldtui.formats.report_names import CAMPAIGN_FOLDER

        workdir = self._need(self.workdir, "workdir")
        check_name(name, "candidate name", str(workdir))
        return replace(self, run_name=name, candidate_dir=workdir / CAMPAIGN_FOLDER / name,
                       compare_dir=workdir / "compare" / name,
                       report_path=workdir / f"{CAMPAIGN_REPORT_PREFIX}{name}.json")

    def repeat_of(self, name: str) -> Workspace:
        """The repeat capture of campaign candidate ``name`` (the measured noise model's second
        capture): a run of its own, kept out of the leaderboard's ``comparison*.json``."""
        base = self.for_candidate(name)
        root = self._need(self.workdir, "workdir") / "repeat"
        return replace(base, run_name=f"{name}{REPEAT_SUFFIX}", candidate_dir=root / name,
                       compare_dir=root / f"{name}-compare",
                       report_path=root / f"{CAMPAIGN_REPORT_PREFIX}{name}.json",
                       same_model_as=base.candidate_dir)

    def noise_model_path(self, suite_hash: str | None) -> Path:
        """``noise-model-HASH.json`` (``noise-model-PROFILE-HASH.json``): the campaign's measured noise
        model of the suite whose token hash is ``suite_hash`` (one per suite and profile: other
        profiles in one work folder keep theirs)."""
        return self._need(self.workdir, "workdir") / noise_model_file_name(suite_hash, self.profile)

    def earlier_noise_model_paths(self, suite_hash: str | None) -> list[Path]:
        """The noise models earlier versions wrote where this campaign's :meth:`noise_model_path` is
        now, in the order they are read: ``noise-model-HASH.json`` (every profile's, when they were
        named by suite only), then ``noise-model.json`` (the one model, whatever its suite)."""
        workdir = self._need(self.workdir, "workdir")
        names = dict.fromkeys((noise_model_file_name(suite_hash), NOISE_MODEL_FILE_NAME))
        names.pop(noise_model_file_name(suite_hash, self.profile), None)
        return [workdir / name for name in names]

    @property
    def leaderboard_path(self) -> Path:
        """``leaderboard.json`` (``leaderboard-PROFILE.json``): the campaign's leaderboard."""
        return self._need(self.workdir, "workdir") / leaderboard_file_name(self.profile)

    @property
    def earlier_leaderboard_path(self) -> Path | None:
        """``leaderboard.json``, which earlier versions wrote for every profile, where this campaign's
        :attr:`leaderboard_path` is another name now (None: it is the same)."""
        earlier = self._need(self.workdir, "workdir") / LEADERBOARD_FILE_NAME
        return None if earlier == self.leaderboard_path else earlier

    @property
    def owners_path(self) -> Path:
        """``profiles.json``: which profile owns the files a profile keeps as its own here
        (kldtui.workflow.owners)."""
        return self._need(self.workdir, "workdir") / PROFILES_FILE_NAME

    def reference_repeat(self) -> Workspace:
        """A repeat capture of the reference's first window (the runtime's own noise), beside it."""
        base = self.reference_capture()
        root = self._need(base.workdir, "workdir")
        return replace(base, run_name="reference-repeat", candidate_dir=root / "repeat",
                       compare_dir=root / "repeat-compare", report_path=root / "repeat-noise.json")

    @property
    def suite_capture_records(self) -> Path:
        """``capture-reference.json`` at the suite root (the published layout)."""
        return self.suite_dir / "capture-reference.json"

    def repeat_noise_path(self, window_index: int) -> Path:
        """``repeat-noise-windowNNN.json`` at the suite root: a repeat capture's comparison."""
        return self.suite_dir / f"repeat-noise-window{window_index:03d}.json"

    def with_candidate_dir(self, candidate_dir: StrPath) -> Workspace:
        return replace(self, candidate_dir=Path(candidate_dir))

    # -- the suite and the reference ------------------------------------------------------------
    @property
    def suite_manifest(self) -> Path:
        return suite_manifest_path(self.suite_dir)

    @property
    def reference(self) -> Path:
        """The reference logits folder (asks for it: a flag-built workspace may lack it)."""
        return self._need(self.reference_dir, "reference_dir")

    @property
    def reference_manifest(self) -> Path:
        return logits_manifest_path(self.reference)

    # -- capture --------------------------------------------------------------------------------
    @property
    def captures(self) -> Path:
        return self._need(self.capture_root, "capture_root")

    @property
    def run_dir(self) -> Path:
        """``capture/<run_name>``: the run folder holding one chunk folder per window."""
        return self.captures / self.run_name

    @property
    def records_path(self) -> Path:
        """``capture/capture-<run_name>.json``: the capture records."""
        return self.captures / f"capture-{self.run_name}.json"

    def chunk_dir(self, chunk_dir_name: str) -> Path:
        """A window's chunk folder in the run folder (``WindowSpec.chunk_dir_name``)."""
        return self.run_dir / chunk_dir_name

    def finalized_marker(self, chunk_dir_name: str) -> Path:
        """``capture/<run_name>/<chunk folder>.finalized.json``: where finalize says which file a
        window's chunks became before it deletes them (a rerun of the capture skips the window)."""
        return self.run_dir / f"{chunk_dir_name}.finalized.json"

    def server_capture_dir(self, number: int) -> Path:
        """``capture/server-NNN``: VLLM_KLD_CAPTURE_DIR of the NNN-th server start."""
        return self.captures / f"server-{number:03d}"

    def fresh_server_capture_dir(self) -> Path:
        """The first ``capture/server-NNN`` that does not exist or is empty (created parent)."""
        self.captures.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            candidate = self.server_capture_dir(n)
            if not candidate.exists() or not any(candidate.iterdir()):
                return candidate
            n += 1

    # -- finalize and compare -------------------------------------------------------------------
    @property
    def candidate(self) -> Path:
        """The finalized folder this run writes (and compare reads)."""
        return self._need(self.candidate_dir, "candidate_dir")

    @property
    def candidate_manifest(self) -> Path:
        return logits_manifest_path(self.candidate)

    @property
    def keeps_reference(self) -> bool:
        """This run finalizes into the reference's folder (:meth:`reference_capture`)."""
        return self.candidate_dir is not None and self.candidate_dir == self.reference_dir

    @property
    def campaign_candidate(self) -> bool:
        """This run is a campaign candidate's (:meth:`for_candidate`): its folders carry its name."""
        from kldtui.formats.report_names import CAMPAIGN_FOLDER

        return (self.candidate_dir is not None and self.workdir is not None
                and self.candidate_dir.parent == self.workdir / CAMPAIGN_FOLDER)

    def compare_cache(self, window_index: int) -> Path | None:
        """``compare/window-NNN.json`` (None: this workspace keeps no per-window cache)."""
        if self.compare_dir is None:
            return None
        return self.compare_dir / f"window-{window_index:03d}.json"

    @property
    def report(self) -> Path:
        return self._need(self.report_path, "report_path")

    # -- the work folder ------------------------------------------------------------------------
    @property
    def server_log(self) -> Path | None:
        """The server's log (None without a work folder: the log is only shown)."""
        return self.workdir / "server.log" if self.workdir is not None else None

    @property
    def lock_path(self) -> Path | None:
        """The lock file a writing run holds (None without a work folder)."""
        return lock_path_for_folder(self.workdir) if self.workdir is not None else None

    @staticmethod
    def demo_layout(root: StrPath, score: bool = False, hidden: bool = False) -> tuple[Path, Path]:
        """The demo folder's suite folder and its profile (``kldtui demo --workdir``); the
        profile's ``[run] workdir`` is the demo folder itself. ``score``: the score-mode demo's
        profile (``kldtui demo --score``), beside the other; ``hidden``: the hidden-state demo's
        suite of contexts and its profile (``kldtui demo --hidden``), beside both."""
        if hidden:
            return Path(root) / DEMO_HIDDEN_SUITE, Path(root) / DEMO_HIDDEN_PROFILE
        return Path(root) / "suite", Path(root) / (DEMO_SCORE_PROFILE if score else DEFAULT_PROFILE)

    def earlier_reports(self) -> list[Path]:
        """Reports already in the work folder (``comparison*.json``), for the leaderboard: regular files
        only, as ``kldtui view DIR`` takes them (a link or a FIFO another tool left is not a report)."""
        if self.workdir is None or not self.workdir.is_dir():
            return []
        return regular_files(self.workdir, f"{Path(REPORT_FILE_NAME).stem}*.json")

    @staticmethod
    def _need(value: Path | None, name: str) -> Path:
        if value is None:
            raise ValueError(f"this workspace has no {name} (built for another command)")
        return value
