"""Hashing throughput of kldtui.stages.verify.hash_files: serial vs parallel, files in page cache.

    .venv/bin/python benchmarks/verify_bench.py [--files 8] [--mib 256] [--workers 1 2 4]

Writes ``--files`` random files of ``--mib`` MiB in a temporary folder, reads them once to put
them in the page cache, then hashes them with each worker count and prints GB/s and the ratio to
the first worker count's, between the CPU and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from measure import cpu_summary, loadavg  # benchmarks/measure.py

from kldtui.stages.verify import hash_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kldtui-verify-bench-") as tmp:
        paths = []
        block = os.urandom(1 << 20)
        for i in range(args.files):
            p = Path(tmp) / f"f{i:03d}.bin"
            with open(p, "wb") as fh:
                for _ in range(args.mib):
                    fh.write(block)
            paths.append(p)
        total = sum(p.stat().st_size for p in paths)
        hash_files(paths, workers=max(args.workers))  # warm the page cache
        baseline = None
        print(f"{args.files} files x {args.mib} MiB = {total / 1e9:.2f} GB")
        print(f"CPU: {cpu_summary()}")
        print(f"load average before: {loadavg()}")
        for workers in args.workers:
            start = time.perf_counter()
            hash_files(paths, workers=workers)
            elapsed = time.perf_counter() - start
            gbps = total / elapsed / 1e9
            baseline = baseline or gbps
            print(f"workers={workers}: {elapsed:.2f} s, {gbps:.2f} GB/s "
                  f"({gbps / baseline:.2f}x workers={args.workers[0]})")
        print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
