"""Finalize throughput against a plain copy of the same bytes.

Builds a synthetic capture run (windows of 2048 tokens in 256-row chunks written by the chunk
writer), then times, best of ``--repeat`` with a warm page cache:

* ``copy``: read every chunk's bytes and write them into one file per window, 16 MiB blocks, fsync
  (the same I/O finalize does, minus checking, hashing and headers);
* ``cp``: ``shutil.copyfile`` of every chunk file (kernel copy, no user-space pass over the data);
* ``read+sha256 only``: read and hash the bytes, write nothing: the floor for anything that must
  publish a SHA-256 of what it wrote (the manifest does);
* ``finalize --verify none|sample|full``: :func:`kldtui.stages.finalize.finalize_window`.

Run: ``.venv/bin/python benchmarks/finalize_bench.py [--vocab 32000] [--windows 2] [--dir DIR]``.
Prints each one's time, GB/s and percentage of ``copy``, after the CPU and the load average
before, and the load average after. The target is finalize (default verify "sample") at >= 70 % of
``copy``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from measure import cpu_summary, loadavg  # benchmarks/measure.py

from kldtui.capture_modes import Verify
from kldtui.capture_modes.logits import BLOCK_BYTES
from kldtui.formats.chunks import write_chunk
from kldtui.formats.suite_writer import write_suite
from kldtui.stages.finalize import finalize_window


def build(root: Path, windows: int, tokens: int, vocab: int) -> tuple:
    rng = np.random.default_rng(0)
    suite = write_suite(root / "suite", [("prose", rng.integers(0, vocab, tokens).tolist())
                                         for _ in range(windows)])
    run = root / "run"
    run.mkdir()
    block = rng.standard_normal((256, vocab)).astype(np.float32)
    for w in suite.windows:
        for start in range(0, tokens - 1, 256):
            end = min(start + 256, tokens - 1)
            write_chunk(root / "server", f"cmpl-w{w.index}", start, block[: end - start] + w.index, vocab)
        os.rename(root / "server" / f"cmpl-w{w.index}", run / w.chunk_dir_name)
    return suite, run


def plain_copy(run: Path, out: Path, suite) -> None:  # type: ignore[no-untyped-def]
    buf = bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    for w in suite.windows:
        folder = run / w.chunk_dir_name
        with open(out / f"copy_{w.index:03d}.bin", "wb") as dst:
            for name in sorted(os.listdir(folder)):
                with open(folder / name, "rb", buffering=0) as src:
                    while n := src.readinto(buf):
                        dst.write(view[:n])
            dst.flush()
            os.fsync(dst.fileno())


def hash_only(run: Path, out: Path, suite) -> None:  # type: ignore[no-untyped-def]
    """Read every chunk and SHA-256 it: the floor of any finalize that hashes its output."""
    import hashlib

    buf = bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    for w in suite.windows:
        digest = hashlib.sha256()
        folder = run / w.chunk_dir_name
        for name in sorted(os.listdir(folder)):
            with open(folder / name, "rb", buffering=0) as src:
                while n := src.readinto(buf):
                    digest.update(view[:n])
        digest.hexdigest()


def kernel_copy(run: Path, out: Path, suite) -> None:  # type: ignore[no-untyped-def]
    for w in suite.windows:
        folder = run / w.chunk_dir_name
        for name in sorted(os.listdir(folder)):
            shutil.copyfile(folder / name, out / f"{w.index}-{name}")


def finalize(run: Path, out: Path, suite, verify: Verify) -> None:  # type: ignore[no-untyped-def]
    for w in suite.windows:
        finalize_window(suite, w, run / w.chunk_dir_name, out, expected_vocab=None, verify=verify)


def timed(func, out: Path, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Best wall time and the CPU time (user + system, all threads) of that run."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        t0, c0 = time.perf_counter(), time.process_time()
        func(out)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = min(best, (wall, cpu))
    shutil.rmtree(out, ignore_errors=True)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kldtui-finalize-bench-", dir=args.dir))
    try:
        suite, run = build(root, args.windows, args.tokens, args.vocab)
        nbytes = sum(f.stat().st_size for f in run.rglob("*.safetensors"))
        out = root / "out"
        print(f"{args.windows} windows x {args.tokens - 1} rows x {args.vocab} vocab: "
              f"{nbytes / 1e9:.3f} GB of chunks, block {BLOCK_BYTES >> 20} MiB, best of {args.repeat}")
        print(f"CPU: {cpu_summary()}")
        print(f"load average before: {loadavg()}")
        timed(lambda o: plain_copy(run, o, suite), out, 1)  # warm the page cache
        results = {
            "copy (read+write+fsync)": timed(lambda o: plain_copy(run, o, suite), out, args.repeat),
            "cp (shutil.copyfile)": timed(lambda o: kernel_copy(run, o, suite), out, args.repeat),
            "read+sha256 only (floor)": timed(lambda o: hash_only(run, o, suite), out, args.repeat),
        }
        levels: tuple[Verify, ...] = ("none", "sample", "full")
        for verify in levels:
            results[f"finalize verify={verify}"] = timed(lambda o, v=verify: finalize(run, o, suite, v),
                                                         out, args.repeat)
        base = results["copy (read+write+fsync)"][0]
        for name, (seconds, cpu) in results.items():
            print(f"  {name:26s} {seconds:7.3f} s  {nbytes / seconds / 1e9:6.2f} GB/s  "
                  f"{base / seconds * 100:5.0f} % of copy  (CPU {cpu:6.3f} s)")
        print(f"load average after: {loadavg()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
