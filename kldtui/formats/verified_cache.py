"""The SHA-256 of files already verified, kept where the verified folder's writers cannot forge it.

Hashing a 40 GiB reference takes minutes, so a file's hash is remembered once computed. The record
must not vouch for itself: a cache inside the verified folder (``.kldtui-verified.json``, as kldtui
kept it before) can be edited by whoever writes the folder, to make ``verify`` pass a replaced file.
So:

- records live in the user's cache folder (``$XDG_CACHE_HOME/kldtui/verified``, or
  ``KLDTUI_VERIFIED_CACHE``), one small file per verified file, named by its device and inode;
- a record holds the file's size, modification time and change time (``st_ctime``) when it was
  hashed: the change time moves on any write, ``chmod``, rename or ``utime`` and cannot be set by
  the folder's writer, so a file changed in place, even with its modification time put back, no
  longer matches and is hashed again; a record is only kept when the file did not change while
  it was hashed;
- the cache folder is trusted only when it is this user's, not a link, and writable by nobody
  else (mode ``0700`` when kldtui makes it); otherwise nothing is looked up or recorded (every file
  is hashed) and :attr:`VerifiedCache.untrusted` says why.

A ``.kldtui-verified.json`` left in a folder by an older kldtui is ignored.

Caches that must stay in a work folder (the per-window compare results) are signed instead:
:func:`sign` / :func:`signed_by_me` use an HMAC-SHA256 with a random key kept in the same trusted
folder (``.signing-key``, mode 0600), so an entry written by anyone else does not verify and is
computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from kldtui import settings
from kldtui.formats.atomic import write_json_atomic
from kldtui.formats.safe_io import read_text

LEGACY_NAME = ".kldtui-verified.json"  # the old in-folder cache: never read
RECORD_FORMAT = "kldtui-verified-v2"


def store_dir() -> Path:
    """The user's verified-hash folder."""
    configured = settings.VERIFIED_CACHE.get()
    return configured if configured is not None else settings.XDG_CACHE_HOME.get() / "kldtui" / "verified"


