"""Hidden-state references at the Kimi K3 shapes (hidden 7,168, vocabulary 163,840, 2,047 scored rows a
context): bytes stored and downloaded per window against F32 logits, and CPU replay throughput as a
fraction of this machine's GEMM peak, measured side by side in one run.

    python benchmarks/hidden_replay_bench.py [--rows 2047] [--threads N] [--library torch|numpy]
        [--end-to-end] [--dir /tmp/kldtui-hidden-bench]

1. Sizes: a real hidden-state file is written through kldtui's writer (29 MB at full shape) and the
   head's and a logits file's sizes come from their encoded safetensors headers plus payloads, so the
   figures are the files' exact sizes; per window, the head is shared by the contexts downloaded.
2. The GEMM peak: the best of several ``F.linear`` calls of the library and precision the replay uses
   (BF16 for torch, FP32 SGEMM for NumPy), at the replay's own shape ([rows, 7168] x [7168, 10240])
   and at a large square shape; the higher of the two is the peak.
3. Replay: :class:`kldtui.metrics.replay.TorchReplay` (or ``NumpyReplay``) over one context, in the
   compare engine's blocks (256 rows x 16 vocabulary chunks), head in memory: GEMM FLOP/s and the
   fraction of the peak.
4. ``--end-to-end``: ``kldtui compare`` of one context, both sides hidden states replayed with the
   same head (files written under ``--dir``: the head is 2.35 GB), through the engine: replay,
   widening and the KL kernel; its GEMM throughput as a fraction of the peak.

Memory, said before the run: the head 2.35 GB (in memory, or mapped from its file), one replayed
block per side (256 x 163,840 x 4 bytes = 168 MB), the GEMM's chunk products; about 3 GB in all
(4 GB with --end-to-end). Hold /tmp/kldtui-full.lock while it runs (it loads every core).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from measure import cpu_summary, loadavg  # benchmarks/measure.py

from kldtui.formats import fidelity as fid
from kldtui.formats.safetensors_io import encode_header
from kldtui.formats.suite import load_suite
from kldtui.metrics import replay as rp

HIDDEN, VOCAB, CONTEXT = 7168, 163840, 2048
PUBLISHED_CONTEXTS = 1024
GIB = 1024**3


def sizes(root: Path, rows: int) -> None:
    """Bytes per window: hidden-state file + a share of the head, against F32 (and BF16) logits."""
    suite = fid.write_context_suite(root / "sizes", [fid.NewContext(tokens=list(range(rows + 1)),
                                                                    allocation_stratum="s")])
    window = suite.windows[0]
    hidden = fid.write_context_tensor(root / "sizes" / fid.HIDDEN_DIR, "hidden", window,
                                      np.zeros((rows, HIDDEN), dtype=np.uint16))
    head = len(encode_header({"weight": ("BF16", (VOCAB, HIDDEN))}, {"checkpoint_tensor_key": "k" * 29,
                                                                     "raw_tensor_sha256": "0" * 64}))
    head += VOCAB * HIDDEN * 2
    logits_f32 = len(encode_header({"logits": ("F32", (rows, VOCAB))},
                                   {"window_index": "0"})) + rows * VOCAB * 4
    logits_bf16 = len(encode_header({"logits": ("BF16", (rows, VOCAB))},
                                    {"context_index": "0"})) + rows * VOCAB * 2
    shutil.rmtree(root / "sizes")
    print(f"one context of {rows} scored rows: hidden-state file {hidden.size_bytes:,} B; F32 logits file "
          f"{logits_f32:,} B; BF16 logits file {logits_bf16:,} B; LM head {head:,} B ({head / GIB:.2f} GiB)")
    print("bytes stored / downloaded per window (the head shared by the contexts fetched):")
    print(f"  {'contexts':>9} {'hidden + head share':>20} {'vs F32 logits':>14} {'vs BF16 logits':>15}")
    for n in (1, 8, 32, 128, 561, PUBLISHED_CONTEXTS):
        per = hidden.size_bytes + head / n
        print(f"  {n:>9} {per / 1e6:>17.1f} MB {logits_f32 / per:>13.1f}x {logits_bf16 / per:>14.1f}x")
    print(f"  (the goal, 40x fewer bytes than F32 logits, holds from "
          f"{int(np.ceil(head / (logits_f32 / 40 - hidden.size_bytes)))} contexts; the published suite has "
          f"{PUBLISHED_CONTEXTS})")


@dataclass
class Timing:
    """Best wall-clock and best CPU-time seconds of a measured call over the rounds."""

    flop: int
    wall: float = float("inf")
    cpu: float = float("inf")

    def add(self, wall: float, cpu: float) -> None:
        self.wall = min(self.wall, wall)
        self.cpu = min(self.cpu, cpu)

    def gflops(self) -> float:
        """FLOP per second of wall-clock time."""
        return self.flop / self.wall / 1e9

    def gflops_cpu(self, threads: int) -> float:
        """FLOP per second of this process's CPU time, times the threads: the rate on ``threads``
        cores that other processes did not take (a thread that waits at a barrier while its partner is
        descheduled still counts, so this is a lower bound of the undisturbed rate)."""
        return self.flop / self.cpu * threads / 1e9


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (every thread of this process) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


class Peak:
    """The GEMM peak of the library and precision the replay uses: ``F.linear`` (torch, BF16 or FP32)
    or ``np.matmul`` (NumPy's SGEMM), at the replay's per-call shape (``[block, 7168] x [7168, chunk]``,
    the same chunk every call, so it stays in the cache and is the GEMM alone) and at 4096^3; each
    measured ``calls`` times per round, the best call kept."""

    def __init__(self, library: str, dtype: str, block: int, chunk: int, calls: int = 3) -> None:
        self.calls = calls
        self.shapes = (("replay shape", (block, HIDDEN, chunk)), ("square", (4096, 4096, 4096)))
        self.timings = [Timing(2 * m * k * n) for _, (m, k, n) in self.shapes]
        self.label = f"{dtype} ({'torch F.linear' if library == 'torch' else 'NumPy BLAS'})"
        self._fns: list[Callable[[], object]] = []
        for _, (m, k, n) in self.shapes:
            if library == "torch":
                import torch

                kind = torch.bfloat16 if dtype == "bf16" else torch.float32
                a, b = torch.randn(m, k).to(kind), torch.randn(n, k).to(kind)
                self._fns.append(lambda a=a, b=b: torch.nn.functional.linear(a, b))
            else:
                a = np.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
                b = np.random.default_rng(1).standard_normal((n, k), dtype=np.float32)
                out = np.empty((m, n), np.float32)
                self._fns.append(lambda a=a, b=b, out=out: np.matmul(a, b.T, out=out))
        for fn in self._fns:
            fn()  # the library's first call (primitive creation, page faults) is not the GEMM

    def measure(self) -> None:
        for fn, timing in zip(self._fns, self.timings, strict=True):
            for _ in range(self.calls):
                timing.add(*timed(fn))

    def best(self, threads: int, cpu: bool = False) -> tuple[float, str]:
        """The higher of the two shapes' rates, GFLOP/s, and which it was."""
        rates = [(t.gflops_cpu(threads) if cpu else t.gflops(), f"{label} [{m}x{k}]x[{k}x{n}]")
                 for t, (label, (m, k, n)) in zip(self.timings, self.shapes, strict=True)]
        return max(rates)


def random_head(seed: int) -> np.ndarray:
    """A BF16 head [163840, 7168] (2.35 GB): 8,192 random rows repeated (the GEMM's speed does not
    depend on the values; generating 1.2 billion normal numbers would take longer than the run)."""
    rng = np.random.default_rng(seed)
    block = rp.f32_to_bf16(rng.standard_normal((8192, HIDDEN), dtype=np.float32) * 0.02)
    return np.ascontiguousarray(np.tile(block, (VOCAB // 8192, 1)))


def make_replay(library: str, head: np.ndarray, path: str, output: str = "bf16") -> Any:
    """The replay the compare engine makes for ``library``; ``path="widened"`` forces torch's path
    for CPUs without BF16 matrix instructions (each head chunk widened to FP32, an FP32 GEMM)."""
    if library == "numpy":
        return rp.NumpyReplay(head, output=output)
    replay = rp.TorchReplay(rp.torch_bf16(head), output=output)
    if path == "widened":
        replay.native_bf16 = False
    return replay


def replay_rows(replay: Any, hidden: np.ndarray, block: int, out: np.ndarray) -> None:
    """One context's rows replayed ``block`` rows at a time into ``out`` (as the engine stages them)."""
    rows = hidden.shape[0]
    for s in range(0, rows, block):
        n = min(block, rows - s)
        if isinstance(replay, rp.NumpyReplay):
            replay.logits(hidden[s:s + n], out=out[:n])
        else:
            import torch

            replay.logits(rp.torch_bf16(hidden[s:s + n]), out=torch.from_numpy(out[:n]))


def throughput(library: str, path: str, rows: int, threads: int, blocks: list[int], engine_block: int,
               rounds: int) -> None:
    """A context's replay at each block size against the GEMM peak, interleaved: every round measures
    the peak, then replays the context once per block size, so both see the same load."""
    dtype = "f32" if library == "numpy" or path == "widened" else "bf16"
    head = random_head(4)
    hidden = rp.f32_to_bf16(np.random.default_rng(3).standard_normal((rows, HIDDEN), dtype=np.float32))
    replay = make_replay(library, head, path)
    out = np.empty((max(blocks), VOCAB), np.float32)
    out.fill(0)  # the pages touched once, before any timing
    peak = Peak(library, dtype, engine_block, rp.DEFAULT_CHUNK)
    flop = 2 * rows * VOCAB * HIDDEN
    timings = {b: Timing(flop) for b in blocks}
    for b in blocks:
        replay_rows(replay, hidden[:b], b, out)  # the library's first call at this block's shape
    print(f"side by side, {rounds} rounds (each: the GEMM peak, best of {peak.calls} calls a shape, then one "
          f"context's replay per block size; {library} {dtype} GEMM, {threads} threads):")
    for r in range(rounds):
        load = loadavg().split()[0]
        peak.measure()
        cells = []
        best_peak = peak.best(threads)[0]
        for b in blocks:
            wall, cpu = timed(lambda b=b: replay_rows(replay, hidden, b, out))
            timings[b].add(wall, cpu)
            rate = flop / wall / 1e9
            cells.append(f"{b}-row blocks {rate:.0f} GFLOP/s = {rate / best_peak:.0%}")
        print(f"  round {r + 1} (load {load}): peak so far {best_peak:.0f} GFLOP/s; " + "; ".join(cells))
    for cpu in (False, True):
        value, label = peak.best(threads, cpu)
        what = ("by CPU time (FLOP per CPU-second of this process x threads: time other processes took "
                "is left out)" if cpu else "by wall clock")
        print(f"{what}, best of {rounds} rounds:")
        print(f"  GEMM peak {value:.1f} GFLOP/s ({peak.label}, {label})")
        for b in blocks:
            t = timings[b]
            rate = t.gflops_cpu(threads) if cpu else t.gflops()
            mark = "  <- the compare engine's CPU default" if b == engine_block else ""
            print(f"  replay, {b:>4}-row blocks x {rp.DEFAULT_CHUNK}-row head chunks: "
                  f"{(t.cpu / threads if cpu else t.wall):.2f} s a context, {rate:.1f} GFLOP/s = "
                  f"{rate / value:.0%} of the peak{mark}")
    t = timings[engine_block] if engine_block in timings else None
    if t is not None:
        wall = t.gflops() / peak.best(threads)[0]
        cpu_ratio = t.gflops_cpu(threads) / peak.best(threads, True)[0]
        verdict = ("met" if min(wall, cpu_ratio) >= 0.6 else "met by CPU time only" if cpu_ratio >= 0.6
                   else "not met")
        print(f"goal (replay >= 60 % of the measured GEMM peak) with the engine's {engine_block}-row blocks: "
              f"{verdict} ({wall:.0%} by wall clock, {cpu_ratio:.0%} by CPU time)")


def error_vs_float64(library: str, path: str, block: int, rows: int = 32) -> None:
    """The replay's error against the float64 replay at the Kimi K3 width, for two kinds of rows:
    "flat" (logits ~ N(0, 2.5^2): a top probability of a few percent) and "peaked" (one token per
    row raised by about 20: a high top probability, as at most positions of a language model).
    The rows are replayed as the first of a ``block``-row call, the engine's configuration."""
    from kldtui.metrics.kernels import NumpyRowKernel

    rng = np.random.default_rng(9)
    head = np.empty((VOCAB, HIDDEN), np.uint16)
    for s in range(0, VOCAB, 8192):  # in blocks: 2.35 GB in all, never 4.7 GB of float32
        head[s:s + 8192] = rp.f32_to_bf16(rng.standard_normal((min(8192, VOCAB - s), HIDDEN),
                                                              dtype=np.float32)
                                          * np.float32(2.5 / np.sqrt(HIDDEN)))
    kernel = NumpyRowKernel(VOCAB)
    out = np.empty((block, VOCAB), np.float32)
    for label, boost in (("flat", 0.0), ("peaked", 20.0)):
        h = rng.standard_normal((rows, HIDDEN), dtype=np.float32)
        if boost:
            top = rng.integers(0, VOCAB, rows)
            h += rp.bf16_to_f32(head[top]) * (boost / 2.5 ** 2)  # raises logit[top] by about `boost`
        hb = rp.f32_to_bf16(h)
        exact = rp.replay_float64(hb, head, chunk=8192)
        correct = rp.bf16_to_f32(rp.f32_to_bf16(exact.astype(np.float32)))
        call = np.resize(hb, (block, HIDDEN))  # the rows, repeated to fill one engine block
        got = {}
        for output in ("f32", "bf16"):
            replay_rows(make_replay(library, head, path, output), call, block, out)
            got[output] = out[:rows].copy()
        f32, b16 = got["f32"], got["bf16"]
        tokens = np.zeros(rows, np.int64)
        kl_round = kernel.block(correct, b16, tokens).kl
        kl_exact = kernel.block(exact.astype(np.float32), b16, tokens).kl
        p_top = float(np.mean(kernel.block(correct, correct, tokens).ref_top_prob))
        print(f"  {label} rows (mean top probability {p_top:.2f}), {rows} rows x {VOCAB}:")
        print(f"    FP32 sums: max |logit - float64| {np.abs(f32 - exact).max():.2e}")
        print(f"    BF16 output: {np.mean(b16 != correct):.2e} of the logits differ from the correctly "
              f"rounded float64 value; KL(rounded float64 || replay) mean {kl_round.mean():.2e} "
              f"max {kl_round.max():.2e}")
        print(f"    (the BF16 rounding itself, KL(unrounded float64 || replay): mean {kl_exact.mean():.2e} "
              f"max {kl_exact.max():.2e}: the model's own head rounds the same way)")


def end_to_end(root: Path, rows: int, threads: int) -> tuple[float, float]:
    """``kldtui compare`` of one context, both sides replayed with one head: wall and CPU seconds."""
    from kldtui.stages.compare import CompareOptions, Engine, prepare

    base = root / "e2e"
    if not (base / fid.LM_HEAD_DIR / fid.HEAD_FILE).exists():
        shutil.rmtree(base, ignore_errors=True)
        rng = np.random.default_rng(5)
        suite = fid.write_context_suite(base, [fid.NewContext(tokens=[int(t) for t in rng.integers(0, VOCAB,
                                                                                                   rows + 1)],
                                                              allocation_stratum="s")])
        w = suite.windows[0]
        written = fid.write_context_tensor(base / fid.HIDDEN_DIR, "hidden", w,
                                           rp.f32_to_bf16(rng.standard_normal((rows, HIDDEN),
                                                                              dtype=np.float32)))
        fid.write_tensor_manifest(base / fid.HIDDEN_DIR, "hidden", suite, [fid.tensor_record(w, written)],
                                  width=HIDDEN, run_name="bench")
        head = random_head(6)
        fid.write_lm_head(base / fid.LM_HEAD_DIR, head, checkpoint_tensor_key="lm_head.weight")
        del head
    suite = load_suite(base)
    options = CompareOptions(backend="auto", threads=threads, candidate_lm_head=str(base / fid.LM_HEAD_DIR),
                             bootstrap_samples=10)
    inputs = prepare(suite, base / fid.HIDDEN_DIR, base / fid.HIDDEN_DIR, options)
    with Engine(inputs.vocab_size, options) as engine:
        engine.compare_window(inputs, inputs.windows[0])  # warm: maps the head, builds the C kernel
        holder: list[Any] = []
        wall, cpu = timed(lambda: holder.append(engine.compare_window(inputs, inputs.windows[0])))
        print(f"  engine: {engine.backend} kernel, {engine.threads} threads, {engine.replay_rows}-row replay "
              f"blocks, {engine.replays.library()} GEMM; mean KL {holder[0].kl_mean:.3g} (the same states "
              "and head: 0)")
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    from kldtui.stages.compare.engine import DEFAULT_REPLAY_ROWS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=CONTEXT - 1, help="scored rows per context (default 2047)")
    ap.add_argument("--threads", type=int, default=None, help="GEMM threads (default: every core)")
    ap.add_argument("--library", choices=("torch", "numpy"), default="torch")
    ap.add_argument("--path", choices=("native", "widened"), default="native",
                    help="torch's BF16 path: native (BF16 GEMM, as with AVX-512 BF16 / AMX / Arm BF16) or "
                         "widened (the path taken on CPUs without them: FP32 GEMM on widened chunks)")
    ap.add_argument("--blocks", default=f"256,512,{DEFAULT_REPLAY_ROWS}",
                    help="rows replayed at once, comma-separated (the engine's CPU default: "
                         f"{DEFAULT_REPLAY_ROWS})")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of peak and replay")
    ap.add_argument("--end-to-end", action="store_true", help="also compare one context through the engine")
    ap.add_argument("--dir", default="/tmp/kldtui-hidden-bench")
    ap.add_argument("--keep", action="store_true", help="keep the end-to-end files (2.4 GB) for the next run")
    args = ap.parse_args(argv)
    import os

    threads = args.threads or os.cpu_count() or 1
    blocks = sorted({int(b) for b in args.blocks.split(",")})
    engine_block = DEFAULT_REPLAY_ROWS
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    if args.library == "torch":
        import torch

        torch.set_num_threads(threads)
    print(f"CPU: {cpu_summary()}")
    print(f"threads: {threads} (GEMM and kernels); load average before: {loadavg()}")
    head_gb = VOCAB * HIDDEN * 2 / 1e9
    block_gb = max(blocks) * VOCAB * 4 / 1e9
    memory = head_gb + block_gb + max(blocks) * rp.DEFAULT_CHUNK * 6 / 1e9
    if args.end_to_end:
        memory = max(memory, head_gb + 2 * engine_block * VOCAB * 4 / 1e9)
    print(f"memory: at most {memory:.1f} GB (the head {head_gb:.2f} GB, one replayed block of {max(blocks)} "
          f"rows {block_gb:.2f} GB, a chunk's product; with --end-to-end, the engine's two "
          f"{engine_block}-row blocks); "
          f"disk: {'2.4 GB under ' + str(root) if args.end_to_end else 'a 29 MB file, removed'}")
    sizes(root, args.rows)
    flops = 2 * args.rows * VOCAB * HIDDEN
    print(f"replay of one context: {args.rows} x {VOCAB} logits from [{args.rows}, {HIDDEN}] x [{HIDDEN}, "
          f"{VOCAB}] ({flops / 1e12:.2f} TFLOP), {args.library}, {args.path} path")
    throughput(args.library, args.path, args.rows, threads, blocks, engine_block, args.rounds)
    print(f"error against the float64 replay ({args.library}, {args.path} path, {engine_block}-row calls):")
    error_vs_float64(args.library, args.path, engine_block)
    if args.end_to_end:
        print("compare of one context, both sides replayed (2 GEMMs) + the KL kernel:")
        wall, cpu = end_to_end(root, args.rows, threads)
        print(f"  {wall:.2f} s ({cpu:.2f} s of CPU), {2 * flops / wall / 1e9:.1f} GFLOP/s of GEMM by wall "
              f"clock, {2 * flops / cpu * threads / 1e9:.1f} by CPU time")
        if not args.keep:
            shutil.rmtree(root / "e2e", ignore_errors=True)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
