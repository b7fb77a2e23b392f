"""The compiled compare kernel (``_fastkl.c``): built at first use, cached per user, loaded with ctypes.

:func:`load` compiles ``_fastkl.c`` with the system C compiler (``$CC``, ``cc``, ``gcc`` or
``clang``; tuned for this machine with ``-march=native``, plain ``-O3`` if that fails) into
``$XDG_CACHE_HOME/kldtui/fastkl/<key>.so`` (default ``~/.cache``), keyed by the SHA-256 of the
source, the compiler's path and version, the flags and the CPU (model and feature flags), so a
changed source, compiler or machine builds anew.  ``KLDTUI_FASTKL_MARCH`` replaces ``native`` (e.g.
``x86-64-v3``: the AVX2 build, on an AVX-512 machine).  The library is written under a temporary name
and renamed, so concurrent first uses are safe.  After loading, the kernel's exp and ``n log n``
are checked against libm; any failure (no compiler, a failed build, a bad self-check,
``KLDTUI_NO_C_KERNEL=1``) makes :func:`load` return ``None`` and :func:`why_not` say why; callers
then use the NumPy kernel.

:class:`CRowKernel` has the same interface as :class:`~kldtui.metrics.kernels.NumpyRowKernel` and
shares its precise path for tiny divergences (KL below
:data:`~kldtui.metrics.kernels.PRECISE_BELOW`).  The C code has two paths (see the top of
``_fastkl.c``): rows whose logits are finite and within 80 of their maximum on both sides take
the float32 path, which returns KL, reverse KL and JS from second-order per-element sums (within
:data:`~kldtui.metrics.kernels.FLOAT32_PATH_BOUND`, 4e-7, relative; ``ref_top_prob`` and next-token
log-probabilities within ~1e-7); other rows (masks,
very wide rows, NaN/Inf) get float64 sums that :func:`~kldtui.metrics.kernels.combine` turns into
figures.  ctypes releases the GIL, so a pool of Python threads uses every core.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kldtui import settings
from kldtui.metrics.kernels import NumpyRowKernel, RowStats, combine

SOURCE = Path(__file__).with_name("_fastkl.c")
FLAG_SETS = (["-O3", "-march=native", "-fno-math-errno", "-ffp-contract=fast"],
             ["-O3", "-fno-math-errno"])


def flag_sets() -> tuple[list[str], ...]:
    """The compiler flags to try, best first; ``KLDTUI_FASTKL_MARCH`` (e.g. x86-64-v3) replaces
    ``native``: the path an AVX2-only machine gets, timed on an AVX-512 machine."""
    march = settings.FASTKL_MARCH.get()
    if not march:
        return FLAG_SETS
    return tuple([f"-march={march}" if f == "-march=native" else f for f in flags] for flags in FLAG_SETS)
# exp and n log n of the compiled code against libm, relative
SELFCHECK_LIMIT = 1e-13

_lock = threading.Lock()
_state: dict[str, object] = {}


def cache_dir() -> Path:
    return settings.XDG_CACHE_HOME.get() / "kldtui" / "fastkl"


def _compiler() -> str | None:
    for name in (settings.CC.get(), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def _cpu_id() -> bytes:
    """The CPU's model and feature flags: a ``-march=native`` build must not be reused on another
    CPU (a home folder shared between machines)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    keep = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part")]
    return "\n".join(dict.fromkeys(keep)).encode() or platform.processor().encode()


def _compiler_version(cc: str) -> bytes:
    return subprocess.run([cc, "--version"], capture_output=True, timeout=30).stdout


def _library_path(cc: str, flags: list[str], src: bytes, version: bytes) -> Path:
    """Where the build of ``src`` by ``cc`` with ``flags`` for this CPU is cached."""
    key = hashlib.sha256(b"\0".join([src, cc.encode(), version, " ".join(flags).encode(),
                                     platform.machine().encode(), _cpu_id()])).hexdigest()[:24]
    return cache_dir() / f"fastkl-{key}.so"


