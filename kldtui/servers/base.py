"""What every server kind shares: the :class:`ServerKind` Protocol, the typed settings of one
server (:class:`ServerConfig` and, for the kinds kldtui launches, :class:`LaunchConfig`), the serve
stage's :class:`ServerPlan`, and the helpers the kinds build on.

A server kind is what ``[candidate] kind = "..."`` names (and ``[reference] capture = "..."``):
its own keys and their checks, the command line and environment that start it, what to check
before launching it, whether it runs on this host, and what ``kldtui doctor`` checks for it.
Each kind is one module of :mod:`kldtui.servers` registered in :mod:`kldtui.servers.registry`.

The keys a profile table takes for a kind are the fields of the kind's config dataclass (their
TOML types follow from the field types: ``str``/``Path`` strings, ``int``, ``float``, ``bool``,
``tuple[str, ...]`` lists of strings, ``dict[str, str]`` tables); a config is a self-contained,
frozen object, so a run can hold several of them.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kldtui import bounds, capture_modes, settings
from kldtui.capture_modes import CaptureMode
from kldtui.errors import BadInput
from kldtui.redact import redact_json
from kldtui.this_host import ServerSign

if typing.TYPE_CHECKING:
    from kldtui.formats.model_size import ModelSize

# A config field with this metadata is not a profile key (set by kldtui, not by the user).
NOT_A_KEY = {"profile_key": False}
# A config field with this metadata does not change what the server answers (where it listens, how
# long kldtui waits, how the leaderboard shows its size): it is left out of server_identity, so that
# changing it never stops a capture from resuming.
NOT_IDENTITY = {"identity": False}


@dataclass(frozen=True)
class ServerConfig:
    """One server's settings, as a profile table gives them (base of every kind's config).

    ``label`` says where they came from in messages (``"PROFILE: [candidate]"``)."""

    kind: str = ""
    served_model_name: str = field(default="candidate", metadata=NOT_IDENTITY)
    request_timeout: float = field(default=600.0, metadata=NOT_IDENTITY)  # seconds per capture request
    # the environment variable holding the server's API key
    api_key_env: str | None = field(default=None, metadata=NOT_IDENTITY)
    # The candidate's size, which the leaderboard and its exports show (kldtui.formats.model_size):
    # measured from the headers of ``weights`` (a .safetensors or .gguf file or their folder;
    # default: the kind's ``model`` when that is a local path), or as given here (any two of
    # parameters, size_bytes, bits_per_weight; they win over measuring).
    weights: Path | None = field(default=None, metadata=NOT_IDENTITY)
    parameters: int | None = field(default=None, metadata=NOT_IDENTITY)
    size_bytes: int | None = field(default=None, metadata=NOT_IDENTITY)
    bits_per_weight: float | None = field(default=None, metadata=NOT_IDENTITY)
    label: str = field(default="profile: [candidate]", compare=False, metadata={**NOT_A_KEY, **NOT_IDENTITY})

    def weights_path(self) -> Path | None:
        """The files to measure: ``weights``, else the kind's ``model`` field when it names a local
        file or folder (a Hub model id does not)."""
        if self.weights is not None:
            return self.weights
        model = self.served_model()
        if model is not None and os.path.exists(model):
            return Path(model)
        return None

    def served_model(self) -> str | None:
        """The kind's ``model`` field as the profile gives it (a local path or a Hub model id); None
        for a kind that names none (a built-in model, an attached server)."""
        model = getattr(self, "model", None)
        return str(model) if isinstance(model, str | Path) and str(model) else None

    def model_size(self) -> ModelSize | None:
        """The candidate's size: as given, else measured from :meth:`weights_path`; None when
        neither is known. BadInput (one line, naming the profile) when the files cannot say."""
        from kldtui.formats import model_size

        if (self.parameters, self.size_bytes, self.bits_per_weight) != (None, None, None):
            return model_size.given(parameters=self.parameters, size_bytes=self.size_bytes,
                                    bits_per_weight=self.bits_per_weight, where=self.label)
        path = self.weights_path()
        if path is None:
            return None
        try:
            return model_size.measure(path)
        except BadInput as exc:  # which candidate's files: a campaign has several
            key = "weights" if self.weights is not None else "model"
            raise BadInput(f"{self.label} {key}: {exc}") from None


# Seconds a server may take until it answers: a model of a trillion parameters loads for tens of
# minutes on a multi-GPU host.
DEFAULT_STARTUP_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class LaunchConfig(ServerConfig):
    """A server kldtui starts as a child process: its interpreter, extra arguments, environment,
    address and start-up time."""

    # the interpreter that runs it (a rebuilt environment keeps the candidate; the server's version is
    # recorded in the capture's manifest)
    python: str = field(default_factory=lambda: sys.executable, metadata=NOT_IDENTITY)
    vllm_args: tuple[str, ...] = ()
    # left out of the identity: it may hold secrets, and it is recorded (redacted) in the manifest
    env: dict[str, str] = field(default_factory=dict, metadata=NOT_IDENTITY)
    host: str = field(default="127.0.0.1", metadata=NOT_IDENTITY)
    port: int = field(default=8000, metadata=NOT_IDENTITY)  # 0 picks a free port
    # until /health and /v1/models must answer
    startup_timeout: float = field(default=DEFAULT_STARTUP_TIMEOUT_S, metadata=NOT_IDENTITY)


@dataclass(frozen=True)
class HubModel:
    """A served model the server downloads from the Hugging Face Hub (a vLLM ``model`` given as a
    Hub id): where the server keeps it on this host."""

    repo_id: str
    revision: str | None  # the server's --revision; None: the default branch (main)
    cache_dir: Path  # the Hugging Face cache it downloads into (its --download-dir, else its environment's)


@dataclass(frozen=True)
class CaptureTarget:
    """What a server's capture needs to know besides its folder: the capture mode and, in score
    mode, the suite and the reference logits it scores against."""

    mode: CaptureMode = capture_modes.DEFAULT
    suite_dir: Path | None = None
    reference_dir: Path | None = None


@dataclass(frozen=True)
class ServerPlan:
    """What the serve stage runs: a launched server (its argument list and environment) or an
    attached one (its URL and the capture folder it writes). ``kind`` names the server kind."""

    kind: str
    served_model_name: str
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    url: str | None = None
    capture_dir: Path | None = None  # attach: the server's; launched: a fixed folder (serve --capture-dir)
    # launched: the variable that takes a private folder for the server's runtime files (its sockets),
    # made at start and removed at stop, unless the user set it (kldtui.stages.serve.RuntimeDir); the
    # folder is the server's TMPDIR too, unless the profile's env sets one (temp_folder_entries)
    runtime_dir_env: str | None = None
    # launched: the server keeps a prefix cache, which the launcher turns off (a cached prefix is never
    # computed again, so its logits would not be captured): LaunchedKind.keeps_prefix_cache
    keeps_prefix_cache: bool = False


@dataclass(frozen=True)
class Check:
    """One line of ``kldtui doctor``."""

    name: str
    ok: bool
    detail: str
    required: bool = True  # a failed optional check is a note, not a failure


@runtime_checkable
class ServerKind(Protocol):
    """One kind of server. Implementations are module-level singletons of :mod:`kldtui.servers`."""

    @property
    def name(self) -> str:
        """The value of ``[candidate] kind`` / ``[reference] capture``."""
        ...

    @property
    def summary(self) -> str:
        """One line: what it serves and how."""
        ...

    @property
    def config_type(self) -> type[ServerConfig]:
        """The kind's config dataclass: its fields are the keys its table takes."""
        ...

    @property
    def launches(self) -> bool:
        """kldtui starts the server (a child process it stops again); False: it attaches to a
        server started elsewhere, never started or stopped by kldtui."""
        ...

    @property
    def builtin(self) -> bool:
        """kldtui's own deterministic model (the demo's): the reference needs no repeat capture
        to measure runtime noise, and its capture records stay in the work folder (the demo's
        suite keeps the published layout)."""
        ...

    @property
    def implied_by(self) -> tuple[str, ...]:
        """Table keys that mean this kind when ``kind`` is not given (``url``: attach)."""
        ...

    @property
    def reference_keys(self) -> tuple[str, ...]:
        """The keys ``[reference]`` may set with ``capture`` = this kind."""
        ...

    @property
    def forbidden(self) -> Mapping[str, str]:
        """Keys refused for this kind that another kind takes, with the one-line reason (others
        get a generic line naming the kinds that take them)."""
        ...

    @property
    def process_sign(self) -> ServerSign | None:
        """How the kind's server processes show in /proc, kldtui's or not, and how many of the GPUs
        they see they use (:class:`kldtui.this_host.ServerSign`): a compare keeps off their GPUs.
        None: the kind's servers hold no GPU of this host (the embedded CPU model; an attached
        server, whose place its URL says)."""
        ...

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        """The kind's config from a table whose keys and types are checked; BadInput (one line,
        naming ``label``) for what the kind needs and misses. Paths resolve against ``base_dir``."""
        ...

    def reference_config(self, candidate: ServerConfig, values: dict[str, Any], *, base_dir: Path,
                         label: str) -> ServerConfig:
        """The server that captures the reference: the candidate's settings this kind takes,
        with the ``[reference]`` table's ``values`` over them."""
        ...

    def repeat_config(self, config: ServerConfig) -> ServerConfig:
        """The server of a repeat capture of the same candidate (a campaign's noise model, kldtui.
        workflow.campaign): the same config, except where the kind must be told to behave like a
        second run (the embedded model's ``runtime_seed``)."""
        ...

    def plan(self, config: ServerConfig, capture: CaptureTarget, *,
             capture_dir: Path | None = None) -> ServerPlan:
        """The serve stage's plan (``capture_dir``: a launched server's fixed capture folder)."""
        ...

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        """The command line that starts the server (never a shell string); ``host``/``port``
        override the config's. BadInput for a kind that starts nothing."""
        ...

    def environment(self, config: ServerConfig, capture: CaptureTarget) -> dict[str, str]:
        """The server's extra environment, capture variables included (the launcher adds the
        capture folder's)."""
        ...

    def problems(self, config: ServerConfig) -> list[str]:
        """What is wrong with the server's inputs before anything is launched, one line each."""
        ...

    def is_local(self, config: ServerConfig) -> bool:
        """The server runs on this host (its GPUs are this host's)."""
        ...

    def describe(self, config: ServerConfig) -> str:
        """A few words for messages: "vLLM serving MODEL", "attached server at URL"."""
        ...

    def model_vocab(self, config: ServerConfig) -> int | None:
        """The vocabulary the served model's logits will have, when the kind can tell before
        launching (a GGUF file says it); None otherwise. ``kldtui run`` compares it with the
        reference's before starting anything."""
        ...

    def vocabulary_fix(self, config: ServerConfig, vocab: int) -> str:
        """What to do when :meth:`model_vocab` differs from the reference's ``vocab`` (one clause)."""
        ...

    def memory_line(self, config: ServerConfig) -> str | None:
        """What the server will hold in this host's memory, when the kind can reckon it before
        launching (llama.cpp's weights, logits and KV cache from the GGUF's header); None otherwise.
        A campaign says it before its first server starts."""
        ...

    def max_prompt_tokens(self, config: ServerConfig) -> int | None:
        """The longest prompt (in tokens) the configured server evaluates, when the kind can tell
        before launching (llama.cpp's context); None: the server's own limit, which it says when
        asked. ``kldtui run`` holds the suite's longest window against it before starting anything."""
        ...

    def hub_model(self, config: ServerConfig) -> HubModel | None:
        """The served model, when the server downloads it from the Hugging Face Hub into a cache on
        this host (a vLLM Hub model id); None for a local file or folder, or a model kldtui does not know."""
        ...

    def doctor_checks(self, python: str | None, *, import_engine: bool) -> list[Check]:
        """What ``kldtui doctor`` checks on this host for the kind (``python``: the interpreter
        that runs the server; ``import_engine``: import the engine, slower and more thorough)."""
        ...

    def head_command(self, config: ServerConfig, folder: Path) -> list[str] | None:
        """The command that writes the served model's own LM head into the new folder ``folder``
        (the published ``lm-head/`` layout), where the kind holds its model itself and has no
        checkpoint to export it from (the embedded built-in model); None: the head is exported from
        the model's checkpoint, or placed by hand (hidden mode, kldtui.stages.candidate_head)."""
        ...


