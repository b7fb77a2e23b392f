"""Whether a host named in a server's URL is this machine: the one rule for "a server on this host"
(an attached server whose GPUs the compare stage must leave alone, issue 21).

This host is: any loopback or unspecified address, this machine's short and fully qualified names,
and every address of its network interfaces (IPv4 through ``SIOCGIFADDR``, IPv6 from
``/proc/net/if_inet6``) or that its names resolve to. A name in the URL is resolved (the client
connects to it anyway) and counts as this host when any of its addresses is one of those.

Which model servers run on this host (:func:`gpu_servers`): the processes in /proc whose command
line one of the signs it is given (:class:`ServerSign`) recognises; each server kind declares its
own sign, and the layers above pass them down. The file systems' types (:func:`filesystem_type`).
Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def _normal(address: str) -> str | None:
    """``address`` in one spelling (``::FFFF:1.2.3.4`` -> ``1.2.3.4``), None when not an address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _interface_ipv4() -> set[str]:
    if not sys.platform.startswith("linux"):
        return set()
    import fcntl

    found: set[str] = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                found.add(socket.inet_ntoa(packed[20:24]))
    return found


def _interface_ipv6() -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0] if line.split() else ""
            if len(raw) == 32:
                found.add(str(ipaddress.IPv6Address(bytes.fromhex(raw))))
    return found


def _resolve(name: str) -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError, UnicodeError):
        for info in socket.getaddrinfo(name, None):
            address = _normal(str(info[4][0]))
            if address is not None:
                found.add(address)
    return found


def names() -> frozenset[str]:
    """This machine's names, lower case: its host name and fully qualified name."""
    out = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        out.add(socket.getfqdn().lower())
    return frozenset(n for n in out if n)


@lru_cache(maxsize=1)
def addresses() -> frozenset[str]:
    """Every address of this machine: its interfaces' and those its names resolve to."""
    found = _interface_ipv4() | _interface_ipv6()
    for name in names():
        found |= _resolve(name)
    return frozenset(a for a in (_normal(x) for x in found) if a is not None)


