"""What a candidate's weights are, as a short fingerprint of their files' content.

A profile names a candidate by its settings (kind, model path, arguments). Users quantize again into
the same file name (``q4_k_m.gguf`` with a new importance matrix), so the settings alone would let a
resumed run join windows of the old weights to the new, and a campaign rank the old report under
the new file. The fingerprint joins the server's identity (kldtui.servers.base.server_identity), which
capture records and finalized manifests keep, so a change is found before anything is served.

Hashing a checkpoint whole would take minutes per run (a 1 TB model), so each file contributes its
name, its size and the SHA-256 of its first and last :data:`SAMPLE` bytes: a GGUF's start holds its
metadata and tensor table, a safetensors shard's its header, and the end holds the last tensor's
data, which a new quantization changes. Two files of one size whose differences lie only in their
middles read alike; the docs say so. Each file's digest is remembered for the process by its size,
modification time and inode, so a campaign asks it once per file.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.formats.model_size import weight_files
from kldtui.formats.safe_io import open_regular

SAMPLE = 64 * 1024  # bytes read at each end of every weights file
FINGERPRINT_HEX = 16  # hex digits kept: what a record stores and a message shows


def weights_content(path: str | os.PathLike[str] | None) -> str | None:
    """The fingerprint of the weights at ``path`` (a ``.gguf`` or ``.safetensors`` file or their folder,
    as :func:`kldtui.formats.model_size.weight_files` finds them), or None when there are none to read
    (no local path, a folder without weights, a file that cannot be read: the settings then stand
    alone, as before)."""
    if path is None:
        return None
    try:
        files = weight_files(path)
        digest = hashlib.sha256()
        for f in files:
            st = os.stat(f)
            digest.update(f.name.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(_file_digest(str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev))
    except (BadInput, OSError, ValueError):
        return None
    return digest.hexdigest()[:FINGERPRINT_HEX]


@functools.lru_cache(maxsize=1024)
def _file_digest(path: str, size: int, mtime_ns: int, inode: int, device: int) -> bytes:
    """SHA-256 over the size and both ends of one file (the stat fields key the cache: a file written
    again is read again)."""
    digest = hashlib.sha256(str(size).encode() + b"\0")
    with open_regular(Path(path)) as handle:  # never blocks on a FIFO named like a weights file
        digest.update(handle.read(SAMPLE))
        if size > SAMPLE:
            handle.seek(max(SAMPLE, size - SAMPLE))
            digest.update(handle.read(SAMPLE))
    return digest.digest()


__all__ = ["FINGERPRINT_HEX", "SAMPLE", "weights_content"]
