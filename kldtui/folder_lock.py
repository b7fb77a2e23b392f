"""One writer per folder: an exclusive ``flock`` on a lock file, held while a command writes there.

Two kldtui runs writing into one work folder (or one capture folder, logits folder, report file)
would race: on the same temporary names, on the capture records, on the manifest. Every command
that writes into a folder takes :func:`hold` on it first; a second run gets :class:`BadInput`
(exit 2) naming the folder and the holder's pid and command, and changes nothing.

- The lock file is ``<folder>/.kldtui.lock`` (a whole folder) or ``<folder>/.<name>.kldtui-lock``
  (one output file, e.g. a report). It holds the holder's pid, host, command and start time (a
  second run names the host where it is another machine's: a shared disk), and is
  removed on release; a lock left by a killed process is free again (the kernel drops a dead
  process's ``flock``), so nothing has to be cleaned up after ``kill -9``.
- A process may take the same lock again (a pipeline and the stages it calls): it is counted and
  released by the last holder.
- The lock file is opened without following links (``O_NOFOLLOW``) and must be a regular file with
  one name: a symbolic link, hard link, FIFO or folder planted at its name is refused (BadInput)
  before anything is written, and release removes the file only while it is still the one locked.
- The lock is advisory: it protects kldtui against kldtui, not against other programs, and only
  on file systems with working ``flock`` (local disks; NFS maps it to its own locks).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.formats.safe_io import NotRegularFile, open_private_fd, read_text
from kldtui.formats.untrusted_json import printable_name

LOCK_NAME = ".kldtui.lock"
# bytes of a lock file read to name its holder (a pid, a host, a command of at most 300 characters
# and a start time)
LOCK_FILE_LIMIT = 64 * 1024


@dataclass
class _Held:
    fd: int
    count: int


_held: dict[Path, _Held] = {}
_held_lock = threading.Lock()


def lock_path_for_folder(folder: str | os.PathLike[str]) -> Path:
    """The lock file guarding a whole folder (inside it)."""
    return Path(folder) / LOCK_NAME


def lock_path_for_file(path: str | os.PathLike[str]) -> Path:
    """The lock file guarding one output file (beside it)."""
    p = Path(path)
    return p.parent / f".{p.name}.kldtui-lock"


def _command() -> str:
    return " ".join(["kldtui", *sys.argv[1:]])[:300] if sys.argv else "kldtui"


def _holder(path: Path) -> str:
    """Who holds the lock, as its file says: pid, host where it is not this one (a shared disk: a pid
    of another machine is not one to look for here), command and start; on one line, control
    characters escaped (whoever holds a lock in a shared folder writes what this prints)."""
    try:
        doc = json.loads(read_text(path, limit=LOCK_FILE_LIMIT, follow=False))
        pid, command, since = doc["pid"], doc["command"], doc["started_utc"]
        host = doc.get("host")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "pid unknown"
    where = f" on host {host}" if isinstance(host, str) and host and host != socket.gethostname() else ""
    return printable_name(f"pid {pid}{where}: {command} (since {since})")[:400]


def check_folder_link(folder: str | os.PathLike[str], what: str = "folder") -> None:
    """A folder that is a symbolic link made by another user (not you, not root) is refused: in a
    shared work folder someone could replace ``candidate/`` with a link to a folder of yours, and
    kldtui would write its files there. A link you made (another disk) is followed."""
    p = Path(folder)
    try:
        st = os.lstat(p)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) and st.st_uid not in (os.getuid(), 0):
        raise BadInput(f"{p}: this {what} is a symbolic link made by user id {st.st_uid}, not by you; "
                       "kldtui does not write through it: give the folder it points to, or remove it")


def ensure_folder(folder: str | os.PathLike[str], what: str = "folder") -> Path:
    """Create ``folder`` (and parents); a file in the way or no permission is a BadInput."""
    p = Path(folder)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BadInput(f"{p}: is a file, not a folder; give a {what} that is a folder") from None
    except NotADirectoryError:
        raise BadInput(f"{p}: a part of this path is a file, not a folder; give another {what}") from None
    except PermissionError:
        raise BadInput(f"{p}: not allowed to create this {what}; choose a writable place") from None
    except OSError as exc:
        raise BadInput(f"{p}: cannot create this {what} ({exc.strerror or exc}); "
                       "choose another place") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise BadInput(f"{p}: this {what} is not writable; choose a writable place")
    return p


def _key(lock_file: Path) -> Path:
    """One name for a lock file however its folder was spelled (``../d``, a link to it, ``d``): a run
    holding ``d`` that asks again for ``../d`` is the same holder, not another run."""
    return Path(os.path.realpath(lock_file.parent)) / lock_file.name


def _acquire(lock_file: Path, guarded: str) -> None:
    key = _key(lock_file)
    with _held_lock:
        held = _held.get(key)
        if held is not None:
            held.count += 1
            return
        while True:
            try:
                fd = open_private_fd(key, os.O_RDWR | os.O_CREAT, 0o644)
            except IsADirectoryError:
                raise BadInput(f"{guarded}: the lock file {key} is a folder; remove it (no kldtui run "
                               "makes it)") from None
            except NotRegularFile as exc:
                raise BadInput(f"{guarded}: the lock file {key} {exc.strerror}; kldtui never writes "
                               "through it (remove it if no kldtui run made it)") from None
            except OSError as exc:
                raise BadInput(f"{guarded}: cannot create the lock file {key.name} "
                               f"({exc.strerror or exc}); make its folder writable, then run again") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise BadInput(f"{guarded}: cannot lock {key} ({exc.strerror or exc})") from None
                raise BadInput(f"{guarded}: in use by another kldtui run ({_holder(key)}); wait for it "
                               "to finish or stop it, or use another folder") from None
            # the holder before us may have removed the file between our open and our lock
            try:  # lstat: a link put in its place is not our file
                same = os.path.samestat(os.fstat(fd), os.lstat(key))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command(),
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        _held[key] = _Held(fd, 1)


def _release(lock_file: Path) -> None:
    key = _key(lock_file)
    with _held_lock:
        held = _held.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count > 0:
            return
        del _held[key]
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(held.fd), os.lstat(key)):  # only our own file, never a link
                os.unlink(key)  # while still locked: the next taker re-checks the inode
        with contextlib.suppress(OSError):
            os.close(held.fd)  # drops the flock


def check_output_file(file: str | os.PathLike[str], *, suffixes: Sequence[str] = (),
                      what: str = "output", fixed_name: bool = False) -> Path:
    """BadInput (one line) unless ``file`` can be written as an output file: not a folder, in a
    folder that exists and is writable, and, with ``suffixes``, a name ending in one of them (any
    case: the file is written in that format whatever its name; ``what`` names the file in the
    line). Commands call it on their output flags before any work (and :func:`hold` again when it
    takes the file's lock). The one owner of that rule and its words: with ``fixed_name`` (a work
    folder's report, a report written when its comparison ends: no other name can be given then) a
    folder at the name is to be moved away and an unwritable folder made writable, else another name
    (or a file in another folder) given."""
    f = Path(file)
    if suffixes and f.suffix.lower() not in suffixes:
        raise BadInput(f"{f}: the {what}'s file name must end in {' or '.join(suffixes)}")
    if f.is_dir():
        raise BadInput(f"{f}: is a folder where kldtui writes its {what}; move that folder away, then run "
                       "again" if fixed_name else f"{f}: is a folder; give a file name")
    if not f.parent.is_dir():
        raise BadInput(f"{f}: folder {f.parent} does not exist; create it first")
    if not os.access(f.parent, os.W_OK | os.X_OK):
        remedy = ", then run again" if fixed_name else " or give a file in another folder"
        raise BadInput(f"{f}: folder {f.parent} is not writable; make it writable{remedy}")
    return f


def check_json_output(file: str | os.PathLike[str], what: str) -> Path:
    """:func:`check_output_file` for a file written as JSON whatever its name (a comparison report, a
    noise model, ``diff --json``'s or ``leaderboard --json``'s document): its name must end in
    ``.json`` (any case), else BadInput naming the file and ``what`` it is."""
    return check_output_file(file, suffixes=(".json",), what=what)


def distinct_outputs(outputs: dict[str, str | os.PathLike[str] | None]) -> None:
    """BadInput (one line) when two output flags (``{"--json": path, "--output": path}``) name one
    file: the second would replace the first."""
    from kldtui.formats.safe_io import is_same_file

    given = [(flag, path) for flag, path in outputs.items() if path is not None]
    for i, (flag, path) in enumerate(given):
        for other, earlier in given[:i]:
            if is_same_file(path, earlier):
                raise BadInput(f"{flag} {path}: is {other}'s file too; give each its own file")


@contextlib.contextmanager
def hold(folders: Sequence[str | os.PathLike[str]] = (), files: Sequence[str | os.PathLike[str]] = (),
         what: str = "folder", fixed_names: bool = False) -> Iterator[None]:
    """Hold the locks of ``folders`` (created when missing) and of output ``files`` (their folder
    must exist; ``fixed_names``: files whose names are kldtui's, a work folder's reports:
    :func:`check_output_file`) for the block; BadInput when another run holds one. Taken in a fixed
    order."""
    locks: list[tuple[Path, str]] = []
    for folder in folders:
        check_folder_link(folder, what)
    for folder in folders:
        p = ensure_folder(folder, what)
        locks.append((lock_path_for_folder(p), str(p)))
    for file in files:
        f = check_output_file(file, fixed_name=fixed_names)
        locks.append((lock_path_for_file(f), str(f)))
    unique = sorted({_key(lf): (lf, g) for lf, g in locks}.values(), key=lambda t: str(_key(t[0])))
    taken: list[Path] = []
    try:
        for lock_file, guarded in unique:
            _acquire(lock_file, guarded)
            taken.append(lock_file)
        yield
    finally:
        for lock_file in reversed(taken):
            _release(lock_file)


class FolderLocks:
    """Locks taken once and held until :meth:`release` (a pipeline whose stages are called one at
    a time keeps its folders for its lifetime)."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None

    @property
    def held(self) -> bool:
        return self._stack is not None

    def acquire(self, folders: Sequence[str | os.PathLike[str]], what: str = "folder",
                files: Sequence[str | os.PathLike[str]] = (), fixed_names: bool = False) -> None:
        """Take the folders' locks and the output ``files``' (a run's report: ``kldtui compare
        --output`` to the same file is refused while the run holds it)."""
        if self._stack is not None:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(hold(folders, files=files, what=what, fixed_names=fixed_names))
        self._stack = stack

    def release(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