def _local_ip(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or ip.is_unspecified or address in addresses()


def is_this_host(host: str) -> bool:
    """Whether ``host`` (a URL's host: a name or an address) is this machine."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if not host:
        return False
    if host in _LOOPBACK_NAMES or host in names():
        return True
    address = _normal(host)
    if address is not None:
        return _local_ip(address)
    return any(_local_ip(a) for a in _resolve(host))


def _never(argv: Sequence[str]) -> bool:
    return False


@dataclass(frozen=True)
class ServerSign:
    """How the processes of one kind of model server show in /proc: each server kind that holds
    GPUs of this host declares its own in its module (``SIGN`` in :mod:`kldtui.servers.vllm` and
    :mod:`kldtui.servers.llama_cpp`); the layers above pass them down, so this module and the
    compare stage name no kind."""

    words: str  # what messages call one ("a vLLM server")
    is_server: Callable[[Sequence[str]], bool]  # its main process, by its command line
    # how many of the GPUs the main process sees the server uses, by its command line; None: every one
    devices: Callable[[Sequence[str]], int | None]
    # another of its processes (an engine, a worker) whose command line does not say which GPUs it uses
    is_helper: Callable[[Sequence[str]], bool] = _never


@dataclass(frozen=True)
class ServerProcess:
    """A model server process running on this host, as /proc shows it."""

    pid: int
    argv: tuple[str, ...]
    env: dict[str, str]  # empty when not readable (another user's process)
    sign: ServerSign  # the sign it was recognised by
    # the server's main process (its command line says its GPUs); False: a helper, or a main process
    # whose command line was too long to read whole
    main: bool


def runs_module(argv: Sequence[str], module: str) -> bool:
    """``argv`` runs Python module ``module`` or one inside it (``python -m module.sub``)."""
    for i, arg in enumerate(argv):
        name = argv[i + 1] if arg == "-m" and i + 1 < len(argv) else arg[2:] if arg.startswith("-m") else None
        if name is not None and (name == module or name.startswith(module + ".")):
            return True
    return False


def runs_command(argv: Sequence[str], name: str, *args: str) -> bool:
    """``argv`` runs the program ``name`` with ``args`` first: ``name ARGS...``, or a script run by
    its Python interpreter (``python3 /venv/bin/name ARGS...``, as /proc shows a console script)."""
    first = 1 if len(argv) > 1 and Path(argv[0]).name.startswith("python") else 0
    return (len(argv) > first + len(args) and Path(argv[first]).name == name
            and tuple(argv[first + 1:first + 1 + len(args)]) == args)


# bytes of a process's command line or environment read from /proc: Linux keeps both in the space
# the stack limit leaves them (2 MiB under the usual 8 MiB stack), a model server's in a few KB; one
# longer is cut there and taken as saying nothing of its GPUs (gpu_servers)
PROC_TEXT_LIMIT = 256 * 1024


def _read_nul_list(path: Path) -> tuple[list[str], bool]:
    """The NUL-separated strings of ``path`` (a /proc file) as text (bytes that are not UTF-8
    replaced), and whether they are whole: at most :data:`PROC_TEXT_LIMIT` bytes are read. Opened
    without blocking and read only when a regular file (as /proc's are): OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks: list[bytes] = []
        left = PROC_TEXT_LIMIT + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    whole = len(data) <= PROC_TEXT_LIMIT
    return [p.decode(errors="replace") for p in data[:PROC_TEXT_LIMIT].split(b"\0") if p], whole


def gpu_servers(signs: Sequence[ServerSign], proc: Path = Path("/proc")) -> list[ServerProcess]:
    """The processes on this host (any user's, by pid) that one of ``signs`` recognises, with
    their environment where it is readable (not another user's). Empty where there is no /proc or
    no sign is given; an entry whose command line cannot be read (a process gone meanwhile) is
    passed over. A command line longer than :data:`PROC_TEXT_LIMIT` is recognised by its start and
    says nothing of its GPUs (``main`` False: every GPU counts as its); an environment longer than
    that is not read (as one not readable)."""
    found: list[ServerProcess] = []
    if not signs:
        return found
    own = os.getpid()
    try:
        entries = sorted(int(e) for e in os.listdir(proc) if e.isascii() and e.isdigit() and int(e) != own)
    except OSError:
        return found
    for pid in entries:
        try:
            argv, whole = _read_nul_list(proc / str(pid) / "cmdline")
        except OSError:
            continue
        for sign in signs:
            main = sign.is_server(argv)
            if main or sign.is_helper(argv):
                break
        else:
            continue
        env: dict[str, str] = {}
        with contextlib.suppress(OSError):
            values, complete = _read_nul_list(proc / str(pid) / "environ")
            if complete:
                env = dict(v.split("=", 1) for v in values if "=" in v)
        found.append(ServerProcess(pid, tuple(argv), env, sign, main and whole))
    return found


# File systems whose listings may lag behind another host's writes (attribute and directory caches).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p",
    "afs", "panfs", "wekafs", "fuse.sshfs", "fuse.glusterfs", "fuse.ceph", "fuse.juicefs", "fuse.s3fs",
    "fuse.gcsfuse", "fuse.rclone",
})


def _unescape_mount(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def filesystem_type(path: str | os.PathLike[str], mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """The type of the file system ``path`` is on (``/proc/self/mounts``, the longest mount point
    above it); None where that cannot be told."""
    try:
        where = os.path.realpath(path)
        lines = mounts.read_text(errors="replace").splitlines()
    except OSError:
        return None
    best, found = -1, None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = _unescape_mount(parts[1]).rstrip("/") or "/"
        if (where == point or where.startswith(point.rstrip("/") + "/")) and len(point) > best:
            best, found = len(point), parts[2]
    return found


def on_network_filesystem(path: str | os.PathLike[str], mounts: Path = Path("/proc/self/mounts")) -> bool:
    """Whether ``path`` is on a shared file system whose listings may lag (:data:`NETWORK_FILESYSTEMS`)."""
    kind = filesystem_type(path, mounts)
    return kind is not None and kind.lower() in NETWORK_FILESYSTEMS