# --- helpers the kinds share ------------------------------------------------------------------

def capture_env(capture: CaptureTarget) -> dict[str, str]:
    """The capture mode's part of a launched server's environment
    (:meth:`kldtui.capture_modes.CaptureMode.server_env`: in score mode the variables that turn
    scoring on and say where the suite and its reference logits are; nothing in logits mode)."""
    suite = capture.suite_dir.resolve() if capture.suite_dir is not None else None
    reference = capture.reference_dir.resolve() if capture.reference_dir is not None else None
    return capture.mode.server_env(suite, reference)


def api_key(config: ServerConfig) -> str | None:
    """The server's API key from the variable ``api_key_env`` names (None when none is named)."""
    name = config.api_key_env
    if not name:
        return None
    value = settings.named_variable(name)
    if value is None:
        raise BadInput(f"{config.label} api_key_env names {name}, which is not set; "
                       f"export {name}=... or remove api_key_env")
    return value


# server_identity's keys for the fingerprints of the weights' files (kldtui.formats.weights_identity):
# their ends, and the blocks between (recorded from the version that samples them; a record of an
# earlier version has the first only, and is compared on that)
WEIGHTS_CONTENT = "weights_content"
WEIGHTS_INTERIOR = "weights_interior"
WEIGHTS_KEYS = {WEIGHTS_CONTENT: "content", WEIGHTS_INTERIOR: "interior"}


