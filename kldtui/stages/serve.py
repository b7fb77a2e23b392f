"""The server launcher: vLLM (or the embedded CPU server) as a child process.

One code path for both: an argument list (never a shell string) started in its own process
group, with ``VLLM_KLD_CAPTURE_DIR`` pointing at a fresh, empty folder. Before starting, the
launcher makes sure the flags the capture depends on are there (``--max-num-seqs 1``, and
``--no-enable-prefix-caching`` for a kind whose server keeps a prefix cache; a contradicting flag is
refused) and says what it added with
:class:`~kldtui.events.Notice` events. It binds 127.0.0.1 unless the argv names a host.

While it runs, a reader thread streams the server's output as :class:`~kldtui.events.LogLine`
events (and into ``log_path``) and keeps the last lines for error messages. The server is
ready when ``GET /health`` answers 200 and ``GET /v1/models`` lists the served name.
:meth:`ServerProcess.alive` returns ``None`` while it runs, else one line with the exit code and
its last log lines. :meth:`ServerProcess.stop` sends SIGINT to the whole group, then SIGTERM,
then SIGKILL, each after a timeout, until no process of the group is left.

Never an orphan: ``stop`` runs on completion, error and Ctrl-C (``with ServerProcess(...)``),
an ``atexit`` guard stops whatever is still running, and on Linux the child gets
``PR_SET_PDEATHSIG(SIGKILL)`` so even a ``kill -9`` of kldtui takes the server's main process
with it. (The death signal fires when the *thread* that forked exits, so every child is forked
by one long-lived spawner thread.) The rest of the server's process group (vLLM's engine core
and workers, which the death signal does not reach) is taken by a keeper: a small process of its
own session that waits on a pipe from kldtui and, when kldtui dies without stopping the server,
sends the group SIGTERM, then SIGKILL (:mod:`kldtui.stages.server_keeper`).

Nor litter: a kind with a runtime folder (``ServerPlan.runtime_dir_env``: vLLM) gets a private
:class:`RuntimeDir` for its sockets and, as its TMPDIR, for its temp files (vLLM leaves a
``vllm_dist_*`` file in the temp folder at every launch), removed at stop or, after a kill, at the
next launch; the compile caches that default to the temp folder keep their places
(:func:`temp_folder_entries`).

The stage driver is :func:`run_serve` (with :func:`start_serve` for a caller that overlaps the
server's loading with other work): from a :class:`ServerPlan` it launches the server (or checks an
attached one), waits until it is ready and returns a :class:`ServerSession`; the ``serve`` command
and the pipeline call it the same way.

Usage::

    server = ServerProcess(argv, capture_dir=..., served_model_name="tiny", emit=emit)
    with server:                       # start() ... stop()
        url = server.wait_ready(timeout=600, cancel=cancel)
        ...                            # server.alive() is None while it runs
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import errno
import os
import queue
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kldtui import settings
from kldtui.errors import BadInput, Interrupted, StageFailed
from kldtui.events import (
    Cancel,
    EventSink,
    LogLine,
    Notice,
    ServerReady,
    StageFinished,
    StageName,
    StageStarted,
    failure_reported,
    null_sink,
)
from kldtui.formats.safe_io import open_private_text
from kldtui.formats.suite import SERVER_START, new_server_start
from kldtui.redact import redact_argv, redact_env, scrub, secret_values
from kldtui.servers.base import ServerPlan, flag_value
from kldtui.servers.readiness import check_attached, probe_models
from kldtui.servers.registry import server_kind

if TYPE_CHECKING:
    from kldtui.workspace import Workspace

STAGE: StageName = "server"
DEFAULT_STOP_TIMEOUTS = (20.0, 10.0, 5.0)  # after SIGINT, after SIGTERM, after SIGKILL
LAST_LINES = 40
_ANY_HOST = ("0.0.0.0", "::", "")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host if host not in _ANY_HOST else "", 0))
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """BadInput when ``host:port`` cannot be listened on: another server there would answer
    kldtui's requests instead of the one it starts (and fail later, far from the cause)."""
    bind_host = host if host not in _ANY_HOST else ""
    try:
        infos = socket.getaddrinfo(bind_host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise BadInput(f"server host {host!r}: not a valid address of this machine ({exc}); fix host "
                       "in the profile") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is fine
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BadInput(f"server port {port} on {host} is already in use by another process; "
                               "kldtui would talk to that server instead of its own. Stop it, or set "
                               "[candidate] port to a free one (0 picks one)") from None
            raise BadInput(f"server address {host}:{port} cannot be used ({exc.strerror or exc}); fix "
                           "host/port in the profile") from None


def _has(argv: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def ensure_capture_flags(argv: Sequence[str], *, keeps_prefix_cache: bool = True,
                         ) -> tuple[list[str], list[str]]:
    """Return ``(argv, notes)`` with the flags capture depends on; refuse contradicting ones.

    One sequence must run at a time, and a server that keeps a prefix cache (``keeps_prefix_cache``,
    the server kind's: vLLM's) must have it off: a cached prefix is never recomputed, so its logits
    would not reach the hook. A server that keeps none is neither given the flag nor said to need it.
    """
    out = list(argv)
    notes: list[str] = []
    if keeps_prefix_cache and _has(out, "--enable-prefix-caching"):
        raise BadInput("server arguments: --enable-prefix-caching would skip cached prompt "
                       "prefixes and lose their logits; remove it (kldtui adds "
                       "--no-enable-prefix-caching)")
    if keeps_prefix_cache and not _has(out, "--no-enable-prefix-caching"):
        out.append("--no-enable-prefix-caching")
        notes.append("added --no-enable-prefix-caching (a cached prefix is never recomputed, "
                     "so its logits would not be captured)")
    seqs = flag_value(out, "--max-num-seqs")
    if seqs is None:
        out += ["--max-num-seqs", "1"]
        notes.append("added --max-num-seqs 1 (capture runs one sequence at a time)")
    elif seqs.strip() != "1":
        raise BadInput(f"server arguments: --max-num-seqs {seqs} lets requests share a batch; "
                       "the capture needs --max-num-seqs 1")
    if flag_value(out, "--host") is None:
        out += ["--host", "127.0.0.1"]
        notes.append("added --host 127.0.0.1 (local only; set host in the profile to expose it)")
    return out, notes


def prepare_capture_dir(path: str | os.PathLike[str]) -> Path:
    """Create the server's capture folder; refuse one that already holds anything."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise BadInput(f"{p}: the server capture folder is a file; choose a fresh folder")
        leftovers = sorted(x.name for x in p.iterdir())
        if leftovers:
            raise BadInput(f"{p}: the server capture folder is not empty ({len(leftovers)} "
                           f"entries, e.g. {leftovers[0]}); use a fresh folder so every request "
                           "folder in it belongs to this server")
    p.mkdir(parents=True, exist_ok=True)
    return p


# --- one long-lived spawner thread (PR_SET_PDEATHSIG follows the forking thread) --------------

_spawn_queue: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawner_main() -> None:
    while True:
        func, future = _spawn_queue.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(func())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            future.set_exception(exc)


def _in_spawner(func: Callable[[], Any]) -> Any:
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawner_main, name="kldtui-spawner", daemon=True)
            _spawner.start()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    _spawn_queue.put((func, future))
    return future.result()


def _child_setup() -> Callable[[], None]:
    """What the server's child does between fork and exec.

    SIGINT back to its default: a kldtui started in the background by a shell without job control
    (``nohup kldtui ... &``) has SIGINT ignored, an ignored signal survives exec, and the server would
    then ignore the SIGINT that :meth:`ServerProcess.stop` asks it to stop with (20 s lost, then
    SIGTERM). And on Linux, the death signal (the server dies with kldtui).
    """
    death_signal = _pdeathsig()

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if death_signal is not None:
            death_signal()

    return setup


KEEPER_TERM_WAIT_S = 10.0  # after kldtui's death: the group's SIGTERM, then SIGKILL
KEEPER_SCRIPT = Path(__file__).with_name("server_keeper.py")  # run as a file: it imports no kldtui


def _start_keeper(pgid: int) -> subprocess.Popen[bytes] | None:
    """The keeper of process group ``pgid`` (None where there is no /proc to find its members)."""
    if not Path("/proc").is_dir():
        return None
    try:
        return subprocess.Popen(  # noqa: S603 - an argument list, never a shell
            # -I: no PYTHON* variables, and its folder (kldtui/stages) not put first on the import path
            [sys.executable, "-I", str(KEEPER_SCRIPT), str(pgid), str(KEEPER_TERM_WAIT_S)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
    except OSError:
        return None  # the death signal still takes the main process


def _release_keeper(keeper: subprocess.Popen[bytes] | None) -> None:
    """The server was stopped: its keeper ends without touching anything."""
    if keeper is None or keeper.stdin is None:
        return
    with contextlib.suppress(OSError, ValueError):
        keeper.stdin.write(b"stopped")
        keeper.stdin.close()
    try:
        keeper.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        keeper.kill()
        keeper.wait(timeout=5.0)


def _pdeathsig() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigkill = int(signal.SIGKILL)

    def set_death_signal() -> None:  # runs in the child between fork and exec
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)

    return set_death_signal


# --- process-group helpers ---------------------------------------------------------------------

def _group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 2 and rest[0] not in ("Z", "X") and int(rest[2]) == pgid:
            members.append(int(entry.name))
    return members


_running: set[ServerProcess] = set()  # strong references: a dropped, running server is still stopped


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop(reason="kldtui is exiting", timeouts=(5.0, 3.0, 2.0))


RUNTIME_DIR_PREFIX = "kldtui-rpc-"
# A unix socket's path holds at most 107 bytes; vLLM names its sockets FOLDER/<uuid4> (37 more).
_SOCKET_FOLDER_MAX = 60


class RuntimeDir:
    """A private folder for a launched server's runtime files (vLLM's ZMQ sockets, and its temp
    files: :func:`temp_folder_entries`), named ``kldtui-rpc-PID-XXXXXXXX`` in the temp folder
    (``/tmp`` where that path is too long for a socket): made at start (mode 0700), removed at stop.
    Folders left by a kldtui that was killed (its PID no longer running) are removed at the next
    start: only folders of this user, never through a link."""

    def __init__(self) -> None:
        base = Path(tempfile.gettempdir())
        if len(str(base)) > _SOCKET_FOLDER_MAX - 30:
            base = Path("/tmp")  # noqa: S108 - the socket path limit; mkdtemp makes it private
        self.base = base
        self.path: Path | None = None

    def create(self) -> Path:
        self.sweep()
        self.path = Path(tempfile.mkdtemp(prefix=f"{RUNTIME_DIR_PREFIX}{os.getpid()}-", dir=self.base))
        return self.path

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def sweep(self) -> None:
        """Remove the folders of kldtui processes that no longer run."""
        from kldtui.formats.logits_writer import pid_alive

        with contextlib.suppress(OSError):
            for entry in os.scandir(self.base):
                if not entry.name.startswith(RUNTIME_DIR_PREFIX):
                    continue
                pid_text = entry.name[len(RUNTIME_DIR_PREFIX):].split("-", 1)[0]
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if (not pid_text.isdigit() or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                            or pid_alive(int(pid_text))):
                        continue
                    shutil.rmtree(entry.path, ignore_errors=True)


def temp_folder_entries(folder: str | os.PathLike[str], env: Mapping[str, str]) -> dict[str, str]:
    """The environment entries that make ``folder`` a server's temp folder (TMPDIR), so that what
    the server leaves there goes with the folder, while the compile caches that default to the temp
    folder (``settings.TEMP_FOLDER_CACHES``) stay where they are without it, this process's temp
    folder, so a relaunch does not compile again; a cache ``env`` sets is left as it is."""
    entries = settings.TMPDIR.entry(folder)
    for cache in settings.TEMP_FOLDER_CACHES:
        if not cache.is_set(env):
            entries.update(cache.entry(cache.get(env)))
    return entries


class ServerProcess:
    """One candidate server as a child process group. See the module docstring."""

    def __init__(self, argv: Sequence[str], *, capture_dir: str | os.PathLike[str],
                 served_model_name: str, emit: EventSink = null_sink,
                 env: Mapping[str, str] | None = None, log_path: str | os.PathLike[str] | None = None,
                 ensure_flags: bool = True,
                 stop_timeouts: tuple[float, float, float] = DEFAULT_STOP_TIMEOUTS,
                 api_key: str | None = None, runtime_dir_env: str | None = None,
                 keeps_prefix_cache: bool = True) -> None:
        if isinstance(argv, str):
            raise TypeError("argv must be a list of arguments, never a shell string")
        if not argv:
            raise BadInput("server command is empty; set [candidate] in the profile")
        self.requested_argv = list(argv)
        self.capture_dir = Path(capture_dir)
        self.served_model_name = served_model_name
        self.emit = emit
        self.extra_env = dict(env or {})
        self.log_path = Path(log_path) if log_path is not None else None
        self.ensure_flags = ensure_flags
        self.stop_timeouts = stop_timeouts
        self.api_key = api_key
        self.runtime_dir_env = runtime_dir_env
        self.keeps_prefix_cache = keeps_prefix_cache  # the server kind's (ServerPlan.keeps_prefix_cache)
        self.runtime_dir = RuntimeDir()
        self.argv: list[str] = list(argv)
        self.added_notes: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
        self._reader: threading.Thread | None = None
        self._keeper: subprocess.Popen[bytes] | None = None  # takes the group if kldtui dies
        self._log_file: IO[str] | None = None
        self._log_lock = threading.Lock()
        self._stopping = False
        self._stop_lock = threading.Lock()
        # values never printed or logged (the server's own log lines may echo its arguments)
        self._secrets = secret_values(self.argv, self.extra_env, [api_key])

    # -- public ---------------------------------------------------------------------------------
    @property
    def public_argv(self) -> list[str]:
        """The command line as it may be shown or recorded (secret values redacted)."""
        return redact_argv(self.argv)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def host(self) -> str:
        return flag_value(self.argv, "--host") or "127.0.0.1"

    @property
    def port(self) -> int:
        value = flag_value(self.argv, "--port")
        if value is None:
            return 8000  # vLLM's default
        try:
            return int(value)
        except ValueError:
            raise BadInput(f"server arguments: --port {value!r} is not a number") from None

    @property
    def base_url(self) -> str:
        host = self.host
        if host in _ANY_HOST:
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def last_lines(self, n: int = 10) -> list[str]:
        return list(self._lines)[-n:]

    def start(self) -> None:
        """Check the capture folder and the flags, then start the child; returns at once."""
        if self.proc is not None:
            raise RuntimeError("server already started")
        if self.ensure_flags:
            self.argv, self.added_notes = ensure_capture_flags(self.requested_argv,
                                                               keeps_prefix_cache=self.keeps_prefix_cache)
        for note in self.added_notes:
            self.emit(Notice(STAGE, note))
        if flag_value(self.argv, "--port") == "0":
            try:
                port = free_port(self.host)
            except (OSError, UnicodeError) as exc:
                raise BadInput(f"server host {self.host!r}: no free port to listen on there "
                               f"({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}); "
                               "fix host in the profile") from None
            i = self.argv.index("--port") if "--port" in self.argv else None
            if i is not None:
                self.argv[i + 1] = str(port)
            else:
                self.argv = [a if not a.startswith("--port=") else f"--port={port}" for a in self.argv]
        elif flag_value(self.argv, "--port") is not None:
            check_port_free(self.host, self.port)
        env = settings.child_environment(
            {**self.extra_env, **settings.CAPTURE_DIR.entry(self.capture_dir.resolve())})
        env.setdefault("PYTHONUNBUFFERED", "1")
        settings.check_environment(env, settings.READ_BY_SERVER)  # a bad value: exit 2, not a dead server
        prepare_capture_dir(self.capture_dir)
        env.update(self._runtime_entries(env))
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            try:  # never through a link planted at its name (docs/SAFETY.md)
                self._log_file = open_private_text(self.log_path)
            except OSError as exc:
                raise BadInput(f"{self.log_path}: the server log {exc.strerror or exc}; kldtui does not "
                               "write through it, remove it or choose another work folder") from None
        self._secrets = secret_values(self.argv, self.extra_env, [self.api_key])
        self.emit(StageStarted(STAGE, detail=" ".join(redact_argv(self.argv))))
        preexec = _child_setup()

        def spawn() -> subprocess.Popen[bytes]:
            return subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                self.argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
                close_fds=True)

        try:
            self.proc = _in_spawner(spawn)
        except FileNotFoundError:
            self._close_log()
            self.runtime_dir.remove()
            raise BadInput(f"server command: {self.argv[0]} not found; set [candidate] python "
                           "to an interpreter that has vLLM") from None
        except PermissionError:
            self._close_log()
            self.runtime_dir.remove()
            raise BadInput(f"server command: {self.argv[0]} is not executable") from None
        _running.add(self)
        self._keeper = _start_keeper(self.proc.pid)
        self._reader = threading.Thread(target=self._read_output, name="kldtui-server-log",
                                        daemon=True)
        self._reader.start()

    def alive(self) -> str | None:
        """None while the server runs; else one line: exit code and its last log lines."""
        if self.proc is None:
            return "the server was not started"
        code = self.proc.poll()
        if code is None:
            return None
        self.returncode = code
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        tail = " | ".join(line.strip() for line in self.last_lines(8) if line.strip())
        return f"the server exited ({how}); last log lines: {tail or '(none)'}"

    def wait_ready(self, timeout: float, cancel: Cancel | None = None,
                   poll_interval: float = 0.25) -> str:
        """Block until ``/health`` is 200 and ``/v1/models`` lists the served name; return the URL.

        Raises :class:`StageFailed` if the server exits or does not get ready in ``timeout``,
        :class:`Interrupted` when ``cancel`` is set (the caller stops the server).
        """
        import httpx

        url = self.base_url
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=url, timeout=5.0, headers=headers, trust_env=False) as client:
            while True:
                if cancel is not None:
                    cancel.check()
                dead = self.alive()
                if dead is not None:
                    raise StageFailed(f"server {self.argv[0]} did not start: {dead}")
                served = probe_models(client)
                if served is not None:
                    dead = self.alive()
                    if dead is not None:  # something else answers on our port
                        raise StageFailed(f"server {self.argv[0]} did not start: {dead}; another "
                                          f"server answers at {url}")
                    if self.served_model_name in served:
                        self.emit(ServerReady(STAGE, url=url, served_model_name=self.served_model_name,
                                              pid=self.pid))
                        return url
                    raise StageFailed(f"server at {url} serves {', '.join(served) or 'no model'}, not "
                                      f"{self.served_model_name!r}; fix served_model_name in the "
                                      "profile")
                if time.monotonic() > deadline:
                    tail = " | ".join(self.last_lines(5))
                    raise StageFailed(f"server at {url} was not ready after {timeout:.0f} s; last "
                                      f"log lines: {tail or '(none)'}")
                if cancel is not None:
                    if cancel.wait(poll_interval):
                        raise Interrupted(cancel.reason)
                else:
                    time.sleep(poll_interval)

    def stop(self, reason: str = "done", timeouts: tuple[float, float, float] | None = None) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL to the process group until none of it is left.

        Safe to call more than once and from any thread; returns the main process's exit code.
        """
        with self._stop_lock:
            if self.proc is None:
                return None
            if self._stopping and self.returncode is not None:
                return self.returncode
            self._stopping = True
            t_int, t_term, t_kill = timeouts or self.stop_timeouts
            pgid = self.proc.pid
            for sig, wait_s in ((signal.SIGINT, t_int), (signal.SIGTERM, t_term),
                                (signal.SIGKILL, t_kill)):
                if not self._group_alive(pgid):
                    break
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
                if sig != signal.SIGINT:
                    self.emit(Notice(STAGE, f"server did not stop in time; sent {sig.name} "
                                     f"to its process group {pgid}", level="warning"))
                self._wait_group(pgid, wait_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1.0)
            _release_keeper(self._keeper)
            self.returncode = self.proc.poll()
            if self._reader is not None:
                self._reader.join(timeout=2.0)
            line = f"server stopped ({reason}); exit code {self.returncode}"
            # the log keeps why its server ended too (a server that died over SSH: the log is what is left)
            self._write_log(f"kldtui: {line}")
            self._close_log()
            self.runtime_dir.remove()  # the whole process group is gone: nothing uses its sockets
            _running.discard(self)
            self.emit(LogLine(STAGE, line, log=str(self.log_path) if self.log_path is not None else None,
                              own=True))
            return self.returncode

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(reason="error" if exc[0] is not None else "done")

    # -- internals ------------------------------------------------------------------------------
    def _group_alive(self, pgid: int) -> bool:
        assert self.proc is not None
        self.proc.poll()  # reap our own child so it does not count as a member
        return bool(_group_members(pgid))

    def _wait_group(self, pgid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._group_alive(pgid):
                return
            time.sleep(0.05)

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            # progress bars redraw with carriage returns: keep what the terminal would show last
            line = next((part for part in reversed(text.split("\r")) if part.strip()), "")
            line = scrub(line, self._secrets)
            self._lines.append(line)
            self._write_log(line)
            level = server_line_level(line)
            if self._stopping:
                continue  # what a stopped server prints (its KeyboardInterrupt traceback): log only
            with contextlib.suppress(Exception):
                self.emit(LogLine(STAGE, line, level=level,  # type: ignore[arg-type]
                                  log=str(self.log_path) if self.log_path is not None else None))
        with contextlib.suppress(OSError):
            self.proc.stdout.close()

    def _runtime_entries(self, env: Mapping[str, str]) -> dict[str, str]:
        """A kind with a runtime folder (``runtime_dir_env``): the server's sockets and its temp
        folder in a private folder removed at stop, each unless the user set it (the socket
        variable in the profile's env or this shell; TMPDIR in the profile's env)."""
        if self.runtime_dir_env is None:
            return {}
        sockets = not env.get(self.runtime_dir_env)
        temp = not settings.TMPDIR.is_set(self.extra_env)
        if not (sockets or temp):
            return {}
        folder = self.runtime_dir.create()
        entries = {self.runtime_dir_env: str(folder)} if sockets else {}
        return {**entries, **(temp_folder_entries(folder, env) if temp else {})}

    def _write_log(self, line: str) -> None:
        """One line into the server log (the reader's and the stop's lines, one at a time)."""
        with self._log_lock:
            if self._log_file is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._log_file.write(line + "\n")
                    self._log_file.flush()

    def _close_log(self) -> None:
        with self._log_lock:
            if self._log_file is not None:
                with contextlib.suppress(OSError):
                    self._log_file.close()
                self._log_file = None


# --- the stage driver ---------------------------------------------------------------------------

@dataclass
class ServerSession:
    """A server of this run: where it listens (once ready), where it captures, what it is."""

    plan: ServerPlan
    capture_dir: Path
    process: ServerProcess | None  # None when attached
    url: str | None = None
    runtime: dict[str, Any] = field(default_factory=dict)  # for manifests: secrets redacted

    def stop(self, reason: str = "done") -> None:
        """Stop the server we launched (never an attached one); safe to call more than once."""
        if self.process is not None:
            self.process.stop(reason=reason)


def start_serve(workspace: Workspace, emit: EventSink, plan: ServerPlan) -> ServerSession:
    """Launch the planned server and return while it loads (attached: nothing to launch).

    A launched server captures into ``plan.capture_dir`` or a fresh folder of the workspace."""
    if not server_kind(plan.kind).launches:
        if plan.url is None or plan.capture_dir is None:
            raise BadInput(f"kind = {plan.kind!r} needs url and server_capture_dir")
        return ServerSession(plan, plan.capture_dir, None,
                             runtime={"launcher": "attached", "url": plan.url,
                                      "served_model_name": plan.served_model_name})
    capture_dir = plan.capture_dir or workspace.fresh_server_capture_dir()
    process = ServerProcess(list(plan.argv), capture_dir=capture_dir,
                            served_model_name=plan.served_model_name, emit=emit, env=plan.env,
                            log_path=workspace.server_log, api_key=plan.api_key,
                            runtime_dir_env=plan.runtime_dir_env,
                            keeps_prefix_cache=plan.keeps_prefix_cache)
    process.start()
    return ServerSession(plan, capture_dir, process,
                         runtime={"launcher": "kldtui", "kind": plan.kind, "argv": process.public_argv,
                                  "model": plan.model, "served_model_name": plan.served_model_name,
                                  "env": redact_env(plan.env), SERVER_START: new_server_start()})


def run_serve(workspace: Workspace, emit: EventSink, cancel: Cancel | None, plan: ServerPlan, *,
              session: ServerSession | None = None) -> ServerSession:
    """The serve stage: launch the server (unless ``session`` already did) or check the attached
    one, wait until it answers, and return the ready session. On failure the launched server is
    stopped and the error (one line) is reported as the stage's failure."""
    try:
        with failure_reported(emit, STAGE):
            if not server_kind(plan.kind).launches:
                emit(StageStarted(STAGE, detail=f"attach {plan.url}"))
            if session is None:
                session = start_serve(workspace, emit, plan)
            if session.process is None:
                assert plan.url is not None
                session.url = check_attached(plan.url, plan.served_model_name, api_key=plan.api_key,
                                             emit=emit)
            else:
                session.url = session.process.wait_ready(timeout=plan.startup_timeout, cancel=cancel)
            session.runtime.update(server_version(session.url))
    except BaseException as exc:
        if session is not None:
            session.stop(reason=stop_reason(exc))
        raise
    emit(StageFinished(STAGE, summary=f"ready at {session.url}", figures={"url": session.url}))
    return session


def stop_reason(exc: BaseException | None) -> str:
    """What the "server stopped (...)" line says when a stage ends with ``exc`` (None: done)."""
    if exc is None:
        return "done"
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        return "interrupted"
    return "error"


def server_version(url: str) -> dict[str, Any]:
    """vLLM's ``GET /version`` for the manifest's runtime identity (absent: nothing)."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/version", timeout=5.0, trust_env=False)
        if response.status_code == 200:
            version = response.json().get("version")
            if isinstance(version, str):
                return {"server_version": version}
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return {}


# One line per request a server answered (uvicorn's access log, as vLLM and the embedded server
# print it, and the embedded engine's "Finished request"): debug, so front ends keep it out of their
# logs (it was most of the dashboard's); the server log file keeps every line. A request that failed
# (4xx, 5xx) stays a warning.
_ACCESS_LINE = re.compile(r'^INFO:\s+\S+:\d+ - "[A-Z]+ \S+ HTTP/[\d.]+" (?P<status>\d{3})\b')
_FINISHED_REQUEST = re.compile(r"^INFO .*\bFinished request \S+: \d+ prompt tokens")


def server_line_level(line: str) -> str:
    """The level of one server output line: error, warning, info, or debug for per-request lines."""
    access = _ACCESS_LINE.match(line)
    if access is not None:
        return "debug" if access.group("status")[0] in "123" else "warning"
    if _FINISHED_REQUEST.match(line):
        return "debug"
    upper = line[:80].upper()
    return "error" if "ERROR" in upper or "TRACEBACK" in upper else "warning" if "WARN" in upper else "info"
