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
   statistics) of a bf16 candidate chunk against device reference rows, checked like step 2;
6. stage a bf16 chunk with a padded vocabulary as the hook does, under torch's sync check at
   "error" (and vLLM's ``VLLM_GPU_SYNC_CHECK=error`` where vLLM imports), overwrite the source with
   NaN right after staging (vLLM reuses the buffer), and check the file still holds the staged
   values bit for bit (on the CPU the overwrite is skipped: CPU rows are handed over uncopied);
7. score one chunk as score mode does (reference rows on the host, the candidate's bf16 rows on
   the device): time per chunk, device memory peak and the fraction of rows on the precise path,
   on real reference rows with ``--reference SUITE/ref/logits_000.safetensors``;
8. the compare backend ``auto`` chooses now (vLLM servers found on this host included) and with a
   server of this run on every GPU (it must not take a GPU);
9. where a vLLM GPU build is present: a tiny model served with the V2 runner, prefix caching on
   and the capture hook, and two concurrent ``doctor --smoke`` requests of the same prompt.

Prints one line per step (``skip`` and why where a step cannot run here), a ``summary:`` JSON line
and a final ``gpu_check: OK`` (exit 0) or ``gpu_check: FAILED`` (exit 1). ``--device cpu`` runs
every step it can on the CPU (small sizes: the test suite does this).
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
from measure import cpu_summary, loadavg  # benchmarks/measure.py

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


# --------------------------------------------------------------------------- steps 6-9 (issue 21)
def step_staging(torch: Any, device: Any, x: Any, vocab: int, rows: int, pad: int,
                 out: Path) -> dict[str, Any]:
    """6. a bf16 chunk with a padded vocabulary staged as the hook stages it, under torch's sync
    check at "error" (and vLLM's, where vLLM is importable); the source overwritten with NaN right
    after staging; the file must hold exactly the staged values (only the first ``vocab`` columns)."""
    import threading

    from kldtui.formats.chunks import chunk_file_name, sanitize_request_id
    from kldtui.formats.safetensors_io import RowReader
    from kldtui.hook.writer import ChunkWriter

    src = torch.cat([x[:rows], x[:rows, :pad]], dim=1).to(torch.bfloat16)  # [rows, vocab + pad]
    want = src[:, :vocab].float().cpu().numpy()
    rid = "kldtui-gpu-check-staging"
    writer = ChunkWriter(max_pending=2)
    gate, errors = threading.Event(), list[BaseException]()

    def hold() -> None:
        gate.wait(60)

    writer.submit(hold, errors.append)  # the writer thread waits: staging alone runs
    checks = ["torch sync check 'error'"] if device.type == "cuda" else []
    vllm_region: Any = None
    if device.type == "cuda":
        try:
            from vllm.utils import gpu_sync_debug

            vllm_region = gpu_sync_debug._checked_region("error")  # vLLM's own policing, as in a step
            checks.append("vLLM VLLM_GPU_SYNC_CHECK=error")
        except Exception:  # noqa: BLE001 - no vLLM (GPU build) here: torch's check only
            vllm_region = None
    previous = torch.cuda.get_sync_debug_mode() if device.type == "cuda" else None
    try:
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        if vllm_region is not None:
            with vllm_region:
                staged = writer.stage(src, vocab)
        else:
            staged = writer.stage(src, vocab)
    finally:
        if previous is not None:
            torch.cuda.set_sync_debug_mode(previous)
    overwritten = staged.tensor is not src and device.type == "cuda"
    if overwritten:
        src.fill_(float("nan"))  # vLLM reuses the buffer after the call: the copy must be taken
    writer.submit_chunk(str(out), rid, 0, staged, vocab, errors.append)
    gate.set()
    writer.flush()
    path = out / sanitize_request_id(rid) / chunk_file_name(0, rows)
    ok = not errors and path.exists()
    if ok:
        with RowReader(path) as reader:
            ok = bool(np.array_equal(reader.read(0, rows), want))
    detail = (", ".join(checks) + "; " if checks else "") + (
        "source overwritten with NaN after staging" if overwritten
        else "NaN overwrite skipped: CPU rows are handed over as they are (vLLM does not reuse them)")
    if errors:
        detail += f"; error: {errors[0]}"
    if path.exists():
        path.unlink()
    return {"ok": ok, "rows": rows, "vocab": vocab, "padded_to": vocab + pad, "detail": detail}


def step_score_chunk(torch: Any, device: Any, x: Any, reference: str | None, rows: int) -> dict[str, Any]:
    """7. score mode on one chunk as the hook scores it (reference rows on the host, the candidate's
    bf16 rows on the device): time per chunk, device memory peak, precise-row fraction. With
    ``--reference FILE`` (a reference logits file, e.g. SUITE/ref/logits_000.safetensors) the rows are
    real and the candidate is them rounded to bf16; else the generated window's rows."""
    import resource

    from kldtui.metrics.score import score_rows
    from kldtui.scoring.session import precise_rows

    if reference:
        from kldtui.formats.safetensors_io import RowReader

        with RowReader(reference) as reader:
            rows = min(rows, reader.rows)
            ref = np.ascontiguousarray(reader.read(0, rows), dtype=np.float32)
        source = f"real rows of {reference}"
    else:
        rows = min(rows, int(x.shape[0]))
        ref = x[:rows].float().cpu().numpy()
        source = "generated rows (pass --reference SUITE/ref/logits_000.safetensors for real ones)"
    cand = torch.from_numpy(ref).to(device).to(torch.bfloat16)
    tokens = np.argmax(ref, axis=1).astype(np.int64)
    score_rows(ref[:2], cand[:2], tokens[:2])  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    records = score_rows(ref, cand, tokens)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
        memory = f"device memory peak {peak / 2**20:.0f} MiB above the resident"
    else:  # no device allocator here: the process's peak RSS (its whole life, earlier steps too)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        grew = peak - rss0 * 1024
        memory = (f"no device: process peak RSS {peak / 2**20:.0f} MiB"
                  + (f" (+{grew / 2**20:.0f} MiB in this step)" if grew > 0 else ""))
    precise = precise_rows(records)
    ok = bool(len(records) == rows and np.isfinite(records["kl"]).all())
    return {"ok": ok, "rows": rows, "seconds": seconds, "peak_bytes": int(peak), "precise_rows": precise,
            "precise_fraction": precise / rows if rows else 0.0, "source": source, "memory": memory}


def step_backend_choice() -> dict[str, Any]:
    """8. the compare backend kldtui would take now, and with a server of this run on every GPU
    (which it must leave alone)."""
    from kldtui.servers.registry import process_signs
    from kldtui.stages.compare.backends import Backend, Serving, _cuda_count, choose_backend, servers_found

    count = _cuda_count()
    signs = process_signs()
    here = servers_found(signs)
    now = choose_backend("auto", None, None, server_signs=signs)
    busy = choose_backend("auto", None, Serving(frozenset(range(count)) if count else None,
                                                 "a server on every GPU"), server_signs=signs)
    ok = busy.backend is not Backend.TORCH_CUDA
    found = here.what if here is not None else "no model server running on this host"
    return {"ok": ok, "gpus": count, "now": f"{now.label} ({now.reason})", "found": found,
            "with_server": f"{busy.label} ({busy.reason})"}


def step_vllm_serve(device: Any, out: Path, timeout: float) -> dict[str, Any]:
    """9. where a vLLM GPU build is present: a tiny model served with the V2 runner, prefix caching
    on and the hook active, and two concurrent smoke requests (the same prompt twice)."""
    import importlib.util
    import os
    import signal
    import socket
    import subprocess
    import threading

    if device.type != "cuda" or importlib.util.find_spec("vllm") is None:
        return {"ok": True, "skipped": "no vLLM GPU build here (needs vllm and --device cuda)"}
    try:
        from tests.tiny_llama import build_tiny_llama
    except Exception as exc:  # noqa: BLE001 - said in the line
        return {"ok": False, "detail": f"cannot build the tiny model ({type(exc).__name__}: {exc})"}
    from kldtui.workflow.smoke import run_smoke

    model = build_tiny_llama(out / "tiny-llama")
    capture = out / "vllm-capture"
    capture.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "VLLM_KLD_CAPTURE_DIR": str(capture), "VLLM_USE_V2_MODEL_RUNNER": "1",
           "VLLM_HOST_IP": "127.0.0.1", "VLLM_GPU_SYNC_CHECK": "error"}
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            "--skip-tokenizer-init", "--enable-prefix-caching", "--max-num-seqs", "2",
            "--max-num-batched-tokens", "512", "--max-model-len", "4096", "--gpu-memory-utilization", "0.3"]
    log = open(out / "vllm.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                return {"ok": False, "detail": f"vLLM exited with {proc.returncode}; see {out / 'vllm.log'}"}
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return {"ok": False, "detail": f"vLLM did not answer /health in {timeout:.0f} s"}
            time.sleep(1.0)
        results: list[Any] = [None, None]

        def one(i: int) -> None:
            try:
                results[i] = run_smoke(url, "tiny", capture, tokens=1500)
            except Exception as exc:  # noqa: BLE001 - reported in the line
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        ok = all(getattr(r, "ok", False) for r in results)
        lines = [("; ".join(r.lines) if hasattr(r, "lines") else str(r)) for r in results]
        return {"ok": ok, "detail": " | ".join(lines), "log": str(out / "vllm.log")}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - then harder
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run of every step)")
    ap.add_argument("--rows", type=int, default=2047)
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--check-rows", type=int, default=64, help="rows compared with the CPU kernel")
    ap.add_argument("--block", type=int, default=128, help="rows per device block (compare stage default)")
    ap.add_argument("--out", default=None, help="folder for the chunk written in step 4 (default: temporary)")
    ap.add_argument("--pad", type=int, default=64, help="padded vocabulary columns in step 6 (vLLM pads the "
                    "LM head to a multiple of 64)")
    ap.add_argument("--reference", default=None, help="a reference logits file (SUITE/ref/logits_000."
                    "safetensors): step 7 scores its real rows")
    ap.add_argument("--score-rows", type=int, default=256, help="rows of the chunk scored in step 7 "
                    "(--max-num-batched-tokens of the server)")
    ap.add_argument("--vllm-timeout", type=float, default=300.0, help="step 9: seconds for vLLM to start")
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
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}")
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
    fields: dict[str, Any] = {f: (v[:min(n, rows5)] if v is not None else None)
                              for f, v in vars(scored).items()}
    part = type(scored)(**fields)
    score_ok, detail5 = check_agreement(part, ref)
    ok_all &= score_ok
    results["score"] = {"ok": score_ok, "rows": rows5, "seconds": t, "detail": detail5,
                        "bytes_per_position": RECORD_DTYPE.itemsize,
                        "rows_per_s": rows5 / t if t > 0 else None}
    print(f"5 device scoring of a bf16 chunk [{rows5}, {args.vocab}]: {'ok' if score_ok else 'FAILED'} "
          f"({detail5}), {t:.3f} s, {rows5 / t if t > 0 else 0:.0f} rows/s, "
          f"{RECORD_DTYPE.itemsize} bytes per position written")

    # 6. staging as the hook stages (padded vocabulary, sync checks at "error", source overwritten)
    rows6 = min(256, args.rows)
    six = step_staging(torch, device, x, args.vocab, rows6, min(args.pad, args.vocab), out)
    ok_all &= six["ok"]
    results["staging"] = six
    print(f"6 bf16 chunk [{rows6}, {args.vocab} of {args.vocab + min(args.pad, args.vocab)}] staged: "
          f"{'ok' if six['ok'] else 'FAILED'} ({six['detail']})")

    # 7. score mode on one chunk: time, memory, precise rows
    seven = step_score_chunk(torch, device, x, args.reference, args.score_rows)
    ok_all &= seven["ok"]
    results["score_chunk"] = seven
    print(f"7 score mode, one chunk of {seven['rows']} rows: {'ok' if seven['ok'] else 'FAILED'}, "
          f"{seven['seconds']:.3f} s, {seven['memory']}, precise path {seven['precise_rows']} rows "
          f"({100 * seven['precise_fraction']:.1f}%), {seven['source']}")

    # 8. the compare backend while a server runs
    eight = step_backend_choice()
    ok_all &= eight["ok"]
    results["backend_choice"] = eight
    print(f"8 compare backend: {'ok' if eight['ok'] else 'FAILED'}: now {eight['now']}; "
          f"{eight['found']}; with a server on every GPU: {eight['with_server']}")

    # 9. a vLLM GPU build, where present
    nine = step_vllm_serve(device, out, args.vllm_timeout)
    ok_all &= nine["ok"]
    results["vllm"] = nine
    if "skipped" in nine:
        print(f"9 vLLM V2 runner, prefix caching, two concurrent smoke requests: skip ({nine['skipped']})")
    else:
        print(f"9 vLLM V2 runner, prefix caching, two concurrent smoke requests: "
              f"{'ok' if nine['ok'] else 'FAILED'} ({nine.get('detail', '')})")

    print(f"load average after: {loadavg()}")
    print("summary: " + json.dumps(results, sort_keys=True, default=str))
    print("gpu_check: OK" if ok_all else "gpu_check: FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