def server_identity(config: ServerConfig) -> dict[str, Any]:
    """What makes a server the candidate it is: every setting of its config that can change what it
    answers (its kind, model and arguments; not its port, timeouts or the sizes the leaderboard
    shows: fields marked :data:`NOT_IDENTITY`), as JSON values, and the fingerprint of its weights'
    files where they are local (:data:`WEIGHTS_CONTENT`). A capture records it for each window
    and a finalized folder in its manifest, so that windows from a changed candidate are never
    joined to the earlier ones, and a campaign never ranks an earlier report under a changed
    candidate's name."""
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in sorted(value.items())}
        return value

    from kldtui.formats.weights_identity import weights_content, weights_interior

    identity = {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)
                if f.metadata.get("identity", True)}
    # the weights' content, where they are local files: a model quantized again into the same file
    # name is another candidate although no setting changed
    weights = config.weights_path()
    for key, fingerprint in ((WEIGHTS_CONTENT, weights_content), (WEIGHTS_INTERIOR, weights_interior)):
        content = fingerprint(weights)
        if content is not None:
            identity[key] = content
    # recorded in capture records and manifests: a secret among the arguments (--api-key) never is;
    # the same redaction on both sides keeps the comparison exact
    redacted: dict[str, Any] = redact_json(identity)
    return redacted


