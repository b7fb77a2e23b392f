"""Profiles: one TOML file that says what to compare and how to run the candidate.

Sections (every key optional unless noted; unknown keys are rejected with a suggestion)::

    [reference]
    repo_id = "festr2/kimi-k3-full-mxfp4-kld-reference-32x2048"  # Hub dataset (optional)
    revision = "main"              # Hub revision
    local_dir = "reference"        # the suite folder (suite-manifest.json, tokens/, ref/)
    logits_dir = "ref"             # the reference logits, relative to local_dir
    capture = "embedded"           # demo only: capture missing reference logits with the
                                   # embedded server (the candidate's seed and vocab, unperturbed)

    [candidate]
    kind = "vllm"                  # "vllm" (launch), "embedded" (built-in CPU server), "attach"
    model = "/path/to/candidate"   # substituted for {model}
    served_model_name = "Kimi-K3"
    python = "python"              # the interpreter that runs vLLM (default: this one)
    launcher = ["-m", "vllm.entrypoints.cli.main", "serve", "{model}"]
    vllm_args = ["--trust-remote-code", "--host", "{host}", "--port", "{port}", ...]
    env = { VLLM_TRITON_MLA_STATIC_KV_SPLITS = "8" }
    host = "127.0.0.1"             # substituted for {host}; 127.0.0.1 unless asked otherwise
    port = 8000                    # substituted for {port}; 0 picks a free port
    startup_timeout = 3600.0       # seconds until /health and /v1/models must answer
    request_timeout = 600.0        # seconds per capture request
    # kind = "attach": url = "http://node0:8000", api_key_env = "VLLM_API_KEY",
    #                  server_capture_dir = "/shared/capture-chunks" (what the server writes)
    # kind = "embedded": model_seed, vocab_size, perturb, max_num_batched_tokens

    [run]
    workdir = "kldtui-work"        # see kldtui.workspace for its layout
    run_name = "candidate"
    start_window = 0
    stop_window = 8                # exclusive; default: the whole suite
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
                                   # (kldtui.formats.scores, docs/SCORE_MODE.md)

The server command is ``[python, *launcher, "--served-model-name", NAME, *vllm_args]`` after
substituting ``{model}``, ``{host}``, ``{port}``, ``{served_model_name}`` in launcher and
vllm_args; ``--served-model-name`` is only added when vllm_args does not name it, and
``--host``/``--port`` are appended when vllm_args does not name them. Relative paths
(``local_dir``, ``workdir``, ``model``, ``python`` when it contains a ``/``,
``server_capture_dir``) resolve against the profile's folder.
"""

from __future__ import annotations

import difflib
import os
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.formats.names import check_name
from kldtui.formats.safe_io import read_bytes

if TYPE_CHECKING:
    from kldtui.stages.serve import ServerPlan

DEFAULT_VLLM_LAUNCHER = ("-m", "vllm.entrypoints.cli.main", "serve", "{model}")
EMBEDDED_MODULE = "kldtui.embedded"
KINDS = ("vllm", "embedded", "attach")


@dataclass(frozen=True)
class ReferenceConfig:
    repo_id: str | None = None
    revision: str | None = None
    local_dir: Path | None = None
    logits_dir: str = "ref"
    # Capture missing reference logits into the suite's ref/: "embedded" (the demo's model),
    # "vllm" (serve ``model`` like a candidate, with the candidate's python/launcher/args unless
    # given here) or "attach" (a running server at ``url``).
    capture: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    vllm_args: tuple[str, ...] | None = None
    url: str | None = None
    server_capture_dir: Path | None = None
    # Capture the first window twice and store the comparison as repeat-noise-windowNNN.json
    # (default: yes for vllm/attach, no for the embedded demo model, which is deterministic).
    repeat: bool | None = None
    # Where the suite and the logits are on disk: kldtui.workspace.Workspace.from_profile
    # (local_dir defaults to WORKDIR/reference).


@dataclass(frozen=True)
class CandidateConfig:
    kind: str = "vllm"
    model: str | None = None
    served_model_name: str = "candidate"
    python: str = field(default_factory=lambda: sys.executable)
    launcher: tuple[str, ...] = DEFAULT_VLLM_LAUNCHER
    vllm_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    startup_timeout: float = 3600.0
    request_timeout: float = 600.0
    # attach mode
    url: str | None = None
    api_key_env: str | None = None
    server_capture_dir: Path | None = None
    # embedded server
    model_seed: int = 0
    vocab_size: int = 4096
    perturb: float = 0.0
    max_num_batched_tokens: int = 256


