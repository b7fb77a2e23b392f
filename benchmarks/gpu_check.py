"""GPU readiness check for a machine with torch + CUDA but no vLLM and no network.

Run through ``scripts/gpu_check.sh`` (it sets the path and a time limit).  Steps, each timed:

1. generate a full-vocabulary window on the device (``--rows`` x ``--vocab`` float32 logits:
   realistic peaked rows, a perturbed candidate, a few rows with masked (-inf) tokens);
2. compare ``--check-rows`` of it with the CUDA compare backend (``TorchBlockKernel``) and with
   the CPU kernel (the compiled C kernel, NumPy without a compiler) and check they agree with the
   accuracy guarantee (per-row KL, reverse KL and JS within 1e-6 relative where KL >= 1e-8;
   argmax, rank, infinite-KL rows identical);
3. time the device backend over the whole window (host arrays in, as the compare stage does);
4. write a bf16 device tensor through the capture hook's chunk writer and check the file holds
   exactly the bf16 values widened to float32;
5. time device scoring (:func:`kldtui.metrics.score.score_block`, score mode's per-row
   statistics) of a bf16 candidate chunk against device reference rows, checked like step 2.

Prints one line per step and a final ``gpu_check: OK`` (exit 0) or ``gpu_check: FAILED`` (exit 1).
``--device cpu`` runs the same steps on the CPU (small sizes: the test suite does this).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TOL = 1e-6  # relative, where KL >= KL_FLOOR (docs/REPORT.md)
KL_FLOOR = 1e-8


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_window(torch: Any, device: Any, rows: int, vocab: int, seed: int = 7) -> tuple[Any, Any, Any]:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g, device=device) * 2.5
    top = torch.randint(0, vocab, (rows,), generator=g, device=device)
    x[torch.arange(rows, device=device), top] += torch.rand(rows, generator=g, device=device) * 19 + 3
    scale = torch.rand(rows, 1, generator=g, device=device) * 0.3 + 1e-4
    y = x + torch.randn(rows, vocab, generator=g, device=device) * scale
    cols = torch.arange(0, vocab, 97, device=device)
    if rows > 2:  # the same mask on both sides, and a token only the candidate masks
        x[1, cols] = -torch.inf
        y[1, cols] = -torch.inf
        y[2, int(top[2])] = -torch.inf
    nxt = torch.randint(0, vocab, (rows,), generator=g, device=device)
    return x.float(), y.float(), nxt


def check_agreement(dev_stats: Any, cpu_stats: Any) -> tuple[bool, str]:
    from kldtui.metrics.kernels import FIELDS, INT_FIELDS

    worst = 0.0
    for f in FIELDS:
        a, b = getattr(dev_stats, f), getattr(cpu_stats, f)
        if a is None or b is None:
            if (a is None) != (b is None):
                return False, f"{f}: present on one side only"
            continue
        if f in INT_FIELDS:
            if not np.array_equal(a, b):
                return False, f"{f}: differs at rows {np.flatnonzero(a != b)[:5].tolist()}"
            continue
        same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
        if not np.array_equal(np.isinf(a), np.isinf(b)):
            return False, f"{f}: infinite on one side only"
        ok = ~same_inf
        if f in ("kl", "kl_reverse", "js"):
            ok &= cpu_stats.kl >= KL_FLOOR
        # next-token log-probabilities: absolute (score mode's contract, docs/SCORE_MODE.md: the
        # C kernel's float32 path holds its normalisers to ~1e-7 relative); the rest relative
        absolute = f in ("logp_ref_next", "logp_cand_next")
        err = np.abs(a[ok] - b[ok])
        if not absolute:
            err = err / np.maximum(np.abs(b[ok]), 1e-300)
        if err.size and err.max() > TOL:
            kind = "absolute" if absolute else "relative"
            return False, f"{f}: {kind} error {err.max():.2e} > {TOL:g}"
        worst = max(worst, float(err.max()) if err.size else 0.0)
    return True, f"largest relative difference {worst:.2e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run of every step)")
    ap.add_argument("--rows", type=int, default=2047)
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--check-rows", type=int, default=64, help="rows compared with the CPU kernel")
    ap.add_argument("--block", type=int, default=128, help="rows per device block (compare stage default)")
    ap.add_argument("--out", default=None, help="folder for the chunk written in step 4 (default: temporary)")
    args = ap.parse_args(argv)

    import torch

    from kldtui.metrics import ckernel
    from kldtui.metrics.kernels import NumpyRowKernel, TorchBlockKernel

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: FAILED: torch sees no CUDA device (use --device cpu for a dry run)")
        return 1
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; window {args.rows} x {args.vocab}")
    results: dict[str, Any] = {"device": name, "rows": args.rows, "vocab": args.vocab}
    ok_all = True

    # 1. a window on the device
    t0 = time.perf_counter()
    x, y, nxt = make_window(torch, device, args.rows, args.vocab)
    _sync(torch, device)
    results["generate_s"] = time.perf_counter() - t0
    x_np, y_np, nxt_np = x.cpu().numpy(), y.cpu().numpy(), nxt.cpu().numpy()
    print(f"1 generate: {results['generate_s']:.3f} s")

    # 2. device backend against the CPU kernel
    n = min(args.check_rows, args.rows)
    dev_kernel = TorchBlockKernel(args.vocab, str(device))
    cpu_kernel = ckernel.CRowKernel(args.vocab) if ckernel.available() else NumpyRowKernel(args.vocab)
    got = dev_kernel.block(x_np[:n], y_np[:n], nxt_np[:n], reverse=True)
    want = cpu_kernel.block(x_np[:n], y_np[:n], nxt_np[:n], reverse=True)
    agree, detail = check_agreement(got, want)
    ok_all &= agree
    results["agreement"] = {"ok": agree, "rows": n, "cpu_kernel": cpu_kernel.name, "detail": detail,
                            "infinite_kl_rows": got.infinite_kl_rows().tolist()}
    print(f"2 {dev_kernel.name} vs {cpu_kernel.name} on {n} rows: {'ok' if agree else 'FAILED'} ({detail})")

    # 3. device backend over the whole window
    t0 = time.perf_counter()
    for s in range(0, args.rows, args.block):
        e = min(s + args.block, args.rows)
        dev_kernel.block(x_np[s:e], y_np[s:e], nxt_np[s:e], reverse=False)
    _sync(torch, device)
    t = time.perf_counter() - t0
    nbytes = 2 * args.rows * args.vocab * 4
    results["compare_s"] = t
    results["compare_gb_per_s"] = nbytes / t / 1e9
    print(f"3 compare {nbytes / 1e9:.2f} GB on {dev_kernel.name}: {t:.3f} s, {nbytes / t / 1e9:.2f} GB/s")

    # 4. a bf16 device tensor through the capture hook's chunk writer
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kldtui-gpu-check-"))
    rows4 = min(256, args.rows)
    bf = x[:rows4].to(torch.bfloat16)
    t0 = time.perf_counter()
    from kldtui.hook import vllm_plugin

    queued = vllm_plugin.save_chunk("kldtui-gpu-check-0", 0, bf, args.vocab, directory=str(out))
    vllm_plugin.flush()
    t = time.perf_counter() - t0
    from kldtui.formats.chunks import chunk_file_name, sanitize_request_id
    from kldtui.formats.safetensors_io import RowReader

    path = out / sanitize_request_id("kldtui-gpu-check-0") / chunk_file_name(0, rows4)
    chunk_ok = bool(queued) and path.exists()
    if chunk_ok:
        with RowReader(path) as r:
            back = r.read(0, rows4)
        chunk_ok = bool(np.array_equal(back, bf.float().cpu().numpy()))
    ok_all &= chunk_ok
    size = path.stat().st_size if path.exists() else 0
    results["chunk"] = {"ok": chunk_ok, "rows": rows4, "seconds": t, "bytes": size, "path": str(path)}
    print(f"4 bf16 chunk [{rows4}, {args.vocab}] -> {path.name}: {'ok' if chunk_ok else 'FAILED'}, "
          f"{t:.3f} s, {size / t / 1e9 if t > 0 else 0:.2f} GB/s")
    if not args.out and path.exists():
        path.unlink()

    # 5. device scoring (score mode's per-row statistics): a bf16 candidate chunk, as the hook
    # receives it, against float32 reference rows already on the device
    from kldtui.metrics.score import RECORD_DTYPE, score_block

    rows5 = min(args.block, args.rows)
    cand = y[:rows5].to(torch.bfloat16)
    score_block(x[:2], cand[:2], nxt[:2], reverse=True)  # warm-up (kernels, allocator)
    _sync(torch, device)
    t0 = time.perf_counter()
    scored = score_block(x[:rows5], cand, nxt[:rows5], reverse=True)
    _sync(torch, device)
    t = time.perf_counter() - t0
    ref = cpu_kernel.block(x_np[:min(n, rows5)], cand[:min(n, rows5)].float().cpu().numpy(),
                           nxt_np[:min(n, rows5)], reverse=True)
    part = type(scored)(**{f: (v[:min(n, rows5)] if v is not None else None)
                           for f, v in vars(scored).items()})
    score_ok, detail5 = check_agreement(part, ref)
    ok_all &= score_ok
    results["score"] = {"ok": score_ok, "rows": rows5, "seconds": t, "detail": detail5,
                        "bytes_per_position": RECORD_DTYPE.itemsize,
                        "rows_per_s": rows5 / t if t > 0 else None}
    print(f"5 device scoring of a bf16 chunk [{rows5}, {args.vocab}]: {'ok' if score_ok else 'FAILED'} "
          f"({detail5}), {t:.3f} s, {rows5 / t if t > 0 else 0:.0f} rows/s, "
          f"{RECORD_DTYPE.itemsize} bytes per position written")

    print("summary: " + json.dumps(results, sort_keys=True, default=str))
    print("gpu_check: OK" if ok_all else "gpu_check: FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