def identity_changes(recorded: Any, now: Mapping[str, Any]) -> str | None:
    """How ``now`` differs from a recorded :func:`server_identity` (``perturb 0.1, now 0.3``), or None
    when it does not. A recorded value that is not an object (a hand-edited file) differs."""
    if not isinstance(recorded, dict):
        return None if recorded is None else "its recorded server settings cannot be read"
    said, weights = [], []
    for key in sorted(set(recorded) | set(now)):
        was, is_ = recorded.get(key), now.get(key)
        if key in WEIGHTS_KEYS:
            # recorded by versions that fingerprint the weights (the interior from a later one), and
            # only where their files were there
            if was is not None and is_ is not None and was != is_:
                weights.append(f"{WEIGHTS_KEYS[key]} {_shown(was)}, now {_shown(is_)}")
        elif was != is_:
            said.append(f"{key} {_shown(was)}, now {_shown(is_)}")
    if weights:
        said.append(f"the weights' files changed ({'; '.join(weights)})")
    return "; ".join(said) or None


def _shown(value: Any, limit: int = 120) -> str:
    """A setting's value in one line: strings quoted with their control characters escaped (a recorded
    value comes from a file in the folder), argument lists as typed, at most ``limit`` characters."""
    if value is None:
        return "unset"
    if isinstance(value, list):
        text = "[" + " ".join(v if isinstance(v, str) and v.isprintable() else repr(v) for v in value) + "]"
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_TOML_TYPES: dict[Any, str] = {str: "str", Path: "str", int: "int", float: "float", bool: "bool"}


