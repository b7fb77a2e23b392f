"""Atomic file publication: write under a temporary name in the same folder, then rename.

A reader never sees a half-written file under its final name. ``publish_new`` refuses to
replace an existing file (a hard link fails if the name exists), which the chunk writer and
finalize rely on; :func:`write_new_folder` does the same for a whole folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from kldtui.errors import DISK_FULL_ERRNOS, DiskFull
from kldtui.text import human_bytes


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for a moment, for every
    thread); 0o022 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _tmp_path(final: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    try:
        # mkstemp makes 0600; published files are readable like any other file (0644 under the
        # usual umask), as the logits files are: a group sharing a work folder reads the reports
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    return Path(name)


def disk_full(final: Path, exc: OSError, needed: int | None = None) -> DiskFull:
    """The one message for a file that could not be written for lack of space."""
    need = f" (it needs {human_bytes(needed)})" if needed is not None else ""
    err = DiskFull(f"{final}: could not be written{need}: {exc.strerror or exc}; free disk space and run "
                   "again (nothing was left under this name)")
    err.errno = exc.errno
    return err


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *, replace: bool = True,
                fsync: bool = True, size_hint: int | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success publish it as ``path``.

    With ``replace=False`` publication fails with :class:`FileExistsError` if ``path`` exists.
    On any exception the temporary file is removed and ``path`` is untouched.
    """
    final = Path(path)
    tmp = _tmp_path(final)
    try:
        with open(tmp, mode) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, final)
        else:
            publish_new(tmp, final)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, DiskFull) and exc.errno in DISK_FULL_ERRNOS:
            raise disk_full(final, exc, size_hint) from None
        raise


# errnos of file systems without hard links (FUSE, object-store and some network mounts)
_NO_LINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EACCES}
_RENAME_NOREPLACE = 1  # linux/fs.h


def publish_new(tmp: Path, final: Path) -> None:
    """Give ``tmp`` the name ``final`` only if ``final`` does not exist; remove ``tmp``.

    A hard link (fails if the name exists); where the file system has none, an exclusive
    rename (``renameat2(RENAME_NOREPLACE)``), and where that is missing too, a rename after
    checking the name is free (one writer per name: the capture hook's chunk names are unique).
    """
    try:
        os.link(tmp, final)  # raises FileExistsError, never overwrites
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        _rename_noreplace(tmp, final)
        return
    tmp.unlink()


def _rename_noreplace(tmp: Path, final: Path) -> None:
    if _renameat2 is not None:
        rc = _renameat2(-100, os.fsencode(tmp), -100, os.fsencode(final), _RENAME_NOREPLACE)  # AT_FDCWD
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(final))
    if os.path.lexists(final):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
    os.rename(tmp, final)


def _load_renameat2() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None  # not glibc >= 2.28 / not Linux: the checked rename
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_renameat2 = _load_renameat2()


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, sort_keys: bool = True) -> None:
    """Write ``data`` as 2-space indented JSON with a trailing newline, atomically."""
    text = json.dumps(data, indent=2, sort_keys=sort_keys, allow_nan=False) + "\n"
    with atomic_open(path, "w", size_hint=len(text.encode("utf-8"))) as handle:
        handle.write(text)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb", size_hint=len(data)) as handle:
        handle.write(data)


T = TypeVar("T")


def write_new_folder(path: str | os.PathLike[str], write: Callable[[Path], T]) -> T:
    """``write`` a folder under a temporary name beside ``path``, then rename it to ``path``: a stop
    at any moment leaves no half-made folder under its final name. The folder gets the permissions
    ``mkdir`` gives (0777 less the umask), as every other output does, not ``mkdtemp``'s private
    0700. Returns what ``write`` returns; on any exception the temporary folder is removed.
    FileExistsError when ``path`` is a folder that holds anything (never replaced); an empty one
    is taken."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        os.chmod(staging, 0o777 & ~_umask())
        result = write(staging)
        try:
            os.rename(staging, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            raise FileExistsError(exc.errno, os.strerror(exc.errno), str(final)) from None
    except BaseException:
        _delete_tree(staging)
        raise
    return result


REMOVING_MARK = ".removing-"  # a folder being removed: ``.<name>.removing-<random>`` beside where it was


def remove_tree_atomically(path: str | os.PathLike[str]) -> None:
    """Remove a folder so that a kill at any moment leaves it either whole under its name or gone:
    it is first renamed aside (one rename in the same folder), then deleted. A kill during the
    deletion leaves only the renamed folder, which :func:`sweep_removals` clears later. A link or a
    file under the name is left alone (it is not a folder this program made)."""
    folder = Path(path)
    try:
        if not os.path.isdir(folder) or os.path.islink(folder):
            return
        aside = folder.with_name(f".{folder.name}{REMOVING_MARK}{os.urandom(4).hex()}")
        os.rename(folder, aside)
    except OSError:
        return
    _delete_tree(aside)


def sweep_removals(parent: str | os.PathLike[str]) -> None:
    """Finish removals a kill interrupted: delete ``parent``'s folders named by
    :func:`remove_tree_atomically` (folders only, never through a link)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if name.startswith(".") and REMOVING_MARK in name:
            entry = Path(parent) / name
            if os.path.isdir(entry) and not os.path.islink(entry):
                _delete_tree(entry)


def _delete_tree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