def _untrusted_reason(folder: Path) -> str | None:
    """Why ``folder`` cannot hold trusted records (None: it can), creating it when missing."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    except OSError as exc:
        return f"cannot be made ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return "is not a folder (a link or a file)"
    if st.st_uid != os.getuid():
        return f"belongs to user id {st.st_uid}, not to you"
    if st.st_mode & 0o022:
        return f"others can write into it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


MAX_RECORDS = 4096  # records kept before those of gone or changed files are pruned
KEY_NAME = ".signing-key"
KEY_BYTES = 32
# bytes of one verified-hash record read (a path, a hash, sizes and times); a larger one is not used
VERIFIED_RECORD_LIMIT = 4096


def _signing_key(folder: Path) -> bytes | None:
    """This user's secret key (made on first use), or None where it cannot be trusted."""
    if _untrusted_reason(folder) is not None:
        return None
    path = folder / KEY_NAME
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue  # another process made it meanwhile: read theirs
            except OSError:
                return None
            try:
                os.write(fd, os.urandom(KEY_BYTES))
            finally:
                os.close(fd)
            continue
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077
                    or st.st_size != KEY_BYTES):
                return None  # not ours, readable by others, or a FIFO: no key, nothing verifies
            key = os.read(fd, KEY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return key if len(key) == KEY_BYTES else None
    return None


def _canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def sign(doc: Any, *, store: Path | None = None) -> str | None:
    """An HMAC of ``doc`` (canonical JSON) with this user's key; None when there is no trusted key
    (then nothing signed verifies either)."""
    key = _signing_key(store if store is not None else store_dir())
    if key is None:
        return None
    return hmac.new(key, _canonical(doc), hashlib.sha256).hexdigest()


def signed_by_me(doc: Any, signature: object, *, store: Path | None = None) -> bool:
    """Whether ``signature`` is this user's HMAC of ``doc``."""
    if not isinstance(signature, str):
        return False
    want = sign(doc, store=store)
    return want is not None and hmac.compare_digest(want, signature)


def _identity(st: os.stat_result) -> dict[str, int]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


class VerifiedCache:
    """Remembered hashes for the files of ``folder`` (any file, in fact: records are per inode).

    Thread-safe. :meth:`record` keeps a hash in memory, :meth:`save` writes the records; neither
    ever fails a run (no cache is just slower). ``path`` is the store, for messages.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, store: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.path = store if store is not None else store_dir()
        self.untrusted = _untrusted_reason(self.path)
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}
        self._forget: set[str] = set()

    @staticmethod
    def _name(st: os.stat_result) -> str:
        return f"{st.st_dev:x}-{st.st_ino:x}.json"

    def _stat(self, path: str | os.PathLike[str]) -> os.stat_result | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def lookup(self, path: str | os.PathLike[str]) -> str | None:
        """The remembered SHA-256 if the file is the one hashed and unchanged since, else None."""
        if self.untrusted is not None:
            return None
        st = self._stat(path)
        if st is None:
            return None
        name = self._name(st)
        with self._lock:
            entry = self._pending.get(name)
        if entry is None:
            try:
                entry = json.loads(read_text(self.path / name, limit=VERIFIED_RECORD_LIMIT, follow=False))
            except (OSError, ValueError):
                return None
        if not isinstance(entry, dict) or entry.get("format") != RECORD_FORMAT:
            return None
        if any(entry.get(k) != v for k, v in _identity(st).items()):
            return None
        sha = entry.get("sha256")
        return sha if isinstance(sha, str) and len(sha) == 64 else None

    def record(self, path: str | os.PathLike[str], sha256: str,
               before: os.stat_result | None = None) -> None:
        """Remember ``path``'s hash; ``before``: the file's stat when hashing began (not recorded
        when the file changed meanwhile)."""
        if self.untrusted is not None:
            return
        st = self._stat(path)
        if st is None or (before is not None and (self._name(before) != self._name(st)
                                                  or _identity(before) != _identity(st))):
            return
        entry = {"format": RECORD_FORMAT, **_identity(st), "sha256": sha256,
                 "path": os.path.abspath(path),
                 "verified_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with self._lock:
            self._pending[self._name(st)] = entry
            self._forget.discard(self._name(st))

    def forget(self, path: str | os.PathLike[str]) -> None:
        st = self._stat(path)
        if st is None:
            return
        with self._lock:
            self._pending.pop(self._name(st), None)
            self._forget.add(self._name(st))

    def save(self) -> bool:
        """Write what was recorded; False when it could not be (nothing else happens)."""
        if self.untrusted is not None:
            return False
        with self._lock:
            pending, self._pending = self._pending, {}
            forget, self._forget = self._forget, set()
        ok = True
        for name in forget:
            with contextlib.suppress(OSError):
                (self.path / name).unlink()
        for name, entry in pending.items():
            try:
                write_json_atomic(self.path / name, entry)
            except OSError:
                ok = False
        if pending:
            self.prune()
        return ok

    def prune(self, keep: int = MAX_RECORDS) -> int:
        """Above ``keep`` records, remove those of files that are gone or changed (one small file per
        verified file would otherwise pile up); returns how many went."""
        try:
            names = [n for n in os.listdir(self.path) if n.endswith(".json")]
        except OSError:
            return 0
        if len(names) <= keep:
            return 0
        removed = 0
        for name in names:
            try:
                entry = json.loads(read_text(self.path / name, limit=VERIFIED_RECORD_LIMIT, follow=False))
                st = os.stat(str(entry["path"]))
                current = self._name(st) == name and all(entry.get(k) == v for k, v in _identity(st).items())
            except (OSError, ValueError, KeyError, TypeError):
                current = False
            if not current:
                with contextlib.suppress(OSError):
                    (self.path / name).unlink()
                    removed += 1
        return removed