def profile_keys(config_type: type[ServerConfig]) -> dict[str, str]:
    """The profile keys of a config type and their TOML types (``str``, ``int``, ``float``,
    ``bool``, ``list[str]``, ``table[str]``), from the dataclass's fields."""
    hints = typing.get_type_hints(config_type)
    out: dict[str, str] = {}
    for f in dataclasses.fields(config_type):
        if f.metadata.get("profile_key", True):
            out[f.name] = _toml_type(hints[f.name], f"{config_type.__name__}.{f.name}")
    return out


def _toml_type(hint: Any, what: str) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if len(args) != 1:
            raise TypeError(f"{what}: a profile key has one type (or None), not {hint}")
        return _toml_type(args[0], what)
    origin = typing.get_origin(hint)
    if origin is tuple and args == [str, Ellipsis]:
        return "list[str]"
    if origin is dict and args == [str, str]:
        return "table[str]"
    if hint in _TOML_TYPES:
        return _TOML_TYPES[hint]
    raise TypeError(f"{what}: {hint} is not a profile key type")


def resolve_path(base_dir: Path, value: str) -> Path:
    """A profile path: ``~`` expanded, relative to the profile's folder."""
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (base_dir / p).resolve()


def local_model(base_dir: Path, value: str) -> str:
    """A model given as a path (``./m``, ``~/m``, ``/m``, or a folder beside the profile) becomes
    its absolute path; anything else is a Hugging Face model id and is left alone."""
    path = resolve_path(base_dir, value)
    if value.startswith((".", "~", "/")) or path.exists():
        return str(path)
    return value


def build_config(config_type: type[ServerConfig], values: Mapping[str, Any], *, base_dir: Path,
                 label: str, **fixed: Any) -> Any:
    """``config_type`` from type-checked profile values: lists become tuples, table values
    strings, numbers floats where the field is a float, paths absolute (against ``base_dir``).
    Keys the type does not have are left out; ``fixed`` values are set as given."""
    hints = typing.get_type_hints(config_type)
    names = {f.name for f in dataclasses.fields(config_type)}
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in names:
            continue
        kind = _toml_type(hints[key], key)
        hint_args = typing.get_args(hints[key])
        if kind == "list[str]":
            value = tuple(value)
        elif kind == "table[str]":
            value = {str(k): str(v) for k, v in value.items()}
        elif kind == "float":
            value = float(value)
        elif kind == "str" and (hints[key] is Path or Path in hint_args):
            value = resolve_path(base_dir, value)
        out[key] = value
    out.update(fixed)
    for key in ("request_timeout", "startup_timeout"):  # NaN never expires, 0 fails every connection
        if key in out:
            out[key] = bounds.timeout(out[key], f"{label} {key}")
    return config_type(label=label, **out)


def inherit(config_type: type[ServerConfig], source: ServerConfig, **values: Any) -> Any:
    """A ``config_type`` with ``source``'s settings for the fields both have, ``values`` over them
    (the reference server takes the candidate's interpreter, address, environment...)."""
    theirs = {f.name for f in dataclasses.fields(source)}
    kept = {f.name: getattr(source, f.name) for f in dataclasses.fields(config_type)
            if f.name in theirs and f.name != "kind"}
    return config_type(**{**kept, **values})


def port_problem(config: LaunchConfig) -> str | None:
    """The configured port is taken on its host (0: a free one is picked at launch)."""
    if not config.port:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: a port left in TIME_WAIT by our last server is free; a listener is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((config.host, config.port))
        except OSError:
            return (f"{config.label} port {config.port} on {config.host} is already in use (another "
                    "server?); stop it, or choose another port (0 picks a free one)")
    return None


