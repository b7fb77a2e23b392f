"""Compare backends: one vocabulary (:class:`Backend` and its :data:`SPECS`) and one chooser
(:func:`choose_backend`), the only place where a request (``--backend``, ``[compare] backend``)
becomes the backend that runs.

A request is ``auto``, ``torch`` or a backend's option value (:data:`BACKEND_OPTIONS`):

* an explicit backend is used as asked, or refused in one line when it cannot run here;
* ``torch``: CUDA when torch sees a GPU, else torch on the CPU;
* ``auto`` with no server on this host (none of this run's, and no process in /proc that one of
  the server kinds' signs recognises: :func:`servers_found`): the first GPU with the memory a
  compare needs plus a margin free, else the compiled C kernel (built at first use,
  :mod:`kldtui.metrics.ckernel`), else NumPy; a server of this run counts as on this host when its
  URL names any of this host's names or addresses (:func:`kldtui.this_host.is_this_host`);
* ``auto`` when the caller says it does not know the signs (``server_signs`` None, which every
  caller passes on purpose: the argument has no default): the CPU kernel, never a GPU, and the
  reason says why. The compare stage names no server kind (the noise floor runs it below them);
  the front ends and the pipeline pass the registered kinds' signs
  (``kldtui.servers.registry.process_signs``);
* ``auto`` while a server is starting or running on this host (``serving``, or one found): the CPU
  kernel with its threads capped (half the cores) so the capture client and the server's own CPU
  work are not starved, unless a GPU outside the server's set has the memory a compare needs plus
  a margin (``torch.cuda.mem_get_info``); then that GPU.  At a high ``gpu-memory-utilization`` a
  server GPU's headroom (about 1.4-3.2 GiB) is less than a compare's blocks and a CUDA context:
  taking it would stall or kill the engine, and a compare on TP rank 0 slows the whole TP group.

A compare is given either a :class:`BackendRequest`, which its engine turns into a choice, or a
:class:`BackendChoice` its caller made already (the pipeline and the reference's repeat capture,
through :mod:`kldtui.stages.compare_beside`). The choice carries a one-line reason, said once per
compare as a :class:`BackendChosen` event (:meth:`BackendChoice.event`: by the engine when it
chose, else by the caller that passed its choice), so the dashboard, the batch output and
``kldtui compare`` say which backend compares and why; the report keeps it
(``provenance.backend_reason``). After a CUDA compare the engine releases torch's cached memory
(``torch.cuda.empty_cache``); the CUDA context itself stays until kldtui exits.

Light on purpose (no NumPy or torch at import): the CLI and the profile validate with it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from kldtui import settings
from kldtui.errors import BadInput
from kldtui.events import BackendChosen, StageName
from kldtui.text import human_bytes, plural
from kldtui.this_host import ServerProcess, ServerSign, gpu_servers

if TYPE_CHECKING:
    from kldtui.metrics.kernels import RowKernel


class Backend(StrEnum):
    """The backends a comparison runs on; the value is the name reports record."""

    C = "c-kernel"
    NUMPY = "numpy-threads"
    TORCH_CPU = "torch-cpu"
    TORCH_CUDA = "torch-cuda"

    @property
    def spec(self) -> BackendSpec:
        return SPECS[self]

    @property
    def option(self) -> str:
        """The value that asks for this backend (``--backend``, ``[compare] backend``)."""
        return SPECS[self].option


def _c_kernel(vocab: int, device: str) -> RowKernel:
    from kldtui.metrics.ckernel import CRowKernel

    return CRowKernel(vocab)


def _numpy_kernel(vocab: int, device: str) -> RowKernel:
    from kldtui.metrics.kernels import NumpyRowKernel

    return NumpyRowKernel(vocab)


def _torch_kernel(vocab: int, device: str) -> RowKernel:
    from kldtui.metrics.kernels import TorchBlockKernel

    return TorchBlockKernel(vocab, device)


def _c_missing() -> str | None:
    from kldtui.metrics import ckernel

    if ckernel.available():
        return None
    return (f"backend 'c' asked for but the C kernel could not be built ({ckernel.why_not()}); "
            "use --backend numpy or --backend auto")


def _torch_missing(option: str) -> str | None:
    if importlib.util.find_spec("torch") is None:
        return (f"backend {option!r} needs torch, which is not installed; "
                "use --backend numpy, or pip install torch into this environment")
    return None


def _cuda_missing() -> str | None:
    missing = _torch_missing("torch-cuda")
    if missing is None and not cuda_present():
        return "backend 'torch-cuda' asked for but torch sees no CUDA device; use --backend auto"
    return missing


@dataclass(frozen=True)
class BackendSpec:
    """What the engine needs to know about a backend."""

    option: str  # the request value that names it
    kernel: Callable[[int, str], RowKernel]  # (vocabulary, torch device) -> one thread's kernel
    row_block: int  # default rows per block
    default_threads: int | None  # worker threads when none are asked for (None: every core)
    fixed_threads: int | None  # the only thread count it runs with (torch on the CPU parallelises itself)
    mmap: bool  # reads rows through mmap (the CPU kernels read the page cache directly)
    missing: Callable[[], str | None]  # why it cannot run here, one line; None when it can

    def threads(self, requested: int | None) -> int:
        if self.fixed_threads is not None:
            return self.fixed_threads
        return max(1, requested or self.default_threads or os.cpu_count() or 1)


SPECS: dict[Backend, BackendSpec] = {
    # c-kernel: larger blocks amortise the per-block Python work (rows come from mmap, so a block
    # costs no buffer unless a file must be read with pread)
    Backend.C: BackendSpec("c", _c_kernel, 64, None, None, True, _c_missing),
    Backend.NUMPY: BackendSpec("numpy", _numpy_kernel, 16, None, None, True, lambda: None),
    Backend.TORCH_CPU: BackendSpec("torch-cpu", _torch_kernel, 64, None, 1, False,
                                   lambda: _torch_missing("torch-cpu")),
    # two threads: one reads while the other computes
    Backend.TORCH_CUDA: BackendSpec("torch-cuda", _torch_kernel, 128, 2, None, False, _cuda_missing),
}
AUTO = "auto"
TORCH = "torch"  # torch on CUDA when it sees a GPU, else on the CPU
BACKEND_OPTIONS = (AUTO, Backend.C.option, Backend.NUMPY.option, TORCH, Backend.TORCH_CPU.option,
                   Backend.TORCH_CUDA.option)
_BY_OPTION = {spec.option: backend for backend, spec in SPECS.items()}

GIB = 1024**3
DEFAULT_VOCAB = 262144  # the vocabulary a choice assumes when it is not known yet
# float32 x/y blocks + seven float64 temporaries per row of a block (TorchBlockKernel)
BYTES_PER_ROW_ELEMENT = 2 * 4 + 7 * 8
CUDA_CONTEXT_BYTES = GIB // 2
# more GPUs than one host has: a server said (by its command line) to use more uses every one it sees
MOST_GPUS = 4096
MARGIN_BYTES = 2 * GIB
# auto's reason where the caller did not say how model servers show in /proc (choose_backend)
NOT_TOLD = ("which processes on this host are model servers was not said: the CPU kernel, leaving "
            "every GPU to any server here")


def cuda_present() -> bool:
    """Whether torch is installed, an NVIDIA driver is there and torch sees a CUDA device
    (checked in that order: torch is imported only when a driver is there)."""
    if importlib.util.find_spec("torch") is None:
        return False
    if not (Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()):
        return False
    import torch

    return bool(torch.cuda.is_available())


@dataclass(frozen=True)
class Serving:
    """A server of this run that is starting or running on this host.

    ``gpus``: the torch CUDA indices (as this process numbers them) the server may use;
    None when unknown (then every GPU counts as the server's).
    """

    gpus: frozenset[int] | None = None
    what: str = "the candidate server"


@dataclass(frozen=True)
class BackendChoice:
    """The backend that runs, its threads as asked or capped (None: the backend's default), its
    GPU (None: the current device) and why."""

    backend: Backend
    threads: int | None
    cuda_device: int | None
    reason: str

    @property
    def label(self) -> str:
        dev = f" on cuda:{self.cuda_device}" if self.cuda_device is not None else ""
        thr = f", {plural(self.threads, 'thread')}" if self.threads else ""
        return f"{self.backend.value}{dev}{thr}"  # as the report records it (c-kernel, not --backend c)

    def event(self, stage: StageName = "compare") -> BackendChosen:
        """The choice as the event that says it to the user (once per compare)."""
        return BackendChosen(stage, self.backend.value, self.label, self.reason)


def cuda_bytes_needed(vocab: int, threads: int | None = None, row_block: int | None = None) -> int:
    spec = SPECS[Backend.TORCH_CUDA]
    return (spec.threads(threads) * (row_block or spec.row_block) * vocab * BYTES_PER_ROW_ELEMENT
            + CUDA_CONTEXT_BYTES)


def _cuda_count() -> int:
    if not cuda_present():
        return 0
    import torch

    return int(torch.cuda.device_count())


def _free_bytes(index: int) -> int | None:
    import torch

    try:
        free, _total = torch.cuda.mem_get_info(index)
    except Exception:  # noqa: BLE001 - a GPU we cannot query is not one to use
        return None
    return int(free)


def _cpu_backend() -> Backend:
    return Backend.NUMPY if SPECS[Backend.C].missing() else Backend.C


def _explicit(requested: str) -> Backend:
    if requested == TORCH:
        missing = _torch_missing(TORCH)
        if missing:
            raise BadInput(missing)
        return Backend.TORCH_CUDA if cuda_present() else Backend.TORCH_CPU
    backend = _BY_OPTION[requested]
    missing = backend.spec.missing()
    if missing:
        raise BadInput(missing)
    return backend


@dataclass(frozen=True)
class BackendRequest:
    """A compare's backend as its caller asks for it, for the engine to choose
    (:meth:`choose`): ``option`` (:data:`BACKEND_OPTIONS`), worker threads (None: the backend's
    default), the GPU for torch-cuda (None: the current device), and how the model servers on this
    host show in /proc (``server_signs``, always said: None says on purpose that it is not known,
    so ``auto`` takes no GPU)."""

    option: str = AUTO
    threads: int | None = None
    cuda_device: int | None = None
    server_signs: tuple[ServerSign, ...] | None = field(kw_only=True)

    def choose(self, vocab: int = DEFAULT_VOCAB, serving: Serving | None = None) -> BackendChoice:
        """The backend this request gets now (:func:`choose_backend`)."""
        return choose_backend(self.option, self.threads, serving, vocab=vocab, cuda_device=self.cuda_device,
                              server_signs=self.server_signs)


def choose_backend(requested: str = AUTO, threads: int | None = None, serving: Serving | None = None,
                   *, vocab: int = DEFAULT_VOCAB, cuda_device: int | None = None,
                   cpu_count: int | None = None,
                   server_signs: Sequence[ServerSign] | None) -> BackendChoice:
    """The backend, threads and GPU for the next compare, with the reason (see the module doc);
    BadInput (one line) for an unknown request or one that cannot run here. ``server_signs``: how
    the model servers on this host show in /proc, always said (None: not known, so ``auto`` takes
    no GPU)."""
    if requested not in BACKEND_OPTIONS:
        raise BadInput(f"unknown compare backend {requested!r} (choose from {', '.join(BACKEND_OPTIONS)})")
    cores = max(1, cpu_count or os.cpu_count() or 1)
    if requested != AUTO:
        return BackendChoice(_explicit(requested), threads, cuda_device,
                             f"backend {requested!r} as configured")
    count = _cuda_count()
    if serving is None and count:
        if server_signs is None:
            return BackendChoice(_cpu_backend(), threads, None, NOT_TOLD)
        serving = servers_found(server_signs)  # a server this run does not know of still owns its GPUs
    if serving is None:
        if count:
            need = cuda_bytes_needed(vocab) + MARGIN_BYTES
            for index in (range(count) if cuda_device is None else (cuda_device,)):
                free = _free_bytes(index)
                if free is not None and free >= need:
                    return BackendChoice(Backend.TORCH_CUDA, threads, index,
                                         f"no server is running on this host: CUDA (cuda:{index}, "
                                         f"{human_bytes(free)} free)")
            return BackendChoice(_cpu_backend(), threads, None,
                                 f"no GPU has the {human_bytes(need)} a compare needs with margin "
                                 "free: the CPU kernel")
        return BackendChoice(_cpu_backend(), threads, None, "no GPU seen: the CPU kernel")
    capped = threads if threads is not None else max(1, cores // 2)
    if count:
        need = cuda_bytes_needed(vocab) + MARGIN_BYTES
        server_gpus = serving.gpus if serving.gpus is not None else frozenset(range(count))
        spare = [i for i in range(count) if i not in server_gpus]
        for index in spare:
            free = _free_bytes(index)
            if free is not None and free >= need:
                return BackendChoice(Backend.TORCH_CUDA, threads, index,
                                     f"{serving.what} is running; cuda:{index} is outside its GPUs and "
                                     f"has {human_bytes(free)} free (a compare needs "
                                     f"{human_bytes(need)} with margin)")
        why = ("no GPU outside its set has "
               f"{human_bytes(need)} free" if spare else "it may use every GPU")
        return BackendChoice(_cpu_backend(), capped, None,
                             f"{serving.what} is running on this host and {why}: the CPU kernel "
                             f"with {capped} of {cores} threads, leaving the GPUs to the server")
    return BackendChoice(_cpu_backend(), capped, None,
                         f"{serving.what} is running on this host: the CPU kernel with {capped} of "
                         f"{cores} threads so capture is not starved")


def _named(process: ServerProcess) -> str:
    return f"{process.sign.words} (pid {process.pid})"


def servers_found(signs: Sequence[ServerSign], proc: Path = Path("/proc")) -> Serving | None:
    """The model servers running on this host that ``signs`` recognise (another user's, another
    shell's), as one :class:`Serving` named after one of them ("a llama.cpp server (pid 123)"):
    their GPUs from their command lines and environments where /proc shows both, else every GPU
    (a server seen only by a helper process, or whose environment is not readable: that one is
    named). None when there is none."""
    found = gpu_servers(signs, proc)
    if not found:
        return None
    gpus: set[int] = set()
    named = None
    for sign in dict.fromkeys(p.sign for p in found):
        processes = [p for p in found if p.sign is sign]
        mains = [p for p in processes if p.main]
        if not mains:  # only its engine or workers are seen (a renamed API server)
            return Serving(None, _named(processes[0]))
        for process in mains:
            used = server_gpus(sign.devices(process.argv), process.env) if process.env else None
            if used is None:
                return Serving(None, _named(process))
            gpus |= used
            named = named or _named(process)
    return Serving(frozenset(gpus), named or _named(found[0]))


def gpus_of(sign: ServerSign | None, argv: Sequence[str],
            server_env: Mapping[str, str]) -> frozenset[int] | None:
    """The CUDA indices a server of this run uses, started with ``argv`` and ``server_env``, by its
    kind's sign (:attr:`kldtui.servers.base.ServerKind.process_sign`); none for a kind without one
    (its servers hold no GPU); None when unknown."""
    if sign is None:
        return frozenset()
    return server_gpus(sign.devices(argv), server_env)


def server_gpus(devices: int | None, server_env: Mapping[str, str],
                own_env: Mapping[str, str] | None = None, device_count: int | None = None
                ) -> frozenset[int] | None:
    """The CUDA indices (as this process numbers them) a server with ``server_env`` uses when it
    takes the first ``devices`` GPUs it sees (None: every one it sees). None when unknown."""
    visible = settings.CUDA_VISIBLE_DEVICES
    mine = visible.get(own_env)
    theirs = visible.get(server_env) if visible.name in server_env else mine
    if devices is not None and devices > MOST_GPUS:
        devices = None  # said to use more than a host has (-tp 10**9 on a command line): every one it sees
    if theirs is None:  # the server sees what this process sees
        if devices is None:
            return None
        return frozenset(range(devices)) if mine is None or devices <= len(mine) else None
    used = theirs if devices is None else theirs[:devices]
    if mine is None:
        if not all(u.isascii() and u.isdigit() and len(u) <= len(str(MOST_GPUS)) for u in used):
            return None  # UUIDs (or no index of a GPU here): cannot map them to indices here
        indices = {int(u) for u in used}
        if device_count is not None and indices and max(indices) >= device_count:
            return None
        return frozenset(indices)
    if not set(used) <= set(mine):
        return None
    return frozenset(mine.index(u) for u in used)


__all__ = ["AUTO", "BACKEND_OPTIONS", "Backend", "BackendChoice", "BackendRequest", "BackendSpec", "NOT_TOLD",
           "SPECS", "Serving", "choose_backend", "cuda_bytes_needed", "cuda_present", "gpus_of",
           "server_gpus", "servers_found"]
