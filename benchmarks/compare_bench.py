"""Compare-stage benchmark: GB/s of logits compared (both sides counted), kldtui vs a naive baseline.

Builds (once, then reuses) a suite of 2 windows x [2047, 163840] float32 logits (5.37 GB) with
realistic peaked rows, reads every file once so both runs see it in the page cache, then times

* the naive baseline: float32 torch ``log_softmax`` over 8-row blocks (the original comparator's
  approach), computing KL, JS and top-1 agreement;
* kldtui's compare engine (the backend chosen by ``--backend``, default auto: the compiled C
  kernel on a machine without CUDA),
* and, unless ``--skip-numpy``, the pure-NumPy fallback (``--backend numpy``) too,

and prints GB/s for each, the ratios to the naive baseline, and the largest difference of the
window mean KL.  The machine is often shared: ``--repeat N`` times everything N times, interleaved,
and reports the best time of each (the naive baseline's torch threads suffer most from a loaded
machine); the load average is printed before and after, with the CPU model and its vector
features.  ``--thread-counts 1,2`` times kldtui's backend at each thread count (scaling).
``--marches native,x86-64-v3`` times the compiled kernel built with each ``-march`` side by side
(``KLDTUI_FASTKL_MARCH``; on an AVX-512 machine: the AVX-512 build and the AVX2 build AVX2-only CPUs
get), each in a child process of its own per repeat (a process loads one build), interleaved with
the baseline.  Each timing line names the kernel's ``-march``; the summary gives best and median.
The suite stays in ``--dir`` for the next run: remove it when done.

    .venv/bin/python benchmarks/compare_bench.py --repeat 3 [--thread-counts 1,2] [--dir /tmp/kldtui-bench]
        [--marches native,x86-64-v3] [--skip-naive] [--skip-numpy]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from measure import cpu_summary, loadavg  # benchmarks/measure.py

from kldtui.formats.logits_writer import LogitsFileWriter, write_logits_manifest
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import load_suite
from kldtui.formats.suite_writer import write_suite
from kldtui.servers.registry import process_signs
from kldtui.stages.compare import BackendRequest, CompareOptions, Engine, prepare
from kldtui.stages.compare.backends import Backend


def build(root: Path, windows: int, context: int, vocab: int, seed: int = 7) -> None:
    if (root / "candidate" / "manifest.json").exists():
        return
    print(f"building {windows} windows x [{context - 1}, {vocab}] in {root} ...", flush=True)
    rng = np.random.default_rng(seed)
    toks = [("prose", [int(t) for t in rng.integers(0, vocab, size=context)]) for _ in range(windows)]
    suite = write_suite(root, toks)
    written: dict[str, list[Any]] = {"ref": [], "candidate": []}
    for w, (_, ids) in zip(suite.windows, toks, strict=True):
        wr = LogitsFileWriter(root / "ref", w, vocab, context, force=True)
        wc = LogitsFileWriter(root / "candidate", w, vocab, context, force=True)
        nxt = np.asarray(ids[1:])
        for start in range(0, context - 1, 64):
            stop = min(start + 64, context - 1)
            n = stop - start
            x = rng.standard_normal((n, vocab), dtype=np.float32) * 2.5
            x[np.arange(n), nxt[start:stop]] += rng.uniform(4.0, 22.0, size=n).astype(np.float32)
            noise = rng.standard_normal((n, vocab), dtype=np.float32)
            noise *= rng.uniform(0.01, 0.3, size=(n, 1)).astype(np.float32)
            wr.write_rows(x)
            wc.write_rows(x + noise)
        written["ref"].append(wr.commit())
        written["candidate"].append(wc.commit())
    for folder, kind in (("ref", "reference"), ("candidate", "candidate")):
        write_logits_manifest(root / folder, suite, written[folder], kind=kind)


def warm(paths: list[Path]) -> float:
    t0 = time.perf_counter()
    buf = bytearray(64 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def naive(paths: list[tuple[Path, Path]], block: int = 8) -> tuple[float, list[float]]:
    """The original's approach: float32 torch log_softmax over 8-row blocks."""
    import torch

    t0 = time.perf_counter()
    means = []
    for ref, cand in paths:
        with RowReader(ref) as xr, RowReader(cand) as yr:
            total = 0.0
            for start in range(0, xr.rows, block):
                x = torch.from_numpy(xr.read(start, start + block))
                y = torch.from_numpy(yr.read(start, start + block))
                lp = torch.log_softmax(x, dim=-1)
                lq = torch.log_softmax(y, dim=-1)
                p, q = lp.exp(), lq.exp()
                kl = (p * (lp - lq)).sum(-1)
                lm = torch.log(0.5 * (p + q))
                js = 0.5 * (p * (lp - lm)).sum(-1) + 0.5 * (q * (lq - lm)).sum(-1)
                _ = (lp.argmax(-1) == lq.argmax(-1)).float().mean(), js.mean()
                total += float(kl.double().sum())
            means.append(total / xr.rows)
    return time.perf_counter() - t0, means


