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
from pathlib import Path

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


def best_seconds(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def peak_torch(rows: int, threads: int, dtype: str) -> tuple[float, str]:
    import torch

    torch.set_num_threads(threads)
    results = []
    with torch.inference_mode():
        for label, (m, k, n) in (("replay shape", (rows, HIDDEN, rp.DEFAULT_CHUNK)), ("square", (4096, 4096,
                                                                                                 4096))):
            kind = torch.bfloat16 if dtype == "bf16" else torch.float32
            a = torch.randn(m, k).to(kind)
            b = torch.randn(n, k).to(kind)
            torch.nn.functional.linear(a, b)
            t = best_seconds(lambda a=a, b=b: torch.nn.functional.linear(a, b), 5)
            results.append((2 * m * k * n / t, f"{label} [{m}x{k}]x[{k}x{n}] {dtype}"))
    for flops, label in results:
        print(f"  GEMM {label}: {flops / 1e9:.1f} GFLOP/s")
    return max(results)


def peak_numpy(rows: int) -> tuple[float, str]:
    results = []
    for label, (m, k, n) in (("replay shape", (rows, HIDDEN, rp.DEFAULT_CHUNK)), ("square", (4096, 4096,
                                                                                             4096))):
        a = np.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
        b = np.random.default_rng(1).standard_normal((n, k), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        np.matmul(a, b.T, out=out)
        t = best_seconds(lambda a=a, b=b, out=out: np.matmul(a, b.T, out=out), 3)
        results.append((2 * m * k * n / t, f"{label} [{m}x{k}]x[{k}x{n}] f32 (NumPy BLAS)"))
    for flops, label in results:
        print(f"  GEMM {label}: {flops / 1e9:.1f} GFLOP/s")
    return max(results)


def random_head(seed: int) -> np.ndarray:
    """A BF16 head [163840, 7168] (2.35 GB): 8,192 random rows repeated (the GEMM's speed does not
    depend on the values; generating 1.2 billion normal numbers would take longer than the run)."""
    rng = np.random.default_rng(seed)
    block = rp.f32_to_bf16(rng.standard_normal((8192, HIDDEN), dtype=np.float32) * 0.02)
    return np.ascontiguousarray(np.tile(block, (VOCAB // 8192, 1)))


def replay_context(library: str, rows: int, threads: int, block: int) -> float:
    """Seconds to replay one context's rows in the engine's blocks (head in memory)."""
    rng = np.random.default_rng(3)
    head = random_head(4)
    hidden = rp.f32_to_bf16(rng.standard_normal((rows, HIDDEN), dtype=np.float32))
    out = np.empty((block, VOCAB), np.float32)
    if library == "torch":
        import torch

        torch.set_num_threads(threads)
        replay = rp.TorchReplay(rp.torch_bf16(head))
        t_out = torch.from_numpy(out)

        def run() -> None:
            for s in range(0, rows, block):
                h = rp.torch_bf16(hidden[s:s + block])
                replay.logits(h, out=t_out[:h.shape[0]])
    else:
        replay_np = rp.NumpyReplay(head)

        def run() -> None:
            for s in range(0, rows, block):
                replay_np.logits(hidden[s:s + block], out=out[:min(block, rows - s)])
    run_first_rows = min(rows, block)
    t0 = time.perf_counter()
    if library == "torch":
        replay.logits(rp.torch_bf16(hidden[:run_first_rows]), out=t_out[:run_first_rows])  # warm-up
    print(f"  warm-up block: {time.perf_counter() - t0:.2f} s")
    return best_seconds(run, 2)


def error_vs_float64(library: str, rows: int = 32) -> None:
    """The replay's error against the float64 replay at the Kimi K3 width, for two kinds of rows:
    "flat" (logits ~ N(0, 2.5^2): a top probability of a few percent) and "peaked" (one token per
    row raised by about 20: a high top probability, as at most positions of a language model)."""
    from kldtui.metrics.kernels import NumpyRowKernel

    rng = np.random.default_rng(9)
    head = np.empty((VOCAB, HIDDEN), np.uint16)
    for s in range(0, VOCAB, 8192):  # in blocks: 2.35 GB in all, never 4.7 GB of float32
        head[s:s + 8192] = rp.f32_to_bf16(rng.standard_normal((min(8192, VOCAB - s), HIDDEN),
                                                              dtype=np.float32)
                                          * np.float32(2.5 / np.sqrt(HIDDEN)))
    kernel = NumpyRowKernel(VOCAB)
    for label, boost in (("flat", 0.0), ("peaked", 20.0)):
        h = rng.standard_normal((rows, HIDDEN), dtype=np.float32)
        if boost:
            top = rng.integers(0, VOCAB, rows)
            h += rp.bf16_to_f32(head[top]) * (boost / 2.5 ** 2)  # raises logit[top] by about `boost`
        hb = rp.f32_to_bf16(h)
        exact = rp.replay_float64(hb, head, chunk=8192)
        correct = rp.bf16_to_f32(rp.f32_to_bf16(exact.astype(np.float32)))
        if library == "torch":
            f32 = rp.TorchReplay(rp.torch_bf16(head), output="f32").logits(rp.torch_bf16(hb)).numpy()
            b16 = rp.TorchReplay(rp.torch_bf16(head)).logits(rp.torch_bf16(hb)).numpy()
        else:
            f32 = rp.NumpyReplay(head, output="f32").logits(hb)
            b16 = rp.NumpyReplay(head).logits(hb)
        tokens = np.zeros(rows, np.int64)
        kl_round = kernel.block(correct, b16, tokens).kl
        kl_exact = kernel.block(exact.astype(np.float32), b16, tokens).kl
        p_top = float(np.mean(kernel.block(correct, correct, tokens).ref_top_prob))
        print(f"  {label} rows (mean top probability {p_top:.2f}), {rows} rows x {VOCAB}:")
        print(f"    FP32 sums: max |logit - float64| {np.abs(f32 - exact).max():.2e}")
        print(f"    BF16 output: {np.mean(b16 != correct):.2e} of the logits differ from the correctly "
              "rounded "
              f"float64 value; KL(rounded float64 || replay) mean {kl_round.mean():.2e} "
              f"max {kl_round.max():.2e}")
        print(f"    (the BF16 rounding itself, KL(unrounded float64 || replay): mean {kl_exact.mean():.2e} "
              "max "
              f"{kl_exact.max():.2e}: the model's own head rounds the same way)")


def end_to_end(root: Path, rows: int, threads: int) -> float:
    """``kldtui compare`` of one context, both sides replayed with one head: seconds."""
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
        t0 = time.perf_counter()
        result = engine.compare_window(inputs, inputs.windows[0])
        elapsed = time.perf_counter() - t0
        print(f"  engine: {engine.backend} kernel, {engine.threads} threads, {engine.replay_rows}-row replay "
              f"blocks, {engine.replays.library()} GEMM; mean KL {result.kl_mean:.3g} (the same states and "
              "head: 0)")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=CONTEXT - 1, help="scored rows per context (default 2047)")
    ap.add_argument("--threads", type=int, default=None, help="GEMM threads (default: every core)")
    ap.add_argument("--library", choices=("torch", "numpy"), default="torch")
    ap.add_argument("--block", type=int, default=256, help="rows replayed at once (the engine's CPU default)")
    ap.add_argument("--end-to-end", action="store_true", help="also compare one context through the engine")
    ap.add_argument("--dir", default="/tmp/kldtui-hidden-bench")
    ap.add_argument("--keep", action="store_true", help="keep the end-to-end files (2.4 GB) for the next run")
    args = ap.parse_args(argv)
    import os

    threads = args.threads or os.cpu_count() or 1
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}")
    print(f"memory: about {3 if not args.end_to_end else 4} GB (head 2.35 GB, replay blocks, GEMM chunks); "
          f"disk: {'2.4 GB under ' + str(root) if args.end_to_end else 'a 29 MB file, removed'}")
    sizes(root, args.rows)
    print(f"GEMM peak ({args.library}, {threads} threads):")
    peak, label = peak_torch(args.block, threads,
                             "bf16") if args.library == "torch" else peak_numpy(args.block)
    flops = 2 * args.rows * VOCAB * HIDDEN
    print(f"replay of one context ({args.rows} x {VOCAB} logits from [{args.rows}, {HIDDEN}] x [{HIDDEN}, "
          f"{VOCAB}], "
          f"{args.block}-row blocks, {rp.DEFAULT_CHUNK}-row head chunks, {args.library}):")
    t = replay_context(args.library, args.rows, threads, args.block)
    print(f"  {t:.2f} s, {flops / t / 1e9:.1f} GFLOP/s = {flops / t / peak:.0%} of the peak "
          f"({peak / 1e9:.1f} GFLOP/s, {label})")
    print(f"error against the float64 replay ({args.library}):")
    error_vs_float64(args.library)
    if args.end_to_end:
        print("compare of one context, both sides replayed (2 GEMMs) + the KL kernel:")
        t2 = end_to_end(root, args.rows, threads)
        print(f"  {t2:.2f} s, {2 * flops / t2 / 1e9:.1f} GFLOP/s of GEMM = {2 * flops / t2 / peak:.0%} of "
              "the peak")
        if not args.keep:
            shutil.rmtree(root / "e2e", ignore_errors=True)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
