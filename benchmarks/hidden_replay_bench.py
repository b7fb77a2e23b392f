"""Hidden-state references at the Kimi K3 shapes (hidden 7,168, vocabulary 163,840, 2,047 scored rows a
context): bytes stored and downloaded per window against F32 logits, and CPU replay throughput as a
fraction of this machine's GEMM peak, measured side by side in one run.

    python benchmarks/hidden_replay_bench.py [--rows 2047] [--threads N] [--library torch|numpy]
        [--path native|widened] [--blocks 256,512,1024] [--rounds 3] [--end-to-end]
        [--dir /tmp/kldtui-hidden-bench] [--keep]

1. Sizes: a real hidden-state file is written through kldtui's writer (29 MB at full shape) and the
   head's and a logits file's sizes come from their encoded safetensors headers plus payloads, so the
   figures are the files' exact sizes; per window, the head is shared by the contexts downloaded.
2. The GEMM peak, side by side with the replay: the library and precision the replay uses (torch
   BF16, or FP32 with ``--path widened``; NumPy's SGEMM), operands resident, at each block's own call
   shape ([block, 7168] x [7168, 10240]) and at 4096^3. The best single call is printed too.
3. Replay: :class:`kldtui.metrics.replay.TorchReplay` (or ``NumpyReplay``) over one context at each
   ``--blocks`` size (the engine's CPU default among them), 10,240-row head chunks, head in memory;
   every replayed block is followed at once by the same FLOP of peak GEMMs, so both see the same
   load; per round, the replay's rate over the faster peak shape; the median over ``--rounds``.
4. The error against the float64 replay, rows replayed inside an engine-sized call.
5. ``--end-to-end``: ``kldtui compare`` of one context, both sides hidden states replayed with the
   same head (files written under ``--dir``: the head is 2.35 GB), through the engine: replay,
   widening and the KL kernel; its GEMM throughput against a 4096^3 peak run right after it.

Memory, said before the run: the head 2.35 GB (in memory, or mapped from its file), one replayed
block of the largest ``--blocks`` (1,024 x 163,840 x 4 bytes = 671 MB), the GEMM's chunk products;
about 3.1 GB (3.7 GB with --end-to-end). Hold /tmp/kldtui-full.lock while it runs (it loads every
core).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import time
from collections.abc import Callable
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


def timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class PeakGemm:
    """One GEMM of the library and precision the replay uses (``F.linear`` in BF16 or FP32, or NumPy's
    SGEMM) whose operands stay resident: the same two matrices every call, so its rate is the GEMM
    alone, with no packing of a new head chunk from memory: the peak the replay is held against."""

    def __init__(self, library: str, dtype: str, m: int, k: int, n: int) -> None:
        self.shape = f"[{m}x{k}]x[{k}x{n}]"
        self.flop = 2 * m * k * n
        self.fn: Callable[[], object]
        if library == "torch":
            import torch

            kind = torch.bfloat16 if dtype == "bf16" else torch.float32
            a, b = torch.randn(m, k).to(kind), torch.randn(n, k).to(kind)
            self.fn = lambda: torch.nn.functional.linear(a, b)
        else:
            a32 = np.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
            b32 = np.random.default_rng(1).standard_normal((n, k), dtype=np.float32)
            out = np.empty((m, n), np.float32)
            self.fn = lambda: np.matmul(a32, b32.T, out=out)
        self.fn()  # the library's first call (primitive creation, page faults) is not the GEMM

    def best_call(self, calls: int = 5) -> float:
        """GFLOP/s of the fastest of ``calls`` calls (the figure earlier versions of this benchmark used)."""
        return self.flop / min(timed(self.fn) for _ in range(calls)) / 1e9

    def run(self, flop: float) -> tuple[float, float]:
        """Calls worth about ``flop`` FLOP, back to back: (seconds, FLOP done)."""
        calls = max(1, round(flop / self.flop))
        return timed(lambda: [self.fn() for _ in range(calls)]), calls * self.flop


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
               rounds: int) -> dict[int, float]:
    """A context's replay at each block size against the GEMM peak, side by side: each replayed block
    is followed at once by the same FLOP of resident-operand GEMMs at the block's own call shape and
    at 4096^3, so the replay and its peak see the same load (other work on the machine changes over
    seconds; one block takes about one).  Per round and block size, the peak is the faster of the two
    shapes over the whole context.  Returns the median fraction of the peak per block size."""
    dtype = "f32" if library == "numpy" or path == "widened" else "bf16"
    chunk = rp.DEFAULT_CHUNK
    head = random_head(4)
    hidden = rp.f32_to_bf16(np.random.default_rng(3).standard_normal((rows, HIDDEN), dtype=np.float32))
    replay = make_replay(library, head, path)
    out = np.empty((max(blocks), VOCAB), np.float32)
    out.fill(0)  # the pages touched once, before any timing
    square = PeakGemm(library, dtype, 4096, 4096, 4096)
    own = {b: PeakGemm(library, dtype, b, HIDDEN, chunk) for b in blocks}
    for b in blocks:
        replay_rows(replay, hidden[:b], b, out)  # the library's first call at this block's shape
    gemm = f"{'torch F.linear' if library == 'torch' else 'NumPy matmul'} {dtype}"
    print(f"GEMM peak, the best single call ({gemm}, {threads} threads): {square.shape} "
          f"{square.best_call():.0f} GFLOP/s; "
          + "; ".join(f"{g.shape} {g.best_call():.0f} GFLOP/s" for g in own.values()))
    print(f"side by side, {rounds} rounds (each replayed block followed by the same FLOP of resident GEMMs "
          "at its call shape and at 4096^3; the peak: the faster of the two):")
    ratios: dict[int, list[float]] = {b: [] for b in blocks}
    totals = {b: [0.0, 0.0, 0.0] for b in blocks}  # replay seconds, peak seconds, peak FLOP
    flop = 2 * rows * VOCAB * HIDDEN
    for r in range(rounds):
        cells = []
        for b in blocks:
            t_replay = 0.0
            own_t = own_f = sq_t = sq_f = 0.0
            for s0 in range(0, rows, b):
                n = min(b, rows - s0)
                t_replay += timed(functools.partial(replay_rows, replay, hidden[s0:s0 + n], n, out))
                block_flop = 2 * n * VOCAB * HIDDEN
                t, f = own[b].run(block_flop)
                own_t, own_f = own_t + t, own_f + f
                t, f = square.run(block_flop)
                sq_t, sq_f = sq_t + t, sq_f + f
            peak_rate = max(own_f / own_t, sq_f / sq_t)
            rate = flop / t_replay
            ratios[b].append(rate / peak_rate)
            tot = totals[b]
            tot[0] += t_replay
            tot[1] += flop / peak_rate
            cells.append(f"{b}-row blocks {rate / 1e9:.0f} of {peak_rate / 1e9:.0f} GFLOP/s = "
                         f"{rate / peak_rate:.0%}")
        print(f"  round {r + 1} (load {loadavg().split()[0]}): " + "; ".join(cells))
    medians = {b: float(np.median(v)) for b, v in ratios.items()}
    print(f"replay of a context, {chunk}-row head chunks, over the {rounds} rounds:")
    for b in blocks:
        t_replay, t_peak, _ = totals[b]
        mark = "  <- the compare engine's CPU default" if b == engine_block else ""
        rate, peak = flop * rounds / t_replay / 1e9, flop * rounds / t_peak / 1e9
        print(f"  {b:>4}-row blocks: {t_replay / rounds:.2f} s a context ({rate:.0f} GFLOP/s; the peak "
              f"beside it {peak:.0f}): median {medians[b]:.0%} of the peak (rounds "
              f"{', '.join(f'{x:.0%}' for x in ratios[b])}){mark}")
    if engine_block in medians:
        got = medians[engine_block]
        print(f"goal (replay >= 60 % of the measured GEMM peak) with the engine's {engine_block}-row blocks: "
              f"{'met' if got >= 0.6 else 'not met'} ({got:.0%}, the median of {rounds} rounds)")
    return medians


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


def end_to_end(root: Path, rows: int, threads: int) -> float:
    """``kldtui compare`` of one context, both sides replayed with one head: seconds."""
    from kldtui.stages.compare import BackendRequest, CompareOptions, Engine, prepare

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
    options = CompareOptions(backend=BackendRequest("auto", threads, server_signs=None),
                             candidate_lm_head=str(base / fid.LM_HEAD_DIR), bootstrap_samples=10)
    inputs = prepare(suite, base / fid.HIDDEN_DIR, base / fid.HIDDEN_DIR, options)
    with Engine(inputs.vocab_size, options) as engine:
        engine.compare_window(inputs, inputs.windows[0])  # warm: maps the head, builds the C kernel
        holder: list[Any] = []
        wall = timed(lambda: holder.append(engine.compare_window(inputs, inputs.windows[0])))
        print(f"  engine: {engine.backend} kernel, {engine.threads} threads, {engine.replay_rows}-row replay "
              f"blocks, {engine.replays.library()} GEMM; mean KL {holder[0].kl_mean:.3g} (the same states "
              "and head: 0)")
    return wall


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
        wall = end_to_end(root, args.rows, threads)
        dtype = "f32" if args.library == "numpy" or args.path == "widened" else "bf16"
        t_peak, f_peak = PeakGemm(args.library, dtype, 4096, 4096, 4096).run(2 * flops)  # right after it
        peak = f_peak / t_peak
        rate = 2 * flops / wall
        print(f"  {wall:.2f} s, {rate / 1e9:.0f} GFLOP/s of GEMM = {rate / peak:.0%} of the peak measured "
              f"right after it ({peak / 1e9:.0f} GFLOP/s, 4096^3, the same FLOP)")
        if not args.keep:
            shutil.rmtree(root / "e2e", ignore_errors=True)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