# one timing of kldtui: (label, wall seconds, CPU seconds of all threads, window mean KLs)
Timing = tuple[str, float, float, list[float]]


def kernel_build() -> str:
    """The ``-march`` the compiled kernel of this process was built with."""
    from kldtui.metrics import ckernel

    flags = ckernel.status().flags.split()
    return next((f for f in flags if f.startswith("-march=")), "no -march")


def time_kldtui(inputs: Any, backends: list[CompareOptions], nbytes: int, rep: int) -> list[Timing]:
    """Times kldtui's engine once per entry of ``backends``, in this process."""
    out: list[Timing] = []
    for opts in backends:
        with Engine(inputs.vocab_size, opts) as engine:
            t0, c0 = time.perf_counter(), time.process_time()
            results = [engine.compare_window(inputs, w) for w in inputs.windows]
            t_k, c_k = time.perf_counter() - t0, time.process_time() - c0
            name = f"{engine.backend}, {engine.threads} threads"
            if engine.backend is Backend.C:
                name += f", {kernel_build()}"
            print(f"[{rep}] kldtui ({name}, {engine.row_block}-row blocks): {t_k:.2f} s, "
                  f"{nbytes / t_k / 1e9:.2f} GB/s, {c_k:.2f} CPU s", flush=True)
        out.append((name, t_k, c_k, [r.kl_mean for r in results]))
    return out