def has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value given to ``flag`` (``--flag V`` or ``--flag=V``; the last one, as argparse takes it)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def fill(text: str, values: Mapping[str, str]) -> str:
    """Replace ``{model}``-style placeholders; other braces (JSON flag values) are left alone."""
    out = text
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


class LaunchedKind:
    """Shared behaviour of the kinds kldtui starts as a child process (subclass and set the
    class attributes; :meth:`argv` is the kind's own)."""

    name: str
    summary: str
    config_type: type[ServerConfig]
    launches: bool = True
    builtin: bool = False
    implied_by: tuple[str, ...] = ()
    reference_keys: tuple[str, ...] = ()
    forbidden: Mapping[str, str] = {}
    runtime_dir_env: str | None = None  # ServerPlan.runtime_dir_env
    # the server keeps a prefix cache (vLLM's): the launcher adds --no-enable-prefix-caching, says so,
    # and refuses --enable-prefix-caching; a server that computes every prompt whole (the embedded
    # one, llama.cpp's, which resets before each prompt) is told and said nothing of it
    keeps_prefix_cache: bool = False
    # how its processes show in /proc and the GPUs they use (ServerKind.process_sign); None: it holds none
    process_sign: ServerSign | None = None

    def own(self, config: ServerConfig) -> Any:
        if not isinstance(config, self.config_type):
            raise TypeError(f"{type(config).__name__} is not a {self.name} server's config")
        return config

    def repeat_config(self, config: ServerConfig) -> ServerConfig:
        """A second start of the same server is a repeat capture (a real runtime varies by itself)."""
        return config

    def configure(self, values: dict[str, Any], *, base_dir: Path, label: str) -> ServerConfig:
        values = dict(values)
        if "python" in values and "/" in values["python"]:
            values["python"] = str(resolve_path(base_dir, values["python"]))
        config: ServerConfig = build_config(self.config_type, values, base_dir=base_dir, label=label,
                                            kind=self.name)
        launch = self.own(config)
        if not 0 <= launch.port <= 65535:
            raise BadInput(f"{label} port {launch.port} is not 0..65535")
        return config

    def argv(self, config: ServerConfig, *, host: str | None = None, port: int | None = None) -> list[str]:
        raise NotImplementedError

    def environment(self, config: ServerConfig, capture: CaptureTarget) -> dict[str, str]:
        c: LaunchConfig = self.own(config)
        return {**c.env, **capture_env(capture)}

    def plan(self, config: ServerConfig, capture: CaptureTarget, *,
             capture_dir: Path | None = None) -> ServerPlan:
        c: LaunchConfig = self.own(config)
        return ServerPlan(self.name, c.served_model_name, c.startup_timeout, argv=tuple(self.argv(c)),
                          env=self.environment(c, capture), api_key=api_key(c), model=self.model(c),
                          capture_dir=capture_dir, runtime_dir_env=self.runtime_dir_env,
                          keeps_prefix_cache=self.keeps_prefix_cache)

    def model(self, config: ServerConfig) -> str | None:
        """The model the server serves, for the runtime identity (None: the kind's own)."""
        return None

    def model_vocab(self, config: ServerConfig) -> int | None:
        return None  # known once the server answers (its chunks say it)

    def max_prompt_tokens(self, config: ServerConfig) -> int | None:
        return None  # vLLM's max_model_len and the embedded model's: refused by the server, with words

    def memory_line(self, config: ServerConfig) -> str | None:
        return None  # vLLM sizes its KV cache to the GPU's memory itself; the embedded model is tiny

    def vocabulary_fix(self, config: ServerConfig, vocab: int) -> str:
        return "serve a model of the reference's vocabulary"

    def problems(self, config: ServerConfig) -> list[str]:
        problem = port_problem(self.own(config))
        return [problem] if problem else []

    def is_local(self, config: ServerConfig) -> bool:
        return True  # kldtui starts it here

    def hub_model(self, config: ServerConfig) -> HubModel | None:
        return None

    def doctor_checks(self, python: str | None, *, import_engine: bool) -> list[Check]:
        return []

    def head_command(self, config: ServerConfig, folder: Path) -> list[str] | None:
        return None  # a served checkpoint's head is exported from it
