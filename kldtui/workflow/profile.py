"""Profiles: one TOML file that says what to compare and how to run the candidate.

Sections (every key optional unless noted; unknown keys are rejected with a suggestion)::

    [reference]
    repo_id = "festr2/kimi-k3-full-mxfp4-kld-reference-32x2048"  # Hub dataset (optional)
    revision = "main"              # Hub revision
    local_dir = "reference"        # the suite folder (suite-manifest.json, tokens/, ref/)
    logits_dir = "ref"             # the reference logits, relative to local_dir (score mode also
                                   # takes a hidden-state folder, "reference-hidden": docs/SCORE_MODE.md)
    capture = "embedded"           # demo only: capture missing reference logits with the
                                   # embedded server (the candidate's seed and vocab, unperturbed)

    [candidate]
    kind = "vllm"                  # a server kind (kldtui.servers): "vllm" (launch vLLM),
                                   # "embedded" (built-in CPU server), "attach" (a running server),
                                   # "llama-cpp" (a GGUF through llama-cpp-python);
                                   # a table with url and no kind is "attach"
    served_model_name = "Kimi-K3"
    request_timeout = 600.0        # seconds per capture request
    api_key_env = "VLLM_API_KEY"   # the variable holding the server's API key (optional)
    weights = "/path/to/candidate" # the files whose headers give the candidate's size and bits
                                   # per weight (default: the kind's model when it is a local path)
    parameters = 8030261248        # ...or the size as given: any two of parameters, size_bytes,
    size_bytes = 4920000000        # bits_per_weight (kldtui.formats.model_size)
    # ...and the kind's own keys: kind = "vllm": model, python, launcher, vllm_args, env, host,
    # port, startup_timeout (kldtui.servers.vllm); "embedded": model_seed, vocab_size, perturb,
    # max_num_batched_tokens, python, vllm_args, env, host, port, startup_timeout
    # (kldtui.servers.embedded); "attach": url, server_capture_dir (kldtui.servers.attach);
    # "llama-cpp": model (a .gguf), n_ctx, n_batch, n_threads, n_gpu_layers, kv_type, seed,
    # max_num_batched_tokens, llama_args, python, vllm_args, env, host, port, startup_timeout
    # (kldtui.servers.llama_cpp)

    [[candidates]]                 # a campaign: several candidates instead of one [candidate]
    name = "q4"                    # its folder and report name (letters, digits, _ . -)
    kind = "vllm"                  # ...and any key a [candidate] table takes
    [[candidates]]
    name = "q8"
    ...

    [campaign]                     # only with [[candidates]]
    repeat_leader = false          # capture the best candidate a second time at the end: the
                                   # measured noise model (kldtui.decide.noise) for every verdict

    [run]
    workdir = "kldtui-work"        # see kldtui.workspace for its layout
    run_name = "candidate"
    start_window = 0
    stop_window = 8                # exclusive; default: the whole suite
    context_filter = "analysis"    # a hidden-state suite: only these contexts of the range are
                                   # captured and compared: all (default), analysis, qualification,
                                   # sentinel, non-sentinel (kldtui compare --context-filter)
    strata = ["news", "code"]      # ...and only these allocation strata (kldtui compare --stratum)
    keep_chunks = false            # keep capture chunks after their window is finalized and verified

    [compare]
    bootstrap_samples = 10000
    bootstrap_seed = 1
    reverse = false
    abort_kl_above = 0.5           # stop after a window whose mean KL is above this (optional)
    backend = "auto"               # auto | c | numpy | torch | torch-cpu | torch-cuda; auto keeps
                                   # the GPUs to a server of this run while it runs on this host
                                   # (kldtui.stages.compare.backends)
    threads = 4                    # compare threads (default: all cores, half while serving)

    [capture]
    mode = "logits"                # "score": the server scores each chunk against the reference
                                   # and saves per-row figures only, no candidate logits
                                   # (kldtui.formats.scores, docs/SCORE_MODE.md); "hidden": the
                                   # final normalized hidden states (docs/REPLAY.md)
    replay_check = 4               # hidden mode: contexts whose live logits are captured too, so
                                   # finalize checks the replay against them (0: none)

Each ``[[candidates]]`` entry is served, captured, finalized and compared after the one before,
in one work folder (``kldtui.workflow.campaign``; ``Workspace.for_candidate`` gives its
folders); the reference is shared and, with ``[reference] capture``, captured with the first
candidate's settings. A profile has either ``[candidate]`` or ``[[candidates]]``.

A key that only another kind takes is refused, naming the kinds that take it. Relative paths
(``local_dir``, ``workdir``, the kinds' ``model``, ``python`` when it contains a ``/``,
``server_capture_dir``) resolve against the profile's folder.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kldtui import bounds, capture_modes
from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput
from kldtui.formats.fidelity_names import parse_context_filter, parse_strata
from kldtui.formats.names import check_name
from kldtui.formats.report_names import CANDIDATE_FOLDER, REPORT_FILE_NAME
from kldtui.formats.safe_io import read_bytes, read_failure
from kldtui.servers.base import CaptureTarget, ServerConfig, ServerPlan, resolve_path
from kldtui.servers.registry import DEFAULT_KIND, KINDS, all_keys, kind_of, kinds_taking
from kldtui.workspace import REPEAT_SUFFIX, Workspace, profile_key

if TYPE_CHECKING:
    from kldtui.formats.fidelity import ContextFilter
    from kldtui.formats.suite import Suite, WindowSpec


@dataclass(frozen=True)
class ReferenceConfig:
    repo_id: str | None = None
    revision: str | None = None
    local_dir: Path | None = None
    logits_dir: str = "ref"
    # Capture missing reference logits into the suite's ref/ with a server of this kind:
    # "embedded" (the demo's model), "vllm" (serve ``model`` like a candidate, with the candidate's
    # python/launcher/args unless given here) or "attach" (a running server at ``url``).
    capture: str | None = None
    # The reference's server (with ``capture``): the candidate's settings that kind takes, with
    # the [reference] keys the kind takes there (kldtui.servers: ServerKind.reference_config)
    server: ServerConfig | None = None
    # Capture the first window twice and store the comparison as repeat-noise-windowNNN.json
    # (default: yes, except for a built-in deterministic model: the embedded demo model).
    repeat: bool | None = None
    # Where the suite and the logits are on disk: Profile.workspace (local_dir defaults to
    # WORKDIR/reference).


@dataclass(frozen=True)
class RunConfig:
    workdir: Path = Path("kldtui-work")
    run_name: str = "candidate"
    start_window: int = 0
    stop_window: int | None = None
    # a hidden-state suite's contexts of the range the run covers (kldtui.formats.fidelity.ContextFilter;
    # the values parsed by kldtui.formats.fidelity_names, as compare's --context-filter/--stratum)
    context_filter: str = "all"
    strata: tuple[str, ...] = ()
    keep_chunks: bool = False


@dataclass(frozen=True)
class CompareConfig:
    bootstrap_samples: int = 10000
    bootstrap_seed: int = 1
    reverse: bool = False
    abort_kl_above: float | None = None
    backend: str = "auto"
    threads: int | None = None


@dataclass(frozen=True)
class CaptureConfig:
    # what the server saves per chunk, and so what finalize and compare read (kldtui.capture_modes:
    # "logits", the candidate's prompt logits; "score", per-row figures computed in the server)
    mode: CaptureMode = capture_modes.DEFAULT
    # hidden mode: contexts whose live logits the server saves too, for finalize's replay check
    # (None: the mode's default; CaptureMode.live_sample)
    replay_check: int | None = None


@dataclass(frozen=True)
class CampaignConfig:
    # capture the leader a second time once every candidate is compared: the measured noise model
    repeat_leader: bool = False


@dataclass(frozen=True)
class Candidate:
    """One ``[[candidates]]`` entry: its name (folder and report name) and its server."""

    name: str
    server: ServerConfig


@dataclass(frozen=True)
class Profile:
    path: Path | None
    reference: ReferenceConfig
    candidate: ServerConfig  # the candidate's server, a config of its kind (kldtui.servers);
    # in a campaign the first candidate's (the one the reference capture takes its settings from)
    run: RunConfig
    compare: CompareConfig
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    # [[candidates]] (a campaign, kldtui.workflow.campaign); empty for a [candidate] profile
    candidates: tuple[Candidate, ...] = ()
    campaign: CampaignConfig = field(default_factory=CampaignConfig)

    @property
    def is_campaign(self) -> bool:
        return bool(self.candidates)

    def member(self, candidate: Candidate) -> Profile:
        """The one-candidate profile a campaign runs for ``candidate`` (its run name is the
        candidate's name; its folders come from :meth:`member_workspace`)."""
        return replace(self, candidate=candidate.server, run=replace(self.run, run_name=candidate.name),
                       candidates=(), campaign=CampaignConfig())

    def member_workspace(self, name: str) -> Workspace:
        """The folders of campaign candidate ``name`` (kldtui.workspace.Workspace.for_candidate)."""
        return self.workspace().for_candidate(name)

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else "profile"

    def contexts(self) -> ContextFilter:
        """The run's windows (a hidden-state suite's contexts) as a filter: ``[run]`` range,
        ``context_filter`` and ``strata``."""
        from kldtui.formats.fidelity import ContextFilter

        run = self.run
        return ContextFilter(run.context_filter, run.strata, run.start_window, run.stop_window,
                             origin=f"{self.where}: [run] context_filter")

    def windows(self, suite: Suite) -> list[WindowSpec]:
        """The suite's windows this run covers (what it captures, finalizes and compares)."""
        return self.contexts().select(suite)

    def workspace(self) -> Workspace:
        """The work folder of the profile: ``[run] workdir`` and ``[reference] local_dir``."""
        workdir = Path(self.run.workdir)
        ref = self.reference
        suite_dir = Path(ref.local_dir) if ref.local_dir is not None else workdir / "reference"
        return Workspace(suite_dir=suite_dir, reference_dir=suite_dir / ref.logits_dir,
                         capture_root=workdir / "capture", run_name=self.run.run_name,
                         candidate_dir=workdir / CANDIDATE_FOLDER, compare_dir=workdir / "compare",
                         report_path=workdir / REPORT_FILE_NAME, workdir=workdir,
                         profile=profile_key(self.path))

    def capture_target(self, workspace: Workspace | None = None) -> CaptureTarget:
        """What the candidate server's capture needs: the mode, the suite and its reference
        (those of ``workspace``, default: the profile's)."""
        ws = workspace or self.workspace()
        return CaptureTarget(self.capture.mode, ws.suite_dir, ws.reference_dir)


_SECTIONS: dict[str, type] = {
    "reference": ReferenceConfig,
    "candidate": ServerConfig,
    "run": RunConfig,
    "compare": CompareConfig,
    "capture": CaptureConfig,
    "candidates": Candidate,
    "campaign": CampaignConfig,
}


def _suggest(key: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known keys: " + ", ".join(sorted(choices))


def _check_type(where: str, key: str, value: Any, kind: str) -> Any:
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "table[str]": isinstance(value, dict) and all(
            isinstance(v, str | int | float) and not isinstance(v, bool) for v in value.values()),
    }[kind]
    if not ok:
        flags = [k for k, v in value.items() if isinstance(v, bool)] if kind == "table[str]" and \
            isinstance(value, dict) else []
        fix = (f"; write {flags[0]} = \"{str(value[flags[0]]).lower()}\" (a true or false in quotes)"
               if flags else "")
        raise BadInput(f"{where}: {key} must be {kind.replace('table[str]', 'a table of strings')}, "
                       f"not {type(value).__name__} {value!r}{fix}")
    return value


_REFERENCE_OWN = {"repo_id": "str", "revision": "str", "local_dir": "str", "logits_dir": "str",
                  "capture": "str", "repeat": "bool"}


def _types() -> dict[str, dict[str, str]]:
    """key -> expected TOML type, per section; [candidate] (and the reference's capture server in
    [reference]) take the keys of the registered server kinds (kldtui.servers)."""
    server = all_keys()
    return {
        "reference": {**_REFERENCE_OWN, **{k: t for k, t in server.items()
                                           if any(k in kind.reference_keys for kind in KINDS.values())}},
        "candidate": server,
        "run": {"workdir": "str", "run_name": "str", "start_window": "int", "stop_window": "int",
                "context_filter": "str", "strata": "list[str]", "keep_chunks": "bool"},
        "compare": {"bootstrap_samples": "int", "bootstrap_seed": "int", "reverse": "bool",
                    "abort_kl_above": "float", "backend": "str", "threads": "int"},
        "capture": {"mode": "str", "replay_check": "int"},
        "campaign": {"repeat_leader": "bool"},
    }


def profile_from_dict(doc: dict[str, Any], *, base_dir: Path, path: Path | None = None) -> Profile:
    """Build a :class:`Profile` from parsed TOML; paths resolve against ``base_dir``."""
    where = str(path) if path is not None else "profile"
    for section in doc:
        if section not in _SECTIONS:
            raise BadInput(f"{where}: unknown section [{section}]; "
                           f"{_suggest(section, list(_SECTIONS))}")
        if section == "candidates":
            if not isinstance(doc[section], list) or not all(isinstance(t, dict) for t in doc[section]):
                raise BadInput(f"{where}: candidates must be [[candidates]] tables, one per candidate")
        elif not isinstance(doc[section], dict):
            raise BadInput(f"{where}: {section} must be a [{section}] table")
    if "candidates" in doc and "candidate" in doc:
        raise BadInput(f"{where}: has both [candidate] and [[candidates]]; move [candidate] into a "
                       "[[candidates]] table with a name")
    if "campaign" in doc and "candidates" not in doc:
        raise BadInput(f"{where}: [campaign] needs [[candidates]] tables (a campaign of candidates); add "
                       "them, or remove [campaign]")
    entries = _candidate_tables(doc.get("candidates"), where)
    doc = {k: v for k, v in doc.items() if k != "candidates"}
    parsed: dict[str, dict[str, Any]] = {}
    for section, types in _types().items():
        parsed[section] = _checked_table(doc.get(section, {}), types, f"{where}: [{section}]",
                                         f"[{section}]", where)
    if entries:  # the first candidate's table: the one the reference capture takes settings from
        parsed["candidate"] = _checked_table(entries[0][1], _types()["candidate"],
                                             f"{where}: [[candidates]] {entries[0][0]!r}", "[[candidates]]",
                                             where)

    ref = parsed["reference"]
    capture = ref.get("capture")
    if capture is not None and capture not in KINDS:
        raise BadInput(f"{where}: [reference] capture {capture!r} is not one of {', '.join(KINDS)}; "
                       "remove it to use a downloaded or local reference")
    server_values: dict[str, Any] = {}
    for key in [k for k in ref if k not in _REFERENCE_OWN]:  # the capture server's keys
        if capture is None or key not in KINDS[capture].reference_keys:
            takers = " or ".join(repr(k) for k, kind in KINDS.items() if key in kind.reference_keys)
            raise BadInput(f"{where}: [reference] {key} is only used with capture = {takers}; remove it, or "
                           "set capture")
        server_values[key] = ref.pop(key)
    if "local_dir" in ref:
        ref["local_dir"] = resolve_path(base_dir, ref["local_dir"])
    first_label = f"{where}: [[candidates]] {entries[0][0]!r}" if entries else f"{where}: [candidate]"
    candidate = _server_config(parsed["candidate"], base_dir=base_dir, label=first_label)
    members: list[Candidate] = []
    for i, (name, table) in enumerate(entries):
        label = f"{where}: [[candidates]] {name!r}"
        server = candidate if i == 0 else _server_config(
            _checked_table(table, _types()["candidate"], label, "[[candidates]]", where),
            base_dir=base_dir, label=label)
        members.append(Candidate(name, server))
    if capture is not None:
        ref["server"] = KINDS[capture].reference_config(candidate, server_values, base_dir=base_dir,
                                                        label=f"{where}: [reference]")

    run = parsed["run"]
    if "workdir" in run:
        run["workdir"] = resolve_path(base_dir, run["workdir"])
    else:
        run["workdir"] = (base_dir / RunConfig.workdir).resolve()
    start = run.get("start_window", 0)
    stop = run.get("stop_window")
    if start < 0 or (stop is not None and stop <= start):
        raise BadInput(f"{where}: [run] window range [{start}, {stop}) is empty or negative; give a "
                       "start_window of 0 or more and a stop_window above it")
    if "context_filter" in run:
        run["context_filter"] = parse_context_filter(run["context_filter"], f"{where}: [run] context_filter")
    if "strata" in run:
        run["strata"] = parse_strata(run["strata"], f"{where}: [run] strata")
    name = run.get("run_name", RunConfig.run_name)
    check_name(name, "[run] run_name", where)
    if entries and "run_name" in run:  # silently ignored would leave a user looking for its folder
        raise BadInput(f"{where}: [run] run_name is not used with [[candidates]] (each candidate's name is "
                       "its run name); remove it")

    cmp_ = parsed["compare"]
    if "abort_kl_above" in cmp_:
        cmp_["abort_kl_above"] = float(cmp_["abort_kl_above"])
    if "bootstrap_samples" in cmp_:
        bounds.bootstrap_samples(cmp_["bootstrap_samples"], f"{where}: [compare] bootstrap_samples")
    if "bootstrap_seed" in cmp_:
        bounds.seed(cmp_["bootstrap_seed"], f"{where}: [compare] bootstrap_seed")
    from kldtui.stages.compare.backends import BACKEND_OPTIONS

    if cmp_.get("backend", "auto") not in BACKEND_OPTIONS:
        raise BadInput(f"{where}: [compare] backend {cmp_['backend']!r} is not one of "
                       f"{', '.join(BACKEND_OPTIONS)}; {_suggest(cmp_['backend'], list(BACKEND_OPTIONS))}")
    if cmp_.get("threads", 1) < 1:
        raise BadInput(f"{where}: [compare] threads must be at least 1")

    def build(cls: type, values: dict[str, Any]) -> Any:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    cap = parsed["capture"]
    if "mode" in cap:
        cap["mode"] = capture_modes.parse(cap["mode"], f"{where}: [capture] mode")
    if "replay_check" in cap:
        if not cap.get("mode", capture_modes.DEFAULT).saves_live_sample:
            raise BadInput(f"{where}: [capture] replay_check is for a mode that saves live logits beside "
                           "what it captures (hidden); leave it out")
        if cap["replay_check"] < 0:
            raise BadInput(f"{where}: [capture] replay_check must be 0 or more")
    return Profile(path=path, reference=build(ReferenceConfig, ref),
                   candidate=candidate, run=build(RunConfig, run),
                   compare=build(CompareConfig, cmp_), capture=build(CaptureConfig, cap),
                   candidates=tuple(members), campaign=build(CampaignConfig, parsed["campaign"]))


def _checked_table(table: dict[str, Any], types: dict[str, str], label: str, section: str,
                   where: str) -> dict[str, Any]:
    """A table's keys known and of their types (one line naming the key otherwise)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in types:
            raise BadInput(f"{where}: unknown key {key!r} in {section}; {_suggest(key, list(types))}")
        out[key] = _check_type(label, key, value, types[key])
    return out


def _candidate_tables(tables: list[dict[str, Any]] | None, where: str) -> list[tuple[str, dict[str, Any]]]:
    """``[[candidates]]`` as (name, the table without its name): each named, names unique."""
    if tables is None:
        return []
    if not tables:
        raise BadInput(f"{where}: [[candidates]] is empty; add a [[candidates]] table per candidate")
    out: list[tuple[str, dict[str, Any]]] = []
    for number, table in enumerate(tables, start=1):
        if "name" not in table:
            raise BadInput(f"{where}: [[candidates]] table {number} has no name; add name = \"...\" "
                           "(its folder and report name)")
        name = check_name(table["name"], f"[[candidates]] table {number} name", where)
        if any(name == seen for seen, _ in out):
            raise BadInput(f"{where}: [[candidates]] name {name!r} is given twice; names must differ")
        if name.endswith(REPEAT_SUFFIX):
            raise BadInput(f"{where}: [[candidates]] name {name!r} ends in {REPEAT_SUFFIX!r}, which names "
                           "the leader's repeat capture (its folder and records); give it another name")
        out.append((name, {k: v for k, v in table.items() if k != "name"}))
    return out


def _server_config(table: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
    """A server table ([candidate]) as the config of its kind: the kind (given, or implied by a
    key such as url), the keys that kind takes, then the kind's own checks."""
    implied = next((name for name, kind in KINDS.items() if any(k in table for k in kind.implied_by)),
                   DEFAULT_KIND)
    name = table.get("kind", implied)
    if name not in KINDS:
        raise BadInput(f"{label} kind {name!r} is not one of {', '.join(KINDS)}; "
                       f"{_suggest(name, list(KINDS))}")
    kind = KINDS[name]
    for key in table:
        if key in kind.forbidden:
            raise BadInput(f"{label} {kind.forbidden[key]}")
        takers = kinds_taking(key)
        if name not in takers:
            raise BadInput(f"{label} {key} is only for kind = {' or '.join(repr(k) for k in takers)}; "
                           f"remove it or set kind = {takers[0]!r}")
    return kind.configure({k: v for k, v in table.items() if k != "kind"}, base_dir=base_dir, label=label)


def server_plan(profile: Profile, capture_dir: Path | None = None, *,
                workspace: Workspace | None = None) -> ServerPlan:
    """The serve stage's plan for the profile's candidate; ``capture_dir`` fixes a launched
    server's capture folder (``kldtui serve --capture-dir``; default: a fresh one per start);
    the capture scores against ``workspace``'s suite and reference (default: the profile's)."""
    return kind_of(profile.candidate).plan(profile.candidate, profile.capture_target(workspace),
                                           capture_dir=capture_dir)


# What to do when no profile can be read at the path given (missing, a folder, a FIFO, no permission)
PROFILE_REMEDY = ("pass --profile FILE or create ./kldtui.toml (`kldtui demo` writes one to start from: "
                  "kldtui-demo/kldtui.toml)")
PROFILE_LIMIT = 16 * 1024 * 1024  # bytes of a profile read: written by hand, a few KB


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile TOML; raises :class:`BadInput` with one line on any problem."""
    p = Path(path).expanduser()
    try:
        data = read_bytes(p, limit=PROFILE_LIMIT)
    except OSError as exc:  # missing, a folder, a FIFO, a device, no permission, too large
        raise read_failure(p, exc, "profile", PROFILE_REMEDY) from None
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{p}: the profile is not UTF-8 text; save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{p}: not valid TOML ({exc}); fix the profile at the line it names") from None
    return profile_from_dict(doc, base_dir=p.resolve().parent, path=p.resolve())