def time_in_child(argv: list[str], march: str, rep: int) -> list[Timing]:
    """Times kldtui in a child process whose compiled kernel is built with ``-march=MARCH``."""
    env = dict(os.environ, KLDTUI_FASTKL_MARCH=march)
    proc = subprocess.run([sys.executable, __file__, *argv, "--child-rep", str(rep)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare_bench.py: the child for -march={march} failed: {proc.stderr.strip()[-2000:]}")
    lines = proc.stdout.strip().splitlines()
    print("\n".join(lines[:-1]), flush=True)
    return [(str(n), float(t), float(c), [float(k) for k in kl]) for n, t, c, kl in json.loads(lines[-1])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/kldtui-bench")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--thread-counts", default=None,
                    help="comma-separated thread counts to time kldtui's backend at (e.g. 1,2)")
    ap.add_argument("--row-block", type=int, default=None)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--skip-numpy", action="store_true", help="do not time the NumPy fallback")
    ap.add_argument("--repeat", type=int, default=1, help="time each N times (interleaved), keep the best")
    ap.add_argument("--marches", default=None,
                    help="comma-separated -march values to build the C kernel with and time side by side, "
                         "each in a child process (e.g. native,x86-64-v3)")
    ap.add_argument("--child-rep", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    root = Path(args.dir)
    build(root, args.windows, args.context, args.vocab)
    suite = load_suite(root)
    signs = process_signs()  # backend auto leaves the GPUs of the model servers on this host alone
    options = CompareOptions(backend=BackendRequest(args.backend, args.threads, server_signs=signs),
                             row_block=args.row_block)
    inputs = prepare(suite, root / "ref", root / "candidate", options)
    files = [(inputs.reference.file_path(w.index), inputs.candidate.file_path(w.index))
             for w in inputs.windows]
    nbytes = sum(a.stat().st_size + b.stat().st_size for a, b in files)
    backends = [options]
    if args.thread_counts:
        backends = [CompareOptions(backend=BackendRequest(args.backend, int(n), server_signs=signs),
                                   row_block=args.row_block)
                    for n in args.thread_counts.split(",")]
    chosen = BackendRequest(args.backend, server_signs=signs).choose().backend
    if chosen is Backend.C:
        kernel_build()  # built (first use) before any clock starts
    if args.child_rep is not None:  # a child of --marches: time the kernel build of this process
        print(json.dumps(time_kldtui(inputs, backends, nbytes, args.child_rep)))
        return 0
    t_read = warm([p for pair in files for p in pair])
    print(f"{nbytes / 1e9:.2f} GB of logits; reading them: {t_read:.2f} s ({nbytes / t_read / 1e9:.2f} GB/s)")
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}")
    marches = args.marches.split(",") if args.marches else []
    if marches and chosen is not Backend.C:
        sys.exit(f"compare_bench.py: --marches times the compiled kernel, but --backend {args.backend} "
                 f"runs {chosen} here")
    in_process = [] if marches else list(backends)
    if not args.skip_numpy and chosen is not Backend.NUMPY:
        in_process.append(CompareOptions(backend=BackendRequest("numpy", args.threads, server_signs=signs),
                                         row_block=args.row_block))
    child_argv = ["--dir", str(root), "--windows", str(args.windows), "--context", str(args.context),
                  "--vocab", str(args.vocab), "--backend", args.backend, "--skip-naive", "--skip-numpy"]
    for flag, value in (("--threads", args.threads), ("--thread-counts", args.thread_counts),
                        ("--row-block", args.row_block)):
        if value is not None:
            child_argv += [flag, str(value)]
    # per kldtui timing (the same order each repeat): its label, wall times, CPU times, window mean KLs
    names: dict[int, str] = {}
    walls: dict[int, list[float]] = {}
    cpus: dict[int, list[float]] = {}
    kls: dict[int, list[float]] = {}
    naive_walls, naive_cpus, naive_means = list[float](), list[float](), list[float]()
    for rep in range(1, max(1, args.repeat) + 1):
        timings = [t for m in marches for t in time_in_child(child_argv, m, rep)]
        timings += time_kldtui(inputs, in_process, nbytes, rep)
        for i, (name, t_k, c_k, kl) in enumerate(timings):
            names[i] = name
            walls.setdefault(i, []).append(t_k)
            cpus.setdefault(i, []).append(c_k)
            kls[i] = kl
        if not args.skip_naive:
            c0 = time.process_time()
            t, naive_means = naive(files)
            c = time.process_time() - c0
            print(f"[{rep}] naive float32 torch log_softmax, 8-row blocks: {t:.2f} s, "
                  f"{nbytes / t / 1e9:.2f} GB/s, {c:.2f} CPU s", flush=True)
            naive_walls.append(t)
            naive_cpus.append(c)
    print(f"load average after: {loadavg()}")
    n_rep = max(1, args.repeat)
    for i in sorted(names):
        t_k, med = min(walls[i]), statistics.median(walls[i])
        print(f"best of {n_rep} kldtui ({names[i]}): {t_k:.2f} s, {nbytes / t_k / 1e9:.2f} GB/s, "
              f"{min(cpus[i]):.2f} CPU s; median {med:.2f} s")
    if len(names) > 1:
        diff = max(abs(a - b) / b for i in names if i for a, b in zip(kls[i], kls[0], strict=True))
        print(f"largest relative difference of window mean KL, each kldtui timing vs {names[0]}: {diff:.2e}")
    if not args.skip_naive:
        t_n, med_n = min(naive_walls), statistics.median(naive_walls)
        print(f"best of {n_rep} naive float32 torch log_softmax, 8-row blocks (the original comparator's "
              f"approach, {torch_threads()} torch threads): {t_n:.2f} s, {nbytes / t_n / 1e9:.2f} GB/s, "
              f"{min(naive_cpus):.2f} CPU s; median {med_n:.2f} s")
        for i in sorted(names):
            print(f"ratio to the original comparator, kldtui ({names[i]}): {t_n / min(walls[i]):.2f}x wall "
                  f"time (best to best), {min(naive_cpus) / min(cpus[i]):.2f}x CPU time, "
                  f"{med_n / statistics.median(walls[i]):.2f}x median to median")
        diff = max(abs(a - r) / r for a, r in zip(naive_means, kls[0], strict=True))
        print(f"largest relative difference of window mean KL, naive vs kldtui: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
