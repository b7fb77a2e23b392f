"""Opening files in folders other people write into: never block, never write through a link.

Work, suite, capture and candidate folders are shared (a GPU host, a network disk, a suite from the
Hub), so any name in them may be a FIFO, a device, a folder or a symbolic link someone planted.
Every read of a file kldtui did not just write and every write that is not an atomic rename goes
through here:

- :func:`open_regular` opens for reading without blocking (``O_NONBLOCK``: opening a FIFO with no
  writer would wait forever) and refuses anything that is not a regular file (a FIFO, a device, a
  socket, a folder) by ``fstat`` on the opened descriptor, so nothing can be swapped in between a
  check and the open. Links are followed for reading (a suite may link its files); the folders'
  own checks refuse links that lead out of them.
- :func:`open_private` opens a file kldtui writes in place (a lock file, a log, a partial download)
  with ``O_NOFOLLOW`` and checks it is a regular file with one name, so a planted symbolic or hard
  link never makes kldtui create, truncate or append to a file outside the folder.
- :func:`check_output` refuses an output path that names one of the command's inputs (a report
  written over the candidate's ``manifest.json``), by real path and by ``samefile``.

Errors are :class:`OSError` subclasses (``IsADirectoryError`` for a folder, :class:`NotRegularFile`
otherwise), so callers that already turn ``OSError`` into a one-line message keep doing so, through
:func:`read_failure` (the problem, then what to do); :func:`check_output` raises
:class:`~kldtui.errors.BadInput`.
"""

from __future__ import annotations

import errno
import fcntl
import io
import os
import stat
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import BinaryIO, TextIO, cast

from kldtui.errors import BadInput
from kldtui.text import human_bytes


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a link where a regular file is expected."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _refuse(path: str | os.PathLike[str], mode: int) -> OSError:
    if stat.S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, "is a folder, not a file", os.fspath(path))
    return NotRegularFile(errno.EINVAL, f"is {kind_of(mode)}, not a regular file", os.fspath(path))


def read_failure(path: str | os.PathLike[str], exc: OSError, what: str, remedy: str) -> BadInput:
    """The one line for ``exc``, raised reading the ``what`` (``"comparison report"``) at ``path``:
    the problem, then ``remedy`` (what to do), e.g. ``x.json: is a FIFO (named pipe), not a regular
    file; give ...``. Every loader of a user's or another tool's file words its read errors here."""
    name = os.fspath(path)
    if isinstance(exc, FileNotFoundError):
        problem = f"{what} not found"
    elif isinstance(exc, IsADirectoryError):
        problem = "is a folder, not a file"
    elif isinstance(exc, NotRegularFile) and exc.strerror:
        problem = exc.strerror  # "is a FIFO (named pipe), not a regular file"
    else:  # no permission, a loop of links, an I/O error, over the size limit
        problem = f"{what} cannot be read ({exc.strerror or exc})"
    return BadInput(f"{name}: {problem}; {remedy}")


def _clear_nonblock(fd: int) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


def open_regular_fd(path: str | os.PathLike[str], *, follow: bool = True) -> int:
    """A read-only descriptor on the regular file at ``path`` (never blocks); see the module doc."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotRegularFile(errno.ELOOP, "is a symbolic link, not a regular file",
                                 os.fspath(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, st.st_mode)
        _clear_nonblock(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike[str], *, follow: bool = True, buffering: int = -1) -> BinaryIO:
    """``open(path, "rb")`` that refuses non-regular files and never blocks; ``follow=False``
    refuses a symbolic link too."""
    fd = open_regular_fd(path, follow=follow)
    try:
        return cast(BinaryIO, open(fd, "rb", buffering=buffering, closefd=True))  # noqa: SIM115
    except BaseException:
        os.close(fd)
        raise


def open_regular_raw(path: str | os.PathLike[str], *, follow: bool = True) -> io.FileIO:
    """:func:`open_regular` unbuffered (``readinto`` straight into a caller's buffer)."""
    fd = open_regular_fd(path, follow=follow)
    try:
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], *, limit: int | None = None, follow: bool = True) -> bytes:
    """The content of the regular file at ``path``; more than ``limit`` bytes is an OSError
    (EFBIG) rather than a read that fills the memory: at once when its size says so, or once it has
    grown past the limit while read."""
    with open_regular(path, follow=follow) as handle:
        if limit is None:
            return handle.read()
        # read(n) allocates n bytes before reading: ask for what the file holds (plus one byte, to
        # see it grow), never the whole limit, and go on only while it keeps growing
        size = os.fstat(handle.fileno()).st_size
        if size > limit:  # refused before a byte is read (a sparse file of terabytes is quick to make)
            raise OSError(errno.EFBIG, f"larger than {human_bytes(limit)}", os.fspath(path))
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            part = handle.read(min(limit + 1 - got, max(size + 1 - got, 1 << 16)))
            if not part:
                break
            parts.append(part)
            got += len(part)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {human_bytes(limit)}", os.fspath(path))
    return data