def _build(cc: str, flags: list[str], src: bytes) -> Path:
    out = _library_path(cc, flags, src, _compiler_version(cc))
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-lm"],
                              capture_output=True, timeout=120)
        if proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip().splitlines()
            raise OSError(f"{cc} {' '.join(flags)} failed: {msg[0] if msg else proc.returncode}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _open(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    p = ctypes.c_void_p
    lib.fastkl_rows.argtypes = [p, p, ctypes.c_int64, ctypes.c_int64, p, ctypes.c_int, p, p, p, p]
    lib.fastkl_rows.restype = None
    lib.fastkl_selfcheck.argtypes = []
    lib.fastkl_selfcheck.restype = ctypes.c_double
    err = lib.fastkl_selfcheck()
    if not err <= SELFCHECK_LIMIT:
        raise OSError(f"self-check failed: exp/log relative error {err:.2e}")
    return lib


def load() -> ctypes.CDLL | None:
    """The compiled kernel library, building it if needed; None when it cannot be had."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        lib, why = None, ""
        if settings.NO_C_KERNEL.get():
            why = f"disabled by {settings.NO_C_KERNEL.name}"
        elif (cc := _compiler()) is None:
            why = "no C compiler found (cc, gcc, clang or $CC)"
        else:
            src = SOURCE.read_bytes()
            for flags in flag_sets():
                try:
                    path = _build(cc, flags, src)
                    lib = _open(path)
                    _state["flags"] = " ".join(flags)
                    _state["path"] = path
                    break
                except (OSError, subprocess.SubprocessError) as exc:
                    why = f"{type(exc).__name__}: {exc}"
        _state["lib"] = lib
        _state["why"] = why
        return lib


def available() -> bool:
    return load() is not None


def why_not() -> str:
    """Why :func:`load` gave None ('' when it did not)."""
    load()
    return str(_state.get("why", ""))


@dataclass(frozen=True)
class KernelStatus:
    """What ``kldtui doctor`` and ``--version`` say about the compiled kernel."""

    compiler: str | None  # its path; None: none found
    compiler_version: str  # the first line of ``cc --version``
    cached: bool  # a build for this source, compiler and CPU was there before this call
    built: bool  # the library loads and passed its self-check (False when not asked to build)
    flags: str = ""
    library: Path | None = None
    build_seconds: float | None = None  # time to load or build it in this call
    why_not: str = ""


def status(build: bool = True) -> KernelStatus:
    """The kernel's compiler and build; with ``build`` it is built now when it is not cached (what
    the first compare would otherwise do silently)."""
    disabled = settings.NO_C_KERNEL.get()
    cc = _compiler()
    if cc is None:
        return KernelStatus(None, "", False, False, why_not="no C compiler found (cc, gcc, clang or $CC)")
    try:
        version_text = _compiler_version(cc)
    except (OSError, subprocess.SubprocessError) as exc:
        return KernelStatus(cc, "", False, False, why_not=f"{cc} --version failed: {exc}")
    version = version_text.decode(errors="replace").strip().splitlines()[0] if version_text.strip() else ""
    src = SOURCE.read_bytes()
    cached = any(_library_path(cc, flags, src, version_text).exists() for flags in flag_sets())
    if disabled:
        return KernelStatus(cc, version, cached, False, why_not=f"disabled by {settings.NO_C_KERNEL.name}")
    if not build:
        return KernelStatus(cc, version, cached, False)
    started = time.monotonic()
    lib = load()
    return KernelStatus(cc, version, cached, lib is not None, str(_state.get("flags", "")),
                        _state.get("path"), time.monotonic() - started, why_not())  # type: ignore[arg-type]


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _aligned(n: int, align: int = 64) -> np.ndarray:
    """``n`` float64 values starting at a multiple of ``align`` bytes."""
    raw = np.empty(n + align // 8, dtype=np.float64)
    skip = (-raw.ctypes.data % align) // 8
    return raw[skip:skip + n]


class CRowKernel:
    """Row kernel on the compiled code; one instance per thread (it owns two float64 row buffers)."""

    name = "c-kernel"

    def __init__(self, vocab: int) -> None:
        lib = load()
        if lib is None:
            raise RuntimeError(f"the C kernel is not available: {why_not()}")
        self._fn = lib.fastkl_rows
        self.vocab = vocab
        # float64 rows for the float64 path, float32 rows (padded) for the float32 path; aligned
        # to 64 bytes (measured: 16-byte aligned buffers, as NumPy may give, cost 20-30 %)
        self._ea = _aligned(vocab + 64)
        self._eb = _aligned(vocab + 64)

    def block(self, x: np.ndarray, y: np.ndarray, next_tokens: np.ndarray,
              reverse: bool = False) -> RowStats:
        """Figures for rows of ``x`` (reference) and ``y`` (candidate), float32 ``[rows, vocab]``;
        ``next_tokens[i]`` is the token row ``i`` predicts."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.ascontiguousarray(y, dtype=np.float32)
        rows, vocab = x.shape
        if y.shape != x.shape or vocab != self.vocab:
            raise ValueError(f"blocks of shape {x.shape} and {y.shape} for a kernel of vocabulary "
                             f"{self.vocab}")
        tok = np.ascontiguousarray(next_tokens, dtype=np.int64)
        if tok.shape != (rows,) or (rows and (tok.min() < 0 or tok.max() >= vocab)):
            raise ValueError("next_tokens must hold one token id in [0, vocab) per row")
        sums = np.empty((rows, 11), dtype=np.float64)
        idx = np.empty((rows, 4), dtype=np.int64)
        self._fn(_ptr(x), _ptr(y), rows, vocab, _ptr(tok), int(reverse), _ptr(self._ea), _ptr(self._eb),
                 _ptr(sums), _ptr(idx))
        out = RowStats.empty(rows, reverse)
        out.argmax_ref[:] = idx[:, 0]
        out.argmax_cand[:] = idx[:, 1]
        out.rank_ref_top[:] = idx[:, 2]
        s = sums.T
        fast = idx[:, 3] == 1
        with np.errstate(all="ignore"):
            f = combine(np, s[0], s[1], s[2], s[3], s[4], s[5], s[6] if reverse else None)
            # rows on the float32 path: the C code gave KL, JS and the reverse KL themselves
            f["kl"] = np.where(fast, s[2], f["kl"])
            f["js"] = np.where(fast, s[3], f["js"])
            if reverse:
                f["kl_reverse"] = np.where(fast, s[4], f["kl_reverse"])
            # the entropies from out[9], out[10] (both paths)
            f["entropy_ref"] = f["lsx"] - s[9] / s[0]
            f["entropy_cand"] = f["lsy"] - s[10] / s[1]
            NumpyRowKernel.finish(x, y, out, f, np.stack([s[7], s[8]]), reverse, second_order=fast)
        return out


__all__ = ["CRowKernel", "KernelStatus", "available", "cache_dir", "load", "status", "why_not"]
