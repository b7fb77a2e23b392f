"""What a candidate's weights are, as a short fingerprint of their files' content.

A profile names a candidate by its settings (kind, model path, arguments). Users quantize again into
the same file name (``q4_k_m.gguf`` with a new importance matrix), so the settings alone would let a
resumed run join windows of the old weights to the new, and a campaign rank the old report under
the new file. The fingerprint joins the server's identity (kldtui.servers.base.server_identity), which
capture records and finalized manifests keep, so a change is found before anything is served.

Hashing a checkpoint whole would take minutes per run (a 1 TB model), so each file is read in
samples. :func:`weights_content` (what versions before the samples recorded, kept so that their
records still compare) takes each file's name, its size and the SHA-256 of its first and last
:data:`SAMPLE` bytes: a GGUF's start holds its metadata and a safetensors shard's its header, and the
end holds the last tensor's data. Those ends can be alike in two quantizations of one model: with a
large vocabulary a GGUF's first 64 KiB is mostly tokenizer metadata, the same in every quantization,
and the last tensor may be one that a quantization mix keeps at one type. So
:func:`weights_interior` also hashes :data:`INTERIOR_SAMPLES` blocks of :data:`SAMPLE` bytes spaced
evenly between the ends (2 MiB per file in all): a new quantization rewrites nearly every tensor's
bytes, so it changes these blocks. A change confined to bytes between the blocks of a file of the same
size still reads alike; the docs say so. Each file's digests are remembered for the process by its size,
modification time and inode, so a campaign asks them once per file.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.formats.model_size import weight_files
from kldtui.formats.safe_io import open_regular

SAMPLE = 64 * 1024  # bytes read at each end of every weights file, and in each interior block
INTERIOR_SAMPLES = 30  # blocks read between the ends of a file larger than the ends hold
FINGERPRINT_HEX = 16  # hex digits kept: what a record stores and a message shows


def weights_content(path: str | os.PathLike[str] | None) -> str | None:
    """The fingerprint of the weights' ends at ``path`` (a ``.gguf`` or ``.safetensors`` file or their
    folder, as :func:`kldtui.formats.model_size.weight_files` finds them), or None when there are none
    to read (no local path, a folder without weights, a file that cannot be read: the settings then
    stand alone, as before)."""
    return _fingerprint(path, interior=False)


def weights_interior(path: str | os.PathLike[str] | None) -> str | None:
    """The fingerprint of the :data:`INTERIOR_SAMPLES` blocks spaced between each weights file's ends,
    with the files' names and sizes, or None as :func:`weights_content`."""
    return _fingerprint(path, interior=True)


def _fingerprint(path: str | os.PathLike[str] | None, interior: bool) -> str | None:
    if path is None:
        return None
    try:
        files = weight_files(path)
        digest = hashlib.sha256()
        for f in files:
            st = os.stat(f)
            digest.update(f.name.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(_file_digests(str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino,
                                        st.st_dev)[interior])
    except (BadInput, OSError, ValueError):
        return None
    return digest.hexdigest()[:FINGERPRINT_HEX]


def interior_offsets(size: int) -> list[int]:
    """Where the interior blocks of a file of ``size`` bytes start: spaced evenly between the end of the
    first :data:`SAMPLE` bytes and the start of the last, none where the ends hold the whole file."""
    first, last = SAMPLE, size - SAMPLE
    if last - first <= 0:
        return []
    step = (last - first) / (INTERIOR_SAMPLES + 1)
    return sorted({first + int(step * (i + 1)) for i in range(INTERIOR_SAMPLES)})


@functools.lru_cache(maxsize=1024)
def _file_digests(path: str, size: int, mtime_ns: int, inode: int, device: int) -> tuple[bytes, bytes]:
    """SHA-256 over the size and both ends of one file, and over the size and its interior blocks (the
    stat fields key the cache: a file written again is read again)."""
    ends = hashlib.sha256(str(size).encode() + b"\0")
    inner = hashlib.sha256(str(size).encode() + b"\0")
    with open_regular(Path(path)) as handle:  # never blocks on a FIFO named like a weights file
        ends.update(handle.read(SAMPLE))
        for offset in interior_offsets(size):
            handle.seek(offset)
            inner.update(handle.read(min(SAMPLE, size - SAMPLE - offset)))
        if size > SAMPLE:
            handle.seek(max(SAMPLE, size - SAMPLE))
            ends.update(handle.read(SAMPLE))
    return ends.digest(), inner.digest()


__all__ = ["FINGERPRINT_HEX", "INTERIOR_SAMPLES", "SAMPLE", "interior_offsets", "weights_content",
           "weights_interior"]