def read_chunks(path: str | os.PathLike[str], size: int, *,
                follow: bool = True) -> Generator[bytes, None, None]:
    """The regular file at ``path`` in parts of at most ``size`` bytes, for a file that may be too
    large to read whole (the file stays open until the parts run out or the iterator is closed)."""
    with open_regular(path, follow=follow) as handle:
        while part := handle.read(size):
            yield part


def read_text(path: str | os.PathLike[str], *, encoding: str = "utf-8", errors: str = "strict",
              limit: int | None = None, follow: bool = True) -> str:
    """:func:`read_bytes` decoded (``UnicodeDecodeError`` as ``Path.read_text`` raises it)."""
    return read_bytes(path, limit=limit, follow=follow).decode(encoding, errors)


def _check_private(fd: int, path: str | os.PathLike[str]) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, st.st_mode)
    if st.st_nlink > 1:
        raise NotRegularFile(errno.EMLINK, f"has {st.st_nlink} hard links (other names for the same "
                             "file)", os.fspath(path))
    return st


def open_private_fd(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` with ``O_NOFOLLOW | O_NONBLOCK``, refusing anything but a regular
    file with one link. For files kldtui writes in place: lock files, logs, partial downloads."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "is a symbolic link", os.fspath(path)) from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise NotRegularFile(errno.ENXIO, "is a FIFO (named pipe), not a regular file",
                                 os.fspath(path)) from None
        raise
    try:
        _check_private(fd, path)
        _clear_nonblock(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: str | os.PathLike[str], mode: str = "ab") -> BinaryIO:
    """A binary file object on :func:`open_private_fd`: ``"ab"`` (append, created when missing),
    ``"r+b"`` (read and write an existing file) or ``"xb"`` (a new file; an existing name, a link
    included, is FileExistsError)."""
    modes = {"ab": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "r+b": os.O_RDWR,
             "xb": os.O_WRONLY | os.O_CREAT | os.O_EXCL}
    if mode not in modes:
        raise ValueError(f"open_private supports {sorted(modes)}, not {mode!r}")
    fd = open_private_fd(path, modes[mode])
    try:
        return cast(BinaryIO, open(fd, "wb" if mode == "xb" else mode, closefd=True))  # noqa: SIM115
    except BaseException:
        os.close(fd)
        raise


def open_private_text(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> TextIO:
    """:func:`open_private` in append mode, as text (a log, a marker)."""
    return io.TextIOWrapper(open_private(path, "ab"), encoding=encoding)


def is_present(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a regular file (a link to one counts); False when nothing is there;
    :class:`NotRegularFile` (or ``IsADirectoryError``) when something else is (a FIFO, a device)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise NotRegularFile(errno.ENOENT, "is a symbolic link to nothing", os.fspath(path)) from None
        return False
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, st.st_mode)
    return True


def regular_size(path: str | os.PathLike[str]) -> int | None:
    """The size of the regular file at ``path`` (not following a link); 0 when there is none,
    None when the name holds something else (a link, a FIFO, a folder, a file with other names)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        return None
    return st.st_size


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (whose file system it will be written on)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def is_same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same real path, or (both existing) the same inode."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
    except (OSError, ValueError):
        pass
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


INPUT_FILES_MAX = 100_000  # files looked at in the input folders (a suite has a few dozen)


def input_files(inputs: Iterable[str | os.PathLike[str] | None], depth: int = 2) -> list[Path]:
    """The files a command reads: each given file, and the files of each given folder down to
    ``depth`` levels (a suite folder: its manifest and ``tokens/``; a logits folder: its manifest
    and logits files)."""
    out: list[Path] = []
    for item in inputs:
        if item is None:
            continue
        p = Path(item)
        if not p.is_dir():
            out.append(p)
            continue
        base = len(p.parts)
        for folder, dirs, files in os.walk(p):
            level = len(Path(folder).parts) - base
            dirs[:] = [d for d in dirs if not d.startswith(".")] if level + 1 < depth else []
            out.extend(Path(folder) / f for f in files)
            if len(out) > INPUT_FILES_MAX:
                return out
    return out


def check_output(output: str | os.PathLike[str] | None, inputs: Iterable[str | os.PathLike[str] | None],
                 flag: str = "--output") -> None:
    """BadInput when ``output`` names one of ``inputs`` or a file in an input folder (a manifest, a
    logits file, a report being read), by real path or as the same file (a hard link): writing the
    result there would replace what the command reads. ``None`` (no output asked): nothing."""
    if output is None:
        return
    for item in input_files(inputs):
        if is_same_file(output, item):
            raise BadInput(f"{flag} {output}: is an input of this command ({item}); writing there would "
                           "replace it, give another output file")
