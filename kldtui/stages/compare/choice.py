"""Which compare backend runs while a server of this run may be using the GPUs.

``auto`` alone would take GPU 0 whenever torch sees one: vLLM's TP rank 0, whose headroom
(about 1.4-3.2 GiB at a high ``gpu-memory-utilization``) a compare thread's blocks and a CUDA
context would eat, stalling or killing the engine, and slowing the whole TP group. So:

* no server of this run on this host: CUDA when torch sees a GPU (``cuda:0``), else the C kernel;
* a server of this run starting or running on this host: the CPU kernel with its threads capped
  (half the cores) so the capture client and the server's own CPU work are not starved, unless a
  GPU outside the server's set has the memory a compare needs plus a margin
  (``torch.cuda.mem_get_info``); then that GPU;
* an explicit ``[compare] backend`` / ``--backend`` is used as asked.

The choice carries a one-line reason that the pipeline logs, so the dashboard and the batch
output say which backend compares and why. After a CUDA compare the engine releases torch's
cached memory (``torch.cuda.empty_cache``); the CUDA context itself stays until kldtui exits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GIB = 1024**3
# float32 x/y blocks + seven float64 temporaries per row of a block (TorchBlockKernel)
BYTES_PER_ROW_ELEMENT = 2 * 4 + 7 * 8
CUDA_CONTEXT_BYTES = GIB // 2
MARGIN_BYTES = 2 * GIB
CUDA_ROW_BLOCK = 128
CUDA_THREADS = 2


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
    backend: str  # a CompareOptions.backend value
    threads: int | None
    cuda_device: int | None
    reason: str

    @property
    def label(self) -> str:
        dev = f" on cuda:{self.cuda_device}" if self.cuda_device is not None else ""
        thr = f", {self.threads} threads" if self.threads else ""
        return f"{self.backend}{dev}{thr}"


def cuda_bytes_needed(vocab: int, threads: int = CUDA_THREADS, row_block: int = CUDA_ROW_BLOCK) -> int:
    return threads * row_block * vocab * BYTES_PER_ROW_ELEMENT + CUDA_CONTEXT_BYTES


def _cuda_count() -> int:
    from kldtui.stages.compare import backends

    if not backends.cuda_present():
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


def _cpu_backend() -> str:
    from kldtui.metrics import ckernel

    return "c" if ckernel.available() else "numpy"


def choose_backend(requested: str = "auto", threads: int | None = None, serving: Serving | None = None,
                   *, vocab: int = 262144, cpu_count: int | None = None) -> BackendChoice:
    """The backend, threads and GPU for the next compare, with the reason (see module doc)."""
    cores = max(1, cpu_count or os.cpu_count() or 1)
    if requested != "auto":
        return BackendChoice(requested, threads, None, f"backend {requested!r} as configured")
    count = _cuda_count()
    if serving is None:
        if count:
            return BackendChoice("torch-cuda", threads, 0, "no server of this run is running on this "
                                 "host: CUDA")
        return BackendChoice("auto", threads, None, "no GPU seen: the CPU kernel")
    capped = threads if threads is not None else max(1, cores // 2)
    if count:
        need = cuda_bytes_needed(vocab) + MARGIN_BYTES
        server_gpus = serving.gpus if serving.gpus is not None else frozenset(range(count))
        spare = [i for i in range(count) if i not in server_gpus]
        for index in spare:
            free = _free_bytes(index)
            if free is not None and free >= need:
                return BackendChoice("torch-cuda", threads, index,
                                     f"{serving.what} is running; cuda:{index} is outside its GPUs and "
                                     f"has {free / GIB:.1f} GiB free (a compare needs "
                                     f"{need / GIB:.1f} GiB with margin)")
        why = ("no GPU outside its set has "
               f"{need / GIB:.1f} GiB free" if spare else "it may use every GPU")
        return BackendChoice(_cpu_backend(), capped, None,
                             f"{serving.what} is running on this host and {why}: the CPU kernel "
                             f"with {capped} of {cores} threads, leaving the GPUs to the server")
    return BackendChoice(_cpu_backend(), capped, None,
                         f"{serving.what} is running on this host: the CPU kernel with {capped} of "
                         f"{cores} threads so capture is not starved")


_TP_FLAGS = ("--tensor-parallel-size", "-tp")
_PP_FLAGS = ("--pipeline-parallel-size", "-pp")
_DP_FLAGS = ("--data-parallel-size-local", "--data-parallel-size", "-dp")


def _flag_int(argv: Sequence[str], names: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _visible(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def server_gpus(argv: Sequence[str], server_env: Mapping[str, str],
                own_env: Mapping[str, str] | None = None, device_count: int | None = None
                ) -> frozenset[int] | None:
    """The CUDA indices (as this process numbers them) a vLLM server started with ``argv`` and
    ``server_env`` uses: the first TP x PP x local-DP devices it sees. None when unknown."""
    own_env = os.environ if own_env is None else own_env
    size = 1
    for names in (_TP_FLAGS, _PP_FLAGS, _DP_FLAGS):
        n = _flag_int(argv, names)
        if n is not None:
            size *= max(1, n)
    theirs = _visible(server_env.get("CUDA_VISIBLE_DEVICES", own_env.get("CUDA_VISIBLE_DEVICES")))
    mine = _visible(own_env.get("CUDA_VISIBLE_DEVICES"))
    if theirs is None:  # the server sees what this process sees
        return frozenset(range(size)) if mine is None or size <= len(mine) else None
    used = theirs[:size]
    if mine is None:
        if not all(u.isdigit() for u in used):
            return None  # UUIDs: cannot map them to indices here
        indices = {int(u) for u in used}
        return frozenset(indices) if device_count is None or max(indices) < device_count else None
    if not set(used) <= set(mine):
        return None
    return frozenset(mine.index(u) for u in used)