@dataclass(frozen=True)
class RunConfig:
    workdir: Path = Path("kldtui-work")
    run_name: str = "candidate"
    start_window: int = 0
    stop_window: int | None = None
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
    # "logits": the server saves the candidate's prompt logits, finalize and compare read them;
    # "score": the server scores each chunk against the reference and saves per-row figures only
    mode: str = "logits"


CAPTURE_MODES = ("logits", "score")


@dataclass(frozen=True)
class Profile:
    path: Path | None
    reference: ReferenceConfig
    candidate: CandidateConfig
    run: RunConfig
    compare: CompareConfig
    capture: CaptureConfig = field(default_factory=CaptureConfig)

    def server_argv(self, *, host: str | None = None, port: int | None = None) -> list[str]:
        """The candidate server's argument list (never a shell string), placeholders filled.

        ``host``/``port`` override the profile's (the launcher passes the free port it chose).
        Flags the capture needs are *not* added here; :mod:`kldtui.stages.serve` does that and says so.
        """
        c = self.candidate
        if c.kind == "attach":
            raise BadInput(f"{self.where}: [candidate] kind = 'attach' starts no server; "
                           "use url = ... to reach it")
        h = c.host if host is None else host
        p = c.port if port is None else port
        values = {"model": c.model or "", "host": h, "port": str(p),
                  "served_model_name": c.served_model_name}
        if c.kind == "embedded":
            argv = [c.python, "-m", EMBEDDED_MODULE, "--port", str(p), "--host", h,
                    "--served-model-name", c.served_model_name, "--model-seed", str(c.model_seed),
                    "--vocab-size", str(c.vocab_size), "--perturb", repr(float(c.perturb)),
                    "--max-num-batched-tokens", str(c.max_num_batched_tokens),
                    "--max-num-seqs", "1"]
            return argv + [_fill(a, values, self.where) for a in c.vllm_args]
        if not c.model and any("{model}" in a for a in (*c.launcher, *c.vllm_args)):
            raise BadInput(f"{self.where}: [candidate] model is not set; give the candidate "
                           "checkpoint's path")
        args = [_fill(a, values, self.where) for a in c.vllm_args]
        argv = [c.python, *(_fill(a, values, self.where) for a in c.launcher)]
        if not _has_flag(args, "--served-model-name"):
            argv += ["--served-model-name", c.served_model_name]
        argv += args
        if not _has_flag(args, "--host"):
            argv += ["--host", h]
        if not _has_flag(args, "--port"):
            argv += ["--port", str(p)]
        return argv

    def server_env(self) -> dict[str, str]:
        """The profile's extra environment for the server (the launcher adds the capture dir)."""
        return dict(self.candidate.env)

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else "profile"

    def api_key(self) -> str | None:
        name = self.candidate.api_key_env
        if not name:
            return None
        value = settings.named_variable(name)
        if value is None:
            raise BadInput(f"{self.where}: [candidate] api_key_env names {name}, which is not set; "
                           f"export {name}=... or remove api_key_env")
        return value


def _has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _fill(text: str, values: dict[str, str], where: str) -> str:
    """Replace ``{model}``-style placeholders; other braces (JSON flag values) are left alone."""
    out = text
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


_SECTIONS: dict[str, type] = {
    "reference": ReferenceConfig,
    "candidate": CandidateConfig,
    "run": RunConfig,
    "compare": CompareConfig,
    "capture": CaptureConfig,
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
        raise BadInput(f"{where}: {key} must be {kind.replace('table[str]', 'a table of strings')}, "
                       f"not {type(value).__name__} {value!r}")
    return value


# key -> expected TOML type, per section
_TYPES: dict[str, dict[str, str]] = {
    "reference": {"repo_id": "str", "revision": "str", "local_dir": "str", "logits_dir": "str",
                  "capture": "str", "model": "str", "served_model_name": "str",
                  "vllm_args": "list[str]", "url": "str", "server_capture_dir": "str", "repeat": "bool"},
    "candidate": {
        "kind": "str", "model": "str", "served_model_name": "str", "python": "str",
        "launcher": "list[str]", "vllm_args": "list[str]", "env": "table[str]", "host": "str",
        "port": "int", "startup_timeout": "float", "request_timeout": "float", "url": "str",
        "api_key_env": "str", "server_capture_dir": "str", "model_seed": "int",
        "vocab_size": "int", "perturb": "float", "max_num_batched_tokens": "int",
    },
    "run": {"workdir": "str", "run_name": "str", "start_window": "int", "stop_window": "int",
            "keep_chunks": "bool"},
    "compare": {"bootstrap_samples": "int", "bootstrap_seed": "int", "reverse": "bool",
                "abort_kl_above": "float", "backend": "str", "threads": "int"},
    "capture": {"mode": "str"},
}


def _resolve(base: Path, value: str) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (base / p).resolve()


def profile_from_dict(doc: dict[str, Any], *, base_dir: Path, path: Path | None = None) -> Profile:
    """Build a :class:`Profile` from parsed TOML; paths resolve against ``base_dir``."""
    where = str(path) if path is not None else "profile"
    for section in doc:
        if section not in _SECTIONS:
            raise BadInput(f"{where}: unknown section [{section}]; "
                           f"{_suggest(section, list(_SECTIONS))}")
        if not isinstance(doc[section], dict):
            raise BadInput(f"{where}: {section} must be a [{section}] table")
    parsed: dict[str, dict[str, Any]] = {}
    for section, types in _TYPES.items():
        table = doc.get(section, {})
        out: dict[str, Any] = {}
        for key, value in table.items():
            if key not in types:
                raise BadInput(f"{where}: unknown key {key!r} in [{section}]; "
                               f"{_suggest(key, list(types))}")
            out[key] = _check_type(f"{where}: [{section}]", key, value, types[key])
        parsed[section] = out

    ref = parsed["reference"]
    capture = ref.get("capture")
    if capture is not None and capture not in KINDS:
        raise BadInput(f"{where}: [reference] capture {capture!r} is not one of {', '.join(KINDS)}; "
                       "remove it to use a downloaded or local reference")
    if capture == "vllm" and "model" not in ref:
        raise BadInput(f"{where}: [reference] capture = 'vllm' needs model = the reference checkpoint")
    if capture == "attach" and ("url" not in ref or "server_capture_dir" not in ref):
        raise BadInput(f"{where}: [reference] capture = 'attach' needs url and server_capture_dir "
                       "(the running reference server's VLLM_KLD_CAPTURE_DIR as seen from here)")
    for key in ("model", "served_model_name", "vllm_args", "url", "server_capture_dir"):
        if key in ref and capture not in ("vllm", "attach"):
            raise BadInput(f"{where}: [reference] {key} is only used with capture = 'vllm' or 'attach'")
    if "vllm_args" in ref:
        ref["vllm_args"] = tuple(ref["vllm_args"])
    if "server_capture_dir" in ref:
        ref["server_capture_dir"] = _resolve(base_dir, ref["server_capture_dir"])
    if "model" in ref and (ref["model"].startswith((".", "~", "/"))
                           or _resolve(base_dir, ref["model"]).exists()):
        ref["model"] = str(_resolve(base_dir, ref["model"]))  # a local folder, not a Hub id
    if "local_dir" in ref:
        ref["local_dir"] = _resolve(base_dir, ref["local_dir"])
    cand = parsed["candidate"]
    kind = cand.get("kind", "attach" if "url" in cand else "vllm")
    if kind not in KINDS:
        raise BadInput(f"{where}: [candidate] kind {kind!r} is not one of {', '.join(KINDS)}; "
                       f"{_suggest(kind, list(KINDS))}")
    cand["kind"] = kind
    if kind == "attach" and "url" not in cand:
        raise BadInput(f"{where}: [candidate] kind = 'attach' needs url = 'http://HOST:PORT'")
    if kind == "attach" and "server_capture_dir" not in cand:
        raise BadInput(f"{where}: [candidate] attach mode needs server_capture_dir: the folder "
                       "the running server's VLLM_KLD_CAPTURE_DIR points at, as seen from here")
    if kind != "attach" and "url" in cand:
        raise BadInput(f"{where}: [candidate] url is only for kind = 'attach' (a server started "
                       "elsewhere); remove it or set kind = 'attach'")
    if kind == "vllm" and "model" not in cand:
        raise BadInput(f"{where}: [candidate] model is missing: the candidate checkpoint to serve")
    for key in ("launcher", "vllm_args"):
        if key in cand:
            cand[key] = tuple(cand[key])
    if "env" in cand:
        cand["env"] = {str(k): str(v) for k, v in cand["env"].items()}
    if "server_capture_dir" in cand:
        cand["server_capture_dir"] = _resolve(base_dir, cand["server_capture_dir"])
    if "model" in cand and (cand["model"].startswith((".", "~")) or "/" in cand["model"]):
        # a path (a Hub model id like org/name is left alone when no such folder exists)
        candidate_path = _resolve(base_dir, cand["model"])
        if cand["model"].startswith((".", "~", "/")) or candidate_path.exists():
            cand["model"] = str(candidate_path)
    if "python" in cand and "/" in cand["python"]:
        cand["python"] = str(_resolve(base_dir, cand["python"]))
    if "port" in cand and not 0 <= cand["port"] <= 65535:
        raise BadInput(f"{where}: [candidate] port {cand['port']} is not 0..65535")
    if kind == "embedded" and "model" in cand:
        raise BadInput(f"{where}: [candidate] kind = 'embedded' serves its built-in model; "
                       "remove model, or set kind = 'vllm'")

    run = parsed["run"]
    if "workdir" in run:
        run["workdir"] = _resolve(base_dir, run["workdir"])
    else:
        run["workdir"] = (base_dir / RunConfig.workdir).resolve()
    start = run.get("start_window", 0)
    stop = run.get("stop_window")
    if start < 0 or (stop is not None and stop <= start):
        raise BadInput(f"{where}: [run] window range [{start}, {stop}) is empty or negative")
    name = run.get("run_name", RunConfig.run_name)
    check_name(name, "[run] run_name", where)

    cmp_ = parsed["compare"]
    if "abort_kl_above" in cmp_:
        cmp_["abort_kl_above"] = float(cmp_["abort_kl_above"])
    if cmp_.get("bootstrap_samples", 1) < 1:
        raise BadInput(f"{where}: [compare] bootstrap_samples must be at least 1")
    from kldtui.stages.compare.backends import BACKEND_OPTIONS

    if cmp_.get("backend", "auto") not in BACKEND_OPTIONS:
        raise BadInput(f"{where}: [compare] backend {cmp_['backend']!r} is not one of "
                       f"{', '.join(BACKEND_OPTIONS)}; {_suggest(cmp_['backend'], list(BACKEND_OPTIONS))}")
    if cmp_.get("threads", 1) < 1:
        raise BadInput(f"{where}: [compare] threads must be at least 1")

    def build(cls: type, values: dict[str, Any]) -> Any:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    for key in ("startup_timeout", "request_timeout", "perturb"):
        if key in cand:
            cand[key] = float(cand[key])
    cap = parsed["capture"]
    if cap.get("mode", "logits") not in CAPTURE_MODES:
        raise BadInput(f"{where}: [capture] mode {cap['mode']!r} is not one of {', '.join(CAPTURE_MODES)}; "
                       f"{_suggest(cap['mode'], list(CAPTURE_MODES))}")
    return Profile(path=path, reference=build(ReferenceConfig, ref),
                   candidate=build(CandidateConfig, cand), run=build(RunConfig, run),
                   compare=build(CompareConfig, cmp_), capture=build(CaptureConfig, cap))


def server_plan(profile: Profile, capture_dir: Path | None = None) -> ServerPlan:
    """The serve stage's plan for the profile's candidate; ``capture_dir`` fixes a launched
    server's capture folder (``kldtui serve --capture-dir``; default: a fresh one per start)."""
    from kldtui.stages.serve import ServerPlan

    c = profile.candidate
    if c.kind == "attach":
        return ServerPlan("attach", c.served_model_name, c.startup_timeout, url=c.url,
                          capture_dir=c.server_capture_dir, api_key=profile.api_key())
    kind = cast(Literal["vllm", "embedded"], c.kind)  # validated when the profile was loaded
    return ServerPlan(kind, c.served_model_name, c.startup_timeout, argv=tuple(profile.server_argv()),
                      env={**profile.server_env(), **score_env(profile)}, api_key=profile.api_key(),
                      model=c.model, capture_dir=capture_dir)


def score_env(profile: Profile) -> dict[str, str]:
    """``[capture] mode = "score"``: the server's environment that turns score mode on and says
    where the suite and its reference logits are (kldtui.formats.scores); empty in logits mode."""
    from kldtui.workspace import Workspace

    if profile.capture.mode != "score":
        return {}
    ws = Workspace.from_profile(profile)
    return {**settings.CAPTURE_MODE.entry("score"), **settings.SCORE_SUITE.entry(ws.suite_dir.resolve()),
            **settings.SCORE_REFERENCE.entry(ws.reference.resolve())}



def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile TOML; raises :class:`BadInput` with one line on any problem."""
    p = Path(path).expanduser()
    try:
        data = read_bytes(p)
    except FileNotFoundError:
        raise BadInput(f"{p}: profile not found; pass --profile FILE or create ./kldtui.toml "
                       "(see examples/)") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a folder, expected a profile TOML file") from None
    except OSError as exc:  # a FIFO, a device, no permission
        raise BadInput(f"{p}: the profile cannot be read ({exc.strerror or exc})") from None
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{p}: not valid TOML ({exc})") from None
    return profile_from_dict(doc, base_dir=p.resolve().parent, path=p.resolve())
